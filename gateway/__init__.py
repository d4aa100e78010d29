"""llm-gateway: an OpenAI-protocol reverse proxy for LLM providers.

Which build of `gateway.core` runs is decided here, before anything imports it: the mypyc-compiled one
or the pure-Python sources (docs/compiled.md). A compiled module shadows its `.py` (Python imports the
extension first), so a source edited after `make compile` would silently not run: the import refuses
instead."""

from __future__ import annotations

import hashlib
from pathlib import Path

__version__ = "0.1.0"

CORE = Path(__file__).parent / "core"


class StaleBuild(ImportError):
    pass


def sources_digest(core: Path) -> str:
    """sha256 over each source's path (as setup.py names it, `gateway/core/...`) and its bytes."""
    digest = hashlib.sha256()
    for path in sorted(core.rglob("*.py"), key=lambda p: str(p.relative_to(core))):
        name = "gateway/core/" + path.relative_to(core).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def compiled_core(core: Path = CORE) -> bool:
    """True when `core` holds compiled modules (their build's digest beside them); raises `StaleBuild` when
    its sources changed since."""
    stamp = core / "COMPILED"
    if not any(core.glob("*.so")):
        return False
    built = stamp.read_text().strip() if stamp.exists() else ""
    if built != sources_digest(core):
        raise StaleBuild(f"{core} holds compiled modules older than their sources (or of unknown sources): "
                         "`make compile` again, or `make clean-compiled` to run the sources")
    return True


COMPILED = compiled_core()  # gateway/core is the mypyc-compiled build
