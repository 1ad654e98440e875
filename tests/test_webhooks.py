"""Webhooks end to end (design.md §8; interface.md "Webhook (per project)", "Webhooks",
"Webhook event types"): CRUD and validation, real deliveries of the moments a task goes
through, the payload of each platform, HMAC signatures, retries and their records, the
test route, and that a hanging target holds up nobody else.

Deliveries go to a receiver the test starts: a gevent WSGI server on 127.0.0.1, port 0,
that records each request and answers the status codes scripted for its path (then 200),
or hangs on the paths told to.  Runs use the scripted tests/fake_agent.py.
"""
import hashlib
import hmac
import http
import json
import socket
from datetime import datetime
from typing import NamedTuple

import gevent
import gevent.event
import pytest
import requests
from gevent.pywsgi import WSGIServer

import taskboard
from agent_helpers import RUN, start, wait_status
from conftest import (
    assert_error,
    bearer,
    connecting_to,
    full_listener,
    no_socket_left_open,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("fast_retries", "fast_backoff")

EVENTS = ["task:created", "task:started", "task:completed", "task:approved",
          "task:changes_requested", "task:failed"]


# --- the receiver ------------------------------------------------------------------------

class Received(NamedTuple):
    method: str
    path: str
    headers: dict  # lower-case names
    body: bytes
    answered: int | None  # None while it hangs

    @property
    def json(self):
        return json.loads(self.body)

    @property
    def event(self):
        return self.headers.get("x-taskboard-event")


class Receiver:
    def __init__(self):
        self.requests = []
        self.codes = {}  # path -> status codes to answer in turn; then 200
        self.hanging = set()  # paths that answer only once let go (a minute at most)
        self.retry_after = []  # what each 429 asks for in turn (Retry-After)
        self.let_go = gevent.event.Event()
        self.server = WSGIServer(("127.0.0.1", 0), self._handle, log=None, error_log=None)
        self.server.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.server.server_port}{path}"

    def _handle(self, environ, start_response):
        path = environ["PATH_INFO"]
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items()
                   if k.startswith("HTTP_")}
        headers["content-type"] = environ.get("CONTENT_TYPE", "")
        codes = self.codes.get(path)
        status = None if path in self.hanging else codes.pop(0) if codes else 200
        self.requests.append(Received(environ["REQUEST_METHOD"], path, headers, body, status))
        if status is None:
            self.let_go.wait(60)
            status = 200
        start_response(f"{status} {http.HTTPStatus(status).phrase}",
                       [("Content-Type", "text/plain"), ("Content-Length", "2"),
                        *([("Retry-After", self.retry_after.pop(0))] if status == 429 and
                          self.retry_after else [])])
        return [b"ok"]

    def at(self, path):
        return [r for r in self.requests if r.path == path]

    def wait(self, path, count=1, timeout=5):
        """The requests to path once there are at least `count`."""
        return wait_for(lambda: len(self.at(path)) >= count and self.at(path), timeout,
                        message=f"{count} request(s) to {path}")

    def wait_event(self, path, event, timeout=5):
        """The first request to path announcing `event`."""
        return wait_for(lambda: next((r for r in self.at(path) if r.event == event), None),
                        timeout, message=f"{event} at {path}")


@pytest.fixture
def receiver():
    target = Receiver()
    yield target
    target.let_go.set()
    target.server.stop(timeout=0.5)


@pytest.fixture
def fast_backoff(monkeypatch):
    monkeypatch.setattr(taskboard, "WEBHOOK_BACKOFF_BASE", 0.05)


# --- helpers -----------------------------------------------------------------------------

def unused_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hooks_url(project, hook=None, tail=""):
    return f"/api/projects/{project['id']}/webhooks" + (f"/{hook['id']}" if hook else "") + tail


def deliveries(client, project, hook):
    return client.get(hooks_url(project, hook, "/deliveries")).json


def wait_deliveries(client, project, hook, count, timeout=5):
    return wait_for(lambda: len(deliveries(client, project, hook)) >= count
                    and deliveries(client, project, hook), timeout,
                    message=f"{count} recorded delivery attempts of hook {hook['id']}")


def signature(secret, body):
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def is_timestamp(value):
    return isinstance(value, str) and value.endswith("Z") and datetime.fromisoformat(value)


# --- CRUD and validation -----------------------------------------------------------------

def test_webhook_life_cycle_keeps_the_secret_write_only(client, api, receiver):
    project = api.project()
    hook = api.webhook(project["id"], platform="platform_b", url="https://example.test/h",
                       events=["task:created", "task:failed"], secret="s3cret")
    assert {k: hook[k] for k in ("projectId", "platform", "url", "events", "enabled",
                                 "hasSecret")} == {
        "projectId": project["id"], "platform": "platform_b", "url": "https://example.test/h",
        "events": ["task:created", "task:failed"], "enabled": True, "hasSecret": True}
    assert "secret" not in hook and is_timestamp(hook["createdAt"])
    plain = api.webhook(project["id"])
    assert plain["hasSecret"] is False
    assert client.get(hooks_url(project)).json == [hook, plain]
    assert client.get(hooks_url(project, hook)).json == hook
    changed = client.put_json(hooks_url(project, hook),
                              {"enabled": False, "events": ["task:approved"]}).json
    assert changed == hook | {"enabled": False, "events": ["task:approved"]}
    assert deliveries(client, project, hook) == []
    client.delete(hooks_url(project, hook))
    assert_error(client.get(hooks_url(project, hook), expect_errors=True), 404, "not_found")
    assert_error(client.get(hooks_url(project, hook, "/deliveries"), expect_errors=True),
                 404, "not_found")
    assert client.get(hooks_url(project)).json == [plain]


@pytest.mark.parametrize("change, field", [
    ({"platform": "slack"}, "platform"), ({"events": ["task:created", "task:deleted"]}, "events"),
    ({"url": "ftp://example.test/hook"}, "url"), ({"url": "javascript:alert(1)"}, "url"),
    ({"events": []}, "events"), ({"events": "task:created"}, "events"),
])
def test_bad_webhook_is_refused_naming_the_field_and_stores_nothing(client, api, snapshot,
                                                                      change, field):
    project = api.project()
    before = snapshot()
    body = {"platform": "custom", "url": "https://example.test/h", "events": ["task:created"]}
    response = client.post_json(hooks_url(project), body | change, expect_errors=True)
    assert_error(response, 400, "validation_error", field)
    assert snapshot() == before


# --- which moments are delivered ---------------------------------------------------------

def test_agent_run_delivers_created_started_completed_then_approved(client, api, receiver):
    project = api.project()
    api.webhook(project["id"], url=receiver.url("/all"), events=EVENTS, secret="hush")
    tid = start(api, project, "fake:ok")
    wait_status(client, tid, "testing")
    receiver.wait_event("/all", "task:completed", RUN)
    api.move(tid, "done")
    receiver.wait_event("/all", "task:approved")
    got = receiver.at("/all")
    assert [r.event for r in got] == ["task:created", "task:started", "task:completed",
                                      "task:approved"]
    assert [r.json["task"]["status"] for r in got] == ["backlog", "in_progress", "testing",
                                                       "done"]
    for request in got:
        assert request.method == "POST" and request.headers["content-type"] == \
            "application/json"
        assert request.headers["x-taskboard-signature"] == signature("hush", request.body)
        assert request.json["event"] == request.event
        assert request.json["project"] == {k: project[k] for k in ("id", "name", "slug")}
        assert request.json["task"]["id"] == tid and is_timestamp(request.json["timestamp"])
    assert got[-1].json["task"] == client.get(f"/api/tasks/{tid}").json


def test_agent_failure_delivers_task_failed_but_manual_moves_announce_nothing(
        client, api, receiver):
    project = api.project(maxRetries=0)
    api.webhook(project["id"], url=receiver.url("/hook"),
                events=["task:created", "task:completed", "task:failed"])
    failing = start(api, project, "fake:exit=3")
    failed = receiver.wait_event("/hook", "task:failed", RUN).json["task"]
    assert failed["id"] == failing and failed["status"] == "failed" and failed["last_error"]
    by_hand = api.task(project["id"], title="by hand")["id"]
    api.move(by_hand, "failed")
    api.move(by_hand, "testing")
    marker = api.task(project["id"], title="marker")["id"]
    wait_for(lambda: receiver.at("/hook")[-1].json["task"]["id"] == marker,
             message="the marker task's task:created")
    assert [(r.event, r.json["task"]["id"]) for r in receiver.at("/hook")] == [
        ("task:created", failing), ("task:failed", failing), ("task:created", by_hand),
        ("task:created", marker)]


def test_request_changes_delivers_changes_requested_with_the_feedback(client, api, receiver):
    project = api.project()
    api.webhook(project["id"], url=receiver.url("/hook"), events=["task:changes_requested"])
    tid = start(api, project, "fake:ok fake:resume=hang")
    wait_status(client, tid, "testing")
    client.post_json("/api/desktop/request_changes",
                     {"id": tid, "feedback": "Handle negative totals."})
    got = receiver.wait_event("/hook", "task:changes_requested")
    assert got.json["data"] == {"feedback": "Handle negative totals."}
    assert got.json["task"]["id"] == tid and got.json["task"]["revision_count"] == 1
    assert [r.event for r in receiver.at("/hook")] == ["task:changes_requested"]


def test_only_enabled_hooks_of_the_project_subscribed_to_the_event_are_called(
        client, api, receiver):
    project, other = api.project(), api.project()
    api.webhook(project["id"], url=receiver.url("/created"), events=["task:created"])
    api.webhook(project["id"], url=receiver.url("/approved"), events=["task:approved"])
    api.webhook(project["id"], url=receiver.url("/disabled"), events=EVENTS, enabled=False)
    turned_off = api.webhook(project["id"], url=receiver.url("/turned-off"), events=EVENTS)
    client.put_json(hooks_url(project, turned_off), {"enabled": False})
    api.webhook(other["id"], url=receiver.url("/other"), events=EVENTS)
    tid = api.task(project["id"])["id"]
    receiver.wait("/created")
    api.move(tid, "done")
    receiver.wait("/approved")
    assert [r.event for r in receiver.at("/created")] == ["task:created"]
    assert [r.event for r in receiver.at("/approved")] == ["task:approved"]
    assert {r.path for r in receiver.requests} == {"/created", "/approved"}


def test_a_hook_turned_on_off_and_deleted_is_called_exactly_while_it_is_on(
        client, api, receiver):
    """Moments of a project without an enabled hook are not even noted; the projects that
    have one are read again whenever a hook changes."""
    project = api.project()
    api.task(project["id"], title="before any hook")
    hook = api.webhook(project["id"], url=receiver.url("/hook"), events=["task:created"],
                       enabled=False)
    api.task(project["id"], title="while off")
    client.put_json(hooks_url(project, hook), {"enabled": True})
    api.task(project["id"], title="while on")
    receiver.wait("/hook")
    client.delete(hooks_url(project, hook))
    api.task(project["id"], title="after the delete")
    later = api.webhook(project["id"], url=receiver.url("/later"), events=["task:created"])
    api.task(project["id"], title="with a new hook")
    receiver.wait("/later")
    assert [r.json["task"]["title"] for r in receiver.at("/hook")] == ["while on"]
    assert [r.json["task"]["title"] for r in receiver.at("/later")] == ["with a new hook"]
    assert later["enabled"] is True


# --- payloads ------------------------------------------------------------------------------

def check_slack(body):
    assert isinstance(body["text"], str) and body["text"]
    blocks = body["blocks"]
    assert blocks[0]["type"] == "header" and blocks[0]["text"]["type"] == "plain_text"
    assert any(b["type"] == "section" for b in blocks) and blocks[-1]["type"] == "context"
    return body["text"]


def check_discord(body):
    [embed] = body["embeds"]
    assert isinstance(embed["color"], int) and 0 <= embed["color"] <= 0xFFFFFF
    assert embed["fields"] and all({"name", "value"} <= set(f) for f in embed["fields"])
    assert datetime.fromisoformat(embed["timestamp"])
    return embed["title"]


def check_teams(body):
    assert body["type"] == "message"
    [attachment] = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and isinstance(card["version"], str)
    assert card["body"] and all("type" in element for element in card["body"])
    return json.dumps(card["body"])


@pytest.mark.parametrize("platform, check", [
    ("platform_a", check_slack), ("platform_b", check_discord), ("platform_c", check_teams)])
def test_platform_payload_has_the_platforms_shape_and_names_the_task(api, receiver,
                                                                     platform, check):
    project = api.project(name="Shop", slug="shop")
    api.webhook(project["id"], platform=platform, url=receiver.url("/p"), events=EVENTS)
    task = api.task(project["id"], title="Fix the cart total", description="Totals are off.")
    [request] = receiver.wait("/p")
    headline = check(request.json)
    assert task["task_key"] in headline and "Fix the cart total" in headline


def test_custom_payload_is_the_task_as_the_api_shows_it_unsigned_without_a_secret(
        client, api, receiver):
    project = api.project(name="Shop", slug="shop")
    api.webhook(project["id"], url=receiver.url("/c"), events=EVENTS)
    task = api.task(project["id"], title="Fix the cart total")
    [request] = receiver.wait("/c")
    assert request.json == {"event": "task:created", "timestamp": request.json["timestamp"],
                            "project": {"id": project["id"], "name": "Shop", "slug": "shop"},
                            "task": client.get(f"/api/tasks/{task['id']}").json, "data": {}}
    assert is_timestamp(request.json["timestamp"])
    assert request.event == "task:created" and "x-taskboard-signature" not in request.headers


def test_slack_text_cannot_mention_the_channel(api, receiver):
    project = api.project()
    api.webhook(project["id"], platform="platform_a", url=receiver.url("/s"), events=EVENTS)
    api.task(project["id"], title="<!channel> pay <https://evil.example|here>")
    [request] = receiver.wait("/s")
    assert "<!channel>" not in request.body.decode() and "&lt;!channel&gt;" in \
        request.json["text"]


# --- retries and their records -------------------------------------------------------------

def test_5xx_is_retried_with_backoff_and_every_attempt_is_recorded_and_published(
        client, api, receiver, live, monkeypatch):
    monkeypatch.setattr(taskboard, "WEBHOOK_BACKOFF_BASE", 0.1)  # then 4 times longer
    backoffs, sleep = [], gevent.sleep  # (seconds, attempts arrived at its start, at its end)

    def watched(seconds=0, *args, **kwargs):
        if seconds not in (0.1, 0.4):
            return sleep(seconds, *args, **kwargs)
        began = len(receiver.at("/flaky"))
        sleep(seconds, *args, **kwargs)
        backoffs.append((seconds, began, len(receiver.at("/flaky"))))
    monkeypatch.setattr(gevent, "sleep", watched)
    project = api.project()
    hook = api.webhook(project["id"], url=receiver.url("/flaky"), events=["task:created"])
    receiver.codes["/flaky"] = [500, 503]
    ws = live.ws(f"?projectId={project['id']}")
    api.task(project["id"])
    sent = receiver.wait("/flaky", 3)
    assert len({r.body for r in sent}) == 1, "every attempt sends the same payload"
    assert backoffs == [(0.1, 1, 1), (0.4, 2, 2)], "each retry waits out its backoff first"
    records = wait_deliveries(client, project, hook, 3)
    assert [(d["event"], d["attempt"], d["status"], d["ok"]) for d in records] == [
        ("task:created", 3, 200, True), ("task:created", 2, 503, False),
        ("task:created", 1, 500, False)]
    assert records[0]["error"] is None
    assert "503" in records[1]["error"] and "500" in records[2]["error"]
    assert all(isinstance(d["durationMs"], int) and d["durationMs"] >= 0 for d in records)
    assert all(is_timestamp(d["createdAt"]) for d in records)
    assert [d["id"] for d in records] == sorted((d["id"] for d in records), reverse=True)
    published = [ws.until("webhook:delivery")["data"] for _ in records]
    assert published == [{"webhookId": hook["id"], "projectId": project["id"]} | d
                         for d in reversed(records)]


def test_a_429_waits_what_its_retry_after_asks_when_longer_than_the_backoff_at_most_a_minute(
        api, receiver, monkeypatch):
    sleeps, sleep = [], gevent.sleep  # (seconds, attempts arrived before it)

    def watched(seconds=0, *args, **kwargs):
        if seconds >= 1:  # the waits asked for: recorded, not waited out
            sleeps.append((seconds, len(receiver.at("/busy"))))
            return None
        return sleep(seconds, *args, **kwargs)
    monkeypatch.setattr(gevent, "sleep", watched)
    project = api.project()
    api.webhook(project["id"], url=receiver.url("/busy"), events=["task:created"])
    receiver.codes["/busy"], receiver.retry_after = [429, 429], ["7", "86400"]
    api.task(project["id"])
    assert [r.answered for r in receiver.wait("/busy", 3)] == [429, 429, 200]
    assert sleeps == [(7.0, 1), (60.0, 2)], "Retry-After, then at most a minute"


@pytest.mark.parametrize("codes", [[500, 502, 504], [429, 200], [404], [400]])
def test_5xx_and_429_are_retried_up_to_three_attempts_other_4xx_never(client, api, receiver,
                                                                       codes):
    project = api.project()
    hook = api.webhook(project["id"], url=receiver.url("/h"),
                       events=["task:created", "task:approved"])
    receiver.codes["/h"] = list(codes)
    tid = api.task(project["id"])["id"]
    api.move(tid, "done")  # delivered to the same hook after task:created is settled
    receiver.wait_event("/h", "task:approved")
    assert [(r.event, r.answered) for r in receiver.at("/h")] == \
        [("task:created", code) for code in codes] + [("task:approved", 200)]
    records = wait_deliveries(client, project, hook, len(codes) + 1)[::-1]
    assert [(d["event"], d["attempt"], d["status"], d["ok"]) for d in records] == [
        ("task:created", n, code, code == 200) for n, code in enumerate(codes, 1)] + [
        ("task:approved", 1, 200, True)]


@pytest.mark.parametrize("target", ["unreachable", "hanging"])
def test_connection_errors_and_timeouts_are_retried_and_recorded_without_status(
        client, api, receiver, monkeypatch, target):
    monkeypatch.setattr(taskboard, "WEBHOOK_TIMEOUT_SECONDS", 0.5)
    receiver.hanging.add("/hang")
    url = receiver.url("/hang") if target == "hanging" else \
        f"http://127.0.0.1:{unused_port()}/hook"
    project = api.project()
    hook = api.webhook(project["id"], url=url, events=["task:created"])
    api.task(project["id"])
    records = wait_deliveries(client, project, hook, 3, timeout=10)
    assert [(d["attempt"], d["status"], d["ok"]) for d in records] == [
        (3, None, False), (2, None, False), (1, None, False)]
    assert all(isinstance(d["error"], str) and d["error"] for d in records)
    if target == "hanging":
        assert len(receiver.at("/hang")) == 3
        assert all(d["durationMs"] >= 400 for d in records)


def test_only_the_newest_50_attempts_are_kept_per_hook(client, api, receiver):
    project = api.project()
    hook = api.webhook(project["id"], url=receiver.url("/many"))
    other = api.webhook(project["id"], url=receiver.url("/once"))
    client.post_json(hooks_url(project, other, "/test"))
    client.post_json(hooks_url(project, hook, "/test"))
    [first] = deliveries(client, project, hook)
    for _ in range(54):
        client.post_json(hooks_url(project, hook, "/test"))
    assert len(receiver.at("/many")) == 55
    kept = deliveries(client, project, hook)
    ids = [d["id"] for d in kept]
    assert len(kept) == 50 and ids == sorted(ids, reverse=True)
    assert first["id"] not in ids and all(d["event"] == "webhook:test" for d in kept)
    assert len(deliveries(client, project, other)) == 1


# --- the test route ------------------------------------------------------------------------

def test_test_route_makes_one_attempt_and_answers_the_targets_status(client, api, receiver):
    project, elsewhere = api.project(), api.project()
    ok = api.webhook(project["id"], url=receiver.url("/ok"), secret="hush")
    failing = api.webhook(project["id"], url=receiver.url("/fail"))
    dead = api.webhook(project["id"], url=f"http://127.0.0.1:{unused_port()}/hook")
    receiver.codes["/fail"] = [500, 500, 500]

    assert client.post_json(hooks_url(project, ok, "/test")).json == {"ok": True, "status": 200}
    [sample] = receiver.at("/ok")
    assert sample.event == "webhook:test" and sample.json["event"] == "webhook:test"
    assert sample.headers["x-taskboard-signature"] == signature("hush", sample.body)

    answer = client.post_json(hooks_url(project, failing, "/test")).json
    assert (answer["ok"], answer["status"]) == (False, 500) and "500" in answer["error"]
    assert len(receiver.at("/fail")) == 1

    answer = client.post_json(hooks_url(project, dead, "/test")).json
    assert (answer["ok"], answer["status"]) == (False, None)
    assert isinstance(answer["error"], str) and answer["error"]

    for hook, status in ((ok, 200), (failing, 500), (dead, None)):
        [record] = deliveries(client, project, hook)
        assert (record["event"], record["attempt"], record["status"], record["ok"]) == (
            "webhook:test", 1, status, status == 200)
    for url in (hooks_url(project, {"id": 999999}, "/test"),
                hooks_url(elsewhere, ok, "/test")):
        assert_error(client.post_json(url, expect_errors=True), 404, "not_found")


# --- isolation -----------------------------------------------------------------------------

def test_a_hanging_target_delays_neither_other_hooks_nor_the_api(client, api, receiver, live,
                                                                 monkeypatch):
    """/slow holds its delivery until the test lets go, and the board would wait a minute
    for it: the create's answer, /fast's delivery and the API all come before that."""
    monkeypatch.setattr(taskboard, "WEBHOOK_TIMEOUT_SECONDS", 60.0)
    receiver.hanging.add("/slow")
    project = api.project()
    slow = api.webhook(project["id"], url=receiver.url("/slow"), events=["task:created"])
    fast = api.webhook(project["id"], url=receiver.url("/fast"), events=["task:created"])
    created = requests.post(f"{live.url}/api/projects/{project['id']}/tasks",
                            json={"title": "Announce me"}, timeout=5, headers=bearer())
    assert created.status_code == 201
    receiver.wait("/slow")
    [record] = wait_deliveries(client, project, fast, 1)
    assert record["ok"] is True, "the fast hook waited for the slow one"
    assert requests.get(f"{live.url}/api/projects", timeout=5,
                        headers=bearer()).status_code == 200
    assert deliveries(client, project, slow) == [], "the slow target is still being waited on"
    receiver.let_go.set()
    [record] = wait_deliveries(client, project, slow, 1)
    assert record["ok"] is True, "the slow delivery went through once let go"


def test_a_hook_disabled_during_backoff_gets_no_more_attempts(client, api, receiver,
                                                              monkeypatch):
    monkeypatch.setattr(taskboard, "WEBHOOK_BACKOFF_BASE", 0.3)
    project = api.project()
    hook = api.webhook(project["id"], url=receiver.url("/off"), events=["task:created"])
    api.webhook(project["id"], url=receiver.url("/control"), events=["task:created"])
    receiver.codes["/off"] = receiver.codes["/control"] = [500, 500, 500]
    api.task(project["id"])
    receiver.wait("/off")
    client.put_json(f"/api/projects/{project['id']}/webhooks/{hook['id']}",
                    {"enabled": False})
    receiver.wait("/control", 3)  # the same backoff: /off's retries would be due by now
    assert len(receiver.at("/off")) == 1
    assert len(deliveries(client, project, hook)) == 1


def test_a_call_whose_caller_ends_mid_connect_still_closes_its_socket():
    """The board stopping kills a delivery wherever it is, here mid-connect: the exchange
    goes on by itself to its own timeout and closes its socket (a socket dropped open would
    wait for the garbage collector, and its warning fail whatever ran then)."""
    with full_listener() as (host, port):
        call = gevent.spawn(taskboard.http_call, "POST", f"http://{host}:{port}/hook", 0.5)
        wait_for(lambda: connecting_to(port), message="the call to be connecting")
        call.kill()
        wait_for(lambda: not connecting_to(port), message="the exchange to end by its timeout")
    no_socket_left_open()
    # and the caller's own timeout answers in time, the exchange ending the same way
    with full_listener() as (host, port):
        assert taskboard.http_call("POST", f"http://{host}:{port}/hook", 0.3) == \
            "no answer within 0.3 s"
        wait_for(lambda: not connecting_to(port), message="the exchange to end by its timeout")
    no_socket_left_open()
