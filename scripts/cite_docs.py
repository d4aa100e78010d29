"""Rewrite the comments that cite "CONTRACT §n" (a document this repository does not ship) to cite the
repository's own docs page and section instead, and drop the citations of `protocols.md` (not shipped
either: the vendor's protocol is what the code itself describes). Comment-only and idempotent, so it can
be run again after other branches land:

    python scripts/cite_docs.py [ROOT]

`tests/unit/test_citations.py` (not this script) keeps the citations true.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REF, EXT = "docs/reference.md", "docs/extensions.md"
# CONTRACT section -> where this repository documents it
SECTIONS = {
    "1": f'{REF}, "Commands"',
    "2": f'{REF}, "Config keys"',
    "3": f'{REF}, "Routes"',
    "3.2": f'{REF}, "Routes"',
    "4": f'{EXT}, "Failure semantics"',
    "4.1": f'{EXT}, "Streams"',
    "4.2": f'{EXT}, "Failure semantics"',
    "4.3": f'{EXT}, "Failure semantics"',
    "4.4": 'docs/routing.md',
    "4.5": f'{EXT}, "Streams"',
    "4.6": f'{EXT}, "Failure semantics"',
    "4.7": f'{EXT}, "Failure semantics"',
    "4.8": f'{EXT}, "HTTP"',
    "4.9": "docs/continuation.md",
    "4.10": "docs/routing.md",
    "5": f'{EXT}, "Redaction in every script"',
    "5.1": f'{EXT}, "Redaction in every script"',
    "5.2": f'{REF}, "`guardrails`"',
    "5.3": f'{EXT}, "Costs a client or an upstream can impose"',
    "6": f'{REF}, "Metrics"',
    "7": f'{REF}, "Logs"',
    "8": f'{EXT}, "Traces"',
    "9": "docs/cloud-providers.md",
    "10": "docs/responses-bridge.md",
    "11": "docs/keys-teams-spend.md",
    "12": "docs/identity.md",
    "13": "docs/routing.md",
}
# §10 (coding agents) covers more than the Responses bridge: by what the comment is about
AGENTS = (("affinity", 'docs/agents.md, "Session affinity"'), ("session", 'docs/agents.md, "Session affinity"'),
          ("aliases", 'docs/agents.md, "Gateway config"'))
_GAP = r"(?:\s|#)*"  # a citation may run across lines of a comment
CITATION = re.compile(rf"CONTRACT{_GAP}(§[\d.]+(?:-§[\d.]+)?(?:{_GAP}(?:,|and){_GAP}§[\d.]+(?:-§[\d.]+)?)*)")
# `protocols.md §n` and the bare `§n` that follow it in the same sentence: dropped with their punctuation
PROTOCOLS = [
    (re.compile(r"[ \t]*\(protocols\.md §[\d.]+\)"), ""),
    (re.compile(r"\(protocols\.md §[\d.]+; "), "("),
    (re.compile(r"[,;][ \t]*(?:event order as )?protocols\.md §[\d.]+\)"), ")"),
    (re.compile(r", protocols\.md §[\d.]+\)"), ")"),
]
# module names that no longer exist, in every file
RENAMED = [("`redact_cuts.", "`core.redact.cuts."), ("`redact_cuts`", "`core.redact.cuts`"),
           ("`redact_engine`", "`core.redact.engine`"), ("`redact_breaks`", "`core.redact.breaks`"),
           ("`redact_regex`", "`core.redact.regex`"), ("`chat_anthropic_request`", "`convert.anthropic_request`"),
           ("`chat_anthropic_stream`", "`convert.anthropic_stream`"), ("`pipeline.spend`", "`pipeline.ledger`"),
           ("`core.retry.decide`", "`core.policy.retry.decide`"),
           ("(`chat_relay._relay_events`)", "(`core.chat.stream`)")]
# bare references, file by file: (file, the text, its replacement)
BARE = [
    ("gateway/core/messages/assemble.py",
     "end of the bytes,\nprotocols.md §1.5), the usage",
     "end of the bytes),\nthe usage"),
    ("gateway/providers/convert/anthropic_stream.py",
     "(either may be missing;\nprotocols.md §4.1)",
     "(either may be missing)"),
    ("gateway/core/responses/wire.py", " (§3.4)", ""),
    ("gateway/core/responses/wire.py", " (§3.6)", ""),
    ("gateway/observe/record.py", "its log line (§7)", 'its log line (docs/reference.md, "Logs")'),
    ("gateway/pipeline/cache.py",
     '"Config keys" `cache`, §4.8)',
     '"Config keys", `cache`; docs/extensions.md, "HTTP")'),
    ("gateway/observe/metrics.py", "(CONTRACT 4.9)", "(docs/continuation.md)"),
    ("gateway/core/http1_request.py", "(CONTRACT: one request", "(one request"),
    ("gateway/providers/registry.py",
     "(a deployment's default, §4.9)",
     "(a deployment's default, docs/continuation.md)"),
    ("gateway/core/policy/learned.py",
     "continued by regenerating (§4.9)",
     "continued by regenerating (docs/continuation.md)"),
    ("gateway/core/messages/stream.py", "text sent stands (§4.3)", f'text sent stands ({EXT}, "Failure semantics")'),
    ("gateway/core/messages/assemble.py", ", cumulative, §4.2)", ", cumulative)"),
    ("gateway/core/messages/wire.py", "(either may be missing, §4.1)", "(either may be missing)"),
    ("gateway/core/messages/wire.py",
     " are cumulative and replace earlier ones (§4.2).",
     " are cumulative and replace earlier ones."),
    ("gateway/providers/convert/messages_chat_stream.py", "excludes cache reads, §4.2)", "excludes cache reads)"),
    ("gateway/core/responses/filter.py", " do (§4.3)", " do"),
]


def _place(section: str, context: str) -> str:
    if section == "10":  # `context`: the comment's surroundings and the file's path
        return next((doc for word, doc in AGENTS if word in context), SECTIONS["10"])
    return SECTIONS[section]


def _rewrite(match: re.Match[str], text: str, rel: str) -> str:
    context = (text[max(0, match.start() - 200):match.end() + 80] + rel).lower()
    sections: list[str] = []
    for ref in re.findall(r"§([\d.]+)(?:-§([\d.]+))?", match.group(1)):
        sections += [s for s in ref if s]
    places = list(dict.fromkeys(_place(s.rstrip("."), context) for s in sections))
    return "; ".join(places)


def rewrite(path: Path, rel: str) -> bool:
    text = path.read_text()
    new = CITATION.sub(lambda m: _rewrite(m, text, rel), text)
    for pattern, repl in PROTOCOLS:
        new = pattern.sub(repl, new)
    for old, repl in RENAMED:
        new = new.replace(old, repl)
    for file, old, repl in BARE:
        if rel == file:
            new = new.replace(old, repl)
    if rel.endswith(".py"):  # the lines were within the limit: only a longer citation can push one past it
        new = "\n".join(_wrap_lines(new.split("\n")))
    if new != text:
        path.write_text(new)
    return new != text


def _wrap_lines(lines: list[str], width: int = 120) -> list[str]:
    """Lines a longer citation pushed past the limit, broken at a space (never inside a quoted section).
    The rest joins the next line when that line goes on the same comment or docstring paragraph (which
    may then be broken in turn), else it gets a line of its own; a comment after code goes on below it,
    or moves above the code when the break would fall in the code."""
    out = list(lines)
    carry = set()
    i = 0
    while i < len(out):
        line = out[i]
        if len(line) > width and ("docs/" in line or i in carry):
            indent = " " * (len(line) - len(line.lstrip()))
            cut = _space_outside_quotes(line, width)
            hash_at = line.find("  # ")
            if hash_at >= 0 and line[:hash_at].strip():  # a comment after code
                if cut <= hash_at + 3:
                    out[i:i + 1] = [f"{indent}{line[hash_at + 2:]}", line[:hash_at]]
                    carry.add(i)
                    continue
                out[i:i + 1] = [line[:cut], f"{indent}# {line[cut + 1:]}"]
            else:
                prefix = "# " if line.lstrip().startswith("#") else ""
                rest = line[cut + 1:]
                nxt = out[i + 1] if i + 1 < len(out) else ""
                if _goes_on(line, nxt, indent, prefix):
                    out[i:i + 2] = [line[:cut], f"{indent}{prefix}{rest} {nxt[len(indent) + len(prefix):]}"]
                else:
                    out[i:i + 1] = [line[:cut], f"{indent}{prefix}{rest}"]
            carry.add(i + 1)
        i += 1
    return out


def _goes_on(line: str, nxt: str, indent: str, prefix: str) -> bool:
    """Whether `nxt` continues the paragraph `line` is in (same indentation, same kind, no list item,
    no rule, the docstring not closed on `line`)."""
    if not nxt.startswith(indent + prefix) or len(nxt) - len(nxt.lstrip()) != len(indent):
        return False
    body = nxt[len(indent) + len(prefix):]
    if not body.strip() or body.startswith(("-", "`", ">>>", '"""', "#", " ", "*")):
        return False
    return not (line.rstrip().endswith('"""') or line.strip().startswith("# --"))


def _space_outside_quotes(line: str, width: int) -> int:
    """The last space before `width` that is not inside a "quoted section"."""
    quotes = line.replace('"""', "   ")  # a docstring's delimiters are no section's quotes
    indent = len(line) - len(line.lstrip())
    cut = line.rfind(" ", 0, width)
    while cut > indent and quotes.count('"', 0, cut) % 2:
        cut = line.rfind(" ", 0, cut)
    return cut if cut > indent else line.rfind(" ", 0, width)


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    files = sorted([*(root / "gateway").rglob("*.py"), *(root / "docs").rglob("*.md")])
    changed = [p for p in files if rewrite(p, p.relative_to(root).as_posix())]
    for p in changed:
        print(p.relative_to(root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
