"""What the sandbox costs the board's own git (design.md §17 v6, issue 55): the end-of-run
commit of a run's leftovers and a task's diff (DIFF_SCRIPT), each timed sandboxed and
unsandboxed (COMMIT_SCRIPT, DIFF_SCRIPT as they are), interleaved.

A sandboxed run that ends by itself commits its leftovers in its own sandbox as it ends
(RUN_START's end: run_end()), and the board then puts the run's commits, made on its copy of
the repository's refs (OWN_REFS), on its branch, outside any sandbox, in a process of its
own (commit_leftovers()).  What that end costs: the run's sandbox (its layout, an agent's)
running `true` with the end, less the same running `true` without it, plus the sync.  A
run that was stopped (its sandbox killed first) has the board commit in a sandbox of the
board's git (git_sandbox()'s layout, through in_sandbox()), the sync after it in the same
process: timed too, with the floor under it (that sandbox running `true`, added to the
unsandboxed commit: what no commit in a sandbox of its own can beat).

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/git_sandbox.py             # 30 of each, each way
    python bench/git_sandbox.py --runs 5    # smoke test

A repository beside a data dir with task worktrees in it, as the board lays them out;
each commit commits one changed file (the change is made before the timer starts), each
diff diffs the worktree against its base with one new file (a worktree for each way, as
each way keeps its branch differently).  The goal: the end-of-run commit's p50 (with the
sync) <= 1.5x the unsandboxed one's.  Needs a bubblewrap that works here.

How to read the output: `figure <name> <value>` lines, then BENCH_RESULT {...} for
bench/run.py.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import types

from _common import REPO_ROOT, emit_result, percentile, result_row

sys.path.insert(0, REPO_ROOT)
import taskboard  # noqa: E402

GOAL_RATIO = 1.5


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=B", "-c", "user.email=b@b", *args], cwd=cwd,
                   check=True, capture_output=True)


def timed(argv, cwd, env, stderr=False):
    """(milliseconds, stdout; with `stderr`, stderr instead) of a command that must work."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    took = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {done.stdout}{done.stderr}")
    return took, done.stderr if stderr else done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="commits and diffs each way")
    args = parser.parse_args()
    state = taskboard.try_sandbox(["bwrap"])
    if not state["works"]:
        sys.exit(f"bubblewrap does not work here: {state['error']}")
    taskboard.runtime = types.SimpleNamespace(config={"bwrap": ["bwrap"]})
    with tempfile.TemporaryDirectory(prefix="tb-git-sandbox-bench-") as tmp:
        repo, data = os.path.join(tmp, "code"), os.path.join(tmp, "data")
        worktrees = {"bubblewrap": os.path.join(data, "worktrees", "1", "T-1"),
                     "none": os.path.join(data, "worktrees", "1", "T-2")}
        os.makedirs(repo)
        git(repo, "init", "-q", "-b", "main")
        for n in range(200):  # a small project
            with open(os.path.join(repo, f"file{n}.txt"), "w") as f:
                f.write(f"line {n}\n" * 50)
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "initial")
        for n, mode in enumerate(worktrees, 1):
            git(repo, "worktree", "add", "-q", "-b", f"task/t-{n}", worktrees[mode])
        base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                              text=True).stdout.strip()
        env = {**os.environ, **taskboard.GIT_ENV, "GIT_AUTHOR_NAME": "B",
               "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "B",
               "GIT_COMMITTER_EMAIL": "b@b"}
        layout = {"agent": None, "command": [], "files": [], "hide": [],  # git_sandbox()'s
                  "git": taskboard.git_dirs(repo)[1], "offline": True}
        boards = {**layout, "read_only": False, "out": [os.path.dirname(worktrees["none"])]}
        argv, run_env = taskboard.in_sandbox(  # the copy of refs, as a run's start makes it
            ["sh", "-c", taskboard.in_repository('refs "$1" "$2"', layout["git"], boards), "sh",
             worktrees["bubblewrap"], "task/t-1"], repo, env, boards, data)
        timed(argv, repo, run_env)
        after = taskboard.sync_after(repo, worktrees["bubblewrap"], "task/t-1", layout["git"])
        task = {"task_key": "T-1", "project_id": 1}
        run = {**layout, "agent": "claude", "project": 1, "command": ["true"],
               "read_only": False}  # an agent's run, as prepare_run() lays it out
        end = taskboard.run_end(task, {}, worktrees["bubblewrap"], types.SimpleNamespace(
            worktree=lambda task, project: worktrees["bubblewrap"]))
        times = {key: [] for key in ("end", "sync", "run", "own", "commit", "diff-bubblewrap",
                                     "diff-none", "nothing-bubblewrap", "nothing-none")}
        for n in range(args.runs):
            sandboxed, bare = worktrees["bubblewrap"], worktrees["none"]
            for worktree in (sandboxed, bare):
                with open(os.path.join(worktree, "file0.txt"), "a") as f:
                    f.write(f"change {n}\n")
            # a run that ends by itself: its sandbox commits, then the board syncs
            argv, run_env = taskboard.in_sandbox(["true"], sandboxed, env, {**run, "end": end},
                                                 data)
            took, out = timed(argv, sandboxed, run_env, stderr=True)
            assert f"{taskboard.RUN_END_MARK}: committed" in out, out
            times["end"].append(took)
            took, out = timed(["sh", "-c", after], sandboxed, env)
            assert "refused" not in out, out
            times["sync"].append(took)
            argv, run_env = taskboard.in_sandbox(["true"], sandboxed, env, run, data)
            times["run"].append(timed(argv, sandboxed, run_env)[0])
            took, out = timed(["sh", "-c", taskboard.COMMIT_SCRIPT, "sh", f"commit {n}"],
                              bare, env)
            assert out.strip().endswith("committed"), out
            times["commit"].append(took)
            # a stopped run's: the board's git commits in a sandbox of its own, then syncs
            with open(os.path.join(sandboxed, "file0.txt"), "a") as f:
                f.write(f"more {n}\n")
            argv, run_env = taskboard.in_sandbox(
                ["sh", "-c", taskboard.COMMIT_SCRIPT, "sh", f"commit {n}"], sandboxed, env,
                {**layout, "read_only": False, "after": after}, data)
            took, out = timed(argv, sandboxed, run_env)
            assert out.strip().endswith("committed"), out
            times["own"].append(took)
            for mode, worktree in worktrees.items():
                with open(os.path.join(worktree, "new.txt"), "w") as f:
                    f.write(f"new {n}\n")
                argv, run_env = taskboard.in_sandbox(
                    ["sh", "-c", taskboard.DIFF_SCRIPT, "sh", base], worktree, env,
                    {**layout, "read_only": True} if mode == "bubblewrap" else None, data)
                took, out = timed(argv, worktree, run_env)
                assert "change" in out, out
                times[f"diff-{mode}"].append(took)
                os.remove(os.path.join(worktree, "new.txt"))
                # the floor: the commit's sandbox of its own (layout, script) running nothing
                argv, run_env = taskboard.in_sandbox(
                    ["true"], worktree, env, {**layout, "read_only": False}
                    if mode == "bubblewrap" else None, data)
                times[f"nothing-{mode}"].append(timed(argv, worktree, run_env)[0])
        branch = subprocess.run(["git", "log", "--format=%s", "task/t-1"], cwd=repo,
                                capture_output=True, text=True).stdout
        assert f"commit {args.runs - 1}" in branch and "uncommitted changes" in branch, \
            "the commits came home"
    p50 = {key: percentile(sorted(values), 0.5) for key, values in times.items()}
    bare = p50["commit"]
    ended = p50["end"] - p50["run"] + p50["sync"]
    rows = [result_row("commit p50, unsandboxed", round(bare, 1), "ms")]
    print(f"figure commit_p50_unsandboxed_ms {bare:.1f}")
    print(f"figure run_end_commit_in_its_sandbox_extra_p50_ms {p50['end'] - p50['run']:.1f}")
    print(f"figure run_end_sync_p50_ms {p50['sync']:.1f}")
    print(f"figure run_end_commit_p50_ms {ended:.1f}")
    print(f"ratio run_end_commit_p50_sandboxed_unsandboxed {ended / bare:.2f} "
          f"(goal <= {GOAL_RATIO})")
    rows.append(result_row("end-of-run commit p50, sandboxed (in the run's sandbox, + sync)",
                           round(ended, 1), "ms", baseline=round(bare, 1),
                           ratio=round(ended / bare, 2), goal=f"<= {GOAL_RATIO}x",
                           met=ended / bare <= GOAL_RATIO))
    own = p50["own"]
    alone = p50["nothing-bubblewrap"] - p50["nothing-none"]
    print(f"figure stopped_run_commit_p50_ms {own:.1f}")
    print(f"ratio stopped_run_commit_p50_sandboxed_unsandboxed {own / bare:.2f}")
    print(f"figure sandbox_alone_p50_ms {alone:.1f}")
    print(f"ratio stopped_run_commit_floor {(bare + alone) / bare:.2f}")
    rows += [result_row("a stopped run's commit p50 (a sandbox of its own, + sync)",
                        round(own, 1), "ms", baseline=round(bare, 1), ratio=round(own / bare, 2)),
             result_row("its floor: unsandboxed commit + that sandbox alone", round(
                 bare + alone, 1), "ms", baseline=round(bare, 1),
                 ratio=round((bare + alone) / bare, 2))]
    sandboxed, bare = p50["diff-bubblewrap"], p50["diff-none"]
    print(f"figure diff_p50_unsandboxed_ms {bare:.1f}")
    print(f"figure diff_p50_sandboxed_ms {sandboxed:.1f}")
    print(f"ratio diff_p50_sandboxed_unsandboxed {sandboxed / bare:.2f}")
    rows += [result_row("diff p50, unsandboxed", round(bare, 1), "ms"),
             result_row("diff p50, sandboxed", round(sandboxed, 1), "ms",
                        baseline=round(bare, 1), ratio=round(sandboxed / bare, 2))]
    emit_result("git_sandbox", rows, repo=REPO_ROOT)


if __name__ == "__main__":
    main()
