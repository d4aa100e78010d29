#!/usr/bin/env bash
# `make test`'s runs of the suite (docs/compiled.md): the unit tests on the pure-Python sources while the
# compiled build is made beside the tree (build/mypyc-lib: one compiler run on one core, the tests on the
# other), then its modules put in place and the whole suite run on it (below). Each phase says how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
read -r -a ARGS <<< "${PYTEST_ARGS:-}"
pytest() { "$BIN/python" -m pytest -q -p no:cacheprovider "$@"; }
took() { echo "make test: $1 took $(( $(date +%s) - $2 )) s" >&2; }

# every test file is in one of the runs below
stray=$(find tests -name 'test_*.py' -not -path '*/node_modules/*' \
  | grep -v -E '^tests/(unit|deploy|browser|integration|e2e)/' || true)
if [ -n "$stray" ]; then echo "make test: test files outside the runs of scripts/test-phases.sh: $stray" >&2; exit 1; fi

make -s clean-compiled
rm -rf build/mypyc-lib
mkdir -p build
start=$(date +%s)
GATEWAY_COMPILE=1 "$BIN/python" setup.py -q build_ext --build-lib build/mypyc-lib --build-temp build/mypyc-temp \
  > build/compile.log 2>&1 &
compiling=$!
status=0
pytest tests/unit "${ARGS[@]}" || status=$?
took "the unit tests on the pure-Python build" "$start"
if [ "$status" -ne 0 ]; then kill "$compiling" 2>/dev/null || true; wait "$compiling" 2>/dev/null || true; exit "$status"; fi
if ! wait "$compiling"; then cat build/compile.log >&2; exit 1; fi
took "the compile, beside them" "$start"
(cd build/mypyc-lib && find gateway -name '*.so') | while read -r so; do cp "build/mypyc-lib/$so" "$so"; done
"$BIN/python" -c 'import gateway, sys; sys.exit(0 if gateway.COMPILED else "the compiled modules are not in place")'
# The whole suite on the compiled build in two runs. The unit, deploy and browser tests two at a time (a
# file's tests in one worker, tests/ports.py gives each worker its own ports); then the integration and
# end-to-end tests alone, since many of them bound the loop's steps, latencies and failover times, which
# another busy process on a 2-core machine would blur.
status=0
start=$(date +%s)
pytest -n 2 --dist loadfile tests/unit tests/deploy tests/browser "${ARGS[@]}" || status=$?
took "the unit, deploy and browser tests on the compiled build" "$start"
start=$(date +%s)
pytest tests/integration tests/e2e "${ARGS[@]}" || status=$?
took "the integration and end-to-end tests on the compiled build" "$start"
exit "$status"
