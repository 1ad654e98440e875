"""The board in a real browser (Debian's Chromium through Playwright) against a real
`python taskboard.py` subprocess: boot, the /ws connection indicator, login, the health
banner, security headers, live language switch and the needs-attention count.

Fixtures: tests/browser_fixtures.py. Every test fails on a console error or page error.
"""

import re
import time

import pytest
from playwright.sync_api import expect

from browser_helpers import auto_accept, card, column

pytestmark = pytest.mark.usefixtures("console_errors")

TOKEN_HINT = "This board needs its token"
#: Records every text of the connection indicator and whether the banner was ever shown.
RECORD_CONNECTION = """
window.connectionHistory = {texts: [], banner: []};
new MutationObserver(() => {
  const texts = window.connectionHistory.texts;
  const text = document.querySelector("[data-testid=connection]")?.textContent;
  if (text && texts[texts.length - 1] !== text) texts.push(text);
  const banner = document.querySelector("#health-banner");
  if (banner && !banner.hidden) window.connectionHistory.banner.push(banner.textContent);
}).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
"""


def live(page):
    expect(page.get_by_test_id("connection")).to_have_text("Live")


def test_boot_shows_live_connection(board, page):
    response = page.goto(board.url)
    assert response.ok
    connection = page.get_by_test_id("connection")
    expect(connection).to_have_text("Live")
    expect(connection).to_have_attribute("role", "status")
    expect(page).to_have_title("Taskboard")
    expect(page.get_by_role("heading", name="Projects")).to_be_visible()  # the dashboard
    nav = page.get_by_role("navigation").first
    for name in ("Projects", "Testing & failed", "Agent usage", "Settings"):
        expect(nav.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.locator("#health-banner")).to_be_hidden()  # the demo agent is found


def test_pages_are_sent_with_security_headers(board, page):
    for path in ("/", "/login", "/static/js/main.js"):
        response = page.goto(board.url + path)
        headers = response.headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
        assert "unsafe-inline" not in csp, path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["referrer-policy"] == "no-referrer", path


def test_connection_indicator_follows_the_server(start_board, page, console_errors):
    """Offline with a banner when the server goes away; Live again when it is back."""
    board = start_board()
    page.goto(board.url)
    connection = page.get_by_test_id("connection")
    expect(connection).to_have_text("Live")
    expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    port = board.url.rsplit(":", 1)[1]
    console_errors.allow(r"WebSocket connection to .* failed")
    console_errors.allow(r"ERR_CONNECTION_REFUSED")
    board.stop()
    expect(connection).to_have_text("Offline — reconnecting")
    expect(page.get_by_role("alert").filter(
        has_text="The server cannot be reached.")).to_be_visible()
    start_board("--port", port)  # the same address again (argparse: the last --port wins)
    expect(connection).to_have_text("Live", timeout=20_000)
    expect(page.locator("#health-banner")).to_be_hidden()


def test_login_page_when_a_token_is_required(token_board, page, console_errors, screenshot):
    console_errors.allow(r"status of 401 \(Unauthorized\)")  # the API refusing, before login
    page.goto(token_board.url + "/#/settings")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    expect(page.get_by_text(TOKEN_HINT)).to_be_visible()
    token = page.get_by_label("Token")
    expect(token).to_be_focused()
    token.fill("not-the-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_have_text("That token is not right.")
    screenshot(page, "login")
    token.fill(token_board.token)
    token.press("Enter")  # the keyboard submits the form too
    expect(page).to_have_url(token_board.url + "/#/settings")  # back where the visitor was
    expect(page.get_by_test_id("connection")).to_have_text("Live")


def test_login_waits_for_its_script(token_board, page, console_errors):
    """Until login.js runs, Log in cannot submit: a native submit would put the token in
    the address bar and show no error."""
    console_errors.allow(r"status of 401 \(Unauthorized\)")
    held = []
    page.route("**/static/login.js", lambda route: held.append(route))
    with page.expect_request("**/static/login.js"):
        page.goto(token_board.url + "/login", wait_until="commit")
    token = page.get_by_label("Token")
    token.fill("not-the-token")
    token.press("Enter")
    expect(page.get_by_role("button", name="Log in")).to_be_disabled()
    assert "not-the-token" not in page.url
    held[0].continue_()
    page.get_by_role("button", name="Log in").click()  # waits until it is enabled
    expect(page.get_by_role("alert")).to_have_text("That token is not right.")
    assert "not-the-token" not in page.url


def test_the_printed_sign_in_url_opens_the_board(start_board, page, console_errors):
    board = start_board(token="generate")
    page.goto(board.sign_in_url)
    expect(page).to_have_url(board.url + "/")  # the token left the address bar
    expect(page.get_by_test_id("connection")).to_have_text("Live")
    expect(page.get_by_text("Demo").first).to_be_visible()


def test_health_banner_when_the_agent_command_is_missing(missing_agent_board, page,
                                                         screenshot):
    page.goto(missing_agent_board.url)
    banner = page.locator("#health-banner")
    expect(banner).to_be_visible()
    expect(banner).to_have_attribute("role", "alert")
    expect(banner).to_contain_text("agent CLI is not found")
    expect(banner).to_contain_text("--agent-command")
    screenshot(page, "health-banner")
    expect(page.get_by_test_id("connection")).to_have_text("Live")


def test_language_switch_from_the_api_is_live(board, page):
    page.goto(board.url)
    header = page.locator("#app-header")
    expect(header.get_by_role("link", name="Projects", exact=True)).to_be_visible()
    expect(page.get_by_test_id("connection")).to_have_text("Live")
    board.api("PUT", "/api/settings", {"language": "tr"})  # e.g. from another tab
    expect(header.get_by_role("link", name="Projeler", exact=True)).to_be_visible()
    expect(header.get_by_role("link", name="Ayarlar", exact=True)).to_be_visible()
    expect(page.get_by_test_id("connection")).to_have_text("Canlı")
    expect(page.locator("html")).to_have_attribute("lang", "tr")
    board.api("PUT", "/api/settings", {"language": "en"})
    expect(header.get_by_role("link", name="Projects", exact=True)).to_be_visible()
    expect(page.locator("html")).to_have_attribute("lang", "en")


def test_page_title_counts_tasks_that_need_attention(board, page):
    """A task in Testing waits for a person's review: "(1) Taskboard", live. The title counts
    the "Needs you" inbox (issue 23); a failed task is counted by "Testing & failed"."""
    project = board.demo_project()
    first, second = board.tasks(project["id"])[:2]
    page.goto(f"{board.url}/#/projects/{project['id']}")
    live(page)
    expect(page).to_have_title("Taskboard")
    board.api("PATCH", f"/api/tasks/{first['id']}/status", {"status": "testing"})
    expect(page).to_have_title("(1) Taskboard")
    board.api("PATCH", f"/api/tasks/{second['id']}/status", {"status": "failed"})
    expect(page.get_by_test_id("attention-badge")).to_have_text("2")
    expect(page).to_have_title("(1) Taskboard")
    page.get_by_role("link", name=re.compile("^Testing & failed")).click()
    expect(page.get_by_test_id("attention-task")).to_have_count(2)
    board.api("PATCH", f"/api/tasks/{first['id']}/status", {"status": "done"})
    expect(page.get_by_test_id("attention-task")).to_have_count(1)
    expect(page).to_have_title("Taskboard")


def test_a_move_whose_event_outruns_the_task_list_is_shown_not_undone(board, page):
    """The board asks for a project's tasks; a move is made after the list was answered and
    its event reaches the page before the list does. The stale list must not put the task
    back where it was (the event, for a project not loaded yet, was not applied): the board
    reads the list again and shows the move."""
    project = board.demo_project()
    task = next(t for t in board.tasks(project["id"]) if t["status"] == "backlog")
    held = []

    def answer_first_now_deliver_later(route):
        if held:
            route.continue_()
        else:
            held.append((route, route.fetch()))
    page.route(f"**/api/projects/{project['id']}/tasks", answer_first_now_deliver_later)
    page.goto(f"{board.url}/#/projects/{project['id']}")
    live(page)
    wait_until(page, lambda: held, "the board to ask for the project's tasks")
    board.api("PATCH", f"/api/tasks/{task['id']}/status", {"status": "testing"})
    expect(page).to_have_title("(1) Taskboard")  # the move's event has reached the page
    route, stale = held[0]
    route.fulfill(response=stale)
    expect(card(column(page, "Testing"), task["title"])).to_be_visible()
    expect(card(column(page, "Backlog"), task["title"])).to_have_count(0)


def wait_until(page, predicate, what, timeout=10.0):
    """Let the page run (its route handlers too) until predicate() holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        page.wait_for_timeout(20)


def test_page_title_counts_attention_on_every_page(board, page):
    """Opened on the dashboard (no board visited yet), the title still counts the tasks
    that wait."""
    project = board.demo_project()
    task = board.tasks(project["id"])[0]
    board.api("PATCH", f"/api/tasks/{task['id']}/status", {"status": "testing"})
    page.goto(board.url)
    live(page)
    expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    expect(page).to_have_title("(1) Taskboard")
    expect(page.get_by_test_id("attention-badge")).to_have_text("1")


def test_connection_stays_live_while_following_a_log(board, page):
    """Following a task's log (the board with a running task, the task page) changes the
    /ws subscription: the indicator must not flash "Offline" nor the banner appear."""
    page.add_init_script(RECORD_CONNECTION)
    project = auto_accept(board)
    task = board.tasks(project["id"])[0]
    page.goto(f"{board.url}/#/projects/{project['id']}")
    live(page)
    board.api("PATCH", f"/api/tasks/{task['id']}/status", {"status": "in_progress"})
    page.get_by_role("article", name=f"{task['task_key']} {task['title']}").click()
    expect(page.get_by_role("log", name="Agent log")).to_contain_text("Simulated work: ")
    board.wait_status(task["id"], "testing")
    history = page.evaluate("window.connectionHistory")
    assert "Offline — reconnecting" not in history["texts"], history
    assert not history["banner"], history
