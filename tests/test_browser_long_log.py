"""A task page of a long log in Chromium (issue 33): it shows the newest page of the log
first and fetches older pages as the log scrolls up (or on "Show older entries"), never the
whole log; the commits and attachments tabs still get theirs from the task detail.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""
import os
import sqlite3

import pytest
from playwright.sync_api import expect

from browser_helpers import agent_log, code_project, open_task

pytestmark = pytest.mark.usefixtures("console_errors")

#: Entries a task page fetches at a time (LOG_PAGE in static/js/views/log_view.js).
LOG_PAGE = 1000
ENTRIES = 2500


@pytest.fixture
def long_log(start_board, tmp_path):
    """A task with 2,500 log entries ("line 0" … "line 2499"), written straight to the store."""
    board = start_board(demo=False)
    project = code_project(board, tmp_path, "Long")
    task = board.api("POST", f"/api/projects/{project['id']}/tasks", {"title": "Chatty"})
    with sqlite3.connect(os.path.join(board.folder, "data", "tb.db")) as db:
        db.executemany("INSERT INTO logs (task_id, created_at, kind, message) VALUES (?,?,?,?)",
                       [(task["id"], "2026-11-27T10:00:00.000Z", "text", f"line {n}")
                        for n in range(ENTRIES)])
    return board, task


def log_requests(page):
    """The paths of the log and detail requests the page makes, in order."""
    seen = []
    page.on("request", lambda r: seen.append(r.url.split("/api/", 1)[1])
            if "/api/tasks/" in r.url else None)
    return seen


def test_the_newest_entries_come_first_and_older_ones_on_scrolling_up(long_log, page):
    board, task = long_log
    seen = log_requests(page)
    open_task(page, board, task)
    log = agent_log(page)
    expect(log).to_contain_text("line 2499")
    count = page.locator(".log-count")
    expect(count).to_have_text("newest 1,000 entries")
    assert not [path for path in seen if path.endswith("/detail")], seen
    assert f"tasks/{task['id']}/logs?limit={LOG_PAGE}" in seen

    log.evaluate("el => { el.scrollTop = 0; }")  # scrolled to the top: the page before
    expect(count).to_have_text("newest 2,000 entries")
    older = page.get_by_test_id("log-older")
    older.click()  # the last page is short: the log is whole
    expect(count).to_have_text("2,500 entries")
    expect(older).to_be_hidden()
    log.evaluate("el => { el.scrollTop = 0; }")
    expect(log).to_contain_text("line 0")
    before = [path for path in seen if "before=" in path]
    assert len(before) == 2, seen
    assert not [path for path in seen if path.endswith("/detail")], seen


def test_the_other_tabs_load_what_they_need_when_shown(long_log, page):
    """Commits and attachments still come with the task detail; the dependencies tab
    imports its module."""
    board, task = long_log
    seen = log_requests(page)
    open_task(page, board, task)
    page.get_by_role("tab", name="Attachments").click()
    page.locator("#attach-input").set_input_files(
        files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello"}])
    expect(page.get_by_role("link", name="notes.txt")).to_be_visible()
    page.get_by_role("tab", name="Commits").click()
    expect(page.get_by_text("No commits yet.")).to_be_visible()
    page.get_by_role("tab", name="Dependencies").click()  # its module comes with the tab
    expect(page.get_by_role("tabpanel").get_by_text("Waits for")).to_be_visible()
    assert len([path for path in seen if path.endswith("/detail")]) == 1, seen
    page.reload()
    page.get_by_role("tab", name="Attachments").click()
    expect(page.get_by_role("link", name="notes.txt")).to_be_visible()
