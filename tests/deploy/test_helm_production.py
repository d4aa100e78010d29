"""The chart as a platform team runs it in production: WebSocket mode and streams through the Ingress,
graceful shutdown, and secrets that stay out of ConfigMaps."""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import pytest

from tests.deploy.test_helm import chart, only, render

__all__ = ["chart"]  # the module-scoped fixture, shared

NGINX = "nginx.ingress.kubernetes.io/"


def ingress_annotations(chart: helm.Chart, values: dict[str, Any]) -> dict[str, str]:
    annotations: dict[str, str] = only(render(chart, {"ingress": {"enabled": True}, **values}),
                                       "Ingress")["metadata"]["annotations"]
    return annotations


@pytest.mark.parametrize(("idle_s", "timeout"), [(None, 3600), (300, 3600), (7200, 7230), (5000.5, 5031)])
def test_websocket_sockets_outlast_their_idle_time_at_the_ingress(
    chart: helm.Chart, idle_s: float | None, timeout: int
) -> None:
    """A WebSocket-mode socket stays open while quiet for up to server.websocket_idle_s: ingress-nginx's
    read/send timeouts must be longer, or it cuts the socket first (the chart kept 3600 s whatever the
    gateway's idle time). Streams keep response buffering off."""
    server = {} if idle_s is None else {"websocket_idle_s": idle_s}
    annotations = ingress_annotations(chart, {"config": {"server": server}})
    assert annotations[NGINX + "proxy-read-timeout"] == annotations[NGINX + "proxy-send-timeout"] == str(timeout)
    assert annotations[NGINX + "proxy-buffering"] == "off"
    assert annotations[NGINX + "proxy-http-version"] == "1.1"


# ---- secrets stay out of ConfigMaps ----------------------------------------------------------------

LITERALS: list[tuple[dict[str, Any], str]] = [
    ({"providers": {"openai": {"type": "openai", "base_url": "https://api.openai.com/v1",
                               "api_key": "sk-literal-provider-key"}}}, "providers.openai.api_key"),
    ({"providers": {"aws": {"type": "bedrock", "region": "us-east-1", "aws_access_key_id": "AKIAEXAMPLE",
                            "aws_secret_access_key": "literal-aws-secret"}}}, "providers.aws.aws_secret_access_key"),
    ({"providers": {"o": {"type": "openai", "base_url": "https://x.example/v1", "api_key": "${K}",
                          "proxy": "http://proxy-user:literal-proxy-pw@squid:3128"}}}, "providers.o.proxy"),
    ({"auth": {"keys": [{"name": "team-a", "key": "literal-client-key"}]}}, "auth.keys[0].key"),
    ({"admin": {"keys": [{"name": "ops", "key": "literal-admin-key"}]}}, "admin.keys[0].key"),
    ({"server": {"tls": {"cert_file": "/t/c.pem", "key_file": "/t/k.pem", "key_password": "literal-pass"}}},
     "server.tls.key_password"),
    ({"store": {"url": "postgresql://gw:literal-db-pw@db:5432/gw"}}, "store.url"),
    ({"state": {"backend": "redis", "redis_url": "redis://:literal-redis-pw@redis:6379/0"}}, "state.redis_url"),
    ({"state": {"backend": "redis", "redis_url": "redis://:${REDIS_PASSWORD}@unused:6379/0",
                "sentinel": {"master": "m", "urls": ["redis://:literal-sentinel-pw@s0:26379"]}}},
     "state.sentinel.urls[0]"),
]


@pytest.mark.parametrize(("config", "named"), LITERALS, ids=[n for _, n in LITERALS])
def test_a_literal_credential_in_config_is_refused_by_name(
    chart: helm.Chart, config: dict[str, Any], named: str
) -> None:
    """`config` becomes a ConfigMap (and the migrations hook's): a key or password written in it was
    stored there in clear, readable by anyone who may read ConfigMaps. The render now fails, naming the
    key and never quoting the value."""
    with pytest.raises(helm.HelmError, match=re.escape(f"config.{named}")) as refused:
        render(chart, {"config": config})
    assert "literal-" not in str(refused.value), "the message never quotes the value"


def test_references_and_passwordless_urls_render(chart: helm.Chart) -> None:
    """What belongs in a ConfigMap still renders: ${NAME} references (whole, or inside a URL), URLs
    without a password, a user name alone, key digests."""
    config = {
        "providers": {"o": {"type": "openai", "base_url": "https://x.example/v1", "api_key": "${OPENAI_API_KEY}",
                            "proxy": "http://proxy-user@squid:3128"}},
        "auth": {"keys": [{"name": "default", "key": "${GATEWAY_API_KEY}"}, {"name": "b", "key_sha256": "ab" * 32}]},
        "state": {"backend": "redis", "redis_url": "redis://gw:${REDIS_PASSWORD}@redis:6379/0"},
        "store": {"url": "postgresql://gw@db:5432/gw"},
    }
    configmaps = [d for d in render(chart, {"config": config}) if d["kind"] == "ConfigMap"]
    assert "${REDIS_PASSWORD}" in configmaps[0]["data"]["config.yaml"]


# ---- the migrations hook --------------------------------------------------------------------------


def hook_events(doc: dict[str, Any]) -> set[str]:
    return set(doc["metadata"].get("annotations", {}).get("helm.sh/hook", "").split(",")) - {""}


def test_the_migrations_job_reads_this_releases_secret_at_pre_upgrade(chart: helm.Chart) -> None:
    """Helm runs pre-upgrade hooks before it updates the release's other resources: the Job read the
    chart's Secret as the previous release left it, so an upgrade whose config names a variable first (a
    new provider's key, or GATEWAY_STORE_URL on the upgrade that adds store.url) ran `gateway migrate`
    without it, the Job failed and so did the upgrade. Every Secret of the chart's that the Job reads is
    now a hook created before it, holding the same values as the pods' Secret."""
    values: dict[str, Any] = {"store": {"url": "postgresql://gw:${DB_PASSWORD}@db:5432/gw"}, "secret": {
        "env": {"DB_PASSWORD": "pw", "ANTHROPIC_API_KEY": "sk-ant-test"}, "generateGatewayKey": True}}
    docs = render(chart, values)
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    job = only(docs, "Job")
    pod = job["spec"]["template"]["spec"]["containers"][0]
    read = [s["secretRef"]["name"] for s in pod.get("envFrom", []) if "secretRef" in s]
    read += [e["valueFrom"]["secretKeyRef"]["name"] for e in pod["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    ours = [name for name in read if name in secrets]
    assert ours, "the Job reads the chart's Secret"
    job_weight = int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    for name in ours:
        hook = secrets[name]
        assert hook_events(hook) >= hook_events(job) == {"post-install", "pre-upgrade"}
        assert int(hook["metadata"]["annotations"]["helm.sh/hook-weight"]) < job_weight
        assert hook["data"] == secrets["rel-llm-gateway"]["data"], "one generated key for the pods and the Job"
    pods_secret = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert {"secretRef": {"name": "rel-llm-gateway"}} in pods_secret, "the pods keep the release's Secret"
    assert not hook_events(secrets["rel-llm-gateway"])
    no_job = render(chart, {**values, "store": {**values["store"], "migrationsJob": False}})
    assert [d["metadata"]["name"] for d in no_job if d["kind"] == "Secret"] == ["rel-llm-gateway"]
