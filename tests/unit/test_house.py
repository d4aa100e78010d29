"""The house map stays true: docs/architecture.md's support matrix and module map, `.importlinter`'s cell
contract and docs/reference.md's provider types agree with the registry and the tree (`house.py`), and a
newcomer who follows "Adding a provider type" is told, by a failing test, every line left to add."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from gateway.providers.registry import CELLS, PROVIDER_TYPES
from tests.unit.house import (
    cell_file_gaps,
    cell_import_gaps,
    contract_gaps,
    house_gaps,
    matrix_gaps,
    matrix_table,
    module_map_gaps,
    reference_type_gaps,
)

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def test_the_checkout_lacks_nothing() -> None:
    gaps = house_gaps(ROOT, CELLS, PROVIDER_TYPES)
    assert gaps == [], "\n".join(gaps)


def test_the_architecture_page_has_both_checklists() -> None:
    doc = ARCHITECTURE.read_text()
    assert "## Adding a provider type" in doc and "## Adding a client API" in doc


def test_a_module_left_out_of_the_map_is_named() -> None:
    doc = ARCHITECTURE.read_text().replace("eventstream (AWS event", "(AWS event")
    assert module_map_gaps(doc, ROOT / "gateway") == [
        "docs/architecture.md: the module map does not name `core/eventstream`: add it to the `core/` "
        "entry, with what it does"]


def test_a_new_package_without_an_entry_is_named(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "gateway", tmp_path / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "gateway" / "queueing").mkdir()
    (tmp_path / "gateway" / "queueing" / "fair.py").write_text("")
    gaps = module_map_gaps(ARCHITECTURE.read_text(), tmp_path / "gateway")
    assert len(gaps) == 1 and "no entry for `queueing/`" in gaps[0] and "(fair)" in gaps[0]


def test_a_matrix_that_lacks_a_cell_prints_the_table() -> None:
    doc = ARCHITECTURE.read_text().replace("`messages_vertex.py`", "-")
    gaps = matrix_gaps(doc, CELLS, PROVIDER_TYPES)
    assert len(gaps) == 1 and gaps[0].endswith(matrix_table(CELLS, PROVIDER_TYPES))


def test_the_reference_must_name_every_type() -> None:
    text = (ROOT / "docs" / "reference.md").read_text().replace("`gemini`, ", "", 1)
    assert reference_type_gaps(text, PROVIDER_TYPES) == [
        "docs/reference.md: the `providers.<name>.type` row does not name `gemini`: add it (with a pointer "
        "to its page)"]


def test_the_contract_names_the_lines_to_add_and_to_remove() -> None:
    ini = (ROOT / ".importlinter").read_text().replace("    gateway.providers.chat_gemini\n", "")
    ini = ini.replace("    gateway.providers.demo\n", "    gateway.providers.demo\n    gateway.providers.chat_gone\n")
    assert contract_gaps(ini, CELLS) == [
        ".importlinter: [importlinter:contract:pipeline-knows-no-api] lacks cells of the registry; add under "
        "forbidden_modules:\n    gateway.providers.chat_gemini\n",
        ".importlinter: [importlinter:contract:pipeline-knows-no-api] names modules that are not cells; "
        "remove:\n    gateway.providers.chat_gone\n"]


# Acceptance: a newcomer's provider type, `quirky`, an OpenAI-compatible server with quirks (it wants
# its key in `x-quirk-key` and has no Responses API), written as "Adding a provider type" says.
QUIRKY_CELLS = {
    "chat_quirky.py": '''"""Chat Completions to a `quirky` server: OpenAI's, with the key in `x-quirk-key`."""
from gateway.providers.chat_openai import OpenAIChat


class QuirkyChat(OpenAIChat):
    def auth_headers(self) -> dict[str, str]:
        return {"x-quirk-key": self.provider.api_key or ""}
''',
    "responses_quirky.py": '''"""The Responses API to a `quirky` server, which has none: the Responses bridge."""
from gateway.providers.chat_quirky import QuirkyChat
from gateway.providers.convert.responses_chat_bridge import ResponsesViaChat


class QuirkyResponses(ResponsesViaChat):
    def __init__(self, provider) -> None:
        super().__init__(QuirkyChat(provider))
''',
    "messages_quirky.py": '''"""The Messages API to a `quirky` server: the Messages bridge on its chat cell."""
from gateway.providers.chat_quirky import QuirkyChat
from gateway.providers.convert.messages_chat_bridge import MessagesViaChat


class QuirkyMessages(MessagesViaChat):
    def __init__(self, provider) -> None:
        super().__init__(QuirkyChat(provider))
''',
}
QUIRKY = {("chat", "quirky"), ("responses", "quirky"), ("messages", "quirky")}


@pytest.fixture
def newcomer(tmp_path: Path) -> Path:
    """A copy of the checkout's tree and docs with the type's cell files created (steps 1-3)."""
    shutil.copytree(ROOT / "gateway", tmp_path / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    for name, text in QUIRKY_CELLS.items():
        (tmp_path / "gateway" / "providers" / name).write_text(text)
    return tmp_path


def follow(root: Path, gaps: list[str]) -> None:
    """Do what each message says, and only that."""
    for gap in gaps:
        if gap.startswith(".importlinter:") and "add under forbidden_modules:" in gap:
            lines = gap.split("forbidden_modules:\n", 1)[1]
            ini = root / ".importlinter"
            ini.write_text(ini.read_text().replace("    gateway.providers.demo\n",
                                                   "    gateway.providers.demo\n" + lines))
        elif gap.startswith("docs/reference.md: the `providers.<name>.type` row"):
            ptype = re.search(r"does not name `(\w+)`", gap)
            assert ptype
            ref = root / "docs" / "reference.md"
            ref.write_text(ref.read_text().replace(", `mock` |", f", `mock`, `{ptype.group(1)}` |", 1))
        elif gap.startswith("docs/architecture.md: the support matrix differs"):
            doc = root / "docs" / "architecture.md"
            old = matrix_table(CELLS, PROVIDER_TYPES)
            doc.write_text(doc.read_text().replace(old, gap.split("with:\n", 1)[1]))
        else:
            raise AssertionError(f"a message the newcomer cannot follow: {gap}")


def test_a_new_provider_type_is_its_cells_and_one_registry_entry(newcomer: Path) -> None:
    cells, types = [*CELLS, *sorted(QUIRKY)], [*PROVIDER_TYPES, "quirky"]
    gaps = house_gaps(newcomer, cells, types)
    assert len(gaps) == 3, "\n".join(gaps)  # the contract's lines, the reference's type, the matrix
    assert all(f"gateway.providers.{s}_quirky" in gaps[0] for s in ("chat", "responses", "messages"))
    assert "`quirky`" in gaps[1] and "| `quirky` | `chat_quirky.py` | `responses_quirky.py` |" in gaps[2]
    follow(newcomer, gaps)
    assert house_gaps(newcomer, cells, types) == []


def test_cells_without_their_registry_entry_are_named(newcomer: Path) -> None:
    gaps = cell_file_gaps(newcomer / "gateway" / "providers", CELLS)
    assert [g.split(" ", 1)[0] for g in gaps] == [f"gateway/providers/{n}" for n in sorted(QUIRKY_CELLS)]
    assert all("add its translator to `TRANSLATORS`" in g for g in gaps)


def test_the_quirky_cells_are_what_the_checklist_says() -> None:
    """The scripted cells use only names the checklist gives, so the checklist is enough to write them."""
    doc = ARCHITECTURE.read_text()
    section = doc[doc.index("## Adding a provider type"):doc.index("## Adding a client API")]
    for name in ("OpenAIChat", "ResponsesViaChat", "MessagesViaChat", "convert.responses_chat_bridge",
                 "convert.messages_chat_bridge"):
        assert name in section, name


def test_cell_files_hold_only_their_cell() -> None:
    """What a module takes from a cell file is its translator; shared helpers live in providers/convert/."""
    translators = {f.__name__ for f in CELLS.values()}
    gaps = cell_import_gaps(ROOT / "gateway" / "providers", CELLS, translators)
    assert gaps == [], "\n".join(gaps)


def test_a_helper_taken_from_a_cell_is_named(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "gateway" / "providers", tmp_path / "providers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "providers" / "convert" / "reuse.py").write_text(
        "from gateway.providers.chat_openai import OpenAIChat, passed_through\n")
    gaps = cell_import_gaps(tmp_path / "providers", CELLS, {f.__name__ for f in CELLS.values()})
    assert gaps == ["gateway/providers/convert/reuse.py imports `passed_through` from the cell chat_openai.py: "
                    "move it to a module of providers/convert/ named for what it does"]
