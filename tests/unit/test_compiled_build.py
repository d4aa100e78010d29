"""The compiled build's guard (gateway/__init__.py, docs/compiled.md): a compiled `gateway/core` whose sources
changed since `make compile` refuses to import, instead of silently running the old code."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import StaleBuild, compiled_core, sources_digest


def _core(tmp_path: Path) -> Path:
    core = tmp_path / "core"
    (core / "chat").mkdir(parents=True)
    (core / "sse.py").write_text("X = 1\n")
    (core / "chat" / "stream.py").write_text("Y = 2\n")
    return core


def test_sources_without_compiled_modules_are_the_pure_build(tmp_path: Path) -> None:
    assert compiled_core(_core(tmp_path)) is False


def test_compiled_modules_of_these_sources_are_the_compiled_build(tmp_path: Path) -> None:
    core = _core(tmp_path)
    (core / "sse.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (core / "COMPILED").write_text(sources_digest(core) + "\n")
    assert compiled_core(core) is True


@pytest.mark.parametrize("change", ["edited", "added", "no stamp"])
def test_compiled_modules_older_than_their_sources_refuse_to_import(tmp_path: Path, change: str) -> None:
    core = _core(tmp_path)
    (core / "sse.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (core / "COMPILED").write_text(sources_digest(core) + "\n")
    if change == "edited":
        (core / "chat" / "stream.py").write_text("Y = 3\n")
    elif change == "added":
        (core / "new.py").write_text("")
    else:
        (core / "COMPILED").unlink()
    with pytest.raises(StaleBuild, match="make compile"):
        compiled_core(core)


def test_the_digest_is_the_one_setup_py_writes() -> None:
    """setup.py names each source by its path from the repository root, in sorted order."""
    import hashlib

    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for path in sorted(str(p.relative_to(root)) for p in (root / "gateway" / "core").rglob("*.py")):
        digest.update(path.encode() + b"\0" + (root / path).read_bytes())
    assert sources_digest(root / "gateway" / "core") == digest.hexdigest()
