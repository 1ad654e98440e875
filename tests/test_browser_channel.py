"""Talking with a running agent in a real browser (design §12), against `python taskboard.py
--demo`: its simulated agent asks before its Edit (the Demo project's permissionMode is
`default`), asks "How should the README read?" when a task's description says "ask me", and
answers each message with "You said: <text>". What is checked is what a person notices:
the card's "Needs you", the inbox, the request on the task page and the agent going on,
the message box, review comments on the diff, and the Turkish labels.

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
    open_board,
    open_task,
    start,
    status_badge,
)

pytestmark = pytest.mark.usefixtures("console_errors")

QUESTION = "How should the README read?"


def approval(page, name):
    """A request on the task page, named by what it asks ("Edit: …/app.py", the question)."""
    return page.get_by_test_id("approval").filter(has_text=name)


def to_testing(board, title) -> dict:
    """Run a demo task (auto-accept: nobody is asked) until it waits in Testing."""
    auto_accept(board)
    task = demo_task(board, title)
    start(board, task)
    board.wait_status(task["id"], "testing")
    return task


def test_a_question_shows_on_the_card_and_in_the_inbox_and_its_option_answers_it(board, page,
                                                                                 screenshot):
    project = board.demo_project()
    task = board.api("POST", f"/api/projects/{project['id']}/tasks", {
        "title": "Write a note", "description": "Add a note; ask me how it should read."})
    open_board(page, board, project["id"])
    start(board, task)
    waiting = card(column(page, "In progress"), "Write a note")
    expect(waiting.get_by_test_id("card-needs-you")).to_have_text(re.compile(r"Needs you \(1\)"))
    inbox_button = page.get_by_test_id("needs-you")
    expect(inbox_button).to_contain_text("Needs you1")
    inbox_button.click()
    entry = page.get_by_role("dialog").get_by_test_id("needs-entry")
    expect(entry).to_have_count(1)
    expect(entry).to_contain_text("Demo")
    expect(entry).to_contain_text(QUESTION)
    expect(entry).to_contain_text("Write a note")
    screenshot(page, "needs-you-inbox")
    entry.get_by_role("link").click()  # opens the task
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.get_by_role("heading", level=1, name=re.compile("Write a note$"))).to_be_visible()
    question = approval(page, QUESTION)
    expect(question.get_by_role("button", name=re.compile("^Friendly"))).to_be_visible()
    screenshot(page, "task-question")
    # an option is chosen, then sent
    question.get_by_role("button", name=re.compile("^Short")).click()
    question.get_by_role("button", name="Send the answer").click()
    expect(question).to_have_count(0)
    log = agent_log(page)
    expect(log).to_contain_text("Thanks, I'll go with")
    expect(log).to_contain_text("Short")
    # the agent goes on to its edit, which asks too: allowed here, it reaches Testing
    approval(page, "NOTES.md").get_by_role("button", name="Allow", exact=True).click()
    expect(status_badge(page)).to_have_text("Testing")
    # the question is answered; the task now waits for review, still in the inbox
    expect(page.get_by_test_id("needs-you")).to_have_text("Needs you1")
    page.get_by_role("link", name="Demo", exact=True).click()
    done = card(column(page, "Testing"), "Write a note")
    expect(done).to_be_visible()
    expect(done.get_by_test_id("card-needs-you")).to_have_count(0)


def test_an_edit_is_shown_with_its_file_and_allowed(board, page, screenshot):
    task = demo_task(board, "Add a greeting function")
    open_task(page, board, task)
    start(board, task)
    edit = approval(page, "app.py")
    expect(edit).to_contain_text("The agent asks to use Edit")
    expect(edit.locator(".approval-path code")).to_have_text(re.compile(r"/app\.py$"))
    expect(edit).to_contain_text("def greet(name):")  # what it writes
    expect(edit).to_contain_text("Suggested rule")
    expect(edit.get_by_role("button", name="Allow for this session")).to_be_visible()
    expect(edit.get_by_role("button", name="Allow always for this project")).to_be_visible()
    expect(page.get_by_test_id("needs-you")).to_contain_text("1")
    screenshot(page, "task-approval-edit")
    edit.get_by_role("button", name="Allow", exact=True).click()
    expect(edit).to_have_count(0)
    expect(status_badge(page)).to_have_text("Testing")
    expect(agent_log(page)).to_contain_text("allowed by person: Edit")
    assert board.task(task["id"])["status"] == "testing"


def test_allow_always_for_the_project_remembers_the_rule_and_the_stop_check_is_shown(board, page):
    project = board.demo_project()
    board.api("PUT", f"/api/projects/{project['id']}", {"stopCheckCommand": "true"})
    task = demo_task(board, "Fix the off-by-one in count_to")
    open_task(page, board, task)
    start(board, task)
    edit = approval(page, "app.py")
    edit.get_by_role("button", name="Allow always for this project").click()
    expect(edit).to_have_count(0)
    expect(status_badge(page)).to_have_text("Testing")
    check = agent_log(page).locator(".k-stop_check")
    expect(check).to_contain_text("✓ stop check `true` passed")
    assert "Edit" in board.api("GET", f"/api/projects/{project['id']}")["allowedTools"].split(",")


def test_an_edit_denied_with_a_message_tells_the_agent_why(board, page):
    task = demo_task(board, "Add a greeting function")
    open_task(page, board, task)
    start(board, task)
    edit = approval(page, "app.py")
    edit.get_by_label("Message to the agent (optional)").fill("Not in NOTES.md, please")
    edit.get_by_role("button", name="Deny").click()
    expect(edit).to_have_count(0)
    log = agent_log(page)
    expect(log).to_contain_text("denied by person: Edit — Not in NOTES.md, please")
    expect(status_badge(page)).to_have_text("Testing")


def test_a_message_to_a_working_agent_is_queued_then_sent_and_answered(board, page):
    # the agent waits on its edit (the demo asks): the message waits for its turn to end
    task = demo_task(board, "Add a greeting function")
    open_task(page, board, task)
    start(board, task)
    edit = approval(page, "app.py")
    expect(edit).to_be_visible()
    talk = page.get_by_test_id("talk")
    expect(talk.get_by_role("button", name="Send now")).to_be_visible()
    talk.get_by_label("Message to the agent").fill("Keep it short")
    talk.get_by_role("button", name="Send", exact=True).click()
    mine = talk.get_by_test_id("message").filter(has_text="Keep it short")
    expect(mine.get_by_test_id("message-state")).to_have_text("queued")
    edit.get_by_role("button", name="Allow", exact=True).click()
    expect(mine.get_by_test_id("message-state")).to_have_text("sent")
    answer = talk.get_by_test_id("message").filter(has_text="You said: Keep it short")
    expect(answer).to_be_visible()
    log = agent_log(page)
    expect(log).to_contain_text("You: Keep it short")
    expect(status_badge(page)).to_have_text("Testing")


def test_a_message_on_a_task_in_testing_is_a_request_for_changes(board, page):
    task = to_testing(board, "Add a greeting function")
    open_task(page, board, task)
    talk = page.get_by_test_id("talk")
    expect(talk.get_by_role("button", name="Send now")).to_be_hidden()
    talk.get_by_label("Message to the agent").fill("Greet in Turkish too")
    talk.get_by_role("button", name="Send as a request for changes").click()
    expect(status_badge(page)).to_have_text("In progress")
    mine = talk.get_by_test_id("message").filter(has_text="Greet in Turkish too")
    expect(mine.get_by_test_id("message-state")).to_have_text("sent")
    expect(talk.get_by_label("Message to the agent")).to_have_value("")
    expect(status_badge(page)).to_have_text("Testing", timeout=15_000)
    revisions = board.api("GET", f"/api/tasks/{task['id']}/revisions")
    assert [r["feedback"] for r in revisions] == ["Greet in Turkish too"]


def test_review_comments_on_the_diff_send_the_agent_back_to_work(board, page, screenshot):
    task = to_testing(board, "Add a greeting function")
    open_task(page, board, task)
    page.get_by_role("tab", name="Diff").click()
    panel = page.get_by_role("tabpanel")
    line = panel.locator(".d-line", has_text=re.compile(r"^\+def greet\(name\):$"))
    line.click()
    editor = panel.get_by_test_id("review-editor")
    editor.get_by_label("Comment on app.py, line 5").fill("Say what the function returns")
    editor.get_by_role("button", name="Add comment").click()
    expect(editor).to_have_count(0)
    review = panel.get_by_test_id("review")
    expect(review.get_by_test_id("review-comment")).to_have_text(
        re.compile(r"app\.py, line 5 \(new\)\s*Say what the function returns"))
    expect(panel.get_by_test_id("review-note")).to_have_text("Say what the function returns")
    # a second comment, removed again
    line.click()
    panel.get_by_test_id("review-editor").get_by_role("textbox").fill("Never mind")
    panel.get_by_test_id("review-editor").get_by_role("button", name="Add comment").click()
    expect(review.get_by_test_id("review-comment")).to_have_count(2)
    review.get_by_role("button", name="Remove the comment on app.py, line 5").last.click()
    expect(review.get_by_test_id("review-comment")).to_have_count(1)
    review.get_by_label("Summary (optional)").fill("Nearly there")
    screenshot(page, "task-diff-review", full_page=True)
    review.get_by_role("button", name="Send review").click()
    expect(page.get_by_text("Review sent; the agent goes back to work.")).to_be_visible()
    expect(status_badge(page)).to_have_text("In progress")
    sent = page.get_by_test_id("talk").get_by_test_id("message").filter(has_text="app.py, line 5")
    expect(sent).to_contain_text("Say what the function returns")
    expect(sent).to_contain_text("Nearly there")
    screenshot(page, "task-conversation", full_page=True)
    expect(panel.get_by_test_id("review-kept")).to_have_text(
        re.compile("Say what the function returns"))
    kept = board.api("GET", f"/api/tasks/{task['id']}/review")
    assert [(c["path"], c["line"], c["side"], c["body"]) for c in kept] == [
        ("app.py", 5, "new", "Say what the function returns")]


def test_the_new_controls_speak_turkish(board, page):
    board.api("PUT", "/api/settings", {"language": "tr"})
    task = demo_task(board, "Add a greeting function")
    page.goto(f"{board.url}/#/tasks/{task['id']}")
    expect(page.get_by_test_id("connection")).to_have_text("Canlı")
    start(board, task)
    edit = page.get_by_test_id("approval")
    expect(edit).to_contain_text("Ajan Edit aracını kullanmak istiyor")
    for name in ("İzin ver", "Bu oturum için izin ver", "Bu projede her zaman izin ver", "Reddet"):
        expect(edit.get_by_role("button", name=name, exact=True)).to_be_visible()
    expect(edit.get_by_label("Ajana mesaj (isteğe bağlı)")).to_be_visible()
    expect(page.get_by_test_id("needs-you")).to_contain_text("Sizi bekliyor")
    talk = page.get_by_test_id("talk")
    expect(talk.get_by_role("heading")).to_have_text("Ajanla konuşun")
    expect(talk.get_by_label("Ajana mesaj", exact=True)).to_be_visible()
    expect(talk.get_by_role("button", name="Hemen gönder")).to_be_visible()
    edit.get_by_role("button", name="İzin ver", exact=True).click()
    expect(status_badge(page)).to_have_text("Test")
    expect(talk.get_by_role("button", name="Değişiklik isteği olarak gönder")).to_be_visible()
    page.get_by_role("tab", name="Fark").click()
    page.get_by_role("tabpanel").locator(".d-reviewable").first.click()
    expect(page.get_by_role("button", name="Yorum ekle")).to_be_visible()
    expect(page.get_by_role("button", name="İncelemeyi gönder")).to_be_disabled()
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []
