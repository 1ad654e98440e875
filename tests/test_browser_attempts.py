"""Best of N in Chromium (design §18), as a person sees it: "Run with several agents" on the
task page and in a card's menu (a dialog of 2-4 CLI/model/effort rows, the server's refusal
shown in it), the attempts side by side filling in live (status, check, diff size), one
attempt's diff and log, the pick (the picked one marked, the task in testing), the "who gets
picked" table of the agent usage page, and the columns on a phone.

The agent is tests/fake_agent.py: the task's description makes the small model's attempt
write small.txt (the project's check passes) and the medium model's write big.txt and commit
big2.txt (the check fails). Fixtures: tests/browser_fixtures.py; locators:
tests/browser_helpers.py.
"""

import re
import sys

import pytest
from playwright.sync_api import expect

from browser_helpers import card, column, dialog, live, open_board, open_task, status_badge
from conftest import FAKE_AGENT, make_repo

pytestmark = pytest.mark.usefixtures("console_errors")

#: How long both attempts may take to run, be checked and be judged.
FLOW = 30_000
#: Each attempt acts by its model (fake@MODEL tokens), slowly enough to be seen running.
BY_MODEL = ("fake:ok fake:sleep=0.2 fake@haiku:write=small.txt fake@sonnet:write=big.txt "
            "fake@sonnet:commit=big2.txt")
CHECK = "ls small.txt"  # its output: the file, or why it is missing
TITLE = "Add the price list"


@pytest.fixture
def attempts_board(start_board):
    """A board (no demo project) whose agent CLI is the fake one."""
    return start_board(demo=False, agent_command=f"{sys.executable} {FAKE_AGENT}")


def shop(board, tmp_path, git=True, **fields) -> tuple[dict, dict]:
    """A project on tmp_path/code (a git repository with a commit unless git=False) that
    runs two agents at once and checks for small.txt, and its task TITLE."""
    code = tmp_path / "code"
    code.mkdir()
    if git:
        make_repo(code)
    project = board.api("POST", "/api/projects", {
        "name": "Shop", "slug": "shop", "workingDir": str(code), "permissionMode": "auto-accept",
        "stopCheckCommand": CHECK, "maxConcurrent": 2, **fields})
    task = board.api("POST", f"/api/projects/{project['id']}/tasks",
                     {"title": TITLE, "description": BY_MODEL})
    return project, task


def run_dialog(page, key):
    return dialog(page, f"Run {key} with several agents")


def choose(form, n, agent="Claude Code", model=None):
    form.get_by_label(f"Attempt {n}: Agent").select_option(label=agent)
    if model:
        form.get_by_label(f"Attempt {n}: Model").select_option(label=model)


def attempt(page, n):
    return page.get_by_test_id(f"attempt-{n}")


def test_two_agents_run_side_by_side_and_one_is_picked(attempts_board, page, tmp_path,
                                                       screenshot):
    board = attempts_board
    _, task = shop(board, tmp_path)
    open_task(page, board, task)
    expect(page.get_by_test_id("attempts")).to_be_hidden()

    page.get_by_role("button", name="Run with several agents").click()
    form = run_dialog(page, task["task_key"])
    expect(form.get_by_role("listitem")).to_have_count(2)  # two rows to start with
    expect(form.get_by_role("button", name="Remove attempt 1")).to_be_disabled()
    form.get_by_role("button", name="Add an agent").click()
    expect(form.get_by_role("listitem")).to_have_count(3)
    form.get_by_role("button", name="Remove attempt 3").click()
    expect(form.get_by_role("listitem")).to_have_count(2)
    # the CLIs the board's health check did not find are not offered
    health = board.api("GET", "/api/health")["agents"]
    offered = form.get_by_label("Attempt 1: Agent").locator("option")
    expect(offered).to_have_count(sum(1 for cli in health.values() if cli["found"] is not False))
    expect(offered.filter(has_text="Claude Code")).to_have_count(1)
    choose(form, 1, model="Small")
    choose(form, 2, model="Medium")
    form.get_by_role("button", name="Start 2 attempts").click()
    expect(form).to_have_count(0)

    # both columns fill in live: running, then done with the check's verdict and the diff size
    section = page.get_by_test_id("attempts")
    expect(section.get_by_role("heading", name="Attempts")).to_be_visible()
    expect(status_badge(page)).to_have_text("In progress")
    small, medium = attempt(page, 1), attempt(page, 2)
    expect(small.get_by_role("heading")).to_have_text("#1 Claude Code")
    expect(small.get_by_test_id("attempt-status")).to_have_text(re.compile("Queued|Running"))
    expect(small.get_by_test_id("attempt-status")).to_have_text("Done", timeout=FLOW)
    expect(medium.get_by_test_id("attempt-status")).to_have_text("Done", timeout=FLOW)
    expect(small.get_by_test_id("attempt-check")).to_have_text("✓ passed")
    expect(medium.get_by_test_id("attempt-check")).to_have_text("✗ failed (exit 2)")
    expect(small.get_by_test_id("attempt-changes")).to_have_text("1 file, +1 −0")
    expect(medium.get_by_test_id("attempt-changes")).to_have_text(re.compile(r"^2 files, \+2 −0$"))
    expect(small.get_by_test_id("attempt-cost")).to_have_text(re.compile(r"^\$0\.0\d+$"))
    expect(section.get_by_test_id("attempts-note")).to_have_text(re.compile("pick one"))
    expect(status_badge(page)).to_have_text("Testing", timeout=FLOW)
    screenshot(page, "attempts-compare", full_page=True)

    # the check's output on demand
    medium.get_by_text(f"Output of {CHECK}").click()
    expect(medium.locator(".attempt-output pre")).to_contain_text("small.txt")

    # one attempt's diff
    medium.get_by_role("button", name="Show the diff of attempt 2").click()
    diff = dialog(page, "Diff of attempt 2 (Claude Code, Medium)")
    expect(diff.get_by_text("2 files changed, +2 −0")).to_be_visible()
    expect(diff.locator(".diff")).to_contain_text("big2.txt")
    expect(diff.locator(".diff")).not_to_contain_text("small.txt")
    diff.get_by_role("button", name="Close").click()
    expect(diff).to_have_count(0)

    # one attempt's log: its own run's entries only
    small.get_by_role("button", name="Show the log of attempt 1").click()
    log = dialog(page, "Log of attempt 1 (Claude Code, Small)")
    expect(log.get_by_role("log", name="Agent log")).to_contain_text("small.txt")
    expect(log.get_by_role("log", name="Agent log")).not_to_contain_text("big.txt")
    log.get_by_role("button", name="Close").click()

    # the pick: asked first, then marked; the other has no Pick any more, the task is in testing
    expect(small.get_by_role("button", name="Pick attempt 1")).to_be_visible()
    small.get_by_role("button", name="Pick attempt 1").click()
    page.get_by_role("dialog").get_by_role("button", name="Pick", exact=True).click()
    expect(small.get_by_test_id("attempt-picked")).to_have_text("★ Picked", timeout=FLOW)
    expect(medium.get_by_test_id("attempt-picked")).to_have_count(0)
    expect(section.get_by_role("button", name=re.compile("^Pick attempt"))).to_have_count(0)
    expect(section.get_by_test_id("attempts-note")).to_have_text(
        "Attempt 1 was picked: its branch is the task's.")
    expect(status_badge(page)).to_have_text("Testing")
    picked = board.task(task["id"])
    assert picked["branch_name"].endswith("-1") and picked["model"] == "model_small"
    screenshot(page, "attempts-picked", full_page=True)

    # the agent usage page counts the pick
    page.get_by_role("link", name="Agent usage").click()
    stats = page.get_by_test_id("attempt-stats")
    expect(stats.get_by_role("heading")).to_have_text("Runs with several agents: who gets picked")
    rows = stats.locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_text(re.compile(r"^Claude CodeSmall11100%\$0\.0\d+$"))
    expect(rows.nth(1)).to_have_text(re.compile(r"^Claude CodeMedium100%\$0\.0\d+$"))
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []


def test_the_dialog_shows_what_the_server_refuses(attempts_board, page, tmp_path,
                                                  console_errors):
    board = attempts_board
    console_errors.allow(r"status of (400|409) .*/api/tasks/\d+/attempts")
    project, task = shop(board, tmp_path, git=False)
    open_board(page, board, project["id"])
    backlog_card = card(column(page, "Backlog"), TITLE)
    backlog_card.get_by_label(f"More actions for {task['task_key']}").click()
    backlog_card.get_by_role("button", name="Run with several agents…").click()
    form = run_dialog(page, task["task_key"])
    # an agent the server does not know (a board older than its server): 400, its row marked
    form.get_by_label("Attempt 2: Agent").evaluate(
        "(el) => el.add(new Option('Retired CLI', 'retired'))")
    choose(form, 2, agent="Retired CLI")
    form.get_by_role("button", name="Start 2 attempts").click()
    error = form.get_by_test_id("attempts-error")
    expect(error).to_contain_text("agents[1].agent")
    expect(error).to_contain_text("is not one of")
    expect(form.get_by_label("Attempt 2: Agent")).to_have_attribute("aria-invalid", "true")
    # the project's folder is no git repository: 409, said in the dialog, nothing started
    choose(form, 2, model="Large")
    form.get_by_role("button", name="Start 2 attempts").click()
    expect(error).to_contain_text("attempts need a git repository")
    expect(form.get_by_label("Attempt 2: Agent")).not_to_have_attribute("aria-invalid", "true")
    form.get_by_role("button", name="Cancel").click()
    expect(form).to_have_count(0)
    assert board.task(task["id"])["status"] == "backlog"
    assert board.api("GET", f"/api/tasks/{task['id']}/attempts") == []


def test_the_card_menu_starts_a_run_and_neither_offers_it_while_it_runs(attempts_board, page,
                                                                         tmp_path, screenshot):
    board = attempts_board
    project, task = shop(board, tmp_path)
    board.api("PUT", f"/api/tasks/{task['id']}", {"description": "fake:hang"})  # runs on
    open_board(page, board, project["id"])
    backlog_card = card(column(page, "Backlog"), TITLE)
    backlog_card.get_by_label(f"More actions for {task['task_key']}").click()
    expect(backlog_card.get_by_role("button", name="Run with several agents…")).to_be_visible()
    screenshot(page, "attempts-card-menu")
    backlog_card.get_by_role("button", name="Run with several agents…").click()
    form = run_dialog(page, task["task_key"])
    choose(form, 1, model="Small")
    choose(form, 2, model="Large")
    form.get_by_role("button", name="Start 2 attempts").click()
    expect(form).to_have_count(0)
    running = card(column(page, "In progress"), TITLE)
    expect(running).to_be_visible()
    expect(running.get_by_label(f"More actions for {task['task_key']}")).to_have_count(0)

    open_task(page, board, task)
    expect(attempt(page, 1).get_by_test_id("attempt-status")).to_have_text("Running", timeout=FLOW)
    expect(attempt(page, 2).get_by_test_id("attempt-status")).to_have_text("Running", timeout=FLOW)
    expect(attempt(page, 2).get_by_role("heading")).to_have_text("#2 Claude Code")
    expect(attempt(page, 2).locator(".bchip.model")).to_have_text("Large")
    expect(page.get_by_test_id("attempts-note")).to_have_text(
        "2 agents work on this task at once, each on a branch of its own.")
    expect(page.get_by_role("button", name=re.compile("^Pick attempt"))).to_have_count(0)
    expect(page.get_by_role("button", name="Run with several agents")).to_have_count(0)
    expect(page.get_by_role("button", name="Stop")).to_be_visible()


def test_the_attempts_stack_on_a_phone(attempts_board, phone, tmp_path, screenshot):
    board = attempts_board
    _, task = shop(board, tmp_path)
    board.api("POST", f"/api/tasks/{task['id']}/attempts", {"agents": [
        {"agent": "claude", "model": "model_small"}, {"agent": "claude", "model": "model_medium"}]})
    page = phone.new_page()
    open_task(page, board, task)
    live(page)
    small, medium = attempt(page, 1), attempt(page, 2)
    expect(medium.get_by_test_id("attempt-status")).to_have_text("Done", timeout=FLOW)
    expect(small.get_by_test_id("attempt-status")).to_have_text("Done", timeout=FLOW)
    one, two = small.bounding_box(), medium.bounding_box()
    assert two["y"] >= one["y"] + one["height"], "the columns stack"
    assert one["x"] >= 0 and one["x"] + one["width"] <= 390
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390, "no sideways scroll"
    small.get_by_role("button", name="Pick attempt 1").scroll_into_view_if_needed()
    screenshot(page, "attempts-phone", full_page=True)
    # the dialog of a new run fits too (the task is in testing now: offered again)
    expect(status_badge(page)).to_have_text("Testing", timeout=FLOW)
    page.get_by_role("button", name="Run with several agents").click()
    form = run_dialog(page, task["task_key"])
    box = form.bounding_box()
    screenshot(page, "attempts-dialog-phone")
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    for n in (1, 2):
        agent = form.get_by_label(f"Attempt {n}: Agent").bounding_box()
        assert agent["x"] + agent["width"] <= box["x"] + box["width"]
    form.get_by_role("button", name="Cancel").click()

    # in Turkish, live (the settings change through /ws)
    board.api("PUT", "/api/settings", {"language": "tr"})
    expect(page.get_by_test_id("attempts").get_by_role("heading", name="Denemeler")).to_be_visible()
    expect(small.get_by_test_id("attempt-status")).to_have_text("Bitti")
    expect(small.get_by_test_id("attempt-check")).to_have_text("✓ geçti")
    expect(page.get_by_role("button", name="Birkaç ajanla çalıştır")).to_be_visible()
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []
