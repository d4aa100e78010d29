"""Comments cite what the repository holds (issue #64, acceptance 3): no "CONTRACT" (a document that is not
shipped), every cited `docs/<page>.md` and its "Section" exist, every `*.md` a comment names is in the
repository, and no comment names a module that does not exist. `scripts/cite_docs.py` did the rewrite
once; these checks keep it true. Each check is shown to fail on a text made to break it."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "gateway"
DOC_CITATION = re.compile(r'(docs/[\w-]+\.md)(?:, "([^"\n]+)")?')
MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md)\b")
# a dotted name in backticks whose first part is a package of ours: `pipeline.request.keep_serving`
PACKAGES = {"gateway", "apis", "pipeline", "observe", "config", "providers", "upstream", "state", "store", "core",
            "http", "convert"}
DOTTED = re.compile(r"`((?:[a-z_][a-z0-9_]*\.)+[A-Za-z_][A-Za-z0-9_]*)")


def comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source."""
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and node.body:
                out.append((node.body[0].lineno, doc))
    return out


def sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(GATEWAY.rglob("*.py"))}


def contract_mentions(files: dict[str, str]) -> list[str]:
    return [f"{name}:{n}" for name, text in files.items()
            for n, line in enumerate(text.splitlines(), 1) if "CONTRACT" in line]


def _has_section(text: str, section: str) -> bool:
    """A heading that holds `section`, or a paragraph that starts with it in bold (`**Spend**: ...`)."""
    words = re.escape(section)
    return re.search(rf"^#+ .*{words}|^(?:- )?\*\*{words}", text, re.M) is not None


def bad_doc_citations(files: dict[str, str], root: Path = ROOT) -> list[str]:
    bad = []
    for name, text in files.items():
        for line, comment in comments(text) if name.endswith(".py") else [(1, text)]:
            for page, section in DOC_CITATION.findall(re.sub(r"[\s#]+", " ", comment)):
                path = root / page
                if not path.is_file():
                    bad.append(f"{name}:{line} cites {page}, which does not exist")
                elif section and not _has_section(path.read_text(), section):
                    bad.append(f'{name}:{line} cites {page}, "{section}": no such section')
    return bad


def missing_md(files: dict[str, str], root: Path = ROOT) -> list[str]:
    bad = []
    for name, text in files.items():
        for line, comment in comments(text):
            for md in MD_NAME.findall(comment):
                if not any((base / md).is_file() for base in (root, root / "docs")):
                    bad.append(f"{name}:{line} names {md}, which is not in the repository")
    return bad


def _module_exists(parts: list[str]) -> bool:
    """Whether `parts` starts with a module or package of ours (`gateway.` optional, `convert.` short
    for `providers.convert.`) and goes on with a name in it: a module path of two parts at least, or a
    package's class (`gateway.store.KeyCache`)."""
    if parts[0] == "gateway":
        parts = parts[1:]
    if parts and parts[0] == "convert":
        parts = ["providers", *parts]
    for n in range(len(parts), 0, -1):
        base = GATEWAY.joinpath(*parts[:n])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return n >= 2 or n == len(parts) or parts[n][:1].isupper()
    return False


CONFIG_SECTIONS = {"store", "state"}  # packages whose names are config sections too
# subpackages whose name starts the name of their modules' old flat spelling (`redact_cuts`, `chat_relay`)
SUBPACKAGES = ("chat", "responses", "messages", "redact", "policy", "convert")
SNAKE = re.compile(r"`([a-z]+_[a-z0-9_]+)(?:\.[A-Za-z_][\w.]*)?`")


def dead_modules(files: dict[str, str]) -> list[str]:
    """A backticked dotted name that starts at one of our packages must resolve to a module that exists;
    a backticked `<subpackage>_<name>` (the flat spelling of a module) must be a module of ours."""
    bad = []
    stems = {p.stem for p in GATEWAY.rglob("*.py")}
    for name, text in files.items():
        for line, comment in comments(text):
            for dotted in DOTTED.findall(comment):
                parts = dotted.split(".")
                if parts[0] in CONFIG_SECTIONS and not (GATEWAY / parts[0] / f"{parts[1]}.py").is_file():
                    continue  # a config key (`store.url`), not a module
                if parts[0] in PACKAGES and not _module_exists(parts):
                    bad.append(f"{name}:{line} names `{dotted}`: no such module")
            for word in SNAKE.findall(comment):
                if word.split("_")[0] in SUBPACKAGES and word not in stems:
                    bad.append(f"{name}:{line} names `{word}`: no such module")
    return list(dict.fromkeys(bad))


def test_no_comment_cites_contract() -> None:
    docs = {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))}
    assert contract_mentions({**sources(), **docs}) == [], "cite docs/reference.md or the topical page"


def test_every_cited_doc_and_section_exists() -> None:
    files = sources()
    assert sum(len(DOC_CITATION.findall(t)) for t in files.values()) > 150  # the check reads something
    assert bad_doc_citations(files) == []


def test_every_named_markdown_file_exists() -> None:
    assert missing_md(sources()) == []


def test_no_comment_names_a_module_that_does_not_exist() -> None:
    assert dead_modules(sources()) == []


def test_the_checks_fail_on_broken_citations() -> None:
    broken = {"x.py": '"""See docs/nowhere.md and docs/reference.md, "Nonsense"; protocols.md §4.1."""\n'
                      '# CONTRACT §4.9: `chat_relay._relay_events`, `pipeline.gone.fn`, `convert.via_chat.ViaChat`\n'}
    assert contract_mentions(broken) == ["x.py:2"]
    assert bad_doc_citations(broken) == ["x.py:1 cites docs/nowhere.md, which does not exist",
                                         'x.py:1 cites docs/reference.md, "Nonsense": no such section']
    assert missing_md(broken) == ["x.py:1 names docs/nowhere.md, which is not in the repository",
                                  "x.py:1 names protocols.md, which is not in the repository"]
    assert dead_modules(broken) == ["x.py:2 names `pipeline.gone.fn`: no such module",
                                    "x.py:2 names `chat_relay`: no such module"]
