"""What `prompt_cache: {breakpoints: auto}` costs per request (issue #57, acceptance 5): M2's shape (Messages
streams to the native `anthropic` deployment `ma`) with the model's breakpoints off, then auto, counted in
user-space instructions per request under callgrind (`bench.instructions`), the two alternated.

    python -m bench.cache_breakpoints [--requests 400] [--repeat 2] [--concurrency 16]

Needs valgrind. M2's request has no tools or system prompt, so `auto` adds one breakpoint (the user turn):
the cost measured is the path's (the twin translator, the marker added, the bigger body), not a walk.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import instructions, servers
from bench.run import raise_nofile
from bench.scenarios import FULL

_plain_config = servers.gateway_config


def _config(auto: bool) -> Any:
    def make(*args: Any, **kwargs: Any) -> str:
        text = _plain_config(*args, **kwargs)
        model = f"{{name: {servers.MESSAGES_MODEL}, deployments:"
        assert model in text, "the bench config's Messages model changed shape"
        return text.replace(model, f"{{name: {servers.MESSAGES_MODEL}, prompt_cache: {{breakpoints: auto}}, "
                                   "deployments:") if auto else text
    return make


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cache_breakpoints", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=16)
    args = p.parse_args(argv)
    raise_nofile()
    here = Path(__file__).resolve().parent.parent
    sc = replace(next(s for s in FULL if s.key == "M2"), concurrency=args.concurrency)
    figures: dict[str, list[float]] = {"off": [], "auto": []}
    for r in range(args.repeat):
        for name in ("off", "auto") if r % 2 == 0 else ("auto", "off"):
            servers.gateway_config = _config(name == "auto")  # type: ignore[assignment]
            figures[name].append(instructions.instructions_per_request(here, sc, args.requests))
    servers.gateway_config = _plain_config  # type: ignore[assignment]
    off, auto = min(figures["off"]), min(figures["auto"])
    print(f"M2: breakpoints auto {auto:,.0f} vs off {off:,.0f} instructions/request ({auto / off - 1:+.2%})  "
          f"[{figures}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
