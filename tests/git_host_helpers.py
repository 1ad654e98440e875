"""A fake source host (GitHub's REST shapes) for the tests of autoPr, issue sync and following
a pull request (design.md §10, §16).

FakeHost is a small WSGI server on 127.0.0.1 that records every request (method, path, query,
headers, JSON body, the status it answered) and answers:
- routes a test scripted with route() (statuses and bodies in turn), first;
- else the pull requests it keeps (FakePull): POST /repos/R/pulls opens one; GET of the pull,
  its head's check runs and combined status, its reviews, its line comments and its
  conversation comments; POST of a conversation comment.  GET answers carry an ETag and a
  matching If-None-Match gets 304, as GitHub's do;
- else 404.
A pull's head is read from the bare repository that is the checkout's `origin`, so a push by
the board moves it the way it would on the host.
"""
import hashlib
import itertools
import json
import re
import subprocess
import urllib.parse
from http import HTTPStatus

from gevent.pywsgi import WSGIServer

TOKEN = "host-token-123"
REPO = "acme/shop"
PREFIX = "/api/v3"  # the host's API lives below a path, as on a self-hosted server
#: The account the board's token belongs to: its comments, and a person's, come from it.
ACCOUNT = "shop-bot"


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def add_origin(repo, bare):
    """A bare repository as the checkout's `origin`, holding main."""
    git(bare.parent, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    return bare


class FakePull:
    """One pull request of the fake host; tests change its fields and lists directly."""

    def __init__(self, host, number, head, base, title):
        self.host, self.number, self.head, self.base, self.title = host, number, head, base, title
        self.state, self.merged, self.mergeable = "open", False, True
        self.check_runs, self.statuses = [], []  # of any head: each names its head_sha
        self.reviews, self.line_comments, self.comments = [], [], []
        self.created_at = self.host.clock()

    @property
    def url(self):
        return f"https://git.example/{REPO}/pull/{self.number}"

    def head_sha(self):
        return git(self.host.origin, "rev-parse", f"refs/heads/{self.head}") \
            if self.host.origin else "0" * 40

    def fail(self, name, summary="", conclusion="failure", sha=None, title=None):
        """A completed check run with this conclusion on the head (or `sha`)."""
        self.check_runs.append({
            "id": next(self.host.ids), "name": name, "head_sha": sha or self.head_sha(),
            "status": "completed", "conclusion": conclusion,
            "html_url": f"https://git.example/{REPO}/runs/{name}",
            "output": {"title": title or f"{name} {conclusion}", "summary": summary,
                       "text": None}})

    def succeed(self, name, sha=None):
        self.fail(name, conclusion="success", sha=sha, title=f"{name} passed")

    def start(self, name, sha=None):
        self.check_runs.append({"id": next(self.host.ids), "name": name,
                                "head_sha": sha or self.head_sha(), "status": "in_progress",
                                "conclusion": None, "output": {"title": None, "summary": None}})

    def status(self, context, state, description="", sha=None):
        self.statuses.append({"id": next(self.host.ids), "context": context, "state": state,
                              "description": description, "sha": sha or self.head_sha(),
                              "target_url": f"https://ci.example/{context}"})

    # `association`: the author's author_association with the repository, as GitHub says it
    # (OWNER, MEMBER, COLLABORATOR: trusted; CONTRIBUTOR, NONE, ...: a stranger's)

    def review(self, state, body="", user="alice", association="COLLABORATOR"):
        self.reviews.append({"id": next(self.host.ids), "user": {"login": user},
                             "state": state, "body": body, "commit_id": self.head_sha(),
                             "submitted_at": self.host.clock(),
                             "author_association": association})

    def line_comment(self, path, line, body, side="RIGHT", user="alice", hunk=None,
                     association="COLLABORATOR"):
        self.line_comments.append({
            "id": next(self.host.ids), "user": {"login": user}, "path": path, "line": line,
            "original_line": line, "side": side, "body": body,
            "diff_hunk": hunk or f"@@ -0,0 +1,{line} @@\n+line {line}",
            "created_at": self.host.clock(), "author_association": association})

    def comment(self, body, user=ACCOUNT, association="OWNER"):
        """A conversation comment (the board's own ones come from the same account)."""
        self.comments.append({"id": next(self.host.ids), "user": {"login": user},
                              "body": body, "created_at": self.host.clock(),
                              "author_association": association})
        return self.comments[-1]

    def json(self):
        sha = self.head_sha()
        return {"number": self.number, "html_url": self.url, "title": self.title,
                "state": self.state, "merged": self.merged,
                "merged_at": self.host.clock() if self.merged else None,
                "mergeable": self.mergeable, "mergeable_state":
                    "dirty" if self.mergeable is False else "clean",
                "head": {"ref": self.head, "sha": sha},
                "base": {"ref": self.base, "sha": self.host.base_sha(self.base)},
                "created_at": self.created_at, "user": {"login": ACCOUNT}}


class FakeHost:
    """A scripted source-host REST API that records what it is asked."""

    def __init__(self, origin=None):
        self.requests = []
        self.routes = {}
        self.pulls = {}
        self.origin = origin  # the bare repository pushes go to
        self.ids = itertools.count(1000)
        self.ticks = itertools.count(1)
        self.outages = []  # (status, body, headers) answered, in turn, before anything else
        self.server = WSGIServer(("127.0.0.1", 0), self.app, log=None, error_log=None)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}{PREFIX}"

    def clock(self):
        """The host's time: strictly later at each call (GitHub's second resolution)."""
        n = next(self.ticks)
        return f"2026-01-01T{n // 3600:02}:{n // 60 % 60:02}:{n % 60:02}Z"

    def base_sha(self, base):
        return git(self.origin, "rev-parse", f"refs/heads/{base}") if self.origin else "1" * 40

    def route(self, method, path, *answers):
        """Answer `method path` (query aside) with these (status, body) in turn; the last
        one again from then on."""
        self.routes[(method, path)] = list(answers)

    def outage(self, status, count=1, body=None, headers=None):
        """The next `count` requests are answered `status` (with body and headers)."""
        self.outages += [(status, body or {"message": HTTPStatus(status).phrase},
                          headers or {})] * count

    def pull(self, number=None):
        return self.pulls[number] if number else list(self.pulls.values())[-1]

    def app(self, environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"].removeprefix(PREFIX)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        record = {
            "method": method, "path": path,
            "query": urllib.parse.parse_qs(environ.get("QUERY_STRING", "")),
            "headers": {k[5:].replace("_", "-").title(): v for k, v in environ.items()
                        if k.startswith("HTTP_")},
            "json": json.loads(raw) if raw else None}
        self.requests.append(record)
        headers = {}
        if self.outages:
            status, body, headers = self.outages.pop(0)
        elif self.routes.get((method, path)):
            answers = self.routes[(method, path)]
            status, body = answers.pop(0) if len(answers) > 1 else answers[0]
        else:
            status, body = self.github(method, path, record["json"],
                                       record["query"].get("since", [""])[0]) or \
                (404, {"message": "Not Found"})
        data = json.dumps(body).encode()
        if method == "GET" and status == 200:
            headers["ETag"] = f'"{hashlib.sha1(data).hexdigest()}"'
            if record["headers"].get("If-None-Match") == headers["ETag"]:
                status, data = 304, b""
        record["status"] = status
        start_response(f"{status} {HTTPStatus(status).phrase}",
                       [("Content-Type", "application/json"),
                        ("Content-Length", str(len(data))), *headers.items()])
        return [data]

    def github(self, method, path, body, since=""):
        """The pull requests' routes, or None; comments only from `since` on."""
        if method == "POST" and path == f"/repos/{REPO}/pulls":
            number = len(self.pulls) + 7
            pull = self.pulls[number] = FakePull(self, number, body["head"], body["base"],
                                                 body["title"])
            return 201, pull.json()
        match = re.fullmatch(rf"/repos/{REPO}/(pulls|issues|commits)/(\w+)(/[\w-]+)?", path)
        if not match:
            return None
        kind, key, rest = match.groups()
        if kind == "commits":
            pulls = [p for p in self.pulls.values() if p.head_sha() == key]
            runs = [r for p in pulls for r in p.check_runs if r["head_sha"] == key]
            statuses = [s for p in pulls for s in p.statuses if s["sha"] == key]
            if rest == "/check-runs":
                return 200, {"total_count": len(runs), "check_runs": runs}
            if rest == "/status":
                states = {s["state"] for s in statuses}
                state = "failure" if states & {"failure", "error"} else \
                    "pending" if "pending" in states or not states else "success"
                return 200, {"state": state, "sha": key, "total_count": len(statuses),
                             "statuses": statuses}
            return None
        pull = self.pulls.get(int(key)) if key.isdigit() else None
        if pull is None:
            return None
        if kind == "pulls" and rest is None and method == "GET":
            return 200, pull.json()
        if kind == "pulls" and rest == "/reviews" and method == "GET":
            return 200, pull.reviews
        if kind == "pulls" and rest == "/comments" and method == "GET":
            return 200, [c for c in pull.line_comments if c["created_at"] >= since]
        if kind == "issues" and rest == "/comments" and method == "GET":
            return 200, [c for c in pull.comments if c["created_at"] >= since]
        if kind == "issues" and rest == "/comments" and method == "POST":
            return 201, pull.comment(body["body"])
        return None

    def calls(self, method=None, path=None):
        return [r for r in self.requests if method in (None, r["method"])
                and (path is None or r["path"] == path)]

    def stop(self):
        self.server.stop(timeout=1)
