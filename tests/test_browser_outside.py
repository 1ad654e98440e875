"""What drives the board from outside, in Chromium (design.md §19): Settings → Personal tokens —
a token made, its secret shown once and copied, its use seen, revoked; the server's refusals on
their fields — and a project's Schedules tab — a schedule made, refused, edited, switched off
and deleted, and a fire shown as it happens; both pages on a phone and in Turkish.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import re

import pytest
import requests
from playwright.sync_api import expect

from browser_helpers import dialog, live, sql, task_heading

pytestmark = pytest.mark.usefixtures("console_errors")

#: What the secret panel says of a new token's secret.
SHOWN_ONCE = "it is not shown again"
#: A schedule's time zone in the browser that makes it (not the server's, UTC).
ZONE = "Europe/Istanbul"


def open_tokens(page, board):
    page.goto(f"{board.url}/#/settings")
    live(page)
    page.get_by_role("link", name="Open Personal tokens").click()
    expect(page.get_by_role("heading", name="Personal tokens", level=1)).to_be_visible()


def token_form(page):
    return page.locator(".token-new form")


def field_error(scope, key):
    """The error under a form kit's field (its data-field is the API's name of it)."""
    return scope.locator(f"[data-field='{key}']").get_by_role("alert")


def bearer_get(board, secret, path="/api/projects"):
    return requests.get(board.url + path, headers={"Authorization": f"Bearer {secret}"},
                        timeout=10)


def test_a_token_is_shown_once_copied_used_and_revoked(board, page, context, screenshot):
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=board.url)
    open_tokens(page, board)
    tokens = page.get_by_test_id("token-list")
    expect(tokens).to_have_text("No tokens yet.")
    form = token_form(page)
    # each scope says in one line what it allows; read is ticked for a new token
    expect(form.get_by_role("checkbox", name=re.compile("^read"))).to_be_checked()
    expect(form).to_contain_text("read — GETs and live events")
    expect(form).to_contain_text("approve — answer approvals and questions")
    form.get_by_label("Name").fill("nightly CI")
    form.get_by_role("checkbox", name=re.compile("^write")).check()
    form.get_by_role("button", name="Create token").click()

    panel = page.get_by_test_id("token-secret-panel")
    expect(panel).to_contain_text(SHOWN_ONCE)
    expect(panel.get_by_role("heading")).to_have_text("Your new token nightly CI")
    secret = page.get_by_test_id("token-secret").input_value()
    assert secret.startswith("tbp_")
    panel.get_by_role("button", name="Copy").click()
    expect(panel.get_by_test_id("token-copied")).to_have_text("Copied.")
    assert page.evaluate("() => navigator.clipboard.readText()") == secret
    screenshot(page, "tokens-secret")

    item = page.get_by_role("article", name="nightly CI")
    expect(item.get_by_test_id("token-scopes")).to_have_text("readwrite")
    expect(item.get_by_test_id("token-expires")).to_have_text("never")
    expect(item.get_by_test_id("token-last-used")).to_have_text("never")
    expect(form.get_by_label("Name")).to_have_value("")  # ready for another
    assert secret not in tokens.inner_text()
    (listed,) = board.api("GET", "/api/tokens")
    assert listed["scopes"] == ["read", "write"] and "secret" not in listed
    panel.get_by_role("button", name="I have copied it").click()
    expect(panel).to_be_hidden()
    page.reload()
    expect(item).to_be_visible()
    expect(panel).to_be_hidden()
    assert secret not in page.content(), "the secret is shown once, never again"

    # used by a program: the list says when, read again as the page comes back into view
    assert bearer_get(board, secret).status_code == 200
    page.evaluate("() => window.dispatchEvent(new Event('focus'))")
    expect(item.get_by_test_id("token-last-used")).to_have_text(re.compile(r"\d\d:\d\d \(.*ago\)$"))
    assert board.api("GET", "/api/tokens")[0]["lastUsedAt"] is not None

    # revoked after asking: its bearer is refused from then on
    item.get_by_role("button", name="Revoke: nightly CI").click()
    ask = page.get_by_role("dialog")
    expect(ask).to_contain_text("Revoke nightly CI? Programs that use it are refused (401)")
    ask.get_by_role("button", name="Cancel").click()
    expect(item).to_be_visible()
    item.get_by_role("button", name="Revoke: nightly CI").click()
    page.get_by_role("dialog").get_by_role("button", name="Revoke").click()
    expect(page.get_by_text("Token nightly CI revoked")).to_be_visible()
    expect(tokens).to_have_text("No tokens yet.")
    assert board.api("GET", "/api/tokens") == []
    assert bearer_get(board, secret).status_code == 401


def test_a_past_expiry_and_a_taken_name_are_said_on_their_fields(board, page, console_errors):
    console_errors.allow(r"status of 400 \(Bad Request\) \(http://[^)]*/api/tokens")
    console_errors.allow(r"status of 409 \(Conflict\) \(http://[^)]*/api/tokens")
    board.api("POST", "/api/tokens", {"name": "deploy", "scopes": ["read"]})
    open_tokens(page, board)
    form = token_form(page)
    # the server's pattern of a name, checked before anything is sent
    form.get_by_label("Name").fill("deploy/prod")
    form.get_by_role("button", name="Create token").click()
    expect(field_error(form, "name")).to_have_text("Letters, digits, spaces and . _ - @ only.")
    # a day gone by: the server's refusal, under the expiry
    form.get_by_label("Name").fill("deploy")
    form.get_by_label("Expires on").fill("2020-01-01")
    form.get_by_role("button", name="Create token").click()
    expect(field_error(form, "expiresAt")).to_contain_text("is not in the future")
    expect(field_error(form, "name")).to_be_hidden()
    # no scope at all is refused before sending
    form.get_by_role("checkbox", name=re.compile("^read")).uncheck()
    form.get_by_label("Expires on").fill("")
    form.get_by_role("button", name="Create token").click()
    expect(field_error(form, "scopes")).to_have_text("Pick at least one.")
    form.get_by_role("checkbox", name=re.compile("^approve")).check()
    # a name taken already: the server's 409, under the name
    form.get_by_role("button", name="Create token").click()
    expect(field_error(form, "name")).to_have_text("a token named 'deploy' exists already")
    expect(page.get_by_test_id("token-secret-panel")).to_be_hidden()
    # a later day is taken, at 00:00 of it in the browser's time zone
    form.get_by_label("Name").fill("deploy 2")
    form.get_by_label("Expires on").fill("2099-06-30")
    form.get_by_role("button", name="Create token").click()
    expect(page.get_by_test_id("token-secret-panel")).to_contain_text(SHOWN_ONCE)
    item = page.get_by_role("article", name="deploy 2")
    expect(item.get_by_test_id("token-expires")).to_contain_text("30 Jun")
    made = next(t for t in board.api("GET", "/api/tokens") if t["name"] == "deploy 2")
    assert made["expiresAt"] == "2099-06-30T00:00:00.000Z" and made["scopes"] == ["approve"]


@pytest.fixture
def istanbul(browser, browser_context_args, console_errors):
    """A page of a browser in Istanbul (UTC+3 all year): a new schedule starts with its zone,
    and fires are shown in its local time."""
    context = browser.new_context(**{**browser_context_args, "timezone_id": ZONE})
    context.set_default_timeout(15_000)
    console_errors.watch_context(context)
    yield context.new_page()
    context.close()


def open_schedules(page, board, project_id):
    page.goto(f"{board.url}/#/projects/{project_id}")
    live(page)
    page.get_by_role("link", name="Schedules").click()
    expect(page.get_by_role("heading", name="Schedules", level=2)).to_be_visible()


def schedule_item(page, name):
    return page.get_by_role("article", name=name)


def test_a_schedule_is_made_refused_edited_and_deleted(board, istanbul, console_errors,
                                                       screenshot):
    console_errors.allow(r"status of 400 \(Bad Request\) \(http://[^)]*/schedules")
    page = istanbul
    project = board.demo_project()
    open_schedules(page, board, project["id"])
    items = page.locator(".item-list")
    expect(items).to_have_text("No schedules yet.")
    page.get_by_role("button", name="New schedule").click()
    form = dialog(page, "New schedule")
    expect(form.get_by_label("Time zone")).to_have_value(ZONE)  # the browser's
    expect(form.get_by_label("Enabled")).to_be_checked()
    expect(form).to_contain_text("minute hour day month weekday, e.g. 0 3 * * * = every night at 3")
    form.get_by_label("Name").fill("Nightly check")
    form.get_by_label("When (cron)").fill("0 3 * *")
    form.get_by_label("Title").fill("Check the dependencies")
    form.get_by_label("Type").select_option(label="Chore")
    form.get_by_label("Priority").select_option(label="High")
    form.get_by_role("button", name="Create").click()
    # the server's refusal, under the cron
    expect(field_error(form, "cron")).to_contain_text("must have 5 fields")
    form.get_by_label("When (cron)").fill("0 3 * * *")
    form.get_by_role("button", name="Create").click()
    expect(form).to_have_count(0)

    item = schedule_item(page, "Nightly check")
    expect(item.get_by_test_id("schedule-cron")).to_have_text("0 3 * * *")
    expect(item.get_by_test_id("schedule-timezone")).to_have_text(ZONE)
    expect(item.get_by_test_id("schedule-makes")).to_contain_text(
        "makes a new task and starts it: Check the dependencies")
    expect(item.get_by_test_id("schedule-makes")).to_contain_text("High")
    # its next fire at 03:00 here (the cron is read in Istanbul's time), and how far that is
    expect(item.get_by_test_id("schedule-next")).to_have_text(
        re.compile(r"03:00 Europe/Istanbul \(in \d+ (hr|min|sec)\)$"))
    expect(item.get_by_test_id("schedule-last")).to_have_text("never")
    (saved,) = board.api("GET", f"/api/projects/{project['id']}/schedules")
    assert saved["timezone"] == ZONE and saved["mode"] == "new" and saved["enabled"] is True
    assert saved["task"] == {"title": "Check the dependencies", "type": "chore", "priority": 2}
    assert saved["nextAt"].endswith("T00:00:00.000Z")  # 03:00 in Istanbul
    screenshot(page, "schedules")

    # edited: a bad time zone is refused under its field; then switched off → next fire "off"
    item.get_by_role("button", name="Edit: Nightly check").click()
    form = dialog(page, "Edit schedule")
    expect(form.get_by_label("Title")).to_have_value("Check the dependencies")
    expect(form.get_by_label("Priority")).to_have_value("2")
    form.get_by_label("Time zone").fill("Mars/Olympus")
    form.get_by_role("button", name="Save").click()
    expect(field_error(form, "timezone")).to_contain_text("is not an IANA time zone")
    form.get_by_label("Time zone").fill(ZONE)
    form.get_by_label("Enabled").uncheck()
    form.get_by_label("Description").fill("Run npm outdated and say what is old.")
    form.get_by_role("button", name="Save").click()
    expect(form).to_have_count(0)
    expect(item.get_by_test_id("schedule-next")).to_have_text("off")
    saved = board.api("GET", f"/api/schedules/{saved['id']}")
    assert saved["enabled"] is False and saved["nextAt"] is None
    assert saved["task"] == {"title": "Check the dependencies", "type": "chore", "priority": 2,
                             "description": "Run npm outdated and say what is old."}
    # on again with its switch, which saves at once
    item.get_by_role("checkbox", name="Enabled: Nightly check").check()
    expect(page.get_by_text("Nightly check is on")).to_be_visible()
    expect(item.get_by_test_id("schedule-next")).to_have_text(
        re.compile(r"03:00 Europe/Istanbul \(in "))
    assert board.api("GET", f"/api/schedules/{saved['id']}")["enabled"] is True

    # a change made elsewhere shows at once
    board.api("PUT", f"/api/schedules/{saved['id']}", {"cron": "30 4 * * *"})
    expect(item.get_by_test_id("schedule-cron")).to_have_text("30 4 * * *")
    expect(item.get_by_test_id("schedule-next")).to_have_text(
        re.compile(r"04:30 Europe/Istanbul \(in "))

    # deleted after asking
    item.get_by_role("button", name="Delete: Nightly check").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(page.get_by_text("Schedule Nightly check deleted")).to_be_visible()
    expect(items).to_have_text("No schedules yet.")
    assert board.api("GET", f"/api/projects/{project['id']}/schedules") == []


def make_due(board, schedule):
    """Make a schedule due now: its next fire in the past, then a change that wakes the
    board's scheduler without working out the next fire again (a rename to the same name)."""
    sql(board, "UPDATE schedules SET next_at = '2020-01-01T00:00:00.000Z' WHERE id = ?",
        (schedule["id"],))
    board.api("PUT", f"/api/schedules/{schedule['id']}", {"name": schedule["name"]})


def test_a_fire_shows_as_it_happens(board, page):
    project = board.demo_project()
    schedule = board.api("POST", f"/api/projects/{project['id']}/schedules", {
        "name": "Nightly check", "cron": "0 3 * * *", "timezone": "UTC",
        "task": {"title": "Check the dependencies"}})
    open_schedules(page, board, project["id"])
    item = schedule_item(page, "Nightly check")
    expect(item.get_by_test_id("schedule-last")).to_have_text("never")

    make_due(board, schedule)
    link = item.get_by_test_id("schedule-last-task")
    expect(link).to_have_text(re.compile(r"^[A-Z0-9]+-\d+ Check the dependencies$"))
    expect(item.get_by_test_id("schedule-last")).to_contain_text("ago)")
    expect(item.get_by_test_id("schedule-next")).to_have_text(re.compile(r"03:00 UTC \(in "))
    fired = board.api("GET", f"/api/schedules/{schedule['id']}")
    assert fired["lastTaskId"] and fired["lastError"] is None
    expect(link).to_have_attribute("href", f"#/tasks/{fired['lastTaskId']}")

    # fired again while its task still runs (it waits for an approval): skipped, and why
    assert board.task(fired["lastTaskId"])["status"] == "in_progress"
    make_due(board, schedule)
    expect(item.get_by_test_id("schedule-error")).to_have_text(re.compile(
        r"^skipped: [A-Z0-9]+-\d+, which its last fire made, still runs$"))
    expect(link).to_have_text(re.compile(r"^[A-Z0-9]+-\d+ Check the dependencies$"))

    link.click()
    expect(task_heading(page, "Check the dependencies")).to_be_visible()


def test_tokens_and_schedules_fit_a_phone_in_turkish(board, phone, screenshot):
    project = board.demo_project()
    board.api("PUT", "/api/settings", {"language": "tr"})
    board.api("POST", "/api/tokens", {"name": "nightly CI", "scopes": ["read", "write", "approve"],
                                      "expiresAt": "2099-06-30T00:00:00Z"})
    board.api("POST", f"/api/projects/{project['id']}/schedules", {
        "name": "Nightly dependency check of the whole repository", "cron": "0 3 * * *",
        "timezone": "America/Argentina/Buenos_Aires",
        "task": {"title": "Check the dependencies", "type": "chore", "priority": 3,
                 "model": "model_small"}})
    page = phone.new_page()

    page.goto(f"{board.url}/#/settings")
    expect(page.get_by_test_id("connection")).to_have_text("Canlı")
    page.get_by_role("link", name="Kişisel belirteçleri aç").click()
    expect(page.get_by_role("heading", name="Kişisel belirteçler", level=1)).to_be_visible()
    item = page.get_by_role("article", name="nightly CI")
    expect(item.get_by_test_id("token-last-used")).to_have_text("hiç")
    expect(page.locator(".token-new")).to_contain_text("approve — onayları ve soruları yanıtlama")
    form = token_form(page)
    form.get_by_role("textbox", name="Ad").fill("telefon")
    form.get_by_role("button", name="Belirteç oluştur").click()
    panel = page.get_by_test_id("token-secret-panel")
    expect(panel).to_contain_text("bir daha gösterilmez")
    fits(page, panel, page.get_by_test_id("token-secret"),
         panel.get_by_role("button", name="Kopyala", exact=True),
         item.get_by_role("button", name="İptal et: nightly CI"))
    screenshot(page, "tokens-phone", full_page=True)

    page.goto(f"{board.url}/#/projects/{project['id']}/schedules")
    expect(page.get_by_role("heading", name="Zamanlamalar", level=2)).to_be_visible()
    item = schedule_item(page, "Nightly dependency check of the whole repository")
    expect(item.get_by_test_id("schedule-next")).to_have_text(
        re.compile(r"\(\d+ (sa\.|dk\.|sn\.) sonra\)$"))
    expect(item.get_by_test_id("schedule-last")).to_have_text("hiç")
    expect(item.get_by_test_id("schedule-makes")).to_contain_text(
        "yeni bir görev oluşturup başlatır")
    fits(page, item, item.get_by_role("button", name="Sil: Nightly dependency check"),
         item.get_by_test_id("schedule-timezone"))
    screenshot(page, "schedules-phone", full_page=True)
    page.get_by_role("button", name="Yeni zamanlama").click()
    form = dialog(page, "Yeni zamanlama")
    fits(page, form, form.get_by_label("Ne zaman (cron)"), form.get_by_label("Öncelik"))
    screenshot(page, "schedules-dialog-phone")
    assert page.evaluate("() => window.taskboard.missingKeys('tr')") == []


def fits(page, *locators):
    """Each of locators lies within a phone's width, and the page does not scroll sideways."""
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390, "sideways scroll"
    for locator in locators:
        locator.scroll_into_view_if_needed()
        box = locator.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (locator, box)
