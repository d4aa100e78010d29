"""gateway/core does no I/O: it imports only the standard library, orjson, the sans-I/O protocol of
websockets (WebSocket frames: bytes in, events out), mypy_extensions (`mypyc_attr`, for the compiled
build: docs/compiled.md) and our pure modules."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "gateway" / "core"
ALLOWED_THIRD_PARTY = {"orjson", "websockets", "mypy_extensions"}
ALLOWED_OURS = {"gateway.core"}
BANNED_STDLIB = {"asyncio", "socket", "ssl", "selectors", "subprocess", "threading", "http", "urllib",
                 "logging"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_modules_exist() -> None:
    assert len(list(CORE.rglob("*.py"))) >= 8


def test_core_imports_only_pure_modules() -> None:
    offenders: list[str] = []
    for path in sorted(CORE.rglob("*.py")):
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top == "gateway":
                if not any(name == ok or name.startswith(ok + ".") for ok in ALLOWED_OURS):
                    offenders.append(f"{path.relative_to(CORE)}: {name}")
            elif top in BANNED_STDLIB or (top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY):
                offenders.append(f"{path.relative_to(CORE)}: {name}")
    assert offenders == []
