"""The compiled build (docs/compiled.md): with GATEWAY_COMPILE=1, `gateway/core` and `gateway/providers/convert`
are compiled with mypyc (the wheel the container image ships, and `make compile` in place); without it this
is the plain pure-Python package pyproject.toml describes."""

import hashlib
import os
from pathlib import Path

from setuptools import setup

GATEWAY = Path("gateway")
# as gateway/__init__.py's COMPILED_PACKAGES and STAMP (setup.py cannot import gateway: its guard would
# refuse the very rebuild an edited source needs)
PACKAGES = ("core", "providers/convert")
STAMP = GATEWAY / "core" / "COMPILED"
# modules of those packages that stay Python: the bridges' translator classes have two bases or extend
# `ViaChat` (a compiled class has one base, and a Python class may not extend it unless it says so)
PYTHON_ONLY = ("gateway/providers/convert/messages_chat_bridge.py",
               "gateway/providers/convert/responses_chat_bridge.py", "gateway/providers/convert/via_chat.py")


def _compiled() -> list:  # type: ignore[type-arg]
    if os.environ.get("GATEWAY_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    sources = sorted(p.as_posix() for package in PACKAGES for p in (GATEWAY / package).rglob("*.py"))
    digest = hashlib.sha256()
    for path in sources:  # the digest covers every source; the empty `__init__.py` files stay Python (below)
        digest.update(path.encode() + b"\0" + Path(path).read_bytes())
    # what gateway/__init__.py checks: the compiled modules are of these very sources
    STAMP.write_text(digest.hexdigest() + "\n")
    # The shared library as `gateway/core__mypyc`, inside the package: an editable install maps the
    # package only, so a top-level module beside it would not be found. The packages' (empty) `__init__.py`
    # stay Python: a compiled one takes its `__path__` from the shared library's place, which would then
    # be one `gateway/` too deep.
    modules = [path for path in sources if not path.endswith("__init__.py") and path not in PYTHON_ONLY]
    return mypycify(modules, opt_level="3", debug_level="0", group_name="gateway.core")


setup(ext_modules=_compiled())
