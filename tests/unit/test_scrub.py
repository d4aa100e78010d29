"""core.scrub: our credentials out of upstream-derived text (CONTRACT §5.3), and nothing else changed."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from gateway.config import parse_config
from gateway.core.events import Failure, FailureKind
from gateway.core.scrub import (
    CUT,
    MAX_DEPTH,
    MAX_FIELD,
    MAX_NODES,
    MAX_TOTAL,
    Scrubber,
    scrub_failure,
    scrub_json,
    scrub_text,
)
from gateway.pipeline.safety import compile_safety, upstream_secrets

KEY = "sk-up-0123456789abcdefABCDEF"  # shaped like an OpenAI key, so the `secrets` rules would find it too
PLAIN_KEY = "plainprovidersecret"  # a configured key no built-in rule knows: only the exact match masks it
KEY_MARK, BEARER_MARK = "[REDACTED:provider_key]", "[REDACTED:bearer_token]"


def test_a_configured_key_is_masked_wherever_it_appears() -> None:
    out = scrub_text(f"Incorrect API key provided: {PLAIN_KEY}. Retry with {PLAIN_KEY}?", [PLAIN_KEY])
    assert out == f"Incorrect API key provided: {KEY_MARK}. Retry with {KEY_MARK}?"


def test_a_configured_key_inside_a_longer_token_is_masked_and_its_neighbours_stay() -> None:
    out = scrub_text(f"token=xx{PLAIN_KEY}yy;", [PLAIN_KEY])
    assert PLAIN_KEY not in out
    assert out == f"token=xx{KEY_MARK}yy;"


def test_of_two_keys_where_one_is_a_prefix_of_the_other_the_longer_is_masked_whole() -> None:
    short, long = "provkeyalpha", "provkeyalphaLONGERtail"
    # the short key first in the list: the order they are configured in must not matter
    for keys in ([short, long], [long, short]):
        out = scrub_text(f"got {long} and {short}", keys)
        assert out == f"got {KEY_MARK} and {KEY_MARK}", "no 'LONGERtail' left over from masking the prefix"


def test_empty_keys_are_ignored() -> None:
    assert scrub_text("nothing here", ["", ""]) == "nothing here"


@pytest.mark.parametrize("text", [
    "We saw Authorization: Bearer tok.QuietlyEchoed-9f8e7d6c5b4a",
    "bearer tok.QuietlyEchoed-9f8e7d6c5b4a was rejected",
    "header was 'Bearer tok.QuietlyEchoed-9f8e7d6c5b4a'",
])
def test_a_bearer_token_is_masked_but_the_word_stays(text: str) -> None:
    out = scrub_text(text, [])
    assert "tok.QuietlyEchoed" not in out
    assert "earer " + BEARER_MARK in out


@pytest.mark.parametrize("secret", [
    "sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv",
    "sk-ant-api03-AbCdEf0123456789GhIjKlMnOpQrStUvWxYz-0123456789",
    "sk-" + "A1b2C3d4E5" * 4,
])
def test_key_shaped_text_that_is_not_configured_is_masked_by_the_secrets_rules(secret: str) -> None:
    # another tenant's or an upstream-internal key is a secret too, whether or not we configured it
    out = scrub_text(f"Incorrect API key provided: {secret}.", [KEY])
    assert secret not in out
    assert out.startswith("Incorrect API key provided: [REDACTED:")


def test_a_configured_key_shaped_like_a_vendor_key_is_masked_as_ours() -> None:
    assert scrub_text(f"key {KEY} refused", [KEY]) == f"key {KEY_MARK} refused"


@pytest.mark.parametrize("text", [
    "The model failed to generate a response.",
    "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000",
    "",
    "日本語のエラーメッセージ",
])
def test_text_with_nothing_to_scrub_is_returned_as_the_same_object(text: str) -> None:
    assert scrub_text(text, [KEY, PLAIN_KEY]) is text


def test_a_failure_is_scrubbed_in_every_text_field() -> None:
    f = Failure(FailureKind.INBAND, f"Incorrect API key provided: {PLAIN_KEY}", 401, f"bad_{PLAIN_KEY}",
                f"Bearer {PLAIN_KEY}x", f"Bearer abc.def-{PLAIN_KEY}")
    out = scrub_failure(f, [PLAIN_KEY])
    for v in (out.message, out.code, out.type, out.param):
        assert v is not None and PLAIN_KEY not in v
    assert (out.kind, out.status) == (f.kind, f.status)
    assert out.message == f"Incorrect API key provided: {KEY_MARK}"


def test_a_clean_failure_is_returned_as_the_same_object() -> None:
    f = Failure(FailureKind.HTTP_5XX, "upstream overloaded", 503, "server_error", "api_error", None)
    assert scrub_failure(f, [KEY]) is f


def test_json_every_string_and_member_name_is_scrubbed_and_the_rest_shared() -> None:
    untouched: dict[str, Any] = {"n": 1, "ok": True, "none": None, "list": ["fine", 2.5]}
    obj: dict[str, Any] = {"type": "error", "untouched": untouched,
                           "error": {"message": f"bad key {PLAIN_KEY}", "param": [f"Bearer {PLAIN_KEY}z", 3],
                                     PLAIN_KEY: "as a member name"}}
    out = scrub_json(obj, [PLAIN_KEY])
    assert PLAIN_KEY not in repr(out)
    assert out["error"]["message"] == f"bad key {KEY_MARK}"
    assert out["error"][KEY_MARK] == "as a member name"
    assert out["untouched"] is untouched, "an unchanged part is shared, not copied"
    assert obj["error"]["message"] == f"bad key {PLAIN_KEY}", "the input is not modified"


def test_json_with_nothing_to_scrub_is_returned_as_the_same_object() -> None:
    obj = {"type": "error", "error": {"message": "Rate limit reached", "code": "rate_limit_exceeded",
                                      "param": None, "n": [1, 2, {"x": "y"}]}}
    assert scrub_json(obj, [KEY]) is obj


def test_json_nested_past_the_depth_limit_is_cut_not_a_crash() -> None:
    # as deep as orjson parses: walking it whole would overflow the stack, and orjson could not encode it
    deep = orjson.loads(b"[" * 1024 + b'"' + PLAIN_KEY.encode() + b'"' + b"]" * 1024)
    out = scrub_json(deep, [PLAIN_KEY])
    assert PLAIN_KEY not in orjson.dumps(out).decode()
    level = out
    for _ in range(MAX_DEPTH):
        assert isinstance(level, list) and len(level) == 1
        level = level[0]
    assert level is None


# ---- the compiled scrubber: every configured secret, a bounded cost

def test_every_configured_secret_is_gathered_from_the_config() -> None:
    cfg = parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "provKEYvalue1",
                             "headers": {"Ocp-Apim-Subscription-Key": "apimVALUE2", "X-Short": "v2"},
                             "proxy": "http://puser:p%40ssWORD3@127.0.0.1:3128"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}]}],
    }, env={"HTTPS_PROXY": "http://envuser:envPASS4@127.0.0.1:3129"})
    secrets = set(upstream_secrets(cfg))
    b64 = base64.b64encode(b"puser:p@ssWORD3").decode()
    assert {"provKEYvalue1", "apimVALUE2", b64, "puser:p@ssWORD3", "p@ssWORD3", "p%40ssWORD3", "envPASS4"} <= secrets
    s = compile_safety(cfg).scrubber
    assert "v2" not in s.secrets, "a value shorter than MIN_SECRET cannot be told from ordinary text"
    text = f"Proxy-Authorization: Basic {b64} for p@ssWORD3, key provKEYvalue1, apimVALUE2, envPASS4"
    out = s.text(text)
    for secret in ("provKEYvalue1", "apimVALUE2", b64, "p@ssWORD3", "envPASS4"):
        assert secret not in out


def test_an_authorization_basic_credential_is_masked_but_basic_in_prose_stays() -> None:
    s = Scrubber.compile([])
    assert "dXNlcjpwYXNz" not in s.text("proxy said Proxy-Authorization: Basic dXNlcjpwYXNz refused")
    assert s.text("Basic authentication is not supported") == "Basic authentication is not supported"


def test_a_huge_error_text_costs_a_bounded_scan_and_keeps_no_secret() -> None:
    s = Scrubber.compile([PLAIN_KEY])
    text = ("sk- " * 300_000) + PLAIN_KEY  # candidate-dense for the rules, the configured key at the far end
    out = s.text(text)
    assert PLAIN_KEY not in out and out.endswith(CUT)
    assert len(out) <= MAX_FIELD + len(CUT)
    f = s.failure(Failure(FailureKind.HTTP_4XX, text, 400, text, text, text))
    total = sum(len(v or "") for v in (f.message, f.code, f.type, f.param))
    assert total <= MAX_TOTAL + 4 * len(CUT), "one failure's texts through the rules are bounded in all"


def test_a_wide_error_object_is_walked_up_to_a_bounded_number_of_values() -> None:
    s = Scrubber.compile([PLAIN_KEY])
    wide = {"error": {"message": "x", "details": [f"{PLAIN_KEY} {i}" for i in range(3 * MAX_NODES)]}}
    out = s.json(wide)
    assert PLAIN_KEY not in orjson.dumps(out).decode()
    assert sum(1 for v in out["error"]["details"] if v) < MAX_NODES


@pytest.mark.parametrize("profile", [False, True])
def test_a_match_across_the_length_limit_is_masked_whole_not_cut_to_a_head(profile: bool) -> None:
    """The rules see past the limit before the cut: a token (the `secrets` rules) or an e-mail address (a
    model's `pii` profile) that crosses it leaves no head in clear."""
    from gateway.core.redact.window import Redactor

    s = Scrubber.compile([])
    secret = "ghp_" + "A1b2C3d4E5" * 4
    if profile:
        s, secret = s.with_profile(Redactor.compile(["pii"], [])), "jane.quiet@example.org"
    text = "x " * ((MAX_FIELD - 10) // 2) + secret + " and more " * 100
    out = s.text(text)
    assert out.endswith(CUT) and len(out) <= MAX_FIELD + len(CUT)
    assert secret[:8] not in out, "the head of the match before the limit is masked with the rest"


def test_a_profile_masks_every_text_of_a_failure_within_the_same_bound() -> None:
    from gateway.core.redact.window import Redactor

    s = Scrubber.compile([PLAIN_KEY]).with_profile(Redactor.compile(["pii"], [("codename", "Nightingale")]))
    f = s.failure(Failure(FailureKind.HTTP_4XX, f"to jane@example.org about Nightingale, {PLAIN_KEY}", 400,
                          "Nightingale", "t", "jane@example.org"))
    assert (f.message, f.code, f.param) == (f"to [REDACTED:email] about [REDACTED:codename], {KEY_MARK}",
                                           "[REDACTED:codename]", "[REDACTED:email]")
    assert s.with_profile(None) is s
    text = "jane@example.org " * 100_000
    f = s.failure(Failure(FailureKind.HTTP_4XX, text, 400, text, text, text))
    assert "jane@" not in repr(f)
    assert sum(len(v or "") for v in (f.message, f.code, f.type, f.param)) <= MAX_TOTAL + 4 * len(CUT)
