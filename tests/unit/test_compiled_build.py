"""The compiled build's guard (gateway/__init__.py, docs/compiled.md): compiled modules whose sources
changed since `make compile` refuse to import, instead of silently running the old code."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gateway import COMPILED_PACKAGES, STAMP, StaleBuild, compiled_build, sources_digest

SO = "cpython-311-x86_64-linux-gnu.so"


def _root(tmp_path: Path) -> Path:
    """A `gateway` directory with sources in both compiled packages."""
    root = tmp_path / "gateway"
    (root / "core" / "chat").mkdir(parents=True)
    (root / "providers" / "convert").mkdir(parents=True)
    (root / "core" / "sse.py").write_text("X = 1\n")
    (root / "core" / "chat" / "stream.py").write_text("Y = 2\n")
    (root / "providers" / "convert" / "openai_chat.py").write_text("Z = 3\n")
    return root


def _built(root: Path) -> None:
    (root / "core" / f"sse.{SO}").write_bytes(b"")
    (root / "providers" / "convert" / f"openai_chat.{SO}").write_bytes(b"")
    (root / STAMP).write_text(sources_digest(root) + "\n")


def test_sources_without_compiled_modules_are_the_pure_build(tmp_path: Path) -> None:
    assert compiled_build(_root(tmp_path)) is False


def test_compiled_modules_of_these_sources_are_the_compiled_build(tmp_path: Path) -> None:
    root = _root(tmp_path)
    _built(root)
    assert compiled_build(root) is True


@pytest.mark.parametrize("change", ["core edited", "convert edited", "added", "no stamp"])
def test_compiled_modules_older_than_their_sources_refuse_to_import(tmp_path: Path, change: str) -> None:
    root = _root(tmp_path)
    _built(root)
    if change == "core edited":
        (root / "core" / "chat" / "stream.py").write_text("Y = 3\n")
    elif change == "convert edited":
        (root / "providers" / "convert" / "openai_chat.py").write_text("Z = 4\n")
    elif change == "added":
        (root / "core" / "new.py").write_text("")
    else:
        (root / STAMP).unlink()
    with pytest.raises(StaleBuild, match="make compile"):
        compiled_build(root)


def test_a_compiled_convert_package_alone_is_checked_too(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "providers" / "convert" / f"openai_chat.{SO}").write_bytes(b"")
    with pytest.raises(StaleBuild):
        compiled_build(root)


def test_the_digest_is_the_one_setup_py_writes() -> None:
    """setup.py names each source by its path from the repository root, sorted over both packages."""
    repo = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    paths = sorted(str(p.relative_to(repo)) for package in COMPILED_PACKAGES
                   for p in (repo / "gateway" / package).rglob("*.py"))
    for path in paths:
        digest.update(path.encode() + b"\0" + (repo / path).read_bytes())
    assert sources_digest(repo / "gateway") == digest.hexdigest()
    assert 'PACKAGES = ("core", "providers/convert")' in (repo / "setup.py").read_text()
