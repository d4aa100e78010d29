"""`helm template` and `helm lint` for this chart without a helm binary (helm/llm-gateway/README.md).

There is no helm binary in Debian's, PyPI's or npm's packages, so `make test` cannot install one; it
installs helm-python-sdk, which binds Helm's own Go library. This script is what the tests do, as a
command: render the chart to stdout, or lint it (exit 1 on a warning or error).

    .venv/bin/python scripts/chart.py template --set secret.env.GATEWAY_API_KEY=x [-f values.yaml] [--name gw]
    .venv/bin/python scripts/chart.py lint --set secret.env.GATEWAY_API_KEY=x
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

CHART = Path(__file__).resolve().parents[1] / "helm" / "llm-gateway"


def merged_values(files: list[str], sets: list[str]) -> dict[str, Any]:
    """`-f` files in order, then `--set a.b=c` (the value read as YAML, as helm's --set does for scalars)."""
    values: dict[str, Any] = {}
    for f in files:
        _merge(values, yaml.safe_load(Path(f).read_text()) or {})
    for item in sets:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise SystemExit(f"--set {item!r}: expected key.path=value")
        node = values
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(raw) if raw else ""
    return values


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="chart.py", description="helm template / lint without a helm binary")
    p.add_argument("command", choices=("template", "lint"))
    p.add_argument("-f", "--values", action="append", default=[], help="a values file (repeatable)")
    p.add_argument("--set", action="append", default=[], help="key.path=value (repeatable)")
    p.add_argument("--name", default="gw", help="release name")
    p.add_argument("-n", "--namespace", default="default")
    args = p.parse_args(argv)
    values = merged_values(args.values, args.set)
    try:
        if args.command == "lint":
            report = helm.lint(CHART, values, strict=True)
            problems = [*report["errors"], *(m for m in report["messages"] if m["severity"] >= 2)]
            for m in problems:
                print(m, file=sys.stderr)
            print(f"{CHART.name}: {'failed' if problems else 'ok'}")
            return 1 if problems else 0
        with helm.Chart.load(CHART) as chart:
            out = chart.render(values, name=args.name, namespace=args.namespace)
    except helm.HelmError as exc:
        print(f"chart.py: {exc}", file=sys.stderr)
        return 1
    for path, text in sorted(out.items()):
        if text.strip() and not path.endswith("NOTES.txt"):
            print(f"---\n# Source: {path}\n{text.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
