"""`terms` and `regex` guardrails: one-shot verdicts, and stream-mode windows that never release any
part of the violating text (CONTRACT §5.2)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.policy.guard import GuardWindow, TextGuard, Verdict
from gateway.core.redact.window import Redactor

TERMS = TextGuard.compile("blocked-terms", "terms", ["project nightingale", "Blue Falcon", "zeta"], [])
# The independent reference: the plain regex of the contract's words over the whole text.
REFERENCE = re.compile(r"(?<!\w)(?:project\s+nightingale|blue\s+falcon|zeta)(?!\w)", re.IGNORECASE)


def run(window: GuardWindow, pieces: list[str]) -> tuple[str, Verdict | None]:
    released = ""
    for piece in pieces:
        out, verdict = window.push(piece)
        released += out
        if verdict is not None:
            return released, verdict
    out, verdict = window.flush()
    return released + out, verdict


def expect(text: str) -> tuple[str, bool]:
    """(what a stream may release, blocked?) per the reference."""
    m = REFERENCE.search(text)
    return (text, False) if m is None else (text[: m.start()], True)


@pytest.mark.parametrize(("text", "blocked"), [
    ("Tell me about Project Nightingale.", True),
    ("PROJECT\n  NIGHTINGALE", True),
    ("project nightingales are birds", False),
    ("nightingale project", False),
    ("The projectnightingale repo", False),
    ("zeta-function", True),  # "-" is not a word character
    ("zetas and izeta", False),
    ("a blue falcon flew", True),
    ("", False),
])
def test_terms_one_shot(text: str, blocked: bool) -> None:
    verdict = TERMS.check(text)
    assert verdict.allowed is not blocked
    assert verdict.guardrail == "blocked-terms"
    if blocked:
        assert "nightingale" not in verdict.reason.lower() and "falcon" not in verdict.reason.lower()


SAMPLE = "We can't discuss Project  Nightingale or its budget."


def test_every_split_of_a_sample_releases_exactly_the_text_before_the_term() -> None:
    before = SAMPLE[: SAMPLE.index("Project")]
    for cut in range(len(SAMPLE) + 1):
        released, verdict = run(TERMS.window(), [SAMPLE[:cut], SAMPLE[cut:]])
        assert verdict is not None and not verdict.allowed
        assert released == before, cut
    for cut1 in range(0, len(SAMPLE) + 1, 3):
        for cut2 in range(cut1, len(SAMPLE) + 1, 2):
            released, _verdict = run(TERMS.window(), [SAMPLE[:cut1], SAMPLE[cut1:cut2], SAMPLE[cut2:]])
            assert released == before


def test_window_holds_only_while_a_term_can_still_match() -> None:
    window = TERMS.window()
    assert window.push("I like projects, project ") == ("I like projects, ", None)
    assert window.held_chars == len("project ")
    assert window.push("managers too. ") == ("project managers too. ", None)
    assert window.flush() == ("", None)


def test_after_a_violation_nothing_more_is_released() -> None:
    window = TERMS.window()
    out, verdict = window.push("About zeta and more")
    assert out == "About " and verdict is not None and not verdict.allowed
    assert window.push(" harmless text ") == ("", verdict)
    assert window.flush() == ("", verdict)


def test_regex_guard_one_shot_and_windowed() -> None:
    guard = TextGuard.compile("internal", "regex", [], [r"internal[- ]only", r"\bEMP-\d{5}\b"])
    assert guard.check("this doc is internal-only").allowed is False
    assert guard.check("ask EMP-12345 for access").allowed is False
    assert guard.check("EMP-1234 and internals only").allowed is True
    text = "Notes (internal only): none"
    for cut in range(len(text) + 1):
        released, verdict = run(guard.window(), [text[:cut], text[cut:]])
        assert released == "Notes (" and verdict is not None
    char_by_char = run(guard.window(), list("ticket EMP-00042 closed"))
    assert char_by_char[0] == "ticket "


def test_anchors_refer_to_the_edges_of_a_word() -> None:
    guard = TextGuard.compile("anchored", "regex", [], [r"^DROP$"])
    assert not guard.check("then DROP it").allowed
    assert guard.check("then DROPS it").allowed


def test_mask_markers_are_opaque_to_terms() -> None:
    guard = TextGuard.compile("t", "terms", ["email", "redacted", "leak"], [])
    masked = Redactor.compile(["pii"], []).redact("write to jane.doe@example.com").text
    assert masked == "write to [REDACTED:email]"
    assert guard.check(masked).allowed
    assert guard.check(f"{masked} email").allowed is False
    released, verdict = run(guard.window(), [masked, " leak now"])
    assert released == masked + " " and verdict is not None


def test_patterns_that_match_the_empty_string_never_block() -> None:
    guard = TextGuard.compile("empty", "regex", [], ["", "q*"])
    assert guard.check("any text at all").allowed
    assert run(guard.window(), ["any ", "text"]) == ("any text", None)


def test_compile_errors() -> None:
    with pytest.raises(ValueError, match="invalid regular expression"):
        TextGuard.compile("bad", "regex", [], ["(unclosed"])
    with pytest.raises(ValueError, match="nothing to check"):
        TextGuard.compile("empty", "terms", [], [])
    with pytest.raises(ValueError, match="empty"):
        TextGuard.compile("blank", "terms", ["  "], [])


VOCAB = ["project", "Project", "nightingale", "NIGHTINGALE", "nightingales", "blue", "Blue", "falcon",
         "zeta", "zetas", "bird", "the", "a", "(project", "nightingale.", "falcon,", "projects"]


@st.composite
def guard_texts(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=12))
    seps = draw(st.lists(st.sampled_from([" ", "  ", "\n", "\t", " \n"]), min_size=len(words),
                         max_size=len(words)))
    return "".join(w + s for w, s in zip(words, seps, strict=True))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(guard_texts(), st.lists(st.integers(1, 4), min_size=1, max_size=6))
def test_stream_releases_the_text_before_the_first_violation(text: str, sizes: list[int]) -> None:
    pieces, i, k = [], 0, 0
    while i < len(text):
        pieces.append(text[i : i + sizes[k % len(sizes)]])
        i, k = i + sizes[k % len(sizes)], k + 1
    allowed_text, blocked = expect(text)
    released, verdict = run(TERMS.window(), pieces)
    assert released == allowed_text
    assert (verdict is not None and not verdict.allowed) is blocked
    assert TERMS.check(text).allowed is not blocked
