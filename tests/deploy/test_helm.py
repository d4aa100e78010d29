"""The Helm chart: lint, offline render, Kubernetes OpenAPI validation, and the gateway config it ships.

Rendering uses the Helm SDK itself (helm-python-sdk binds Helm's Go library; no helm binary, no
cluster). Core manifests are validated against the Kubernetes OpenAPI schemas with
kubernetes-validate; the Prometheus Operator CRDs are checked structurally here.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "llm-gateway"
ALERTS_SRC = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARDS_SRC = ROOT / "grafana" / "dashboards"
SYNC = ROOT / "scripts" / "sync-chart-assets.sh"
# The oldest Kubernetes minor we promise (kubeVersion in Chart.yaml allows older; we test these) and
# the newest schema kubernetes-validate ships.
KUBE_VERSIONS = ("1.31.0", kubernetes_validate.latest_version())
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
RELEASE, NAMESPACE = "rel", "llm"
FULLNAME = "rel-llm-gateway"

# Every optional feature on at once.
ALL_ON: dict[str, Any] = {
    "workers": 2,
    "redis": {"url": "redis://:s3cret-redis-pw@redis-master:6379/0"},
    "store": {"url": "postgresql://gw:s3cret-db-pw@db:5432/gw"},
    "secret": {"env": {"OPENAI_API_KEY": "sk-test-not-a-real-key"}, "generateGatewayKey": True},
    "extraEnv": [{"name": "EXTRA", "value": "1"}],
    "ingress": {"enabled": True, "annotations": {"nginx.ingress.kubernetes.io/proxy-read-timeout": "600"},
                "tls": [{"secretName": "gw-tls", "hosts": ["llm-gateway.example.com"]}]},
    "autoscaling": {"enabled": True, "inflightRequests": {"enabled": True}},
    "networkPolicy": {"egress": {"enabled": True},
                      "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                "prometheusRule": {"enabled": True}},
    "dashboards": {"enabled": True},
    "tmpVolume": {"medium": "Memory", "sizeLimit": "64Mi"},
    "podDisruptionBudget": {"maxUnavailable": 1},
    "priorityClassName": "high",
    "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca-bundle"}}],
    "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
}
GATEWAY_KEY = "test-gateway-key-0123456789abcdef"


def keyed(values: dict[str, Any] | None) -> dict[str, Any]:
    """`values` with a gateway key set, as every real release must (the chart refuses to render without
    one unless generation is opted into); left alone when the values provide or generate the key."""
    out = copy.deepcopy(values or {})
    secret = out.get("secret", {})
    if not (out.get("existingSecret") or out.get("existingConfigMap") or secret.get("generateGatewayKey")):
        out.setdefault("secret", {}).setdefault("env", {}).setdefault("GATEWAY_API_KEY", GATEWAY_KEY)
    return out


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None, **options: Any) -> list[dict[str, Any]]:
    """The manifests of an install (`options`: Helm's `revision`, `is_upgrade`, ...)."""
    out = chart.render(keyed(values), name=RELEASE, namespace=NAMESPACE, **options)
    return [doc for path, text in sorted(out.items()) if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def gateway_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == FULLNAME)
    result: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return result


def secret_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    secrets = [d for d in docs if d["kind"] == "Secret"]
    return {k: base64.b64decode(v).decode() for s in secrets for k, v in (s.get("data") or {}).items()}


def real_providers_values() -> dict[str, Any]:
    """A production-style release: the real-provider example config, its keys in secret.env."""
    config = yaml.safe_load((ROOT / "deploy" / "config" / "real-providers.example.yaml").read_text())
    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_KEY", "TEAM_A_KEY", "TEAM_B_KEY")
    # Helm merges maps with the defaults: null removes the default's mock provider.
    config["providers"]["demo"] = None
    return {"config": config, "secret": {"env": {k: f"test-{k.lower()}" for k in keys}},
            "redis": {"url": "redis://redis:6379/0"}}


VALUE_SETS = {"defaults": keyed({}), "all-on": ALL_ON}


# ---- lint and schema validation ------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_strict_has_no_warnings(values: dict[str, Any]) -> None:
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSIONS[0]}")
    assert report["errors"] == []
    # Severity 1 is informational ("icon is recommended"); 2 warning, 3 error.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_manifests_validate_against_kubernetes_schemas(
    chart: helm.Chart, values: dict[str, Any], version: str
) -> None:
    docs = render(chart, values)
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        # strict: unknown fields (typos) fail too, not only wrong types.
        kubernetes_validate.validate(doc, version, strict=True)


def test_all_on_renders_every_optional_resource(chart: helm.Chart) -> None:
    kinds = sorted({d["kind"] for d in render(chart, ALL_ON)})
    assert kinds == sorted({"ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Ingress", "Job", "NetworkPolicy",
                            "PodDisruptionBudget", "PrometheusRule", "Secret", "Service", "ServiceAccount",
                            "ServiceMonitor"})


def test_kubernetes_validation_catches_a_bad_field(chart: helm.Chart) -> None:
    """The validation above can fail: a misspelt field in the pod spec is rejected."""
    deployment = copy.deepcopy(only(render(chart), "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[0], strict=True)


@pytest.mark.parametrize("bad", [
    {"replicaCount": "two"},
    {"config": {"server": {"port": "8080"}}},
    {"autoscaling": {"enabled": "yes"}},
    {"image": {"pullPolicy": "Sometimes"}},
    {"replicas": 3},  # a typo of replicaCount: unknown top-level keys are rejected
    {"config": {"server": {"host": "127.0.0.1"}}},  # probes could not reach a loopback listener
    {"config": {"state": {"backend": "postgres"}}},
    {"redis": {"url": "http://redis:6379"}},
])
def test_values_schema_rejects_bad_values(chart: helm.Chart, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.render(bad, name=RELEASE, namespace=NAMESPACE)


# ---- the gateway config in the ConfigMap ---------------------------------------------------------



def check_config(
    config: dict[str, Any], env: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    # Only the pod's environment: what the chart's Secret provides, nothing from this shell.
    command = [sys.executable, "-m", "gateway", "check-config", str(path)]
    return subprocess.run(command, cwd=ROOT,
                          env={"PATH": os.environ.get("PATH", ""), **env},
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("values", [{}, ALL_ON, real_providers_values()],
                         ids=["defaults", "all-on", "real-providers"])
def test_rendered_config_passes_check_config(
    chart: helm.Chart, values: dict[str, Any], tmp_path: Path
) -> None:
    docs = render(chart, values)
    result = check_config(gateway_config(docs), secret_env(docs), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_users_config_passes_through_unchanged(chart: helm.Chart) -> None:
    example = yaml.safe_load((ROOT / "deploy" / "config" / "real-providers.example.yaml").read_text())
    rendered = gateway_config(render(chart, real_providers_values()))
    # Only state is the chart's: redis.url is set, so the URL comes from the Secret.
    assert rendered.pop("state") == {"backend": "redis", "redis_url": "${REDIS_URL}", "redis_mode": "single",
                                     "timeout_ms": 50, "replicas": 2}
    example.pop("state")
    assert rendered == example


def test_check_config_rejects_what_the_schema_lets_through(chart: helm.Chart, tmp_path: Path) -> None:
    """The config test can fail: a deployment naming an unknown provider renders, but is invalid."""
    values = real_providers_values()
    values["config"]["models"][0]["deployments"][0]["provider"] = "nope"
    docs = render(chart, values)
    result = check_config(gateway_config(docs), secret_env(docs), tmp_path)
    assert result.returncode == 2
    assert 'unknown provider "nope"' in result.stdout + result.stderr


def test_config_without_its_secret_fails_check_config(chart: helm.Chart, tmp_path: Path) -> None:
    docs = render(chart)
    result = check_config(gateway_config(docs), {}, tmp_path)
    assert result.returncode == 2
    assert "GATEWAY_API_KEY" in result.stdout + result.stderr


# ---- safe defaults -------------------------------------------------------------------------------


def test_defaults_require_auth_and_refuse_to_render_without_a_key(chart: helm.Chart) -> None:
    """A key the chart drew itself would change on every `helm template` (no cluster to look the old
    one up in): GitOps syncs would rotate it and roll the pods each time. So it must be set."""
    with pytest.raises(helm.HelmError, match=r"set secret\.env\.GATEWAY_API_KEY"):
        chart.render({}, name=RELEASE, namespace=NAMESPACE)
    docs = render(chart)
    config = gateway_config(docs)
    assert config["server"]["host"] == "0.0.0.0"
    assert config["auth"]["allow_unauthenticated"] is False
    assert config["auth"]["keys"] == [{"name": "default", "key": "${GATEWAY_API_KEY}"}]
    assert secret_env(docs)["GATEWAY_API_KEY"] == GATEWAY_KEY
    assert only(docs, "Service")["spec"]["type"] == "ClusterIP"
    assert not [d for d in docs if d["kind"] == "Ingress"]
    selector = only(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"]
    assert selector["app.kubernetes.io/instance"] == RELEASE


def test_a_set_key_renders_identically_every_time(chart: helm.Chart) -> None:
    first, second = render(chart), render(chart)
    assert first == second, "two `helm template` renders of the same values are the same manifests"
    pod = only(first, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert pod == only(second, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    drawn = [secret_env(render(chart, {"secret": {"generateGatewayKey": True}})) for _ in range(2)]
    assert drawn[0] != drawn[1], "the check can fail: a key drawn at render time differs every time"


def test_key_generation_is_opt_in_for_helm_install(chart: helm.Chart) -> None:
    docs = render(chart, {"secret": {"generateGatewayKey": True}})
    key = secret_env(docs)["GATEWAY_API_KEY"]
    assert len(key) == 48 and key.isalnum()
    for provided in ({"existingSecret": "gw-keys"}, {"extraEnvFrom": [{"secretRef": {"name": "k"}}]},
                     {"extraEnv": [{"name": "GATEWAY_API_KEY", "value": "x"}]}):
        chart.render(provided, name=RELEASE, namespace=NAMESPACE)  # provided elsewhere: renders


def test_extra_volumes_mount_a_private_ca(chart: helm.Chart) -> None:
    docs = render(chart, {"extraVolumes": ALL_ON["extraVolumes"], "extraVolumeMounts": ALL_ON["extraVolumeMounts"],
                          "extraEnv": [{"name": "SSL_CERT_FILE", "value": "/etc/ssl/corp/ca.pem"}]})
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "corp-ca", "configMap": {"name": "corp-ca-bundle"}} in pod["volumes"]
    mounts = container(docs)["volumeMounts"]
    assert {"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True} in mounts
    assert [m["mountPath"] for m in mounts][:2] == ["/etc/gateway", "/tmp"], "the chart's own mounts stay"


def test_existing_configmap_replaces_the_charts(chart: helm.Chart) -> None:
    docs = render(chart, {"existingConfigMap": "my-gw-config", "existingConfigMapKey": "gateway.yaml"})
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    pod = only(docs, "Deployment")["spec"]["template"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "config")
    assert volume["configMap"] == {"name": "my-gw-config", "items": [{"key": "gateway.yaml", "path": "config.yaml"}]}
    assert "checksum/config" not in pod["metadata"]["annotations"]


def test_a_provided_gateway_key_is_not_replaced(chart: helm.Chart) -> None:
    docs = render(chart, {"secret": {"env": {"GATEWAY_API_KEY": "mine"}}})
    assert secret_env(docs) == {"GATEWAY_API_KEY": "mine"}


@pytest.mark.parametrize(("values", "expected"), [
    ({}, 1),
    ({"replicaCount": 1}, 0),
    ({"replicaCount": 1, "autoscaling": {"enabled": True, "minReplicas": 3}}, 1),
    ({"podDisruptionBudget": {"enabled": False}}, 0),
])
def test_disruption_budget_only_over_several_pods(
    chart: helm.Chart, values: dict[str, Any], expected: int
) -> None:
    assert len([d for d in render(chart, values) if d["kind"] == "PodDisruptionBudget"]) == expected


def test_existing_secret_replaces_the_chart_secret(chart: helm.Chart) -> None:
    docs = render(chart, {"existingSecret": "gw-keys"})
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert container(docs)["envFrom"] == [{"secretRef": {"name": "gw-keys"}}]


def test_pod_is_hardened(chart: helm.Chart) -> None:
    docs = render(chart)
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    c = container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    # The root FS is read-only: /tmp is an emptyDir (the gateway keeps its multi-process metrics there).
    tmp_volume = [m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp_volume and "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp_volume[0])
    assert "PROMETHEUS_MULTIPROC_DIR" not in {e["name"] for e in c.get("env", [])}


def test_probes_and_ports_follow_the_config(chart: helm.Chart) -> None:
    docs = render(chart, {"config": {"server": {"port": 9000, "metrics_port": 9100}}})
    c = container(docs)
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "api"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "api"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "api"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"api": 9000, "metrics": 9100}
    service_ports = {p["name"]: p["targetPort"] for p in only(docs, "Service")["spec"]["ports"]}
    assert service_ports == {"api": "api", "metrics": "metrics"}
    assert c["args"] == ["serve", "--config", "/etc/gateway/config.yaml"]


def test_a_tls_listener_gets_https_probes(chart: helm.Chart) -> None:
    """`config.server.tls` (a certificate mounted with extraVolumes) renders, and the probes speak HTTPS:
    over plain HTTP they would fail the handshake and no pod would ever be ready."""
    tls = {"cert_file": "/etc/gateway/tls/tls.crt", "key_file": "/etc/gateway/tls/tls.key"}
    pod = container(render(chart, {"config": {"server": {"tls": tls}}}))
    assert [pod[p]["httpGet"].get("scheme") for p in ("startupProbe", "livenessProbe", "readinessProbe")] == \
        ["HTTPS"] * 3
    assert "scheme" not in container(render(chart))["readinessProbe"]["httpGet"]


def test_notes_give_https_urls_for_a_tls_listener(chart: helm.Chart) -> None:
    """The NOTES a user copies from: with `config.server.tls` the API answers only TLS, so its URL and the
    curl line say https (curl -k: the certificate names the Service, not 127.0.0.1); metrics stay HTTP."""
    tls = {"cert_file": "/etc/gateway/tls/tls.crt", "key_file": "/etc/gateway/tls/tls.key"}
    secure = notes(chart, {"config": {"server": {"tls": tls}}})
    assert "API:     https://rel-llm-gateway." in secure
    assert "curl -sNk https://127.0.0.1:8080/v1/chat/completions" in secure
    assert "Metrics: http://rel-llm-gateway." in secure
    plain = notes(chart, {})
    assert "API:     http://rel-llm-gateway." in plain
    assert "curl -sN http://127.0.0.1:8080/v1/chat/completions" in plain


@pytest.mark.parametrize("drain_s", [30, 120, 7.5])
def test_grace_period_outlasts_prestop_and_drain(chart: helm.Chart, drain_s: float) -> None:
    docs = render(chart, {"config": {"server": {"drain_s": drain_s}}})
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    sleep = container(docs)["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > int(sleep[1]) + drain_s


def test_too_short_grace_period_is_refused(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmError, match="terminationGracePeriodSeconds"):
        chart.render(keyed({"terminationGracePeriodSeconds": 30}), name=RELEASE, namespace=NAMESPACE)


def test_config_change_rolls_the_pods(chart: helm.Chart) -> None:
    def checksum(values: dict[str, Any]) -> str:
        annotations = only(render(chart, values), "Deployment")["spec"]["template"]["metadata"]["annotations"]
        result: str = annotations["checksum/config"]
        return result

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum({"config": {"logging": {"level": "debug"}}})


# ---- optional features ---------------------------------------------------------------------------


def test_redis_url_stays_out_of_the_configmap(chart: helm.Chart) -> None:
    docs = render(chart, ALL_ON)
    assert gateway_config(docs)["state"] == {"backend": "redis", "redis_url": "${REDIS_URL}", "redis_mode": "single",
                                             "timeout_ms": 50, "replicas": 2}  # the HPA's minimum
    configmaps = yaml.safe_dump([d for d in docs if d["kind"] == "ConfigMap"])
    assert "s3cret-redis-pw" not in configmaps
    assert secret_env(docs)["REDIS_URL"] == ALL_ON["redis"]["url"]


def test_redis_url_from_an_existing_secret(chart: helm.Chart) -> None:
    docs = render(chart, {"redis": {"existingSecret": "redis-auth", "existingSecretKey": "url"}})
    env = {e["name"]: e for e in container(docs)["env"]}
    assert env["REDIS_URL"]["valueFrom"] == {"secretKeyRef": {"name": "redis-auth", "key": "url"}}
    assert gateway_config(docs)["state"]["backend"] == "redis"


def test_cluster_mode_with_a_private_ca_and_replicas_from_replica_count(chart: helm.Chart) -> None:
    docs = render(chart, {"replicaCount": 5, "redis": {"url": "rediss://u:pw@node:6379/0", "mode": "cluster",
                                                       "timeoutMs": 80, "caSecret": "redis-ca"}})
    state = gateway_config(docs)["state"]
    assert (state["redis_mode"], state["timeout_ms"], state["replicas"]) == ("cluster", 80, 5)
    assert state["redis_ca_file"] == "/etc/llm-gateway/redis-ca/ca.crt"
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert mounts["redis-ca"] == "/etc/llm-gateway/redis-ca"
    volumes = {v["name"]: v for v in only(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["redis-ca"]["secret"]["secretName"] == "redis-ca"


def test_sentinel_mode_renders_a_config_check_config_accepts(chart: helm.Chart, tmp_path: Path) -> None:
    sentinel = {"master": "mymaster", "urls": ["redis://:${SENTINEL_PASSWORD}@s0:26379", "redis://s1:26379"]}
    docs = render(chart, {"redis": {"url": "redis://:pw@unused:6379/0", "mode": "sentinel", "sentinel": sentinel},
                          "secret": {"env": {"SENTINEL_PASSWORD": "s3cret-sentinel"}}})
    state = gateway_config(docs)["state"]
    assert state["sentinel"] == sentinel
    assert "s3cret-sentinel" not in yaml.safe_dump([d for d in docs if d["kind"] == "ConfigMap"])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(gateway_config(docs)))
    env = {**os.environ, "REDIS_URL": "redis://:pw@unused:6379/0", "SENTINEL_PASSWORD": "x", "GATEWAY_API_KEY": "k"}
    checked = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)],
                             capture_output=True, text=True, env=env, cwd=ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with pytest.raises(Exception, match=r"redis\.sentinel\.master is required"):
        render(chart, {"redis": {"url": "redis://x:6379/0", "mode": "sentinel"}})


def test_ingress_carries_the_sse_annotations(chart: helm.Chart) -> None:
    annotations = only(render(chart, ALL_ON), "Ingress")["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"] == "3600"
    # The user's own annotation wins over the chart's.
    assert annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "600"
    assert annotations["nginx.ingress.kubernetes.io/proxy-body-size"] == "10240k"


def test_hpa_scales_on_cpu_and_inflight_requests(chart: helm.Chart) -> None:
    docs = render(chart, ALL_ON)
    metrics = only(docs, "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert [m["type"] for m in metrics] == ["Resource", "Pods"]
    assert metrics[1]["pods"]["metric"]["name"] == "llm_gateway_inflight_requests"
    assert "replicas" not in only(docs, "Deployment")["spec"]  # the HPA owns the count


def test_service_monitor_structure(chart: helm.Chart) -> None:
    docs = render(chart, ALL_ON)
    sm = only(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["name"] == FULLNAME
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service = only(docs, "Service")
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # job = the Service's app.kubernetes.io/name label = "llm-gateway", as the alert rules expect.
    assert service["metadata"]["labels"][sm["spec"]["jobLabel"]] == "llm-gateway"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"


def test_prometheus_rule_structure_and_source(chart: helm.Chart) -> None:
    rule = only(render(chart, ALL_ON), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] == FULLNAME
    assert set(rule["spec"]) == {"groups"} and rule["spec"]["groups"]
    for group in rule["spec"]["groups"]:
        assert isinstance(group["name"], str) and group["rules"]
        for r in group["rules"]:
            assert ("alert" in r) != ("record" in r), r
            assert isinstance(r["expr"], str) and r["expr"].strip()
    # One source of truth: the rendered spec is exactly deploy/prometheus/alerts.yaml.
    assert rule["spec"] == yaml.safe_load(ALERTS_SRC.read_text())


def _threshold_rule(rule: dict[str, Any]) -> str:
    (expr,) = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]
               if r.get("record") == "model:llm_gateway_ttft_slo_threshold:le"]
    return str(expr)


def test_ttft_slo_thresholds_are_chart_values(chart: helm.Chart) -> None:
    slo = {"defaultThresholdSeconds": 5, "thresholds": [{"models": "claude-.*", "seconds": 3},
                                                         {"models": "o[0-9].*", "seconds": 20}]}
    values = copy.deepcopy(ALL_ON)
    values["metrics"]["prometheusRule"]["ttftSlo"] = slo
    expr = _threshold_rule(only(render(chart, values), "PrometheusRule"))
    count = "llm_gateway_time_to_first_token_seconds_count"
    assert expr.splitlines() == [
        f'label_replace(group by (model) ({count}{{model=~"claude-.*"}}), "le", "3", "", "")', "or on (model)",
        f'label_replace(group by (model) ({count}{{model=~"o[0-9].*"}}), "le", "20", "", "")', "or on (model)",
        f'label_replace(group by (model) ({count}), "le", "5", "", "")']
    # every other rule is the file's, unchanged
    rendered = only(render(chart, values), "PrometheusRule")["spec"]["groups"]
    source = yaml.safe_load(ALERTS_SRC.read_text())["groups"]
    strip = [[r for r in g["rules"] if r.get("record") != "model:llm_gateway_ttft_slo_threshold:le"]
             for g in rendered]
    assert strip == [[r for r in g["rules"] if r.get("record") != "model:llm_gateway_ttft_slo_threshold:le"]
                     for g in source]


def _runbook_urls(chart: helm.Chart, values: dict[str, Any]) -> dict[str, str]:
    rule = only(render(chart, values), "PrometheusRule")
    return {r["alert"]: r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]
            if "alert" in r}


def test_runbook_links_take_the_base_url_from_values(chart: helm.Chart) -> None:
    relative = _runbook_urls(chart, ALL_ON)
    assert relative and all(u.startswith("docs/runbook.md#") for u in relative.values())
    values = copy.deepcopy(ALL_ON)
    values["metrics"]["prometheusRule"]["runbookBaseUrl"] = "https://git.example.com/acme/llm-gateway/blob/v1/"
    linked = _runbook_urls(chart, values)
    assert linked == {a: "https://git.example.com/acme/llm-gateway/blob/v1/" + u for a, u in relative.items()}
    runbook = (ROOT / "docs" / "runbook.md").read_text().lower()
    for url in relative.values():  # every anchor names a heading of the runbook
        assert f"## {url.split('#')[1]}" in runbook.replace("### ", "## "), url
    values["metrics"]["prometheusRule"]["runbookBaseUrl"] = "not a url"
    with pytest.raises(helm.HelmValuesError):
        render(chart, values)


def test_a_ttft_slo_threshold_must_be_a_bucket_bound(chart: helm.Chart) -> None:
    values = copy.deepcopy(ALL_ON)
    values["metrics"]["prometheusRule"]["ttftSlo"] = {"defaultThresholdSeconds": 4, "thresholds": []}
    with pytest.raises(Exception, match="defaultThresholdSeconds"):
        render(chart, values)


def test_dashboard_configmaps_carry_exactly_the_dashboards(chart: helm.Chart) -> None:
    docs = render(chart, ALL_ON)
    dashboards = [d for d in docs if d["kind"] == "ConfigMap"
                  and d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    sources = sorted(DASHBOARDS_SRC.glob("*.json"))
    assert sources, "grafana/dashboards/*.json is missing"
    got = {name: text for d in dashboards for name, text in d["data"].items()}
    assert len(dashboards) == len(sources)
    assert got == {p.name: p.read_text() for p in sources}
    assert all(d["metadata"]["annotations"]["grafana_folder"] == "LLM Gateway" for d in dashboards)


# ---- one source of truth for rules and dashboards ------------------------------------------------


def test_chart_copies_are_byte_identical_to_the_sources() -> None:
    assert (CHART / "files" / "alerts.yaml").read_bytes() == ALERTS_SRC.read_bytes()
    copies = {p.name: p.read_bytes() for p in (CHART / "files" / "dashboards").glob("*.json")}
    assert copies == {p.name: p.read_bytes() for p in DASHBOARDS_SRC.glob("*.json")}


def test_sync_script_detects_and_repairs_drift(tmp_path: Path) -> None:
    for rel in ("scripts/sync-chart-assets.sh", "deploy/prometheus/alerts.yaml", "grafana/dashboards",
                "helm/llm-gateway/files"):
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    script = ["bash", str(tmp_path / "scripts" / "sync-chart-assets.sh")]

    assert subprocess.run([*script, "--check"], capture_output=True, check=False).returncode == 0
    (tmp_path / "deploy/prometheus/alerts.yaml").write_text("groups: []\n")
    (tmp_path / "helm/llm-gateway/files/dashboards/gone.json").write_text("{}")
    drift = subprocess.run([*script, "--check"], capture_output=True, text=True, check=False)
    assert drift.returncode == 1
    assert "alerts.yaml" in drift.stdout and "gone.json" in drift.stdout

    subprocess.run(script, capture_output=True, check=True)
    assert (tmp_path / "helm/llm-gateway/files/alerts.yaml").read_text() == "groups: []\n"
    assert not (tmp_path / "helm/llm-gateway/files/dashboards/gone.json").exists()
    assert subprocess.run([*script, "--check"], capture_output=True, check=False).returncode == 0


# ---- documentation -------------------------------------------------------------------------------


def notes(chart: helm.Chart, values: dict[str, Any]) -> str:
    out = chart.render(keyed(values), name=RELEASE, namespace=NAMESPACE)
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def test_notes_tell_how_to_get_the_key_and_warn_about_open_access(chart: helm.Chart) -> None:
    generated = notes(chart, {"secret": {"generateGatewayKey": True}})
    assert "secret rel-llm-gateway -o jsonpath='{.data.GATEWAY_API_KEY}'" in generated
    default = notes(chart, {})
    assert "jsonpath" not in default  # the key is the one the values set
    assert "WARNING" not in default
    assert "per pod (2 pods)" in default  # memory state with two replicas
    assert "only the built-in mock provider" in default
    real = notes(chart, real_providers_values())
    assert "jsonpath" not in real  # the config uses its own keys: nothing generated
    assert "per pod" not in real and "mock provider" not in real
    open_access = notes(chart, {"config": {"auth": {"allow_unauthenticated": True}}})
    assert "WARNING: config.auth.allow_unauthenticated is true" in open_access


def test_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    # Subtrees passed to Kubernetes or the gateway as they are: documented as one row each.
    verbatim = {"config", "podSecurityContext", "securityContext", "resources", "autoscaling.behavior"}

    def leaves(node: Any, prefix: str) -> Iterator[str]:
        if isinstance(node, dict) and node and prefix not in verbatim:
            for key, child in node.items():
                yield from leaves(child, f"{prefix}.{key}" if prefix else key)
        else:
            yield prefix

    missing = [key for key in leaves(values, "") if f"`{key}`" not in readme]
    assert missing == []


def test_store_url_from_an_existing_secret_with_a_migrations_job(chart: helm.Chart, tmp_path: Path) -> None:
    values = {"store": {"existingSecret": "gateway-db"}, "admin": {"existingSecret": "gateway-admin"}}
    docs = render(chart, values)
    config = gateway_config(docs)
    assert config["store"] == {"url": "${GATEWAY_STORE_URL}"}
    assert config["admin"] == {"keys": [{"name": "platform", "key": "${GATEWAY_ADMIN_KEY}"}]}
    env = {e["name"]: e for e in container(docs)["env"]}
    assert env["GATEWAY_STORE_URL"]["valueFrom"] == {"secretKeyRef": {"name": "gateway-db", "key": "url"}}
    assert env["GATEWAY_ADMIN_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "gateway-admin",
                                                                      "key": "admin-key"}}
    job = only(docs, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"
    migrate = job["spec"]["template"]["spec"]["containers"][0]
    assert migrate["args"] == ["migrate", "--config", "/etc/gateway/config.yaml"]
    assert {e["name"] for e in migrate["env"]} >= {"GATEWAY_STORE_URL", "GATEWAY_ADMIN_KEY"}
    hook_config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-migrate"))
    assert yaml.safe_load(hook_config["data"]["config.yaml"]) == config
    result = check_config(config, {**secret_env(docs), "GATEWAY_STORE_URL": "postgresql://u:p@db:5432/g",
                                   "GATEWAY_ADMIN_KEY": "an-admin-key"}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Job" not in {d["kind"] for d in render(chart, {"store": {"existingSecret": "x", "migrationsJob": False}})}
    assert "Job" not in {d["kind"] for d in render(chart)}


def test_store_url_stays_out_of_the_configmap(chart: helm.Chart) -> None:
    docs = render(chart, ALL_ON)
    configmaps = yaml.safe_dump([d for d in docs if d["kind"] == "ConfigMap"])
    assert "s3cret-db-pw" not in configmaps
    assert secret_env(docs)["GATEWAY_STORE_URL"] == "postgresql://gw:s3cret-db-pw@db:5432/gw"


# ---- identity, admin roles and store tuning in `config` ------------------------------------------

ENG_ADMIN_DIGEST = "ab" * 32


def identity_values() -> dict[str, Any]:
    """IdP identity (`auth.jwt`), admin roles and console SSO (`admin`), store tuning (`store`), as
    docs/identity.md and docs/keys-teams-spend.md configure them; the store's URL from a Secret."""
    config = {
        "auth": {"jwt": {"issuer": "https://idp.example.com", "audience": "llm-gateway", "leeway_s": 30,
                         "groups": {"eng": {"team": "eng", "models": ["demo"]}}}},
        "admin": {"jwt_groups": {"platform-admins": "admin", "eng-leads": {"role": "team_admin", "team": "eng"}},
                  "console": {"oidc_client_id": "gateway-console"},
                  "keys": [{"name": "ops", "key": "${OPS_ADMIN_KEY}", "role": "viewer"},
                           {"name": "eng-admin", "key_sha256": ENG_ADMIN_DIGEST, "role": "team_admin",
                            "team": "eng"}]},
        "store": {"poll_s": "${STORE_POLL_S}", "ledger_wait_s": 0.5, "connect_timeout_s": 3,
                  "ledger_journal": "off"},
    }
    return {"config": config, "store": {"existingSecret": "gateway-db"},
            "secret": {"env": {"OPS_ADMIN_KEY": "an-ops-admin-key", "STORE_POLL_S": "1"}}}


def schema_accepts(schema: dict[str, Any], key: str) -> bool:
    """Whether the values schema lets `config.<key>` through, for a key as `config_keys()` spells it
    (`models[].retry.max_attempts`, `providers.<name>.proxy`): a property, or an open mapping."""
    def resolve(node: Any) -> Any:
        while isinstance(node, dict) and ("$ref" in node or "anyOf" in node):
            if "$ref" in node:
                node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
            else:  # the mapping branch, if any: `jwt_groups.<group>` is a role or {role, team}
                node = next((b for b in node["anyOf"] if resolve(b).get("type") == "object"), node["anyOf"][0])
        return node

    node = schema["properties"]["config"]
    for part in key.split("."):
        name, is_list = part.removesuffix("[]"), part.endswith("[]")
        node = resolve(node)
        if name.startswith("<") or name not in node.get("properties", {}):
            extra = node.get("additionalProperties", True)
            if extra is False:
                return False
            if extra is True:
                return True  # an open mapping: the gateway checks what is under it
            node = extra
        else:
            node = node["properties"][name]
        if is_list:
            node = resolve(node).get("items")
            if node is None:
                return True
    return True


def test_values_schema_accepts_every_gateway_config_key() -> None:
    """`config` is the gateway's config: the schema must not refuse a key the gateway accepts
    (gateway/config/load.py's config_keys(), the list docs/reference.md documents)."""
    from gateway.config.load import config_keys

    schema = json.loads((CHART / "values.schema.json").read_text())
    refused = sorted(k for k in config_keys() if not schema_accepts(schema, k))
    assert refused == []
    assert not schema_accepts(schema, "auth.jwt.issuer_url"), "the check can fail: a typo is refused"


def test_values_schema_accepts_every_provider_type() -> None:
    """A provider type the gateway has (providers/registry.py) is one a chart install may configure:
    vertex and gemini were refused."""
    from gateway.providers.registry import PROVIDER_TYPES

    schema = json.loads((CHART / "values.schema.json").read_text())
    providers = schema["properties"]["config"]["properties"]["providers"]["additionalProperties"]
    assert sorted(providers["properties"]["type"]["enum"]) == sorted(PROVIDER_TYPES)


def test_identity_admin_roles_and_store_tuning_render_and_pass_check_config(
    chart: helm.Chart, tmp_path: Path
) -> None:
    values = identity_values()
    docs = render(chart, values)
    config = gateway_config(docs)
    assert config["auth"]["jwt"] == values["config"]["auth"]["jwt"]
    assert config["admin"] == values["config"]["admin"]
    assert config["store"] == {**values["config"]["store"], "url": "${GATEWAY_STORE_URL}"}
    result = check_config(config, {**secret_env(docs), "GATEWAY_STORE_URL": "postgresql://u:p@db:5432/g"}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_admin_secret_key_is_added_to_the_configured_admin_section(chart: helm.Chart, tmp_path: Path) -> None:
    values = {**identity_values(), "admin": {"existingSecret": "gateway-admin"}}
    docs = render(chart, values)
    admin = gateway_config(docs)["admin"]
    configured = values["config"]["admin"]
    assert admin["keys"] == [*configured["keys"], {"name": "platform", "key": "${GATEWAY_ADMIN_KEY}"}]
    assert admin["jwt_groups"] == configured["jwt_groups"]
    assert admin["console"] == configured["console"]
    result = check_config(gateway_config(docs), {**secret_env(docs), "GATEWAY_STORE_URL": "postgresql://u:p@db:5432/g",
                                                 "GATEWAY_ADMIN_KEY": "the-platform-admin-key"}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    with pytest.raises(helm.HelmError, match=r'admin\.name "ops" is also the name of a key in config\.admin\.keys'):
        render(chart, {**values, "admin": {"existingSecret": "gateway-admin", "name": "ops"}})


@pytest.mark.parametrize(("bad", "named"), [
    ({"auth": {"jwt": {"issuer_url": "https://idp.example.com"}}}, "issuer_url"),
    ({"admin": {"jwt_groups": {"ops": "superuser"}}}, "jwt_groups/ops"),
    ({"admin": {"console": {"client_id": "c"}}}, "client_id"),
    ({"store": {"ledger_wait": 1}}, "ledger_wait"),
    ({"store": {"ledger_wait_s": "soon"}}, "ledger_wait_s"),
])
def test_values_schema_names_a_bad_key_in_the_new_sections(chart: helm.Chart, bad: dict[str, Any], named: str) -> None:
    """Still strict where it helps: a misspelt key or a wrong type is refused at render, by its name."""
    with pytest.raises(helm.HelmValuesError, match=named):
        chart.render(keyed({"config": bad}), name=RELEASE, namespace=NAMESPACE)


# ---- cloud credentials -----------------------------------------------------------------------------


def test_irsa_role_annotates_the_service_account(chart: helm.Chart) -> None:
    """`aws.irsaRoleArn` (EKS IRSA for bedrock providers) beside the user's own annotations; nothing
    without it."""
    role = "arn:aws:iam::123456789012:role/llm-gateway-bedrock"
    docs = render(chart, {"aws": {"irsaRoleArn": role}, "serviceAccount": {"annotations": {"team": "ml"}}})
    assert only(docs, "ServiceAccount")["metadata"]["annotations"] == {
        "team": "ml", "eks.amazonaws.com/role-arn": role, "eks.amazonaws.com/sts-regional-endpoints": "true"}
    docs = render(chart, {"aws": {"irsaRoleArn": role, "stsRegionalEndpoints": False}})
    assert only(docs, "ServiceAccount")["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": role}
    assert "annotations" not in only(render(chart), "ServiceAccount")["metadata"]
    with pytest.raises(Exception, match="irsaRoleArn"):
        render(chart, {"aws": {"irsaRoleArn": "not-an-arn"}})


def test_a_bedrock_provider_config_passes_check_config(chart: helm.Chart, tmp_path: Path) -> None:
    config = {"providers": {"demo": None, "bedrock-us": {"type": "bedrock", "region": "us-east-1"}},
              "models": [{"name": "claude", "deployments": [
                  {"provider": "bedrock-us", "model": "us.anthropic.claude-sonnet-4-5-20250929-v1:0"}]}]}
    docs = render(chart, {"config": config, "aws": {"irsaRoleArn": "arn:aws:iam::123456789012:role/r"}})
    result = check_config(gateway_config(docs), secret_env(docs), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert gateway_config(docs)["providers"]["bedrock-us"] == {"type": "bedrock", "region": "us-east-1"}


def test_the_readmes_chart_commands_run_without_a_helm_binary(tmp_path: Path) -> None:
    """helm/llm-gateway/README.md's block for `make test`'s venv (no helm binary to be had from the
    registries it installs from): lint passes, the render has the Deployment and the PrometheusRule."""
    from tests.docs_blocks import block

    script = block("helm/llm-gateway/README.md", "chart-template").text
    script = script.replace(".venv/bin/python", sys.executable)
    script = script.replace("scripts/chart.py", str(ROOT / "scripts" / "chart.py"))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "llm-gateway: ok"
    kinds = [d["kind"] for d in yaml.safe_load_all((tmp_path / "rendered.yaml").read_text()) if d]
    assert "Deployment" in kinds and "PrometheusRule" in kinds
