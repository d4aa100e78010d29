"""The admin console end to end in Chromium: sign in with an admin key, a team with a budget, a key in
it whose copied secret the official openai SDK uses, its spend in the chart and the table, the stats
page, then rotate and revoke (the next SDK call gets 401). The admin key never leaves the tab's memory."""

from __future__ import annotations

import openai
import pytest
from playwright.sync_api import Page, expect

from tests.browser.console_env import Console, go, screenshot, sign_in
from tests.control_plane import ADMIN_KEY


def sdk_call(console: Console, key: str) -> str:
    """One streamed chat completion (so the stats page has a time to first token); its text."""
    client = openai.OpenAI(base_url=console.proc.base_url, api_key=key, max_retries=0)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                                            stream_options={"include_usage": True})
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def seed(console: Console) -> None:
    """Two other teams with keys and traffic, so the pages show more than one row."""
    for team, budget, period in (("platform", 50, "month"), ("support", 0.1, "day")):
        assert console.api("POST", "teams", {"name": team, "budget_usd": budget, "budget_period": period})[0] == 201
    for name, team, calls in (("ci-runner", "platform", 3), ("support-bot", "support", 2)):
        status, created = console.api("POST", "keys", {"name": name, "team": team, "rpm": 600,
                                                       "metadata": {"owner": f"{team}@example.com"}})
        assert status == 201
        for _ in range(calls):
            sdk_call(console, created["key"])


def create_team(page: Page, name: str, budget: str) -> None:
    go(page, "Teams")
    page.get_by_text("Create a team").click()
    page.get_by_label("Name").fill(name)
    page.get_by_label("Budget (USD)").fill(budget)
    page.get_by_label("Budget period").select_option("month")
    page.get_by_role("button", name="Create team").click()
    expect(page.get_by_role("cell", name=name, exact=True)).to_be_visible()


def create_key(page: Page, name: str, team: str) -> str:
    """The secret, as the copy button put it on the clipboard."""
    go(page, "Keys")
    page.get_by_text("Create a key").click()
    page.get_by_label("Name").fill(name)
    page.get_by_label("Team").select_option(team)
    page.get_by_label("Requests per minute").fill("60")
    page.get_by_label("Metadata (JSON object)").fill('{"owner": "alice"}')
    page.get_by_role("button", name="Create key").click()
    shown = page.get_by_label(f"New secret for {name}").input_value()
    page.get_by_role("button", name="Copy").click()
    expect(page.locator("#status")).to_contain_text("Copied")
    expect(page.get_by_role("cell", name=name, exact=True)).to_be_visible()  # listed at once
    copied: str = page.evaluate("navigator.clipboard.readText()")
    assert copied == shown and copied.startswith("sk-gw-")
    return copied


def change_limits(page: Page, console: Console, name: str) -> None:
    go(page, "Keys")
    page.get_by_role("row").filter(has_text=name).get_by_role("button", name="Limits").click()
    form = page.get_by_role("form", name=f"Limits of {name}")
    form.get_by_label("Requests per minute").fill("120")
    form.get_by_label("Expires at").fill("2099-01-02T03:04")
    form.get_by_role("button", name="Save limits").click()
    expect(page.get_by_role("row").filter(has_text=name)).to_contain_text("120")
    _, key = console.api("GET", f"keys/{name}")
    assert key["rpm"] == 120 and key["expires_at"].startswith("2099-01-02") and key["team"] == "research"


def rotate(page: Page, name: str) -> str:
    go(page, "Keys")
    row = page.get_by_role("row").filter(has_text=name)
    row.get_by_label(f"Grace seconds for {name}").fill("0")
    row.get_by_role("button", name="Rotate").click()
    return page.get_by_label(f"New secret for {name}").input_value()


def revoke(page: Page, name: str) -> None:
    row = page.get_by_role("row").filter(has_text=name)
    row.get_by_role("button", name="Revoke").click()
    row.get_by_role("button", name="Confirm revoke").click()
    expect(page.locator("#status")).to_contain_text(f"Key {name} revoked")
    expect(page.get_by_role("cell", name=name, exact=True)).to_have_count(0)


def check_spend(page: Page, console: Console, key_name: str) -> None:
    _, rows = console.api("GET", "spend?group_by=key")
    cost = next(r["cost_usd"] for r in rows["data"] if r["key"] == key_name)
    assert cost > 0
    go(page, "Spend")
    page.get_by_label("Group by").select_option("key")
    page.get_by_role("button", name="Show").click()
    row = page.get_by_role("row").filter(has_text=key_name)
    expect(row).to_contain_text(f"${cost:.4f}")  # the table
    expect(row.get_by_role("cell").nth(1)).to_have_text("1")
    chart = page.get_by_role("img", name="Cost by key", exact=False)
    expect(chart).to_contain_text(key_name)  # a bar, labelled, with its value
    expect(chart).to_contain_text(f"${cost:.4f}")
    screenshot(page, "spend")


def test_key_lifecycle_with_the_openai_sdk(page: Page, console: Console) -> None:
    seed(console)
    sign_in(page, console)
    expect(page.get_by_role("heading", name="Keys")).to_be_visible()
    create_team(page, "research", "5")
    secret = create_key(page, "alice-laptop", "research")
    screenshot(page, "keys")
    assert sdk_call(console, secret) == "Hello from upstream"

    check_spend(page, console, "alice-laptop")
    go(page, "Teams")
    expect(page.get_by_role("row").filter(has_text="research")).to_contain_text("of $5.00")
    screenshot(page, "teams")
    go(page, "Stats")
    model_row = page.get_by_role("row").filter(has=page.get_by_role("cell", name="m", exact=True))
    expect(model_row.get_by_role("cell").nth(1)).to_have_text("6")  # this replica's requests of m
    expect(model_row.get_by_role("cell").nth(4)).to_contain_text(" ms")  # a TTFT p50, streamed
    expect(model_row.get_by_role("cell").nth(6)).to_contain_text(" ms")  # the gateway's overhead p50
    expect(page.get_by_role("img", name="Error rate")).to_contain_text("0.0 %")
    screenshot(page, "stats")

    change_limits(page, console, "alice-laptop")
    new_secret = rotate(page, "alice-laptop")
    assert new_secret != secret
    with pytest.raises(openai.AuthenticationError):
        sdk_call(console, secret)
    assert sdk_call(console, new_secret) == "Hello from upstream"
    revoke(page, "alice-laptop")
    with pytest.raises(openai.AuthenticationError):
        sdk_call(console, new_secret)
    go(page, "Audit log")
    expect(page.get_by_role("cell", name="alice-laptop", exact=True).first).to_be_visible()
    screenshot(page, "audit")

    # the admin key stayed in the tab's memory: not in the address, a cookie, storage, logs or audit
    assert ADMIN_KEY not in page.url
    assert page.context.cookies() == []
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0
    assert ADMIN_KEY not in page.content()
    assert ADMIN_KEY not in console.log() and secret not in console.log()
    _, audit = console.api("GET", "audit?limit=1000")
    assert audit["data"] and ADMIN_KEY not in str(audit)


def test_sign_in_page_and_a_refused_key(page: Page, console: Console) -> None:
    page.goto(console.url)
    screenshot(page, "sign-in")
    page.get_by_label("Admin key").fill("adm-wrong-key")
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.locator("#status")).to_contain_text("refused (401)")
    expect(page.get_by_label("Admin key")).to_be_visible()
    expect(page.get_by_label("Admin key")).to_have_value("")  # the secret is not kept in the DOM


def test_keyboard_only(page: Page, console: Console) -> None:
    """Sign in and move between pages with the keyboard alone: the key field has focus on load, Enter
    submits, Tab reaches the pages' buttons in order and Enter opens one."""
    page.goto(console.url)
    expect(page.get_by_label("Admin key")).to_be_focused()
    page.keyboard.type(ADMIN_KEY)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Keys")).to_be_visible()
    page.locator("#nav").get_by_role("button", name="Keys").focus()
    page.keyboard.press("Tab")
    expect(page.locator("#nav").get_by_role("button", name="Teams")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Teams and budgets")).to_be_visible()
    expect(page.locator("#nav").get_by_role("button", name="Teams")).to_have_attribute("aria-current", "page")
