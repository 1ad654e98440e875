"""Setting a project up on the board alone (issue 58), in Chromium against a real `python
taskboard.py`: every writable project field in the project settings (best of N set up
without the API), the Best of N dialog's labelled rows, the new-project dialog, the board
that holds still and the phone's header, tab strip and board.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import re
import sys

import pytest
from playwright.sync_api import expect

from browser_helpers import (
    card,
    column,
    demo_task,
    dialog,
    ended_runs,
    live,
    open_board,
    start,
    task_heading,
)
from conftest import FAKE_AGENT, make_repo, wait_for

pytestmark = pytest.mark.usefixtures("console_errors")


def settings_page(page, board, project):
    page.goto(f"{board.url}/#/projects/{project['id']}/settings")
    live(page)
    expect(page.get_by_role("button", name="Save")).to_be_visible()


def test_every_writable_project_field_has_its_place_in_the_settings(board, page):
    project = board.demo_project()
    schema = board.api("GET", "/api/openapi.json")["components"]["schemas"]["Project"]
    writable = {name for name, prop in schema["properties"].items() if not prop.get("readOnly")}
    settings_page(page, board, project)
    shown = set(page.locator("form.project-form [data-field]").evaluate_all(
        "(rows) => rows.map((row) => row.dataset.field)"))
    assert writable - shown == set(), "fields the settings lack"


def test_best_of_n_is_set_up_in_the_settings(board, page):
    project = board.demo_project()
    settings_page(page, board, project)
    group = page.locator("fieldset[data-group=attempts]")
    expect(group.locator("legend")).to_have_text("Several agents on one task")
    pick = page.get_by_label("Which attempt is picked")
    expect(pick).to_have_value("manual")
    pick.select_option("auto")
    page.get_by_label("Keep the branches of the attempts not picked").check()
    page.get_by_label("Check command").fill("pytest -q")
    page.get_by_label("Deny an unanswered approval after (minutes)").fill("30")
    page.get_by_role("button", name="Save").click()
    wanted = {"attemptPick": "auto", "keepAttemptBranches": 1,
              "stopCheckCommand": "pytest -q", "approvalTimeoutMinutes": 30}
    wait_for(lambda: {k: board.api("GET", f"/api/projects/{project['id']}")[k]
                      for k in wanted} == wanted, message="the best of N settings saved")

    board.api("PUT", "/api/settings", {"language": "tr"})
    page.reload()
    expect(page.locator("fieldset[data-group=attempts] legend")).to_have_text(
        "Bir görevde birkaç ajan")
    expect(page.get_by_label("Hangi deneme seçilir")).to_have_value("auto")
    expect(page.get_by_label("Denetim komutu")).to_have_value("pytest -q")



def test_an_attempt_without_a_check_says_where_to_set_one(start_board, page, tmp_path):
    board = start_board(demo=False, agent_command=f"{sys.executable} {FAKE_AGENT}")
    code = tmp_path / "code"
    code.mkdir()
    make_repo(code)
    project = board.api("POST", "/api/projects", {
        "name": "Shop", "slug": "shop", "workingDir": str(code),
        "permissionMode": "auto-accept", "maxConcurrent": 2})
    task = board.api("POST", f"/api/projects/{project['id']}/tasks",
                     {"title": "Add the price list", "description": "fake:ok"})
    board.api("POST", f"/api/tasks/{task['id']}/attempts", {"agents": [
        {"agent": "claude", "model": "model_small"}, {"agent": "claude", "model": "model_medium"}]})
    page.goto(f"{board.url}/#/tasks/{task['id']}")
    live(page)
    check = page.get_by_test_id("attempt-1").get_by_test_id("attempt-check")
    expect(check).to_have_text("— the project has no check command: set one in its settings")
    check.get_by_role("link").click()
    expect(page.get_by_label("Check command")).to_be_visible()


def test_the_best_of_n_rows_name_their_selects_and_their_defaults(board, page, phone,
                                                                     screenshot):
    task = demo_task(board, "Add a greeting function")
    board.api("PUT", f"/api/tasks/{task['id']}", {"model": "model_large",
                                                   "thinking_effort": "low"})
    for language, names, model, effort in (
            ("en", ["Agent", "Model", "Effort"], "Task's model: Large", "Task's effort: Low"),
            ("tr", ["Ajan", "Model", "Efor"], "Görevin modeli: Büyük", "Görevin eforu: Düşük")):
        board.api("PUT", "/api/settings", {"language": language})
        page.goto(f"{board.url}/#/tasks/{task['id']}")
        expect(task_heading(page, task["title"])).to_be_visible()
        page.get_by_role("button", name=("Run with several agents" if language == "en"
                                         else "Birkaç ajanla çalıştır")).click()
        rows = page.get_by_role("dialog").locator(".attempt-row")
        expect(rows).to_have_count(2)
        for n in range(2):
            row = rows.nth(n)
            expect(row.locator(".attempt-field-name")).to_have_text(names)
            for field in row.locator(".attempt-field").all():
                expect(field.locator(".attempt-field-name")).to_be_visible()
            selects = row.locator("select")
            if n == 0:  # the second row's tier is another when one CLI only is installed
                expect(selects.nth(1).locator("option:checked")).to_have_text(model)
            expect(selects.nth(2).locator("option:checked")).to_have_text(effort)
        screenshot(page, f"best-of-n-rows-{language}")
        page.keyboard.press("Escape")
        expect(page.get_by_role("dialog")).to_have_count(0)

    # on a phone each select takes the row's width: its default is read whole
    phone_page = phone.new_page()
    phone_page.goto(f"{board.url}/#/tasks/{task['id']}")
    expect(task_heading(phone_page, task["title"])).to_be_visible()
    phone_page.get_by_role("button", name="Birkaç ajanla çalıştır").click()
    form = phone_page.locator("form.attempts-form")
    width = form.bounding_box()["width"]
    selects = form.locator(".attempt-row select")
    expect(selects).to_have_count(6)
    assert all(box["width"] >= width - 1 for box in
               (selects.nth(i).bounding_box() for i in range(6))), "a select cut short"


#: Each layout shift of the page since it loaded, in window.shifts: what moved, and by how much.
SHIFTS = """window.shifts = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) window.shifts.push(
  e.sources.map((s) => [s.node?.id || s.node?.className || "?", s.previousRect.y,
                        s.currentRect.y]));
}).observe({ type: "layout-shift", buffered: true });"""


def test_the_board_holds_still_as_the_first_task_starts_and_the_last_ends(board, page):
    page.add_init_script(SHIFTS)  # nothing moves as the page loads (the header: Needs you)
    demo = board.demo_project()
    task = demo_task(board, "Document the app in the README")  # it asks: it runs until moved
    open_board(page, board, demo["id"])
    hint = column(page, "In progress").get_by_test_id("board-hint")
    expect(hint).to_have_text("Drag a card to In progress to start its agent "
                              "(or choose In progress in its “Move to…” list).")
    backlog = column(page, "Backlog")
    first = card(backlog, "Add a greeting function")
    where = first.bounding_box()
    start(board, task)
    running = card(column(page, "In progress"), task["title"])
    expect(running.locator(".run-mark")).to_be_visible()
    expect(hint).to_have_count(0)
    assert first.bounding_box() == where, "the board moved as the first task started"
    assert page.evaluate("window.shifts") == [], "the board moved as it loaded"
    expect(page.locator("#app-header")).not_to_contain_text("null")

    # a move that would stop the agent asks first, by the "Move to" select (a press meant as
    # a drag picks an option on its release), a drop or Alt+Left; Cancel leaves it running
    move = running.get_by_role("combobox", name=f"Move {task['task_key']} to another column")
    sure = page.get_by_role("dialog")

    def alt_left():
        running.focus()
        page.keyboard.press("Alt+ArrowLeft")

    ways = {"select": lambda: move.select_option("backlog"), "key": alt_left,
            "drop": lambda: running.drag_to(column(page, "Backlog").get_by_role("heading"))}
    for way, ask in ways.items():
        ask()
        expect(sure, way).to_contain_text(f"{task['task_key']} is running: moving it to "
                                          "Backlog stops its agent.")
        sure.get_by_role("button", name="Cancel").click()
        expect(sure).to_have_count(0)
        assert board.task(task["id"])["status"] == "in_progress", way
        expect(running.locator(".run-mark")).to_be_visible()
    # a held Alt+Left moves once: its repeats neither move nor ask
    running.dispatch_event("keydown", {"key": "ArrowLeft", "altKey": True, "repeat": True})
    expect(sure).to_have_count(0)
    # the task page's "Move to" asks the same: Cancel keeps it running and shows where it is
    page.goto(f"{board.url}/#/tasks/{task['id']}")
    moves = page.get_by_role("combobox", name="Move to")
    moves.select_option("backlog")
    expect(sure).to_contain_text(f"{task['task_key']} is running: moving it to Backlog")
    sure.get_by_role("button", name="Cancel").click()
    expect(moves).to_have_value("in_progress")
    assert board.task(task["id"])["status"] == "in_progress"
    page.go_back()
    alt_left()
    sure.get_by_role("button", name="Stop and move").click()
    board.wait_status(task["id"], "backlog")
    expect(hint).to_be_visible()
    assert first.bounding_box() == where, "the board moved as the last task ended"
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []


def test_a_new_project_gets_a_branch_per_task_unless_turned_off(board, page, tmp_path):
    (tmp_path / "shop").mkdir()
    code = make_repo(tmp_path / "shop")
    plain = tmp_path / "plain"
    plain.mkdir()
    page.goto(f"{board.url}/#/")
    live(page)
    page.get_by_role("button", name="New project").first.click()
    form = dialog(page, "New project")
    branch = form.get_by_label("Branch and worktree per task")
    expect(branch).to_be_checked()
    expect(form.locator("[data-field=autoBranch]")).to_contain_text(
        "your checked-out branch and your files stay as they are")
    form.get_by_label("Name").fill("Shop")
    # a folder that is no git repository: no branch can be made there, and the dialog says so
    folder = form.get_by_label("Working directory")
    folder.fill(str(plain))
    note = form.locator("[data-note=noGit]")
    expect(note).to_have_text("No branch per task here: this folder is not a git repository. "
                              "Tasks will run in the folder itself; run git init and commit "
                              "once there to get a branch per task.")
    expect(branch).not_to_be_checked()
    expect(branch).to_be_disabled()
    folder.fill(str(code))  # a repository: the choice is back, on
    expect(note).to_be_hidden()
    expect(branch).to_be_checked()
    expect(branch).to_be_enabled()
    form.get_by_role("button", name="Create project").click()
    expect(form).to_have_count(0)
    shop = next(p for p in board.api("GET", "/api/projects") if p["name"] == "Shop")
    assert board.api("GET", f"/api/projects/{shop['id']}")["autoBranch"] == 1

    # agents at once above 1 without a branch per task: the settings warn
    settings_page(page, board, shop)
    warning = page.locator("[data-warning=share]")
    expect(warning).to_be_hidden()
    page.get_by_label("Agents at once").fill("2")
    expect(warning).to_be_hidden()
    page.get_by_label("Branch and worktree per task").uncheck()
    expect(warning).to_be_visible()
    expect(warning).to_contain_text("Agents share one checkout")

    board.api("PUT", "/api/settings", {"language": "tr"})
    page.goto(f"{board.url}/#/")
    page.get_by_role("button", name="Yeni proje").first.click()
    form = dialog(page, "Yeni proje")
    expect(form.get_by_label("Görev başına dal ve çalışma ağacı")).to_be_checked()
    expect(form.locator("[data-field=autoBranch]")).to_contain_text("Siz kapatmadıkça açık")
    # created in the same moment as the folder is typed, before any answer: it asks first
    form.locator("[data-field=name] input").fill("Plain")
    posted = []
    page.on("request", lambda r: posted.append(r.url) if r.method == "POST" else None)
    form.get_by_label("Çalışma dizini").evaluate(
        "(el, dir) => { el.value = dir; el.dispatchEvent(new Event('input', {bubbles: true}));"
        " el.form.requestSubmit(); }", str(plain))
    expect(form.locator("[data-note=noGit]")).to_contain_text("bu klasör bir git deposu değil")
    expect(form).to_have_count(1)
    assert posted == [], "created before the folder's answer"
    form.get_by_role("button", name="Projeyi oluştur").click()
    expect(form).to_have_count(0)
    plain_project = next(p for p in board.api("GET", "/api/projects") if p["name"] == "Plain")
    assert board.api("GET", f"/api/projects/{plain_project['id']}")["autoBranch"] == 0



def header_links_whole(page):
    """Each link of the header is wholly on the screen (none cut at its right edge)."""
    width = page.viewport_size["width"]
    edges = page.locator("#app-header .main-nav a").evaluate_all(
        "(links) => links.map((a) => [a.textContent, a.getBoundingClientRect().right])")
    assert edges and all(right <= width for _, right in edges), edges


def test_a_phone_shows_the_header_whole_the_active_tab_and_stays_as_a_card_moves(
        board, phone, screenshot):
    page = phone.new_page()
    demo = board.demo_project()
    failed = demo_task(board, "Fix the off-by-one in count_to")
    board.api("PATCH", f"/api/tasks/{failed['id']}/status", {"status": "failed"})
    for language, connected in (("en", "Live"), ("tr", "Canlı")):
        board.api("PUT", "/api/settings", {"language": language})
        page.goto(f"{board.url}/#/projects/{demo['id']}/schedules")
        expect(page.get_by_test_id("connection")).to_have_text(connected)
        expect(page.get_by_test_id("attention-badge")).to_have_text("1")
        header_links_whole(page)
        active = page.locator(".project-head .tab.active")
        expect(active).to_be_in_viewport(ratio=1)
        page.goto(f"{board.url}/#/projects/{demo['id']}/settings")
        expect(page.locator(".project-head .tab.active")).to_have_attribute(
            "href", f"#/projects/{demo['id']}/settings")
        expect(page.locator(".project-head .tab.active")).to_be_in_viewport(ratio=1)
        screenshot(page, f"phone-settings-tab-{language}")
    board.api("PUT", "/api/settings", {"language": "en"})

    open_board(page, board, demo["id"])
    backlog = column(page, "Backlog")
    title = "Add a greeting function"
    expect(backlog.get_by_role("heading")).to_be_in_viewport()
    before = page.locator(".board").evaluate("(el) => el.scrollLeft")
    move = card(backlog, title).get_by_role("combobox",
                                            name=re.compile("Move .* to another column"))
    move.focus()  # as a tap leaves it
    move.select_option(label="Done")
    moved = card(column(page, "Done"), title)
    expect(moved).to_be_focused()
    task = demo_task(board, title)
    board.wait_status(task["id"], "done")
    assert page.locator(".board").evaluate("(el) => el.scrollLeft") == before
    expect(backlog.get_by_role("heading")).to_be_in_viewport()


def test_a_schedule_says_on_or_off_offers_agent_and_effort_and_names_its_zone(board, page):
    demo = board.demo_project()
    schedule = board.api("POST", f"/api/projects/{demo['id']}/schedules", {
        "name": "Nightly check", "cron": "0 3 * * *", "timezone": "Europe/Istanbul",
        "task": {"title": "Check the dependencies"}})
    page.goto(f"{board.url}/#/projects/{demo['id']}/schedules")  # a browser in UTC
    live(page)
    item = page.get_by_role("article", name="Nightly check")
    # the next fire in the time its cron is read in, named
    expect(item.get_by_test_id("schedule-next")).to_have_text(
        re.compile(r"03:00 Europe/Istanbul \(in \d+ (hr|min|sec)\)$"))
    switch = item.locator(".switch-label")
    expect(switch.locator("span:visible")).to_have_text("On")
    item.get_by_role("checkbox", name="Enabled: Nightly check").uncheck()
    expect(switch.locator("span:visible")).to_have_text("Off")
    expect(item.get_by_test_id("schedule-next")).to_have_text("off")
    assert board.api("GET", f"/api/schedules/{schedule['id']}")["enabled"] is False

    item.get_by_role("button", name="Edit: Nightly check").click()
    form = dialog(page, "Edit schedule")
    agent = form.get_by_label("Agent")
    expect(agent.locator("option:checked")).to_have_text("Project's (Claude Code)")
    agent.select_option(label="Codex")
    form.get_by_label("Effort").select_option(label="High")
    form.get_by_role("button", name="Save").click()
    expect(form).to_have_count(0)
    assert board.api("GET", f"/api/schedules/{schedule['id']}")["task"] == {
        "title": "Check the dependencies", "agent": "codex", "effort": "high"}
    expect(item.get_by_test_id("schedule-makes")).to_contain_text("Codex")
    expect(item.get_by_test_id("schedule-makes")).to_contain_text("High effort")

    board.api("PUT", "/api/settings", {"language": "tr"})
    expect(switch.locator("span:visible")).to_have_text("Kapalı")
    item.get_by_role("checkbox").check()
    expect(switch.locator("span:visible")).to_have_text("Açık")
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []



def test_the_new_dialogs_keep_their_buttons_in_sight_and_say_what_they_need(board, page):
    page.set_viewport_size({"width": 1366, "height": 800})
    for language, new, create, preview, title in (
            ("en", "New project", "Create project", "shows as", "New task"),
            ("tr", "Yeni proje", "Projeyi oluştur", "görünüşü", "Yeni görev")):
        board.api("PUT", "/api/settings", {"language": language})
        page.goto(f"{board.url}/#/")
        expect(page.get_by_role("button", name=new).first).to_be_visible()
        page.get_by_role("button", name=new).first.click()
        form = dialog(page, new)
        # the icon's preview: none before there is a name, then "shows as" and the icon
        icon = form.locator(".icon-preview")
        expect(icon).to_be_hidden()
        form.locator("[data-key=name]").fill("Shop")
        expect(icon).to_be_visible()
        expect(icon).to_have_text(f"{preview}S")
        expect(form.get_by_role("button", name=create)).to_be_in_viewport(ratio=1)
        page.keyboard.press("Escape")

        page.goto(f"{board.url}/#/projects/{board.demo_project()['id']}")
        page.get_by_test_id("new-task").click()
        form = dialog(page, title)
        expect(form.locator("label", has=page.locator(".req")).first).to_contain_text(
            "Title *" if language == "en" else "Başlık *")
        expect(form.locator(".actions .primary")).to_be_in_viewport(ratio=1)
        page.keyboard.press("Escape")


def test_agent_usage_totals_agree_and_its_axis_reads_plainly(board, page):
    task = demo_task(board, "Add a greeting function")
    ended_runs(board, task, (("claude", 0.5, 0), ("codex", 0.25, 1)))  # best of 2
    page.goto(f"{board.url}/#/usage")
    live(page)
    for table in ("usage-agents", "usage-tiers"):  # the task once in each total
        expect(page.get_by_test_id(table).locator("tfoot td").first).to_have_text("1")
    expect(page.get_by_test_id("usage-counted-twice")).to_have_count(1)  # the agents' rows
    expect(page.get_by_test_id("usage-counted-twice")).to_contain_text(
        "counts in each of their rows; the total counts it once")
    expect(page.get_by_test_id("usage-total")).to_have_text("≈$0.750 estimated")
    expect(page.get_by_test_id("usage-today")).to_have_text("≈$0.750")
    expect(page.get_by_test_id("cost-chart").locator(".axis text")).to_have_text(
        ["$0", "$0.50", "$1"])

    board.api("PUT", "/api/settings", {"language": "tr"})
    expect(page.get_by_test_id("usage-counted-twice")).to_contain_text("toplam onu bir kez sayar")
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []

