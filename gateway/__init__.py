"""llm-gateway: an OpenAI-protocol reverse proxy for LLM providers.

Which build runs is decided here, before anything imports it: the mypyc-compiled one of the packages
setup.py compiles (`COMPILED_PACKAGES`) or the pure-Python sources (docs/compiled.md). A compiled module
shadows its `.py` (Python imports the extension first), so a source edited after `make compile` would
silently not run: the import refuses instead."""

from __future__ import annotations

import hashlib
from pathlib import Path

__version__ = "0.1.0"

ROOT = Path(__file__).parent
# what setup.py compiles (every module of each but those it names), and where it stamps their digest
COMPILED_PACKAGES = ("core", "providers/convert")
STAMP = "core/COMPILED"


class StaleBuild(ImportError):
    pass


def sources_digest(root: Path) -> str:
    """sha256 over each source of `COMPILED_PACKAGES` under `root` (the `gateway` directory), in the order and
    with the names setup.py gives them (`gateway/core/...`), and its bytes."""
    digest = hashlib.sha256()
    named = sorted(("gateway/" + p.relative_to(root).as_posix(), p)
                   for package in COMPILED_PACKAGES for p in (root / package).rglob("*.py"))
    for name, path in named:
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def compiled_build(root: Path = ROOT) -> bool:
    """True when `root`'s compiled packages hold compiled modules (their build's digest beside them); raises
    `StaleBuild` when their sources changed since."""
    if not any(next((root / package).rglob("*.so"), None) for package in COMPILED_PACKAGES):
        return False
    stamp = root / STAMP
    built = stamp.read_text().strip() if stamp.exists() else ""
    if built != sources_digest(root):
        raise StaleBuild(f"{root} holds compiled modules older than their sources (or of unknown sources): "
                         "`make compile` again, or `make clean-compiled` to run the sources")
    return True


COMPILED = compiled_build()  # the mypyc-compiled build runs
