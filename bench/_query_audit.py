"""The SQL behind Taskboard's read routes and start-up: timed, with EXPLAIN QUERY PLAN.

Used by bench/scale.py, in its own process because importing taskboard monkey-patches
gevent:

    python bench/_query_audit.py <database> '{"project": P, "heavy": T, "task": T2,
                                              "deep": OFFSET, "middle_log": ID}'

It calls taskboard's store functions on a read-only sqlite3 connection (the server is
stopped), through a recorder that runs each SELECT (timed, rows fetched) and only plans the
writes (start-up's UPDATEs, log retention's DELETE): nothing is written. For every statement
it prints the plan; a SCAN of tasks, runs, activity, logs or task_events is flagged (but
not a rowid-ordered one with LIMIT, which stops early), and so is a read of logs or
task_events without LIMIT ("unpaged": all of a task's lines, which only the task detail
may do: design §4 has it carry the complete log). Plain CRUD through dataset's table API
(projects, settings, templates, snippets, webhooks) is not audited: no hot path uses it. The
last line is JSON:
{"endpoints": {name: {"call", "ms", "statements": [{sql, params, ms, rows, plan, scans,
unpaged}]}}}.
"""

import datetime
import json
import os
import re
import sqlite3
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import taskboard as core  # noqa: E402 -- after the checkout is on the path

BIG_TABLES = ("tasks", "runs", "activity", "logs", "task_events")
CONTROL = re.compile(r"\s*(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b", re.I)
WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|REPLACE)\b", re.I)
SOURCE = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?", re.I)
NOT_ALIAS = {"where", "on", "join", "left", "inner", "cross", "order", "group", "limit",
             "union", "using", "set", "as", "natural", "outer", "window", "having"}


class Cursor:
    """ What Tx reads from a cursor, over rows fetched already. """

    def __init__(self, rows, description, rowcount=-1):
        self.rows, self.description, self.rowcount, self.lastrowid = rows, description, \
            rowcount, None

    def fetchone(self):
        return self.rows[0] if self.rows else None

    def fetchall(self):
        return self.rows

    def __iter__(self):
        return iter(self.rows)


class Recorder:
    """ A stand-in for the raw sqlite3 connection that records every statement. """

    def __init__(self, conn):
        self.conn = conn
        self.statements = []

    def execute(self, sql, params=()):
        if CONTROL.match(sql):  # the store's own BEGIN IMMEDIATE/COMMIT: not on a reader
            return Cursor([], None, 0)
        entry = {"sql": " ".join(sql.split()), "params": list(params), "ms": 0.0, "rows": 0}
        self.statements.append(entry)
        entry["plan"], entry["scans"] = plan(self.conn, sql, params)
        entry["unpaged"] = unpaged(sql)
        if WRITE.match(sql):
            entry["note"] = "write: planned, not run"
            probe = as_count(sql, params)
            if probe:  # how long finding its rows takes: the same WHERE, counted
                t0 = time.perf_counter()
                entry["rows"] = self.conn.execute(*probe).fetchone()[0]
                entry["ms"] = (time.perf_counter() - t0) * 1000
                entry["note"] += f"; timed as: {probe[0]}"
            return Cursor([], None, 0)
        t0 = time.perf_counter()
        cursor = self.conn.execute(sql, params)
        rows = cursor.fetchall()
        entry["ms"] = (time.perf_counter() - t0) * 1000
        entry["rows"] = len(rows)
        return Cursor(rows, cursor.description)

    def executemany(self, sql, rows):
        self.statements.append({"sql": " ".join(sql.split()), "params": [], "ms": 0.0,
                                "rows": 0, "plan": [], "scans": [], "unpaged": False,
                                "note": "executemany: not run"})
        return Cursor([], None, 0)


class Database:
    """ What taskboard's tx() and read() use of a dataset.Database (a context manager),
    handing out the recorder as the raw connection. """

    in_transaction = False  # what taskboard's _transaction() looks at after an error
    connections = {}

    def __init__(self, recorder):
        self.executable = types.SimpleNamespace(
            connection=types.SimpleNamespace(driver_connection=recorder),
            rollback=lambda: None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin(self):
        pass

    def commit(self):
        pass

    def rollback(self):
        pass

    def load_table(self, name):
        raise NotImplementedError(f"dataset's table API ({name}): not audited")


def as_count(sql, params):
    """ An UPDATE or DELETE as `SELECT COUNT(*)` over the rows it would change, or None. """
    flat = " ".join(sql.split())
    m = re.match(r"UPDATE (\w+) SET (.*?) WHERE (.*)$", flat, re.I)
    if m:
        return f"SELECT COUNT(*) FROM {m[1]} WHERE {m[3]}", list(params)[m[2].count("?"):]
    m = re.match(r"DELETE FROM (\w+) WHERE (.*)$", flat, re.I)
    if m:
        return f"SELECT COUNT(*) FROM {m[1]} WHERE {m[2]}", list(params)
    return None


def plan(conn, sql, params):
    """ The EXPLAIN QUERY PLAN lines (indented as sqlite3's shell does) and the full scans. """
    try:
        rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    except sqlite3.Error as exc:
        return [f"(no plan: {exc})"], []
    aliases = {}
    for table, alias in SOURCE.findall(sql):
        aliases[table.lower()] = table.lower()
        if alias and alias.lower() not in NOT_ALIAS:
            aliases[alias.lower()] = table.lower()
    depth, lines, scans = {0: -1}, [], []
    for node, parent, _, detail in rows:
        depth[node] = depth.get(parent, -1) + 1
        line = "  " * depth[node] + detail
        m = re.match(r"SCAN (\w+)", detail)
        table = aliases.get(m[1].lower(), m[1].lower()) if m else None
        if table in BIG_TABLES:
            if re.search(rf"FROM {table} ORDER BY id LIMIT", sql, re.I):
                line += "  (bounded: rowid order with LIMIT)"
            else:
                scans.append(line)
        lines.append(line)
    return lines, scans


def unpaged(sql):
    """ A read of logs or task_events without LIMIT: it returns all of a task's lines. """
    flat = " ".join(sql.split())
    return bool(re.search(r"\bFROM (logs|task_events)\b", flat, re.I)) \
        and flat.upper().startswith("SELECT") and " LIMIT " not in flat.upper()


def calls(ids):
    """ (endpoint, description, function) of each audited store call. """
    day_start = core.local_day_start_iso()
    p, heavy, task = ids["project"], ids["heavy"], ids["task"]
    object_sql = core.json_object_sql(core.TASK_FIELDS)
    log_sql = core.json_object_sql(core.LOG_FIELDS)
    out = [
        ("startup", "migrate(); find_rows(plans, runs running); restart_rows()",
         lambda: (core.migrate(), core.find_rows("plans", status="running"),
                  core.find_rows("runs", status="running", pid={"!=": None}),
                  core.restart_rows())),
        ("task_list", f"task_rows_json({p}, TASK json)", lambda: core.task_rows_json(
            p, object_sql)),
        ("task_get", f"task_row({task})", lambda: core.task_row(task)),
        ("task_detail_heavy", f"task_detail_rows({heavy}, LOG json); find_rows(runs {heavy})",
         lambda: (core.task_detail_rows(heavy, core.json_object_sql(core.LOG_FIELDS)),
                  core.find_rows("runs", task_id=heavy, kind="task"))),
        ("logs_newest_500", f"log_rows_json({heavy}, 500, None, LOG json)",
         lambda: core.log_rows_json(heavy, 500, None, log_sql)),
    ]
    if ids.get("middle_log"):
        out.append(("logs_cursor_500", f"log_rows_json({heavy}, 500, {ids['middle_log']}, "
                    "LOG json)", lambda: core.log_rows_json(heavy, 500, ids["middle_log"],
                                                           log_sql)))
    out += [
        ("stats", f"project_stats_rows({p}, today)",
         lambda: core.project_stats_rows(p, day_start)),
        ("activity_first", f"activity_rows({p}, 50, 0)", lambda: core.activity_rows(p, 50, 0)),
        ("activity_deep", f"activity_rows({p}, 50, {ids['deep']})",
         lambda: core.activity_rows(p, 50, ids["deep"])),
        ("agent_usage", "usage_rows(today)", lambda: core.usage_rows(day_start)),
        ("projects_summary", "project_summary_rows()", core.project_summary_rows),
        ("queue (every move)", f"queue_rows({p}, True); queue_rows({p}, False)",
         lambda: (core.queue_rows(p, True), core.queue_rows(p, False))),
        ("pipeline status", f"pipeline_rows({p})", lambda: core.pipeline_rows(p)),
        ("daily cost limit", "cost_since_row(today)", lambda: core.cost_since_row(day_start)),
        ("move bookkeeping", f"last_move_row({task}); verifier_rejections({task})",
         lambda: (core.last_move_row(task), core.verifier_rejections(task))),
        ("task events (desktop)", f"task_event_rows({heavy}, 500)",
         lambda: core.task_event_rows(heavy, 500)),
    ]
    if hasattr(core, "delete_old_log_rows"):
        cutoff = core.iso(datetime.datetime.now(datetime.UTC)
                          - datetime.timedelta(days=30))
        out.append(("log retention (chunk)", "delete_old_log_rows('logs', 30 days ago, 2000)",
                    lambda: core.delete_old_log_rows("logs", cutoff, 2000)))
    return out


def main():
    db, ids = sys.argv[1], json.loads(sys.argv[2])
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True,
                           check_same_thread=False)  # Tx.in_thread() reads in a thread
    conn.execute("SELECT COUNT(*) FROM projects").fetchone()
    out = {}
    for endpoint, description, call in calls(ids):
        recorder = Recorder(conn)
        # what the store keeps between reads starts empty, so each call reads for real
        core.runtime = types.SimpleNamespace(db=Database(recorder), reads=Database(recorder),
                                             usage=None, log_json=core.Kept(0))
        t0 = time.perf_counter()
        try:
            call()
            error = None
        except Exception as exc:  # a changed signature must not hide the other findings
            error = f"{type(exc).__name__}: {exc}"
        out[endpoint] = {"call": description, "ms": (time.perf_counter() - t0) * 1000,
                         "statements": recorder.statements, **({"error": error} if error
                                                               else {})}
    conn.close()
    print(json.dumps({"endpoints": out}))


if __name__ == "__main__":
    main()
