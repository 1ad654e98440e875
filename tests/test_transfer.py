"""Transfer rules of design.md §3 v4, over a live server: gzip for JSON, JS, CSS and HTML
over 1 KiB when the client accepts it, ETags and 304s that never bypass a credential, and
the board's page listing the modules of its first paint for boot.js to preload."""
import base64
import gzip
import hashlib
import json
import os
import re

import pytest
import requests

import taskboard
from conftest import ROOT, bearer

GZIP = {"Accept-Encoding": "gzip"}


def get(live, path, headers=None, auth=True):
    """GET without requests' own decoding, so the bytes on the wire can be looked at."""
    response = requests.get(live.url + path, headers={**(bearer() if auth else {}),
                                                      **(headers or {})},
                            timeout=10, stream=True)
    response.raw_bytes = response.raw.read(decode_content=False)
    return response


@pytest.fixture
def many_tasks(api):
    project = api.project()
    for n in range(40):
        api.task(project["id"], title=f"Task number {n}", description="words " * 20)
    return f"/api/projects/{project['id']}/tasks"


def test_a_task_list_is_gzipped_for_a_client_that_accepts_it(live, many_tasks):
    plain = get(live, many_tasks, {"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers and len(plain.raw_bytes) > 1024
    packed = get(live, many_tasks, GZIP)
    assert packed.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in packed.headers["Vary"]
    assert int(packed.headers["Content-Length"]) == len(packed.raw_bytes)
    assert gzip.decompress(packed.raw_bytes) == plain.raw_bytes
    assert len(packed.raw_bytes) < len(plain.raw_bytes) / 4
    for refusing in ("gzip;q=0", "br", ""):  # a client that does not accept it: plain
        answer = get(live, many_tasks, {"Accept-Encoding": refusing})
        assert "Content-Encoding" not in answer.headers and answer.raw_bytes == plain.raw_bytes


def test_an_unchanged_answer_is_304_and_a_changed_or_stale_tag_gets_it_whole(live, api,
                                                                          many_tasks):
    first = get(live, many_tasks, GZIP)
    tag = first.headers["ETag"]
    assert get(live, many_tasks, {"Accept-Encoding": "identity"}).headers["ETag"] == tag
    again = get(live, many_tasks, {**GZIP, "If-None-Match": tag})
    assert again.status_code == 304 and again.raw_bytes == b""
    assert again.headers["ETag"] == tag and "Content-Encoding" not in again.headers
    for stale in ('W/"0123"', "garbage", '"', ", ,"):
        whole = get(live, many_tasks, {**GZIP, "If-None-Match": stale})
        assert whole.status_code == 200 and whole.raw_bytes == first.raw_bytes, stale
    task_id = requests.get(live.url + many_tasks, headers=bearer(), timeout=10).json()[0]["id"]
    api.client.put_json(f"/api/tasks/{task_id}", {"title": "Renamed"})
    changed = get(live, many_tasks, {**GZIP, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag
    detail = f"/api/tasks/{task_id}/detail"
    detail_tag = get(live, detail).headers["ETag"]
    unchanged = get(live, detail, {"If-None-Match": detail_tag})
    assert unchanged.status_code == 304
    # what the kept answer reflects now (the browser keeps the 304's headers with it)
    assert int(unchanged.headers["X-Taskboard-Seq"]) == taskboard.runtime.events.seq


def test_a_kept_gzip_body_is_never_served_for_a_changed_answer(live, api, many_tasks):
    """Gzipped bodies are kept by ETag between reads: each read still gets its own list."""
    before = get(live, many_tasks, GZIP)
    assert get(live, many_tasks, GZIP).raw_bytes == before.raw_bytes
    task_id = requests.get(live.url + many_tasks, headers=bearer(), timeout=10).json()[0]["id"]
    api.client.put_json(f"/api/tasks/{task_id}", {"title": "Renamed"})
    after = get(live, many_tasks, GZIP)
    plain = get(live, many_tasks, {"Accept-Encoding": "identity"})
    assert gzip.decompress(after.raw_bytes) == plain.raw_bytes
    assert b'"Renamed"' in plain.raw_bytes and b'"Renamed"' not in gzip.decompress(
        before.raw_bytes)


def test_the_browser_may_keep_task_reads_but_nothing_else(live, many_tasks):
    """Task lists, tasks, details, logs and the API description: kept by the browser only
    (private) and asked again with their ETag each time (no-cache); any other answer, and
    every refusal, is never stored."""
    task_id = requests.get(live.url + many_tasks, headers=bearer(), timeout=10).json()[0]["id"]
    for path in (many_tasks, f"/api/tasks/{task_id}", f"/api/tasks/{task_id}/detail",
                 f"/api/tasks/{task_id}/logs?limit=5", "/api/openapi.json"):
        assert get(live, path).headers["Cache-Control"] == "private, no-cache", path
    for path in ("/api/settings", "/api/projects", "/api/tasks/999999"):
        assert get(live, path).headers["Cache-Control"] == "no-store", path
    assert get(live, many_tasks, auth=False).headers["Cache-Control"] == "no-store"


def test_a_304_never_bypasses_the_credential(live, many_tasks):
    tag = get(live, many_tasks).headers["ETag"]
    refused = get(live, many_tasks, {"If-None-Match": tag}, auth=False)
    assert refused.status_code == 401 and b"unauthorized" in refused.raw_bytes
    wrong = get(live, many_tasks, {"If-None-Match": "*", "Authorization": "Bearer nope"},
                auth=False)
    assert wrong.status_code == 401


def test_small_answers_and_writes(live, api):
    small = get(live, "/api/health", GZIP)
    assert "Content-Encoding" not in small.headers and small.headers["Vary"]
    project = api.project()
    created = requests.post(f"{live.url}/api/projects/{project['id']}/tasks",
                            json={"title": "x", "description": "long " * 400},
                            headers={**bearer(), **GZIP}, timeout=10)
    assert created.status_code == 201 and created.headers["Content-Encoding"] == "gzip"
    assert "ETag" not in created.headers and created.json()["title"] == "x"


def test_the_boards_files_are_gzipped_and_answer_304(live):
    script = get(live, "/static/js/store.js", GZIP)
    assert script.headers["Content-Encoding"] == "gzip"
    with open(os.path.join(ROOT, "static", "js", "store.js"), "rb") as f:
        assert gzip.decompress(script.raw_bytes) == f.read()
    assert get(live, "/static/js/store.js",
               {"If-None-Match": script.headers["ETag"]}).status_code == 304
    for path in ("/", "/sw.js", "/static/css/board.css"):
        first = get(live, path, GZIP, auth=False)
        assert first.status_code == 200 and first.headers["ETag"], path
        assert get(live, path, {"If-None-Match": first.headers["ETag"]},
                   auth=False).status_code == 304, path


def test_the_page_lists_the_modules_of_its_first_paint_for_boot_to_preload(live):
    """The page names no module but main.js: its JSON block lists the shell's (main.js and
    what it imports) and, for each view a page opens first, those the shell does not
    import; boot.js preloads the shell's and those of the address's view. The other views
    load on use."""
    page = gzip.decompress(get(live, "/", GZIP, auth=False).raw_bytes).decode()
    assert "modulepreload" not in page.split("<script>")[0]
    views = json.loads(re.search(
        r'<script type="application/json" id="first-views">(.*?)</script>', page)[1])
    assert set(views) == {"shell", "projects", "board", "task_detail"}
    shell = views["shell"]
    assert shell[0] == "/static/js/main.js" and "/static/js/store.js" in shell
    assert views["board"][0] == "/static/js/views/board.js"
    # issue 59: the board's first paint asks for at most 12 things: the page, its tasks and
    # at most ten module files (the shell's and the board view's)
    assert len(shell) + len(views["board"]) <= 10, (shell, views["board"])
    assert views["task_detail"][0] == "/static/js/views/task_detail.js"
    for modules in views.values():
        assert len(set(modules)) == len(modules)
    for view in ("board", "task_detail", "projects"):
        assert not set(views[view]) & set(shell), view
    # the needs-you inbox (after the first paint), other views and the board's log: on use
    first = {url for modules in views.values() for url in modules}
    assert not first & {"/static/js/views/settings.js", "/static/js/views/needs_you.js",
                        "/static/js/views/stats.js"}
    assert "/static/js/views/log_view.js" not in views["board"]
    scripts = re.findall(r'<script type="module"[^>]* src="([^"]+)"', page)
    assert scripts == ["/static/js/main.js"]
    # the block comes before boot.js, which reads it
    assert page.index("first-views") < page.index("<script>")


def test_the_page_starts_its_data_requests_from_a_script_its_csp_allows_by_hash(live):
    """boot.js and the stylesheets are written into the page, boot.js first so that its
    requests go out first; the page's CSP allows exactly those, and no other page's does."""
    answer = get(live, "/", {"Accept-Encoding": "identity"}, auth=False)
    page = answer.raw_bytes.decode()
    with open(os.path.join(ROOT, "static", "js", "boot.js"), encoding="utf-8") as f:
        boot = f.read()
    assert f"<script>{boot}</script>" in page and 'src="/static/js/boot.js"' not in page
    assert page.index("<script>") < page.index("<style>")
    assert 'rel="stylesheet"' not in page and "/static/icons/icon.svg" not in page
    digest = base64.b64encode(hashlib.sha256(boot.encode()).digest()).decode()
    csp = answer.headers["Content-Security-Policy"]
    assert f"script-src 'self' 'sha256-{digest}';" in csp and "unsafe-inline" not in csp
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert [style.split(" */")[0] for style in styles] == [
        f"/* /static/css/{name}.css" for name in ("base", "board", "views", "insights")]
    with open(os.path.join(ROOT, "static", "css", "board.css"), encoding="utf-8") as f:
        assert f.read() in styles[1]
    hashes = [base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
              for style in styles]
    assert "style-src 'self' " + " ".join(f"'sha256-{h}'" for h in hashes) + ";" in csp
    login = get(live, "/login", auth=False).headers["Content-Security-Policy"]
    assert "script-src 'self';" in login and "style-src 'self';" in login


NAVIGATE = {"Sec-Fetch-Mode": "navigate", "Accept-Encoding": "identity"}


def first_answers(page: str):
    """The answers the page carries, path -> answer (a JSON block each), or None."""
    found = re.findall(r'<script type="application/json" data-answer="([^"]+)" data-seq="\d+">'
                       r'(.*?)</script>', page, re.S)
    return {path: json.loads(text) for path, text in found} or None


def test_a_signed_in_browser_gets_the_first_answers_in_the_page(live, api):
    """A navigation with the owner's session carries the answers of the first paint in the
    page, as the API gives them, so boot.js need not ask; no one else's page does (the page
    is open; the service worker's copy, not a navigation, would keep them stale)."""
    project = api.project(name="</script><script>alert(1)</script>")
    login = requests.post(f"{live.url}/api/login", json={
        "token": taskboard.runtime.config["token"]}, timeout=10)
    session = {"Cookie": login.headers["Set-Cookie"].split(";")[0]}
    page = get(live, "/", {**NAVIGATE, **session}, auth=False).raw_bytes.decode()
    answers = first_answers(page)
    paths = ["/api/openapi.json", "/api/settings",
             taskboard.FIRST_DATA["projects"], "/api/health"]
    assert list(answers) == paths
    # the paths of the first paint: one table, the server's, which the page carries
    assert json.loads(re.search(r'<script type="application/json" id="first-data">(.*?)</script>',
                                page)[1]) == dict(zip(("openapi", "settings", "projects",
                                                       "health"), paths))
    for path in paths[:3]:
        assert answers[path] == requests.get(live.url + path, headers=bearer(),
                                             timeout=10).json(), path
    # the owner's health (its CLIs' states move on while the server looks for them)
    health = requests.get(live.url + paths[3], headers=bearer(), timeout=10).json()
    assert set(answers[paths[3]]) == set(health) and "hosts" in health
    assert answers[paths[2]][0]["name"] == project["name"]
    assert page.count("</script>") == page.count("<script")  # the name stayed in its block
    for headers in ({**NAVIGATE}, {"Accept-Encoding": "identity", **session},
                    {**NAVIGATE, **session, **bearer()},
                    {**NAVIGATE, "Cookie": "taskboard_session=nope"}):
        page = get(live, "/", headers, auth=False).raw_bytes.decode()
        assert first_answers(page) is None and "first-views" in page, headers
