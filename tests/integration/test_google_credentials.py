"""The Google signer's credential chain (`gateway/upstream/google.py`): Application Default Credentials
from a GCE / GKE metadata server (workload identity), found by google-auth through `GCE_METADATA_HOST` /
`GCE_METADATA_IP` pointed at the scripted one (`tests/fake_google.py`) in a real `gateway serve`
process (google-auth reads those variables once, at import: a fresh process is how it runs); and a
credentials file the token endpoint refuses at start, which the signer keeps trying."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from gateway.config import parse_config
from gateway.core.events import FailureKind
from gateway.upstream.errors import UpstreamError
from gateway.upstream.google import GoogleSigner, _from_file, refresh_delay
from tests import anthropic_scripts as a
from tests import google_scripts as g
from tests.e2e.processes import gateway as gateway_process
from tests.fake_google import LOCATION, PROJECT, FakeGoogle, sse_script, vertex_path
from tests.harness import GatewayServer, LoopThread

USER = [{"role": "user", "content": "Say hello"}]


@pytest.fixture
def google(servers: LoopThread) -> Iterator[FakeGoogle]:
    fake = FakeGoogle()
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


def test_workload_identity_through_the_metadata_server(google: FakeGoogle, tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""\
server: {{host: 127.0.0.1}}
auth: {{allow_unauthenticated: true}}
providers:
  vx: {{type: vertex, project: {PROJECT}, location: {LOCATION}, base_url: "{google.base_url}"}}
models:
  - name: vgemini
    deployments: [{{provider: vx, model: gemini-2.5-pro}}]
logging: {{level: info, format: json}}
""")
    google.enqueue(vertex_path("gemini-2.5-pro", True), sse_script(g.text_stream(["from ", "GKE"])))
    host = f"127.0.0.1:{google.port}"
    env = {"GCE_METADATA_HOST": host, "GCE_METADATA_IP": host, "GOOGLE_APPLICATION_CREDENTIALS": "",
           "CLOUDSDK_CONFIG": str(tmp_path / "no-gcloud"), "NO_GCE_CHECK": "false"}
    proc, base_url, _ = gateway_process(config, env)
    proc.start(60)
    try:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=20)
        stream = client.chat.completions.create(model="vgemini", messages=USER, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "from GKE"
    finally:
        proc.stop()
    assert google.issued and google.received[-1].headers["Authorization"] == f"Bearer {google.issued[-1]}"
    assert google.issued[-1] not in proc.output(500)  # never a token in a log line


def test_a_refused_start_is_survived_and_the_next_refresh_serves(google: FakeGoogle, tmp_path: Path,
                                                                 servers: LoopThread,
                                                                 make_gateway: Callable[..., GatewayServer]) -> None:
    sa = google.service_account_file(tmp_path)
    google.refuse_tokens = True
    gw = make_gateway(parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"vx": {"type": "vertex", "project": PROJECT, "location": LOCATION,
                             "base_url": google.base_url, "credentials_file": str(sa)}},
        "models": [{"name": "vclaude", "deployments": [{"provider": "vx", "model": "claude-haiku-4-5"}]}]}, env={}))
    client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0, timeout=20)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="vclaude", messages=USER)
    assert err.value.status_code == 502 and google.received == []  # refused before it was sent
    google.refuse_tokens = False
    assert gw.app is not None
    signer = gw.app.upstream.signers["vx"]
    assert isinstance(signer, GoogleSigner)
    servers.run(signer.refresh())
    google.enqueue(vertex_path("claude-haiku-4-5", False), a.message_body([{"type": "text", "text": "Back."}]))
    assert client.chat.completions.create(model="vclaude", messages=USER).choices[0].message.content == "Back."


def test_refresh_ahead_of_expiry() -> None:
    assert refresh_delay(3600) == 3300  # five minutes before an hour-long token ends
    assert refresh_delay(120) == 60  # halfway through a short one
    assert refresh_delay(0) == 1.0 and refresh_delay(None) == 3600


def test_an_unknown_credentials_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"type": "impersonated_everything"}')
    with pytest.raises(ValueError, match="unsupported credentials type"):
        _from_file(str(path))


def test_an_expired_token_is_never_sent(servers: LoopThread, tmp_path: Path) -> None:
    fake = FakeGoogle(expires_in=0)  # every token it issues has already expired
    servers.run(fake.start())
    try:
        sa = fake.service_account_file(tmp_path)
        cfg = parse_config({"auth": {"allow_unauthenticated": True},
                            "providers": {"vx": {"type": "vertex", "project": PROJECT, "location": LOCATION,
                                                 "credentials_file": str(sa)}},
                            "models": [{"name": "m", "deployments": [{"provider": "vx", "model": "x"}]}]}, env={})
        signer = GoogleSigner(cfg.providers["vx"])
        assert servers.run(signer.refresh()) == 1.0 and fake.issued  # renewed again in a second
        with pytest.raises(UpstreamError) as err:
            signer.sign("POST", "https://x.test/", {}, b"")
        assert err.value.failure.kind is FailureKind.UPSTREAM_AUTH
        assert fake.issued[0] not in str(err.value)
    finally:
        servers.run(fake.stop())


def test_workload_identity_federation_and_its_quota_project(servers: LoopThread, google: FakeGoogle,
                                                            tmp_path: Path) -> None:
    """An `external_account` file: the workload's subject token traded at the STS, and the quota project
    the file names (billed for the calls) on each request."""
    path = google.federation_file(tmp_path, "billing-proj")
    cfg = parse_config({"auth": {"allow_unauthenticated": True},
                        "providers": {"vx": {"type": "vertex", "project": PROJECT, "location": LOCATION,
                                             "credentials_file": str(path)}},
                        "models": [{"name": "m", "deployments": [{"provider": "vx", "model": "x"}]}]}, env={})
    signer = GoogleSigner(cfg.providers["vx"])
    servers.run(signer.refresh())
    headers: dict[str, str] = {}
    signer.sign("POST", "https://x.test/", headers, b"")
    assert headers == {"authorization": f"Bearer {google.issued[0]}", "x-goog-user-project": "billing-proj"}
