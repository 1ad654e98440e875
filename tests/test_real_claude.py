"""The real Claude Code CLI (claude_stub.CLAUDE_VERSION) over the two-way control protocol.

No board here: each test drives one `claude` process directly, the way the board will
(design.md §12), against claude_stub's loopback Messages API. The CLI is installed with npm on
first use (see claude_stub.claude_cli); without npm or the registry these tests skip with the
reason. Select them with `pytest tests/test_real_claude.py` or `-k real_claude`.

Shapes are compared with the recordings in fixtures/agent-streams/claude-control-*.jsonl (the
fields the board reads), not the exact text.
"""

import json
import os

import pytest

from claude_stub import QUESTION, ClaudeSession, claude_env, message_text

STREAMS = os.path.join(os.path.dirname(__file__), "fixtures", "agent-streams")

BASH = "MODE:bash echo hello > hello.txt && cat hello.txt"


@pytest.fixture
def claude(real_claude, claude_api, tmp_path):
    """Starts `claude` sessions in tmp_path/"repo" with their own $HOME; ends them after."""
    cwd, home = tmp_path / "repo", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    sessions = []

    def start(**env):
        session = ClaudeSession(real_claude, cwd, claude_env(claude_api, home, **env))
        session.cwd = cwd
        sessions.append(session)
        return session
    yield start
    for session in sessions:
        session.stop()


def recorded(name, predicate):
    """The first line the CLI wrote in recording NAME that satisfies predicate."""
    with open(os.path.join(STREAMS, f"claude-control-{name}.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return next(line["msg"] for line in lines if line["dir"] == "out" and predicate(line["msg"]))


def assert_shaped_like(live, record, *inner):
    """live has every key record has, at the top and inside the nested dicts named by inner
    (e.g. "request", "request.input")."""
    for path in ("", *inner):
        a, b = live, record
        for key in filter(None, path.split(".")):
            a, b = a[key], b[key]
        missing = set(b) - set(a)
        assert not missing, f"{path or 'top level'} lacks {sorted(missing)}: {json.dumps(a)[:500]}"


def is_control_request(subtype):
    return lambda m: m.get("type") == "control_request" and m["request"]["subtype"] == subtype


def is_response_to(request_id):
    return lambda m: (m.get("type") == "control_response"
                      and m["response"].get("request_id") == request_id)


def is_tool_result(m):
    content = m.get("message", {}).get("content") if m.get("type") == "user" else None
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def start_turn(session, prompt, hooks=None):
    """initialize (answered) and the first user message; returns the system init line."""
    session.initialize(hooks=hooks)
    answer = session.read_until(is_response_to("req_init"), what="the initialize response")
    assert answer["response"]["subtype"] == "success"
    assert_shaped_like(answer, recorded("approve", is_response_to("req_init")),
                       "response", "response.response")
    session.say(prompt)
    init = session.read_until(lambda m: m.get("subtype") == "init", what="the system init line")
    assert init["claude_code_version"] == "2.1.197"
    assert init["permissionMode"] == "default"
    assert_shaped_like(init, recorded("approve", lambda m: m.get("subtype") == "init"))
    return init


def test_approve_runs_the_tool_and_succeeds(claude, claude_api):
    session = claude()
    init = start_turn(session, BASH)

    ask = session.control_request("can_use_tool")
    assert ask["request"]["tool_name"] == "Bash"
    assert ask["request"]["input"]["command"] == "echo hello > hello.txt && cat hello.txt"
    assert ask["request"]["tool_use_id"].startswith("toolu_")
    assert not (session.cwd / "hello.txt").exists(), "ran before it was allowed"
    assert_shaped_like(ask, recorded("approve", is_control_request("can_use_tool")),
                       "request", "request.input")
    session.allow(ask)

    echoed = session.read_until(is_response_to(ask["request_id"]), what="the allow echoed")
    assert echoed["response"]["response"]["behavior"] == "allow"
    tool = session.read_until(is_tool_result, what="the Bash tool result")
    assert tool["tool_use_result"]["stdout"] == "hello"
    result = session.result()
    assert (result["subtype"], result["is_error"], result["num_turns"]) == ("success", False, 2)
    assert result["result"] == "Tool said: hello"
    assert result["session_id"] == init["session_id"]
    assert result["permission_denials"] == []
    assert_shaped_like(result, recorded("approve", lambda m: m.get("type") == "result"), "usage")
    assert (session.cwd / "hello.txt").read_text() == "hello\n"

    # The stub saw the question and then the tool's answer.
    assert len(claude_api.messages()) == 2
    session.close_stdin()
    assert session.wait() == 0


def test_deny_skips_the_tool_and_says_why(claude, claude_api):
    session = claude()
    start_turn(session, BASH)
    ask = session.control_request("can_use_tool")
    session.deny(ask, "The reviewer said no: do not write files.")

    tool = session.read_until(is_tool_result, what="the denied tool result")
    block = tool["message"]["content"][0]
    assert block["is_error"] is True
    assert block["content"] == "The reviewer said no: do not write files."
    assert block["tool_use_id"] == ask["request"]["tool_use_id"]
    result = session.result()
    assert (result["subtype"], result["is_error"]) == ("success", False)
    assert result["result"] == "Tool said: The reviewer said no: do not write files."
    assert not (session.cwd / "hello.txt").exists()
    session.close_stdin()
    assert session.wait() == 0


def test_question_answers_reach_the_model(claude, claude_api):
    session = claude()
    start_turn(session, "MODE:ask pick a colour")
    ask = session.control_request("can_use_tool")
    assert ask["request"]["tool_name"] == "AskUserQuestion"
    assert ask["request"]["input"] == {"questions": [QUESTION]}
    assert_shaped_like(ask, recorded("question", is_control_request("can_use_tool")),
                       "request", "request.input")

    answers = {QUESTION["question"]: "Blue"}
    session.allow(ask, dict(ask["request"]["input"], answers=answers))
    result = session.result()
    assert (result["subtype"], result["is_error"]) == ("success", False)

    # The second API request carries the answer in its tool_result.
    follow_up = claude_api.messages()[-1]["messages"]
    results = [b for m in follow_up if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    assert results, f"no tool_result in the stub's last request: {json.dumps(follow_up)[:800]}"
    said = results[-1]["content"]
    said = said if isinstance(said, str) else " ".join(b.get("text", "") for b in said)
    assert '"Which colour should the button be?"="Blue"' in said
    assert "Blue" in result["result"]
    session.close_stdin()
    assert session.wait() == 0


def test_follow_up_is_a_second_turn_of_the_same_process(claude, claude_api):
    session = claude()
    init = start_turn(session, "MODE:echo create hello")
    first = session.result()
    assert first["result"] == "You said: create hello"

    session.say("Please also add a line saying world")
    replay = session.read_until(lambda m: m.get("isReplay"), what="the replayed user turn")
    assert replay["message"]["content"] == "Please also add a line saying world"
    second = session.result()
    assert second["result"] == "You said: Please also add a line saying world"
    assert second["session_id"] == first["session_id"] == init["session_id"]
    # total_cost_usd is per process, cumulative (design.md §12: 0.018825 then 0.03765).
    assert second["total_cost_usd"] == pytest.approx(2 * first["total_cost_usd"])
    # The second request carries the whole conversation: both things the person said.
    said = [message_text(m) for m in claude_api.messages()[-1]["messages"]
            if m["role"] == "user"]
    assert said == ["MODE:echo create hello", "Please also add a line saying world"], said

    session.close_stdin()
    assert session.wait() == 0
    assert sum(1 for m in session.seen if m.get("type") == "result") == 2


def test_interrupt_ends_the_turn_and_keeps_the_session(claude, claude_api):
    session = claude()
    start_turn(session, "MODE:slow wait")
    assert claude_api.slow_started.wait(30), "the slow stream never started" + session.story()

    session.interrupt("req_int")
    answer = session.read_until(is_response_to("req_int"), what="the interrupt's response")
    assert answer["response"]["subtype"] == "success"
    result = session.result()
    assert (result["subtype"], result["is_error"]) == ("error_during_execution", True)
    assert_shaped_like(result, recorded("interrupt", lambda m: m.get("type") == "result"))
    assert claude_api.slow_aborted.wait(10), "the CLI kept reading the stream after interrupting"

    # The session stays: a message after the interrupt is the next turn (steering).
    session.say("MODE:echo carry on")
    after = session.result()
    assert (after["subtype"], after["result"]) == ("success", "You said: carry on")
    assert after["session_id"] == result["session_id"]
    kept = " ".join(message_text(m) + " " + json.dumps(m["content"])
                    for m in claude_api.messages()[-1]["messages"] if m["role"] == "user")
    assert "MODE:slow wait" in kept and "[Request interrupted by user]" in kept, kept[-800:]
    session.close_stdin()
    assert session.wait() == 0


def test_stop_hook_block_makes_the_agent_go_on(claude, claude_api):
    session = claude()
    start_turn(session, "MODE:echo create hello",
               hooks={"Stop": [{"matcher": None, "hookCallbackIds": ["stop_1"]}]})

    hook = session.control_request("hook_callback")
    assert not [m for m in session.seen if m.get("type") == "result"], "result before the hook"
    assert hook["request"]["callback_id"] == "stop_1"
    assert hook["request"]["input"]["hook_event_name"] == "Stop"
    assert hook["request"]["input"]["stop_hook_active"] is False
    assert hook["request"]["input"]["last_assistant_message"] == "You said: create hello"
    assert_shaped_like(hook, recorded("stop-hook", is_control_request("hook_callback")),
                       "request", "request.input")
    reason = "Before you stop: also say the word FINISHED."
    session.respond(hook["request_id"], {"decision": "block", "reason": reason})

    again = session.control_request("hook_callback")
    assert not [m for m in session.seen if m.get("type") == "result"], "result before the hook"
    assert again["request"]["input"]["stop_hook_active"] is True
    assert reason in again["request"]["input"]["last_assistant_message"]
    session.respond(again["request_id"], {})

    result = session.result()
    assert (result["subtype"], result["is_error"], result["num_turns"]) == ("success", False, 2)
    assert reason in result["result"]
    assert len(claude_api.messages()) == 2
    session.close_stdin()
    assert session.wait() == 0
