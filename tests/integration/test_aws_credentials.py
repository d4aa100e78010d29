"""The SigV4 signer's credential chain (botocore) against scripted AWS endpoints on loopback: environment,
a profile in the shared files, web identity (EKS IRSA) through a scripted STS, the container credentials
endpoint, keys in the config, an assumed role, a refresh, and no credentials at all. Each signature is
checked by recomputing it (tests/fake_aws.verify_sigv4)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from gateway.core.events import FailureKind
from gateway.providers.settings import AwsSettings, ProviderConfig
from gateway.upstream import UpstreamError
from gateway.upstream.aws import SigV4Signer
from gateway.upstream.signing import SIGNERS
from tests.fake_aws import FakeContainerCredentials, FakeSts, KeyPair, verify_sigv4

URL = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-x%3A0/invoke"
BODY = b'{"messages": []}'
# every test: nothing of the machine's own AWS setup (tests/integration/conftest.py)
pytestmark = pytest.mark.usefixtures("aws_env")
Served = TypeVar("Served", FakeSts, FakeContainerCredentials)


def provider(**aws: str) -> ProviderConfig:
    return ProviderConfig(name="bedrock-us", type="bedrock", aws=AwsSettings(region="us-east-1", **aws))


def signed(signer: SigV4Signer) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    signer.sign("POST", URL, headers, BODY)
    return {**headers, "host": "bedrock-runtime.us-east-1.amazonaws.com"}


def check(signer: SigV4Signer, keys: dict[str, KeyPair]) -> None:
    path = URL.split("amazonaws.com", 1)[1]
    assert verify_sigv4("POST", path, signed(signer), BODY, keys, "bedrock", "us-east-1") is None


@asynccontextmanager
async def signing(cfg: ProviderConfig) -> AsyncIterator[SigV4Signer]:
    """The provider's signer, started (its credential chain resolved); closed on leaving."""
    signer = SIGNERS["sigv4"](cfg)
    assert isinstance(signer, SigV4Signer)
    await signer.start()
    try:
        yield signer
    finally:
        await signer.close()


@asynccontextmanager
async def serving(server: Served) -> AsyncIterator[Served]:
    """A scripted AWS endpoint on loopback for the length of the block."""
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    async with signing(provider()) as signer:
        assert signer.access_key_id == "AKIAENV"
        check(signer, {"AKIAENV": KeyPair("env-secret")})
        # a wrong secret is told apart: the verification can fail
        path = URL.split("amazonaws.com", 1)[1]
        bad = verify_sigv4("POST", path, signed(signer), BODY, {"AKIAENV": KeyPair("other")}, "bedrock", "us-east-1")
        assert bad is not None and bad[0] == "InvalidSignatureException"
        # a body changed after signing is told apart too
        assert verify_sigv4("POST", path, signed(signer), BODY + b" ", {"AKIAENV": KeyPair("env-secret")},
                            "bedrock", "us-east-1") is not None


async def test_profile_in_shared_files(aws_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (aws_env / "credentials").write_text("[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = d\n"
                                         "[team]\naws_access_key_id = AKIATEAM\naws_secret_access_key = t-secret\n"
                                         "aws_session_token = t-token\n")
    monkeypatch.setenv("AWS_PROFILE", "team")
    async with signing(provider()) as signer:
        assert signer.access_key_id == "AKIATEAM"
        check(signer, {"AKIATEAM": KeyPair("t-secret", "t-token")})


async def test_web_identity_through_sts(aws_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with serving(FakeSts(web_identity_token="eks-projected-token")) as sts:
        (aws_env / "token").write_text("eks-projected-token")
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(aws_env / "token"))
        monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/gateway")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        async with signing(provider()) as signer:
            assert sts.calls == ["AssumeRoleWithWebIdentity"]
            assert signer.access_key_id == "ASIASTS0001"
            check(signer, sts.issuer.issued)


async def test_container_credentials_and_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials that expire within botocore's refresh window are replaced on the next refresh pass,
    in the signer's thread; `sign` uses the new ones from then on."""
    # inside the 15-minute advisory window: refreshed each pass
    async with serving(FakeContainerCredentials(lifetime_s=120)) as ctr:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{ctr.url}/v2/credentials")
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-token")
        async with signing(provider()) as signer:
            first = signer.access_key_id
            assert first is not None and first.startswith("ASIACTR")
            check(signer, ctr.issuer.issued)
            await signer.refresh()
            assert signer.access_key_id not in (None, first)
            check(signer, {signer.access_key_id: ctr.issuer.issued[signer.access_key_id]})  # type: ignore[index]


async def test_keys_in_config_and_assumed_role(monkeypatch: pytest.MonkeyPatch) -> None:
    source = {"AKIACONFIG": KeyPair("config-secret")}
    async with serving(FakeSts(source_keys=source)) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        async with signing(provider(access_key_id="AKIACONFIG", secret_access_key="config-secret")) as signer:
            assert signer.access_key_id == "AKIACONFIG"
            check(signer, source)
        async with signing(provider(access_key_id="AKIACONFIG", secret_access_key="config-secret",
                                    role_arn="arn:aws:iam::123456789012:role/bedrock")) as signer:
            assert sts.calls == ["AssumeRole"]  # signed with the config's keys, verified by the STS
            assert signer.access_key_id == "ASIASTS0001"
            check(signer, sts.issuer.issued)


async def test_no_credentials_is_an_auth_failure_not_a_crash() -> None:
    async with signing(provider()) as signer:
        assert signer.access_key_id is None
        with pytest.raises(UpstreamError) as info:
            signed(signer)
        assert info.value.failure.kind is FailureKind.UPSTREAM_AUTH
        assert "secret" not in info.value.failure.message
