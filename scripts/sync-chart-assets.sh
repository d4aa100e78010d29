#!/usr/bin/env bash
# Copies the alert rules and Grafana dashboards into the Helm chart, which cannot read files outside
# its own directory. The sources stay the single source of truth:
#   deploy/prometheus/alerts.yaml  -> helm/llm-gateway/files/alerts.yaml
#   grafana/dashboards/*.json      -> helm/llm-gateway/files/dashboards/
# Usage: scripts/sync-chart-assets.sh          copy (and delete chart copies whose source is gone)
#        scripts/sync-chart-assets.sh --check  only report drift; exit 1 when the chart is out of date
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 64 ;;
esac

alerts_src=deploy/prometheus/alerts.yaml
dash_src=grafana/dashboards
dest=helm/llm-gateway/files

[ -f "$alerts_src" ] || { echo "missing $alerts_src" >&2; exit 1; }
shopt -s nullglob
dashboards=("$dash_src"/*.json)
[ ${#dashboards[@]} -gt 0 ] || { echo "no dashboards in $dash_src" >&2; exit 1; }

drift=0
sync_file() {  # sync_file SRC DST
  if cmp -s "$1" "$2"; then return 0; fi
  drift=1
  if [ "$check" -eq 1 ]; then echo "out of date: $2 (source $1)"; else install -m 0644 "$1" "$2"; echo "copied $1 -> $2"; fi
}

mkdir -p "$dest/dashboards"
sync_file "$alerts_src" "$dest/alerts.yaml"
for src in "${dashboards[@]}"; do
  sync_file "$src" "$dest/dashboards/$(basename "$src")"
done
for copy in "$dest"/dashboards/*.json; do
  [ -f "$dash_src/$(basename "$copy")" ] && continue
  drift=1
  if [ "$check" -eq 1 ]; then echo "stale: $copy (no $dash_src/$(basename "$copy"))"; else rm -f "$copy"; echo "removed $copy"; fi
done

if [ "$check" -eq 1 ] && [ "$drift" -eq 1 ]; then
  echo "run scripts/sync-chart-assets.sh to update the chart" >&2
  exit 1
fi
