"""The credentials the request signers get at run time, in the scrubber (docs/extensions.md, "secrets in
upstream texts"): a set joins when a signer takes it, a replaced or released one stays for its `keep_s`
and then leaves, a current one leaves `keep_s` after its expiry, and the scrubber masks what is there at
each use without being compiled again. `core.minted` takes time as `now`; `upstream.signing`'s
`MintedCredentials` adds the clock and the timer, checked on a real event loop."""

from __future__ import annotations

import asyncio
import time

from gateway.config import parse_config
from gateway.core.minted import MAX_RETIRED, MintedSecrets
from gateway.core.scrub import CUT, MAX_FIELD, Scrubber
from gateway.pipeline.safety import compile_safety
from gateway.upstream.signing import KEEP_MARGIN_S, MintedCredentials, keep_s

MARK = "[REDACTED:provider_key]"
OLD = ("ASIAOLDKEY", "old-secret-value", "old-session-token")
NEW = ("ASIANEWKEY", "new-secret-value", "new-session-token")


def test_a_replaced_set_stays_for_keep_s_then_leaves() -> None:
    m = MintedSecrets()
    m.hold("aws", OLD, now=0, keep_s=90)
    assert set(m.secrets) == set(OLD) and m.next_deadline() is None  # current, no expiry: stays
    m.hold("aws", NEW, now=100, keep_s=90)
    assert set(m.secrets) == {*OLD, *NEW}, "a request signed with the old set may still be answered"
    assert m.next_deadline() == 190
    m.prune(189.9)
    assert set(m.secrets) == {*OLD, *NEW}
    m.prune(190)
    assert set(m.secrets) == set(NEW) and m.next_deadline() is None


def test_a_current_token_leaves_keep_s_after_its_expiry() -> None:
    m = MintedSecrets()
    m.hold("vertex", ["ya29.token-one"], now=0, keep_s=60, expires_at=3600)
    assert m.next_deadline() == 3660
    m.prune(3659)
    assert m.secrets == ("ya29.token-one",)
    m.prune(3660)  # expired and never replaced (the token endpoint is down): nothing signs with it now
    assert not m.secrets and m.next_deadline() is None


def test_a_replaced_token_leaves_at_the_sooner_of_its_expiry_and_keep_s() -> None:
    m = MintedSecrets()
    m.hold("vertex", ["ya29.token-one"], now=0, keep_s=60, expires_at=100)
    m.hold("vertex", ["ya29.token-two"], now=90, keep_s=60, expires_at=3690)
    assert m.next_deadline() == 150
    m.hold("vertex", ["ya29.token-three"], now=3000, keep_s=60, expires_at=6600)
    m.prune(3000)
    assert set(m.secrets) == {"ya29.token-two", "ya29.token-three"}  # token-one went at 160


def test_the_same_set_seen_again_changes_nothing_but_its_deadline() -> None:
    m = MintedSecrets()
    m.hold("vertex", ["ya29.same-token"], now=0, keep_s=60, expires_at=100)
    before = m.secrets
    m.hold("vertex", ["ya29.same-token"], now=50, keep_s=60, expires_at=500)
    assert m.secrets is before and m.next_deadline() == 560


def test_a_released_owner_stays_for_keep_s_and_owners_are_apart() -> None:
    m = MintedSecrets()
    m.hold("old-signer", OLD, now=0, keep_s=30)
    m.hold("new-signer", NEW, now=5, keep_s=30)  # a reload: the new signer starts before the old closes
    m.release("old-signer", now=10, keep_s=30)
    assert set(m.secrets) == {*OLD, *NEW}
    m.prune(40)
    assert set(m.secrets) == set(NEW)
    m.release("gone", now=50, keep_s=30)  # an owner it never saw: nothing to do
    assert set(m.secrets) == set(NEW)


def test_retired_sets_are_bounded_oldest_out_first() -> None:
    m = MintedSecrets()
    for i in range(MAX_RETIRED + 10):
        m.hold("aws", [f"session-token-{i:04d}"], now=i, keep_s=10_000)
    assert len(m.secrets) == MAX_RETIRED + 1  # the current set and the newest replaced ones
    assert "session-token-0000" not in m.secrets and f"session-token-{MAX_RETIRED + 9:04d}" in m.secrets


def test_values_too_short_to_tell_from_text_are_not_masked_and_longer_come_first() -> None:
    m = MintedSecrets()
    m.hold("aws", ["abc", "token", "token-and-more"], now=0, keep_s=1)
    assert m.secrets == ("token-and-more", "token")


def test_the_scrubber_masks_what_the_signers_hold_at_each_use_without_a_new_compile() -> None:
    minted = MintedSecrets()
    s = Scrubber.compile(["configured-provider-key"], minted)
    text = "Credential=ASIANEWKEY/20260101; X-Amz-Security-Token: new-session-token; key configured-provider-key"
    assert s.text(text) == f"Credential=ASIANEWKEY/20260101; X-Amz-Security-Token: new-session-token; key {MARK}"
    minted.hold("aws", NEW, now=0, keep_s=1)
    assert s.text(text) == f"Credential={MARK}/20260101; X-Amz-Security-Token: {MARK}; key {MARK}"
    minted.prune(1e9)
    minted.release("aws", now=1e9, keep_s=0)
    minted.prune(1e9)
    assert "new-session-token" in s.text(text), "a set gone from the signers is no longer looked for"


def test_a_token_is_masked_whole_even_when_a_configured_value_is_inside_it() -> None:
    # a short header value ("2024") inside a token would cut it, leaving the rest in clear, if the
    # configured values went first
    minted = MintedSecrets()
    minted.hold("vertex", ["ya29.a0Af2024xYzQ"], now=0, keep_s=1)
    s = Scrubber.compile(["2024"], minted)
    assert s.text("token ya29.a0Af2024xYzQ, version 2024") == f"token {MARK}, version {MARK}"


def test_compile_safety_shares_the_process_set() -> None:
    provider = {"type": "openai", "base_url": "http://up.test/v1", "api_key": "sk-configured-0001"}
    cfg = parse_config({"auth": {"allow_unauthenticated": True}, "providers": {"p": provider},
                        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}]}]}, env={})
    minted = MintedSecrets()
    scrubber = compile_safety(cfg, minted).scrubber
    minted.hold("vertex", ["ya29.shared-token"], now=0, keep_s=1)
    assert scrubber.text("ya29.shared-token and sk-configured-0001") == f"{MARK} and {MARK}"
    assert compile_safety(cfg).scrubber.text("ya29.shared-token") == "ya29.shared-token"


def test_keep_s_is_the_attempts_deadline_and_a_margin() -> None:
    cfg = parse_config({"auth": {"allow_unauthenticated": True},
                        "providers": {"p": {"type": "openai", "base_url": "http://up.test/v1", "api_key": "k",
                                              "timeouts": {"total_s": 42}}},
                        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}]}]}, env={})
    assert keep_s(cfg.providers["p"]) == 42 + KEEP_MARGIN_S


async def _gone(m: MintedCredentials, value: str, deadline_s: float) -> float:
    start = time.monotonic()
    async with asyncio.timeout(deadline_s):
        while value in m.secrets.secrets:  # noqa: ASYNC110 - the timer inside is what is under test
            await asyncio.sleep(0.005)
    return time.monotonic() - start


async def test_minted_credentials_drop_a_replaced_token_on_their_own_timer() -> None:
    m = MintedCredentials()
    m.hold("vertex", ["ya29.first/token+x="], keep_s=0.2)
    # the percent-encoded form too: a token quoted in an echoed URL
    assert set(m.secrets.secrets) == {"ya29.first/token+x=", "ya29.first%2Ftoken%2Bx%3D"}
    m.hold("vertex", ["ya29.second"], keep_s=0.2)
    assert "ya29.first/token+x=" in m.secrets.secrets
    await _gone(m, "ya29.first/token+x=", 5.0)  # no refresh, no request: the timer alone removes it
    assert m.secrets.secrets == ("ya29.second",)
    m.release("vertex", keep_s=0.05)
    await _gone(m, "ya29.second", 5.0)
    assert not m.secrets.secrets


async def test_a_closed_registry_arms_no_timer() -> None:
    m = MintedCredentials()
    m.close()
    m.hold("aws", OLD, keep_s=0.01)
    m.hold("aws", NEW, keep_s=0.01)
    assert m._timer is None  # the app closed its upstream: nothing left behind on the loop


def test_a_cut_never_splits_a_secret_and_a_long_text_is_masked_only_where_it_is_kept() -> None:
    minted = MintedSecrets()
    token = "IQoJsessionTOKENnotRuleShaped/0123456789+abcdef=="
    minted.hold("aws", [token], now=0, keep_s=1)
    s = Scrubber.compile([], minted)
    for before in range(MAX_FIELD - len(token) - 2, MAX_FIELD + 2):  # the token across the cut, each way
        out = s.text("x" * before + token + " tail " * 300_000)
        assert out.endswith(CUT) and len(out) <= MAX_FIELD + len(CUT)
        assert token[:4] not in out and token[-4:] not in out, f"no part of the token, cut after {before}"


def test_a_cut_moves_back_past_a_chain_of_overlapping_occurrences() -> None:
    # a value that overlaps itself ("abab…") repeated across the cut: each occurrence the cut would split
    # moves it back, never into a part of one
    s = Scrubber.compile(["abababab"])
    out = s.text("y" * (MAX_FIELD - 40) + "ab" * 400)
    assert "abab" not in out and out.endswith(CUT)


def test_many_held_credentials_and_a_huge_hostile_text_stay_bounded() -> None:
    minted = MintedSecrets()
    for i in range(MAX_RETIRED + 5):
        minted.hold("vertex", [f"ya29.rotating-token-{i:06d}"], now=i, keep_s=10_000)
    s = Scrubber.compile(["configured-provider-key"], minted)
    tokens = " ".join(f"ya29.rotating-token-{i:06d}" for i in range(4, MAX_RETIRED + 5))  # every one held
    out = s.text(tokens + " configured-provider-key " * 50_000)  # about 1.2 MB
    assert "ya29.rotating" not in out and "configured-provider-key" not in out and out.endswith(CUT)


def test_aws_keys_written_in_the_config_are_configured_secrets() -> None:
    # with `role_arn` they only go to STS, and the signer holds the assumed role's instead: masked anyway
    bedrock = {"type": "bedrock", "region": "us-east-1", "aws_access_key_id": "AKIACFG01",
               "aws_secret_access_key": "cfg-secret-0001", "aws_session_token": "cfgTOKEN01",
               "role_arn": "arn:aws:iam::123456789012:role/r"}
    cfg = parse_config({"auth": {"allow_unauthenticated": True}, "providers": {"b": bedrock},
                        "models": [{"name": "m", "deployments": [{"provider": "b", "model": "x"}]}]}, env={})
    out = compile_safety(cfg).scrubber.text("AKIACFG01 cfg-secret-0001 cfgTOKEN01")
    assert out == f"{MARK} {MARK} {MARK}"
