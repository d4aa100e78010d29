#!/usr/bin/env bash
# Installs the system tools that tests run for real, when missing. Idempotent and quiet.
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
# the scale-out tests create a Redis Cluster with redis-cli (tests/redis_topologies.py); Sentinels run as
# `redis-server --sentinel`, so the redis-sentinel package is not needed
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v promtool >/dev/null || need+=(prometheus)
# the control plane's tests run a real PostgreSQL server (tests/postgres_server.py finds its binaries here)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || need+=(postgresql)
# bench.footprint's test measures the first-token code's footprint under callgrind
command -v valgrind >/dev/null || need+=(valgrind)
command -v gcc >/dev/null || need+=(gcc libc6-dev)  # make compile: mypyc's C (docs/compiled.md)
# the admin console's browser tests (tests/browser) drive Debian's Chromium through Playwright
command -v chromium >/dev/null || need+=(chromium)
# No helm binary: Debian, PyPI and npm have none. The chart's tests (and scripts/chart.py) render and
# lint it with Helm's Go library through helm-python-sdk, a test dependency (helm/llm-gateway/README.md).
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The Debian packages start their services; tests start their own on free ports.
  for svc in redis-server prometheus postgresql; do $SUDO systemctl stop "$svc" 2>/dev/null || $SUDO service "$svc" stop 2>/dev/null || true; done
fi
