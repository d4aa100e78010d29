"""Every dashboard query, evaluated by a real Prometheus scraping a real gateway that serves real traffic.

The gateway runs the built-in mock provider; the official `openai` SDK sends chat requests (streamed and
not) in a background thread until the test is done. Prometheus scrapes every second and loads
deploy/prometheus/alerts.yaml, so the rules are evaluated against the gateway's real exposition too.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.contract_metrics import OTHER_BRANCHES
from tests.deploy.promql_lint import substitute
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-gw-live-team-a"
ADMIN_KEY = "adm-live-" + "a" * 32
# A key with (generous) limits, priced tokens, a guardrail and redaction: every dashboard series has a
# real value or a real zero, with the scrape's own job and instance.
GATEWAY_CONFIG = f"""\
server: {{host: 127.0.0.1}}
auth: {{keys: [{{name: team-a, key: {KEY}, rpm: 100000, tpm: 100000000}}]}}
providers: {{demo: {{type: mock, ttft_ms: 5, token_delay_ms: 1}}}}
models: [{{name: demo, guardrails: [never-said], redaction: default, affinity: session, continuation: on,
          routing: latency, deployments: [{{provider: demo, model: demo-1, price: {{input: 1, output: 2}}}}]}}]
guardrails: [{{name: never-said, type: terms, terms: ["no model says this"], stage: both}}]
redaction: {{profiles: {{default: {{rules: [secrets]}}}}}}
admin: {{keys: [{{name: ops, key: {ADMIN_KEY}}}]}}
"""
# and the control plane's store (a SQLite file in the test's temp dir), with a stored key in a team:
# the per-team panels get real series too
DEADLINE_S = 20.0


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _poll(check: Callable[[], bool], timeout: float, what: str,
          proc: subprocess.Popen[bytes] | None = None) -> None:
    """Calls check until it is true; fails after timeout or when the process under test has exited."""
    end = time.monotonic() + timeout
    stop = threading.Event()
    while not check():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the process exited with {proc.returncode}")
        if time.monotonic() > end:
            pytest.fail(f"{what}: not reached within {timeout} s")
        stop.wait(0.1)  # pacing between probes, not synchronization: the loop checks the condition


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    tmp = tmp_path_factory.mktemp("gateway")
    (tmp / "config.yaml").write_text(GATEWAY_CONFIG + f"store: {{url: 'sqlite:///{tmp}/store.db'}}\n")
    port, metrics_port = free_port(), free_port()
    proc = _start([sys.executable, "-m", "gateway", "serve", "--config", str(tmp / "config.yaml"),
                   "--port", str(port), "--metrics-port", str(metrics_port)], tmp / "gateway.log")
    try:
        _poll(lambda: _get(f"http://127.0.0.1:{port}/healthz")[0] == 200, 15, "gateway /healthz", proc)
        yield port, metrics_port
    finally:
        _stop(proc)


def _rules_for_test(tmp: Path) -> Path:
    # The TTFT SLO group evaluates once a minute in production; here every second, so the test
    # does not wait for its first evaluation.
    text = (ROOT / "deploy/prometheus/alerts.yaml").read_text(encoding="utf-8")
    assert "interval: 1m" in text
    rules = tmp / "alerts.yaml"
    rules.write_text(text.replace("interval: 1m", "interval: 1s"), encoding="utf-8")
    return rules


@pytest.fixture(scope="module")
def prometheus(gateway: tuple[int, int], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.fail("prometheus is missing: run `bash scripts/ensure-tools.sh` (Debian package prometheus)")
    tmp = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(_rules_for_test(tmp))],
        "scrape_configs": [{"job_name": "llm-gateway",
                            "static_configs": [{"targets": [f"127.0.0.1:{gateway[1]}"]}]}],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    proc = _start([exe, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                   f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], tmp / "prometheus.log")
    base = f"http://127.0.0.1:{port}"
    try:
        _poll(lambda: _get(f"{base}/-/ready")[0] == 200, 15, "prometheus /-/ready", proc)
        yield base
    finally:
        _stop(proc)


class Traffic(threading.Thread):
    """Chat requests through the gateway with the official SDK, streamed and not, until stopped."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY,
                                    max_retries=0, timeout=10)
        stored = _admin(port, "teams", {"name": "search"}) and _admin(port, "keys", {"name": "dev-1", "team": "search"})
        self.team_client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=stored["key"],
                                         max_retries=0, timeout=10)
        self.stopping = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        messages: Any = [{"role": "user", "content": "Say hello."}]
        try:
            while not self.stopping.is_set():
                stream = self.client.chat.completions.create(model="demo", messages=messages, stream=True)
                text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                reply = self.client.chat.completions.create(model="demo", messages=messages)
                assert text and reply.choices[0].message.content == text
                self.team_client.chat.completions.create(model="demo", messages=messages)
                self.sent += 3
        except BaseException as exc:  # reported by the test, not swallowed
            self.error = exc


def _admin(port: int, what: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/admin/v1/{what}", data=json.dumps(body).encode(),
                                 method="POST", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
        return answer


@pytest.fixture(scope="module")
def traffic(gateway: tuple[int, int], prometheus: str) -> Iterator[Traffic]:
    thread = Traffic(gateway[0])
    thread.start()
    try:
        yield thread
    finally:
        thread.stopping.set()
        thread.join(timeout=15)


def _query(base: str, expr: str) -> dict[str, Any]:
    status, body = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    doc: dict[str, Any] = json.loads(body) if body else {"status": "error", "error": f"HTTP {status}"}
    return doc


def _panel_queries() -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append((f"{board['uid']} / {panel['title']} / {target['refId']}", target["expr"]))
    return out


def _verdict(base: str, expr: str) -> str | None:
    """None when expr parses and returns at least one finite sample, else why not."""
    doc = _query(base, substitute(expr))
    if doc.get("status") != "success":
        return f"error: {doc.get('error')}"
    result = doc["data"]["result"]
    values = [float(s["value"][1]) for s in result] if doc["data"]["resultType"] == "vector" else []
    if not any(math.isfinite(v) for v in values):
        return f"no finite sample: {result}"
    return None


def _exempt(queries: list[tuple[str, str]], metrics_port: int) -> dict[str, str]:
    """The queries of metrics other branches add (tests/contract_metrics.py, OTHER_BRANCHES), left out
    while the gateway does not export them: one that does fails here, so the exemption goes with it."""
    exposition = _get(f"http://127.0.0.1:{metrics_port}/metrics")[1].decode()
    exported = {name for name in OTHER_BRANCHES if f"\n{name} " in exposition or f"\n{name}{{" in exposition}
    assert exported == set(), f"remove from OTHER_BRANCHES, the gateway exports them now: {exported}"
    return {name: expr for name, expr in queries if not any(m in expr for m in OTHER_BRANCHES)}


def test_every_dashboard_query_returns_data(prometheus: str, traffic: Traffic, gateway: tuple[int, int]) -> None:
    queries = _panel_queries()
    assert len(queries) > 30
    pending = _exempt(queries, gateway[1])
    end = time.monotonic() + DEADLINE_S
    pace = threading.Event()
    while pending and time.monotonic() < end and traffic.error is None:
        pending = {name: expr for name, expr in pending.items() if _verdict(prometheus, expr) is not None}
        pace.wait(0.5)  # pacing between rounds while Prometheus scrapes; the loop checks the results
    assert traffic.error is None, f"traffic failed: {traffic.error!r}"
    assert traffic.sent > 0
    failures = {name: _verdict(prometheus, expr) for name, expr in pending.items()}
    assert failures == {}


def test_template_variables_list_the_job_instance_model_provider_key_and_team(
        prometheus: str, traffic: Traffic, gateway: tuple[int, int]) -> None:
    expected = {"job": "llm-gateway", "instance": f"127.0.0.1:{gateway[1]}", "model": "demo", "provider": "demo",
                "key": "team-a", "team": "search"}
    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))
        variables = [v for v in board["templating"]["list"] if v["type"] == "query"]
        assert {v["name"] for v in variables} == set(expected)
        for var in variables:
            definition = substitute(var["query"]["query"])
            selector, label = definition[len("label_values("):-1].rsplit(", ", 1)
            url = f"{prometheus}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": selector})
            _poll(lambda u=url, v=var: expected[v["name"]] in json.loads(_get(u)[1] or b'{"data": []}')["data"],
                  DEADLINE_S, f"variable {var['name']} lists {expected[var['name']]}")


def test_per_key_cost_reaches_prometheus(prometheus: str, traffic: Traffic) -> None:
    expr = 'sum by (key) (llm_gateway_cost_usd_total{job="llm-gateway", key="team-a"})'

    def charged() -> bool:
        result = _query(prometheus, expr)["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) > 0

    _poll(charged, DEADLINE_S, "team-a's cost")
    (series,) = _query(prometheus, expr)["data"]["result"]
    assert series["metric"] == {"key": "team-a"}


def test_alert_rules_evaluate_cleanly_on_real_metrics(prometheus: str, traffic: Traffic) -> None:
    def all_evaluated() -> bool:
        status, body = _get(f"{prometheus}/api/v1/rules")
        rules = [r for g in json.loads(body)["data"]["groups"] for r in g["rules"]] if status == 200 else []
        return bool(rules) and all(r["health"] != "unknown" for r in rules)

    _poll(all_evaluated, DEADLINE_S, "every rule evaluated once")
    _, body = _get(f"{prometheus}/api/v1/rules")
    rules = [r for g in json.loads(body)["data"]["groups"] for r in g["rules"]]
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    # The SLO threshold join finds the gateway's real bucket bound: the demo's first tokens are fast.
    # A rate needs two scrapes with traffic between them: wait until the recording rule has a value.
    slow_expr = 'model:llm_gateway_ttft_slow:ratio_rate5m{model="demo"}'
    _poll(lambda: bool(_query(prometheus, slow_expr)["data"]["result"]), DEADLINE_S, "the TTFT SLO ratio")
    slow = _query(prometheus, slow_expr)["data"]["result"]
    assert [float(s["value"][1]) for s in slow] == [0.0]
    firing = _query(prometheus, 'ALERTS{alertstate="firing"}')["data"]["result"]
    assert firing == []

