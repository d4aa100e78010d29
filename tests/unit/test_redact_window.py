"""The streaming redaction window: stream == one-shot, nothing of a secret leaks early, held text
stays small and bounded (CONTRACT §5.1, DESIGN "The redaction window")."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.redact.engine import MAX_GAP, RUN_LIMIT, SEG_RUNS
from gateway.core.redact.window import MAX_HELD_CHARS, RedactionWindow, Redactor
from tests.unit.redaction_corpus import positives

REDACTOR = Redactor.compile(["secrets", "pii"], [("ticket-id", r"ACME-[0-9]{6}")])
# Rules that mask a value on its own, without context words around it.
_STANDALONE = {"openai_key", "anthropic_key", "aws_access_key_id", "github_token", "slack_token",
               "slack_webhook", "google_api_key", "jwt", "private_key", "email", "phone",
               "card_number", "iban"}
SECRETS = sorted({(rule, value) for case in positives() for rule, value in case.secrets
                  if rule in _STANDALONE} | {("ticket-id", "ACME-004211")})
WORDS = ["the", "model", "said", "Hello,", "token", "key", "is", "here:", "and", "(see", "below)",
         "Redaction", "works;", "quietly.", "naïve", "日本語の文章です", "a", "x", "over", "there!"]
_MARKER = re.compile(r"\[REDACTED:[^\]]+\]")
SEPARATORS = [" ", " ", " ", "  ", "\n", "\n\n", "\t", " \n "]


def forced_slow(redactor: Redactor) -> Redactor:
    """The same rules with the fast path disabled: every unit goes through the segment machine."""
    spec = dataclasses.replace(redactor.spec, trigger=re.compile(r"[\s\S]"), residual=None)
    return dataclasses.replace(redactor, spec=spec)


def stream(redactor: Redactor, text: str, sizes: list[int]) -> tuple[list[str], int]:
    """Push `text` in pieces of the given sizes (cycled); return the released pieces and max held."""
    window: RedactionWindow = redactor.window()
    pieces: list[str] = []
    i, k, most = 0, 0, 0
    while i < len(text):
        size = sizes[k % len(sizes)]
        pieces.append(window.push(text[i : i + size]))
        most = max(most, window.held_chars)
        assert window.held_chars <= MAX_HELD_CHARS
        i, k = i + size, k + 1
    pieces.append(window.flush())
    assert window.held_chars == 0
    return pieces, most


@st.composite
def texts_with_secrets(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    """(input text, the expected redaction, the secret values in it)."""
    parts: list[tuple[str, str]] = []
    secrets: list[str] = []
    for _ in range(draw(st.integers(1, 10))):
        # Two values with only a space between them can read as one ("+44 20 7946 0958 2024"):
        # a word always separates them, as in text people write.
        if draw(st.integers(0, 2)) == 0 and (not parts or parts[-1][0] == parts[-1][1]):
            rule, value = draw(st.sampled_from(SECRETS))
            parts.append((value, f"[REDACTED:{rule}]"))
            secrets.append(value)
        else:
            word = draw(st.sampled_from(WORDS))
            parts.append((word, word))
    text, expected = "", ""
    for raw, masked in parts:
        sep = draw(st.sampled_from(SEPARATORS))
        text, expected = text + raw + sep, expected + masked + sep
    return text, expected, secrets


SPLITS = st.one_of(st.lists(st.integers(1, 3), min_size=1, max_size=8),
                   st.lists(st.integers(1, 40), min_size=1, max_size=8))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts_with_secrets(), SPLITS)
def test_stream_equals_one_shot_and_never_leaks_a_prefix(case: tuple[str, str, list[str]],
                                                         sizes: list[int]) -> None:
    text, expected, secrets = case
    one_shot = REDACTOR.redact(text)
    assert one_shot.text == expected  # independent reference: the text with each value replaced
    pieces, _most = stream(REDACTOR, text, sizes)
    assert "".join(pieces) == one_shot.text
    for piece in pieces:
        visible = _MARKER.sub("", piece)  # "[REDACTED:github_token]" itself leaks nothing
        for value in secrets:
            assert value[:6] not in visible, f"{value[:6]!r} released early in {piece!r}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts_with_secrets())
def test_fast_path_finds_what_the_segment_machine_finds(case: tuple[str, str, list[str]]) -> None:
    text, _expected, _secrets = case
    assert REDACTOR.redact(text).text == forced_slow(REDACTOR).redact(text).text


@pytest.mark.parametrize("case", positives(), ids=lambda c: c.title)
def test_corpus_positive_char_by_char_with_the_fast_path_off(case) -> None:  # type: ignore[no-untyped-def]
    slow = forced_slow(REDACTOR)
    assert "".join(stream(slow, case.text, [1])[0]) == case.expected


def test_counts_are_reported_once() -> None:
    window = REDACTOR.window()
    out = window.push("mail jane.doe@example.com and ACME-123456 ")
    out += window.push("then 4111 1111 1111 1111 ok") + window.flush()
    assert out == "mail [REDACTED:email] and [REDACTED:ticket-id] then [REDACTED:card_number] ok"
    assert window.take_counts() == {"email": 1, "ticket-id": 1, "card_number": 1}
    assert window.take_counts() == {}
    assert dict(REDACTOR.redact("a@b.example b@c.example").counts) == {"email": 2}


def test_prose_is_held_one_unfinished_word_at_most() -> None:
    window = REDACTOR.window()
    assert window.push("Hello wor") == "Hello "
    assert window.held_chars == 3
    assert window.push("ld, how") == "world, "
    assert window.push(" are") == "how "
    assert window.flush() == "are"


def test_a_token_split_anywhere_is_masked_whole() -> None:
    key = "ghp_k3ZdjYYCfrpx8IH5vbljomsx29WuFAKEjczU"
    text = f"token {key} done"
    for cut in range(len(text) + 1):
        window = REDACTOR.window()
        first = window.push(text[:cut])
        assert "ghp_k3" not in first
        assert first + window.push(text[cut:]) + window.flush() == "token [REDACTED:github_token] done"


def test_multi_word_prefix_is_held_only_while_it_can_still_match() -> None:
    window = REDACTOR.window()
    assert window.push("Authorization: Bearer ") == "Authorization: "
    assert window.held_chars == len("Bearer ")
    assert window.push("abcdef0123456789abcdef ") == "Bearer [REDACTED:bearer_token] "
    assert window.push("Bearer of") == ""  # "of" might still be the start of a token
    assert window.push(" news ") == "Bearer of news "
    assert window.push("IBAN DE89 3704 ") == "IBAN "
    assert window.push("0044 0532 0130 00 paid") == ""
    assert window.flush() == "[REDACTED:iban] paid"


def test_private_key_block_is_held_until_its_end_line() -> None:
    case = next(c for c in positives() if c.title.startswith("private_key: RSA key block"))
    window = REDACTOR.window()
    released = ""
    for ch in case.text:
        released += window.push(ch)
        assert "UvImZa" not in released
    assert released + window.flush() == case.expected


def test_a_long_run_without_whitespace_is_cut_at_the_limit() -> None:
    blob = "".join(random.Random(3).choice("abcdefghij") for _ in range(3 * RUN_LIMIT + 17))
    text = f"start {blob} mail jane.doe@example.com end"
    pieces, most = stream(REDACTOR, text, [7])
    assert "".join(pieces) == REDACTOR.redact(text).text == text.replace(
        "jane.doe@example.com", "[REDACTED:email]")
    assert most <= RUN_LIMIT + 7
    assert "".join(stream(forced_slow(REDACTOR), text, [5000])[0]) == REDACTOR.redact(text).text


def test_japanese_text_streams_as_it_comes() -> None:
    # No rule of secrets or pii can match a kana or a kanji: each ends a run (see redact_breaks).
    line = "日本語の文章には空白がありません。" * 40 + "\n"
    window = REDACTOR.window()
    for i in range(0, len(line) - 1, 2):
        assert window.push(line[i:i + 2]) == line[i:i + 2]
        assert window.held_chars == 0
    assert window.push("\n") + window.flush() == "\n"


def test_held_text_is_bounded_by_the_segment_limit() -> None:
    # Digit groups that each keep a phone/card candidate alive, for a long time.
    text = "+1 " + "22 " * 6000
    _pieces, most = stream(REDACTOR, text, [4])
    assert most <= MAX_HELD_CHARS
    assert REDACTOR.redact(text).text == "".join(stream(REDACTOR, text, [97])[0])


@pytest.mark.parametrize("unit", ["Bearer", "4111", "DE89", "+44", "-----BEGIN", "aws_secret_access_key ="])
def test_overlapping_candidates_stay_bounded_and_exact(unit: str) -> None:
    # Every word starts a new multi-word candidate before the previous one dies.
    text = " ".join([unit] * 3000) + " tail"
    pieces, most = stream(REDACTOR, text, [5])
    assert most <= MAX_HELD_CHARS
    assert "".join(pieces) == REDACTOR.redact(text).text == forced_slow(REDACTOR).redact(text).text


def test_a_segment_holds_at_most_seg_runs_runs() -> None:
    redactor = Redactor.compile([], [("line", r"BEGIN[a-z ]*END")])  # stays open word after word
    text = "BEGIN " + "a " * (SEG_RUNS + 10) + "END"
    window = redactor.window()
    released = window.push(text[:-3])
    assert released.startswith("BEGIN a a") and window.held_chars < 2 * 20
    assert released + window.push("END") + window.flush() == redactor.redact(text).text
    short = "BEGIN " + "a " * 10 + "END"
    assert redactor.redact(short).text == "[REDACTED:line]"


def test_a_long_gap_ends_a_multi_word_candidate() -> None:
    window = REDACTOR.window()
    assert window.push("Bearer") == ""
    assert window.push(" " * (MAX_GAP + 1)) == "Bearer" + " " * (MAX_GAP + 1)
    assert window.push("abcdef0123456789abcdef ") + window.flush() == "abcdef0123456789abcdef "


def test_no_rules_pass_everything_through_at_once() -> None:
    window = Redactor.compile([], []).window()
    assert window.push("sk-proj-unfinished") == "sk-proj-unfinished"
    assert window.held_chars == 0


def test_custom_rule_spanning_words_and_anchors() -> None:
    redactor = Redactor.compile([], [("project", r"(?i)project\s+[a-z]+ling"), ("whole", r"^X-[0-9]+$")])
    text = "About Project  Starling: see X-42 and xX-42 or X-42b."
    expected = "About [REDACTED:project]: see [REDACTED:whole] and xX-42 or X-42b."
    assert redactor.redact(text).text == expected
    for sizes in ([1], [2], [3, 1], [9]):
        assert "".join(stream(redactor, text, sizes)[0]) == expected
    assert "".join(stream(forced_slow(redactor), text, [1])[0]) == expected


def _pushes(redactor: Redactor, text: str, sizes: list[int]) -> list[tuple[str, int]]:
    """(released piece, held chars) after every push of `text` in pieces of `sizes`, then flush."""
    window = redactor.window()
    steps: list[tuple[str, int]] = []
    i, k = 0, 0
    while i < len(text):
        size = sizes[k % len(sizes)]
        steps.append((window.push(text[i : i + size]), window.held_chars))
        i, k = i + size, k + 1
    return [*steps, (window.flush(), window.held_chars)]


# Words that start, end or almost make a hint (see BuiltinRule.hint), so the per-delta path meets
# hits, near misses and hits cut across deltas.
NEAR_MISSES = ["sk-", "ask-me", "sk-ant-api03", "aws", "laws", "AWS_", "secret", "ſecret", "cret",
               "ghp_", "snake_case", "github_pat_", "eyJ", "JSON", "eyJhbGciOi.eyJzdWIi.x",
               "https://hooks.slack.com/", "hooks.slack.com/", "-----BEGIN", "BEGIN", "(555)", "555)",
               "Bearer", "bear", "+44", "DE89", "x@y.example", "(see", "2024-06-11", "the", "river"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(texts_with_secrets().map(lambda case: case[0]),
                 st.lists(st.tuples(st.sampled_from(NEAR_MISSES), st.sampled_from(SEPARATORS)),
                          min_size=1, max_size=12).map(lambda ws: "".join(w + s for w, s in ws))),
       SPLITS)
def test_each_push_releases_and_holds_what_the_segment_machine_does(text: str, sizes: list[int]) -> None:
    """Not only the whole: the per-delta path releases the same piece and holds the same text
    after every delta as the segment machine alone."""
    assert _pushes(REDACTOR, text, sizes) == _pushes(forced_slow(REDACTOR), text, sizes)


def pushed_in_groups(deltas: list[str], groups: list[int]) -> str:
    """`deltas` through `push_together` in groups of `groups`' sizes (cycled), checked after every group
    against pushing them one by one: the same released, the same held. The whole text released."""
    together, alone = REDACTOR.window(), REDACTOR.window()
    i, k = 0, 0
    released_together, released_alone = "", ""
    while i < len(deltas):
        group = deltas[i:i + groups[k % len(groups)]]
        pieces = together.push_together(group)
        assert len(pieces) == len(group)
        released_together += "".join(pieces)
        released_alone += "".join(alone.push(d) for d in group)
        assert released_together == released_alone
        assert together.held_chars == alone.held_chars
        i, k = i + len(group), k + 1
    return released_together + together.flush()


def _deltas(text: str, sizes: list[int]) -> list[str]:
    out, i, k = [], 0, 0
    while i < len(text):
        out.append(text[i:i + sizes[k % len(sizes)]])
        i, k = i + sizes[k % len(sizes)], k + 1
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(texts_with_secrets().map(lambda case: case[0]),
                 st.lists(st.tuples(st.sampled_from(NEAR_MISSES + WORDS), st.sampled_from(SEPARATORS)),
                          min_size=1, max_size=12).map(lambda ws: "".join(w + s for w, s in ws))),
       SPLITS, st.lists(st.integers(1, 6), min_size=1, max_size=5))
def test_deltas_pushed_together_release_the_same_text_never_later(text: str, sizes: list[int],
                                                                    groups: list[int]) -> None:
    """A read's deltas through `push_together`: after every group the window has released exactly
    what pushing them one by one releases (and holds the same), piece i comes with delta i or
    earlier, and a piece differs from its delta only where the window held or masked."""
    assert pushed_in_groups(_deltas(text, sizes), groups) == REDACTOR.redact(text).text


def test_a_read_of_prose_goes_out_delta_for_delta_but_for_the_last_unfinished_word() -> None:
    window = REDACTOR.window()
    assert window.push_together(["The riv", "er flows", " quietly ", "on and o"]) == \
        ["The riv", "er flows", " quietly ", "on and "]
    assert window.push_together(["n."]) == [""]  # "on." is still one unfinished word
    assert window.push_together([" Then"]) == ["on. "]


def test_a_read_with_a_secret_in_it_is_pushed_one_delta_at_a_time() -> None:
    key = "ghp_" + "A1b2C3d4E5" * 4
    deltas = ["my key ", key[:10], key[10:], " is gone"]
    together, alone = REDACTOR.window(), REDACTOR.window()
    assert together.push_together(deltas) == [alone.push(d) for d in deltas]


def test_the_same_rules_reuse_one_compiled_profile_and_other_rules_get_their_own() -> None:
    """A reload that keeps a profile's rules compiles nothing (the profile is immutable, so sharing it is
    safe); a change of rule sets or of a custom pattern compiles anew."""
    first = Redactor.compile(["secrets", "pii"], [("ticket", r"TCK-\d{6}")])
    assert Redactor.compile(("secrets", "pii"), [("ticket", r"TCK-\d{6}")]) is first
    assert Redactor.compile(["secrets"], [("ticket", r"TCK-\d{6}")]) is not first
    assert Redactor.compile(["secrets", "pii"], [("ticket", r"TCK-\d{7}")]) is not first
