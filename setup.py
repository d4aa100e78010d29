"""The compiled build (docs/compiled.md): with GATEWAY_COMPILE=1, `gateway/core` is compiled with mypyc
(the wheel the container image ships, and `make compile` in place); without it this is the plain
pure-Python package pyproject.toml describes."""

import hashlib
import os
from pathlib import Path

from setuptools import setup

CORE = Path("gateway/core")


def _compiled() -> list:  # type: ignore[type-arg]
    if os.environ.get("GATEWAY_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    sources = sorted(str(p) for p in CORE.rglob("*.py"))
    digest = hashlib.sha256()
    for path in sources:  # the digest covers every source; the empty `__init__.py` files stay Python (below)
        digest.update(path.encode() + b"\0" + Path(path).read_bytes())
    # what gateway/__init__.py checks: the compiled modules are of these very sources
    (CORE / "COMPILED").write_text(digest.hexdigest() + "\n")
    # The shared library as `gateway/core__mypyc`, inside the package: an editable install maps the
    # package only, so a top-level module beside it would not be found. The packages' (empty) `__init__.py`
    # stay Python: a compiled one takes its `__path__` from the shared library's place, which would then
    # be one `gateway/` too deep.
    modules = [path for path in sources if not path.endswith("__init__.py")]
    return mypycify(modules, opt_level="3", debug_level="0", group_name="gateway.core")


setup(ext_modules=_compiled())
