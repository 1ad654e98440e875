"""More than one agent CLI on the board (issue 24): the project's and a task's agent, the
models of each agent in the settings, costs estimated from token counts, the wait for a
usage limit, and the banner naming a CLI that is not installed. Every test fails on a
console error or page error.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import datetime
import re
import time

import pytest
from playwright.sync_api import expect

from browser_helpers import (
    card,
    code_project,
    column,
    demo_task,
    dialog,
    ended_runs,
    live,
    open_board,
    open_task,
    sql,
)

pytestmark = pytest.mark.usefixtures("console_errors")

TITLE = "Add a greeting function"


def wait_for_health(board, check, timeout=15.0) -> dict:
    """Poll /api/health until check(health) holds: the board looks for the CLIs in the
    background after it starts."""
    deadline = time.monotonic() + timeout
    while True:
        health = board.api("GET", "/api/health")
        if check(health):
            return health
        assert time.monotonic() < deadline, f"/api/health never matched: {health}"
        time.sleep(0.1)


def test_choose_codex_for_a_project(board, page):
    project = board.demo_project()
    page.goto(f"{board.url}/#/projects/{project['id']}/settings")
    live(page)
    agent = page.get_by_label("Agent", exact=True)
    expect(agent).to_have_value("claude")
    agent.select_option(label="Codex")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved", exact=True)).to_be_visible()
    assert board.api("GET", f"/api/projects/{project['id']}")["agent"] == "codex"
    page.reload()
    live(page)
    expect(page.get_by_label("Agent", exact=True)).to_have_value("codex")


def test_a_task_runs_another_agent_than_its_project(board, page):
    task = demo_task(board, TITLE)
    open_task(page, board, task)
    expect(page.get_by_test_id("task-agent")).to_have_text("Claude Code (the project's)")
    page.get_by_role("button", name="Edit").click()
    form = dialog(page, f"Edit {task['task_key']}")
    agent = form.get_by_label("Agent")
    expect(agent.locator("option").first).to_have_text("Project's (Claude Code)")
    agent.select_option(label="Gemini CLI")
    form.get_by_role("button", name="Save").click()
    expect(form).to_have_count(0)
    expect(page.get_by_test_id("task-agent")).to_have_text("Gemini CLI")
    assert board.task(task["id"])["agent"] == "gemini"
    open_board(page, board, task["project_id"])
    badge = card(column(page, "Backlog"), TITLE).get_by_test_id("card-agent")
    expect(badge).to_have_text("Gemini CLI")
    # back to the project's: null, and the card has no badge any more
    open_task(page, board, task)
    page.get_by_role("button", name="Edit").click()
    form = dialog(page, f"Edit {task['task_key']}")
    form.get_by_label("Agent").select_option(label="Project's (Claude Code)")
    form.get_by_role("button", name="Save").click()
    expect(page.get_by_test_id("task-agent")).to_have_text("Claude Code (the project's)")
    assert board.task(task["id"])["agent"] is None
    open_board(page, board, task["project_id"])
    expect(card(column(page, "Backlog"), TITLE)).to_be_visible()
    expect(badge).to_have_count(0)


def test_models_of_each_agent_are_saved_from_the_grid(board, page, console_errors):
    console_errors.allow(r"status of 400 \(Bad Request\)")  # the refused name, below
    wait_for_health(board, lambda health: health["agents"]["claude"]["version"])
    page.goto(f"{board.url}/#/settings")
    live(page)
    # each CLI's state, as /api/health reports it (only the simulated Claude is here)
    expect(page.get_by_test_id("cli-codex")).to_have_text("not installed")
    expect(page.get_by_test_id("cli-claude")).not_to_be_empty()
    large = page.get_by_label("Codex: Large model")
    expect(large).to_have_value("")
    expect(large).to_have_attribute("placeholder", "gpt-5-codex")  # the server's table
    expect(page.get_by_label("OpenCode: Large model")).to_have_attribute(
        "placeholder", "The CLI's own default")
    large.fill("gpt-5-codex-max")
    page.get_by_label("OpenCode: Small model").fill("anthropic/claude-haiku-4-5")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved", exact=True)).to_be_visible()
    assert board.api("GET", "/api/settings")["agentModels"] == {
        "codex": {"model_large": "gpt-5-codex-max"},
        "opencode": {"model_small": "anthropic/claude-haiku-4-5"}}
    page.reload()
    live(page)
    expect(page.get_by_label("Codex: Large model")).to_have_value("gpt-5-codex-max")
    # a name the server refuses is shown at the grid, and nothing is saved
    page.get_by_label("Gemini CLI: Medium model").fill("not a model name")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("[data-field=agentModels] .field-error")).to_contain_text("model name")
    assert "gemini" not in board.api("GET", "/api/settings")["agentModels"]
    # emptied again: every built-in model
    page.get_by_label("Gemini CLI: Medium model").fill("")
    page.get_by_label("Codex: Large model").fill("")
    page.get_by_label("OpenCode: Small model").fill("")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved", exact=True)).to_be_visible()
    assert board.api("GET", "/api/settings")["agentModels"] is None


def test_a_cost_estimated_from_tokens_is_marked(board, page):
    task = demo_task(board, TITLE)
    sql(board, "UPDATE tasks SET total_cost = 0.42, cost_estimated = 1 WHERE id = ?",
        (task["id"],))
    open_board(page, board, task["project_id"])
    cost = card(column(page, "Backlog"), TITLE).get_by_test_id("card-cost")
    expect(cost).to_have_text("≈$0.420")
    expect(cost).to_have_attribute("title", re.compile("estimated from token counts"))
    open_task(page, board, task)
    expect(page.get_by_test_id("task-cost")).to_have_text("≈$0.420 estimated")


def test_usage_per_agent_marks_estimated_costs(board, page):
    task = demo_task(board, TITLE)
    ended_runs(board, task, (("claude", 0.5, 0), ("codex", 0.25, 1)))
    page.goto(f"{board.url}/#/usage")
    live(page)
    agents = page.get_by_test_id("usage-agents")

    def row(name):
        return agents.get_by_role("row", name=re.compile(f"^{name}"))

    expect(row("Codex")).to_contain_text("≈$0.250 estimated")
    expect(row("Claude Code")).not_to_contain_text("≈")
    expect(agents.locator("tfoot")).to_contain_text("≈$0.750 estimated")
    expect(page.get_by_test_id("usage-total")).to_contain_text("≈$0.750")


def test_a_task_waiting_for_a_usage_limit_says_until_when(board, page):
    task = demo_task(board, TITLE)
    open_board(page, board, task["project_id"])
    later = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(hours=2)
    sql(board, "UPDATE tasks SET waiting_until = ? WHERE id = ?",
        (later.isoformat().replace("+00:00", "Z"), task["id"]))
    board.api("PUT", f"/api/tasks/{task['id']}", {"priority": 2})  # its task:updated carries it
    # the browser runs in UTC (browser_context_args); a date only when it is not today
    shown = re.compile(rf"Usage limit — continues at (\d+ \w+,? )?{later:%H:%M}")
    waiting = card(column(page, "Backlog"), TITLE).get_by_test_id("card-waiting")
    expect(waiting).to_have_text(shown)
    open_task(page, board, task)
    expect(page.get_by_test_id("task-waiting")).to_contain_text(shown)


def test_the_banner_names_a_missing_cli_a_project_uses(start_board, page, tmp_path):
    board = start_board(env={"TASKBOARD_CODEX_COMMAND": "/nonexistent/codex"})
    wait_for_health(board, lambda health: health["agents"]["codex"]["found"] is False)
    project = code_project(board, tmp_path, "Shop")  # the Demo's runs are simulated
    page.goto(board.url)
    live(page)
    banner = page.locator("#health-banner")
    expect(banner).to_be_hidden()  # no project uses Codex yet
    board.api("PUT", f"/api/projects/{project['id']}", {"agent": "codex"})
    expect(banner).to_be_visible()
    expect(banner.get_by_test_id("cli-missing")).to_have_text(re.compile(  # how, first
        r"^The Codex CLI is not found\. Install it with: npm install -g @openai/codex — "))
    expect(banner).not_to_contain_text("Claude")
    page.reload()  # the project list does not name agents: the board asks for them
    live(page)
    expect(page.locator("#health-banner").get_by_test_id("cli-missing")).to_have_attribute(
        "data-agent", "codex")


def test_the_planner_runs_the_agent_chosen_in_the_form(start_board, page, console_errors,
                                                       tmp_path):
    """The plan form's agent reaches the server: Codex, not installed here, is refused with
    how to install it; the project's (Claude: the simulated agent as its command) plans."""
    console_errors.allow(r"status of 409 \(Conflict\)")  # the refusal, shown in the form
    board = start_board(env={"TASKBOARD_CODEX_COMMAND": "/nonexistent/codex"})
    project = code_project(board, tmp_path, "Shop")  # the Demo's runs are simulated
    page.goto(f"{board.url}/#/projects/{project['id']}/plan")
    live(page)
    agent = page.get_by_test_id("plan-agent")
    expect(agent.locator("option").first).to_have_text("Project's (Claude Code)")
    page.get_by_label("Topic").fill("Greeting cards")
    agent.select_option(label="Codex")
    page.get_by_role("button", name="Start planning").click()
    expect(page.get_by_test_id("plan-error")).to_contain_text("npm install -g @openai/codex")
    agent.select_option(label="Project's (Claude Code)")
    page.get_by_role("button", name="Start planning").click()
    expect(page.get_by_test_id("plan-session")).to_be_visible()


def test_a_running_one_way_agent_says_messages_wait_for_its_run(board, page):
    task = demo_task(board, TITLE)
    board.api("PUT", f"/api/tasks/{task['id']}", {"agent": "codex"})
    sql(board, "UPDATE tasks SET status = 'in_progress' WHERE id = ?", (task["id"],))
    open_task(page, board, task)
    talk = page.get_by_test_id("talk")
    expect(talk).to_contain_text("Codex cannot be reached during its run, and approvals are "
                                 "not available for it")
    expect(talk.get_by_test_id("message-send-now")).to_be_hidden()
    expect(talk.get_by_test_id("message-send")).to_be_enabled()
