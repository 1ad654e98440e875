"""Agents on other machines in Chromium (design.md §15): Settings → Hosts with a real sshd on
a loopback port (tests/ssh_helpers.py) — a host added, its key's fingerprint shown, compared
and trusted, then checked; a project that runs there says so on its cards and task page; a
host in use is not deleted and says why; an unreachable host is named in the banner and its
tasks say they wait for it.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import re
import sys

import pytest
from playwright.sync_api import expect
from ssh_helpers import SshServer

from browser_helpers import card, code_project, column, dialog, live, open_board, open_task
from conftest import FAKE_AGENT

pytestmark = [pytest.mark.sshd, pytest.mark.usefixtures("console_errors")]

#: What the trust panel tells a person to run on the host (design §15).
COMPARE = "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"


@pytest.fixture
def sshd(tmp_path):
    server = SshServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def quiet_board(start_board):
    """A board without the demo project (every project is one the test makes) whose agent
    CLI on this machine is found: the banner has nothing to say but about hosts."""
    return start_board(demo=False, agent_command=f"{sys.executable} {FAKE_AGENT}")


def trusted_host(board, sshd, tmp_path) -> dict:
    """A host added through the API, checked, its key trusted and checked again."""
    host = board.api("POST", "/api/hosts", {
        "name": "build box", "address": sshd.address, "port": sshd.port,
        "identityFile": sshd.identity, "baseDir": str(tmp_path / "host")})
    shown = board.api("POST", f"/api/hosts/{host['id']}/check")["lastCheck"]
    board.api("PUT", f"/api/hosts/{host['id']}", {"hostKey": shown["fingerprint"]})
    checked = board.api("POST", f"/api/hosts/{host['id']}/check")
    assert checked["lastCheck"]["ok"], checked["lastCheck"]
    return checked


def remote_project(board, sshd, tmp_path) -> tuple[dict, dict]:
    host = trusted_host(board, sshd, tmp_path)
    project = code_project(board, tmp_path, "Remote")
    board.api("PUT", f"/api/projects/{project['id']}", {
        "host": host["id"], "repoUrl": "https://git.example/me/remote.git"})
    return project, host


def open_hosts(page, board):
    page.goto(f"{board.url}/#/settings/hosts")
    live(page)
    expect(page.get_by_role("heading", name="Hosts", level=1)).to_be_visible()


def host_item(page, name):
    return page.get_by_role("article", name=name)


def test_a_host_is_added_its_key_compared_trusted_and_checked(quiet_board, page, sshd,
                                                               tmp_path, screenshot):
    board = quiet_board
    page.goto(f"{board.url}/#/settings")
    live(page)
    page.get_by_role("link", name="Manage hosts").click()
    expect(page.get_by_role("heading", name="Hosts", level=1)).to_be_visible()
    expect(page.get_by_text("No hosts yet: every project runs on this machine.")).to_be_visible()

    page.get_by_role("button", name="Add a host").click()
    form = dialog(page, "Add a host")
    form.get_by_label("Name").fill("build box")
    form.get_by_label("Address").fill("not an address; rm -rf")
    form.get_by_label("SSH port").fill(str(sshd.port))
    form.get_by_label("Key file").fill(sshd.identity)
    form.get_by_label("Folder on the host").fill(str(tmp_path / "host"))
    form.get_by_label("Claude Code").fill(f"{sys.executable} {FAKE_AGENT}")
    form.get_by_role("button", name="Create").click()
    # the server's pattern for an address, checked before anything is sent
    expect(form.get_by_text("Write user@host or an alias of ~/.ssh/config")).to_be_visible()
    form.get_by_label("Address").fill(sshd.address)
    form.get_by_role("button", name="Create").click()
    expect(form).to_have_count(0)

    host = host_item(page, "build box")
    expect(host.get_by_test_id("host-status")).to_have_text("Not checked yet: press Check.")
    expect(host.get_by_test_id("host-key")).to_have_text("none yet")
    host.get_by_role("button", name="Check").click()
    # the first check shows the key and does not trust it: the person compares it
    expect(host.get_by_test_id("host-status")).to_contain_text("Key not trusted yet")
    expect(host.get_by_test_id("host-fingerprint")).to_have_text(sshd.fingerprint)
    expect(host.get_by_test_id("host-trust")).to_contain_text(COMPARE)
    screenshot(page, "hosts-trust")
    host.get_by_role("button", name="Trust this key").click()
    # trusting checks again: reachable, with its latency, git and the CLIs found there
    expect(host.get_by_test_id("host-status")).to_contain_text("Reachable")
    expect(host.get_by_test_id("host-key")).to_have_text(sshd.fingerprint)
    expect(host.get_by_test_id("host-trust")).to_have_count(0)
    expect(host.get_by_test_id("host-latency")).to_have_text(re.compile(r"^\d+ ms$"))
    expect(host.get_by_test_id("host-git")).to_have_text(re.compile(r"git version \d"))
    expect(host.locator("[data-agent=claude]")).to_have_text("Claude Code 2.1.197 (Claude Code)")
    expect(host.locator("[data-agent=gemini]")).to_have_text("Gemini CLI not found")
    expect(host.get_by_test_id("host-running")).to_have_text("0 of at most 2")
    saved = board.api("GET", "/api/hosts")[0]
    assert saved["hostKey"] == sshd.fingerprint and saved["port"] == sshd.port
    assert saved["agentCommands"] == {"claude": f"{sys.executable} {FAKE_AGENT}"}
    screenshot(page, "hosts")

    # switched off and on again from the list; edited in its dialog
    host.get_by_role("checkbox", name="Enabled: build box").uncheck()
    expect(host).to_have_class(re.compile(r"\bdisabled\b"))
    assert board.api("GET", "/api/hosts")[0]["enabled"] is False
    host.get_by_role("checkbox", name="Enabled: build box").check()
    expect(host).not_to_have_class(re.compile(r"\bdisabled\b"))
    host.get_by_role("button", name="Edit").click()
    form = dialog(page, "Edit host")
    form.get_by_label("Agents at once").fill("3")
    form.get_by_role("button", name="Save").click()
    expect(host.get_by_test_id("host-running")).to_have_text("0 of at most 3")


def test_a_project_on_a_host_says_so_on_its_cards_and_task_page(quiet_board, page, sshd,
                                                                 tmp_path):
    board = quiet_board
    host = trusted_host(board, sshd, tmp_path)
    project = code_project(board, tmp_path, "Remote")
    task = board.api("POST", f"/api/projects/{project['id']}/tasks", {"title": "Port the parser"})
    open_board(page, board, project["id"])
    expect(card(column(page, "Backlog"), task["title"])).to_be_visible()
    expect(page.get_by_test_id("card-host")).to_have_count(0)  # this machine: no badge

    page.goto(f"{board.url}/#/projects/{project['id']}/settings")
    runs_on = page.get_by_label("Runs on")
    expect(runs_on).to_have_value("")
    repo = page.get_by_label("Repository the host clones")
    expect(repo).to_be_hidden()
    runs_on.select_option(label="build box")
    expect(repo).to_be_visible()
    repo.fill("https://example.invalid/me/remote.git")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved", exact=True)).to_be_visible()
    saved = board.api("GET", f"/api/projects/{project['id']}")
    assert saved["host"] == host["id"]
    assert saved["repoUrl"] == "https://example.invalid/me/remote.git"

    open_board(page, board, project["id"])
    badge = card(column(page, "Backlog"), task["title"]).get_by_test_id("card-host")
    expect(badge).to_have_text("build box")
    expect(badge).to_have_attribute("title", "Runs on build box")
    # a renamed host is renamed on the card as it happens
    board.api("PUT", f"/api/hosts/{host['id']}", {"name": "gpu box"})
    expect(badge).to_have_text("gpu box")
    open_task(page, board, task)
    expect(page.get_by_test_id("task-host")).to_have_text("Runs on gpu box")
    page.goto(f"{board.url}/#/settings/hosts")
    expect(page.get_by_role("heading", name="Hosts", level=1)).to_be_visible()
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []


def test_a_host_in_use_stays_and_an_unreachable_one_is_named(quiet_board, page, sshd,
                                                            tmp_path, screenshot,
                                                            console_errors):
    board = quiet_board
    console_errors.allow(r"status of 409 \(Conflict\) \(http://[^)]*/api/hosts/\d+")
    project, host = remote_project(board, sshd, tmp_path)
    open_hosts(page, board)
    item = host_item(page, "build box")
    item.get_by_role("button", name="Delete").click()
    dialog(page, "Delete build box?").get_by_role("button", name="Delete").click()
    expect(item.get_by_test_id("host-note")).to_contain_text("'Remote'")
    expect(item.get_by_test_id("host-note")).to_contain_text("in use")
    assert [h["name"] for h in board.api("GET", "/api/hosts")] == ["build box"]

    banner = page.locator("#health-banner")
    expect(banner.get_by_test_id("cli-missing-host")).to_have_text(  # the host has no claude
        "The Claude Code CLI is not found on build box: tasks of projects there cannot run.")
    expect(banner.get_by_test_id("host-unreachable")).to_have_count(0)
    sshd.drop()
    item.get_by_role("button", name="Check").click()
    expect(item.get_by_test_id("host-status")).to_contain_text("Unreachable")
    expect(item.get_by_test_id("host-error")).not_to_be_empty()
    expect(banner.get_by_test_id("host-unreachable")).to_have_text(
        "Host build box cannot be reached: the tasks of its projects wait for it. "
        "Settings → Hosts")
    expect(banner.get_by_role("link", name="Settings → Hosts")).to_have_attribute(
        "href", "#/settings/hosts")
    screenshot(page, "hosts-unreachable")

    # a task moved to In progress waits for its host, and says so
    task = board.api("POST", f"/api/projects/{project['id']}/tasks", {"title": "Port the lexer"})
    open_board(page, board, project["id"])
    board.api("PATCH", f"/api/tasks/{task['id']}/status", {"status": "in_progress"})
    waiting = card(column(page, "In progress"), task["title"]).get_by_test_id("card-host-waiting")
    expect(waiting).to_contain_text("Waiting for host build box: ")
    screenshot(page, "board-host-waiting")
    open_task(page, board, task)
    expect(page.get_by_test_id("task-waiting-host")).to_contain_text("Waiting for host build box: ")
    expect(page.get_by_test_id("task-host")).to_have_text("Runs on build box")

    # switched off, the banner says it is disabled instead
    open_hosts(page, board)
    host_item(page, "build box").get_by_role("checkbox", name="Enabled: build box").uncheck()
    expect(banner.get_by_test_id("host-disabled")).to_contain_text("Host build box is disabled")
    assert board.api("GET", f"/api/hosts/{host['id']}")["enabled"] is False
