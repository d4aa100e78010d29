"""The docs' runnable blocks, so tests run what a reader copies (tests/README.md, "The docs' commands").

A fenced block right after a line `<!-- docs-test: NAME -->` is the block NAME of that file. Tests run
them as a reader would, in a terminal of their own (`Terminal`): each shell block with bash, the
variables it exports kept for the next block, a `gateway serve` line started in the background. The only
changes a test makes to a block are addresses (host, port, an upstream's base URL, a database path) and
a secret the docs could not know (`sk-gw-...`, what an earlier block printed)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!--\s*docs-test:\s*([A-Za-z0-9_.-]+)\s*-->\s*$")
FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")
# every file a test runs blocks of; a marker anywhere else would be a block no test runs
DOCS = ("README.md", "docs/keys-teams-spend.md", "docs/agents.md", "docs/cloud-providers.md",
        "helm/llm-gateway/README.md")


@dataclass(frozen=True)
class Block:
    name: str
    lang: str
    text: str
    where: str  # file:line of the marker, for failure messages


def blocks(relpath: str) -> dict[str, Block]:
    """The marked blocks of one file, by name."""
    lines = (ROOT / relpath).read_text().splitlines()
    found: dict[str, Block] = {}
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        where = f"{relpath}:{i + 1}"
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        assert fence, f"{where}: a docs-test marker must be followed by a fenced block"
        end = next((j for j in range(i + 2, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"{where}: the block is not closed"
        assert m.group(1) not in found, f"{where}: a second block named {m.group(1)}"
        found[m.group(1)] = Block(m.group(1), fence.group(1), "\n".join(lines[i + 2:end]) + "\n", where)
    return found


def block(relpath: str, name: str) -> Block:
    found = blocks(relpath)
    assert name in found, f"{relpath} has no block marked <!-- docs-test: {name} --> (it has {sorted(found)})"
    return found[name]


def at_port(text: str, port: int, metrics_port: int | None = None) -> str:
    """The docs' addresses (127.0.0.1:8080, gateway:8080, the metrics port 9464) moved to free ports."""
    text = re.sub(r"\b(127\.0\.0\.1|localhost|gateway):8080\b", f"127.0.0.1:{port}", text)
    text = re.sub(r"\bport: 8080\b", f"port: {port}", text)
    if metrics_port is not None:
        text = re.sub(r"\b9464\b", str(metrics_port), text)
    return text


class Terminal:
    """A reader's shell session: blocks run one after another in `cwd`, exported variables carried."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.cwd = cwd
        self.env = env
        self.servers: list[subprocess.Popen[bytes]] = []

    def run(self, script: str, timeout: float = 60) -> str:
        """Run a shell block (its `gateway serve` lines in the background); its stdout. Fails the test on
        a non-zero exit, with the block's output."""
        out: list[str] = []
        foreground: list[str] = []
        for line in script.splitlines():
            if line.strip().startswith("gateway serve"):
                out.append(self._shell("\n".join(foreground), timeout))
                foreground = []
                self._serve(line)
            else:
                foreground.append(line)
        out.append(self._shell("\n".join(foreground), timeout))
        return "".join(out)

    def _shell(self, script: str, timeout: float) -> str:
        if not script.strip():
            return ""
        env_file = self.cwd / ".docs-test-env"
        wrapped = f"set -euo pipefail\n{script}\nenv -0 > {shlex.quote(str(env_file))}\n"
        done = subprocess.run(["bash", "-c", wrapped], cwd=self.cwd, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        assert done.returncode == 0, (f"exit {done.returncode}:\n{script}\n--- stdout\n{done.stdout}"
                                      f"\n--- stderr\n{done.stderr}")
        self.env = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        return done.stdout

    def _serve(self, line: str) -> None:
        log = open(self.cwd / f"serve-{len(self.servers)}.log", "wb")  # noqa: SIM115 (kept open for the child)
        self.servers.append(subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=self.cwd, env=self.env,
                                             stdout=log, stderr=subprocess.STDOUT))

    def wait_ready(self, port: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.servers:
                assert proc.poll() is None, self.logs()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)  # polling a child process for readiness, bounded by the deadline
        raise AssertionError("the gateway did not start:\n" + self.logs())

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.cwd.glob("serve-*.log")))

    def close(self) -> None:
        for proc in self.servers:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def reader_env(bin_dir: Path, home: Path) -> dict[str, str]:
    """A clean environment: the venv's commands first on PATH, no GATEWAY_* left from the test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "OPENAI_", "ANTHROPIC_"))}
    env.update(PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", HOME=str(home))
    return env
