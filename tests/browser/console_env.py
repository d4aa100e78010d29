"""The admin console's browser tests' world: a gateway process with a store and admin keys (its log
read by the tests), the scripted upstream and IdP on the tests' loop, and Debian's Chromium driven by
Playwright (its own browser download is not needed: `scripts/ensure-tools.sh` installs chromium)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.chat_scripts import text_stream
from tests.control_plane import ADMIN_KEY, GatewayProcess, admin_call
from tests.fake_upstream import FakeUpstream

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
VIEWER_KEY = "adm-viewer-" + "v" * 30
TEAM_ADMIN_KEY = "adm-teamadm-" + "t" * 30
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


def console_config(tmp: Path, upstream: FakeUpstream, **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "server": {"host": "127.0.0.1"},
        "providers": {"up": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-up"}},
        # a price large enough that one answer's cost shows in cents
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "up-model",
                                                   "price": {"input": 1000.0, "output": 2000.0}}]}],
        "admin": {"keys": [{"name": "platform", "key": ADMIN_KEY},
                           {"name": "auditor", "key": VIEWER_KEY, "role": "viewer"},
                           {"name": "research-lead", "key": TEAM_ADMIN_KEY, "role": "team_admin",
                            "team": "research"}]},
        "store": {"url": f"sqlite:///{tmp}/store.db", "poll_s": 0.2},
    }
    raw.update(extra)
    return raw


class Console:
    """A started gateway and the console's address on it."""

    def __init__(self, proc: GatewayProcess):
        self.proc = proc
        self.origin = f"http://127.0.0.1:{proc.port}"
        self.url = self.origin + "/admin/"

    def api(self, method: str, path: str, body: Any = None, key: str = ADMIN_KEY) -> tuple[int, Any]:
        return admin_call(self.proc.port, method, path, body, key)

    def log(self) -> str:
        return self.proc.log_path.read_text()


def start_console(tmp: Path, raw: dict[str, Any]) -> Iterator[Console]:
    proc = GatewayProcess(tmp, raw, name="console")
    proc.start()
    try:
        yield Console(proc)
    finally:
        proc.stop()


@pytest.fixture
def answering(upstream: FakeUpstream) -> FakeUpstream:
    upstream.defaults["/v1/chat/completions"] = text_stream(["Hello", " from", " upstream"])
    return upstream


@pytest.fixture
def console(tmp_path: Path, answering: FakeUpstream) -> Iterator[Console]:
    yield from start_console(tmp_path, console_config(tmp_path, answering))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser, console: Console) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console.origin)
    p = context.new_page()
    p.set_default_timeout(10_000)
    yield p
    context.close()


@pytest.fixture
def dialogs(page: Page) -> list[str]:
    """Every alert, confirm or prompt the page opens (each dismissed)."""
    seen: list[str] = []
    page.on("dialog", lambda d: (seen.append(d.message), d.dismiss()))
    return seen


def sign_in(page: Page, console: Console, key: str = ADMIN_KEY) -> None:
    page.goto(console.url)
    page.get_by_label("Admin key").fill(key)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.locator("#who").filter(has_text="·").wait_for()


def go(page: Page, name: str) -> None:
    page.locator("#nav").get_by_role("button", name=name).click()
    page.locator("#page[aria-busy]").wait_for(state="detached")


def screenshot(page: Page, name: str) -> None:
    """Each page's picture for docs/console/, refreshed with CONSOLE_SCREENSHOTS=1 (docs/console.md)."""
    if os.environ.get("CONSOLE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
