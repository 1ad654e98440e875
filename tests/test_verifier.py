"""autoTest: a verifier run judges finished work (design.md §5 "Verifier")."""

import os
import re
import shlex
import subprocess

import pytest

import taskboard
from agent_helpers import RUN, read_calls
from conftest import git, make_repo, wait_for


def calls(agent_dir):
    return read_calls(agent_dir)


def verifier_calls(agent_dir):
    return [c for c in calls(agent_dir) if c["stdin"].startswith("You are reviewing")]


def run_statuses(task_id):
    with taskboard.tx() as t:
        return [(r["kind"], r["status"]) for r in t.all(
            "SELECT kind, status FROM runs WHERE task_id = ? ORDER BY id", (task_id,))]


def start(api, client, description, **project_fields):
    project = api.project(autoTest=True, testPrompt="Run `make check` first.",
                          **project_fields)
    task = api.task(project["id"], description=description,
                    acceptance_criteria="hello.txt exists")
    api.move(task["id"], "in_progress")
    return task["id"]


def status(client, task_id):
    return client.get(f"/api/tasks/{task_id}").json["status"]


def test_verifier_approval_moves_the_task_to_done(api, client, fake_agent_dir):
    task_id = start(api, client, "fake:ok fake:verdict=approve")
    wait_for(lambda: status(client, task_id) == "done", RUN, message="approval → done")
    [call] = verifier_calls(fake_agent_dir)
    argv = call["argv"]
    assert "--dangerously-skip-permissions" not in argv and "--resume" not in argv
    assert argv[argv.index("--tools") + 1] == "Read,Grep,Glob,Bash"
    allowed = argv[argv.index("--allowedTools") + 1:]
    assert "Read" in allowed and "Bash(git diff)" in allowed and "Bash(pytest:*)" in allowed
    assert not any(rule.startswith(("Edit", "Write", "Bash(rm")) for rule in allowed)
    assert "Run `make check` first." in call["stdin"] and "hello.txt exists" in call["stdin"]
    assert run_statuses(task_id) == [("task", "ok"), ("verifier", "approved")]


def test_verifier_rejection_resumes_the_agent_with_its_feedback(api, client,
                                                                 fake_agent_dir):
    task_id = start(api, client, "fake:ok fake:verdict=reject fake:resume=hang")
    wait_for(lambda: len([c for c in calls(fake_agent_dir) if "--resume" in c["argv"]]) == 1,
             RUN, message="the agent resumed with the verifier's feedback")
    resumed = [c for c in calls(fake_agent_dir) if "--resume" in c["argv"]][0]
    assert "please add a test" in resumed["stdin"]
    task = client.get(f"/api/tasks/{task_id}").json
    assert task["status"] == "in_progress" and task["revision_count"] == 1
    revisions = client.get(f"/api/tasks/{task_id}/revisions").json
    assert "please add a test" in revisions[0]["feedback"]
    # where a person talks to the agent, and in the log: what it was sent, and by whom
    said = [(m["author"], m["text"], m["state"])
            for m in client.get(f"/api/tasks/{task_id}/messages").json if m["author"] != "agent"]
    assert said == [("verifier", revisions[0]["feedback"], "sent")]
    taskboard.runtime.logs.flush()
    entries = client.get(f"/api/tasks/{task_id}/logs").json
    assert [(e["author"], e["message"]) for e in entries
            if e["kind"] == "message" and e["author"] != "agent"] == \
        [("verifier", revisions[0]["feedback"])]


def test_verifier_stops_after_three_automatic_revisions(api, client, fake_agent_dir):
    task_id = start(api, client, "fake:ok fake:verdict=reject fake:resume=ok")
    wait_for(lambda: len(verifier_calls(fake_agent_dir)) == 4 and status(client, task_id)
             == "testing" and not taskboard.runtime.agents.verifiers, RUN * 2,
             message="four verdicts, then the task waits in testing")
    assert client.get(f"/api/tasks/{task_id}").json["revision_count"] == 3
    assert run_statuses(task_id).count(("verifier", "rejected")) == 4


def test_verifier_without_a_verdict_leaves_the_task_in_testing_saying_why(api, client,
                                                                         fake_agent_dir, tb):
    task_id = start(api, client, "fake:ok fake:verdict=none")
    wait_for(lambda: run_statuses(task_id)[-1:] == [("verifier", "failed")], RUN,
             message="the verifier run to end without a verdict")
    tb.logs.flush()
    logs = client.get(f"/api/tasks/{task_id}/logs").json
    assert status(client, task_id) == "testing"
    assert any("no verdict" in e["message"] and e["isError"] for e in logs)


def test_verdict_after_a_manual_move_is_ignored(api, client, fake_agent_dir):
    gate = fake_agent_dir / "gate"  # the verifier's verdict waits for it, never opened
    task_id = start(api, client, f"fake:ok fake:verdict=approve fake:verifier-hold={gate}")
    wait_for(lambda: verifier_calls(fake_agent_dir), RUN, message="the verifier to start")
    api.move(task_id, "failed")  # the person decides first
    wait_for(lambda: not taskboard.runtime.agents.verifiers, RUN,
             message="the verifier to be stopped")
    assert status(client, task_id) == "failed"


@pytest.mark.parametrize("texts,verdict", [
    (["```json\n{\"verdict\": \"approve\", \"summary\": \"ok\"}\n```"], "approve"),
    (["a", "```json\n{\"verdict\": \"reject\"}\n```", "```\n{\"verdict\": \"approve\"}\n```"],
     "approve"),
    (["no block here"], None),
    (["```json\n{not json}\n```"], None),
    (["```json\n{\"verdict\": \"maybe\"}\n```"], None),
])
def test_parse_verdict_takes_the_last_fenced_block(texts, verdict):
    parsed, problem = taskboard.parse_verdict(texts)
    assert (parsed or {}).get("verdict") == verdict
    assert (problem is None) == (verdict is not None)


def test_verifier_session_never_replaces_the_tasks_session(api, client, fake_agent_dir):
    start(api, client, "fake:ok fake:verdict=reject fake:resume=hang")
    wait_for(lambda: [c for c in calls(fake_agent_dir) if "--resume" in c["argv"]], RUN,
             message="the agent to resume")
    first, verifier, resumed = calls(fake_agent_dir)[:3]
    assert resumed["argv"][resumed["argv"].index("--resume") + 1] == first["session_id"]
    assert verifier["session_id"] != first["session_id"]


def test_verifier_rules_allow_no_command_that_writes_or_runs_programs():
    """`find -delete`, `find -exec`, `rg --pre`, `tree -o`, `git log --output` would pass a
    prefix rule."""
    rules = " ".join(taskboard.VERIFIER_TOOLS + taskboard.PLANNER_TOOLS)
    for command in ("find", "rg", "rm", "mv", "cp", "sed", "tee", "curl", "python -c", "sh"):
        assert f"Bash({command}:" not in rules and f"Bash({command} " not in rules
    assert "Bash" not in taskboard.VERIFIER_TOOLS and "Bash" not in taskboard.PLANNER_TOOLS
    prefixes = {command for command, prefix in bash_rules(
        taskboard.VERIFIER_TOOLS + taskboard.PLANNER_TOOLS).items() if prefix}
    assert not prefixes & {"tree", "git log", "git show", "git diff"}, "-o, --output write"


# --- the read-only allow-lists grant no write (design §11) ------------------------------
# Claude Code's Bash rule matching, modelled from its permission docs (the rule syntax of
# `--allowedTools`, agent-cli.md §3.1; code.claude.com/docs/en/permissions), since tests
# never run the real CLI:
#   - `Bash(cmd)` matches exactly `cmd`; `Bash(cmd:*)`, like `Bash(cmd *)`, matches `cmd`
#     and `cmd <anything>`: a prefix on a word boundary, whatever options follow;
#   - a compound command (`;`, `&&`, `||`, `|`, `&`, newline) needs every part granted;
#   - an output redirection (other than to /dev/null) is checked as a file write, which no
#     list grants (no Edit/Write tool, default permission mode), so it is refused;
#   - command and process substitution ask even when allow-listed (injection check).
# It grants at least what the CLI grants for these attempts, so every attempt it grants is
# run in a scratch repository and must write nothing.

#: Granted commands that run the project's code by intent (the verifier builds and tests
#: the work); exempt from the write check, and never the planner's.
RUNS_PROJECT_CODE = {
    "pytest", "python -m pytest", "python3 -m pytest", "npm test", "npm run test",
    "npm run build", "make test", "make check", "cargo test", "cargo build", "go test",
    "go build", "mvn test", "./gradlew test", "tox"}
#: Ways to write `{out}` appended to a granted command: options of tree, git, find, sort,
#: curl…; redirections; a second command; substitutions.
WRITE_ATTEMPTS = (
    "--output={out}", "--output {out}", "--out={out}", "-o {out}", "-o{out}", "-O {out}",
    "--output-file={out}", "-fprint {out}", "-exec touch {out} +", "-delete",
    "> {out}", ">> {out}", "2> {out}", "&> {out}", ">| {out}", "| tee {out}",
    "; touch {out}", "&& touch {out}", "|| touch {out}", "& touch {out}", "\ntouch {out}",
    "$(touch {out})", "`touch {out}`", "<(touch {out})")
OPERATORS = {";", "&&", "||", "|", "&", "|&"}


def bash_rules(tools):
    """{command: is it a prefix rule} for the Bash(...) rules of an allow-list."""
    rules = {}
    for tool in tools:
        if match := re.fullmatch(r"Bash\((.+?)(:\*)?\)", tool):
            assert "*" not in match[1], f"{tool}: the model knows no inner wildcard"
            rules[match[1]] = bool(match[2])
    return rules


def granted(rules, command):
    """Whether Claude Code runs `command` unasked under `rules` (the model above)."""
    if any(s in command for s in ("$(", "`", "<(", ">(")):
        return False
    for line in command.split("\n"):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        parts, words = [], []
        for token in lexer:
            if token in OPERATORS:
                parts, words = parts + [words], []
            else:
                words.append(token)
        for part in [*parts, words]:
            text, tokens = [], iter(part)
            for word in tokens:
                if ">" in word and set(word) <= set("<>&|"):
                    if next(tokens, "") != "/dev/null":
                        return False
                elif word == "<":
                    next(tokens, None)  # reading a file is no write
                else:
                    text.append(word)
            text = " ".join(text)
            if text and not any(text == cmd or (prefix and text.startswith(cmd + " "))
                                for cmd, prefix in rules.items()):
                return False
    return True


def test_rule_model_follows_the_documented_matching():
    assert granted({"git log": True}, "git log --output=/tmp/x"), "the hole §11 closes"
    assert granted({"ls": True}, "ls") and granted({"ls": True}, "ls -la src")
    assert not granted({"ls": True}, "lsof -i")
    assert not granted({"ls": True}, "ls && rm -rf src") and not granted(
        {"ls": True}, "ls | tee x")
    assert granted({"ls": True, "wc": True}, "ls | wc -l")
    assert not granted({"cat": True}, "cat a > b") and granted({"cat": True},
                                                               "cat a > /dev/null")
    assert not granted({"cat": True}, "cat $(touch x)")
    assert granted({"git diff": False}, "git diff")
    assert not granted({"git diff": False}, "git diff --output=x")


@pytest.fixture(scope="module")
def scratch_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("allow-list") / "repo"
    repo.mkdir()
    make_repo(repo)
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('hi')\n")
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "app")
    (repo / "src" / "app.py").write_text("print('hello')\n")  # a change for git diff
    return repo


def repo_files(repo):
    """Every file's bytes; not .git/index, the stat cache `git status` may refresh."""
    return {str(path.relative_to(repo)): path.read_bytes() for path in repo.rglob("*")
            if path.is_file() and path != repo / ".git" / "index"}


def run_in(repo, command):
    env = {"PATH": os.environ["PATH"], "HOME": str(repo.parent), "LC_ALL": "C",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat", "PAGER": "cat"}
    return subprocess.run(["bash", "-c", command], cwd=repo, env=env, timeout=30,
                          stdin=subprocess.DEVNULL, capture_output=True)


#: command → did it write; both lists share most commands, each is run once.
WROTE = {}


def writes(repo, command):
    """Whether running `command` in `repo` changed any file (undone when it made one)."""
    if command not in WROTE:
        before = repo_files(repo)
        run_in(repo, command)
        WROTE[command] = repo_files(repo) != before
        (repo / "out.txt").unlink(missing_ok=True)  # so the next attempts are judged apart
    return WROTE[command]


def test_write_check_sees_the_writes_prefix_rules_used_to_allow(scratch_repo):
    """The check below is not blind: `git log --output` (granted before) does write."""
    assert writes(scratch_repo, f"git log --output={scratch_repo / 'out.txt'}")


@pytest.mark.parametrize("tools", ["PLANNER_TOOLS", "VERIFIER_TOOLS"])
def test_read_only_rules_grant_no_command_that_writes(scratch_repo, tools):
    rules = bash_rules(getattr(taskboard, tools))
    exempt = set(rules) & RUNS_PROJECT_CODE
    assert not (tools == "PLANNER_TOOLS" and exempt), "the planner runs no project code"
    out = scratch_repo / "out.txt"
    lines = [f"{command} {attempt.format(out=out)}" for command in sorted(set(rules) - exempt)
             for attempt in WRITE_ATTEMPTS]
    ran = [line for line in lines if granted(rules, line)]
    assert ran, "some attempts are granted (options that do not write): run them"
    assert [line for line in ran if writes(scratch_repo, line)] == []
