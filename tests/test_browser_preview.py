"""A task's preview in Chromium (design §21): the task page's Preview (start, state live,
the panel and its phone width, stop), and a hostile preview page that tries to read and
change the board with the person's cookie and to open its /ws: refused."""
import re
import sys

import requests
from playwright.sync_api import expect
from test_preview import serve

from browser_helpers import open_task, sql

TOKEN = "s3cret-token-for-the-preview-test"


def test_the_task_page_runs_a_preview_that_reaches_nothing_of_the_board(
        page, start_board, tmp_path, screenshot):
    board = start_board(token=TOKEN, demo=False, agent_command=sys.executable)
    (tmp_path / "code").mkdir()
    project = board.api("POST", "/api/projects", {
        "name": "Shop", "slug": "shop", "workingDir": str(tmp_path / "code"),
        "previewCommand": serve(), "previewPath": "/hostile?board=" + board.url})
    task = board.api("POST", f"/api/projects/{project['id']}/tasks", {"title": "Cart page"})
    sql(board, "UPDATE tasks SET status = 'testing' WHERE id = ?", (task["id"],))
    page.goto(board.sign_in_url)
    open_task(page, board, task)
    answers = []  # what the board answered the preview's page (not the board's own)
    page.on("response", lambda r: answers.append((r.url, r.status))
            if r.url.startswith(board.url) and r.frame != page.main_frame else None)
    preview = page.get_by_test_id("preview")
    preview.get_by_role("button", name="Start the preview of the running app").click()
    expect(preview.get_by_test_id("preview-status")).to_have_text("ready", timeout=20_000)
    # the panel: the preview's own origin, framed; its hostile script is refused
    preview.get_by_role("button", name="Show here").click()
    frame = page.frame_locator("[data-testid=preview-frame] iframe")
    result = frame.locator("#result")
    expect(result).to_contain_text("done", timeout=15_000)
    text = result.inner_text()
    assert "read refused" in text and "write refused" in text, text
    assert "ws refused" in text and "ws open" not in text, text
    assert "blind 0" in text, text  # an opaque answer: the board's 403 is not readable
    refused = [status for url, status in answers if "/api/projects" in url]
    assert refused and set(refused) == {403}, answers
    names = [p["name"] for p in board.api("GET", "/api/projects")]
    assert names == ["Shop"], names
    preview.get_by_role("button", name="Phone width").click()
    expect(page.get_by_test_id("preview-frame")).to_have_class(re.compile("phone"))
    screenshot(page, "task-preview-phone", full_page=True)
    # a new tab: a fresh one-time link
    link = preview.get_by_role("link", name="Open in a new tab")
    url = link.get_attribute("href")
    assert requests.get(url, allow_redirects=False).status_code == 303
    preview.get_by_role("button", name="Stop the preview").click()
    expect(preview.get_by_role("button", name="Start the preview of the running app")) \
        .to_be_visible()
    expect(page.get_by_test_id("preview-frame")).to_be_hidden()
    assert board.api("GET", f"/api/tasks/{task['id']}/preview")["status"] == "stopped"
