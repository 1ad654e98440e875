"""Fuzz test of the HTTP API (issue 7): schemathesis generates valid and malformed requests
for every operation of /api/openapi.json and sends them in-process to the WSGI app.

The bar: no 5xx answer, and every answer conforms to the document: a documented status, a
documented content type, and a body that matches the documented schema.

How it runs:
- pyproject.toml turns schemathesis's pytest plugin off (it imports ssl before gevent can
  patch it), so this file drives schemathesis's Python API: the schema comes from
  taskboard.openapi(), the very function /api/openapi.json serves, and each operation is a
  pytest case whose Hypothesis test schemathesis builds the way its own
  `@schema.parametrize()` would, with the coverage phase (boundary and malformed values of
  each field, missing required fields, wrong types) and the fuzzing phase (positive and
  negative generation).
- Every operation gets a fresh board (a real runtime: parse_args + init, tmp data dir, the
  fake agent as the agent CLI) seeded with projects, tasks, a running task, a dependency,
  templates, snippets, webhooks and attachments; generated path parameters and id fields of
  bodies are half the time replaced by seeded ids, so requests reach the real handlers, not
  only their 404.  A fresh board per operation keeps each case reproducible alone (-k) and
  lets conftest's check that no agent outlives the board run after each of them.
- Failures are collected (not raised at the first one), so one run lists every distinct
  problem of an operation: (check, status) with a curl reproduction.
- Deterministic: a fixed seed, derandomized Hypothesis, no example database.
- The last line of the run says how many requests were made: "fuzz: N requests, ...".
"""
import collections
import copy
import functools
import io
import ipaddress
import json
import os
import sys
import time
import urllib.parse

import pytest
import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.jsonschema import patterns
from schemathesis.core.result import Ok
from schemathesis.generation.feedback import FeedbackSources
from schemathesis.pytest._test_builder import build_operation_test
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.specs.openapi.coverage import _operation as coverage_operation
from werkzeug.test import EnvironBuilder

import taskboard
from conftest import FAKE_AGENT

#: Examples per operation and generation mode in the fuzzing phase (the coverage phase adds
#: its own, bounded by the schema).
MAX_EXAMPLES = 25
#: Every request comes from this machine, to the board's own loopback Host (the board
#: refuses other hosts, and desktop commands other peers).
ENVIRON = {"REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:4000"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
CONFIG = schemathesis.Config.from_dict({
    "seed": 20261122,
    "generation": {"mode": "all", "max-examples": MAX_EXAMPLES, "deterministic": True,
                   "database": "none"},
    # No examples in the document; no links for the stateful phase.
    "phases": {"examples": {"enabled": False}, "stateful": {"enabled": False}},
})


@functools.cache
def _compilable_quantifier(pattern, min_length, max_length):
    """schemathesis's update_quantifier() for the coverage phase, which folds a string's
    length bounds into its pattern, kept to what the validator can compile, as schemathesis's
    own converter (update_pattern_in_schema) keeps it for the other phases.

    The board's non-blank text fields are {"pattern": "\\S", "maxLength": 200000}; folded,
    that is "^\\S{1,200000}$", a regex too big for jsonschema_rs.  Unchecked, the coverage
    phase gave it to jsonschema_rs.canonicalize() with each body schema of such an operation,
    to be refused after 1.5 s of CPU each time (some 20 s of a run of this file), and the
    cases built on those schemas were lost (templates, snippets, messages, tasks): now such
    a field keeps its pattern and bounds, and its cases are sent (more requests, not fewer)."""
    folded = patterns.update_quantifier(pattern, min_length, max_length)
    if folded == pattern or patterns.is_valid_jsonschema_rs_regex(folded):  # cached
        return folded
    return pattern


coverage_operation.update_quantifier = _compilable_quantifier


#: The document /api/openapi.json serves (a copy: schemathesis may annotate what it loads).
SCHEMA = schemathesis.openapi.from_dict(copy.deepcopy(taskboard.openapi()), config=CONFIG)
OPERATIONS = list(SCHEMA.get_all_operations())

#: Ids the seeded board has (see `board`), for the path parameters and body fields.
SEEDED = {"project_id": [1, 2], "task_id": [1, 2, 3, 4, 5, 6], "attachment_id": [1, 2],
          "item_id": [1, 2], "webhook_id": [1, 2]}
BODY_IDS = {"id": "task_id", "taskId": "task_id", "dependsOnId": "task_id",
            "parent_task_id": "task_id", "projectId": "project_id"}

#: Server bugs this test found and not fixed yet: (operation, exception behind the 500) ->
#: what is wrong.  The fuzz case of such an operation xfails when it meets only known bugs;
#: add each one's smallest reproduction to FIXED once it is fixed.
KNOWN_BUGS = {}

STATS = {"requests": 0, "server_errors": 0, "known": 0, "seconds": 0.0, "operations": 0,
         "status": collections.Counter()}
#: The board of the running case: its sandbox folder and working directories.
SANDBOX = {}
#: The exception behind the latest 500, if any.
SERVER_ERROR = []


# --- the app as a local client reaches it, counted ------------------------------------

def app(environ, start_response):
    """taskboard.app as a WSGI server runs it for a client on 127.0.0.1 that asks for
    127.0.0.1:4000 with the board's token: it closes the answer's iterable, and a crash is a
    plain 500 (werkzeug's test client would raise it; its exception is kept in SERVER_ERROR
    for the report)."""
    environ.update(ENVIRON)
    # the token, whatever credential was generated: the fuzz is of the input, not of the auth
    environ["HTTP_AUTHORIZATION"] = f"Bearer {taskboard.runtime.config['token']}"
    environ["wsgi.errors"] = io.StringIO()  # bottle's traceback of a 500: SERVER_ERROR has it
    _keep_in_sandbox(environ)
    STATS["requests"] += 1
    SERVER_ERROR.clear()

    def start(status, headers, exc_info=None):
        code = int(status.split()[0])
        STATS["status"][code] += 1
        STATS["server_errors"] += code >= 500
        if exc_info is not None:
            SERVER_ERROR.append(exc_info[1])
        return start_response(status, headers)
    result = taskboard.app(environ, start)
    try:
        return [b"".join(result)]
    finally:
        if hasattr(result, "close"):
            result.close()


def _keep_in_sandbox(environ):
    """A generated workingDir that names an existing folder outside the test's tmp dir ("/")
    becomes the seeded one, so no desktop command writes an agent file there."""
    if not environ.get("CONTENT_TYPE", "").startswith("application/json"):
        return
    raw = environ["wsgi.input"].read()
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    where = body.get("workingDir") if isinstance(body, dict) else None
    if isinstance(where, str) and os.path.isdir(where) and not os.path.realpath(
            where).startswith(SANDBOX["root"] + os.sep):
        body["workingDir"] = SANDBOX["workdirs"][0]
        raw = json.dumps(body).encode()
        environ["CONTENT_LENGTH"] = str(len(raw))
    environ["wsgi.input"] = io.BytesIO(raw)


# --- generation hints: seeded ids half the time -------------------------------------------

@SCHEMA.hook
def flatmap_path_parameters(context, path_parameters):
    names = [n for n in path_parameters or () if n in SEEDED]
    if not names:
        return st.just(path_parameters)
    return st.one_of(st.just(path_parameters), st.fixed_dictionaries(
        {**{n: st.just(v) for n, v in path_parameters.items()},
         **{n: st.sampled_from(SEEDED[n]) for n in names}}))


@SCHEMA.hook
def flatmap_body(context, body):
    if not isinstance(body, dict):
        return st.just(body)
    seeded = {n: st.sampled_from(SEEDED[kind]) for n, kind in BODY_IDS.items() if n in body}
    if "taskIds" in body:
        seeded["taskIds"] = st.permutations(SEEDED["task_id"])
    if "workingDir" in body:
        seeded["workingDir"] = st.sampled_from(SANDBOX["workdirs"])
    if not seeded:
        return st.just(body)
    return st.one_of(st.just(body), st.fixed_dictionaries(
        {**{n: st.just(v) for n, v in body.items()}, **seeded}))


# --- the board ---------------------------------------------------------------------------

@pytest.fixture
def config(tmp_path):
    """conftest's config, with the source-host API on a closed loopback port."""
    return taskboard.parse_args(
        ["--db", str(tmp_path / "data" / "taskboard.db"),
         "--agent-command", f"{sys.executable} {FAKE_AGENT}"],
        environ={"TASKBOARD_GIT_HOST_API": "http://127.0.0.1:9"})


@pytest.fixture
def network_guard(monkeypatch):
    """Outgoing HTTP (webhooks, the source host) may reach loopback addresses only: a
    generated webhook url names any host."""
    refused = []
    send = requests.Session.send

    def guarded(self, request, **kwargs):
        host = urllib.parse.urlsplit(request.url).hostname or ""
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            refused.append(request.url)
            raise requests.ConnectionError(f"the fuzz test sends nothing to {host!r}")
        return send(self, request, **kwargs)
    monkeypatch.setattr(requests.Session, "send", guarded)
    return refused


@pytest.fixture
def board(tb, api, client, tmp_path, network_guard, monkeypatch):
    """Two projects with tasks in every status but testing, a running task (the fake agent,
    which hangs until the board's shutdown kills it), a dependency, a sub-task, templates,
    snippets, webhooks and attachments: the ids of SEEDED.

    Webhook retries come quickly, and the board waits for its deliveries before it shuts
    down: shutdown() kills a delivery in the middle of its connect(), which leaves the
    socket unclosed (a ResourceWarning, an error here).
    """
    monkeypatch.setattr(taskboard, "WEBHOOK_BACKOFF_BASE", 0.001)
    workdirs = [str(tmp_path / "code"), str(tmp_path / "code2")]
    os.makedirs(workdirs[1])
    SANDBOX.update(root=os.path.realpath(tmp_path), workdirs=workdirs)
    main = api.project()
    spare = api.project(workingDir=workdirs[1], maxConcurrent=2)
    t1 = api.task(main["id"], title="First", priority=2, tags=["a"])
    t3 = api.task(main["id"], title="Done already")
    api.move(t3["id"], "done")
    t4 = api.task(main["id"], title="Running")
    api.move(t4["id"], "in_progress")
    # after the run took the project's one slot: the queue starts a waiting parent's sub-task
    api.task(main["id"], title="Sub-task", parent_task_id=t1["id"])
    t5 = api.task(main["id"], title="Failed")
    api.move(t5["id"], "failed")
    api.task(spare["id"], title="Elsewhere")
    client.post_json("/api/desktop/add_task_dependency",
                     {"taskId": t1["id"], "dependsOnId": t3["id"]}, status=200)
    for project in (main, spare):
        api.template(project["id"])
        api.snippet(project["id"])
        api.webhook(project["id"], url="http://127.0.0.1:9/hook", secret="s",
                    events=["task:created", "task:completed"])
    for task_id, name in ((t1["id"], "notes.txt"), (t4["id"], "log.bin")):
        client.post(f"/api/tasks/{task_id}/attachments",
                    upload_files=[("file", name, b"hello\n", "text/plain")], status=201)
    yield tb
    webhooks = taskboard.runtime.webhooks
    deadline = time.monotonic() + 5
    while not webhooks.idle and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture(scope="module")
def summary(request):
    """Print the request count at the end of the run (any -s or not)."""
    class Summary:
        @staticmethod
        def pytest_terminal_summary(terminalreporter):
            terminalreporter.write_line(
                f"fuzz: {STATS['requests']} requests, {STATS['server_errors']} server errors "
                f"({STATS['known']} of them known bugs); {STATS['operations']} operations "
                f"in {STATS['seconds']:.1f} s; statuses {dict(sorted(STATS['status'].items()))}")
    if not request.config.pluginmanager.has_plugin("taskboard-fuzz-summary"):
        request.config.pluginmanager.register(Summary(), "taskboard-fuzz-summary")
    return STATS


# --- the tests ---------------------------------------------------------------------------

def test_the_fuzzed_document_is_the_served_one(client):
    assert client.get("/api/openapi.json").json == SCHEMA.raw_schema


def _label(result):
    return result.ok().label if isinstance(result, Ok) else str(result.err())[:60]


@pytest.mark.parametrize("result", OPERATIONS, ids=[_label(r) for r in OPERATIONS])
def test_fuzz(result, board, summary):
    if not isinstance(result, Ok):
        pytest.fail(f"the document is invalid here: {result.err()}")
    operation = result.ok()
    found = {}  # (check, status, exception behind a 500) -> the first case's report

    def check(case):
        response = case.call(app=app)
        crash = type(SERVER_ERROR[0]).__name__ if SERVER_ERROR else ""
        STATS["known"] += (operation.label, crash) in KNOWN_BUGS
        try:
            case.validate_response(response, checks=CHECKS)
        except FailureGroup as group:
            for failure in group.exceptions:
                found.setdefault((failure.title, response.status_code, crash), (
                    f"{failure.message}\n  {_curl(case)}\n  -> {response.status_code} "
                    f"{response.text[:300]}" + (f"\n  {SERVER_ERROR[0]!r}" if crash else "")))

    test = build_operation_test(config=SCHEMA.config, operation=operation, test_func=check,
                                given_kwargs={}, feedback=FeedbackSources())
    started, before = time.monotonic(), STATS["requests"]
    test()
    STATS["seconds"] += time.monotonic() - started
    STATS["operations"] += 1
    assert STATS["requests"] > before, f"no request was made for {operation.label}"
    known = {key: KNOWN_BUGS[operation.label, key[2]] for key in found
             if (operation.label, key[2]) in KNOWN_BUGS}
    unexpected = {key: text for key, text in found.items() if key not in known}
    assert not unexpected, "\n\n".join(
        f"{title} ({status}{', ' + crash if crash else ''}):\n{text}"
        for (title, status, crash), text in unexpected.items())
    if known:
        pytest.xfail("known server bug: " + "; ".join(sorted(set(known.values()))))


def _curl(case):
    text = case.as_curl_command(headers={"Host": ENVIRON["HTTP_HOST"]})
    return text if len(text) < 600 else text[:500] + " ... " + text[-80:]


# --- the server bugs this test found (each fixed), as their smallest reproductions ----------

FIXED = [
    pytest.param(
        "POST", "/api/tasks/1/attachments", "multipart/form-data; boundary=b",
        b'--b\r\nContent-Disposition: form-data; name="file\x00"\r\n\r\nx\r\n--b--\r\n',
        id="multipart-control-character"),
    pytest.param(
        "POST", "/api/desktop/add_task_dependency", "application/json",
        b'{"taskId": 1, "dependsOnId": 3, "conditionType": {}}', id="condition-not-a-string"),
    pytest.param(
        "POST", "/api/desktop/reorder_queue", "application/json",
        b'{"projectId": 1, "taskIds": [9223372036854775808]}', id="task-id-beyond-int64"),
]


@pytest.mark.parametrize(("method", "path", "content_type", "body"), FIXED)
def test_inputs_that_once_crashed_the_server_get_a_400(board, method, path, content_type,
                                                      body):
    """Each answered 500 before: a multipart header with a control character, a
    conditionType that is not a string, a task id beyond 64 bits."""
    statuses = []
    environ = EnvironBuilder(path=path, method=method, data=body,
                             content_type=content_type).get_environ()
    answer = b"".join(app(environ, lambda status, headers: statuses.append(status)))
    assert statuses[0].startswith("400"), (statuses, answer, SERVER_ERROR)
    assert json.loads(answer)["code"] == "validation_error"
