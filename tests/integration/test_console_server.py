"""The admin console's server side (gateway/apis/console.py): the page, its files and config.json with
their hardening headers; only the package's own files; nothing while the control plane is off."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import parse_config
from tests.control_plane import ADMIN_KEY, admin_call, raw_config
from tests.harness import GatewayServer, LoopThread

Start = Callable[[dict[str, Any]], GatewayServer]


@pytest.fixture
def start(servers: LoopThread, tmp_path: Path) -> Iterator[Start]:
    started: list[GatewayServer] = []

    def run(raw: dict[str, Any]) -> GatewayServer:
        gw = GatewayServer(parse_config(raw, env={}))
        servers.run(gw.start())
        started.append(gw)
        return gw

    yield run
    for gw in started:
        servers.run(gw.stop())


def get(gw: GatewayServer, path: str, method: str = "GET", headers: dict[str, str] | None = None,
        body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(f"http://127.0.0.1:{gw.port}{path}", data=body, method=method, headers=headers or {})
    try:
        with opener.open(req, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_the_page_its_files_and_their_headers(start: Start, tmp_path: Path) -> None:
    gw = start(raw_config(f"sqlite:///{tmp_path}/g.db"))
    for path, kind in (("/admin/", "text/html"), ("/admin/callback", "text/html"),
                       ("/admin/assets/app.js", "text/javascript"), ("/admin/assets/app.css", "text/css"),
                       ("/admin/config.json", "application/json")):
        status, headers, body = get(gw, path)
        assert status == 200 and headers["Content-Type"].startswith(kind), path
        csp = headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
        assert headers["X-Frame-Options"] == "DENY" and headers["Cross-Origin-Resource-Policy"] == "same-origin"
        assert "connect-src 'self';" in csp  # no IdP configured: the page talks to the gateway only
    assert json.loads(get(gw, "/admin/config.json")[2]) == {"oidc": None}
    status, headers, body = get(gw, "/admin/", "HEAD")
    assert status == 200 and body == b""
    assert get(gw, "/admin")[0:2][0] == 308 and get(gw, "/admin")[1]["Location"] == "/admin/"


def test_no_admin_answer_is_kept_by_a_cache(start: Start, tmp_path: Path) -> None:
    """A new secret, a list of keys, an error: `Cache-Control: no-store` and `nosniff` on each, so neither a
    browser's disk cache nor a proxy keeps an admin answer (docs/console.md, Security)."""
    gw = start(raw_config(f"sqlite:///{tmp_path}/g.db"))
    auth = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    answers = [get(gw, "/admin/v1/keys", "POST", auth, b'{"name": "fresh"}'),
               get(gw, "/admin/v1/keys", headers=auth),
               get(gw, "/admin/v1/keys/fresh/rotate", "POST", auth, b"{}"),
               get(gw, "/admin/v1/keys/nope", headers=auth),
               get(gw, "/admin/v1/keys", headers={"Authorization": "Bearer wrong"})]
    assert [status for status, _, _ in answers] == [201, 200, 200, 404, 401]
    assert b'"key":"sk-gw-' in answers[0][2]
    for status, headers, _ in answers:
        assert headers.get("Cache-Control") == "no-store" and headers.get("X-Content-Type-Options") == "nosniff", status


@pytest.mark.parametrize("path", ["/admin/assets/index.html", "/admin/assets/nope.js", "/admin/assets/..%2fapp.py",
                                  "/admin/assets/../apis/console.py", "/admin/assets/", "/admin/other"])
def test_only_the_packages_files(start: Start, tmp_path: Path, path: str) -> None:
    gw = start(raw_config(f"sqlite:///{tmp_path}/g.db"))
    status, _, body = get(gw, path)
    assert status == 404 and b"import" not in body


def test_config_names_the_idp_when_the_console_signs_in_through_it(start: Start, tmp_path: Path) -> None:
    raw = raw_config(f"sqlite:///{tmp_path}/g.db")
    raw["auth"]["jwt"] = {"issuer": "https://idp.example.com/realms/x", "audience": "gw",
                          "jwks_url": "http://127.0.0.1:9/certs", "groups": {"eng": {}}}
    raw["admin"]["console"] = {"oidc_client_id": "console"}
    gw = start(raw)
    _, headers, body = get(gw, "/admin/config.json")
    assert json.loads(body) == {"oidc": {"issuer": "https://idp.example.com/realms/x", "client_id": "console"}}
    assert "connect-src 'self' https://idp.example.com;" in headers["Content-Security-Policy"]


def test_no_console_without_the_control_plane(start: Start) -> None:
    gw = start({"auth": {"allow_unauthenticated": True}, "providers": {"mock": {"type": "mock"}},
                "models": [{"name": "m", "deployments": [{"provider": "mock", "model": "x"}]}]})
    for path in ("/admin/", "/admin/assets/app.js", "/admin/config.json"):
        assert get(gw, path)[0] == 404


def test_the_console_is_on_with_stored_admin_keys_only(start: Start, tmp_path: Path) -> None:
    """A config without `admin.keys` whose store holds admin keys: the API is on, and so is the console."""
    url = f"sqlite:///{tmp_path}/g.db"
    bare = raw_config(url)
    del bare["admin"]
    gw = start(bare)
    assert get(gw, "/admin/")[0] == 404  # no admin credential can exist yet
    status, made = admin_call(start(raw_config(url)).port, "POST", "admin-keys", {"name": "ops", "role": "admin"})
    assert status == 201
    assert admin_call(gw.port, "GET", "me", key=made["key"])[0] == 200
    for path in ("/admin/", "/admin/callback", "/admin/assets/app.js", "/admin/config.json"):
        status, headers, _ = get(gw, path)
        assert status == 200 and "frame-ancestors 'none'" in headers["Content-Security-Policy"], path
