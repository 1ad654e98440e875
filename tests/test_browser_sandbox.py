"""The sandbox on the board (design.md §17), in Chromium against a real `python taskboard.py`:
the project's sandbox and its extra paths in the settings (en, tr), the warning for
auto-accept without it, a refused path shown under its field, and whether a task's latest
run was sandboxed on its card and its task page, with the hosts its network reached and was
refused (design §20).

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import base64
import sys

import pytest
from playwright.sync_api import expect

from browser_helpers import card, code_project, column, live, open_board, open_task, start
from conftest import FAKE_AGENT, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("console_errors")]


@pytest.fixture
def fake_board(start_board):
    """A board without the demo project whose claude is the scripted fake agent; its
    sandbox is bubblewrap wherever it works on this machine."""
    return start_board(demo=False, agent_command=f"{sys.executable} {FAKE_AGENT}")


def test_the_settings_set_the_sandbox_and_its_paths_and_warn_without_it(
        fake_board, page, tmp_path, console_errors):
    console_errors.allow(r"status of 400 \(Bad Request\)")
    board = fake_board
    project = code_project(board, tmp_path, "Shop")
    shared = tmp_path / "shared"
    shared.mkdir()
    page.goto(f"{board.url}/#/projects/{project['id']}/settings")
    live(page)
    group = page.locator("fieldset[data-group=sandbox]")
    expect(group.locator("legend")).to_have_text("Sandbox")
    sandbox = page.get_by_label("Run agents in the sandbox")
    expect(sandbox).to_have_value("auto")
    works = board.api("GET", "/api/health")["sandbox"]
    expect(group).to_contain_text("Here bubblewrap" if works["works"] else
                                  "Here bubblewrap does not work")
    page.get_by_label("Also writable in the sandbox").fill(f"{shared}\n")
    page.get_by_role("button", name="Save").click()
    wait_for(lambda: board.api("GET", f"/api/projects/{project['id']}")["sandboxPaths"] == {
        "readOnly": [], "readWrite": [str(shared)]}, message="the paths to be saved")

    page.get_by_label("Also readable in the sandbox").fill("relative/path")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("[data-field=sandboxPaths]").get_by_role("alert")).to_contain_text(
        "is not an absolute path")

    page.get_by_label("Also readable in the sandbox").fill("")
    page.get_by_label("Network of sandboxed runs").select_option("allowlist")
    hosts = page.get_by_label("Hosts sandboxed runs may reach")
    hosts.fill("*.example.com\nhttp://nope")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("[data-field=networkAllow]").get_by_role("alert")).to_contain_text(
        "is not a host pattern")
    hosts.fill("*.example.com\n127.0.0.1:5432\n")
    page.get_by_role("button", name="Save").click()
    wait_for(lambda: (p := board.api("GET", f"/api/projects/{project['id']}"))["network"] ==
             "allowlist" and p["networkAllow"] == ["*.example.com", "127.0.0.1:5432"],
             message="the network policy to be saved")

    risk = page.locator("[data-warning=sandbox]")
    expect(risk).to_be_hidden()
    page.get_by_label("Permission mode").select_option("auto-accept")
    sandbox.select_option("none")
    expect(risk).to_be_visible()
    expect(page.locator("[data-field=sandboxPaths]")).to_be_hidden()
    expect(page.locator("[data-field=networkAllow]")).to_be_hidden()
    sandbox.select_option("bubblewrap")
    expect(risk).to_be_hidden()

    board.api("PUT", "/api/settings", {"language": "tr"})
    page.reload()
    expect(page.get_by_label("Ajanları korumalı alanda çalıştır")).to_have_value("auto")
    expect(page.get_by_label("Korumalı alanda ayrıca yazılabilir")).to_have_value(str(shared))
    expect(page.get_by_label("Korumalı çalışmaların ağı")).to_have_value("allowlist")


def test_the_card_and_the_task_page_say_whether_the_latest_run_was_sandboxed(
        fake_board, page, tmp_path):
    board = fake_board
    sandboxed = board.api("GET", "/api/health")["sandbox"]["works"]
    project = code_project(board, tmp_path, "Shop")
    curl = "curl -sS --max-time 10 http://127.0.0.1:9/ || true"  # a loopback port: refused
    task = board.api("POST", f"/api/projects/{project['id']}/tasks", {
        "title": "Say hello",
        "description": "fake:ok fake:sh=" + base64.b64encode(curl.encode()).decode()})
    open_board(page, board, project["id"])
    start(board, task)
    done = card(column(page, "Testing"), "Say hello")
    chip = done.get_by_test_id("card-sandbox")
    expect(chip).to_have_text("sandboxed" if sandboxed else "no sandbox")
    open_task(page, board, task)
    expect(page.get_by_test_id("task-sandbox")).to_have_text(
        "its latest run was sandboxed (bubblewrap)" if sandboxed
        else "its latest run was not sandboxed")
    if sandboxed:
        expect(page.get_by_test_id("task-network")).to_contain_text("refused: 127.0.0.1:9")
