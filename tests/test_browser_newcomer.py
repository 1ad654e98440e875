"""What a newcomer met on the board (issue 44), in Chromium against a real `python
taskboard.py`: server errors that name a field by its label, a running card that waits for a
person and keeps its lines inside, the same cost on the card and the task page mid-run, a
question answered only by "Send the answer", the hint to drag a card to In progress, the
branch per task implied on a host, the source-host token and where the repository is asked
for, and a CLI found on the host a project runs on.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import re
import sys

import pytest
from playwright.sync_api import expect
from ssh_helpers import SshServer

from browser_helpers import (
    agent_log,
    card,
    code_project,
    column,
    demo_task,
    live,
    open_board,
    open_task,
    sql,
    start,
    task_heading,
)
from conftest import FAKE_AGENT

pytestmark = pytest.mark.usefixtures("console_errors")

FAKE = f"{sys.executable} {FAKE_AGENT}"
#: The demo's question (the README task asks it) and the card that asks it on the task page.
QUESTION_TASK = "Document the app in the README"


@pytest.fixture
def fake_board(start_board):
    """A board without the demo project whose claude is the scripted fake agent."""
    return start_board(demo=False, agent_command=FAKE)


def waiting_card(board, page, tmp_path):
    """A project (permission mode default) on the board in the page, and the card of its
    task whose agent asks before its Bash command "echo hello > hello.txt && cat
    hello.txt", started: it waits for a person, so its usage holds still."""
    project = code_project(board, tmp_path, "Shop")
    task = board.api("POST", f"/api/projects/{project['id']}/tasks",
                     {"title": "Say hello", "description": "fake:ask"})
    open_board(page, board, project["id"])
    start(board, task)
    return card(column(page, "In progress"), "Say hello")


def test_a_server_error_names_the_field_by_its_label(board, page, console_errors):
    console_errors.allow(r"status of 400 \(Bad Request\)")
    project = board.demo_project()
    page.goto(f"{board.url}/#/projects/{project['id']}/settings")
    live(page)
    folder = page.get_by_label("Working directory")
    folder.fill("/nonexistent/shop")
    page.get_by_role("button", name="Save").click()
    field = page.locator("[data-field=workingDir]")
    expect(field.get_by_role("alert")).to_have_text(
        "Working directory '/nonexistent/shop' is not an existing directory")
    expect(folder).to_be_focused()


def test_a_running_card_waiting_for_you_keeps_its_lines_inside(fake_board, page, tmp_path):
    running = waiting_card(fake_board, page, tmp_path)
    needs = running.get_by_test_id("card-needs-you")
    expect(needs).to_have_text("Needs you (1)")
    expect(needs.locator("svg")).to_have_count(1)  # a drawn hand, never a glyph the font lacks
    activity = running.locator(".card-activity")
    expect(activity).to_have_text("⚙ Bash: echo hello > hello.txt && cat hello.txt")
    box = activity.evaluate("""(line) => {
        const card = line.closest('.task-card').getBoundingClientRect();
        const title = line.closest('.task-card').querySelector('.card-title')
            .getBoundingClientRect();
        const own = line.getBoundingClientRect();
        return {cardRight: card.right, titleLeft: title.left, left: own.left, right: own.right,
                longer: line.scrollWidth > line.clientWidth,
                ellipsis: getComputedStyle(line).textOverflow};
    }""")
    assert abs(box["left"] - box["titleLeft"]) < 1, box  # starts where the title starts
    assert box["right"] <= box["cardRight"], box  # ends inside the card
    assert box["longer"] and box["ellipsis"] == "ellipsis", box  # cut short with an ellipsis


def test_the_card_and_the_task_page_show_the_same_cost_mid_run(fake_board, page, tmp_path):
    running = waiting_card(fake_board, page, tmp_path)
    expect(running.get_by_test_id("card-needs-you")).to_be_visible()  # it waits: usage stays
    cost = running.get_by_test_id("card-cost")
    expect(cost).to_have_text(re.compile(r"^≈?\$0\.\d*[1-9]"))
    shown = cost.inner_text()
    running.get_by_role("link", name="Say hello").click()
    expect(task_heading(page, "Say hello")).to_be_visible()
    expect(page.get_by_test_id("task-cost")).to_have_text(f"{shown} (live)")
    tokens = page.locator(".field-list dt", has_text="Tokens (in / out)").locator("+ dd")
    expect(tokens).not_to_have_text("0 / 0")


def test_a_question_is_answered_with_send_not_with_a_click_on_an_option(board, page):
    task = demo_task(board, QUESTION_TASK)
    open_task(page, board, task)
    start(board, task)
    question = page.get_by_test_id("approval").filter(has_text="The agent asks you")
    short = question.get_by_role("button", name=re.compile("^Short"))
    friendly = question.get_by_role("button", name=re.compile("^Friendly"))
    short.click()
    expect(short).to_have_attribute("aria-pressed", "true")
    friendly.click()  # the choice changes: nothing was sent
    expect(friendly).to_have_attribute("aria-pressed", "true")
    expect(short).to_have_attribute("aria-pressed", "false")
    pending = board.api("GET", "/api/approvals?status=pending")
    assert [a["kind"] for a in pending if a["taskId"] == task["id"]] == ["question"]
    question.get_by_role("button", name="Send the answer").click()
    expect(question).to_have_count(0)
    expect(agent_log(page)).to_contain_text("Thanks, I'll go with")
    expect(agent_log(page)).to_contain_text("Friendly")


def test_a_hint_says_how_to_start_an_agent_until_one_is_in_progress(board, page):
    demo = board.demo_project()
    open_board(page, board, demo["id"])
    hint = page.get_by_test_id("board-hint")
    expect(hint).to_have_text("Drag a card to In progress to start its agent "
                              "(or choose In progress in its “Move to…” list).")
    start(board, demo_task(board, QUESTION_TASK))
    expect(hint).to_be_hidden()

    empty = board.api("POST", "/api/projects", {"name": "Empty", "slug": "empty",
                                                "workingDir": str(board.folder)})
    open_board(page, board, empty["id"])
    expect(hint).to_have_text("No tasks yet: add one with “New task”, then drag its card to "
                              "In progress to start its agent.")
    board.api("PUT", "/api/settings", {"language": "tr"})
    expect(hint).to_have_text("Henüz görev yok: “Yeni görev” ile bir tane ekleyin, sonra "
                              "ajanını başlatmak için kartını Devam ediyor sütununa sürükleyin.")
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []


def test_the_missing_cli_banner_offers_the_demo(missing_agent_board, page):
    page.goto(missing_agent_board.url)
    expect(page.locator("#health-banner")).to_contain_text(
        "To try the board first, start it with --demo: its Demo project's tasks run a "
        "simulated agent.")


def test_a_project_on_a_host_always_has_a_branch_per_task(fake_board, page, tmp_path):
    board = fake_board
    host = board.api("POST", "/api/hosts", {"name": "build box", "address": "me@build.invalid",
                                            "baseDir": "~/taskboard", "enabled": False})
    project = code_project(board, tmp_path, "Shop")
    page.goto(f"{board.url}/#/projects/{project['id']}/settings")
    live(page)
    branch = page.get_by_label("Branch and worktree per task")
    note = page.get_by_text("Always on for a project on another machine.")
    expect(branch).not_to_be_checked()
    expect(branch).to_be_enabled()
    expect(note).to_be_hidden()
    page.get_by_label("Runs on").select_option(str(host["id"]))
    expect(branch).to_be_checked()
    expect(branch).to_be_disabled()
    expect(note).to_be_visible()
    page.get_by_label("Runs on").select_option("")
    expect(branch).not_to_be_checked()
    expect(branch).to_be_enabled()
    expect(note).to_be_hidden()


def test_the_task_page_says_where_the_branch_of_a_host_task_is(board, page):
    """The branch of a task that ran on a host is first in the host's clone, then (approved)
    in the repository of workingDir: branchAt, which the page shows beside the branch."""
    task = demo_task(board, QUESTION_TASK)
    sql(board, "UPDATE tasks SET branch_name = 'docs/dem-2-readme', branch_at = "
        "'build box:/home/me/.taskboard/repos/demo' WHERE id = ?", (task["id"],))
    open_task(page, board, task)
    expect(page.get_by_test_id("branch-at")).to_have_text(
        "in build box:/home/me/.taskboard/repos/demo")


def test_the_source_host_token_and_the_repository_beside_the_pull_request(start_board, page):
    without = start_board(demo=False, agent_command=FAKE)
    page.goto(f"{without.url}/#/settings")
    live(page)
    source = page.get_by_role("group", name="Source host")
    expect(source.get_by_test_id("git-host-token")).to_have_text(
        "Source-host token: not set — pull requests and issue sync need "
        "TASKBOARD_GIT_HOST_TOKEN (or GITHUB_TOKEN) in the board's environment.")
    # opened at 127.0.0.1: the source host cannot call this address
    expect(source.get_by_test_id("webhook-loopback")).to_contain_text("TASKBOARD_ALLOWED_HOSTS")
    project = without.api("POST", "/api/projects", {"name": "Shop", "slug": "shop",
                                                    "workingDir": without.folder})
    page.goto(f"{without.url}/#/projects/{project['id']}/settings")
    git = page.get_by_role("group", name="Git")
    expect(git.get_by_label("Repository", exact=True)).to_be_visible()
    fields = git.locator("[data-field]").evaluate_all("(rows) => rows.map((r) => r.dataset.field)")
    assert fields[fields.index("autoPr") + 1] == "gitHostRepo", fields
    expect(git.locator("[data-field=autoPr]").get_by_test_id("token-missing")).to_be_visible()

    with_token = start_board(demo=False, agent_command=FAKE,
                             env={"TASKBOARD_GIT_HOST_TOKEN": "t0ken-for-the-test"})
    page.goto(f"{with_token.url}/#/settings")
    live(page)
    expect(page.get_by_test_id("git-host-token")).to_have_text("Source-host token: set")
    project = with_token.api("POST", "/api/projects", {"name": "Shop", "slug": "shop",
                                                       "workingDir": with_token.folder})
    page.goto(f"{with_token.url}/#/projects/{project['id']}/settings")
    expect(page.get_by_label("Open a pull request when a task is done")).to_be_visible()
    expect(page.get_by_test_id("token-missing")).to_have_count(0)


@pytest.mark.sshd
def test_a_cli_found_on_the_host_of_the_projects_is_not_missing(start_board, page, tmp_path):
    sshd = SshServer(tmp_path)
    try:
        board = start_board(demo=False, agent_command="/nonexistent/claude")
        host = board.api("POST", "/api/hosts", {
            "name": "build box", "address": sshd.address, "port": sshd.port,
            "identityFile": sshd.identity, "baseDir": str(tmp_path / "host"),
            "agentCommands": {"claude": FAKE}})
        shown = board.api("POST", f"/api/hosts/{host['id']}/check")["lastCheck"]
        board.api("PUT", f"/api/hosts/{host['id']}", {"hostKey": shown["fingerprint"]})
        assert board.api("POST", f"/api/hosts/{host['id']}/check")["lastCheck"]["ok"]
        project = code_project(board, tmp_path, "Remote")
        board.api("PUT", f"/api/projects/{project['id']}", {
            "host": host["id"], "repoUrl": "https://example.invalid/me/remote.git"})

        page.goto(f"{board.url}/#/settings")
        live(page)
        expect(page.get_by_test_id("cli-claude")).to_have_text(
            "not installed here · build box: 2.1.197 (Claude Code)")
        banner = page.locator("#health-banner")
        expect(banner).to_be_hidden()  # claude is missing here, but no project here uses it
        # Codex, which the host lacks: named with the host
        board.api("PUT", f"/api/projects/{project['id']}", {"agent": "codex"})
        expect(banner.get_by_test_id("cli-missing-host")).to_have_text(
            "The Codex CLI is not found on build box: tasks of projects there cannot run.")
        expect(banner.get_by_test_id("cli-missing")).to_have_count(0)
    finally:
        sshd.stop()
