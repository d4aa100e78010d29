"""The chart's restricted egress (`networkPolicy.egress.enabled`): the pods may reach every port the
gateway's config sends them to, and nothing opens all ports by accident. Before, the policy allowed DNS,
`httpsPorts`, `redisPort` and `storePort` only: an in-cluster vLLM on :8000, an OTLP collector on :4318,
an IdP over http, Sentinels on :26379 or a PostgreSQL on :6432 were all cut off once egress was narrowed."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate

from tests.deploy.test_helm import FULLNAME, KUBE_VERSIONS, chart, only, render
from tests.deploy.test_helm_production import hook_events

__all__ = ["chart"]  # the module-scoped fixture, shared

EGRESS_ON: dict[str, Any] = {"networkPolicy": {"egress": {"enabled": True}}}
DNS = {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}


def egress(chart: helm.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    policy = regular_policy(render(chart, {**EGRESS_ON, **values}))
    kubernetes_validate.validate(policy, KUBE_VERSIONS[0], strict=True)
    rules: list[dict[str, Any]] = policy["spec"]["egress"]
    return rules


def regular_policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The release's NetworkPolicy (the gateway pods'), not the migrations Job's hook policy."""
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == FULLNAME]
    return policy


def open_ports(rules: list[dict[str, Any]]) -> set[int]:
    """The TCP ports open to any destination (rules without `to`), DNS aside."""
    assert rules[0] == DNS
    return {p["port"] for rule in rules[1:] if "to" not in rule for p in rule["ports"]}


def test_every_port_the_config_names_is_open(chart: helm.Chart) -> None:
    config = {
        "providers": {
            "vllm": {"type": "openai", "base_url": "http://vllm.ml.svc:8000/v1", "proxy": "http://squid:3128"},
            "ollama": {"type": "openai", "base_url": "http://ollama.ml.svc:11434/v1"},
            "plain-http": {"type": "openai", "base_url": "http://llm.internal/v1", "proxy": False},
            "openai": {"type": "openai", "base_url": "https://api.openai.com/v1", "api_key": "${OPENAI_API_KEY}"},
        },
        "guardrails": [{"name": "dlp", "type": "webhook", "url": "https://dlp.sec.svc:9443/check"}],
        "auth": {"jwt": {"issuer": "http://keycloak.idp.svc:8081/realms/corp",
                         "jwks_url": "https://keys.idp.example:8443/jwks"}},
        "telemetry": {"otlp_endpoint": "http://otel-collector.obs.svc:4318"},
    }
    values = {
        "config": config,
        "secret": {"env": {"OPENAI_API_KEY": "sk-test", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://otel-m:4319"}},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://egress-proxy:3129"}],
        # two PostgreSQL hosts, the second on libpq's default port; Sentinels on theirs and on 26380
        "store": {"url": "postgresql://gw:pw@pg-a:6432,pg-b/gw"},
        "redis": {"url": "redis://:pw@unused:6380/0", "mode": "sentinel",
                  "sentinel": {"master": "mymaster", "urls": ["redis://:${SENTINEL_PASSWORD}@s0:26380", "redis://s1"]}},
    }
    assert open_ports(egress(chart, values)) == {
        443,  # httpsPorts
        8000, 11434, 3128, 80,  # providers' base_url and proxy (http without a port: 80)
        9443,  # the guardrail webhook
        8081, 8443,  # the IdP's issuer (discovery) and JWKS
        4318, 4319, 3129,  # OTLP (config and environment), HTTPS_PROXY
        6432, 5432,  # the store's hosts (5432 also as storePort)
        6380, 6379, 26380, 26379,  # the master's URL and redisPort; the Sentinels
    }


def test_what_the_chart_cannot_see_falls_back_to_the_port_values(chart: helm.Chart) -> None:
    """URLs from Secrets (`${NAME}`) have no port to read: `redisPort` and `storePort` stand for them,
    also when the config names Redis or the store itself rather than through `redis.*` / `store.*`."""
    from_secrets = {"redis": {"existingSecret": "redis-auth"}, "store": {"existingSecret": "gateway-db"},
                    "config": {"providers": {"vllm": {"type": "openai", "base_url": "${VLLM_URL}"}}}}
    assert open_ports(egress(chart, from_secrets)) == {443, 6379, 5432}
    in_config = {"config": {"state": {"backend": "redis", "redis_url": "${REDIS_URL}"},
                            "store": {"url": "${DATABASE_URL}"}},
                 "networkPolicy": {"egress": {"enabled": True, "redisPort": 6390, "storePort": 5433}}}
    assert open_ports(egress(chart, in_config)) == {443, 6390, 5433}
    assert open_ports(egress(chart, {})) == {443}


def test_an_existing_configmap_counts_only_the_charts_own_values(chart: helm.Chart) -> None:
    values = {"existingConfigMap": "my-config", "store": {"url": "postgresql://gw:pw@db:6432/gw"},
              "config": {"providers": {"vllm": {"type": "openai", "base_url": "http://vllm:8000/v1"}}}}
    assert open_ports(egress(chart, values)) == {443, 5432, 6432}


def test_no_port_list_is_ever_empty(chart: helm.Chart) -> None:
    """A rule with no `ports` allows every port: with `httpsPorts: []` and nothing configured, there is
    no rule rather than an empty one."""
    rules = egress(chart, {"networkPolicy": {"egress": {"enabled": True, "httpsPorts": []}}})
    assert rules == [DNS]
    assert all(rule.get("ports") for rule in rules)


BEDROCK = {"providers": {"demo": None, "bedrock-us": {"type": "bedrock", "region": "us-east-1"}},
           "models": [{"name": "claude", "deployments": [{"provider": "bedrock-us", "model": "anthropic.claude"}]}]}
POD_IDENTITY_AGENT = [{"ipBlock": {"cidr": "169.254.170.23/32"}}, {"ipBlock": {"cidr": "fd00:ec2::23/128"}}]


def test_eks_pod_identity_agent_is_reachable_for_a_bedrock_provider_without_keys(chart: helm.Chart) -> None:
    """The AWS default chain asks the node's Pod Identity agent (port 80, a link-local address) for the
    credentials: restricted egress cut bedrock providers off from them."""
    agent = [r for r in egress(chart, {"config": BEDROCK}) if r.get("to") == POD_IDENTITY_AGENT]
    assert [[p["port"] for p in r["ports"]] for r in agent] == [[80]]
    irsa = {"config": BEDROCK, "aws": {"irsaRoleArn": "arn:aws:iam::123456789012:role/r"}}  # STS on 443 instead
    keyed_provider = {"config": {**BEDROCK, "providers": {"demo": None, "bedrock-us": {
        "type": "bedrock", "region": "us-east-1", "aws_access_key_id": "${AWS_KEY_ID}",
        "aws_secret_access_key": "${AWS_SECRET}"}}}}
    for values in (irsa, keyed_provider, {}):
        assert all(r.get("to") != POD_IDENTITY_AGENT for r in egress(chart, values))


# ---- the migrations Job at pre-upgrade -----------------------------------------------------------


def hook(doc: dict[str, Any]) -> tuple[set[str], int]:
    """A manifest's hook events and weight (none and 0 for a release resource)."""
    return hook_events(doc), int(doc["metadata"].get("annotations", {}).get("helm.sh/hook-weight", "0"))


def selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = policy["spec"]["podSelector"]
    assert set(selector) <= {"matchLabels"}, "only matchLabels is read here"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def egress_ports(policies: list[dict[str, Any]]) -> set[tuple[int, str]]:
    """The ports the pods selected by `policies` may reach (policies add up); every rule here is port-only."""
    assert all("Egress" in p["spec"]["policyTypes"] for p in policies)
    rules = [rule for p in policies for rule in p["spec"].get("egress", [])]
    return {(port["port"], port["protocol"]) for rule in rules for port in rule["ports"]}


def test_the_migrations_job_reaches_the_store_while_the_previous_policy_still_applies(chart: helm.Chart) -> None:
    """Helm updates the release's NetworkPolicy after the pre-upgrade hooks: on the upgrade that turns on
    both the store and restricted egress, the migrations Job ran under the previous release's policy,
    which allows no PostgreSQL port, and `gateway migrate` failed the upgrade. The Job's pods now have a
    hook policy of their own, created before the Job, allowing DNS and the store's ports; the gateway
    pods' policy is the same as without it."""
    before = dict(EGRESS_ON)
    after = {**EGRESS_ON, "store": {"url": "postgresql://gw:pw@pg-a:6432,pg-b/gw"}}
    previous = render(chart, before)
    docs = render(chart, after, revision=2, is_upgrade=True)
    job = only(docs, "Job")
    job_events, job_weight = hook(job)
    assert "pre-upgrade" in job_events
    job_pods = job["spec"]["template"]["metadata"]["labels"]
    gateway_pods = only(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    # what selects the Job's pods while it runs: the previous release's policies, and the hooks before it
    in_place = [d for d in previous if d["kind"] == "NetworkPolicy" and not hook(d)[0]]
    in_place += [d for d in docs if d["kind"] == "NetworkPolicy" and "pre-upgrade" in hook(d)[0]
                 and hook(d)[1] < job_weight]
    covering = [p for p in in_place if selects(p, job_pods)]
    assert {(5432, "TCP"), (6432, "TCP"), (53, "UDP"), (53, "TCP")} <= egress_ports(covering)
    hooks = [p for p in covering if hook(p)[0]]
    assert hooks, "a hook policy covers the Job's pods"
    for policy in hooks:
        kubernetes_validate.validate(policy, KUBE_VERSIONS[0], strict=True)
        assert not selects(policy, gateway_pods), "the hook policy is the Job's alone"
        assert egress_ports([policy]) == {(5432, "TCP"), (6432, "TCP"), (53, "UDP"), (53, "TCP")}
    without_job = {**after, "store": {**after["store"], "migrationsJob": False}}
    assert regular_policy(docs) == regular_policy(render(chart, without_job))
    assert [d["metadata"]["name"] for d in render(chart, without_job) if d["kind"] == "NetworkPolicy"] == [FULLNAME]


def test_without_restricted_egress_the_jobs_hook_policy_allows_every_destination(chart: helm.Chart) -> None:
    """An upgrade that lifts restricted egress and turns on the store: the previous policy still narrows
    the Job's egress at pre-upgrade, so its hook policy opens everything, as this release intends."""
    docs = render(chart, {"store": {"url": "postgresql://gw:pw@db/gw"}})
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and hook(d)[0]]
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert policy["spec"]["egress"] == [{}]
    assert not [d for d in render(chart, {"store": {"url": "postgresql://gw:pw@db/gw"},
                                          "networkPolicy": {"enabled": False}}) if d["kind"] == "NetworkPolicy"]


def test_no_selector_of_the_gateways_pods_picks_the_migrations_jobs_pods(chart: helm.Chart) -> None:
    """The Job's pods carried the gateway's selector labels: the PodDisruptionBudget counted a migration as
    a healthy gateway pod, the HPA read its CPU as the gateway's and the previous release's NetworkPolicy
    narrowed its egress. They now carry labels of their own, which only the Job's hook policy selects."""
    values = {**EGRESS_ON, "store": {"url": "postgresql://gw:pw@db/gw"},
              "podDisruptionBudget": {"enabled": True}, "autoscaling": {"enabled": True}}
    docs = render(chart, values, revision=2, is_upgrade=True)
    job_pods = only(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    selectors = [only(docs, "Deployment")["spec"]["selector"]["matchLabels"],
                 only(docs, "Service")["spec"]["selector"],
                 only(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
                 regular_policy(docs)["spec"]["podSelector"]["matchLabels"]]
    for selector in selectors:
        assert not all(job_pods.get(k) == v for k, v in selector.items()), selector
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert [p["metadata"]["name"] for p in policies if selects(p, job_pods)] == [f"{FULLNAME}-migrate"]
