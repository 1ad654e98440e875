"""A board of many cards in Chromium (issue 33): each column renders a page of its cards
with "Show more", its count stays the whole column's, and filters, live updates, keyboard
moves and drag and drop reach the cards that are not rendered yet.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""
import pytest
from playwright.sync_api import expect

from browser_helpers import card, code_project, column, open_board

pytestmark = pytest.mark.usefixtures("console_errors")

#: The cards a column renders before "Show more" (static/js/views/board.js).
PAGE = 50


@pytest.fixture
def crowded(start_board, tmp_path):
    """A board whose project has 120 tasks in Backlog and 60 in Done (no agent runs)."""
    board = start_board(demo=False)
    project = code_project(board, tmp_path, "Big")
    tasks = [board.api("POST", f"/api/projects/{project['id']}/tasks",
                       {"title": f"Backlog task {n:03d}"}) for n in range(120)]
    for n in range(60):
        done = board.api("POST", f"/api/projects/{project['id']}/tasks",
                         {"title": f"Done task {n:03d}"})
        board.api("PATCH", f"/api/tasks/{done['id']}/status", {"status": "done"})
    return board, project, tasks


def cards_in(page, name):
    return column(page, name).get_by_role("article")


def test_a_long_column_renders_a_page_and_shows_more_on_demand(crowded, page):
    board, project, _ = crowded
    open_board(page, board, project["id"])
    backlog = column(page, "Backlog")
    expect(backlog.get_by_role("heading")).to_have_text("Backlog120")
    expect(cards_in(page, "Backlog")).to_have_count(PAGE)
    more = backlog.get_by_test_id("show-more")
    expect(more).to_have_text("Show 50 more (70 not shown)")
    more.click()
    expect(cards_in(page, "Backlog")).to_have_count(2 * PAGE)
    expect(more).to_have_text("Show 20 more (20 not shown)")
    more.click()
    expect(cards_in(page, "Backlog")).to_have_count(120)
    expect(backlog.get_by_test_id("show-more")).to_have_count(0)
    expect(column(page, "Done").get_by_role("heading")).to_have_text("Done60")


def test_cards_not_rendered_yet_are_found_by_a_filter_and_follow_live_moves(crowded, page):
    board, project, tasks = crowded
    open_board(page, board, project["id"])
    hidden = tasks[-1]  # the last of 120: not among the first page
    expect(card(column(page, "Backlog"), hidden["title"])).to_have_count(0)
    page.get_by_role("searchbox", name="Search tasks").fill(hidden["title"])
    expect(card(column(page, "Backlog"), hidden["title"])).to_be_visible()
    expect(column(page, "Backlog").get_by_role("heading")).to_have_text("Backlog1/120")
    page.get_by_role("button", name="Clear filters").click()
    expect(cards_in(page, "Backlog")).to_have_count(PAGE)
    # an agent (here: the API) moves a card nobody has seen: it shows where it lands
    board.api("PATCH", f"/api/tasks/{tasks[-2]['id']}/status", {"status": "testing"})
    expect(card(column(page, "Testing"), tasks[-2]["title"])).to_be_visible()
    expect(column(page, "Backlog").get_by_role("heading")).to_have_text("Backlog119")


def test_a_card_moved_into_a_long_column_stays_in_view(crowded, page):
    board, project, tasks = crowded
    board.api("PATCH", f"/api/tasks/{tasks[0]['id']}/status", {"status": "testing"})
    open_board(page, board, project["id"])
    moved = card(column(page, "Testing"), tasks[0]["title"])
    moved.focus()
    page.keyboard.press("Alt+ArrowRight")  # into Done, whose first page is full
    landed = card(column(page, "Done"), tasks[0]["title"])
    expect(landed).to_be_visible()
    expect(landed).to_be_focused()
    expect(column(page, "Done").get_by_role("heading")).to_have_text("Done61")
    dragged = card(column(page, "Backlog"), tasks[1]["title"])
    dragged.drag_to(column(page, "Done").get_by_role("heading"))
    expect(card(column(page, "Done"), tasks[1]["title"])).to_be_visible()
    expect(column(page, "Done").get_by_role("heading")).to_have_text("Done62")
    assert board.task(tasks[1]["id"])["status"] == "done"
    # of 180 tasks, the page of each long column and the two moved in (if not on it already)
    rendered = page.locator(".task-card").count()
    assert 2 * PAGE <= rendered <= 2 * PAGE + 2, rendered


def test_the_first_data_requests_start_before_the_modules_have_loaded(crowded, page):
    """boot.js asks for the board's data at once: with main.js held back, the tasks of the
    board in the address are asked for all the same (and the board uses that answer); the
    rest of the first paint's data came in the page."""
    board, project, _ = crowded
    held = []
    page.route("**/static/js/main.js", lambda route: held.append(route))
    asked = []
    page.on("request", lambda r: asked.append(r.url.split("/api/", 1)[1])
            if "/api/" in r.url else None)
    tasks = f"projects/{project['id']}/tasks"
    # either may be asked for first; the tasks are asked for while main.js is held back
    with page.expect_request("**/static/js/main.js"), \
            page.expect_request(lambda r: r.url.endswith("/api/" + tasks)):
        page.goto(f"{board.url}/#/projects/{project['id']}", wait_until="commit")
    page.evaluate("0")  # one more round trip: the route's handler has run
    assert held, "main.js was not held back"
    held[0].continue_()
    expect(column(page, "Backlog").get_by_role("heading")).to_have_text("Backlog120")
    assert asked.count(tasks) == 1, asked
    # the API description, the settings and the projects came in the page itself
    assert not {"openapi.json", "settings"} & set(asked), asked


def test_the_service_worker_serves_the_page_of_its_build(crowded, page):
    """With the worker in control the page comes from its cache: one round trip less."""
    board, project, _ = crowded
    open_board(page, board, project["id"])
    page.wait_for_function("() => navigator.serviceWorker.controller !== null")
    asked = []
    page.context.on("request", lambda r: asked.append(r.url) if r.url == board.url + "/" else None)
    response = page.reload()
    assert response.from_service_worker
    assert len(asked) == 1, asked  # the page's own navigation; the worker did not ask again
    expect(column(page, "Backlog").get_by_role("heading")).to_have_text("Backlog120")
