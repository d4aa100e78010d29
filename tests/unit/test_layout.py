"""The package's shape: a short top level, no import cycle between packages, modules of a readable size,
and the provider list spelled once."""

from __future__ import annotations

import ast
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
MAX_TOP_LEVEL_MODULES = 10
MAX_MODULE_LINES = 400


def _unit(module: str) -> str:
    """The package a module belongs to for the cycle check: `gateway.<package>`, or the top-level module
    itself (`gateway.app`, `gateway.errors`, ...)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _module_name(path: Path) -> str:
    rel = path.relative_to(GATEWAY.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    return (GATEWAY / f"{name}.py").exists() or (GATEWAY / name).is_dir()


def _imports(path: Path) -> set[str]:
    """Every `gateway.*` module this file imports, those under `if TYPE_CHECKING:` and inside functions
    included: a deferred import is still a dependency."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("gateway"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gateway":  # `from gateway import errors`, or a name such as __version__
                names.update(f"gateway.{a.name}" for a in node.names if _is_module(a.name))
            elif node.module.startswith("gateway."):
                names.add(node.module)
    return names


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in GATEWAY.rglob("*.py"):
        src = _unit(_module_name(path))
        deps = graph.setdefault(src, set())
        deps.update(d for d in map(_unit, _imports(path)) if d not in (src, "gateway"))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first walk (each reported once per back edge)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the walk's path, 2 done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                found.append([*path[path.index(dep):], dep])
            elif dep not in state:
                walk(dep)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return found


# The API port's server still imports the App for its type hints; the `http/` rewrite (a server that
# takes a handler and limits) removes this edge, and then it goes from here too.
KNOWN_EDGES: set[tuple[str, str]] = set()  # edges against the layering still to remove: none left


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_cycle_between_packages() -> None:
    graph = package_graph()
    for src, dep in KNOWN_EDGES:
        assert dep in graph[src], f"{src} no longer imports {dep}: remove it from KNOWN_EDGES"
        graph[src].discard(dep)
    assert cycles(graph) == []


def test_the_top_level_is_short() -> None:
    modules = sorted(p.name for p in GATEWAY.glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules


def test_no_module_is_over_the_limit() -> None:
    long = {str(p.relative_to(GATEWAY)): n for p in GATEWAY.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_the_provider_types_are_listed_in_one_place() -> None:
    """Only the registry spells the set of provider types: a quoted type name used as a value (a
    comparison) anywhere else in the package is a second list. Every type of the registry is looked for."""
    from gateway.providers.registry import PROVIDER_TYPES

    types = PROVIDER_TYPES
    assert {"openai", "anthropic", "azure", "bedrock", "gemini", "vertex", "mock"} <= set(types)
    spelled: list[str] = []
    for path in GATEWAY.rglob("*.py"):
        if path.name == "registry.py" and path.parent.name == "providers":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                consts = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in types]
                spelled += [f"{path.relative_to(GATEWAY)}:{c.lineno}" for c in consts]
    assert spelled == []


def test_the_docs_stand_alone() -> None:
    """docs/, the README and the chart name only documents in this repository: the contract they were
    built from is not shipped, so a reference to it would send a reader nowhere."""
    root = GATEWAY.parent
    files = [root / "README.md", *(root / "docs").rglob("*"), *(root / "helm").rglob("*")]
    cited = [f"{p.relative_to(root)}:{n}" for p in files if p.is_file()
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if "CONTRACT" in line]
    assert cited == []


# what code outside observe/ may call on the process's `Metrics`: its process-level points (the
# per-request ones are `observe.record.RequestRecorder`'s methods) and the registry a scrape reads
PROCESS_POINTS = frozenset({"state_degraded_op", "refused", "span_dropped", "store_health", "store_error",
                            "local_limits", "registry", "state_mode", "websocket_opened", "websocket_closed",
                            "websocket_refused", "ledger_pending_rows", "stored_keys_shadowed"})


def metric_touches(tree: ast.AST) -> list[int]:
    """Lines that reach into a metrics object: `<...>metrics.<field>` other than a process-level point,
    or a labelled child's `.labels(`."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
        if node.attr == "labels" or (name.lstrip("_") == "metrics" and node.attr not in PROCESS_POINTS):
            lines.append(node.lineno)
    return lines


def test_the_metric_finder_finds_a_touch() -> None:
    assert metric_touches(ast.parse("rt.metrics.ttft.labels('a').observe(1)")) != []
    assert metric_touches(ast.parse("self._metrics.child(x)")) == [1]
    assert metric_touches(ast.parse("family.labels('a')")) == [1]
    assert metric_touches(ast.parse("app.metrics.refused('x'); ctx.rec.first_token('m', 'p', 1.0)")) == []


def test_only_observe_touches_metric_objects() -> None:
    """Outside observe/ metrics are written through the request's recorder (or a process-level point of
    `Metrics`), never by reaching into a metric object."""
    touches = [f"{p.relative_to(GATEWAY)}:{n}" for p in GATEWAY.rglob("*.py") if p.parent.name != "observe"
               for n in metric_touches(ast.parse(p.read_text()))]
    assert touches == []


API_NAMES = frozenset({"chat", "responses", "messages", "embeddings", "count_tokens"})


def _field_names(tree: ast.AST) -> set[int]:
    """Constants that name a request body's field, not an API: dict keys, `x.get("...")`'s key, subscripts,
    tuples bound to a `*_FIELDS` name, and docstrings."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            skip.update(id(a) for a in node.args[:1])
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_FIELDS")
                                                  for t in node.targets):
            skip.update(id(c) for c in ast.walk(node.value))
        elif isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
    return skip


def api_names_spelled(tree: ast.AST) -> list[int]:
    skip = _field_names(tree)
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in API_NAMES and id(n) not in skip]


def test_the_api_name_finder_finds_a_name() -> None:
    assert api_names_spelled(ast.parse('_API = {"/v1/chat/completions": "chat"}')) == [1]
    assert api_names_spelled(ast.parse('if api == "count_tokens": pass')) == [1]
    assert api_names_spelled(ast.parse('body.get("messages"); out = {"messages": 1}; b["messages"]')) == []


def test_api_names_appear_as_values_only_in_apis() -> None:
    """A client API is a value (`apis/catalog.py`): nothing below apis/ spells an API's name."""
    spelled = [f"{p.relative_to(GATEWAY)}:{n}" for p in GATEWAY.rglob("*.py") if p.parent.name != "apis"
               for n in api_names_spelled(ast.parse(p.read_text()))]
    assert spelled == []


MAX_FUNCTION_LINES = 40
# functions longer than MAX_FUNCTION_LINES (docstring included), each with why it stays whole
LONG_FUNCTIONS = {
    "observe/metrics.py:create_metrics": "one declaration per metric of the contract, in one table",
    "pipeline/attempts.py:run_attempts": "the attempt loop (routing, retry, hedging) read as one walk",
    "config/load.py:_parse": "one line per config section, in the reference's order",
    "server.py:run_server": "the process's lifecycle: sockets, signals, reload, drain",
    "config/telemetry.py:_traces_config": "one line per OTEL_* variable of the spec",
    "core/chat/assemble.py:feed": "the per-event hot path, inlined",
    "core/sse.py:take_region": "the per-read hot path, inlined",
}


def long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in GATEWAY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found[f"{path.relative_to(GATEWAY)}:{node.name}"] = n
    return found


def test_no_function_is_over_the_limit_outside_the_justified_list() -> None:
    found = long_functions()
    assert set(found) - set(LONG_FUNCTIONS) == set(), "shorten it, or justify it in LONG_FUNCTIONS"
    assert set(LONG_FUNCTIONS) - set(found) == set(), "no longer long: remove it from LONG_FUNCTIONS"


def test_every_provider_file_is_a_registry_cell_and_every_cell_has_its_file() -> None:
    """`providers/<api>_<type>.py` is the support matrix: one file per (client schema, provider type) the
    registry serves, and the cell's translator is defined in it; shared conversions live in convert/."""
    from gateway.apis.catalog import CLIENT_APIS
    from gateway.providers.registry import CELLS, PROVIDER_TYPES
    from tests.unit.house import cell_file_gaps

    gaps = cell_file_gaps(GATEWAY / "providers", CELLS)
    assert gaps == [], "\n".join(gaps)
    schemas = {api.schema for api in CLIENT_APIS}
    for (schema, ptype), translator in CELLS.items():
        assert translator.__module__ == f"gateway.providers.{schema}_{ptype}", (schema, ptype)
        assert schema in schemas and ptype in PROVIDER_TYPES, (schema, ptype)


def test_the_pipeline_contract_forbids_every_cell() -> None:
    """`.importlinter`'s "the pipeline imports no translator module" lists every cell of the matrix."""
    from gateway.providers.registry import CELLS
    from tests.unit.house import contract_gaps

    gaps = contract_gaps((GATEWAY.parent / ".importlinter").read_text(), CELLS)
    assert gaps == [], "\n".join(gaps)
