"""Credentials the request signers get at run time never reach a client byte or a log line (docs/extensions.md,
"secrets in upstream texts"): upstreams that quote our request's headers in their error texts, the
credentials also bare (a token without its scheme word). Bedrock signed with keys and a session token from
the environment, from a role assumed with keys of the config, and from web identity, both through a
scripted STS; Vertex with a service account's tokens (Claude and Gemini), one rotating while a request
is open and between two requests; the Gemini API's key. Chat, Responses and Messages, through the official
SDKs on loopback: an error status on a stream and on a body, an in-band error before the first token and
one after it, and Bedrock's count_tokens. The credentials are not shaped like anything the built-in
`secrets` rules know: only the signers' own masks can catch them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as an
from tests import google_scripts as g
from tests.eventstream_frames import chunk, exception
from tests.fake_aws import EVENTSTREAM, FakeBedrock, FakeSts, KeyPair
from tests.fake_google import API_KEY, LOCATION, PROJECT, FakeGoogle, gemini_path, vertex_path
from tests.fake_upstream import FakeUpstream, Gate, Script, json_script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.upstream_errors import read

# the environment's static keys; a session token with the characters AWS's have (`/`, `+`, `=`)
ENV_KEY_ID, ENV_SECRET, ENV_TOKEN = "ASIAENVKEY01", "env-secret-ACCESS-key-0001", "IQoJenvSESSION/tok+en=="
CONFIG_KEY_ID, CONFIG_SECRET = "AKIACONFIG01", "config-secret-ACCESS-key-01"  # what assumes the role
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
COUNT_PATH = "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/count-tokens"
VCLAUDE, VGEMINI, FLASH = "claude-sonnet-4-5@20250929", "gemini-2.5-pro", "gemini-2.5-flash"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
ONE = {"max_attempts": 1}
USER = [{"role": "user", "content": "hi"}]
MASKED = "[REDACTED:provider_key]"
CREDENTIAL_HEADERS = ("authorization", "x-amz-security-token", "x-goog-api-key")


def echo(headers: dict[str, str]) -> str:
    """What an upstream that quotes our request says: every header as sent, and each credential bare."""
    sent = "; ".join(f"{k}: {v}" for k, v in headers.items())
    bare = ", ".join(v.split()[-1] for k, v in headers.items() if k.lower() in CREDENTIAL_HEADERS)
    return f"Request rejected. Headers received: {sent}. Credentials: {bare}"


# ---- what each protocol's echoing upstream answers: an error status, or an error after the first token

def status_script(protocol: str) -> Callable[[dict[str, str]], Script]:
    def made(headers: dict[str, str]) -> Script:
        if protocol == "bedrock":
            return json_script({"message": echo(headers)}, 400, {"x-amzn-ErrorType": "ValidationException:"})
        if protocol == "anthropic":
            return an.error_body(400, "invalid_request_error", echo(headers))
        return json_script(g.error("INVALID_ARGUMENT", 400, echo(headers)), 400)
    return made


def inband_script(protocol: str) -> Callable[[dict[str, str]], Script]:
    """A 200 stream whose first event is an error the client's own (passed through, not retried)."""
    def made(headers: dict[str, str]) -> Script:
        said = echo(headers)
        if protocol == "bedrock":
            return Script([chunk(an.message_start()) + exception("validationException", said)], headers=EVENTSTREAM)
        if protocol == "anthropic":
            return an.stream([an.message_start(), an.error_event("invalid_request_error", said)])
        return Script([g.sse([g.error("INVALID_ARGUMENT", 400, said)])])
    return made


def after_script(protocol: str, gate: Gate | None = None) -> Callable[[dict[str, str]], Script]:
    """Text, then (after `gate`, when given) an error that quotes the request: the answer is made when the
    request arrives, so it quotes the credentials it was signed with, whenever it is sent."""
    def made(headers: dict[str, str]) -> Script:
        said, wait = echo(headers), [gate] if gate is not None else []
        start = [an.message_start(), *an.text_block(0, ["Partial ", "text"])[:3]]
        if protocol == "bedrock":
            return Script([b"".join(chunk(e) for e in start), *wait,
                           exception("modelStreamErrorException", said)], headers=EVENTSTREAM)
        if protocol == "anthropic":
            return an.stream(start, tail=[*wait, an.event(an.error_event("overloaded_error", said))])
        return Script([g.sse([g.response([g.text("Partial ")]), g.response([g.text("text")])]), *wait,
                       g.sse([g.error("INTERNAL", 500, said)])])
    return made


# ---- the rigs: an echoing fake with its credential source, and a gateway signing for it

@dataclass
class Rig:
    gw: GatewayServer
    fake: FakeUpstream
    protocol: str  # how the fake answers: "bedrock", "anthropic" (Vertex Claude) or "google"
    path: Callable[[bool], str]  # the model's path, streamed or not
    secrets: Callable[[], set[str]]  # every credential given out so far: none may show
    signer: str | None = None  # the provider whose signer the test can refresh


@pytest.fixture
def started(servers: LoopThread) -> Iterator[Callable[[Any], Any]]:
    """Start a scripted server for this test; stopped at its end."""
    running: list[Any] = []

    def start(server: Any) -> Any:
        servers.run(server.start())
        running.append(server)
        return server

    yield start
    for server in reversed(running):
        servers.run(server.stop())


def _gateway(make_gateway: Callable[..., GatewayServer], provider: dict[str, Any], model: str) -> GatewayServer:
    return make_gateway(parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"allow_unauthenticated": True},
        "providers": {"p": {**provider, "timeouts": TIMEOUTS}},
        "models": [{"name": "m", "retry": ONE, "deployments": [{"provider": "p", "model": model}]}],
    }, env={}))


def _aws_secrets(keys: dict[str, KeyPair]) -> Callable[[], set[str]]:
    return lambda: {v for key_id, pair in keys.items() for v in (key_id, pair.secret, pair.token) if v}


def bedrock_rig(source: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, start: Callable[[Any], Any],
                make_gateway: Callable[..., GatewayServer]) -> Rig:
    provider: dict[str, Any] = {"type": "bedrock", "region": "us-east-1"}
    if source == "env":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", ENV_KEY_ID)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ENV_SECRET)
        monkeypatch.setenv("AWS_SESSION_TOKEN", ENV_TOKEN)
        keys = {ENV_KEY_ID: KeyPair(ENV_SECRET, ENV_TOKEN)}
    else:  # rotating credentials from the scripted STS, short-lived: each refresh pass gets new ones
        source_keys = {CONFIG_KEY_ID: KeyPair(CONFIG_SECRET)}
        sts = start(FakeSts(web_identity_token="eks-projected-token", source_keys=source_keys, lifetime_s=120))
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        if source == "web-identity":
            (tmp_path / "token").write_text("eks-projected-token")
            monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))
            monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/gateway")
        else:
            provider.update(aws_access_key_id=CONFIG_KEY_ID, aws_secret_access_key=CONFIG_SECRET,
                            role_arn="arn:aws:iam::123456789012:role/bedrock")
        keys = sts.issuer.issued  # the live dict: every key the STS issues from now on is accepted
    fake = start(FakeBedrock(keys))
    gw = _gateway(make_gateway, {**provider, "base_url": fake.base_url}, CLAUDE)
    return Rig(gw, fake, "bedrock", bedrock_path, _aws_secrets(keys), "p")


def bedrock_path(stream: bool) -> str:
    return f"/model/{CLAUDE}/invoke-with-response-stream" if stream else f"/model/{CLAUDE}/invoke"


def google_rig(flavour: str, tmp_path: Path, start: Callable[[Any], Any],
               make_gateway: Callable[..., GatewayServer]) -> Rig:
    fake = start(FakeGoogle())
    if flavour == "gemini":
        gw = _gateway(make_gateway, {"type": "gemini", "base_url": fake.base_url, "api_key": API_KEY}, FLASH)
        return Rig(gw, fake, "google", lambda stream: gemini_path(FLASH, stream), lambda: {API_KEY})
    model = VCLAUDE if flavour == "vertex-claude" else VGEMINI
    provider = {"type": "vertex", "project": PROJECT, "location": LOCATION, "base_url": fake.base_url,
                "credentials_file": str(fake.service_account_file(tmp_path))}
    gw = _gateway(make_gateway, provider, model)
    protocol = "anthropic" if flavour == "vertex-claude" else "google"
    return Rig(gw, fake, protocol, lambda stream: vertex_path(model, stream), lambda: set(fake.issued), "p")


FLAVOURS = ["bedrock-env", "bedrock-assume-role", "bedrock-web-identity", "vertex-claude", "vertex-gemini", "gemini"]


@pytest.fixture
def rig(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        started: Callable[[Any], Any], make_gateway: Callable[..., GatewayServer]) -> Rig:
    flavour: str = request.param
    if flavour.startswith("bedrock-"):
        request.getfixturevalue("aws_env")
        return bedrock_rig(flavour.removeprefix("bedrock-"), monkeypatch, tmp_path, started, make_gateway)
    return google_rig(flavour, tmp_path, started, make_gateway)


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    with capture_logs() as captured:
        yield captured


# ---- what the client reads: every byte, through the SDKs' raw access (`tests.upstream_errors.read`)

def claude_sdk(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url.removesuffix("/v1"), api_key="x", max_retries=0, timeout=20)


def ask(gw: GatewayServer, api: str, stream: bool) -> str:
    if api == "messages":
        return read(lambda: claude_sdk(gw).messages.with_streaming_response.create(
            model="m", max_tokens=64, messages=USER, stream=stream))  # type: ignore[arg-type]
    o = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
    if api == "chat":
        return read(lambda: o.chat.completions.with_streaming_response.create(
            model="m", messages=USER, stream=stream))  # type: ignore[arg-type]
    return read(lambda: o.responses.with_streaming_response.create(model="m", input="hi", stream=stream))


def assert_none_shows(secrets: set[str], text: str, where: str) -> None:
    assert secrets, "the signer got credentials"
    shown = sorted(s for s in secrets if s in text)
    assert shown == [], f"{where} shows {shown}"


def settled_logs(servers: LoopThread, logs: list[MutableMapping[str, Any]], n: int) -> str:
    """The captured log lines once `n` request lines are in (written just after the client's last byte)."""
    servers.run(wait_until(lambda: sum(e["event"] == "request" for e in logs) >= n, 5.0))
    return repr(logs)


SCRIPTS = {"status_stream": status_script, "status_body": status_script, "inband_before": inband_script,
           "after": after_script}
CASES = [("status_stream", True), ("status_body", False), ("inband_before", True), ("after", True)]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("rig", FLAVOURS, indirect=True)
def test_no_signer_credential_reaches_a_client_byte_or_a_log_line(
        rig: Rig, api: str, servers: LoopThread, logs: list[MutableMapping[str, Any]]) -> None:
    for case, stream in CASES:
        rig.fake.enqueue(rig.path(stream), SCRIPTS[case](rig.protocol))
        got = ask(rig.gw, api, stream)
        quoted = echo(rig.fake.received[-1].headers)
        assert any(s in quoted for s in rig.secrets()), "the upstream quoted a credential we sent"
        assert_none_shows(rig.secrets(), got, f"{case}: the client's bytes")
        if case == "after":
            assert "Partial " in got, f"{case}: the text already sent stands"
        if case != "after" or api != "chat":  # chat ends a stream with an error of its own text
            assert MASKED in got, f"{case}: the upstream's reason reached the client, masked: {got}"
    assert_none_shows(rig.secrets(), settled_logs(servers, logs, len(CASES)), "a log line")


@pytest.mark.parametrize("rig", ["bedrock-env", "bedrock-web-identity"], indirect=True)
def test_count_tokens_never_shows_a_signer_credential(rig: Rig, servers: LoopThread,
                                                      logs: list[MutableMapping[str, Any]]) -> None:
    rig.fake.enqueue(COUNT_PATH, status_script("bedrock"))
    got = read(lambda: claude_sdk(rig.gw).messages.with_raw_response.count_tokens(
        model="m", messages=USER))  # type: ignore[arg-type]
    assert got.startswith("400 ") and MASKED in got and rig.fake.received[-1].path == COUNT_PATH
    assert_none_shows(rig.secrets(), got, "the client's bytes")
    assert_none_shows(rig.secrets(), settled_logs(servers, logs, 1), "a log line")


@pytest.mark.parametrize("rig", ["vertex-claude", "bedrock-web-identity"], indirect=True)
def test_credentials_rotated_while_a_request_is_open_are_masked_in_it_and_in_the_next(
        rig: Rig, servers: LoopThread, logs: list[MutableMapping[str, Any]]) -> None:
    """The answer to a request signed with the old credentials comes after the refresh replaced them: the
    old ones are still masked there (kept for the attempt's `total_s`), the new ones in the next request."""
    gw = rig.gw
    assert gw.app is not None and rig.signer is not None
    signer: Any = gw.app.upstream.signers[rig.signer]
    gate = Gate()
    rig.fake.enqueue(rig.path(True), after_script(rig.protocol, gate))
    with claude_sdk(gw).messages.with_streaming_response.create(
            model="m", max_tokens=64, messages=USER, stream=True) as raw:  # type: ignore[arg-type]
        pieces = raw.iter_bytes()
        got = next(pieces).decode()  # the stream has begun: committed, the error will be forwarded
        first = rig.secrets()
        servers.run(signer.refresh())
        assert rig.secrets() > first, "the refresh got new credentials"
        gate.opened.set()
        got += b"".join(pieces).decode()
    quoted = echo(rig.fake.received[0].headers)
    assert any(s in quoted for s in first) and not any(s in quoted for s in rig.secrets() - first)
    assert MASKED in got and gate.waited == [True]
    rig.fake.enqueue(rig.path(False), status_script(rig.protocol))
    got += ask(gw, "messages", False)
    assert any(s in echo(rig.fake.received[1].headers) for s in rig.secrets() - first), "signed with the new"
    assert_none_shows(rig.secrets(), got, "the client's bytes")
    assert_none_shows(rig.secrets(), settled_logs(servers, logs, 2), "a log line")


@pytest.mark.parametrize("rig", ["vertex-gemini"], indirect=True)
def test_a_reload_s_new_signers_tell_the_scrubber_too(rig: Rig, servers: LoopThread,
                                                       logs: list[MutableMapping[str, Any]]) -> None:
    """A reload starts new signers (new tokens) and closes the old ones: the new runtime's scrubber masks
    the new signer's token, and the old one's still (a request of the old runtime may be answered)."""
    app = rig.gw.app
    assert app is not None
    old = app.upstream.signers["p"]
    servers.run(_reload(app, app.prepare_reload(rig.gw.config)))
    servers.run(wait_until(lambda: app.upstream.signers["p"] is not old and len(rig.secrets()) == 2, 10.0))
    assert servers.run(_scrubbed(app, "; ".join(rig.secrets()))).count(MASKED) == 2
    rig.fake.enqueue(rig.path(False), status_script(rig.protocol))
    got = ask(rig.gw, "chat", False)
    assert isinstance(rig.fake, FakeGoogle)
    assert MASKED in got and rig.fake.received[-1].headers["Authorization"].endswith(rig.fake.issued[-1])
    assert_none_shows(rig.secrets(), got, "the client's bytes")
    assert_none_shows(rig.secrets(), settled_logs(servers, logs, 1), "a log line")


async def _reload(app: Any, reload: Any) -> None:
    await app.apply_reload(reload)  # on the loop, as SIGHUP's handler does


async def _scrubbed(app: Any, text: str) -> str:
    return str(app.runtime.safety.scrubber.text(text))
