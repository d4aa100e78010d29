"""Redaction in every script, and at the forced cuts of long runs (CONTRACT §5.1): characters no rule
can match end a run, so text without spaces streams; a secret across a cut is masked whole."""

from __future__ import annotations

import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.redact import breaks
from gateway.core.redact.breaks import Gaps
from gateway.core.redact.engine import CUT_KEEP, RUN_LIMIT, SEG_LIMIT, SEG_RUNS
from gateway.core.redact.window import Redactor
from tests.unit.test_redact_window import REDACTOR, SECRETS, SEPARATORS, WORDS, forced_slow, stream

_MARKER = re.compile(r"\[REDACTED:[^\]]+\]")
# Prose in scripts without spaces between words, and others that mix into answers.
SCRIPT_WORDS = ["日本語の文章です。", "東京都は晴れ、", "这是一个中文句子。", "请把密钥发给我：", "한국어문장입니다",
                "ภาษาไทยไม่มีช่องว่าง", "Привет,мир", "مرحبا", "🙂", "ＡＰＩキー", "「設定」", "naïve", "café—", "…"]
_SCRIPT_CHARS = {ch for w in SCRIPT_WORDS for ch in w if not ch.isascii()}


def _glue_ok(left: str, right: str) -> bool:
    """Two pieces may touch without a space when a character no rule can match is between them."""
    return left[-1] in _SCRIPT_CHARS or right[0] in _SCRIPT_CHARS


@st.composite
def mixed_texts(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    """(text in a mix of scripts with secrets in it, the expected redaction, the secret values)."""
    parts: list[tuple[str, str]] = []
    secrets: list[str] = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.integers(0, 2)) == 0 and (not parts or parts[-1][0] == parts[-1][1]):
            rule, value = draw(st.sampled_from(SECRETS))
            parts.append((value, f"[REDACTED:{rule}]"))
            secrets.append(value)
        else:
            word = draw(st.sampled_from(SCRIPT_WORDS + WORDS))
            parts.append((word, word))
    text, expected = "", ""
    for i, (raw, masked) in enumerate(parts):
        glue = i + 1 < len(parts) and _glue_ok(raw, parts[i + 1][0])
        sep = draw(st.sampled_from(["", *SEPARATORS] if glue else SEPARATORS))
        text, expected = text + raw + sep, expected + masked + sep
    return text, expected, secrets


SPLITS = st.one_of(st.lists(st.integers(1, 3), min_size=1, max_size=8),
                   st.lists(st.integers(1, 40), min_size=1, max_size=8))


def _assert_no_prefix_leaks(pieces: list[str], secrets: list[str]) -> None:
    for piece in pieces:
        visible = _MARKER.sub("", piece)
        for value in secrets:
            assert value[:8] not in visible, f"{value[:8]!r} released early in {piece!r}"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_texts(), SPLITS)
def test_any_mix_of_scripts_streams_like_one_shot_and_never_leaks(case: tuple[str, str, list[str]],
                                                                   sizes: list[int]) -> None:
    text, expected, secrets = case
    assert REDACTOR.redact(text).text == expected
    pieces, _most = stream(REDACTOR, text, sizes)
    assert "".join(pieces) == expected
    assert forced_slow(REDACTOR).redact(text).text == expected
    _assert_no_prefix_leaks(pieces, secrets)


_FILLER = 'abcdefgh":,{}[]'  # minified JSON without a secret or a gap: one long run


@st.composite
def secret_across_a_cut(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    """A secret that starts before and ends after character 4,096 or 8,192 of one long run."""
    rule, value = draw(st.sampled_from(SECRETS))
    boundary = draw(st.sampled_from([RUN_LIMIT, SEG_LIMIT]))
    cut = draw(st.integers(1, max(1, min(len(value), CUT_KEEP) - 1)))
    rnd = random.Random(draw(st.integers(0, 2**16)))
    before = "".join(rnd.choice(_FILLER) for _ in range(boundary - cut - 2)) + ':"'
    after = '"' + "".join(rnd.choice(_FILLER) for _ in range(draw(st.integers(0, 300))))
    if rule == "private_key":  # a block without its END line ends with its last whole line
        after = "\n" + after
    lead = draw(st.sampled_from(["", "日本語の説明：", "see "]))
    return (lead + before + value + after, lead + before + f"[REDACTED:{rule}]" + after, [value])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret_across_a_cut(), SPLITS)
def test_a_secret_across_a_forced_cut_is_masked_whole(case: tuple[str, str, list[str]], sizes: list[int]) -> None:
    text, expected, secrets = case
    assert REDACTOR.redact(text).text == expected
    assert forced_slow(REDACTOR).redact(text).text == expected
    pieces, _most = stream(REDACTOR, text, sizes)
    assert "".join(pieces) == expected
    _assert_no_prefix_leaks(pieces, secrets)


def test_a_key_in_a_long_line_of_json_is_masked_whole_at_every_offset() -> None:
    key = "ghp_k3ZdjYYCfrpx8IH5vbljomsx29WuFAKEjczU"
    for start in range(RUN_LIMIT - len(key), RUN_LIMIT + 1):
        text = "x" * (start - 1) + "=" + key + "&y=1"
        expected = "x" * (start - 1) + "=[REDACTED:github_token]&y=1"
        assert REDACTOR.redact(text).text == expected
        assert "".join(stream(REDACTOR, text, [7])[0]) == expected


def test_prose_in_2_character_deltas_is_released_delta_by_delta() -> None:
    for prose in ("東京の天気は晴れ。明日は雨が降るでしょう。", "今天北京天气很好，我们去公园散步吧。",
                  "เราจะไปตลาดกันพรุ่งนี้", "오늘은날씨가좋습니다"):
        window = REDACTOR.window()
        for i in range(0, len(prose), 2):
            assert window.push(prose[i:i + 2]) == prose[i:i + 2]


def test_a_secret_glued_to_japanese_is_masked_and_the_text_around_it_streams() -> None:
    key = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
    text = f"キーは{key}です。電話090-1234-5678まで"
    window = REDACTOR.window()
    assert window.push("キーは") == "キーは"
    assert window.push(key[:20]) == ""
    assert window.push(key[20:] + "で") == "[REDACTED:openai_key]で"
    assert window.push("す。電話090-1234-5678まで") + window.flush() == "す。電話[REDACTED:phone]まで"
    assert REDACTOR.redact(text).text == "キーは[REDACTED:openai_key]です。電話[REDACTED:phone]まで"


def test_the_breaks_come_from_the_rules() -> None:
    gaps = REDACTOR.spec.gaps
    assert gaps.breaks
    for ch in "日本語の漢字かなカナ中文한국어ไทย。、「」ＡＰＩ🙂éПр—":
        assert gaps.is_gap(ch), ch
    # ASCII stays in runs; "ſ" and the Kelvin sign match "s" and "k" of the case-insensitive rules.
    for ch in "aZ09-_.,;!?@#/\\'\"ſ\u212a":
        assert not gaps.is_gap(ch), ch
    assert not Gaps.build([re.compile(r"secret.+end")], RUN_LIMIT).breaks  # "." matches anything


def test_case_insensitive_ascii_tests_find_on_the_ascii_partners_what_the_full_scan_finds() -> None:
    """breaks._matched tries `(?i:k)` on the few characters outside ASCII that case-match some ASCII
    character, not on all 1.1M code points: the same ranges, for every ASCII character and some classes."""
    non_ascii = breaks._non_ascii()
    for test in [f"(?i:{re.escape(chr(c))})" for c in range(128)] + ["(?i:[a-z])", "(?i:[_\\-])", "(?i:[0-9A-F])"]:
        full = {i + 0x80 for m in re.finditer(test, non_ascii) for i in range(m.start(), m.end())}
        folded = {c for a, b in breaks._matched(breaks._FOLDED + test) for c in range(a, b)}
        assert folded == full, test
    assert "\u212a" in breaks._ascii_partners()[0] and "\u017f" in breaks._ascii_partners()[0]


def test_a_custom_rule_that_can_match_japanese_keeps_those_characters_in_runs() -> None:
    redactor = Redactor.compile(["secrets"], [("codename", "極秘計画[0-9]*")])
    gaps = redactor.spec.gaps
    assert not gaps.is_gap("極") and not gaps.is_gap("画") and gaps.is_gap("の")
    text = "これは極秘計画42の資料です"
    expected = "これは[REDACTED:codename]の資料です"
    assert redactor.redact(text).text == expected
    for sizes in ([1], [2], [3, 1]):
        assert "".join(stream(redactor, text, sizes)[0]) == expected
    window = redactor.window()
    assert window.push("これは極秘") == "これは"  # "極秘" could still become the codename
    whole = Redactor.compile(["secrets"], [("line", r"極秘.*終")])  # "." matches kana too: no breaks
    assert whole.window().push("日本語") == ""


def test_a_truncated_pgp_block_does_not_swallow_the_prose_after_it() -> None:
    block = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
             "lTFjQjnKmQACiU3/dUf1UKXW4j55hjyMPwf1abSmTg4FMX/irKVrFEE6qmzsXjp+\n"
             "ZA02BvmYJGoNtQ8vZHPltuJQuxz/FO4qVDAvp++Gv3cIT6q5YNZf/FRxKxsAFEcU")
    headers = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\nComment: test\n\n" + block[40:]
    for sep in ("\n", " \n "):
        text = block + sep + "here: the model said"
        assert REDACTOR.redact(text).text == "[REDACTED:private_key]" + sep + "here: the model said"
    assert REDACTOR.redact(headers + "\nhere: x").text == "[REDACTED:private_key]\nhere: x"


def test_a_bearer_token_is_masked_whole_where_a_segment_reaches_its_limits() -> None:
    # Each "Bearer" starts a candidate that keeps the segment open: it reaches SEG_RUNS runs (short
    # gaps) or SEG_LIMIT characters (long gaps) just before or after the real token.
    token = "abcdef0123456789abcdef"
    for gap, around in ((" ", SEG_RUNS), (" " * 60, SEG_LIMIT // 66)):
        for n in range(around - 3, around + 3):
            text = ("Bearer" + gap) * n + "Bearer " + token + " end"
            expected = ("Bearer" + gap) * n + "Bearer [REDACTED:bearer_token] end"
            assert REDACTOR.redact(text).text == expected, (len(gap), n)
            pieces, _most = stream(REDACTOR, text, [5])
            assert "".join(pieces) == expected
            _assert_no_prefix_leaks(pieces, [token])


def test_a_match_across_the_kept_start_moves_the_cut_before_it() -> None:
    # At the cut, "Yabc..." could still become `tail`; it starts on the last character of a whole
    # `code` match, which a cut at "Y" would split: the cut goes before the "X".
    redactor = Redactor.compile([], [("code", r"X[0-9]{10}Y"), ("tail", r"Y[a-z]{20,}Q")])
    text = "-" * (RUN_LIMIT - 20) + "X0123456789Y" + "abcdefghij" * 3 + "Q end"
    expected = "-" * (RUN_LIMIT - 20) + "[REDACTED:code]" + "abcdefghij" * 3 + "Q end"
    assert redactor.redact(text).text == expected
    assert "".join(stream(redactor, text, [3])[0]) == expected
