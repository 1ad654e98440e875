"""The board as an installed app and its side of Web Push (issue 23, design §13), in Chromium
against a real `python taskboard.py --demo`: the manifest and its icons, the service worker
(what it caches, starting offline, showing a push, deciding an approval from a notification
with act()), the "Needs you" inbox across projects, Settings → Notifications, and the
phone-sized screenshots the README shows.

The demo's simulated agent asks a person before its edit (the Demo project's permissionMode
is `default`, as in test_browser_channel.py): that makes a real pending approval. A push is
delivered to the service worker with Chromium's DevTools command ServiceWorker.deliverPushMessage.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import json
import os
import re

import pytest
from browser_fixtures import PHONE, ROOT
from playwright.sync_api import expect

from browser_helpers import auto_accept, demo_task, live, start, status_badge

try:  # the fake push service (tests/push_service.py); only act() with a real token needs it
    from push_service import PushService
except ImportError:  # pragma: no cover
    PushService = None

pytestmark = pytest.mark.usefixtures("console_errors")

#: Every cache the page's origin holds: {name: [path, ...]}.
CACHED = """async () => {
  const out = {};
  for (const name of await caches.keys()) {
    const cache = await caches.open(name);
    out[name] = (await cache.keys()).map((r) => new URL(r.url).pathname + new URL(r.url).search);
  }
  return out;
}"""
#: The notifications the service worker shows now, with a tag: [{title, body, ...}].
NOTIFICATIONS = """async (tag) => {
  const registration = await navigator.serviceWorker.ready;
  return (await registration.getNotifications({tag})).map((n) => ({
    title: n.title, body: n.body, tag: n.tag, data: n.data, silent: n.silent,
    requireInteraction: n.requireInteraction, actions: n.actions.map((a) => a.action)}));
}"""


def notifications_once(page, tag, condition) -> list:
    """The notifications with this tag once condition (a JS expression on `list`) holds: the
    page asks again on each animation frame, for at most 10 s."""
    return page.evaluate(f"""async (tag) => {{
      const read = {NOTIFICATIONS};
      const until = performance.now() + 10000;
      for (;;) {{
        const list = await read(tag);
        if ({condition}) return list;
        if (performance.now() > until) throw new Error(`no ${{tag}}: ${{JSON.stringify(list)}}`);
        await new Promise((resolve) => requestAnimationFrame(resolve));
      }}
    }}""", tag)


def controlled(page, board):
    """Open the board and wait until its service worker controls the page."""
    page.goto(board.url)
    live(page)
    page.wait_for_function("() => navigator.serviceWorker.controller !== null")


def pending_approval(board, task_id) -> dict:
    """The task's pending approval (the page has shown that its agent asked)."""
    (approval,) = [a for a in board.api("GET", f"/api/tasks/{task_id}/approvals")
                   if a["status"] == "pending"]
    return approval


def waiting(board, page) -> tuple[dict, dict, dict]:
    """A task waiting for review (older) and a task whose agent asks (newer), seen by the
    page: (the reviewed task, the asking task, its approval)."""
    project = auto_accept(board)
    reviewed = demo_task(board, "Fix the off-by-one in count_to")
    start(board, reviewed)
    board.wait_status(reviewed["id"], "testing")  # nobody was asked: auto-accept
    board.api("PUT", f"/api/projects/{project['id']}", {"permissionMode": "default"})
    asking = demo_task(board, "Add a greeting function")
    page.goto(board.url)
    live(page)
    start(board, asking)
    expect(page).to_have_title("(2) Taskboard")
    return reviewed, asking, pending_approval(board, asking["id"])


def board_files() -> set:
    """What the service worker must cache: every file under static/ but the login page's and
    sw.js itself, and the page at "/"."""
    static = os.path.join(ROOT, "static")
    files = {"/"}
    for folder, _, names in os.walk(static):
        for name in names:
            rel = os.path.relpath(os.path.join(folder, name), static).replace(os.sep, "/")
            if not rel.startswith("login.") and rel != "sw.js":
                files.add(f"/static/{rel}")
    return files


def test_the_service_worker_lists_every_board_file(client):
    source = client.get("/sw.js").text
    listed = json.loads(re.search(r"const BOARD_FILES = (\[.*?\]);", source).group(1))
    assert set(listed) == board_files() and len(listed) == len(set(listed))


def test_the_manifest_is_linked_and_its_icons_load_in_their_sizes(board, page):
    page.goto(board.url)
    live(page)
    href = page.locator("link[rel=manifest]").get_attribute("href")
    response = page.request.get(board.url + href)
    assert response.ok
    assert response.headers["content-type"].startswith("application/manifest+json")
    manifest = json.loads(response.text())
    assert manifest["short_name"] == "Taskboard" and manifest["name"]
    assert (manifest["start_url"], manifest["scope"]) == ("/", "/")
    assert manifest["display"] == "standalone"
    theme = page.locator("meta[name=theme-color]").get_attribute("content")
    assert manifest["theme_color"] == theme and manifest["background_color"]
    size = "async (src) => { const img = new Image(); img.src = src; await img.decode(); " \
           "return `${img.naturalWidth}x${img.naturalHeight}`; }"
    pngs = [icon for icon in manifest["icons"] if icon["type"] == "image/png"]
    for icon in pngs:
        assert page.evaluate(size, icon["src"]) == icon["sizes"], icon
    kinds = {(icon["sizes"], icon.get("purpose", "any")) for icon in pngs}
    assert {("192x192", "any"), ("512x512", "any"), ("512x512", "maskable")} <= kinds
    apple = page.locator("link[rel=apple-touch-icon]").get_attribute("href")
    assert page.evaluate(size, apple) == "180x180"
    for favicon in page.locator("link[rel=icon]").all():
        assert page.evaluate(size, favicon.get_attribute("href")), favicon


def test_the_service_worker_caches_the_board_files_and_no_api_answer(board, page):
    controlled(page, board)
    script = page.request.get(board.url + "/sw.js")
    assert script.ok and "__TASKBOARD_BUILD__" not in script.text()
    build = re.search(r'const BUILD = "([^"]+)"', script.text()).group(1)
    task = demo_task(board, "Add a greeting function")
    page.goto(f"{board.url}/#/tasks/{task['id']}")  # more API calls, more files
    heading = page.get_by_role("heading", level=1, name=re.compile("Add a greeting function$"))
    expect(heading).to_be_visible()
    page.goto(f"{board.url}/#/settings/notifications")
    expect(page.get_by_role("heading", name="Devices")).to_be_visible()
    caches = page.evaluate(CACHED)
    assert list(caches) == [f"taskboard-{build}"], caches
    cached = set(caches[f"taskboard-{build}"])
    assert board_files() <= cached
    assert not [p for p in cached if p.startswith(("/api/", "/ws", "/login", "/sw.js"))], cached


def test_offline_the_board_starts_from_the_cache_and_says_so(board, context, page,
                                                             console_errors):
    controlled(page, board)
    expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    console_errors.allow(r"ERR_INTERNET_DISCONNECTED|WebSocket connection to .* failed")
    console_errors.allow(r"Failed to load resource")
    context.set_offline(True)
    page.reload()
    expect(page.locator(".app-header .brand")).to_have_text("Taskboard")
    offline = page.get_by_test_id("offline")
    expect(offline).to_be_visible()
    expect(offline).to_contain_text("Offline.")
    unreachable = page.get_by_role("alert").filter(has_text="The server cannot be reached.")
    expect(unreachable).to_be_visible()
    expect(page.get_by_test_id("offline-view")).to_contain_text("Waiting for the server")
    context.set_offline(False)  # the server is back: the board starts by itself
    expect(page.get_by_test_id("connection")).to_have_text("Live", timeout=20_000)
    expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    expect(page.get_by_test_id("offline")).to_have_count(0)
    expect(page.locator("#health-banner")).to_be_hidden()


def test_the_inbox_lists_requests_and_reviews_newest_first(board, page):
    reviewed, asking, approval = waiting(board, page)
    button = page.get_by_test_id("needs-you")
    expect(button.get_by_test_id("needs-you-count")).to_have_text("2")
    button.click()
    entries = page.get_by_role("dialog").get_by_test_id("needs-entry")
    expect(entries).to_have_count(2)
    expect(entries.nth(0)).to_have_attribute("data-kind", "approval")
    expect(entries.nth(0)).to_contain_text("Add a greeting function")
    expect(entries.nth(0)).to_contain_text("Edit: ")
    expect(entries.nth(1)).to_have_attribute("data-kind", "review")
    expect(entries.nth(1)).to_contain_text("Fix the off-by-one in count_to")
    expect(entries.nth(1)).to_contain_text("waiting for your review")
    entries.nth(0).get_by_role("link").click()  # opens the task at the request
    expect(page).to_have_url(re.compile(rf"#/tasks/{asking['id']}\?approval={approval['id']}$"))
    card = page.get_by_test_id("approval")
    expect(card).to_have_class(re.compile(r"\bapproval-focus\b"))
    expect(card).to_be_focused()
    card.get_by_role("button", name="Allow", exact=True).click()
    expect(status_badge(page)).to_have_text("Testing")  # now it waits for review too
    expect(page).to_have_title("(2) Taskboard")
    board.api("PATCH", f"/api/tasks/{reviewed['id']}/status", {"status": "done"})
    expect(page).to_have_title("(1) Taskboard")
    button.click()
    expect(page.get_by_role("dialog").get_by_test_id("needs-entry")).to_have_text(
        re.compile("Add a greeting function.*waiting for your review"))


def deliver_push(context, page, board, payload) -> None:
    """Hand payload to the service worker's push event (DevTools'
    ServiceWorker.deliverPushMessage)."""
    cdp = context.new_cdp_session(page)
    registrations = []
    cdp.on("ServiceWorker.workerRegistrationUpdated",
           lambda event: registrations.extend(event["registrations"]))
    cdp.send("ServiceWorker.enable")
    page.wait_for_function("() => navigator.serviceWorker.controller !== null")
    for _ in range(1000):  # each round trip lets the session's events arrive; no sleeping
        if [r for r in registrations if not r["isDeleted"]]:
            break
        page.evaluate("() => navigator.serviceWorker.ready.then(() => true)")
    registration = next(r for r in registrations if not r["isDeleted"])
    cdp.send("ServiceWorker.deliverPushMessage", {
        "origin": board.url, "registrationId": registration["registrationId"],
        "data": json.dumps(payload)})
    cdp.detach()


def test_a_push_shows_a_notification_that_answered_replaces(board, context, page):
    context.grant_permissions(["notifications"], origin=board.url)
    controlled(page, board)
    approval = {"kind": "approval", "title": "Demo · DEMO-1 asks to use Edit",
                "body": "Edit: NOTES.md", "tag": "approval-99", "url": "/#/tasks/1?approval=99",
                "approvalId": 99, "token": "not-a-real-token", "needsYou": 3}
    deliver_push(context, page, board, approval)
    (shown,) = notifications_once(page, "approval-99", "list.length === 1")
    assert (shown["title"], shown["body"]) == (approval["title"], approval["body"])
    assert shown["actions"] == ["allow", "deny"]
    assert shown["requireInteraction"] is True and shown["silent"] is False
    assert shown["data"]["token"] == "not-a-real-token"
    answered = {"kind": "answered", "title": "Answered: Demo · DEMO-1",
                "body": "Allowed on the laptop",
                "tag": "approval-99", "url": "/#/tasks/1", "approvalId": 99, "needsYou": 2}
    deliver_push(context, page, board, answered)
    (replaced,) = notifications_once(page, "approval-99",
                                     "list.length === 1 && list[0].data.kind === 'answered'")
    assert replaced["title"] == answered["title"]
    assert replaced["silent"] is True and replaced["actions"] == []
    assert replaced["requireInteraction"] is False


def test_act_with_a_wrong_token_leaves_the_approval_and_says_the_link_expired(board, context,
                                                                             page):
    context.grant_permissions(["notifications"], origin=board.url)
    task = demo_task(board, "Add a greeting function")
    controlled(page, board)
    start(board, task)
    expect(page.get_by_test_id("needs-you-count")).to_have_text("1")
    approval = pending_approval(board, task["id"])
    worker = context.service_workers[0]
    data = {"kind": "approval", "title": "Demo asks", "body": "Edit",
            "tag": f"approval-{approval['id']}",
            "approvalId": approval["id"], "token": "x" * 43}
    answer = worker.evaluate("([data]) => act(data, 'allow')", [data])
    assert answer == {"outcome": "expired", "status": 403}
    (shown,) = page.evaluate(NOTIFICATIONS, f"approval-{approval['id']}")
    assert shown["title"].startswith("Link expired")
    still = board.api("GET", f"/api/tasks/{task['id']}/approvals")
    assert [a["status"] for a in still if a["id"] == approval["id"]] == ["pending"]


@pytest.fixture
def push_service(monkeypatch):
    """tests/push_service.py's fake push service; this process and the boards trust its CA."""
    if PushService is None:
        pytest.skip("tests/push_service.py is not here yet")
    service = PushService()
    for name, value in service.env.items():
        monkeypatch.setenv(name, value)
    yield service
    service.close()


def test_act_decides_an_approval_with_the_token_of_its_push(push_service, start_board, context,
                                                           page):
    board = start_board()  # started after push_service: it trusts the service's CA
    phone = push_service.subscribe(name="phone")
    board.api("POST", "/api/push/subscriptions",
              phone.as_json() | {"name": "Phone", "events": ["approval"]})
    task = demo_task(board, "Add a greeting function")
    start(board, task)
    (delivery,) = phone.wait_deliveries(1)
    payload = delivery.payload
    assert payload["kind"] == "approval" and payload["token"]
    context.grant_permissions(["notifications"], origin=board.url)
    controlled(page, board)
    worker = context.service_workers[0]
    answer = worker.evaluate("([data]) => act(data, 'allow')", [payload])
    assert answer == {"outcome": "allowed", "status": 200}
    assert board.wait_status(task["id"], "testing")["status"] == "testing"
    again = worker.evaluate("([data]) => act(data, 'deny')", [payload])  # single use
    assert again["outcome"] in ("answered", "expired"), again
    (decided,) = [a for a in board.api("GET", f"/api/tasks/{task['id']}/approvals")
                  if a["id"] == payload["approvalId"]]
    assert decided["status"] != "pending" and decided.get("decidedBy") == "push"


#: A browser's push subscription, for Chromium without a push service: the page's
#: pushManager hands out this one (its keys are a real P-256 point and auth secret).
FAKE_PUSH = """
(() => {
  const sub = (endpoint, key) => ({
    endpoint, options: {applicationServerKey: key, userVisibleOnly: true},
    toJSON: () => ({endpoint, expirationTime: null, keys: {p256dh: %(p256dh)s, auth: %(auth)s}}),
    unsubscribe: async () => { localStorage.removeItem("fake-push"); return true; },
  });
  PushManager.prototype.getSubscription = async function () {
    const saved = localStorage.getItem("fake-push");
    return saved ? sub(saved, null) : null;
  };
  PushManager.prototype.subscribe = async function (options) {
    localStorage.setItem("fake-push", %(endpoint)s);
    return sub(%(endpoint)s, options.applicationServerKey);
  };
})();
"""


def fake_push(page, endpoint, keys) -> None:
    page.add_init_script(FAKE_PUSH % {"endpoint": json.dumps(endpoint),
                                      "p256dh": json.dumps(keys["p256dh"]),
                                      "auth": json.dumps(keys["auth"])})


def test_notifications_settings_turn_on_test_save_and_turn_off(push_service, start_board,
                                                               context, page, console_errors,
                                                               screenshot):
    board = start_board()
    device = push_service.subscribe(name="this browser")
    other = push_service.subscribe(name="phone")
    board.api("POST", "/api/push/subscriptions",
              other.as_json() | {"name": "Pixel", "events": ["approval", "question"]})
    context.grant_permissions(["notifications"], origin=board.url)
    fake_push(page, device.endpoint, device.as_json()["keys"])
    page.goto(f"{board.url}/#/settings")
    live(page)
    page.get_by_role("link", name="Set up notifications").click()
    here = page.get_by_test_id("push-device")
    expect(here.get_by_test_id("push-state")).to_have_text(re.compile("^Off"))
    name = here.get_by_label("Device name")
    expect(name).to_have_value(re.compile(r"^Chrom\w* on \w+"))
    events = here.get_by_role("group", name="Notify me when").get_by_role("checkbox")
    values = board.api("GET", "/api/openapi.json")["components"]["schemas"]["PushSubscription"][
        "properties"]["events"]["items"]["enum"]
    expect(events).to_have_count(len(values))  # the list is the server's
    name.fill("Work laptop")
    here.get_by_label("a plan is ready").uncheck()
    here.get_by_role("button", name="Turn on for this device").click()
    expect(here.get_by_test_id("push-state")).to_have_text(re.compile("^On"))
    mine = page.get_by_test_id("push-subscription").filter(has=page.get_by_test_id("this-device"))
    expect(mine).to_contain_text("Work laptop")
    expect(mine).not_to_contain_text("a plan is ready")
    expect(page.get_by_test_id("push-subscription")).to_have_count(2)
    here.get_by_role("button", name="Send a test").click()
    expect(here.get_by_test_id("push-result")).to_have_text(
        "Sent: the push service accepted it (201).")
    (delivery,) = device.wait_deliveries(1)
    assert delivery.payload["kind"] == "test"
    screenshot(page, "notifications-settings", full_page=True)
    # a 400 naming a field is shown next to it
    console_errors.allow(r"status of 400 \(Bad Request\).*/api/push/subscriptions")
    page.route("**/api/push/subscriptions", lambda route: route.fulfill(
        status=400, content_type="application/json",
        body=json.dumps({"error": "name is taken", "code": "validation_error", "field": "name"}))
        if route.request.method == "POST" else route.continue_())
    name.fill("Work laptop 2")
    here.get_by_role("button", name="Save").click()
    expect(here.locator("[data-field=name] .field-error")).to_have_text("name is taken")
    page.unroute("**/api/push/subscriptions")
    here.get_by_role("button", name="Save").click()
    expect(mine).to_contain_text("Work laptop 2")
    here.get_by_role("button", name="Turn off").click()
    expect(here.get_by_test_id("push-state")).to_have_text(re.compile("^Off"))
    expect(page.get_by_test_id("push-subscription")).to_have_count(1)
    expect(page.get_by_test_id("push-subscription")).to_contain_text("Pixel")
    assert [s["name"] for s in board.api("GET", "/api/push/subscriptions")] == ["Pixel"]


def test_notifications_settings_say_why_push_cannot_work_without_https(board, page):
    page.add_init_script("Object.defineProperty(window, 'isSecureContext', {value: false})")
    page.goto(f"{board.url}/#/settings/notifications")
    live(page)
    why = page.get_by_test_id("push-unavailable")
    expect(why).to_contain_text("HTTPS")
    expect(why).to_contain_text("README")
    expect(page.get_by_role("heading", name="Devices")).to_be_visible()  # still listed


def no_sideways_scroll(page):
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_phone_screenshots_of_the_inbox_and_an_approval(board, phone, screenshot):
    page = phone.new_page()
    assert page.viewport_size == {"width": PHONE[0], "height": PHONE[1]}
    _, _, approval = waiting(board, page)
    header = page.locator("#app-header")
    expect(header.get_by_test_id("needs-you")).to_be_in_viewport()
    no_sideways_scroll(page)
    page.get_by_test_id("needs-you").click()
    expect(page.get_by_role("dialog").get_by_test_id("needs-entry")).to_have_count(2)
    no_sideways_scroll(page)
    screenshot(page, "phone-inbox")
    page.get_by_role("dialog").get_by_test_id("needs-entry").first.get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"\?approval={approval['id']}$"))
    card = page.get_by_test_id("approval")
    expect(card).to_be_in_viewport()
    for name in ("Allow", "Deny"):
        expect(card.get_by_role("button", name=name, exact=True)).to_be_in_viewport()
    no_sideways_scroll(page)
    screenshot(page, "phone-approval")
