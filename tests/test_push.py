"""Phones (design.md §13): devices subscribe to Web Push, approvals reach them with Allow and
Deny that work without a session, answers replace the other devices' notifications, and the
"Needs you" inbox.  The push service is tests/push_service.py: it decrypts every message with
the device's keys (RFC 8291) and checks the board's VAPID signature (RFC 8292) over HTTPS.
"""
import json

import pytest
from push_service import b64url
from test_channel import answers_to, pending

import taskboard
from agent_helpers import RUN, start, wait_status
from conftest import assert_error, assert_refused, sql, wait_for

pytestmark = pytest.mark.usefixtures("fast_retries", "quick_push")


@pytest.fixture
def quick_push(monkeypatch, request):
    """Retries without the real pauses; a hung push service gives up soon.  A test ends
    once the board has nothing left to send: a sender killed while it connects (the board
    shutting down) would leave its socket to the garbage collector."""
    monkeypatch.setattr(taskboard, "WEBHOOK_BACKOFF_BASE", 0.01)
    monkeypatch.setattr(taskboard, "WEBHOOK_TIMEOUT_SECONDS", 2.0)
    if "push_service" in request.fixturenames:
        request.getfixturevalue("push_service")  # set up first, so it is closed after this
    yield
    if taskboard.runtime is not None:
        settled()


def add_device(client, sub, events=("approval", "question"), name="Phone", status=201):
    body = {**sub.as_json(), "name": name, "events": list(events)}
    return client.post_json("/api/push/subscriptions", body, status=status).json


def settled():
    """Wait until the board has sent everything it queued."""
    wait_for(lambda: taskboard.runtime.push.idle, RUN,
             message="the board to send what it queued")


def messages(sub, count, kind=None):
    """The first `count` messages of `kind` the device received, decrypted."""
    def received():
        found = [d for d in sub.deliveries if kind is None or d.payload["kind"] == kind]
        return found[:count] if len(found) >= count else None
    return sub.service.wait_for(received, RUN, message=f"{count} {kind or ''} message(s)")


# --- devices -----------------------------------------------------------------------------

def test_a_device_gets_a_test_notification_it_decrypts_signed_by_the_boards_key(
        client, push_service):
    key = client.get("/api/push/key").json["publicKey"]
    assert len(taskboard.b64url_decode(key)) == 65 and key == taskboard.runtime.push.public_key
    sub = push_service.subscribe()
    device = add_device(client, sub, name="Pixel")
    assert device["name"] == "Pixel" and device["events"] == ["approval", "question"]
    assert "keys" not in device and device["lastSentAt"] is None

    answer = client.post(f"/api/push/subscriptions/{device['id']}/test").json
    assert answer == {"ok": True, "status": 201}
    [delivery] = sub.deliveries
    assert delivery.vapid_ok and delivery.vapid_key == key
    assert delivery.vapid_claims["sub"] == "mailto:taskboard@localhost"
    assert delivery.payload["kind"] == "test" and delivery.payload["tag"] == "test"
    assert delivery.payload["title"] and delivery.payload["url"] == "/#/settings"
    [listed] = client.get("/api/push/subscriptions").json
    assert listed["lastStatus"] == 201 and listed["lastError"] is None and listed["lastSentAt"]


def test_the_vapid_key_is_made_once_and_kept_private(tb, client):
    path = taskboard.os.path.join(tb.data_dir, "vapid.pem")
    assert taskboard.os.stat(path).st_mode & 0o777 == 0o600
    again = taskboard.PushSender(path, "mailto:taskboard@localhost")
    assert again.public_key == client.get("/api/push/key").json["publicKey"]


def test_the_same_endpoint_again_replaces_the_device(client, push_service):
    sub = push_service.subscribe()
    first = add_device(client, sub, name="Phone")
    second = add_device(client, sub, events=["testing"], name="My phone")
    assert second["id"] == first["id"] and second["createdAt"] == first["createdAt"]
    assert [(d["name"], d["events"]) for d in client.get("/api/push/subscriptions").json] == \
        [("My phone", ["testing"])]
    assert client.delete(f"/api/push/subscriptions/{first['id']}").json == {"ok": True}
    assert client.get("/api/push/subscriptions").json == []
    assert_error(client.delete(f"/api/push/subscriptions/{first['id']}", expect_errors=True),
                 404)
    assert_error(client.post(f"/api/push/subscriptions/{first['id']}/test",
                             expect_errors=True), 404)


@pytest.mark.parametrize("change,field", [
    ({"endpoint": "http://push.example.com/abc"}, "endpoint"),
    ({"endpoint": "ftp://push.example.com/abc"}, "endpoint"),
    ({"endpoint": "https:///no-host"}, "endpoint"),
    # issue 32: stored, then every message a 500 and a traceback (py_vapid: no 'aud')
    ({"endpoint": "https://user:secret@push.example.com/abc"}, "endpoint"),
    ({"endpoint": "https://user@push.example.com/abc"}, "endpoint"),
    ({"endpoint": "https://[::1]:8443/abc"}, "endpoint"),
    ({"endpoint": "https://push.example.com:port/abc"}, "endpoint"),
    ({"keys": {"p256dh": b64url(b"\x04" + b"\x01" * 64), "auth": b64url(b"a" * 16)}},
     "keys.p256dh"),  # 65 bytes, but not a point on the curve
    ({"keys": {"p256dh": "not base64!", "auth": b64url(b"a" * 16)}}, "keys.p256dh"),
    ({"keys": {"p256dh": "KEEP", "auth": b64url(b"short")}}, "keys.auth"),
    ({"keys": {"p256dh": "KEEP"}}, "keys"),
    ({"keys": "p256dh"}, "keys"),
    ({"events": ["approval", "lunch"]}, "events"),
    ({"events": []}, "events"),
    ({"name": "x" * 101}, "name"),
    ({"colour": "red"}, "colour"),
])
def test_a_bad_subscription_is_refused_naming_the_field(client, snapshot, push_service,
                                                         change, field):
    body = {**push_service.subscribe().as_json(), "name": "Phone", "events": ["approval"]}
    if "keys" in change and isinstance(change["keys"], dict):
        change = {"keys": {k: body["keys"]["p256dh"] if v == "KEEP" else v
                           for k, v in change["keys"].items()}}
    error = assert_refused(snapshot, client.post_json, "/api/push/subscriptions",
                           {**body, **change}, field)
    assert field.split(".")[0] in error["error"] or field == "colour"


def test_push_routes_need_the_token_but_a_notifications_button_does_not(anonymous):
    for method, path in (("GET", "/api/push/key"), ("GET", "/api/push/subscriptions"),
                         ("POST", "/api/push/subscriptions"), ("GET", "/api/inbox"),
                         ("DELETE", "/api/push/subscriptions/1"),
                         ("POST", "/api/push/subscriptions/1/test")):
        assert_error(anonymous.request(path, method=method, expect_errors=True), 401)
    # no session, a made-up token: refused as a bad button, not as a missing login
    assert_error(anonymous.post_json("/api/approvals/1/act", {"token": "x" * 43,
                                                              "decision": "allow"},
                                     expect_errors=True), 403, "forbidden", "token")
    operation = taskboard.openapi()["paths"]["/api/approvals/{approval_id}/act"]["post"]
    assert operation["security"] == []


# --- approvals on the lock screen ----------------------------------------------------------

def test_allow_from_the_lock_screen_lets_the_agent_go_on_and_the_token_works_once(
        client, anonymous, api, agent_dir, push_service, snapshot):
    phone, laptop = push_service.subscribe(), push_service.subscribe()
    add_device(client, phone, name="Phone")
    add_device(client, laptop, name="Laptop")
    project = api.project(name="Shop")
    tid = start(api, project, "fake:ask", title="Fix the cart")
    [approval] = pending(client, tid)

    [message] = messages(phone, 1, "approval")
    payload = message.payload
    task = client.get(f"/api/tasks/{tid}").json
    assert payload["approvalId"] == approval["id"] and payload["kind"] == "approval"
    assert payload["title"] == "Allow Bash?"
    assert "echo hello > hello.txt" in payload["body"]
    assert f"{task['task_key']} Fix the cart · Shop" in payload["body"]
    assert payload["tag"] == f"approval-{approval['id']}"
    assert payload["url"] == f"/#/tasks/{tid}?approval={approval['id']}"
    assert payload["needsYou"] == 1
    assert message.urgency == "high" and message.topic == f"approval-{approval['id']}"
    assert message.ttl == taskboard.ACTION_TOKEN_MINUTES * 60
    [other] = messages(laptop, 1, "approval")
    assert other.payload["token"] != payload["token"]  # each device its own button

    decided = anonymous.post_json(f"/api/approvals/{approval['id']}/act",
                                  {"token": payload["token"], "decision": "allow"}).json
    assert decided["status"] == "allowed" and decided["decidedBy"] == "push"
    [response] = wait_for(lambda: answers_to(agent_dir, approval["requestId"]),
                          message="the answer to reach the agent")
    assert response["response"]["behavior"] == "allow"
    wait_status(client, tid, "testing")

    # every device's notification is replaced by what became of the request
    for sub in (phone, laptop):
        [answered] = messages(sub, 1, "answered")
        assert answered.payload["tag"] == f"approval-{approval['id']}"
        assert answered.topic == f"approval-{approval['id']}"
        assert answered.payload["title"] == "Allowed: Bash"
        assert "from a notification" in answered.payload["body"]
    before = snapshot()
    assert_error(anonymous.post_json(f"/api/approvals/{approval['id']}/act",
                                     {"token": payload["token"], "decision": "deny"},
                                     expect_errors=True), 403, "forbidden", "token")
    assert snapshot() == before
    settled()
    for sub in (phone, laptop):  # each message once, in order
        assert [d.payload["kind"] for d in sub.deliveries] == ["approval", "answered"]
    # kept-alive connections: one TLS handshake per sender at most, not one per message
    assert push_service.connections <= 2 < len(push_service.deliveries)


def test_deny_from_the_lock_screen_tells_the_agent(client, anonymous, api, agent_dir,
                                                   push_service):
    phone = push_service.subscribe()
    add_device(client, phone)
    tid = start(api, api.project(), "fake:ask")
    [approval] = pending(client, tid)
    [message] = messages(phone, 1, "approval")
    decided = anonymous.post_json(f"/api/approvals/{approval['id']}/act", {
        "token": message.payload["token"], "decision": "deny"}).json
    assert decided["status"] == "denied" and decided["decidedBy"] == "push"
    [response] = wait_for(lambda: answers_to(agent_dir, approval["requestId"]),
                          message="the answer to reach the agent")
    assert response["response"]["behavior"] == "deny"


def test_a_foreign_or_expired_token_is_refused_and_the_approval_waits_on(
        tb, client, anonymous, api, push_service, snapshot):
    phone = push_service.subscribe()
    add_device(client, phone)
    project = api.project(maxConcurrent=2)
    first = start(api, project, "fake:ask")
    second = start(api, project, "fake:ask")
    [a] = pending(client, first)
    [b] = pending(client, second)
    tokens = {m.payload["approvalId"]: m.payload["token"] for m in messages(phone, 2)}
    # the phone has both; the board records their delivery just after (the outbox empties)
    wait_for(lambda: not sql(tb, "SELECT 1 FROM push_outbox"), RUN,
             message="the deliveries to be recorded")

    before = snapshot()
    assert_error(anonymous.post_json(f"/api/approvals/{b['id']}/act", {
        "token": tokens[a["id"]], "decision": "allow"}, expect_errors=True), 403, field="token")
    assert snapshot() == before
    sql(tb, "UPDATE push_actions SET expires_at = '2020-01-01T00:00:00.000Z'")
    before = snapshot()
    assert_error(anonymous.post_json(f"/api/approvals/{b['id']}/act", {
        "token": tokens[b["id"]], "decision": "allow"}, expect_errors=True), 403, field="token")
    assert snapshot() == before
    assert {x["status"] for x in client.get("/api/approvals").json} == {"pending"}


def test_a_request_answered_on_the_board_makes_the_button_a_conflict(
        client, anonymous, api, push_service):
    phone = push_service.subscribe()
    add_device(client, phone)
    tid = start(api, api.project(), "fake:ask")
    [approval] = pending(client, tid)
    [message] = messages(phone, 1, "approval")
    client.post_json(f"/api/approvals/{approval['id']}", {"decision": "deny"})
    [answered] = messages(phone, 1, "answered")
    assert answered.payload["title"] == "Denied: Bash" and "on the board" in \
        answered.payload["body"]
    assert_error(anonymous.post_json(f"/api/approvals/{approval['id']}/act", {
        "token": message.payload["token"], "decision": "allow"}, expect_errors=True), 409)


def test_bad_button_bodies_are_400_and_wrong_tokens_are_rate_limited(anonymous, snapshot):
    assert_refused(snapshot, anonymous.post_json, "/api/approvals/1/act",
                   {"token": "abc", "decision": "maybe"}, "decision")
    assert_refused(snapshot, anonymous.post_json, "/api/approvals/1/act",
                   {"decision": "allow"}, "token")
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED):
        assert_error(anonymous.post_json("/api/approvals/1/act", {
            "token": "guess", "decision": "allow"}, expect_errors=True), 403)
    assert_error(anonymous.post_json("/api/approvals/1/act", {
        "token": "guess", "decision": "allow"}, expect_errors=True), 429)


def test_a_device_stored_with_an_endpoint_the_board_cannot_sign_for_fails_cleanly(
        tb, client, push_service, caplog):
    """A device stored before endpoints were checked: its test answers why, never a 500,
    and each message is one line in the log, never a traceback."""
    device = add_device(client, push_service.subscribe(), events=["testing"])
    sql(tb, "UPDATE push_subscriptions SET endpoint = 'https://[::1]:8443/x'")
    answer = client.post(f"/api/push/subscriptions/{device['id']}/test").json
    assert answer["ok"] is False and "cannot sign" in answer["error"]
    taskboard.push("testing", {"taskId": 1, "taskKey": "X-1", "taskTitle": "t"})
    settled()
    assert not [r for r in caplog.records if r.exc_info]
    [listed] = client.get("/api/push/subscriptions").json
    assert "cannot sign" in listed["lastError"]


def test_a_button_tapped_late_is_403_without_counting_and_a_valid_one_still_works(
        client, anonymous, api, push_service):
    """Issue 32: spent buttons counted as guesses, and five of them locked the phone's
    valid buttons out for a minute (429). Only tokens the board never issued count, and a
    valid one is never refused; its answer is the least needed: {id, status, decidedBy}."""
    phone = push_service.subscribe()
    add_device(client, phone)
    project = api.project(maxConcurrent=2)
    first, second = start(api, project, "fake:ask"), start(api, project, "fake:ask")
    [a], [b] = pending(client, first), pending(client, second)
    tokens = {m.payload["approvalId"]: m.payload["token"] for m in messages(phone, 2)}
    client.post_json(f"/api/approvals/{a['id']}", {"decision": "deny"})
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED + 1):  # a late tap: answered already
        assert_error(anonymous.post_json(f"/api/approvals/{b['id']}/act", {
            "token": tokens[a["id"]], "decision": "allow"}, expect_errors=True), 403)
    for _ in range(taskboard.LOGIN_FAILURES_ALLOWED):  # now real guesses
        assert_error(anonymous.post_json(f"/api/approvals/{b['id']}/act", {
            "token": "guess", "decision": "allow"}, expect_errors=True), 403)
    assert_error(anonymous.post_json(f"/api/approvals/{b['id']}/act", {
        "token": "guess", "decision": "allow"}, expect_errors=True), 429)
    decided = anonymous.post_json(f"/api/approvals/{b['id']}/act",
                                  {"token": tokens[b["id"]], "decision": "allow"}).json
    assert decided == {"id": b["id"], "status": "allowed", "decidedBy": "push"}


def test_a_question_opens_the_question_and_has_no_buttons(client, api, push_service):
    phone = push_service.subscribe()
    add_device(client, phone, events=["question"])
    tid = start(api, api.project(), "fake:question")
    [approval] = pending(client, tid)
    [message] = messages(phone, 1)
    payload = message.payload
    assert payload["kind"] == "question" and "token" not in payload
    question = approval["input"]["questions"][0]["question"]
    assert question in payload["body"]
    assert payload["url"] == f"/#/tasks/{tid}?approval={approval['id']}"


def test_messages_carry_no_secret(client, api, push_service, tb):
    phone = push_service.subscribe()
    add_device(client, phone, events=list(taskboard.PUSH_EVENTS))
    project = api.project()
    tid = start(api, project, "fake:ask")
    [approval] = pending(client, tid)
    client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"})
    wait_status(client, tid, "testing")
    received = messages(phone, 3)
    for delivery in received:
        text = delivery.plaintext.decode()
        assert tb.config["token"] not in text
        assert project["workingDir"] not in text
        assert set(json.loads(text)) <= {"kind", "title", "body", "tag", "url", "needsYou",
                                         "approvalId", "token"}


# --- the other events ----------------------------------------------------------------------

def test_review_ready_and_failed_reach_the_devices_that_want_them(client, api, push_service):
    reviews, failures = push_service.subscribe(), push_service.subscribe()
    add_device(client, reviews, events=["testing"])
    add_device(client, failures, events=["failed"])
    project = api.project(name="Site", maxRetries=0, maxConcurrent=2)
    done = start(api, project, "fake:ok", title="Add a footer")
    broken = start(api, project, "fake:budget", title="Rewrite it all")
    wait_status(client, done, "testing")
    wait_status(client, broken, "failed")
    [review] = messages(reviews, 1)
    key = client.get(f"/api/tasks/{done}").json["task_key"]
    assert review.payload["kind"] == "testing" and review.payload["url"] == f"/#/tasks/{done}"
    assert review.payload["title"] == f"Ready for review: {key}"
    assert review.urgency == "normal" and review.ttl == taskboard.PUSH_TTL_SECONDS
    [failure] = messages(failures, 1)
    assert failure.payload["kind"] == "failed" and "budget" in failure.payload["body"]
    assert all(d.payload["kind"] == "testing" for d in reviews.deliveries)
    assert all(d.payload["kind"] == "failed" for d in failures.deliveries)


def test_the_daily_cost_limit_is_told_once(client, api, push_service):
    phone = push_service.subscribe()
    add_device(client, phone, events=["budget"])
    client.put_json("/api/settings", {"dailyCostLimit": 0.01})
    project = api.project()
    for n in range(2):
        wait_status(client, start(api, project, f"fake:ok fake:cost=0.5 #{n}"), "testing")
    [message] = messages(phone, 1)
    assert message.payload["kind"] == "budget" and message.payload["url"] == "/#/usage"
    assert "$1.00 of $0.01" in message.payload["body"] or "of $0.01" in message.payload["body"]
    assert len(phone.deliveries) == 1


def test_the_daily_cost_limit_is_not_told_again_after_a_restart(client, api, push_service,
                                                                 config):
    phone = push_service.subscribe()
    add_device(client, phone, events=["budget"])
    client.put_json("/api/settings", {"dailyCostLimit": 0.01})
    project = api.project()
    wait_status(client, start(api, project, "fake:ok fake:cost=0.5 #1"), "testing")
    messages(phone, 1, "budget")
    settled()
    taskboard.shutdown()
    taskboard.init(config)  # the same day, the same store
    wait_status(client, start(api, project, "fake:ok fake:cost=0.5 #2"), "testing")
    settled()
    assert [d.payload["kind"] for d in phone.deliveries] == ["budget"]


# --- delivery faults -----------------------------------------------------------------------

def test_a_gone_device_is_removed_and_a_failing_service_is_retried(client, push_service):
    gone, flaky = push_service.subscribe(), push_service.subscribe()
    gone_id = add_device(client, gone, events=["testing"])["id"]
    flaky_id = add_device(client, flaky, events=["testing"])["id"]
    gone.answer(410)
    flaky.answers([500, 503])
    taskboard.push("testing", {"taskId": 1, "taskKey": "X-1", "taskTitle": "t"})
    flaky.wait_deliveries(3)
    wait_for(lambda: client.get("/api/push/subscriptions").json[0]["lastStatus"] == 201,
             message="the retried message to arrive")
    [left] = client.get("/api/push/subscriptions").json
    assert left["id"] == flaky_id and left["lastError"] is None
    assert [d.status for d in flaky.deliveries] == [500, 503, 201]
    assert [d.status for d in gone.deliveries] == [410]
    assert_error(client.post(f"/api/push/subscriptions/{gone_id}/test", expect_errors=True),
                 404)


def test_a_hung_push_service_delays_only_its_own_device(client, push_service, monkeypatch):
    """Each attempt waits WEBHOOK_TIMEOUT_SECONDS, then the next; after the third the message
    is given up, the device saying why.  (The test once answered the later attempts, and
    read the first one's error in the few milliseconds before the second succeeded.)"""
    monkeypatch.setattr(taskboard, "WEBHOOK_TIMEOUT_SECONDS", 0.5)
    hung, fine = push_service.subscribe(), push_service.subscribe()
    hung_id = add_device(client, hung, events=["testing"])["id"]
    add_device(client, fine, events=["testing"])
    hung.hang()
    taskboard.push("testing", {"taskId": 1, "taskKey": "X-1", "taskTitle": "t"})
    fine.wait_deliveries(1)
    wait_for(lambda: hung.deliveries, message="the hung service to have the request")
    assert hung.deliveries[0].status is None, "still waiting after the other device's came"
    assert client.get("/api/inbox").json["count"] == 0  # the board answers meanwhile
    wait_for(lambda: len(hung.deliveries) == 3, timeout=RUN, message="the third attempt")
    wait_for(lambda: taskboard.runtime.push.idle, RUN, message="the hung message given up")
    [device] = [d for d in client.get("/api/push/subscriptions").json if d["id"] == hung_id]
    assert device["lastStatus"] is None and "no answer" in device["lastError"], device
    assert len(hung.deliveries) == 3 and all(d.status is None for d in hung.deliveries)


def test_an_unreachable_service_is_reported_by_the_test_button(client, push_service):
    sub = push_service.subscribe()
    device = add_device(client, sub)
    push_service.down()
    answer = client.post(f"/api/push/subscriptions/{device['id']}/test").json
    assert answer["ok"] is False and answer["status"] is None
    assert "cannot reach 127.0.0.1" in answer["error"]


def test_a_service_not_trusted_by_the_system_is_not_sent_to(client, push_service,
                                                             monkeypatch):
    for name in push_service.env:
        monkeypatch.delenv(name)
    device = add_device(client, push_service.subscribe())
    answer = client.post(f"/api/push/subscriptions/{device['id']}/test").json
    assert answer["ok"] is False and answer["status"] is None
    assert "its certificate is not trusted" in answer["error"]
    assert push_service.deliveries == []


# --- the "Needs you" inbox -----------------------------------------------------------------

def test_the_inbox_lists_requests_and_reviews_of_every_project_newest_first(client, api):
    shop, site = api.project(name="Shop"), api.project(name="Site")
    reviewed = start(api, shop, "fake:ok", title="Add a footer")
    wait_status(client, reviewed, "testing")
    asking = start(api, site, "fake:ask", title="Clean up")
    [approval] = pending(client, asking)
    wait_status(client, reviewed, "testing")
    inbox = client.get("/api/inbox").json
    assert inbox["count"] == 2
    first, second = inbox["items"]
    assert (first["kind"], first["taskId"], first["projectName"]) == \
        ("approval", asking, "Site")
    assert first["approval"]["id"] == approval["id"] and first["taskTitle"] == "Clean up"
    assert (second["kind"], second["taskId"], second["projectName"], second["approval"]) == \
        ("review", reviewed, "Shop", None)
    assert first["at"] > second["at"]

    client.post_json(f"/api/approvals/{approval['id']}", {"decision": "allow"})
    wait_status(client, asking, "testing")
    api.move(reviewed, "done")
    assert [(i["kind"], i["taskId"]) for i in client.get("/api/inbox").json["items"]] == \
        [("review", asking)]


# --- the installable board -----------------------------------------------------------------

def test_the_service_worker_changes_when_the_board_is_upgraded(anonymous, monkeypatch):
    page = anonymous.get("/sw.js")
    assert page.content_type == "text/javascript"
    assert page.headers["Cache-Control"] == "no-cache"
    assert "__TASKBOARD_" not in page.text
    stamp = taskboard.board_build()[0]
    assert f'"{stamp}"' in page.text
    monkeypatch.setattr(taskboard, "__version__", "9.9.9")
    taskboard.board_build.cache_clear()
    try:
        assert taskboard.board_build()[0] != stamp
        assert anonymous.get("/sw.js").text != page.text
    finally:
        monkeypatch.undo()
        taskboard.board_build.cache_clear()
    manifest = anonymous.get("/static/manifest.webmanifest")
    assert manifest.content_type == "application/manifest+json"
    assert manifest.json["start_url"] == "/"
