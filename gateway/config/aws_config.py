"""A `bedrock` provider's AWS settings in the config (docs/reference.md, "Config keys"): region, optional keys (in
pairs) and
`role_arn`. Values are never quoted in an error (they may be secrets)."""

from __future__ import annotations

import re

from gateway.config.reader import Section
from gateway.config.types import AwsSettings

AWS_KEYS = ("region", "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "role_arn")


def _aws(s: Section) -> AwsSettings:
    """A `bedrock` provider's region and optional credentials; keys come in pairs (docs/reference.md, "Config keys")."""
    region = s.get("region", str, "")
    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+", region):
        s.errs.add(s.at("region"), "required for type bedrock: an AWS region such as us-east-1")
    key_id = s.get("aws_access_key_id", str, "") or None
    secret = s.get("aws_secret_access_key", str, "") or None
    if (key_id is None) != (secret is None):
        s.errs.add(s.at("aws_secret_access_key" if key_id else "aws_access_key_id"),
                   "aws_access_key_id and aws_secret_access_key go together")
    token = s.get("aws_session_token", str, "") or None
    if token and not key_id:
        s.errs.add(s.at("aws_session_token"), "needs aws_access_key_id and aws_secret_access_key")
    return AwsSettings(region=region, access_key_id=key_id, secret_access_key=secret, session_token=token,
                       role_arn=s.get("role_arn", str, "") or None)


def aws_settings(s: Section, signs_with_aws: bool) -> AwsSettings | None:
    """The settings of a provider whose type signs with AWS credentials; for any other type, each AWS
    key present is an error."""
    if signs_with_aws:
        return _aws(s)
    for key in AWS_KEYS:
        if s.has(key):
            s.errs.add(s.at(key), "only for type bedrock")
    return None
