"""The board for every person and place: Turkish, a phone, the keyboard, and a board
opened from another machine (desktop commands refused). Every test fails on a console
error or page error.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import json
import re

import pytest
from playwright.sync_api import expect

from browser_helpers import (
    agent_log,
    auto_accept,
    card,
    column,
    demo_task,
    live,
    open_board,
    open_task,
    status_badge,
    task_heading,
)

pytestmark = pytest.mark.usefixtures("console_errors")

LOCAL_ONLY = "Only available on the machine running Taskboard."


def test_switch_to_turkish_in_the_settings(board, page, context, screenshot):
    project = board.demo_project()
    open_board(page, board, project["id"])
    settings = context.new_page()  # a second tab: the board in the first one follows live
    settings.goto(f"{board.url}/#/settings")
    live(settings)
    expect(settings.get_by_role("heading", name="Settings", level=1)).to_be_visible()
    screenshot(settings, "settings")
    settings.get_by_label("Language").select_option(label="Türkçe")
    settings.get_by_role("button", name="Save").click()
    expect(settings.get_by_role("heading", name="Ayarlar", level=1)).to_be_visible()
    expect(settings.get_by_label("Dil")).to_have_value("tr")
    # the other tab, untouched, changed language through /ws
    for name in ("Bekleyen", "Devam ediyor", "Test", "Tamamlandı", "Başarısız"):
        expect(column(page, name)).to_be_visible()
    expect(page.get_by_role("link", name="Projeler", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Yeni görev")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("lang", "tr")
    screenshot(page, "board-tr")
    settings.get_by_label("Dil").select_option(label="English")
    settings.get_by_role("button", name="Kaydet").click()
    expect(settings.get_by_role("heading", name="Settings", level=1)).to_be_visible()
    expect(column(page, "Backlog")).to_be_visible()
    assert board.api("GET", "/api/settings")["language"] == "en"


def test_keyboard_reaches_moves_and_opens_a_card(board, page):
    project = auto_accept(board)
    open_board(page, board, project["id"])
    first = column(page, "Backlog").get_by_role("article").first
    for _ in range(40):  # Tab from the top of the page until a card has the focus
        page.keyboard.press("Tab")
        if first.evaluate("el => el === document.activeElement"):
            break
    else:
        raise AssertionError("no task card can be reached with Tab")
    name = first.get_attribute("aria-label")
    task = next(t for t in board.tasks(project["id"]) if name == f"{t['task_key']} {t['title']}")
    page.keyboard.press("Alt+ArrowRight")  # to the next column: In progress
    moved = card(column(page, "In progress"), task["title"])
    expect(moved).to_be_visible()
    expect(moved).to_be_focused()  # the focus follows the card
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"#/tasks/{task['id']}$"))
    expect(task_heading(page, task["title"])).to_be_visible()
    board.wait_status(task["id"], "testing")
    expect(status_badge(page)).to_have_text("Testing")
    # the detail's tabs follow the arrow keys
    page.get_by_role("tab", name="Log").focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name="Events")).to_be_focused()
    expect(page.get_by_role("tab", name="Events")).to_have_attribute("aria-selected", "true")


def test_phone_sized_board(board, phone, screenshot):
    page = phone.new_page()
    title = "Document the app in the README"
    task = demo_task(board, title)
    page.goto(board.url)
    live(page)
    screenshot(page, "phone-dashboard")
    open_board(page, board, task["project_id"])
    screenshot(page, "phone-board")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, \
        "the page itself scrolls sideways on a phone"
    for name in ("Backlog", "In progress", "Testing", "Done", "Failed"):
        heading = column(page, name).get_by_role("heading")
        heading.scroll_into_view_if_needed()
        expect(heading).to_be_in_viewport()
    backlog = column(page, "Backlog")
    backlog.get_by_role("heading").scroll_into_view_if_needed()
    card(backlog, title).get_by_role("combobox", name=re.compile("Move .* to another column")) \
        .select_option(label="Done")
    done = column(page, "Done")
    expect(card(done, title)).to_be_visible()
    board.wait_status(task["id"], "done")  # the card moves at once, the API call follows
    card(done, title).get_by_role("link", name=title).tap()
    expect(task_heading(page, title)).to_be_visible()
    expect(status_badge(page)).to_have_text("Done")
    screenshot(page, "phone-task")
    page.get_by_label("Move to").select_option(label="Backlog")
    expect(status_badge(page)).to_have_text("Backlog")


def test_desktop_features_explain_when_refused(start_board, page, console_errors, screenshot):
    """From another machine the desktop commands answer 403 local_only: the task detail
    says so instead of breaking (faked here: the request is answered in the browser)."""
    board = start_board(pace=1)  # the run lasts a few seconds: Stop is offered meanwhile
    task = demo_task(board, "Add a greeting function")
    refused = []

    def refuse(route):
        refused.append(route.request.url.rsplit("/", 1)[1])
        route.fulfill(status=403, content_type="application/json", body=json.dumps(
            {"error": "desktop commands are only answered on the machine itself",
             "code": "local_only"}))

    page.route("**/api/desktop/**", refuse)
    console_errors.allow(r"status of 403 \(Forbidden\)")  # the refusals themselves
    board.api("PATCH", f"/api/tasks/{task['id']}/status", {"status": "in_progress"})
    open_task(page, board, task)
    expect(status_badge(page)).to_have_text("In progress")
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_text(LOCAL_ONLY).first).to_be_visible()
    assert refused == ["stop_task"]
    # the actions that cannot work from here are gone, and the page says why
    for name in ("Stop", "Restart", "Request changes"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    expect(page.locator(".detail-actions")).to_contain_text(LOCAL_ONLY)
    page.get_by_role("tab", name="Diff").click()
    expect(page.get_by_role("tabpanel")).to_have_text(LOCAL_ONLY)
    page.get_by_role("tab", name="Events").click()
    expect(page.get_by_role("tabpanel")).to_have_text(LOCAL_ONLY)
    # what does not need the machine still works: the log and moving the task
    page.get_by_role("tab", name="Log").click()
    expect(agent_log(page)).to_contain_text("Let me look at the repository.")
    screenshot(page, "task-detail-local-only")
    page.get_by_label("Move to").select_option(label="Backlog")  # stops the agent too
    sure = page.get_by_role("dialog")  # asked only while the run still runs: either comes
    expect(sure.or_(status_badge(page).filter(has_text="Backlog"))).to_be_visible()
    if sure.count():
        sure.get_by_role("button", name="Stop and move").click()
    expect(status_badge(page)).to_have_text("Backlog")
    board.wait_status(task["id"], "backlog")


def test_every_string_of_every_view_has_a_turkish_text(board, page):
    """Each view registers its strings when it loads: visit them all, then ask."""
    project = board.demo_project()["id"]
    task = board.tasks(project)[0]["id"]
    routes = ["/", "/attention", "/usage", "/settings", f"/tasks/{task}"] + [
        f"/projects/{project}{tab}" for tab in (
            "", "/plan", "/stats", "/pipeline", "/agents", "/templates", "/snippets",
            "/webhooks", "/instructions", "/settings")]
    page.goto(board.url)
    live(page)
    for route in routes:
        page.evaluate("hash => { location.hash = hash; }", f"#{route}")
        page.wait_for_function("hash => document.querySelector('#view').dataset.route === hash",
                               arg=f"#{route}")
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []


def test_snippet_and_webhook_lists_follow_the_api_and_delete_after_asking(board, page):
    project = board.demo_project()
    base = f"/api/projects/{project['id']}"
    for path in ("/snippets", "/webhooks"):
        for item in board.api("GET", base + path):
            board.api("DELETE", f"{base}{path}/{item['id']}")
    page.goto(f"{board.url}/#/projects/{project['id']}/snippets")
    live(page)
    items = page.locator(".item-list")
    expect(items).to_contain_text("No snippets yet.")
    board.api("POST", base + "/snippets", {"name": "Style", "content": "Use tabs."})
    expect(page.get_by_role("heading", name="Style", level=3)).to_be_visible()  # over /ws
    page.get_by_role("button", name="Delete: Style").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(page.get_by_text("Snippet Style deleted")).to_be_visible()
    expect(items).to_contain_text("No snippets yet.")
    assert board.api("GET", base + "/snippets") == []

    page.goto(f"{board.url}/#/projects/{project['id']}/webhooks")
    hook = board.api("POST", base + "/webhooks", {
        "platform": "custom", "url": "http://127.0.0.1:9/hook", "events": ["task:completed"]})
    article = page.locator(f"[data-webhook='{hook['id']}']")
    expect(article).to_contain_text("http://127.0.0.1:9/hook")
    article.get_by_role("button", name="Delete", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("http://127.0.0.1:9/hook")
    dialog.get_by_role("button", name="Cancel").click()  # asked, refused: it stays
    expect(article).to_be_visible()
    article.get_by_role("button", name="Delete", exact=True).click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(article).to_have_count(0)
    assert board.api("GET", base + "/webhooks") == []


#: Branch names on either side of the server's rule (git's, less what git would refuse).
BRANCH_NAMES = ["main", "release/2.0", "feature/login-form", "v1.2_fix", "feature/", "release.",
                "-main", "a..b", "a//b", "has space", "x" * 201]


def test_branch_field_refuses_what_the_server_refuses(board, page):
    """The project form checks the base branch with the server's own pattern (from
    /api/openapi.json): a name the server would refuse is refused before it is sent."""
    project = board.demo_project()
    path = f"/api/projects/{project['id']}"
    accepted = {}
    for name in BRANCH_NAMES:  # what the server says, one name at a time
        response = board.session.put(board.url + path, json={"prBaseBranch": name}, timeout=10)
        assert response.status_code in (200, 400), response.text
        accepted[name] = response.status_code == 200
    assert not accepted["feature/"] and not accepted["release."] and accepted["release/2.0"]
    board.api("PUT", path, {"prBaseBranch": "main"})
    page.goto(f"{board.url}/#/projects/{project['id']}/settings")
    live(page)
    field = page.get_by_label("Base branch")
    expect(field).to_have_value("main")
    for name in ("feature/", "release."):
        field.fill(name)
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_text("Not a valid git branch name.")).to_be_visible()
        expect(field).to_have_attribute("aria-invalid", "")
    assert board.api("GET", path)["prBaseBranch"] == "main"  # nothing was sent
    field.fill("release/2.0")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved", exact=True)).to_be_visible()
    assert board.api("GET", path)["prBaseBranch"] == "release/2.0"
    # and every other name: the board's check and the server's answer agree
    board_accepts = page.evaluate("""async (names) => {
        const { patternOf } = await import("/static/js/schema.js");
        const pattern = patternOf("Project", "prBaseBranch");
        return Object.fromEntries(names.map((name) => [name, pattern.test(name)]));
    }""", BRANCH_NAMES)
    assert board_accepts == accepted


def open_from_the_worker(page, url):
    """Open url with the board's service worker in control: the page comes from the worker's
    copy, which carries none of the answers a navigation gets in it (first_answers), so that
    it asks for /api/openapi.json (which the test fakes)."""
    page.goto(url)
    page.wait_for_function("() => navigator.serviceWorker.controller !== null")
    page.reload()


def test_columns_and_models_follow_the_servers_api_description(board, page):
    """The status columns and the model choices are the server's lists, in its order: a
    server that publishes other lists gets a board that shows them (faked here by answering
    /api/openapi.json in the browser with an edited copy of the real document)."""
    document = board.api("GET", "/api/openapi.json")
    task = document["components"]["schemas"]["Task"]["properties"]
    statuses = list(reversed(task["status"]["enum"]))
    task["status"]["enum"] = statuses
    task["model"]["enum"] = [m for m in task["model"]["enum"] if m != "model_small"]
    page.route("**/api/openapi.json", lambda route: route.fulfill(json=document))
    project = board.demo_project()
    open_from_the_worker(page, f"{board.url}/#/projects/{project['id']}")
    live(page)
    names = {"backlog": "Backlog", "in_progress": "In progress", "testing": "Testing",
             "done": "Done", "failed": "Failed"}
    expect(page.locator(".board .col-head")).to_have_text(
        [re.compile(rf"^{names[s]}") for s in statuses])
    page.get_by_role("button", name="New task").click()
    model = page.get_by_role("dialog").get_by_label("Model")
    expect(model.locator("option")).to_have_text(["Large", "Medium"])
    filters = page.get_by_role("combobox", name="All models")
    expect(filters.locator("option")).to_have_text(["All models", "Large", "Medium"])


def test_the_board_says_why_it_cannot_start_without_the_api_description(board, page,
                                                                        console_errors):
    """Without /api/openapi.json the board has no lists, limits or patterns: it says so
    (instead of showing forms that check nothing) and starts once the document loads."""
    console_errors.allow(r"status of 503 \(Service Unavailable\)")
    failing = [True]

    def answer(route):
        if failing[0]:
            route.fulfill(status=503, json={"error": "the server is starting", "code": "busy"})
        else:
            route.continue_()
    page.route("**/api/openapi.json", answer)
    open_from_the_worker(page, board.url)
    alert = page.get_by_test_id("schema-error")
    expect(alert).to_have_attribute("role", "alert")
    expect(alert.get_by_role("heading", name="The board cannot start")).to_be_visible()
    expect(alert).to_contain_text("/api/openapi.json")
    expect(alert).to_contain_text("the server is starting")
    expect(page.get_by_role("heading", name="Projects", level=1)).to_have_count(0)
    failing[0] = False
    alert.get_by_role("button", name="Try again").click()
    expect(page.get_by_role("heading", name="Projects", level=1)).to_be_visible()
    expect(alert).to_have_count(0)
