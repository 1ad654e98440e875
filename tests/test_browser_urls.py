"""Values from the address bar, in a real browser (design §11): the login page sends the
visitor only to a path of this board.

Fixtures: tests/browser_fixtures.py; locators: tests/browser_helpers.py.
"""

import pytest
from playwright.sync_api import expect

from browser_helpers import live

pytestmark = pytest.mark.usefixtures("console_errors")

#: `next` values of /login (as written in its address) that lead off the board: a backslash
#: browsers read as a slash, a protocol-relative URL, whole URLs, and control characters that
#: the URL parser drops (a tab before "/evil.example" would make it "//evil.example").
OFF_SITE = ["/%5Cevil.example/", "/%5C%5Cevil.example/", "//evil.example", "https://evil.example/",
            "/%09evil", "/%09/evil.example", "/%0A/evil.example", "%2F%2Fevil.example"]

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
