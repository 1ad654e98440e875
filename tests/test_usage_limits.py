"""Usage limits (design.md §14): a run that ends on the agent's usage or rate limit with a
reset time is not a failure.  The task waits (waitingUntil), the queue starts nothing else
on that agent until then (kept over a restart), and the session resumes by itself."""
import datetime as dt
import json
import sys

import pytest

import taskboard
from agent_helpers import get_task, logs, read_calls, start, task_calls, wait_status
from conftest import FAKE_AGENT, desk, fake_cli_environ, wait_for

RUN = 20
#: A moment in the tests of reset_time: 10:00 UTC, 11:00 in Berlin.
NOW = dt.datetime(2026, 11, 26, 10, 0, tzinfo=dt.UTC).timestamp()


@pytest.fixture
def config(tmp_path):
    return taskboard.parse_args(
        ["--db", str(tmp_path / "data" / "taskboard.db"),
         "--agent-command", f"{sys.executable} {FAKE_AGENT}"], environ=fake_cli_environ())


@pytest.fixture(autouse=True)
def prompt_resets(monkeypatch):
    """A reset the fake names a second or two ahead is kept as it is."""
    monkeypatch.setattr(taskboard, "LIMIT_MIN_SECONDS", 0)


def at(text):
    return taskboard.parse_iso(text).timestamp()


RESET = int(at("2026-11-26T15:00:00Z"))


@pytest.mark.parametrize("text, seconds", [
    ("You've hit your usage limit. Upgrade to Pro or try again in 2 hours 5 minutes.", 7500),
    ("You've hit your usage limit. Try again in 4 days 1 hour.", 4 * 86400 + 3600),
    ("[API Error: Quota exceeded for quota metric. Please retry in 37.2s.]", 37.2),
    ('{"error":{"code":429,"details":[{"retryDelay":"41s"}]}}', 41),
    ("429 Too Many Requests; retry-after: 30", 30),
    ("Rate limit reached for gpt-5-codex. Please try again in 20s.", 20),
    ("Rate limit reached. Please try again in 1m30s.", 90),
])
def test_reset_time_reads_each_clis_wait(text, seconds):
    assert taskboard.reset_time(text, NOW) == pytest.approx(NOW + seconds)


@pytest.mark.parametrize("text, expected", [
    ("Claude AI usage limit reached|1764169200", 1764169200),
    ("usage limit: resets at 2026-11-26T15:00:00Z", at("2026-11-26T15:00:00Z")),
    # 2pm in Berlin is 13:00 UTC, later today
    ("You've hit your limit · resets 2pm (Europe/Berlin)", at("2026-11-26T13:00:00Z")),
    # 9am in Berlin has passed today (it is 11:00 there): tomorrow's
    ("You've hit your limit · resets 9am (Europe/Berlin)", at("2026-11-27T08:00:00Z")),
    ("You've hit your limit · resets 10:30pm (America/New_York)", at("2026-11-27T03:30:00Z")),
])
def test_reset_time_reads_times_and_clock_times(text, expected):
    assert taskboard.reset_time(text, NOW) == pytest.approx(expected)


def next_local(hour, minute):
    """The next hour:minute of the server's clock after NOW."""
    moment = dt.datetime.fromtimestamp(NOW).astimezone().replace(hour=hour, minute=minute,
                                                                 second=0, microsecond=0)
    return (moment if moment.timestamp() > NOW else moment + dt.timedelta(days=1)).timestamp()


def test_reset_time_reads_codexs_clock_in_the_servers_zone():
    """Codex names the reset in the local time of the process (codex-gemini-NOTES.md)."""
    today = "You\u2019ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro)" \
        ", visit https://chatgpt.com/codex/settings/usage or try again at 8:20 AM."
    assert taskboard.reset_time(today, NOW) == pytest.approx(next_local(8, 20))
    later = "You\u2019ve hit your usage limit. Try again at Nov 29th, 2026 6:50 PM."
    assert taskboard.reset_time(later, NOW) == pytest.approx(
        dt.datetime(2026, 11, 29, 18, 50).astimezone().timestamp())


@pytest.mark.parametrize("text", ["Rate limit exceeded", "You've hit your limit",
                                  "resets soon", "resets 25pm"])
def test_reset_time_is_none_when_no_time_is_named(text):
    assert taskboard.reset_time(text, NOW) is None


def parsed(*events):
    parser = taskboard.StreamParser()
    for event in events:
        parser.feed(json.dumps(event))
    return parser


def error_result(text, status=None):
    return {"type": "result", "subtype": "success", "is_error": True, "result": text,
            "api_error_status": status}


def test_only_a_limit_with_a_reset_waits():
    limited = parsed(error_result("You've hit your usage limit. Try again in 3 hours."))
    assert taskboard.judge_run(limited, 1, None)[0] == "wait"
    assert taskboard.limit_resets(limited, NOW) == pytest.approx(NOW + 3 * 3600)
    # a fault that happens to say "try again" is not a limit
    fault = parsed(error_result("Internal error, try again in 5 minutes", 500))
    assert taskboard.judge_run(fault, 1, None)[0] == "retry"
    # a limit that names no reset goes by the retry rules
    blind = parsed(error_result("rate limit exceeded", 429))
    assert taskboard.judge_run(blind, 1, None)[0] == "retry"
    # a run that succeeded is not limited, whatever it said
    fine = parsed({**error_result("try again in 3 hours"), "is_error": False})
    assert taskboard.limit_resets(fine, NOW) is None
    # longer than a week and a day: not believed, the retry rules apply
    far = parsed(error_result("usage limit reached; try again in 30 days"))
    assert taskboard.limit_resets(far, NOW) is None


def test_claude_rate_limit_event_allowed_is_quiet_rejected_is_logged():
    parser = taskboard.StreamParser()
    allowed = parser.feed(json.dumps({"type": "rate_limit_event", "rate_limit_info": {
        "status": "allowed", "resetsAt": RESET, "rateLimitType": "five_hour"}}))
    assert allowed == [] and parser.limit_resets is None
    rejected = parser.feed(json.dumps({"type": "rate_limit_event", "rate_limit_info": {
        "status": "rejected", "resetsAt": RESET, "rateLimitType": "five_hour"}}))
    assert parser.limit_resets == RESET
    assert rejected[0]["is_error"]
    assert "usage limit reached (five_hour, resets at 2026-11-26T15:00:00.000Z)" == \
        rejected[0]["message"]


def waiting(client, task_id):
    def check():
        task = get_task(client, task_id)
        return task if task["waitingUntil"] and not task["is_running"] else None
    return wait_for(check, RUN, message=f"task {task_id} to wait for the usage limit")


def started_at(client, task_id):
    moves = [e for e in logs(client, task_id) if e["kind"] == "status"
             and "-> in_progress" in e["message"]]
    return at(moves[-1]["createdAt"]) if moves else None


def test_a_limited_task_waits_and_resumes_its_session_at_the_reset(client, api, agent_dir):
    project = api.project(autoQueue=True, maxConcurrent=3)
    tid = start(api, project, "fake:limit=4 fake:resume=ok")  # time for the Codex task
    task = waiting(client, tid)
    assert task["status"] == "in_progress" and task["retry_count"] == 0
    assert task["last_error"] is None, "a limit is not a failure"
    entries = wait_for(lambda: [e for e in logs(client, tid) if "continues by itself at "
                                f"{task['waitingUntil']}" in e["message"]] and logs(client, tid),
                       RUN, message="the wait in the log")
    assert any("usage limit reached (five_hour" in e["message"] for e in entries)
    health = client.get("/api/health").json
    assert health["agents"]["claude"]["waitingUntil"] == task["waitingUntil"]
    assert health["agents"]["codex"]["waitingUntil"] is None

    # meanwhile: another Claude task waits in the backlog, a Codex task runs
    later = api.task(project["id"], title="Later", description="fake:ok")
    other = api.task(project["id"], title="Other agent", agent="codex",
                     description="fake:replay=codex-success")
    wait_status(client, other["id"], "testing")

    done = wait_status(client, tid, "testing")
    assert done["waitingUntil"] is None and done["retry_count"] == 0
    first, second = task_calls(agent_dir, tid)
    assert second["argv"][second["argv"].index("--resume") + 1] == first["session_id"]
    assert second["stdin"].strip() == "continue"
    wait_status(client, later["id"], "testing")
    # the other Claude task started only once the limit lifted; the Codex one before
    assert started_at(client, later["id"]) >= at(task["waitingUntil"])
    assert started_at(client, other["id"]) < at(task["waitingUntil"])
    assert client.get("/api/health").json["agents"]["claude"]["waitingUntil"] is None


def test_a_task_started_by_hand_while_its_agent_is_limited_waits_too(client, api, agent_dir):
    project = api.project(maxConcurrent=2)
    first = start(api, project, "fake:limit=2 fake:resume=ok")
    until = waiting(client, first)["waitingUntil"]
    second = start(api, project, "fake:ok")
    task = waiting(client, second)
    assert task["waitingUntil"] == until
    assert task_calls(agent_dir, second) == [], "no agent started before the reset"
    wait_status(client, second, "testing")
    [call] = task_calls(agent_dir, second)
    assert "--resume" not in call["argv"], "it had no session: a fresh one"


def test_moving_a_waiting_task_away_cancels_its_wait(client, api, agent_dir):
    project = api.project()
    tid = start(api, project, "fake:limit=2 fake:resume=ok")
    waiting(client, tid)
    api.move(tid, "backlog")
    task = get_task(client, tid)
    assert (task["status"], task["waitingUntil"]) == ("backlog", None)
    probe = start(api, api.project(agent="codex"), "fake:replay=codex-success")
    wait_status(client, probe, "testing")
    # a Claude task started after the reset runs; the moved one never did
    after = start(api, project, "fake:ok")
    wait_status(client, after, "testing")
    assert len(task_calls(agent_dir, tid)) == 1
    assert get_task(client, tid)["status"] == "backlog"


def test_the_wait_survives_a_restart(client, api, agent_dir, tb):
    config = tb.config
    tid = start(api, api.project(), "fake:limit=3 fake:resume=ok")
    until = waiting(client, tid)["waitingUntil"]
    taskboard.shutdown()
    taskboard.init(config)
    assert client.get("/api/health").json["agents"]["claude"]["waitingUntil"] == until
    task = get_task(client, tid)
    assert (task["status"], task["waitingUntil"]) == ("in_progress", until)
    done = wait_status(client, tid, "testing")
    assert done["retry_count"] == 0
    calls = read_calls(agent_dir)
    assert len(calls) == 2, "nothing started before the reset, once after"
    assert calls[1]["argv"][calls[1]["argv"].index("--resume") + 1] == calls[0]["session_id"]
    assert calls[1]["time"] >= at(until)


def test_a_429_that_names_no_reset_goes_by_the_retry_rules(client, api, agent_dir, tb):
    """The real Claude Code 2.1.197 with an API key, given a 429 (recorded): no
    rate_limit_event, no time in the text — an ordinary retry, not a wait."""
    tb.config["retry_base_seconds"] = 0.05
    tid = start(api, api.project(maxRetries=1), "fake:replay=claude-rate-limit-429")
    task = wait_status(client, tid, "failed")
    assert task["retry_count"] == 1 and task["waitingUntil"] is None
    assert "429" in task["last_error"] and "no retries left" in task["last_error"]


def test_opencode_429_with_retry_after_waits(client, api, agent_dir):
    """OpenCode retries a 429 itself, then prints one error line carrying the response's
    retry-after (recorded: 2 seconds)."""
    tid = start(api, api.project(agent="opencode"), "fake:replay=opencode-rate-limit")
    task = waiting(client, tid)
    assert task["retry_count"] == 0
    assert client.get("/api/health").json["agents"]["opencode"]["waitingUntil"]


@pytest.mark.parametrize("text, expected", [
    # a date without a year: the next one
    ("You've hit your limit · resets Nov 28, 2pm (Europe/Berlin)", at("2026-11-28T13:00:00Z")),
    ("You've hit your limit · resets Nov 28 at 2pm (Europe/Berlin)", at("2026-11-28T13:00:00Z")),
    ("You've hit your limit · resets Jan 2 at 9am (Europe/Berlin)", at("2027-01-02T08:00:00Z")),
    # not the first "try again" (no time there) but the reset after it
    ("Limit reached; try again 3 times and it resets 2pm (Europe/Berlin)",
     at("2026-11-26T13:00:00Z")),
    # a moment past (10:58 in Berlin is 09:58 UTC): now, not tomorrow
    ("You've hit your limit · resets 10:58am (Europe/Berlin)", at("2026-11-26T09:58:00Z")),
    ("stub: HTTP 429 (retry-after-ms: 2500, at 1795670242555)", NOW + 2.5),
])
def test_reset_time_reads_dates_without_a_year_and_later_mentions(text, expected):
    assert taskboard.reset_time(text, NOW) == pytest.approx(expected)


def test_a_limit_event_earlier_in_the_run_does_not_make_another_error_a_wait():
    parser = parsed({"type": "rate_limit_event", "rate_limit_info": {
        "status": "rejected", "resetsAt": RESET, "rateLimitType": "seven_day_opus"}},
        error_result("Prompt is too long"))
    assert taskboard.limit_resets(parser, NOW) is None
    assert taskboard.judge_run(parser, 1, None)[0] == "fail"


def test_changes_requested_while_limited_reach_the_agent_at_the_reset(client, api, agent_dir):
    tid = start(api, api.project(), "fake:ok")
    first = wait_status(client, tid, "testing")
    taskboard.set_agent_limit("claude", taskboard.time.time() + 1, "a test's limit")
    desk(client, "request_changes", {"id": tid, "feedback": "Greet in Turkish too."})
    assert waiting(client, tid)["status"] == "in_progress"
    wait_status(client, tid, "testing")
    second = task_calls(agent_dir, tid)[1]
    assert second["argv"][second["argv"].index("--resume") + 1] == first["session_id"]
    assert second["stdin"].strip() == "Greet in Turkish too.", "the feedback, not 'continue'"


def test_a_verifier_whose_agent_is_limited_checks_the_work_at_the_reset(client, api,
                                                                          agent_dir):
    tid = start(api, api.project(autoTest=True), "fake:ok fake:verdict=approve")
    taskboard.set_agent_limit("claude", taskboard.time.time() + 1.5, "a test's limit")
    wait_for(lambda: (t := get_task(client, tid))["status"] == "testing" and t["waitingUntil"],
             RUN, message="the verifier to wait")
    assert len(task_calls(agent_dir, tid)) == 1, "no verifier before the reset"
    done = wait_status(client, tid, "done")
    assert done["waitingUntil"] is None
    assert task_calls(agent_dir, tid)[1]["stdin"].startswith("You are reviewing the work")


def test_planning_on_a_limited_agent_is_refused_naming_the_reset(client, api):
    project = api.project()
    taskboard.set_agent_limit("claude", taskboard.time.time() + 600, "a test's limit")
    resp = client.post_json(f"/api/projects/{project['id']}/plan", {"topic": "x"},
                            expect_errors=True)
    assert resp.status_int == 409
    assert "usage limit until " in resp.json["error"] and "another agent" in resp.json["error"]


def test_a_task_limited_again_and_again_goes_by_the_retry_rules(client, api, agent_dir,
                                                                 monkeypatch):
    monkeypatch.setattr(taskboard, "MAX_LIMIT_WAITS", 1)
    tid = start(api, api.project(maxRetries=0), "fake:limit=0 fake:resume=limit")
    task = wait_status(client, tid, "failed")
    assert "still limited after 1 waits" in task["last_error"]
    assert len(task_calls(agent_dir, tid)) == 2


@pytest.mark.parametrize("agent, stream", [("codex", "codex-usage-limit"),
                                           ("gemini", "gemini-quota-retry")])
def test_recorded_limits_of_codex_and_gemini_wait_for_the_time_they_name(client, api,
                                                                          agent_dir, agent,
                                                                          stream):
    """As the real CLIs printed them (codex-gemini-NOTES.md): Codex 'try again at 8:20 AM'
    (the next 8:20 of the server's clock), Gemini 'Please retry in 600s'."""
    before = taskboard.time.time()
    tid = start(api, api.project(agent=agent), f"fake:replay={stream}")
    until = at(waiting(client, tid)["waitingUntil"])
    if agent == "codex":
        clock = dt.datetime.fromtimestamp(until).astimezone()
        assert (clock.hour, clock.minute) == (8, 20) and until - before <= 86400
    else:
        assert 600 <= until - before <= 600 + RUN
    health = client.get("/api/health").json
    assert health["agents"][agent]["waitingUntil"] == get_task(client, tid)["waitingUntil"]


def test_gemini_daily_quota_waits_for_the_reset_on_its_stderr(client, api, agent_dir):
    """Gemini's daily quota names no reset on stdout; the API's "Please retry in 3600s."
    is only in the stack trace it prints on stderr (gemini-quota.stderr, the real CLI's)."""
    before = taskboard.time.time()
    tid = start(api, api.project(agent="gemini"), "fake:replay=gemini-quota")
    until = at(waiting(client, tid)["waitingUntil"])
    assert 3600 <= until - before <= 3600 + RUN
    assert get_task(client, tid)["status"] == "in_progress"


def test_a_limit_without_any_reset_goes_by_the_retry_rules(client, api, agent_dir):
    """Codex's plain 429 after its own retries names no time anywhere: no wait, a retry."""
    tid = start(api, api.project(agent="codex", maxRetries=0), "fake:replay=codex-rate-limit")
    task = wait_status(client, tid, "failed")
    assert task["waitingUntil"] is None and "429" in task["last_error"]


def test_a_change_request_waiting_for_a_limit_survives_a_restart(client, api, agent_dir,
                                                                  tb):
    config = tb.config
    tid = start(api, api.project(), "fake:ok")
    first = wait_status(client, tid, "testing")
    taskboard.set_agent_limit("claude", taskboard.time.time() + 2, "a test's limit")
    desk(client, "request_changes", {"id": tid, "feedback": "Greet in Turkish too."})
    waiting(client, tid)
    taskboard.shutdown()
    taskboard.init(config)
    wait_status(client, tid, "testing")
    second = task_calls(agent_dir, tid)[1]
    assert second["argv"][second["argv"].index("--resume") + 1] == first["session_id"]
    assert second["stdin"].strip() == "Greet in Turkish too."
