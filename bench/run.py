"""Every Taskboard benchmark in one go, and one table of their figures against the goals.

Run it by hand, from any directory, with the Python that has Taskboard's dependencies; it is
not a test:

    python bench/run.py                   # full scale: ~13 min (+1 min to build the database)
    python bench/run.py --quick           # smaller scale, shorter runs: ~4 min
    python bench/run.py --only scale,load
    python bench/run.py --mixed           # load, approvals, push: agents of mixed CLIs (issue 24)
    TASKBOARD_BENCH_CACHE=<dir> python bench/run.py   # keep scale.py's database between runs

It runs bench/api.py, bench/agents.py, bench/scale.py, bench/load.py, bench/approvals.py,
bench/push.py, bench/ui.py (the board in Chromium, issue 33), bench/rest.py (start-up,
memory and CPU at rest, issues 34 and 42), bench/hosts.py and bench/attempts.py (best of N,
issue 47) one after the other
(their output goes by, prefixed with their name), reads the `BENCH_RESULT {...}` line each
prints last, and prints one table: bench, figure, value, same-run baseline, ratio, goal and
whether it is met; every row of every bench is shown. The headline goals (issues 9, 34, 35
and 42) come first:

  API >= 0.5x bare bottle + gevent      api.py (every req/s, p50 and p99 ratio; for a
                                        create, bare bottle + gevent making the same
                                        writes)
  task list p99 < 50 ms at 50,000 tasks scale.py
  start-up < 1 s on the scaled database scale.py
  the judged rung                       load.py: the highest rung of its ladder (5 agents x
                                        250 / 500 / 1,000 / 2,000 lines/s) where the bare
                                        fan-out floor's own p99 is < 50 ms; the latency
                                        goals below are judged there
  fan-out p99 < 100 ms at the rung      load.py (200 /ws clients, 50 req/s; baseline:
                                        bench/_bare_fanout.py, storing and fanning out)
  stdout -> /ws p99 < 200 ms            load.py (end_to_end_p99: 100 ms of it is the
                                        batching, by design)
  server RSS < 300 MB, < 20 MB growth   load.py (the growth: over the run's second half)
  CPU per agent line <= 1.5x the floor  load.py (the API's share taken out)
  approval request -> /ws p99 < 50 ms   approvals.py (the agent's request line to a /ws
  and click -> agent's stdin p99 < 50 ms              client, the POST to the agent's stdin,
                                        at load.py's load, at its rung)
  approval request -> push p99 < 200 ms push.py (the agent's request line to the phones'
                                        push service, at load.py's load and rung;
                                        --quick: 50 clients, no slow ones)
  start-up <= 2x bare, idle < 70 MB,    rest.py (`python -m taskboard`, as the systemd unit
  < 100 MB after 10,000 tasks           starts it)
  idle < 62 MB, < 82 MB after 10,000    rest.py: rss_idle_script, rss_tasks_10k_script
  tasks on `python taskboard.py`        (the README's command)
  CPU at rest < 0.5 % of a core bare,   rest.py: cpu_rest_bare, cpu_rest_furnished (a
  < 1 % furnished                       project with a followed PR, a host, a push device)
  agents on a host: p99 <= 1.5x local,  hosts.py (end to end and fan-out)
  one TCP connection to the host

The other checks follow: among them load.py's stress run (the top rung, 200 slow clients;
rows stress_*: nothing lost, no client of ours dropped, every slow client dropped and
resumed, RSS) and api.py's auth_rps: the API with the token >= 0.95x of its req/s started
--no-auth (the auth check costs at most 5 %).

load.py runs on a copy of the database scale.py built (so the API traffic it sends reads
the big project, and slow queries show in the fan-out figures); with `--only load` or when
scale.py failed, on a fresh database. It runs before approvals.py and push.py, and they get
`--at-rate <the rung load.py judged at>` (its BENCH_RESULT's "rung"), so the whole run judges
at one rung; without load.py's result they run the floor ladder themselves. `--quick` passes
--quick to each (scale: 5,000 tasks and 500,000 log lines; load: the ladder 500,2000 lines/s,
10 s a run). Without TASKBOARD_BENCH_CACHE the database lives in a temp dir removed at the
end.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import RESULT_PREFIX

BENCH = os.path.dirname(os.path.abspath(__file__))
ORDER = ("api", "agents", "scale", "load", "approvals", "push", "ui", "rest", "hosts",
         "attempts")
HEADLINE = (("scale", "task_list_p99"), ("scale", "startup_to_health"),
            ("load", "judged_rung"), ("load", "fanout_p99"), ("load", "end_to_end_p99"),
            ("load", "server_rss_peak"), ("load", "rss_growth_last_half"),
            ("load", "cpu_per_line_us"),
            ("approvals", "request_to_ws_p99"), ("approvals", "click_to_stdin_p99"),
            ("push", "request_to_push_p99"), ("rest", "startup"), ("rest", "rss_idle"),
            ("rest", "rss_tasks_10k"), ("rest", "list_10k_p50"),
            ("rest", "rss_idle_script"), ("rest", "rss_tasks_10k_script"),
            ("rest", "cpu_rest_bare"), ("rest", "cpu_rest_furnished"),
            ("hosts", "remote_end_to_end_p99"), ("hosts", "remote_fanout_p99"),
            ("hosts", "tcp_connections_to_host"))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller scale, shorter runs")
    parser.add_argument("--only", default=",".join(ORDER),
                        help=f"comma-separated subset of {','.join(ORDER)}")
    parser.add_argument("--mixed", action="store_true",
                        help="load, approvals and push with agents of mixed CLIs (issue 24)")
    parser.add_argument("--cache-dir", default=os.environ.get("TASKBOARD_BENCH_CACHE"),
                        help="scale.py's database cache (env TASKBOARD_BENCH_CACHE)")
    args = parser.parse_args()
    args.only = [b for b in args.only.split(",") if b]
    unknown = set(args.only) - set(ORDER)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    return args


def run_bench(name, argv):
    """ Run bench/<name>.py, echoing its output; return (its result or None, seconds). """
    cmd = [sys.executable, os.path.join(BENCH, f"{name}.py"), *argv]
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    result = None
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        for line in proc.stdout:
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX):])
                continue
            print(f"[{name}] {line}", end="", flush=True)
        proc.wait()
    seconds = time.monotonic() - t0
    if proc.returncode != 0 or result is None:
        print(f"=== {name} FAILED (exit {proc.returncode}, after {seconds:.0f} s)", flush=True)
        return None, seconds
    print(f"=== {name} done in {seconds:.0f} s", flush=True)
    return result, seconds


def main():
    args = parse_args()
    quick = ["--quick"] if args.quick else []
    results, seconds = {}, {}
    with tempfile.TemporaryDirectory(prefix="taskboard-bench-run-") as tmp:
        cache = args.cache_dir or tmp
        for name in ORDER:
            if name not in args.only:
                continue
            argv = list(quick)
            if name == "scale":
                argv += ["--cache-dir", cache]
            if args.mixed and name in ("load", "approvals", "push"):
                argv.append("--mixed")  # load.py's option: the others pass it on
            if name == "load" and (results.get("scale") or {}).get("db"):
                argv += ["--db", results["scale"]["db"]]
            rung = (results.get("load") or {}).get("rung")
            if name in ("approvals", "push") and rung:
                argv += ["--at-rate", f"{rung:g}"]  # judged where load.py judged
            results[name], seconds[name] = run_bench(name, argv)
    table(results, seconds, args)


def fmt(value, unit):
    if value is None:
        return "-"
    if isinstance(value, float):
        digits = 3 if abs(value) < 10 else 1 if abs(value) < 1000 else 0
        text = f"{value:,.{digits}f}"
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def table(results, seconds, args):
    rows = []
    for bench in ORDER:
        for r in (results.get(bench) or {}).get("rows", []):
            rows.append((bench, r))
    # api.py's auth_* rows are the auth-cost issue's goal, not issue 9's
    headline = [(b, r) for b, r in rows if (b == "api" and not r["figure"].startswith("auth_"))
                or (b, r["figure"]) in HEADLINE]
    rest = [(b, r) for b, r in rows if (b, r) not in headline]
    scale = (results.get("scale") or {}).get("scale")
    print()
    print("Taskboard benchmarks" + (" (--quick)" if args.quick else "") +
          (f"; scale: {scale['projects']} projects, {scale['tasks']:,} tasks, "
           f"{scale['logs']:,} log lines" if scale else "") +
          f"; {os.cpu_count()} CPUs; "
          + ", ".join(f"{b} {s:.0f} s" for b, s in seconds.items()))
    if (results.get("load") or {}).get("db") is False:
        print("load.py ran on a fresh database (no scaled database from scale.py)")
    if (results.get("load") or {}).get("rung"):
        also = " and ".join(b for b in ("approvals", "push") if results.get(b))
        print(f"latency goals judged at {results['load']['rung']:g} lines/s per agent "
              f"(load.py's judged rung{f'; {also} ran there too' if also else ''})")
    header = f"{'bench':<7} {'figure':<32} {'value':>16} {'baseline':>14} {'ratio':>8}  " \
             f"{'goal':<26} met?"
    print(header)
    print("-" * len(header))
    for section in (headline, rest):
        for bench, r in section:
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
            met = "" if r["met"] is None else "yes" if r["met"] else "NO"
            print(f"{bench:<7} {r['figure']:<32} {fmt(r['value'], r['unit']):>16} "
                  f"{fmt(r['baseline'], r['unit']):>14} {ratio:>8}  {r['goal']:<26} {met}")
        if section is headline and rest:
            print("-" * len(header))
    judged = [r for _, r in rows if r["met"] is not None]
    issue = [r for _, r in headline if r["met"] is not None]
    failed = [b for b in args.only if results.get(b) is None]
    print()
    print(f"headline goals met: {sum(r['met'] for r in issue)} of {len(issue)}; all checks "
          f"met: {sum(r['met'] for r in judged)} of {len(judged)}"
          + (f"; FAILED to run: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    main()
