"""Each role sees and may do what its API allows (docs/console.md, Roles; docs/identity.md)."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.console_env import TEAM_ADMIN_KEY, VIEWER_KEY, Console, go, sign_in


def test_a_viewer_cannot_create(page: Page, console: Console) -> None:
    sign_in(page, console, VIEWER_KEY)
    assert "viewer" in page.locator("#who").inner_text()  # shown once signed in (sign_in waits)
    expect(page.locator("#nav").get_by_role("button", name="Keys")).to_be_hidden()
    expect(page.get_by_role("heading", name="Spend")).to_be_visible()
    assert page.get_by_text("Create a key", exact=True).count() == 0
    assert page.get_by_text("Create a team", exact=True).count() == 0
    assert console.api("POST", "keys", {"name": "nope"}, key=VIEWER_KEY)[0] == 403


def test_a_team_admin_sees_only_its_team(page: Page, console: Console) -> None:
    for team in ("research", "sales"):
        assert console.api("POST", "teams", {"name": team})[0] == 201
        assert console.api("POST", "keys", {"name": f"{team}-key", "team": team})[0] == 201
    sign_in(page, console, TEAM_ADMIN_KEY)
    assert "team research" in page.locator("#who").inner_text()
    expect(page.get_by_role("cell", name="research-key", exact=True)).to_be_visible()
    expect(page.get_by_role("cell", name="sales-key", exact=True)).to_have_count(0)
    go(page, "Teams")
    assert page.get_by_text("Create a team", exact=True).count() == 0
