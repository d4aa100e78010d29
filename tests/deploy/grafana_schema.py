"""Grafana's own schema applied to dashboard JSON: what Grafana publishes of its dashboard kind and panel
plugins in `@grafana/schema` (generated from its CUE kinds), checked by the TypeScript compiler.

A real Grafana cannot be installed here (no registry that this project reaches ships one), and the
package ships TypeScript types, no JSON Schema and no CUE, so each dashboard becomes a .ts file of typed
constants (`const c: Dashboard = {...the JSON...}`) and `tsc --strict --noEmit` does the checking:
object-literal excess property checks reject unknown fields, and wrong types, missing required fields
and values outside an enum are type errors. Checked, each against Grafana's own type:

- the whole dashboard: `Dashboard` (links, annotations, template variables, time, panels);
- each panel: `RowPanel` for rows, `Panel` for the others (gridPos, datasource, fieldConfig, ...);
- each panel's `options` and `fieldConfig.defaults.custom`: that panel plugin's own `Options` and
  `FieldConfig` (`@grafana/schema`'s raw/composable/<type>/panelcfg), and a panel type that Grafana does
  not ship there is a problem;
- each target: `DataQuery` (refId, datasource, hide). Prometheus's own query fields are not in
  `@grafana/schema` (they are in `@grafana/prometheus`, a React package), so they stay unchecked here;
  tests/deploy/test_prometheus_live.py runs every query against a real Prometheus instead.

The pinned versions are tests/e2e/node/package.json's devDependencies, installed by `make e2e-deps`.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "tests" / "e2e" / "node"
MODULES = NODE / "node_modules"
SCHEMA = MODULES / "@grafana" / "schema"
TSC = MODULES / ".bin" / "tsc"
PINNED = ("@grafana/schema", "typescript")
JSON = dict[str, Any]

# A string enum's members are nominal in TypeScript (`HeatmapColorMode.Scheme`), while JSON carries their
# values ("scheme"): Json<T> turns each string enum into the union of its values and keeps everything
# else as Grafana typed it, optional and required fields, numeric enums and index signatures included.
PRELUDE = """\
import type { DataQuery, Dashboard, Panel, RowPanel } from '@grafana/schema';
type Json<T> = T extends string ? `${T}` : T extends object ? { [K in keyof T]: Json<T[K]> } : T;
"""
TSCONFIG = {"compilerOptions": {"strict": True, "noEmit": True, "module": "nodenext",
                                "moduleResolution": "nodenext", "target": "es2022", "lib": ["es2022"],
                                "types": [], "skipLibCheck": True}}
_DIAGNOSTIC = re.compile(r"^(?P<file>[^(\s]+\.ts)\((?P<line>\d+),\d+\): error (?P<code>TS\d+): (?P<text>.*)$")


@dataclass(frozen=True, slots=True)
class Check:
    """One JSON value that must be of one of Grafana's types; `label` says where it is, for the report."""
    label: str
    ts_type: str
    value: Any


@dataclass(frozen=True, slots=True)
class Plugin:
    module: str          # the import specifier of the panel plugin's generated types
    field_config: bool   # whether the plugin declares a `FieldConfig` (custom field options)


def installed_versions() -> dict[str, str | None]:
    """Each pinned package's installed version (None when it is not installed)."""
    found: dict[str, str | None] = {}
    for name in PINNED:
        manifest = MODULES / name / "package.json"
        found[name] = json.loads(manifest.read_text())["version"] if manifest.exists() else None
    return found


@cache
def panel_plugins() -> dict[str, Plugin]:
    """Panel type -> its generated types, from the package's export map (one entry per shipped plugin)."""
    exports: dict[str, Any] = json.loads((SCHEMA / "package.json").read_text())["exports"]
    plugins = {}
    for spec, target in exports.items():
        m = re.fullmatch(r"\./dist/esm/raw/composable/(\w+)/panelcfg/x/\w+_types\.gen", spec)
        if m and isinstance(target, dict) and "types" in target:
            declared = (SCHEMA / target["types"]).read_text()
            plugins[m.group(1)] = Plugin("@grafana/schema" + spec[1:],
                                         re.search(r"^export interface FieldConfig\b", declared, re.M) is not None)
    return plugins


def _panel_checks(where: str, panel: JSON, unknown: list[str]) -> list[Check]:
    label = f'{where} panel {panel.get("id")} "{panel.get("title", "")}"'
    if panel.get("type") == "row":
        return [Check(label, "Json<RowPanel>", panel)]
    checks = [Check(label, "Json<Panel>", panel)]
    checks += [Check(f"{label} target {i}", "Json<DataQuery> & Record<string, unknown>", t)
               for i, t in enumerate(panel.get("targets") or [])]
    plugin = panel_plugins().get(str(panel.get("type")))
    if plugin is None:
        unknown.append(f"{label}: panel type {panel.get('type')!r} is not one @grafana/schema ships")
        return checks
    alias = f"plugin_{panel['type']}"
    checks.append(Check(f"{label} options", f"Json<{alias}.Options>", panel.get("options", {})))
    # a fieldConfig of the wrong shape is the Panel check's to report; here it only has no custom part
    field_config = panel.get("fieldConfig")
    defaults = field_config.get("defaults") if isinstance(field_config, dict) else None
    custom = defaults.get("custom", {}) if isinstance(defaults, dict) else {}
    # a plugin without custom field options takes none: an object with no fields
    custom_type = f"Json<{alias}.FieldConfig>" if plugin.field_config else "Record<string, never>"
    checks.append(Check(f"{label} fieldConfig.defaults.custom", custom_type, custom))
    return checks


def board_checks(name: str, board: JSON) -> tuple[list[Check], list[str]]:
    """The checks of one dashboard, and the problems found without the compiler (unknown panel types)."""
    unknown: list[str] = []
    # the panels are checked one by one below, each against its own type, for a report that names it
    checks = [Check(f"{name}: dashboard", "Json<Dashboard>", {**board, "panels": []})]
    for panel in board.get("panels") or []:
        checks += _panel_checks(f"{name}:", panel, unknown)
        for inner in panel.get("panels") or []:  # a collapsed row keeps its panels inside it
            checks += _panel_checks(f"{name}: row {panel.get('id')}", inner, unknown)
    return checks, unknown


def typescript(checks: list[Check]) -> tuple[str, list[tuple[int, int, str]]]:
    """The .ts source of `checks`, and each check's (first line, last line, label) in it."""
    used = sorted({m for c in checks for m in re.findall(r"\bplugin_(\w+)\.", c.ts_type)})
    plugins = panel_plugins()
    lines = PRELUDE.splitlines()
    lines += [f"import type * as plugin_{t} from '{plugins[t].module}';" for t in used]
    spans = []
    for n, check in enumerate(checks):
        lines.append(f"// {check.label}")
        body = f"export const c{n}: {check.ts_type} = {json.dumps(check.value, indent=2)};".splitlines()
        spans.append((len(lines) + 1, len(lines) + len(body), check.label))
        lines += body
    return "\n".join(lines) + "\n", spans


def _diagnostics(output: str) -> list[tuple[str, int, str]]:
    """(file, line, message with its elaboration lines) of each error tsc printed."""
    found: list[tuple[str, int, str]] = []
    for raw in output.splitlines():
        m = _DIAGNOSTIC.match(raw)
        if m:
            found.append((Path(m["file"]).name, int(m["line"]), f'{m["code"]}: {m["text"]}'))
        elif found and raw.startswith(" "):
            file, line, text = found[-1]
            found[-1] = (file, line, f"{text}\n    {raw.strip()}")
    return found


def problems(boards: dict[str, JSON]) -> list[str]:
    """Every place where `boards` (file name -> dashboard JSON) leaves Grafana's schema, one compiler run."""
    found: list[str] = []
    sources: dict[str, tuple[str, list[tuple[int, int, str]]]] = {}
    for i, (name, board) in enumerate(sorted(boards.items())):
        checks, unknown = board_checks(name, board)
        found += unknown
        sources[f"board{i}.ts"] = typescript(checks)
    with tempfile.TemporaryDirectory(prefix="dashboard-schema-") as tmp:
        work = Path(tmp)
        (work / "node_modules").symlink_to(MODULES, target_is_directory=True)
        (work / "tsconfig.json").write_text(json.dumps({**TSCONFIG, "files": sorted(sources)}))
        for file, (text, _) in sources.items():
            (work / file).write_text(text)
        done = subprocess.run([str(TSC), "-p", str(work), "--pretty", "false"], cwd=work,
                              capture_output=True, text=True, timeout=180)
    diagnostics = _diagnostics(done.stdout + done.stderr)
    if done.returncode != 0 and not diagnostics:  # the compiler failed without saying where: not a pass
        return [*found, f"tsc exited {done.returncode}: {done.stdout}{done.stderr}"]
    for file, line, text in diagnostics:
        source, spans = sources.get(file, ("", []))
        label = next((lab for first, last, lab in spans if first <= line <= last), f"{file} line {line}")
        lines = source.splitlines()
        at = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        found.append(f"{label}: {text} (at {at})")
    return found
