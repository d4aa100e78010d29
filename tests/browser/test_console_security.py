"""The console's security in Chromium: stored strings carrying markup and `javascript:` URLs render as
text (no dialog, no request elsewhere), the CSP forbids inline script, and a page of another origin
cannot read an admin answer."""

from __future__ import annotations

import urllib.request

from playwright.sync_api import Page, expect

from tests.browser.console_env import Console, go, sign_in
from tests.control_plane import ADMIN_KEY
from tests.fake_upstream import FakeUpstream

HOSTILE = {"script": "<script>alert('s')</script>", "img": '"><img src=x onerror=alert("i")>',
           "link": "javascript:alert('j')", "svg": "<svg onload=alert('v')>"}


def test_stored_strings_render_as_text(page: Page, console: Console, dialogs: list[str]) -> None:
    assert console.api("POST", "teams", {"name": "t-1"})[0] == 201
    assert console.api("POST", "keys", {"name": "hostile", "team": "t-1", "metadata": {}})[0] == 201
    assert console.api("PATCH", "keys/hostile", {"metadata": HOSTILE})[0] == 200  # in the audit's detail too
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    sign_in(page, console)
    row = page.get_by_role("row").filter(has_text="hostile")
    for value in HOSTILE.values():  # the literal characters, on screen
        expect(row).to_contain_text(value.replace('"', '\\"'))
    # a name the API refuses: its error is text too
    page.get_by_text("Create a key").click()
    page.get_by_label("Name").fill("<img src=x onerror=alert(1)>")
    page.get_by_role("button", name="Create key").click()
    expect(page.locator("#status")).to_contain_text("(name) [400]")
    go(page, "Audit log")
    expect(page.get_by_role("row").filter(has_text="key.update").first).to_contain_text("<script>alert('s')</script>")
    assert page.locator("main img, main script, main a[href], main [onerror], main [onload]").count() == 0
    assert dialogs == []
    assert all(u.startswith(console.origin) for u in requests), requests


def test_csp_forbids_inline_script(page: Page, console: Console, dialogs: list[str]) -> None:
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    for path in ("/admin/", "/admin/assets/app.js", "/admin/config.json", "/admin/callback"):
        with urllib.request.urlopen(console.origin + path, timeout=5) as resp:
            csp = resp.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
            assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, path
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            assert resp.headers["Referrer-Policy"] == "no-referrer"
    sign_in(page, console)
    assert violations == []  # the console itself needs no exception
    ran = page.evaluate("""() => new Promise((done) => {
        document.addEventListener("securitypolicyviolation", (e) => done("blocked " + e.violatedDirective));
        const s = document.createElement("script");
        s.textContent = "window.__inline_ran = true";
        document.body.append(s);
        setTimeout(() => done(window.__inline_ran ? "ran" : "silent"), 2000);
    })""")
    assert ran.startswith("blocked script-src"), ran
    assert page.evaluate("window.__inline_ran === undefined")


def test_another_origin_cannot_read_admin_answers(page: Page, console: Console, upstream: FakeUpstream) -> None:
    page.goto(f"http://localhost:{upstream.port}/elsewhere")  # another origin, on loopback too
    outcomes = page.evaluate("""async ([origin, key]) => {
        const tries = {
            keys: () => fetch(origin + "/admin/v1/keys", { headers: { Authorization: "Bearer " + key } }),
            spend: () => fetch(origin + "/admin/v1/spend", { headers: { Authorization: "Bearer " + key } }),
            config: () => fetch(origin + "/admin/config.json"),
            page: () => fetch(origin + "/admin/"),
        };
        const out = {};
        for (const [name, run] of Object.entries(tries)) {
            try { const r = await run(); out[name] = "read " + r.status + " " + (await r.text()).slice(0, 40); }
            catch (e) { out[name] = "refused"; }
        }
        return out;
    }""", [console.origin, ADMIN_KEY])
    assert outcomes == {"keys": "refused", "spend": "refused", "config": "refused", "page": "refused"}
