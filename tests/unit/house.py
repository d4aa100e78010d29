"""The checks that keep the house map true: docs/architecture.md's support matrix and module map, the
import contracts of `.importlinter` and docs/reference.md's list of provider types, each against the
registry and the tree. Each check returns what to add (or remove), in words a newcomer can follow, so a
test that fails says what to do; `tests/unit/test_house.py` runs them on this checkout and on a copy
with a new provider type added by its cell files and one registry line."""

from __future__ import annotations

import ast
import configparser
import re
from collections.abc import Iterable
from pathlib import Path

Cell = tuple[str, str]  # (client schema, provider type)

# provider modules that are not a matrix cell: the protocols, the registry, the settings, the demo's answers
PROVIDER_SUPPORT = frozenset({"__init__", "base", "registry", "settings", "demo", "retry_after"})
# the import contract that keeps every translator module out of the pipeline
PIPELINE_CONTRACT = "importlinter:contract:pipeline-knows-no-api"
MAP_START = "```\ngateway/"


def cell_module(cell: Cell) -> str:
    schema, ptype = cell
    return f"gateway.providers.{schema}_{ptype}"


def schemas_of(cells: Iterable[Cell]) -> list[str]:
    return list(dict.fromkeys(schema for schema, _ in cells))


def matrix_table(cells: Iterable[Cell], types: Iterable[str]) -> str:
    """The support matrix as docs/architecture.md shows it: a row per provider type, a column per client
    schema, each cell its file in `providers/` (or "-" where the type does not serve the schema)."""
    cells = set(cells)
    schemas = schemas_of(sorted(cells, key=lambda c: ("chat", "responses", "messages").index(c[0])
                                if c[0] in ("chat", "responses", "messages") else 9))
    rows = ["| provider type | " + " | ".join(schemas) + " |", "| --- |" + " --- |" * len(schemas)]
    for ptype in types:
        files = [f"`{s}_{ptype}.py`" if (s, ptype) in cells else "-" for s in schemas]
        rows.append(f"| `{ptype}` | " + " | ".join(files) + " |")
    return "\n".join(rows) + "\n"


def matrix_gaps(doc: str, cells: Iterable[Cell], types: Iterable[str]) -> list[str]:
    table = matrix_table(cells, types)
    if table in doc:
        return []
    return ["docs/architecture.md: the support matrix differs from providers/registry.py; replace the table "
            "under \"The support matrix\" with:\n" + table]


def module_map(doc: str) -> dict[str, str]:
    """The map's entries: the text of each package's entry ("" for the top line), by package name."""
    block = doc[doc.index(MAP_START) + 4:]
    block = block[:block.index("```")]
    entries: dict[str, str] = {}
    name = ""
    for line in block.splitlines():
        head = re.match(r"  ([a-z_]+)/ ", line)
        if head:
            name = head.group(1)
        entries[name] = entries.get(name, "") + line + "\n"
    return entries


def modules_of(gateway: Path) -> dict[str, list[str]]:
    """Each package's modules (`wire`, `chat/wire`), "" holding the top-level ones; cells left out (the
    matrix lists them)."""
    found: dict[str, list[str]] = {"": sorted(p.stem for p in gateway.glob("*.py") if p.stem != "__init__")}
    for pkg in sorted(p for p in gateway.iterdir() if p.is_dir() and any(p.rglob("*.py"))):
        names = [p.relative_to(pkg).with_suffix("").as_posix() for p in pkg.rglob("*.py")]
        names = [n.removesuffix("/__init__") for n in names if n != "__init__"]
        if pkg.name == "providers":
            names = [n for n in names if "/" in n or n in PROVIDER_SUPPORT]
        found[pkg.name] = sorted(names)
    return found


def module_map_gaps(doc: str, gateway: Path) -> list[str]:
    """A module the map does not name: each word of its path must appear in its package's entry (a
    subpackage's modules after its name, `chat/ (wire, ...)`)."""
    entries = module_map(doc)
    gaps: list[str] = []
    for pkg, names in modules_of(gateway).items():
        if pkg and pkg not in entries:
            gaps.append(f"docs/architecture.md: the module map has no entry for `{pkg}/`: add a line "
                        f"`  {pkg}/  <what it is>` naming its modules ({', '.join(names)})")
            continue
        text = entries.get(pkg, "")
        for name in names:
            if not all(re.search(rf"\b{re.escape(part)}\b", text) for part in name.split("/")):
                where = f"the `{pkg}/` entry" if pkg else "the `gateway/` line"
                gaps.append(f"docs/architecture.md: the module map does not name `{pkg + '/' if pkg else ''}"
                            f"{name}`: add it to {where}, with what it does")
    return gaps


def cell_file_gaps(providers: Path, cells: Iterable[Cell]) -> list[str]:
    """`providers/<schema>_<type>.py` is the matrix: a cell file the registry does not list, or a listed
    cell without its file."""
    cells = set(cells)
    files = {p.stem for p in providers.glob("*.py")} - PROVIDER_SUPPORT
    listed = {f"{schema}_{ptype}" for schema, ptype in cells}
    gaps = [f"gateway/providers/{name}.py is not in the registry: add its translator to `TRANSLATORS` in "
            "gateway/providers/registry.py (and its type to `PROVIDERS`)" for name in sorted(files - listed)]
    gaps += [f"gateway/providers/{name}.py is missing: the registry lists the cell {name}; create the file, "
             "its translator defined in it" for name in sorted(listed - files)]
    return gaps


def contract_gaps(importlinter: str, cells: Iterable[Cell]) -> list[str]:
    """`.importlinter`'s pipeline contract forbids exactly the cells' modules (and the shared ones)."""
    ini = configparser.ConfigParser()
    ini.read_string(importlinter)
    forbidden = set(ini[PIPELINE_CONTRACT]["forbidden_modules"].split())
    wanted = {cell_module(c) for c in cells}
    named = {m for m in forbidden if re.fullmatch(r"gateway\.providers\.[a-z]+_[a-z0-9]+", m)}
    gaps = []
    if add := sorted(wanted - forbidden):
        gaps.append(f".importlinter: [{PIPELINE_CONTRACT}] lacks cells of the registry; add under "
                    "forbidden_modules:\n" + "".join(f"    {m}\n" for m in add))
    if remove := sorted(named - wanted):
        gaps.append(f".importlinter: [{PIPELINE_CONTRACT}] names modules that are not cells; remove:\n"
                    + "".join(f"    {m}\n" for m in remove))
    return gaps


def reference_type_gaps(reference: str, types: Iterable[str]) -> list[str]:
    """docs/reference.md's `providers.<name>.type` row names every provider type, as `type`."""
    row = next((line for line in reference.splitlines() if line.startswith("| `providers.<name>.type` |")), "")
    spans = set(re.findall(r"`([^`]+)`", row))
    missing = [t for t in types if t not in spans]
    if not row:
        return ["docs/reference.md has no `providers.<name>.type` row: add it, naming every provider type"]
    return [f"docs/reference.md: the `providers.<name>.type` row does not name `{t}`: add it (with a "
            "pointer to its page)" for t in missing]


def house_gaps(root: Path, cells: Iterable[Cell], types: Iterable[str]) -> list[str]:
    """Everything a checkout at `root` lacks for the registry's `cells` and `types`."""
    cells, types = list(cells), list(types)
    doc = (root / "docs" / "architecture.md").read_text()
    return [*cell_file_gaps(root / "gateway" / "providers", cells),
            *contract_gaps((root / ".importlinter").read_text(), cells),
            *reference_type_gaps((root / "docs" / "reference.md").read_text(), types),
            *matrix_gaps(doc, cells, types), *module_map_gaps(doc, root / "gateway")]


def cell_import_gaps(providers: Path, cells: Iterable[Cell], translators: Iterable[str]) -> list[str]:
    """A cell file holds only its cell: what another module takes from it is its translator (a class in
    the registry, to subclass or wrap), never a helper, which belongs in `providers/convert/`."""
    cell_files = {f"{schema}_{ptype}" for schema, ptype in cells}
    allowed = set(translators)
    gaps = []
    for path in sorted(providers.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gateway.providers.")):
                continue
            source = node.module.removeprefix("gateway.providers.")
            for alias in node.names if source in cell_files else ():
                if alias.name not in allowed:
                    gaps.append(f"gateway/providers/{path.relative_to(providers)} imports `{alias.name}` from the "
                                f"cell {source}.py: move it to a module of providers/convert/ named for what it does")
    return gaps
