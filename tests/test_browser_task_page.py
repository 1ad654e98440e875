"""The task page and its conversation as a newcomer met them (issue 58), in Chromium against a
real `python taskboard.py`: a page open across a restart of the board catches up.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import json
import sys

import pytest
from playwright.sync_api import expect

from browser_helpers import (
    agent_log,
    card,
    code_project,
    column,
    live,
    open_board,
    open_task,
    sql,
    start,
    status_badge,
    task_heading,
)
from conftest import FAKE_AGENT, make_repo, wait_for

pytestmark = pytest.mark.usefixtures("console_errors")

FAKE = f"{sys.executable} {FAKE_AGENT}"


@pytest.fixture
def fake_board(start_board):
    """A board without the demo project whose claude is the scripted fake agent."""
    return start_board(demo=False, agent_command=FAKE)


def logs(board, task) -> list:
    return board.api("GET", f"/api/tasks/{task['id']}/logs?limit=10000")


def test_an_open_task_page_catches_up_after_the_board_restarts(fake_board, page, tmp_path,
                                                               console_errors):
    """The agent's run is interrupted by the restart and resumed by the new process, which
    finishes it while the pages are not connected yet: once they are, each shows what a
    reload would (the status, no Stop button, every log entry, the message sent). One page
    heard an event before, the other none: each reconnects with ?since= (the event's seq, or
    what its reads named), and the new process says resync to both."""
    project = code_project(fake_board, tmp_path, "Shop")
    task = fake_board.api("POST", f"/api/projects/{project['id']}/tasks",
                          {"title": "Say hello", "description": "fake:hang fake:resume=ok"})
    held = []  # while it holds True, no page can connect to /ws
    deaf = [True]  # while it holds True, the quiet page hears nothing on /ws

    def route(quiet):
        def socket(ws):
            if held:
                ws.close()
                return
            server = ws.connect_to_server()
            if quiet and deaf:
                server.on_message(lambda message: None)
        return socket
    page.route_web_socket("**/ws*", route(False))
    open_task(page, fake_board, task)
    start(fake_board, task)  # the page hears it
    expect(agent_log(page)).to_contain_text("session ")  # the agent runs, then says nothing
    quiet = page.context.new_page()
    quiet.route_web_socket("**/ws*", route(True))
    open_task(quiet, fake_board, task)
    fake_board.api("POST", f"/api/tasks/{task['id']}/messages", {"text": "Use tabs."})
    for each in (page, quiet):
        expect(status_badge(each)).to_have_text("In progress")
        expect(each.get_by_role("button", name="Stop", exact=True)).to_be_visible()
    said = page.get_by_test_id("message").filter(has_text="Use tabs.")
    expect(said.get_by_test_id("message-state")).to_have_text("queued")

    console_errors.allow(r"ERR_CONNECTION_REFUSED")  # while the board restarts
    held.append(True)
    fake_board.restart()  # the new process resumes the run, and it ends: the task is tested
    fake_board.wait_status(task["id"], "testing")
    for each in (page, quiet):
        expect(each.get_by_test_id("connection")).not_to_have_text("Live")
    held.clear()
    deaf.clear()

    for each in (page, quiet):
        live(each)
        expect(status_badge(each)).to_have_text("Testing")
        expect(each.get_by_role("button", name="Stop", exact=True)).to_have_count(0)
        count = each.locator(".log-count")  # entries may still come: the same as a reload's
        wait_for(lambda: count.text_content() == f"{len(logs(fake_board, task))} entries",  # noqa: B023
                 timeout=15, message="the page's log to hold every entry")
        expect(agent_log(each)).to_contain_text("You said: Use tabs.")
        expect(each.get_by_test_id("message").filter(has_text="Use tabs.").get_by_test_id(
            "message-state")).to_have_text("sent")  # the resumed agent got it


def test_what_changes_while_the_page_connects_reaches_it(fake_board, page, tmp_path):
    """A change made after the page read what it shows, and before its /ws connection got to
    the server, reaches the page: the first connection asks for what followed the page's
    reads (?since= the seq their answers name). Without it, an attempt that finished as a
    phone opened its task stayed "Running"."""
    project = code_project(fake_board, tmp_path, "Shop")
    task = fake_board.api("POST", f"/api/projects/{project['id']}/tasks",
                          {"title": "Say hello", "description": "fake:ok"})
    held = []  # the page's /ws connections, open on the page's side, not yet on the server's
    page.route_web_socket("**/ws*", lambda ws: held.append(ws))
    open_task(page, fake_board, task)
    expect(status_badge(page)).to_have_text("Backlog")
    fake_board.api("PUT", f"/api/tasks/{task['id']}", {"title": "Say hello twice"})
    start(fake_board, task)
    fake_board.wait_status(task["id"], "testing")
    assert len(held) == 1
    held[0].connect_to_server()
    expect(task_heading(page, "Say hello twice")).to_be_visible()
    expect(status_badge(page)).to_have_text("Testing")
    expect(agent_log(page)).to_contain_text("session ")


def test_a_request_for_changes_shows_where_you_talk_to_the_agent_and_in_the_log(
        fake_board, page, tmp_path):
    """The words of "Request changes" are the person's side of the conversation the agent
    answers: in "Talk to the agent" (sent) and in the log, not only in Revisions."""
    project = code_project(fake_board, tmp_path, "Shop")
    task = fake_board.api("POST", f"/api/projects/{project['id']}/tasks",
                          {"title": "Say hello", "description": "fake:ok"})
    start(fake_board, task)
    fake_board.wait_status(task["id"], "testing")
    open_task(page, fake_board, task)
    page.get_by_role("button", name="Request changes").click()
    page.get_by_label("What should the agent change?").fill("Say it in Turkish too.")
    page.get_by_role("dialog").get_by_role("button", name="Send").click()

    talk = page.get_by_test_id("talk")
    mine = talk.get_by_test_id("message").filter(has_text="Say it in Turkish too.")
    expect(mine).to_have_count(1)
    expect(mine).to_contain_text("You")
    expect(mine.get_by_test_id("message-state")).to_have_text("sent")
    expect(agent_log(page)).to_contain_text("Say it in Turkish too.")
    expect(status_badge(page)).to_have_text("Testing")  # the agent answered it


@pytest.mark.parametrize("language", ["en", "tr"])
def test_before_an_attempt_is_picked_the_talk_box_says_to_pick_one(fake_board, page, tmp_path,
                                                                   language):
    """A task run by several agents has no agent to write to until one attempt is picked:
    the talk box says so in the person's words (no id, no API route) and sends nothing,
    "Request changes" waits; after the pick, both are there again."""
    code = tmp_path / "code"
    code.mkdir()
    make_repo(code)
    project = fake_board.api("POST", "/api/projects", {
        "name": "Shop", "slug": "shop", "workingDir": str(code), "maxConcurrent": 2,
        "permissionMode": "auto-accept"})
    task = fake_board.api("POST", f"/api/projects/{project['id']}/tasks",
                          {"title": "Say hello", "description": "fake:ok"})
    fake_board.api("PUT", "/api/settings", {"language": language})
    fake_board.api("POST", f"/api/tasks/{task['id']}/attempts", {"agents": [
        {"agent": "claude", "model": "model_small"}, {"agent": "claude", "model": "model_medium"}]})
    fake_board.wait_status(task["id"], "testing")
    page.goto(f"{fake_board.url}/#/tasks/{task['id']}")
    expect(task_heading(page, "Say hello")).to_be_visible()
    talk = page.get_by_test_id("talk")
    hint = {"en": "Several agents work on this task: a message goes to one of them. Once they "
                  "end, pick the attempt to keep (above), then write to its agent here.",
            "tr": "Bu görev üzerinde birkaç ajan çalışıyor: bir mesaj yalnızca birine gider. "
                  "Bitince tutulacak denemeyi seçin (yukarıda), sonra onun ajanına buradan "
                  "yazın."}[language]
    expect(talk.locator(".message-hint")).to_have_text(hint)
    expect(talk.get_by_role("textbox")).to_be_disabled()
    expect(talk.get_by_test_id("message-send")).to_be_disabled()
    changes = {"en": "Request changes", "tr": "Değişiklik iste"}[language]
    expect(page.get_by_role("button", name=changes, exact=True)).to_have_count(0)

    fake_board.api("POST", f"/api/tasks/{task['id']}/attempts/1/pick")
    expect(talk.get_by_role("textbox")).to_be_enabled()
    expect(talk.locator(".message-hint")).not_to_have_text(hint)
    expect(page.get_by_role("button", name=changes, exact=True)).to_be_visible()
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []


def test_a_question_reads_as_a_question_on_its_card_and_in_the_log(fake_board, page,
                                                                   tmp_path):
    """Claude asks by a tool call (AskUserQuestion {"questions": …}): its card says it waits
    on the question, not on its last tool, and the log shows the question and its options,
    never the JSON; in Turkish too."""
    project = code_project(fake_board, tmp_path, "Shop")
    task = fake_board.api("POST", f"/api/projects/{project['id']}/tasks",
                          {"title": "Pick a colour", "description": "fake:question"})
    open_board(page, fake_board, project["id"])
    start(fake_board, task)
    asking = card(column(page, "In progress"), "Pick a colour")
    activity = asking.locator(".card-activity")
    expect(activity).to_have_text("❓ Asks you: Which colour should the button be?")
    fake_board.api("PUT", "/api/settings", {"language": "tr"})  # its column has another name
    expect(card(page, "Pick a colour").locator(".card-activity")).to_have_text(
        "❓ Size soruyor: Which colour should the button be?")
    fake_board.api("PUT", "/api/settings", {"language": "en"})

    asking.get_by_role("link", name="Pick a colour").click()
    log = agent_log(page)
    expect(log).to_contain_text("❓ Question Which colour should the button be? (Red / Blue)")
    expect(log).to_contain_text("waiting for you: a question: Which colour should the button "
                                "be? (Red / Blue)")
    expect(log).not_to_contain_text('"questions"')


def test_old_question_entries_and_automatic_requests_read_as_such_in_the_log(
        fake_board, page, tmp_path):
    """A question call logged before its questions were written out (its input as JSON, cut
    at 200 characters) reads as its questions; the verifier's and a pull request's requests
    for changes are named as theirs, in the log as in the talk thread (en and tr)."""
    project = code_project(fake_board, tmp_path, "Shop")
    task = fake_board.api("POST", f"/api/projects/{project['id']}/tasks",
                          {"title": "Pick a colour"})
    asked = json.dumps({"questions": [
        {"question": "Which colour should the button be?", "header": "Colour", "options": [
            {"label": "Red", "description": "A warm red"},
            {"label": "Blue", "description": "A calm \"blue\""}], "multiSelect": False},
        {"question": "And its size?", "header": "Size", "options": [{"label": "Small"}]}]})
    stored = f"AskUserQuestion: {asked[:200]}… [{len(asked) - 200} more]"  # _cut's shape
    at = "2026-01-02T03:04:05.000Z"
    for kind, message, tool, author in (
            ("tool_call", stored, "AskUserQuestion", None),
            ("message", "[verifier] please add a test", None, "verifier"),
            ("message", "The pull request #7 needs changes.", None, "pull_request")):
        sql(fake_board, "INSERT INTO logs (task_id, created_at, kind, message, tool, author) "
            "VALUES (?, ?, ?, ?, ?, ?)", (task["id"], at, kind, message, tool, author))
    for message, author in (("[verifier] please add a test", "verifier"),
                            ("The pull request #7 needs changes.", "pull_request")):
        sql(fake_board, "INSERT INTO messages (task_id, author, text, state, created_at) "
            "VALUES (?, ?, ?, 'sent', ?)", (task["id"], author, message, at))
    open_task(page, fake_board, task)
    log = agent_log(page)
    expect(log).to_contain_text("❓ Question Which colour should the button be? (Red / Blue) …")
    expect(log).not_to_contain_text('"questions"')
    expect(log).to_contain_text("▸ Verifier: [verifier] please add a test")
    expect(log).to_contain_text("▸ Pull request: The pull request #7 needs changes.")
    thread = page.get_by_test_id("message")
    expect(thread).to_have_count(2)
    expect(thread.first).to_contain_text("Verifier (changes requested)")
    expect(thread.last).to_contain_text("Pull request (changes requested)")
    fake_board.api("PUT", "/api/settings", {"language": "tr"})
    expect(page.get_by_role("log", name="Ajan günlüğü")).to_contain_text(
        "▸ Doğrulayıcı: [verifier] please add a test")
    expect(thread.first).to_contain_text("Doğrulayıcı (değişiklik istedi)")
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []


def box(locator) -> dict:
    return locator.evaluate("(el) => { const r = el.getBoundingClientRect(); return "
                            "{left: r.left, right: r.right, top: r.top, bottom: r.bottom}; }")


def apart(a, b) -> bool:
    return a["right"] <= b["left"] or b["right"] <= a["left"] or a["bottom"] <= b["top"] \
        or b["bottom"] <= a["top"]


@pytest.mark.parametrize("size", [(1366, 800), (390, 844)])
def test_a_toast_does_not_cover_the_buttons_it_reports_on(fake_board, page, tmp_path, size):
    """"Message sent" appears while the talk box's buttons stand at the bottom of the
    window, where toasts go: it stands elsewhere, over neither Send nor Send now."""
    page.set_viewport_size({"width": size[0], "height": size[1]})
    project = code_project(fake_board, tmp_path, "Shop")
    task = fake_board.api("POST", f"/api/projects/{project['id']}/tasks",
                          {"title": "Say hello", "description": "fake:hang\n\n" + "\n".join(
                              f"{n}. Say hello in one more language." for n in range(60))})
    start(fake_board, task)  # a long description: the page scrolls below the talk box
    open_task(page, fake_board, task)
    talk = page.get_by_test_id("talk")
    send, now = talk.get_by_test_id("message-send"), talk.get_by_test_id("message-send-now")
    expect(now).to_be_visible()  # the agent runs: both are offered
    talk.get_by_role("textbox").fill("Use tabs, please.")
    send.evaluate("(el) => window.scrollBy(0, el.getBoundingClientRect().bottom - innerHeight + 4)")
    assert box(send)["bottom"] > size[1] - 40  # it stands where a toast would
    send.click()
    shown = page.locator(".toast", has_text="Message sent")
    expect(shown).to_be_visible()
    assert apart(box(shown), box(send)) and apart(box(shown), box(now))
    # wide, the buttons stand right of the bottom centre: it stays there; on a phone, it moved up
    assert (box(shown)["top"] < size[1] / 2) == (size[0] < 600)
