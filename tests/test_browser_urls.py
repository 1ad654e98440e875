"""Values from the address bar, in a real browser (design §11): the login page sends the
visitor only to a path of this board, and a hash route whose id is not an id shows "Nothing
here" without asking the API anything about it.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from browser_helpers import live, open_board, quiet

pytestmark = pytest.mark.usefixtures("console_errors")

#: `next` values of /login (as written in its address) that lead off the board: a backslash
#: browsers read as a slash, a protocol-relative URL, whole URLs, and control characters that
#: the URL parser drops (a tab before "/evil.example" would make it "//evil.example").
OFF_SITE = ["/%5Cevil.example/", "/%5C%5Cevil.example/", "//evil.example", "https://evil.example/",
            "/%09evil", "/%09/evil.example", "/%0A/evil.example", "%2F%2Fevil.example"]

#: Hashes whose id is not an id: path traversal (as such and as a route's tail), a query
#: smuggled into the id, zero and a leading zero, a number past 2^53, a malformed escape.
NOT_IDS = ["#/projects/..%2F..%2Fsettings", "#/projects/..%2F..%2Fsettings/board",
           "#/projects/..%2F..%2Fsettings/stats", "#/tasks/1%2F..%2F..%2Fapi%2Fsettings",
           "#/tasks/..", "#/tasks/1%3Flimit=1", "#/projects/abc/plan", "#/tasks/0",
           "#/tasks/007", "#/tasks/99999999999999999999", "#/tasks/%E0%A4%A"]


def log_in(page, board, next_value):
    page.goto(f"{board.url}/login?next={next_value}")
    token = page.get_by_label("Token")
    token.fill(board.token)
    token.press("Enter")


def test_login_never_sends_the_visitor_off_the_board(token_board, page):
    elsewhere = []

    def other_site(route):  # never the network: a page that says where the visitor landed
        elsewhere.append(route.request.url)
        route.fulfill(content_type="text/html", body="<h1>Elsewhere</h1>")
    page.route(lambda url: not url.startswith(token_board.url + "/"), other_site)
    for next_value in OFF_SITE:
        log_in(page, token_board, next_value)
        expect(page, f"next={next_value}").to_have_url(token_board.url + "/")
        live(page)
        expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    assert elsewhere == []


def test_login_follows_a_next_on_the_board(token_board, page):
    log_in(page, token_board, "%2F%23%2Fsettings")  # as the board writes it (api.js)
    expect(page).to_have_url(token_board.url + "/#/settings")
    expect(page.get_by_role("heading", name="Settings", level=1)).to_be_visible()


def requests_of(context, *urls):
    """Open each url in a new tab, all at once (each tab waits on its own, not one after
    another); return, in the order of urls, each tab and the path (and query) of each
    request it made to the board, from its first one on, once it is live and its network
    has been idle (the view has asked for what it shows)."""
    opened = []
    for url in urls:
        page = context.new_page()
        seen = []
        page.on("request", lambda request, seen=seen: seen.append(request.url))
        page.goto(url, wait_until="commit")  # the rest of the load goes on meanwhile
        opened.append((page, seen, url))
    tabs = []
    for page, seen, url in opened:
        page.wait_for_load_state()
        live(page)
        page.wait_for_load_state("networkidle")
        origin = urlsplit(url)
        paths = set()
        for address in seen:
            parts = urlsplit(address)
            if parts.netloc == origin.netloc:
                paths.add(parts.path + (f"?{parts.query}" if parts.query else ""))
        tabs.append((page, paths))
    return tabs


def test_a_route_whose_id_is_not_an_id_shows_nothing_here_and_asks_no_api(board, context):
    [(not_found, expected)] = requests_of(context, f"{board.url}/#/no-such-page")
    expect(not_found.get_by_role("heading", name="Nothing here")).to_be_visible()
    # the board's start (the project list came in the page; health is asked after the paint)
    assert "/api/health" in expected and "/api/inbox" in expected
    # also the start's, once the server has found a CLI missing (it looks in the background),
    # and those the page carried (the service worker's copy, which the other tabs get, does not)
    expected |= {"/api/agents", "/api/openapi.json", "/api/settings",
                 "/api/projects?fields=agent,host,prFixMaxAttempts,simulated,stopCheckCommand"}
    project = board.demo_project()  # a real id still opens its view, and asks for its tasks
    *tabs, (real, real_paths) = requests_of(
        context, *(board.url + "/" + hash_ for hash_ in NOT_IDS),
        f"{board.url}/#/projects/{project['id']}")
    for hash_, (page, paths) in zip(NOT_IDS, tabs, strict=True):
        expect(page.get_by_role("heading", name="Nothing here"), hash_).to_be_visible()
        assert paths <= expected, f"{hash_} asked for {sorted(paths - expected)}"
        page.close()
    expect(real.get_by_role("heading", name="Nothing here")).to_have_count(0)
    assert f"/api/projects/{project['id']}/tasks" in real_paths


#: Set the hash and wait for its hashchange: the router (listening since the start) has run.
CHANGE_HASH = """hash => new Promise((done) => {
  window.addEventListener("hashchange", done, {once: true});
  location.hash = hash;
})"""


def test_a_hash_changed_to_a_path_in_place_of_an_id_asks_nothing(board, page):
    project = board.demo_project()
    open_board(page, board, project["id"])
    # the start's own requests are over: the service worker's first install (it keeps the
    # board's files) too
    page.evaluate("() => navigator.serviceWorker.ready.then(() => true)")
    quiet(page)
    asked = []
    page.on("request", lambda request: asked.append(request.url))
    for hash_ in NOT_IDS:
        page.evaluate(CHANGE_HASH, hash_)
        expect(page.get_by_role("heading", name="Nothing here"), hash_).to_be_visible()
    page.wait_for_load_state("networkidle")
    # not a view module, not an API call (but the board's health check, once a minute); the
    # browser may fetch the manifest's icons meanwhile (is the board installable?)
    assert [url for url in asked if urlsplit(url).path != "/api/health"
            and urlsplit(url).path.startswith(("/api/", "/static/js/"))] == []


def test_the_api_module_refuses_a_path_in_place_of_an_id(board, page):
    """The second line of defence: store.js's api throws before any request is made."""
    task = board.tasks(board.demo_project()["id"])[0]
    page.goto(board.url)
    live(page)
    quiet(page)  # the start's own requests are over
    asked = []
    page.on("request", lambda request: asked.append(urlsplit(request.url).path))
    answers = page.evaluate("""async (taskId) => {
      const { api } = await import("/static/js/store.js");
      const calls = [() => api.task("1/../../api/settings"), () => api.tasks("../settings"),
        () => api.moveTask(0, "done"), () => api.task(1.5), () => api.task(null),
        () => api.update(1, "../../settings", 1, {}), () => api.desktop(".."),
        () => api.attachmentUrl("1?download"), async () => (await api.task(taskId)).title];
      const answers = [];
      for (const call of calls) {
        try { answers.push(await call()); } catch (error) { answers.push(error.code); }
      }
      return answers;
    }""", task["id"])
    assert answers == ["not_an_id"] * 5 + ["not_a_name"] * 2 + ["not_an_id", task["title"]]
    assert [path for path in asked if path.startswith("/api/")] == [f"/api/tasks/{task['id']}"]
