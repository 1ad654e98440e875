"""What the sandbox costs the board's own git (design.md §17 v6, issue 55): the end-of-run
commit of a run's leftovers (COMMIT_SCRIPT) and a task's diff (DIFF_SCRIPT), each timed
sandboxed (git_sandbox()'s layout, through in_sandbox()) and unsandboxed, interleaved.  The
sandboxed commit is followed, as commit_leftovers() runs it, in the same process but outside
the sandbox, by the sync of the run's branch from its copy of the repository's refs
(OWN_REFS): the whole end of a sandboxed run against an unsandboxed one's.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/git_sandbox.py             # 30 of each, each way
    python bench/git_sandbox.py --runs 5    # smoke test

A repository beside a data dir with one task worktree in it, as the board lays them out;
each commit commits one changed file (the change is made before the timer starts), each
diff diffs the worktree against its base with one new file (a worktree for each way, as
each way keeps its branch differently).  The goal: the sandboxed commit's p50 (with the
sync) <= 1.5x the unsandboxed one's.  The floor under it: the same sandbox (layout, script
and bubblewrap) running `true` against `true` unsandboxed, added to the unsandboxed commit:
what no sandboxed commit can beat.  Needs a bubblewrap that works here.

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


def timed(argv, cwd, env):
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    took = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {done.stdout}{done.stderr}")
    return took, done.stdout


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
        times = {(what, mode): [] for what in ("commit", "diff", "nothing")
                 for mode in ("bubblewrap", "none")}
        for n in range(args.runs * 2):
            mode = ("bubblewrap", "none")[n % 2]
            worktree = worktrees[mode]
            with open(os.path.join(worktree, "file0.txt"), "a") as f:
                f.write(f"change {n}\n")
            argv, run_env = taskboard.in_sandbox(
                ["sh", "-c", taskboard.COMMIT_SCRIPT, "sh", f"commit {n}"], worktree, env,
                {**layout, "read_only": False, "after": after} if mode == "bubblewrap"
                else None, data)
            took, out = timed(argv, worktree, run_env)
            assert out.strip().endswith("committed"), out
            times["commit", mode].append(took)
            with open(os.path.join(worktree, "new.txt"), "w") as f:
                f.write(f"new {n}\n")
            argv, run_env = taskboard.in_sandbox(
                ["sh", "-c", taskboard.DIFF_SCRIPT, "sh", base], worktree, env,
                {**layout, "read_only": True} if mode == "bubblewrap" else None, data)
            took, out = timed(argv, worktree, run_env)
            assert "change" in out, out
            times["diff", mode].append(took)
            os.remove(os.path.join(worktree, "new.txt"))
            # the floor: the commit's sandbox (its layout, its script) running nothing
            argv, run_env = taskboard.in_sandbox(
                ["true"], worktree, env, {**layout, "read_only": False}
                if mode == "bubblewrap" else None, data)
            times["nothing", mode].append(timed(argv, worktree, run_env)[0])
        branch = subprocess.run(["git", "log", "--format=%s", "task/t-1"], cwd=repo,
                                capture_output=True, text=True).stdout
        assert f"commit {args.runs * 2 - 2}" in branch, "the commits came home"
    p50 = {key: percentile(sorted(values), 0.5) for key, values in times.items()}
    rows = []
    for what in ("commit", "diff"):
        sandboxed, bare = p50[what, "bubblewrap"], p50[what, "none"]
        print(f"figure {what}_p50_unsandboxed_ms {bare:.1f}")
        print(f"figure {what}_p50_sandboxed_ms {sandboxed:.1f}")
        print(f"ratio {what}_p50_sandboxed_unsandboxed {sandboxed / bare:.2f}"
              + (f" (goal <= {GOAL_RATIO})" if what == "commit" else ""))
        rows += [result_row(f"{what} p50, unsandboxed", round(bare, 1), "ms"),
                 result_row(f"{what} p50, sandboxed", round(sandboxed, 1), "ms",
                            baseline=round(bare, 1), ratio=round(sandboxed / bare, 2),
                            goal=f"<= {GOAL_RATIO}x" if what == "commit" else "",
                            met=sandboxed / bare <= GOAL_RATIO if what == "commit" else None)]
    # What the sandbox alone costs (bubblewrap and the script that lays it out, running
    # `true`), added to the unsandboxed commit: no sandboxed commit can be faster than that.
    alone = p50["nothing", "bubblewrap"] - p50["nothing", "none"]
    floor = (p50["commit", "none"] + alone) / p50["commit", "none"]
    print(f"figure sandbox_alone_p50_ms {alone:.1f}")
    print(f"ratio commit_floor_sandbox_alone_plus_unsandboxed {floor:.2f}")
    rows += [result_row("the commit's sandbox alone, running nothing (extra p50)",
                        round(alone, 1), "ms"),
             result_row("floor: unsandboxed commit + the sandbox alone", round(
                 p50["commit", "none"] + alone, 1), "ms", baseline=round(p50["commit", "none"], 1),
                 ratio=round(floor, 2), goal=f"<= {GOAL_RATIO}x", met=floor <= GOAL_RATIO)]
    emit_result("git_sandbox", rows, repo=REPO_ROOT)


if __name__ == "__main__":
    main()
