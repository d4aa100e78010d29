"""`type: bedrock` in the config (CONTRACT §2): region required and checked, base_url from the region,
keys in pairs, secrets never in an error or a repr."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, parse_config


def config(**provider: Any) -> dict[str, Any]:
    return {"auth": {"allow_unauthenticated": True},
            "providers": {"bedrock-us": {"type": "bedrock", **provider}},
            "models": [{"name": "claude", "deployments": [{"provider": "bedrock-us", "model": "anthropic.claude"}]}]}


def errors(**provider: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(config(**provider), env={})
    return info.value.errors


def test_base_url_defaults_to_the_regional_endpoint() -> None:
    p = parse_config(config(region="eu-west-3"), env={}).providers["bedrock-us"]
    assert p.base_url == "https://bedrock-runtime.eu-west-3.amazonaws.com"
    assert p.aws is not None and p.aws.region == "eu-west-3" and p.aws.access_key_id is None
    assert p.genai_name == "aws.bedrock"
    vpce = "https://vpce-1.bedrock-runtime.eu-west-3.vpce.amazonaws.com"
    assert parse_config(config(region="eu-west-3", base_url=vpce), env={}).providers["bedrock-us"].base_url == vpce


def test_region_is_required_and_checked() -> None:
    assert any(e.startswith("providers.bedrock-us.region: required for type bedrock") for e in errors())
    assert any(e.startswith("providers.bedrock-us.region:") for e in errors(region="us east 1"))


def test_keys_go_in_pairs_and_never_appear_in_errors_or_reprs() -> None:
    found = errors(region="us-east-1", aws_access_key_id="AKIAPAIRLESS")
    assert found == ["providers.bedrock-us.aws_secret_access_key: aws_access_key_id and aws_secret_access_key "
                     "go together"]
    found = errors(region="us-east-1", aws_secret_access_key="s3cr3t-value")
    assert found and all("s3cr3t-value" not in e for e in found)
    assert errors(region="us-east-1", aws_session_token="tok")[0].startswith("providers.bedrock-us.aws_session_token")
    p = parse_config(config(region="us-east-1", aws_access_key_id="AKIAX", aws_secret_access_key="s3cr3t-value",
                            role_arn="arn:aws:iam::123456789012:role/r"), env={}).providers["bedrock-us"]
    assert p.aws is not None and p.aws.role_arn == "arn:aws:iam::123456789012:role/r"
    assert "s3cr3t-value" not in repr(p)


def test_aws_keys_are_not_accepted_elsewhere() -> None:
    raw = config(region="us-east-1")
    raw["providers"]["oai"] = {"type": "openai", "base_url": "https://api.openai.com/v1", "region": "us-east-1"}
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env={})
    assert info.value.errors == ["providers.oai.region: only for type bedrock"]
