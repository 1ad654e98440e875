"""Locators and waits the browser tests share (the board's own roles, labels and texts)."""

import datetime
import os
import re
import sqlite3

from playwright.sync_api import expect


def live(page):
    """Wait for the /ws connection: from then on events reach the page."""
    expect(page.get_by_test_id("connection")).to_have_text("Live")


def column(page, name):
    """A board column: a region named by its heading (e.g. "Backlog" and its count)."""
    return page.get_by_role("region", name=re.compile(rf"^{re.escape(name)}\s*\d*(\/\d+)?$"))


def card(scope, title):
    """A task card, named "<KEY>-<n> <title>"."""
    return scope.get_by_role("article", name=re.compile(rf"^[A-Z0-9]+-\d+ {re.escape(title)}$"))


def dialog(page, title):
    """An open modal dialog, found by its heading."""
    return page.get_by_role("dialog").filter(has=page.get_by_role("heading", name=title))


def code_project(board, tmp_path, name) -> dict:
    """A new project of the board, named name, whose code folder is tmp_path/code."""
    (tmp_path / "code").mkdir()
    return board.api("POST", "/api/projects", {"name": name, "slug": name.lower(),
                                               "workingDir": str(tmp_path / "code")})


def quiet(page):
    """Wait until the board's start has asked for all it asks for: its health check no longer
    repeats every second (the server has found, or not, each CLI), and the network is idle."""
    page.wait_for_function("() => { const agents = window.taskboard?.state.health?.agents; "
                           "return agents && !Object.values(agents).some((cli) => cli.checking); }")
    page.wait_for_load_state("networkidle")


def open_board(page, board, project_id):
    page.goto(f"{board.url}/#/projects/{project_id}")
    live(page)
    expect(column(page, "Backlog")).to_be_visible()
    expect(column(page, "Backlog").get_by_text("Loading…")).to_have_count(0)


def open_task(page, board, task):
    page.goto(f"{board.url}/#/tasks/{task['id']}")
    live(page)
    expect(task_heading(page, task["title"])).to_be_visible()


def task_heading(page, title):
    return page.get_by_role("heading", level=1, name=re.compile(rf"{re.escape(title)}$"))


def status_badge(page):
    """The task detail's status, next to its title."""
    return page.locator(".detail-head .status-badge")


def agent_log(page):
    return page.get_by_role("log", name="Agent log")


def demo_task(board, title):
    project = board.demo_project()
    return next(t for t in board.tasks(project["id"]) if t["title"] == title)


def auto_accept(board) -> dict:
    """The demo project runs its agent without asking anyone (`--demo` makes it `default`:
    the agent asks before each edit)."""
    project = board.demo_project()
    board.api("PUT", f"/api/projects/{project['id']}", {"permissionMode": "auto-accept"})
    return project


def start(board, task) -> None:
    board.api("PATCH", f"/api/tasks/{task['id']}/status", {"status": "in_progress"})


def sql(board, statement, params=()):
    """One committed statement on the running board's database, for state the API does not
    write (read-only fields such as cost_estimated). The page is opened, or the task touched
    through the API, afterwards: no event tells the board about this write."""
    con = sqlite3.connect(os.path.join(board.folder, "data", "tb.db"), timeout=10)
    try:
        with con:
            return con.execute(statement, params).fetchall()
    finally:
        con.close()


def ended_runs(board, task, runs) -> None:
    """Runs of task that ended now, written into the board's database: (agent, cost,
    whether the cost was estimated) each, model_medium, 1,000 tokens in and 100 out."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    for agent, cost, estimated in runs:
        sql(board, "INSERT INTO runs (task_id, project_id, kind, model, status, started_at, "
            "ended_at, input_tokens, output_tokens, cost, agent, cost_estimated) "
            "VALUES (?, ?, 'task', 'model_medium', 'done', ?, ?, 1000, 100, ?, ?, ?)",
            (task["id"], task["project_id"], now, now, cost, agent, estimated))
