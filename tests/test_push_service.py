"""The fake push service (tests/push_service.py) against pywebpush itself, without Taskboard:
what pywebpush sends must round-trip, and what a real push service refuses must be refused."""

import base64
import http.client
import json
import os
import ssl
import subprocess
import sys
import time

import gevent
import pytest
import requests
from push_service import PushService, b64url, public_point
from py_vapid import Vapid, Vapid01
from py_vapid.jwt import sign
from pywebpush import WebPusher, WebPushException, webpush

OWNER = "mailto:owner@example.com"


def vapid_key(cls=Vapid):
    key = cls()
    key.generate_keys()
    return key


def public_key(vapid):
    """The VAPID public key as the board hands it to PushManager.subscribe()."""
    return b64url(public_point(vapid.public_key))


def unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def push(sub, payload, vapid, **kwargs):
    """webpush() as the board would call it; the response."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return webpush(sub.as_json(), data, vapid_private_key=vapid,
                   vapid_claims={"sub": OWNER}, **kwargs)


def refused(sub, payload, vapid, **kwargs):
    """push() that the service refuses; the WebPushException."""
    with pytest.raises(WebPushException) as caught:
        push(sub, payload, vapid, **kwargs)
    return caught.value


def token(vapid, claims, k=None):
    """An Authorization header with a JWT of exactly `claims`, signed by `vapid`."""
    return f"vapid t={sign(claims, vapid.private_key)}, k={k or public_key(vapid)}"


def post_raw(service, sub, body, headers):
    """POST a body with exactly these headers (no help from pywebpush); the response."""
    return requests.post(sub.endpoint, data=body, headers=headers, verify=service.ca_file)


def encrypted(sub, plaintext=b'{"kind": "test"}'):
    return WebPusher(sub.as_json()).encode(plaintext, "aes128gcm")["body"]


def good_headers(service, vapid, **extra):
    claims = {"aud": service.url, "exp": int(time.time()) + 3600, "sub": OWNER}
    return {"Authorization": token(vapid, claims), "TTL": "60",
            "Content-Encoding": "aes128gcm"} | extra


def test_a_subscription_is_what_a_browser_gives(push_service):
    a, b = push_service.subscribe(name="phone"), push_service.subscribe(name="laptop")
    info = a.as_json()
    assert set(info) == {"endpoint", "keys"} and set(info["keys"]) == {"p256dh", "auth"}
    assert info["endpoint"].startswith(f"https://127.0.0.1:{push_service.port}/push/")
    assert info["endpoint"] != b.as_json()["endpoint"]
    for value in info["keys"].values():
        assert "=" not in value and "+" not in value and "/" not in value
    p256dh, auth = unb64(info["keys"]["p256dh"]), unb64(info["keys"]["auth"])
    assert len(p256dh) == 65 and p256dh[0] == 4
    assert len(auth) == 16
    assert info["keys"] != b.as_json()["keys"]


def test_a_push_decrypts_to_what_was_sent_and_its_vapid_verifies(push_service):
    vapid = vapid_key()
    sub = push_service.subscribe(name="phone")
    payload = {"kind": "approval", "title": "Shop · SHOP-7", "approvalId": 12, "needsYou": 3}
    before = time.monotonic()
    response = push(sub, payload, vapid, ttl=60,
                    headers={"Urgency": "high", "Topic": "approval-12"})
    assert response.status_code == 201
    assert response.headers["Location"].startswith(push_service.url + "/message/")
    (delivery,) = sub.wait_deliveries(1)
    assert delivery.payload == payload
    assert delivery.vapid_ok and delivery.problems == []
    assert delivery.vapid_key == public_key(vapid)
    assert delivery.vapid_claims["aud"] == push_service.url
    assert delivery.vapid_claims["sub"] == OWNER
    assert delivery.headers["content-encoding"] == "aes128gcm"
    assert (delivery.ttl, delivery.urgency, delivery.topic) == (60, "high", "approval-12")
    assert delivery.status == 201 and delivery.name == "phone" and delivery.sub_id == sub.id
    assert before <= delivery.received <= time.monotonic()
    assert push_service.deliveries == [delivery]


def test_a_subscription_made_with_a_key_refuses_pushes_signed_by_another(push_service):
    board, stranger = vapid_key(), vapid_key()
    sub = push_service.subscribe(application_server_key=public_key(board))
    assert refused(sub, {"kind": "test"}, stranger).status_code == 403
    assert push(sub, {"kind": "test"}, board).status_code == 201
    wrong, right = sub.deliveries
    assert not wrong.vapid_ok and wrong.vapid_key == public_key(stranger)
    assert "applicationServerKey" in wrong.problems[0]
    assert right.vapid_ok and right.payload == {"kind": "test"}


def test_a_token_signed_by_another_key_than_k_is_refused(push_service):
    board, forger = vapid_key(), vapid_key()
    sub = push_service.subscribe()
    claims = {"aud": push_service.url, "exp": int(time.time()) + 3600, "sub": OWNER}
    forged = token(forger, claims, k=public_key(board))
    response = post_raw(push_service, sub, encrypted(sub),
                        good_headers(push_service, board, Authorization=forged))
    assert response.status_code == 401
    (delivery,) = sub.deliveries
    assert not delivery.vapid_ok and delivery.status == 401
    assert "signature does not verify" in delivery.problems[0]
    assert delivery.payload == {"kind": "test"}  # the body itself was fine


@pytest.mark.parametrize("change, problem", [
    ({"exp": -60}, "has passed"),
    ({"exp": 25 * 3600}, "more than 24 h ahead"),
    ({"aud": "https://127.0.0.1:1"}, "not the endpoint's origin"),
    ({"aud": None}, "not the endpoint's origin"),
    ({"sub": None}, "sub is None"),
    ({"sub": "owner@example.com"}, "not a mailto: or https: URI"),
])
def test_bad_vapid_claims_are_refused(push_service, change, problem):
    vapid = vapid_key()
    sub = push_service.subscribe()
    claims = {"aud": push_service.url, "exp": int(time.time()) + 3600, "sub": OWNER}
    for name, value in change.items():
        if value is None:
            del claims[name]
        else:
            claims[name] = int(time.time()) + value if name == "exp" else value
    headers = good_headers(push_service, vapid, Authorization=token(vapid, claims))
    assert post_raw(push_service, sub, encrypted(sub), headers).status_code == 401
    (delivery,) = sub.deliveries
    assert not delivery.vapid_ok and problem in delivery.problems[0], delivery.problems


def test_a_push_without_rfc_8292_vapid_is_refused(push_service):
    sub = push_service.subscribe()
    legacy = refused(sub, {"kind": "test"}, vapid_key(Vapid01))  # "WebPush <jwt>" + Crypto-Key
    assert legacy.status_code == 401
    with pytest.raises(WebPushException) as none:
        webpush(sub.as_json(), "{}")  # no VAPID at all
    assert none.value.status_code == 401
    assert [d.problems[0] for d in sub.deliveries] == [
        "vapid: Authorization scheme is 'WebPush', not 'vapid' (RFC 8292)",
        "vapid: no Authorization header"]


def test_a_tampered_body_is_detected(push_service):
    vapid = vapid_key()
    sub, other = push_service.subscribe(), push_service.subscribe()
    body = bytearray(encrypted(sub))
    body[-1] ^= 1
    for sent in (bytes(body), encrypted(other)):  # flipped bit; encrypted for someone else
        assert post_raw(push_service, sub, sent, good_headers(push_service, vapid)).status_code \
            == 400
    for delivery in sub.deliveries:
        assert delivery.vapid_ok and delivery.payload is None and delivery.plaintext is None
        assert delivery.problems[0].startswith("body does not decrypt")


@pytest.mark.parametrize("change, status, problem", [
    ({"TTL": None}, 400, "TTL header is None"),
    ({"TTL": "soon"}, 400, "TTL header is 'soon'"),
    ({"Content-Encoding": "aesgcm"}, 400, "Content-Encoding is 'aesgcm'"),
    ({"Urgency": "urgent"}, 400, "Urgency 'urgent'"),
    ({"Topic": "approval 12"}, 400, "Topic 'approval 12'"),
    ({"Topic": "t" * 33}, 400, "Topic"),
])
def test_bad_push_headers_are_refused(push_service, change, status, problem):
    vapid = vapid_key()
    sub = push_service.subscribe()
    headers = {k: v for k, v in (good_headers(push_service, vapid) | change).items()
               if v is not None}
    assert post_raw(push_service, sub, encrypted(sub), headers).status_code == status
    assert sub.deliveries[0].problems[0].startswith(problem), sub.deliveries[0].problems


def test_a_body_over_4096_bytes_is_refused(push_service):
    vapid = vapid_key()
    sub = push_service.subscribe()
    assert push(sub, "x" * 3993, vapid).status_code == 201  # RFC 8291 §4: the most that fits
    assert refused(sub, "x" * 3994, vapid).status_code == 413
    assert [len(d.body) for d in sub.deliveries] == [4096, 4097]


def test_a_lenient_service_records_problems_and_answers_as_scripted():
    vapid = vapid_key()
    with PushService(strict=False) as service:
        sub = service.subscribe()
        headers = good_headers(service, vapid, Authorization="vapid t=x.y.z, k=nope")
        assert post_raw(service, sub, b"garbage", headers).status_code == 201
        (delivery,) = sub.deliveries
        assert not delivery.vapid_ok and delivery.refusal == 401 and delivery.status == 201
        assert [p.split(":")[0] for p in delivery.problems] == ["vapid", "body does not decrypt"]


def test_scripted_answers_come_back_to_the_caller(push_service):
    vapid = vapid_key()
    sub = push_service.subscribe().answers([500, (429, {"Retry-After": "7"}), 201])
    assert refused(sub, {"n": 1}, vapid).status_code == 500
    busy = refused(sub, {"n": 2}, vapid)
    assert busy.status_code == 429 and busy.retry_after == "7"
    assert push(sub, {"n": 3}, vapid).status_code == 201
    assert push(sub, {"n": 4}, vapid).status_code == 201  # the queue is used up: the default
    sub.answer(410)
    assert [refused(sub, {"n": n}, vapid).status_code for n in (5, 6)] == [410, 410]
    assert [(d.payload["n"], d.status) for d in sub.deliveries] == [
        (1, 500), (2, 429), (3, 201), (4, 201), (5, 410), (6, 410)]


def test_tls_needs_the_services_ca(push_service, monkeypatch):
    sub = push_service.subscribe()
    for name in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(requests.exceptions.SSLError):
        push(sub, {"kind": "test"}, vapid_key())
    push_service.wait_for(lambda: push_service.tls_failures, message="a refused handshake")
    assert sub.deliveries == []

    monkeypatch.setenv("SSL_CERT_FILE", push_service.ca_file)  # what the stdlib trusts
    connection = http.client.HTTPSConnection("localhost", push_service.port,
                                             context=ssl.create_default_context())
    connection.request("GET", "/")
    assert connection.getresponse().status == 404
    connection.close()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", push_service.ca_file)  # what requests trusts
    assert push(sub, {"kind": "test"}, vapid_key()).status_code == 201


def test_a_hanging_endpoint_holds_its_push_and_slows_no_other(push_service):
    vapid = vapid_key()
    stuck, fine = push_service.subscribe(name="stuck").hang(), push_service.subscribe()

    def waiter():
        with pytest.raises(requests.exceptions.ConnectionError):
            push(stuck, {"kind": "test"}, vapid)
    waiting = gevent.spawn(waiter)
    (held,) = stuck.wait_deliveries(1)
    assert held.payload == {"kind": "test"} and held.status is None
    assert push(fine, {"kind": "test"}, vapid).status_code == 201
    assert not waiting.ready()
    push_service.down()  # drops the held connection unanswered
    waiting.get(timeout=10)  # the caller saw the connection drop
    assert held.status is None


def test_a_service_that_is_down_refuses_connections_until_up_again(push_service):
    vapid = vapid_key()
    sub = push_service.subscribe()
    push_service.down()
    with pytest.raises(requests.exceptions.ConnectionError):
        push(sub, {"kind": "test"}, vapid)
    push_service.up()
    assert push(sub, {"kind": "test"}, vapid).status_code == 201
    assert len(sub.deliveries) == 1


def test_concurrent_pushes_and_keep_alive(push_service):
    vapid = vapid_key()
    subs = [push_service.subscribe(name=f"device {n}") for n in range(20)]
    jobs = [gevent.spawn(push, sub, {"n": n}, vapid) for n, sub in enumerate(subs)]
    gevent.joinall(jobs, timeout=10, raise_error=True)
    assert [job.value.status_code for job in jobs] == [201] * 20
    push_service.wait_deliveries(20)
    assert [sub.deliveries[0].payload for sub in subs] == [{"n": n} for n in range(20)]
    connections = push_service.connections
    with requests.Session() as session:  # one connection, several pushes
        pusher = WebPusher(subs[0].as_json(), requests_session=session)
        headers = vapid.sign({"aud": push_service.url, "sub": OWNER})
        statuses = [pusher.send(json.dumps({"again": n}), headers, ttl=5).status_code
                    for n in range(5)]
    assert statuses == [201] * 5
    assert push_service.connections == connections + 1
    assert [d.payload for d in subs[0].deliveries[1:]] == [{"again": n} for n in range(5)]


SENDER = """
import json, os, sys
from py_vapid import Vapid
from pywebpush import webpush
vapid = Vapid()
vapid.generate_keys()
response = webpush(json.loads(sys.argv[1]), '{"from": "child"}', vapid_private_key=vapid,
                   vapid_claims={"sub": "mailto:owner@example.com"})
print(response.status_code)
"""


def test_a_push_from_another_process_that_trusts_the_ca_through_its_environment(push_service):
    sub = push_service.subscribe()
    child = subprocess.Popen([sys.executable, "-c", SENDER, json.dumps(sub.as_json())],
                             stdout=subprocess.PIPE, text=True)  # env: the fixture's CA
    (delivery,) = sub.wait_deliveries(1)  # serves the child's push while it waits
    out, _ = child.communicate(timeout=30)
    assert (child.returncode, out.strip()) == (0, "201")
    assert delivery.payload == {"from": "child"} and delivery.vapid_ok


def test_unknown_endpoints_and_methods(push_service):
    sub = push_service.subscribe()
    assert requests.post(push_service.url + "/push/nope", data=b"x").status_code == 404
    assert requests.get(sub.endpoint).status_code == 405
    assert sub.deliveries == []


def test_waiting_fails_with_a_message(push_service):
    sub = push_service.subscribe(name="phone")
    with pytest.raises(AssertionError, match="1 deliveries to phone"):
        sub.wait_deliveries(1, timeout=0.05)


def test_close_removes_the_ca_file():
    service = PushService()
    assert os.path.exists(service.ca_file)
    service.close()
    assert not os.path.exists(service.ca_file)
