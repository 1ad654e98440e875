"""Agent runs end to end: real tests/fake_agent.py processes (design.md §5, §6; agent-cli.md §3).

The task description picks what the fake agent does (`fake:<directive>`, listed in its
docstring); it records every invocation in $FAKE_AGENT_DIR/calls.jsonl.
"""
import contextlib
import os
import re
import signal
import sqlite3
import sys

import pytest

import taskboard
from agent_helpers import (
    alive,
    assert_stays,
    children,
    get_task,
    logs,
    query,
    read_calls,
    start,
    transcript,
    wait_logs,
    wait_quiet,
    wait_running,
    wait_status,
)
from conftest import assert_error, wait_for

pytestmark = pytest.mark.usefixtures("fast_retries")

#: Seconds to wait for anything that involves an agent process.
RUN = 10


# --- helpers ----------------------------------------------------------------------------


def mentions(text, pattern):
    return text is not None and re.search(pattern, text, re.IGNORECASE) is not None


def failure_logged(entries, pattern):
    """A board-written entry (not the agent's own output) that says why the run failed."""
    return any(e["kind"] in ("system", "status") and mentions(e["message"], pattern)
               for e in entries)


def contract_argv(argv):
    """The recorded argv without what design §6 adds for the board tools (MCP), which the
    run contract leaves out: an `--mcp-config FILE` pair and mcp__taskboard__* tools."""
    out = list(argv)
    if "--mcp-config" in out:
        i = out.index("--mcp-config")
        del out[i:i + 2]
    if "--allowedTools" in out:
        i = out.index("--allowedTools") + 1
        out[i] = ",".join(t for t in out[i].split(",") if not t.startswith("mcp__taskboard__"))
        if not out[i]:
            del out[i - 1:i + 1]
    return out


def base_argv(alias, effort):
    return ["-p", "--output-format", "stream-json", "--verbose", "--model", alias,
            "--effort", effort]


# --- success -----------------------------------------------------------------------------

def test_run_success_moves_task_to_testing_with_usage_cost_and_session(client, api, agent_dir):
    tid = start(api, api.project(), "fake:replay=claude-success")
    task = wait_status(client, tid, "testing")
    [call] = read_calls(agent_dir)
    assert task["session_id"] == call["session_id"]
    assert (task["input_tokens"], task["output_tokens"], task["cache_read_tokens"],
            task["cache_creation_tokens"]) == (2400, 170, 18000, 6000)
    assert task["total_cost"] == pytest.approx(0.03765)
    assert (task["retry_count"], task["permission_denials"], task["last_error"]) == (0, 0, None)
    assert task["started_at"] and task["completed_at"]
    assert task["work_duration_ms"] >= 0
    assert not alive(call["pid"])


def test_agent_text_with_half_a_surrogate_pair_is_kept_and_nothing_after_it_is_lost(
        client, api, agent_dir):
    """JSON can spell half of a UTF-16 pair ("\\ud83d"), which UTF-8 cannot store: the
    text is kept with U+FFFD in its place, the lines after it are written and sent, and the
    raw line keeps the agent's own spelling."""
    tid = start(api, api.project(), "fake:surrogates")
    wait_status(client, tid, "testing")
    messages = [e["message"] for e in logs(client, tid)]
    assert "half a pair: \ufffd!" in messages
    assert "a whole pair: \U0001F600" in messages
    assert "x\ufffdy" in messages
    assert "finished: done \ufffd" in messages
    raw = [row[0] for row in query("SELECT raw FROM task_events WHERE task_id = ? ORDER BY id",
                                   (tid,))]
    assert any(r'"half a pair: \ud83d!"' in line for line in raw)


def test_run_is_live_in_its_own_process_group_while_agent_runs(client, api, agent_dir):
    tid = start(api, api.project(), "fake:hang")
    call = wait_running(client, tid, agent_dir)
    task = get_task(client, tid)
    assert (task["status"], task["is_running"]) == ("in_progress", True)
    assert taskboard.runtime.agents.runs[tid].proc.pid == call["pid"]
    assert call["pgid"] == call["sid"] == call["pid"], "start_new_session: own session+group"
    assert alive(call["pid"])


def test_run_cost_directive_feeds_task_and_agent_usage_stats(client, api, agent_dir):
    project = api.project()
    tid = start(api, project, "fake:ok fake:cost=0.5", model="model_large")
    task = wait_status(client, tid, "testing")
    stats = client.get(f"/api/projects/{project['id']}/stats").json
    assert (stats["agentRuns"], stats["inputTokens"], stats["outputTokens"],
            stats["totalCost"]) == (1, 2400, 170, 0.5)
    assert task["total_cost"] == pytest.approx(0.5)
    usage = client.get("/api/stats/agent-usage").json
    assert usage["usage"] == {"totalInputTokens": 2400, "totalOutputTokens": 170,
                              "totalCacheRead": 18000, "totalCacheCreation": 6000,
                              "totalCost": 0.5, "costEstimated": False, "totalTasks": 1}
    assert usage["models"]["model_large"] == {"tasks": 1, "inputTokens": 2400,
                                              "outputTokens": 170, "cost": 0.5}
    assert [day["cost"] for day in usage["timeline"]] == [0.5]
    assert usage["limits"]["currentUsage"] == 0.5


# --- non-retryable failures ----------------------------------------------------------------

@pytest.mark.parametrize("directive, why", [
    ("fake:replay=claude-not-logged-in", r"not logged in"),
    ("fake:replay=claude-api-error", r"prompt is too long"),
    ("fake:replay=claude-max-turns", r"max(imum)?[ _](number of )?turns"),
    ("fake:budget", r"budget"),
])
def test_run_non_retryable_failure_fails_at_once_saying_why(client, api, agent_dir,
                                                            directive, why):
    tid = start(api, api.project(maxRetries=2), directive)
    task = wait_status(client, tid, "failed")
    assert task["retry_count"] == 0
    assert mentions(task["last_error"], why), task["last_error"]
    wait_logs(client, tid, lambda es: failure_logged(es, why), f"a log entry matching {why}")
    assert_stays(lambda: len(read_calls(agent_dir)) == 1, 0.5, "no retry")


def test_run_command_not_found_fails_at_once_naming_command(client, api, tb):
    config = taskboard.parse_args(["--db", tb.config["db_path"],
                                   "--agent-command", "definitely-missing-xyz"], environ={})
    taskboard.shutdown()
    taskboard.init(config)
    config["retry_base_seconds"] = 0.05
    tid = api.task(api.project(maxRetries=2)["id"], description="fake:ok")["id"]
    client.patch_json(f"/api/tasks/{tid}/status", {"status": "in_progress"})
    task = wait_status(client, tid, "failed")
    assert task["retry_count"] == 0
    assert "definitely-missing-xyz" in task["last_error"]
    wait_logs(client, tid, lambda es: any(
        "definitely-missing-xyz" in e["message"] and
        ("--agent-command" in e["message"] or "TASKBOARD_AGENT_COMMAND" in e["message"])
        for e in es), "a log entry naming the command and how to configure it")


def test_a_deleted_project_folder_fails_saying_so_and_where_to_fix_it(client, api, agent_dir,
                                                                       tmp_path):
    """Not "could not start 'claude' in …": the folder is gone, and the project's settings
    (its Working directory) are where to fix it; no agent was started."""
    folder = tmp_path / "shop"
    folder.mkdir()
    tid = api.task(api.project(workingDir=str(folder), maxRetries=2)["id"],
                   description="fake:ok")["id"]
    folder.rmdir()  # deleted (or moved) after the project was made
    client.patch_json(f"/api/tasks/{tid}/status", {"status": "in_progress"})
    task = wait_status(client, tid, "failed")
    why = f"the project's folder {folder} is gone (deleted or moved): put it back, or set " \
        "the project's Working directory (workingDir) in its settings to where its code is now"
    assert (task["last_error"], task["retry_count"]) == (why, 0)
    wait_logs(client, tid, lambda es: any(why in e["message"] for e in es), "the reason logged")
    assert read_calls(agent_dir) == []


# --- retryable failures --------------------------------------------------------------------

@pytest.mark.parametrize("directive, why", [
    ("fake:exit=3", r"(exit|code|status)\D{0,12}3\b"),
    ("fake:crash", r"(exit|code|status)\D{0,12}1\b|result"),
    ("fake:no-result", r"result"),
    ("fake:overloaded", r"529|overload"),
    ("fake:api-error=429", r"429|rate.?limit"),
    ("fake:api-error=500", r"\b500\b"),
])
def test_run_retryable_failure_retries_fresh_sessions_then_fails(client, api, agent_dir,
                                                                 directive, why):
    tid = start(api, api.project(maxRetries=2), f"Fix the cart. {directive}")
    task = wait_status(client, tid, "failed")
    assert task["retry_count"] == 2
    made = read_calls(agent_dir)
    assert len(made) == 3
    assert len({c["session_id"] for c in made}) == 3, "every retry is a fresh session"
    assert all("--resume" not in c["argv"] for c in made)
    assert "previous attempt" not in made[0]["stdin"].lower()
    for call in made[1:]:
        prompt = call["stdin"]
        assert "Fix the cart." in prompt, "a retry gets the full prompt"
        at = prompt.lower().find("previous attempt")
        assert at >= 0 and "fail" in prompt[at:at + 300].lower(), prompt
        assert mentions(prompt[at:at + 300], why), prompt[at:at + 300]
    assert mentions(task["last_error"], why), task["last_error"]
    entries = wait_logs(client, tid, lambda es: sum(failure_logged([e], why) for e in es) >= 3,
                        "each failure logged with why")
    assert sum(failure_logged([e], r"retry") for e in entries) >= 2, "log says when it retries"
    if directive == "fake:crash":
        assert any(e["kind"] == "raw" and e["message"].startswith('{"type":"assistant"')
                   for e in entries), "the half line is kept as raw"
    assert_stays(lambda: len(read_calls(agent_dir)) == 3, 0.3, "no retry past maxRetries")
    assert query("SELECT COUNT(*) FROM runs WHERE task_id = ?", (tid,)) == [(3,)], \
        "a runs row per run"
    moved = api.move(tid, "in_progress")
    assert moved["retry_count"] == 0, "a manual move to in_progress resets retry_count"
    api.move(tid, "backlog")


def test_run_retry_backoff_doubles_with_jitter(client, api, agent_dir, tb, monkeypatch):
    """base·2^n ±20 %, judged by the delays the board chose and their order, not by how
    long the machine took; each retry starts no sooner than its delay."""
    tb.config["retry_base_seconds"] = 0.5
    chosen, retry_later = [], tb.agents.retry_later

    def recorded(task_id, project_id, delay, start):
        chosen.append(delay)
        return retry_later(task_id, project_id, delay, start)
    monkeypatch.setattr(tb.agents, "retry_later", recorded)
    tid = start(api, api.project(maxRetries=2), "fake:exit=3")
    wait_status(client, tid, "failed", timeout=15)
    first, second = chosen
    assert 0.5 * 0.8 <= first <= 0.5 * 1.2 and 1.0 * 0.8 <= second <= 1.0 * 1.2
    starts = [c["time"] for c in read_calls(agent_dir)]
    assert [b - a >= delay for (a, b), delay in zip(zip(starts, starts[1:]), chosen)] \
        == [True, True]
    said = [e["message"] for e in logs(client, tid) if "attempt failed" in e["message"]]
    assert [m.split(" in ")[-1] for m in said] == [f"{first:.1f}s", f"{second:.1f}s"]


def test_run_retry_that_succeeds_moves_to_testing(client, api, agent_dir):
    tid = start(api, api.project(maxRetries=2), "fake:fail-times=1")
    task = wait_status(client, tid, "testing")
    assert task["retry_count"] == 1
    first, second = read_calls(agent_dir)
    assert first["session_id"] != second["session_id"]
    assert task["session_id"] == second["session_id"]
    assert task["last_error"] is None


def test_run_waiting_for_retry_keeps_slot_and_manual_move_cancels_it(client, api, agent_dir,
                                                                     tb):
    tb.config["retry_base_seconds"] = 30  # the retry must still be pending at the move
    project = api.project(maxConcurrent=1, maxRetries=2)
    a = start(api, project, "fake:exit=3")
    wait_for(lambda: failure_logged(logs(client, a), r"retry"), RUN,
             message="the retry to be scheduled")
    assert get_task(client, a)["status"] == "in_progress"
    b = api.task(project["id"], description="fake:hang")["id"]
    refused = client.patch_json(f"/api/tasks/{b}/status", {"status": "in_progress"},
                                expect_errors=True)
    assert_error(refused, 409, "conflict")
    api.move(a, "backlog")
    api.move(b, "in_progress")
    assert not tb.agents.holds(a), "the pending retry is cancelled and its slot given back"
    wait_running(client, b, agent_dir)
    assert get_task(client, a)["status"] == "backlog" and not tb.agents.holds(a)


# --- timeouts ------------------------------------------------------------------------------

def test_run_task_timeout_kills_process_group(client, api, agent_dir, monkeypatch):
    monkeypatch.setattr(taskboard, "SECONDS_PER_MINUTE", 0.5)
    client.put_json("/api/settings", {"agentIdleTimeoutMinutes": 0})
    project = api.project(taskTimeoutMinutes=1, maxRetries=0)
    tid = start(api, project, "fake:child fake:lines=1000000 fake:sleep=0.05")
    task = wait_status(client, tid, "failed")
    [call], [child] = read_calls(agent_dir), children(agent_dir)
    wait_for(lambda: not alive(call["pid"]) and not alive(child), RUN,
             message="the agent and its child to be killed")
    assert len(transcript(agent_dir, call["pid"])) > 3, "it ran (and printed) until the timeout"
    assert mentions(task["last_error"], r"time ?out|timed out")
    assert not mentions(task["last_error"], r"idle")
    wait_logs(client, tid, lambda es: failure_logged(es, r"time ?out|timed out"),
              "a log entry saying the run timed out")


@pytest.mark.parametrize("extra", ["", "fake:ignore-term"])
def test_run_idle_timeout_kills_process_group_and_retries(client, api, agent_dir, monkeypatch,
                                                          extra):
    monkeypatch.setattr(taskboard, "SECONDS_PER_MINUTE", 0.5)
    monkeypatch.setattr(taskboard, "KILL_GRACE_SECONDS", 1)
    client.put_json("/api/settings", {"agentIdleTimeoutMinutes": 1})
    tid = start(api, api.project(maxRetries=1), f"fake:child fake:hang {extra}")
    task = wait_status(client, tid, "failed", timeout=15)
    assert task["retry_count"] == 1, "an idle timeout is retryable"
    made, kids = read_calls(agent_dir), children(agent_dir)
    assert len(made) == 2 and len(kids) == 2
    wait_for(lambda: not any(alive(p) for p in [c["pid"] for c in made] + kids), RUN,
             message="both agents and their children to be killed")
    assert mentions(task["last_error"], r"idle|no output")
    wait_logs(client, tid, lambda es: failure_logged(es, r"idle|no output"),
              "a log entry saying the run was idle")


# --- manual moves and the concurrency cap ----------------------------------------------------

@pytest.mark.parametrize("to", ["backlog", "testing", "done", "failed"])
def test_run_manual_move_stops_whole_group_without_retry(client, api, agent_dir, to):
    tid = start(api, api.project(maxRetries=2), "fake:child fake:hang")
    call = wait_running(client, tid, agent_dir)
    wait_for(lambda: children(agent_dir), RUN, message="the child to start")
    [child] = children(agent_dir)
    assert api.move(tid, to)["status"] == to
    wait_for(lambda: not alive(call["pid"]) and not alive(child), RUN,
             message="the agent and its child to be killed")
    task = wait_status(client, tid, to)
    assert task["retry_count"] == 0
    assert_stays(lambda: len(read_calls(agent_dir)) == 1
                 and get_task(client, tid)["status"] == to, 0.5,
                 "the stopped run is neither retried nor judged")


def test_run_project_delete_stops_its_running_agents(client, api, agent_dir):
    """spec/interface.md: deleting a project stops all running agents."""
    project = api.project(maxConcurrent=2)
    tids = [start(api, project, "fake:child fake:hang") for _ in range(2)]
    for tid in tids:
        wait_running(client, tid, agent_dir)
    wait_for(lambda: len(children(agent_dir)) == 2, RUN, message="both children to start")
    client.delete(f"/api/projects/{project['id']}")
    pids = [c["pid"] for c in read_calls(agent_dir)] + children(agent_dir)
    wait_for(lambda: not any(alive(p) for p in pids), RUN,
             message="the project's agents and their children to be killed")
    wait_for(lambda: not any(t in taskboard.runtime.agents.runs for t in tids), RUN,
             message="the pool to forget the deleted tasks' runs")


def test_run_start_beyond_max_concurrent_is_409_and_changes_nothing(client, api, agent_dir,
                                                                    snapshot):
    project = api.project(maxConcurrent=2)
    a, b, c = (api.task(project["id"], description="fake:hang")["id"] for _ in range(3))
    api.move(a, "in_progress")
    api.move(b, "in_progress")
    wait_running(client, a, agent_dir)
    wait_running(client, b, agent_dir)
    wait_for(lambda: query("SELECT COUNT(DISTINCT task_id) FROM task_events WHERE kind = "
                           "'user'")[0][0] == 2, RUN,
             message="both prompt echoes (printed after init) to be stored")
    before = snapshot()
    refused = client.patch_json(f"/api/tasks/{c}/status", {"status": "in_progress"},
                                expect_errors=True)
    assert_error(refused, 409, "conflict")
    assert snapshot() == before
    assert get_task(client, c)["status"] == "backlog"
    assert_stays(lambda: len(read_calls(agent_dir)) == 2, 0.3, "nothing started")
    other = start(api, api.project(maxConcurrent=1), "fake:hang")
    wait_running(client, other, agent_dir)  # the cap is per project


# --- what the agent is given ------------------------------------------------------------------

@pytest.mark.parametrize("project_fields, model, alias, effort, flags", [
    # as root, where the CLI refuses the flag, the board answers the requests itself
    ({"permissionMode": "auto-accept"}, "model_large", "opus", "low",
     [] if taskboard.running_as_root() else ["--dangerously-skip-permissions"]),
    ({"permissionMode": "allow-tools", "allowedTools": "Read,Edit,Bash(git *)"},
     "model_medium", "sonnet", "medium", ["--allowedTools", "Read,Edit,Bash(git *)"]),
    ({"permissionMode": "default"}, "model_small", "haiku", "high", []),
    ({"permissionMode": "default", "taskBudgetUsd": 1.5}, "model_medium", "sonnet", "low",
     ["--max-budget-usd", "1.5"]),
])
def test_run_argv_follows_contract(client, api, agent_dir, project_fields, model, alias,
                                   effort, flags):
    tid = start(api, api.project(**project_fields), "fake:ok", model=model,
                thinking_effort=effort)
    wait_status(client, tid, "testing")
    [call] = read_calls(agent_dir)
    assert contract_argv(call["argv"]) == base_argv(alias, effort) + \
        list(taskboard.CHANNEL_FLAGS) + flags
    assert all("fake:ok" not in arg for arg in call["argv"]), "the prompt never goes in argv"


def test_run_env_cwd_and_stdin_follow_contract(client, api, agent_dir, monkeypatch):
    monkeypatch.setenv("TASKBOARD_TOKEN", "board-secret")
    monkeypatch.setenv("TASKBOARD_GIT_HOST_TOKEN", "host-secret")
    monkeypatch.setenv("FAKE_INHERITED", "yes")
    tid = start(api, api.project(), "fake:ok", title="Round totals")
    wait_status(client, tid, "testing")
    [call] = read_calls(agent_dir)
    env = call["env"]
    assert env["TASKBOARD_TASK_ID"] == str(tid)
    assert env["TASKBOARD_URL"].startswith("http")
    assert "TASKBOARD_TOKEN" not in env and "TASKBOARD_GIT_HOST_TOKEN" not in env
    assert (env["FAKE_INHERITED"], env["FAKE_AGENT_DIR"]) == ("yes", str(agent_dir))
    assert os.path.realpath(call["cwd"]) == os.path.realpath(api.workdir)
    assert "Round totals" in call["stdin"] and "fake:ok" in call["stdin"]


def test_run_prompt_holds_task_template_and_enabled_snippets_only(client, api, agent_dir):
    project = api.project(name="Shop")
    pid = project["id"]
    api.template(pid, name="Bug", taskType="bugfix",
                 content="Fix {{task_title}} for {{project_name}} as {{task_type}} at "
                         "{{priority}} priority with {{model}}; keep {{unknown}}")
    api.template(pid, name="Later bug", taskType="bugfix", content="SECOND-BUGFIX-TEMPLATE")
    api.template(pid, name="Docs", taskType="docs", content="DOCS-TEMPLATE")
    api.snippet(pid, name="Style", content="SNIPPET-ENABLED use tabs")
    api.snippet(pid, name="Old", content="SNIPPET-DISABLED", enabled=False)
    tid = start(api, project, "Totals are off by a cent. fake:ok", title="Round totals",
                task_type="bugfix", priority=2, model="model_small",
                acceptance_criteria="CRITERIA: cart tests pass")
    wait_status(client, tid, "testing")
    prompt = read_calls(agent_dir)[0]["stdin"]
    for part in ("Round totals", "Totals are off by a cent.", "CRITERIA: cart tests pass",
                 "SNIPPET-ENABLED use tabs"):
        assert part in prompt
    assert re.search(r"Fix Round totals for Shop as bugfix at high priority with \S+; "
                     r"keep \{\{unknown\}\}", prompt), prompt
    for absent in ("{{model}}", "{{task_title}}", "SECOND-BUGFIX-TEMPLATE", "DOCS-TEMPLATE",
                   "SNIPPET-DISABLED"):
        assert absent not in prompt


def test_run_with_attachment_gets_add_dir_and_file_path_in_prompt(client, api, agent_dir):
    task = api.task(api.project()["id"], description="fake:ok")
    client.post(f"/api/tasks/{task['id']}/attachments",
                upload_files=[("file", "spec.txt", b"details", "text/plain")], status=201)
    api.move(task["id"], "in_progress")
    wait_status(client, task["id"], "testing")
    [call] = read_calls(agent_dir)
    argv = call["argv"]
    add_dir = os.path.realpath(argv[argv.index("--add-dir") + 1])
    paths = re.findall(r"\S*spec\.txt", call["stdin"])
    assert paths, call["stdin"]
    for path in paths:
        assert os.path.realpath(path).startswith(add_dir + os.sep)
        with open(path, "rb") as f:
            assert f.read() == b"details"


# --- the stream ------------------------------------------------------------------------------

def test_run_stream_becomes_log_entries(client, api, agent_dir):
    tid = start(api, api.project(),
                "fake:replay=claude-success fake:stderr=3 fake:garbage")
    wait_status(client, tid, "testing")
    entries = wait_logs(client, tid, lambda es: any(e["kind"] == "stderr" and
                                                    e["message"] == "fake stderr 3" for e in es)
                        and any(e["kind"] == "text" and e["message"].startswith("Created")
                                for e in es), "the whole transcript logged")
    by_kind = {}
    for e in entries:
        by_kind.setdefault(e["kind"], []).append(e)
    assert by_kind["thinking"][0]["message"] == "I should create the file with a shell command."
    texts = [e["message"] for e in by_kind["text"]]
    assert "I'll create the file." in texts and "Created hello.txt containing 'hello'." in texts
    [call] = by_kind["tool_call"]
    assert call["tool"] == "Bash" and "echo hello > hello.txt" in call["message"]
    [result] = by_kind["tool_result"]
    assert result["isError"] is False
    assert isinstance(result["durationMs"], int) and result["durationMs"] >= 0
    assert [e["message"] for e in by_kind["stderr"]] == [f"fake stderr {i}" for i in (1, 2, 3)]
    assert [e["message"] for e in by_kind["raw"]] == ["this line is not JSON"]
    stdout_kinds = [e["kind"] for e in entries
                    if e["kind"] in ("thinking", "text", "tool_call", "tool_result", "raw")]
    assert stdout_kinds[:6] == ["thinking", "text", "tool_call", "tool_result", "text", "raw"]
    run_ids = {e["runId"] for e in entries if e["kind"] not in ("status",)}
    assert len(run_ids - {None}) == 1


def test_run_task_events_keep_every_raw_stdout_line(client, api, agent_dir):
    tid = start(api, api.project(), "fake:replay=claude-success fake:garbage")
    wait_status(client, tid, "testing")
    [call] = read_calls(agent_dir)
    [(run_id,)] = query("SELECT id FROM runs WHERE task_id = ?", (tid,))
    lines = transcript(agent_dir, call["pid"])
    wait_for(lambda: query("SELECT COUNT(*) FROM task_events WHERE task_id = ?", (tid,))
             == [(len(lines),)], RUN, message="every stdout line stored")
    rows = query("SELECT run_id, seq, created_at, kind, raw FROM task_events "
                 "WHERE task_id = ? ORDER BY seq", (tid,))
    assert [r[4] for r in rows] == lines
    assert len(rows) == 11  # the recording's 9, the answer to initialize, the prompt replayed
    assert {r[0] for r in rows} == {run_id}
    seqs = [r[1] for r in rows]
    assert seqs == sorted(set(seqs))
    assert all(r[2] and r[3] for r in rows)


def test_run_permission_denials_are_recorded(client, api, agent_dir):
    tid = start(api, api.project(), "fake:denied")
    task = wait_status(client, tid, "testing")
    assert task["permission_denials"] == 1
    entries = wait_logs(client, tid, lambda es: any(
        e["kind"] in ("system", "status") and mentions(e["message"], r"denied|permission")
        for e in es), "the denial logged prominently")
    [result] = [e for e in entries if e["kind"] == "tool_result"]
    assert result["isError"] is True


def test_run_5000_lines_arrive_complete_and_in_order(client, api, agent_dir, live):
    task = api.task(api.project()["id"], description="fake:lines=5000")
    tid = task["id"]
    ws = live.ws(f"?logs={tid}")
    api.move(tid, "in_progress")
    expected = [f"line {i}" for i in range(5000)]
    pushed, ids = [], []
    while len([m for m in pushed if m.startswith("line ")]) < 5000:
        message = ws.until("task:log", lambda data: data["taskId"] == tid, timeout=RUN)
        for entry in message["data"]["entries"]:
            ids.append(entry["id"])
            if entry["kind"] == "text":
                pushed.append(entry["message"])
    assert [m for m in pushed if m.startswith("line ")] == expected
    assert ids == sorted(set(ids)), "entries pushed once each, in order"
    wait_status(client, tid, "testing")
    entries = wait_logs(client, tid, lambda es: sum(e["kind"] == "text" for e in es) >= 5000)
    stored = [e["message"] for e in entries if e["kind"] == "text"]
    assert [m for m in stored if m.startswith("line ")] == expected
    [call] = read_calls(agent_dir)
    assert len(transcript(agent_dir, call["pid"])) == 5004  # and initialize, the replay
    wait_for(lambda: query("SELECT COUNT(*) FROM task_events WHERE task_id = ?", (tid,))
             == [(5004,)], RUN, message="all 5004 stdout lines stored")


def test_a_burst_of_100000_lines_is_stored_and_sent_whole_and_in_order(client, api, live):
    """Issue 34: one agent printing 100,000 lines as fast as it can; a /ws follower and the
    store get every one, once, in order, and the events keep their seq order."""
    task = api.task(api.project()["id"], description="fake:lines=100000")
    tid = task["id"]
    ws = live.ws(f"?logs={tid}")
    api.move(tid, "in_progress")
    texts, ids, seqs = [], [], []
    while len(texts) < 100_000:
        message = ws.until("task:log", lambda data: data["taskId"] == tid, timeout=RUN)
        seqs.append(message["seq"])
        for entry in message["data"]["entries"]:
            ids.append(entry["id"])
            if entry["kind"] == "text" and entry["message"].startswith("line "):
                texts.append(entry["message"])
    assert texts == [f"line {i}" for i in range(100_000)]
    assert ids == sorted(set(ids)) and seqs == sorted(set(seqs))
    wait_status(client, tid, "testing")
    assert query("SELECT COUNT(*) FROM logs WHERE task_id = ? AND kind = 'text' AND "
                 "message LIKE 'line %'", (tid,)) == [(100_000,)]
    stored = query("SELECT message FROM logs WHERE task_id = ? AND kind = 'text' AND "
                   "message LIKE 'line %' ORDER BY id", (tid,))
    assert [m for (m,) in stored] == texts


def test_run_stdout_and_stderr_interleaved_keep_their_order(client, api, agent_dir):
    tid = start(api, api.project(), "fake:lines=500 fake:stderr=500")
    wait_status(client, tid, "testing")
    entries = wait_logs(client, tid, lambda es: sum(e["kind"] == "stderr" for e in es) == 500
                        and sum(e["kind"] == "text" for e in es) >= 500,
                        "every stdout and stderr line logged")
    assert [e["message"] for e in entries if e["kind"] == "stderr"] == \
        [f"fake stderr {i}" for i in range(1, 501)]
    assert [e["message"] for e in entries if e["kind"] == "text"][:500] == \
        [f"line {i}" for i in range(500)]


# --- server restarts -------------------------------------------------------------------------

def test_restart_interrupts_run_then_resumes_session_without_retry(client, api, agent_dir, tb):
    config = tb.config
    tid = start(api, api.project(), "fake:child fake:hang")
    first = wait_running(client, tid, agent_dir)
    wait_for(lambda: children(agent_dir) and get_task(client, tid)["session_id"], RUN,
             message="the session id to be stored")
    [child] = children(agent_dir)
    db_path = config["db_path"]
    taskboard.shutdown()
    wait_for(lambda: not alive(first["pid"]) and not alive(child), RUN,
             message="shutdown to kill the agent's process group")
    con = sqlite3.connect(db_path)
    try:
        runs = con.execute("SELECT status FROM runs WHERE task_id = ?", (tid,)).fetchall()
        stored = con.execute("SELECT status, retry_count, session_id FROM tasks WHERE id = ?",
                             (tid,)).fetchone()
    finally:
        con.close()
    assert runs == [("interrupted",)]
    assert stored == ("in_progress", 0, first["session_id"])
    taskboard.init(config)
    task = wait_status(client, tid, "testing")
    made = read_calls(agent_dir)
    assert len(made) == 2
    second = made[1]
    argv = second["argv"]
    assert argv[argv.index("--resume") + 1] == first["session_id"]
    assert second["stdin"].strip() == "continue"
    assert second["session_id"] == first["session_id"]
    assert (task["retry_count"], task["session_id"]) == (0, first["session_id"])


def test_restart_resume_of_unknown_session_starts_fresh_session(client, api, agent_dir, tb):
    config = tb.config
    tid = start(api, api.project(maxRetries=2), "Fix it. fake:hang fake:forget")
    first = wait_running(client, tid, agent_dir)
    wait_for(lambda: get_task(client, tid)["session_id"], RUN,
             message="the session id to be stored")
    taskboard.shutdown()
    taskboard.init(config)
    wait_running(client, tid, agent_dir, runs=3)
    _, resumed, fresh = read_calls(agent_dir)
    assert resumed["argv"][resumed["argv"].index("--resume") + 1] == first["session_id"]
    assert "--resume" not in fresh["argv"]
    assert fresh["session_id"] not in (first["session_id"], resumed["session_id"])
    assert "Fix it." in fresh["stdin"], "a fresh session gets the full prompt"
    task = get_task(client, tid)
    assert (task["status"], task["retry_count"]) == ("in_progress", 0)
    wait_for(lambda: get_task(client, tid)["session_id"] == fresh["session_id"], RUN,
             message="the fresh session id to be stored")


def test_run_create_or_put_into_in_progress_at_the_cap_changes_nothing(client, api, agent_dir,
                                                                        snapshot):
    project = api.project(maxConcurrent=1)
    running = start(api, project, "fake:hang")
    wait_quiet(client, running)  # the running agent's last own write
    waiting = api.task(project["id"], title="Waiting")
    before = snapshot()
    response = client.post_json(f"/api/projects/{project['id']}/tasks",
                                {"title": "New", "status": "in_progress"}, status=409)
    assert_error(response, 409, "conflict")
    response = client.put_json(f"/api/tasks/{waiting['id']}",
                               {"title": "Renamed", "status": "in_progress"}, status=409)
    assert_error(response, 409, "conflict")
    assert snapshot() == before


def test_run_ends_when_a_detached_process_keeps_its_output_open(tmp_path, monkeypatch):
    """Regression: an agent that started a daemon in its own session (which the group kill
    cannot reach) and then succeeded stayed in_progress forever, holding its slot."""
    monkeypatch.setattr(taskboard, "EXIT_GRACE_SECONDS", 0.2)
    pid_file = tmp_path / "daemon.pid"
    agent = tmp_path / "daemon_agent.py"
    agent.write_text(f"""import json, subprocess, sys
if "--version" in sys.argv:
    print("daemon-agent 1"); sys.exit(0)
sys.stdin.readline(); sys.stdin.readline()  # initialize, the prompt
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                          start_new_session=True)
open({str(pid_file)!r}, "w").write(str(daemon.pid))
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False,
                   "result": "done", "session_id": "s1"}}), flush=True)
""")
    config = taskboard.parse_args(["--db", str(tmp_path / "data" / "t.db"), "--agent-command",
                                   f"{sys.executable} {agent}"], environ={})
    taskboard.init(config)
    try:
        project = taskboard.create_project({"name": "D", "slug": "d",
                                            "workingDir": str(tmp_path)})
        task = taskboard.create_task(project["id"], {"title": "T", "status": "in_progress"})
        wait_for(lambda: taskboard.get_task(task["id"])["status"] == "testing", RUN,
                 message="the run to end although a daemon holds its stdout")
        assert not taskboard.runtime.agents.holds(task["id"])
    finally:
        taskboard.shutdown()
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
