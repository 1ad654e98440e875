"""End-to-end flows in a real browser against `python taskboard.py --demo`: a project and
its tasks, a card dragged to In progress with the demo agent's log streaming in, review
(request changes, approve) and a plan. Every test fails on a console error or page error.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import re

import pytest
from playwright.sync_api import expect

from browser_helpers import (
    agent_log,
    auto_accept,
    card,
    column,
    demo_task,
    dialog,
    live,
    open_board,
    open_task,
    status_badge,
    task_heading,
)

pytestmark = pytest.mark.usefixtures("console_errors")


def test_create_a_project_and_tasks(board, page, tmp_path, screenshot):
    code = tmp_path / "greeter"
    code.mkdir()
    page.goto(board.url)
    live(page)
    expect(page.get_by_role("link", name=re.compile("^Demo"))).to_be_visible()
    screenshot(page, "dashboard")
    page.get_by_role("button", name="New project").click()
    form = dialog(page, "New project")
    form.get_by_label("Name").fill("Greeter")
    expect(form.get_by_label("Slug")).to_have_value("greeter")  # suggested from the name
    form.get_by_label("Working directory").fill(str(code))
    # not a git repository: the dialog says so as the typing pauses, and creates it without
    expect(form.get_by_text("No branch per task here")).to_be_visible()
    expect(form.get_by_label("Branch and worktree per task")).not_to_be_checked()
    form.get_by_role("button", name="Create project").click()
    expect(form).to_have_count(0)
    expect(page.get_by_role("heading", name="Greeter", level=1)).to_be_visible()
    backlog = column(page, "Backlog")
    expect(backlog).to_contain_text("No tasks")

    page.get_by_role("button", name="New task").click()
    form = dialog(page, "New task")
    expect(form.get_by_label("Title")).to_be_focused()
    form.get_by_label("Title").fill("Say hello")
    form.get_by_label("Description").fill("print('hello')")
    form.get_by_label("Priority").select_option(label="High")
    form.get_by_label("Type", exact=True).select_option(label="Bug fix")
    form.get_by_role("button", name="Create").click()
    expect(form).to_have_count(0)
    expect(card(backlog, "Say hello")).to_be_visible()

    page.get_by_role("button", name="New task").click()
    form = dialog(page, "New task")
    form.get_by_label("Title").fill("Say goodbye")
    form.get_by_label("Title").press("Enter")  # Enter submits the dialog's form
    expect(form).to_have_count(0)
    expect(card(backlog, "Say goodbye")).to_be_visible()

    project = next(p for p in board.api("GET", "/api/projects") if p["slug"] == "greeter")
    assert project["workingDir"] == str(code)
    by_title = {t["title"]: t for t in board.tasks(project["id"])}
    assert set(by_title) == {"Say hello", "Say goodbye"}
    assert by_title["Say hello"]["priority"] == 2
    assert by_title["Say hello"]["task_type"] == "bugfix"
    assert by_title["Say hello"]["description"] == "print('hello')"
    # a task made elsewhere (another tab, an agent, the API) arrives over /ws
    board.api("POST", f"/api/projects/{project['id']}/tasks", {"title": "Wave goodbye"})
    expect(card(backlog, "Wave goodbye")).to_be_visible()
    expect(backlog.get_by_role("heading")).to_have_text(re.compile(r"Backlog\s*3"))
    # and the dashboard counts them
    page.get_by_role("link", name="Projects", exact=True).click()
    expect(page.get_by_role("link", name=re.compile("^Greeter"))).to_contain_text(
        re.compile(r"3\s*Backlog"))


def test_drag_a_card_to_in_progress_and_watch_the_agent(start_board, page, screenshot):
    """The demo as a newcomer meets it: the agent asks a question and asks before its edit
    (issue 31). pace 1: the simulated agent takes a few seconds, so its log is seen
    arriving."""
    board = start_board(pace=1)
    title = "Document the app in the README"
    task = demo_task(board, title)
    open_board(page, board, task["project_id"])
    screenshot(page, "board")
    in_progress = column(page, "In progress")
    card(column(page, "Backlog"), title).drag_to(in_progress)
    moved = card(in_progress, title)
    expect(moved).to_be_visible()
    expect(moved).to_contain_text("running")
    expect(moved.locator(".card-activity")).to_be_visible()  # the agent's latest step
    moved.get_by_role("link", name=title).click()
    expect(task_heading(page, title)).to_be_visible()
    log = agent_log(page)
    expect(log).to_contain_text("Let me look at the repository.")
    # lines arrive while the agent still works: the task is in progress with log lines
    # that are not yet all there
    expect(status_badge(page)).to_have_text("In progress")
    screenshot(page, "task-detail-log")
    question = page.get_by_test_id("approval").filter(has_text="How should the README read?")
    question.get_by_role("button", name=re.compile("^Short")).click(timeout=15_000)
    question.get_by_role("button", name="Send the answer").click()
    edit = page.get_by_test_id("approval").filter(has_text="README.md")
    expect(edit).to_contain_text("The agent asks to use Edit", timeout=15_000)
    edit.get_by_role("button", name="Allow", exact=True).click()
    expect(log).to_contain_text("git commit", timeout=15_000)
    expect(log).to_contain_text("Documented the app in README.md", timeout=15_000)
    expect(status_badge(page)).to_have_text("Testing", timeout=15_000)
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    assert board.task(task["id"])["status"] == "testing"
    screenshot(page, "task-detail-testing")


def test_request_changes_then_approve(board, page, screenshot):
    title = "Add a greeting function"
    auto_accept(board)
    task = demo_task(board, title)
    board.api("PATCH", f"/api/tasks/{task['id']}/status", {"status": "in_progress"})
    board.wait_status(task["id"], "testing")
    open_task(page, board, task)
    expect(status_badge(page)).to_have_text("Testing")
    page.get_by_role("button", name="Request changes").click()
    form = dialog(page, "Request changes")
    feedback = form.get_by_label("What should the agent change?")
    expect(feedback).to_be_focused()
    feedback.fill("Greet in Turkish too: Merhaba, <name>!")
    form.get_by_role("button", name="Send").click()
    expect(form).to_have_count(0)
    expect(page.get_by_text("Feedback sent; the agent resumes.")).to_be_visible()
    # back to work, then ready for review again (the simulated agent takes ~1 s)
    expect(status_badge(page)).to_have_text("In progress")
    expect(status_badge(page)).to_have_text("Testing", timeout=15_000)
    revisions = board.api("GET", f"/api/tasks/{task['id']}/revisions")
    assert [r["feedback"] for r in revisions] == ["Greet in Turkish too: Merhaba, <name>!"]
    page.get_by_role("button", name="Approve").click()
    expect(status_badge(page)).to_have_text("Done")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    assert board.task(task["id"])["status"] == "done"
    # the change request is listed (the page was not reloaded)
    page.get_by_role("tab", name="Revisions").click()
    expect(page.get_by_role("tabpanel")).to_contain_text("Greet in Turkish too: Merhaba, <name>!")
    page.get_by_role("link", name="Demo", exact=True).click()  # the crumb back to the board
    expect(card(column(page, "Done"), title)).to_be_visible()


def test_run_a_plan(start_board, page, screenshot):
    """The simulated agent answers the planner with a 4-task plan (pace 1: the phases last
    long enough to be seen)."""
    board = start_board(pace=1)
    project = board.demo_project()
    page.goto(f"{board.url}/#/projects/{project['id']}/plan")
    live(page)
    page.get_by_label("Topic").fill("Greeting cards")
    page.get_by_label("Granularity").select_option("high-level")
    page.get_by_role("button", name="Start planning").click()
    session = page.get_by_test_id("plan-session")
    expect(session.get_by_role("heading", name="Planning: Greeting cards")).to_be_visible()
    steps = page.get_by_role("list", name="Progress")
    # the believable pace (pace=1) and a busy machine can take longer than the default 5 s
    expect(steps.locator("[aria-current=step]")).to_have_text(re.compile("Exploring the code"),
                                                               timeout=20_000)
    expect(page.get_by_test_id("plan-log")).to_contain_text("Bash")
    screenshot(page, "planning")
    result = page.get_by_test_id("plan-result")
    expect(result).to_contain_text("4 tasks created", timeout=20_000)
    titles = ["Explore how Greeting cards fits the code", "Build the core of Greeting cards",
              "Test Greeting cards", "Document Greeting cards"]
    for title in titles:
        expect(result.get_by_role("link", name=re.compile(re.escape(title)))).to_be_visible()
    screenshot(page, "planning-done")
    page.get_by_role("link", name="Board", exact=True).click()
    backlog = column(page, "Backlog")
    for title in titles:
        expect(card(backlog, title)).to_be_visible()
    tasks = [t for t in board.tasks(project["id"]) if t["title"] in titles]
    assert len(tasks) == 4 and all(t["status"] == "backlog" for t in tasks)
    page.get_by_role("link", name="Stats", exact=True).click()
    expect(page.get_by_text("By status")).to_be_visible()
    screenshot(page, "stats")
