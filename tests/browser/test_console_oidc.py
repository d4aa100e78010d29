"""Sign-in through a scripted IdP: OpenID Connect authorization code with PKCE as the public client
`admin.console.oidc_client_id` (docs/console.md, Signing in). The IdP gives a token only for the
verifier whose S256 challenge came with the code; the console sends that token to /admin/v1 and keeps
nothing of the exchange in the address or in storage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Page, Request, expect

from tests.browser.console_env import Console, console_config, start_console
from tests.fake_idp import AUDIENCE, FakeIdp
from tests.fake_upstream import FakeUpstream
from tests.harness import LoopThread

CLIENT_ID = "gateway-console"


@pytest.fixture
def idp(servers: LoopThread) -> Iterator[FakeIdp]:
    fake = FakeIdp(login_groups=["platform-admins"])
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


@pytest.fixture
def console(tmp_path: Path, answering: FakeUpstream, idp: FakeIdp) -> Iterator[Console]:
    raw = console_config(tmp_path, answering)
    raw["auth"] = {"jwt": {"issuer": idp.issuer, "audience": AUDIENCE, "groups": {"platform-admins": {}}}}
    raw["admin"]["jwt_groups"] = {"platform-admins": {"role": "admin"}}
    raw["admin"]["console"] = {"oidc_client_id": CLIENT_ID}
    yield from start_console(tmp_path, raw)


def sso_sign_in(page: Page, console: Console) -> list[Request]:
    """Through the IdP and back; the requests the page then made to /admin/v1."""
    admin_requests: list[Request] = []
    page.on("request", lambda r: admin_requests.append(r) if "/admin/v1/" in r.url else None)
    page.goto(console.url)
    with page.expect_response(lambda r: r.url.endswith("/admin/v1/me")):
        page.get_by_role("button", name="Sign in with your identity provider").click()
    page.wait_for_url(console.url)  # back from the callback, its code out of the address
    return admin_requests


def test_pkce_sign_in_sends_the_idps_token(page: Page, console: Console, idp: FakeIdp) -> None:
    admin_requests = sso_sign_in(page, console)
    [asked] = idp.authorizations
    assert asked["client_id"] == CLIENT_ID and asked["redirect_uri"] == console.origin + "/admin/callback"
    assert asked["code_challenge_method"] == "S256" and "openid" in asked["scope"].split()
    [exchange] = idp.exchanges
    assert exchange.granted, exchange.form  # the verifier matched the challenge
    assert exchange.access_token is not None
    assert admin_requests[0].url.endswith("/admin/v1/me")
    assert admin_requests[0].headers["authorization"] == "Bearer " + exchange.access_token
    assert "code=" not in page.url and exchange.access_token not in page.url
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0
    assert page.context.cookies() == []


def test_pkce_sign_in_opens_the_console(page: Page, console: Console, browser: Browser) -> None:
    sso_sign_in(page, console)
    page.locator("#who").filter(has_text="·").wait_for(timeout=3000)
    expect(page.get_by_role("heading", name="Keys")).to_be_visible()


def test_a_callback_not_started_here_is_refused(page: Page, console: Console, idp: FakeIdp) -> None:
    """A code the page did not ask for (a forged or replayed link) is never exchanged."""
    page.goto(console.origin + "/admin/callback?code=stolen&state=forged")
    expect(page.locator("#status")).to_contain_text("not started here")
    assert idp.exchanges == [] and "code=" not in page.url
    expect(page.get_by_label("Admin key")).to_be_visible()


def test_an_error_link_not_started_here_puts_no_words_on_the_page(page: Page, console: Console, idp: FakeIdp) -> None:
    """Anyone can send a link to /admin/callback?error=...: its words never reach the page (the state is
    checked first), while an IdP's own refusal, with the state it was sent, is shown."""
    lure = "Session expired: paste your admin key at evil.example"
    page.goto(console.origin + "/admin/callback?" + urlencode({"error": lure, "state": "forged"}))
    expect(page.locator("#status")).to_contain_text("not started here")
    assert "evil.example" not in page.locator("#status").inner_text()
    page.goto(console.origin + "/admin/callback?" + urlencode({"error": lure}))  # no state at all
    expect(page.locator("#status")).to_contain_text("not started here")
    idp.refuse = "access_denied"
    page.goto(console.url)
    page.get_by_role("button", name="Sign in with your identity provider").click()
    expect(page.locator("#status")).to_contain_text("the identity provider refused: access_denied")
    assert idp.exchanges == [] and "error=" not in page.url
