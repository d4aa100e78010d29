"""One `admin_request` line per `/admin/v1` call (docs/reference.md, "Logs"), the refused ones included: a
missing or wrong credential (401), a route that does not exist (404), a method the route has not (405),
as well as the answered ones; never the credential itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.control_plane import ADMIN_KEY, admin_call, raw_config
from tests.harness import GatewayServer

WRONG = "adm-wrong-" + "w" * 30


def test_every_admin_call_is_one_line_the_refused_ones_too(
        tmp_path: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(parse_config(raw_config(f"sqlite:///{tmp_path}/admin.db"), env={}))
    calls: list[tuple[str, str, str, int]] = [
        ("GET", "keys", WRONG, 401),
        ("GET", "keys", "", 401),
        ("GET", "nothing-here", ADMIN_KEY, 404),
        ("DELETE", "keys", ADMIN_KEY, 405),
        ("GET", "keys", ADMIN_KEY, 200),
    ]
    lines: list[dict[str, Any]] = []
    for method, path, key, status in calls:
        with capture_logs() as logs:
            assert admin_call(gw.port, method, path, key=key)[0] == status
        # written before the answer leaves: the call has its line once the client has the answer
        mine = [e for e in logs if e["event"] == "admin_request"]
        assert [e["status"] for e in mine] == [status], (method, path, mine)
        assert WRONG not in orjson.dumps(logs, default=str).decode()
        lines += mine
    refused, anonymous = lines[0], lines[1]
    assert refused["admin"] is None and refused["role"] is None and refused["route"] == "list_keys"
    assert anonymous["admin"] is None
    assert lines[2]["admin"] == "platform" and lines[2]["route"] is None
    assert lines[3]["admin"] == "platform" and lines[3]["method"] == "DELETE"
    assert lines[4]["admin"] == "platform" and lines[4]["route"] == "list_keys"
