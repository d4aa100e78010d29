#!/usr/bin/env bash
# `make test` (docs/compiled.md, tests/README.md): the compiled build is made beside the tree (build/mypyc-lib:
# one compiler run on one core) while the system tools, the lint and the end-to-end tests' tools are set up and
# the unit tests run on the pure-Python sources; then its modules are put in place and the whole suite runs on
# it (below). Each phase says how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
read -r -a ARGS <<< "${PYTEST_ARGS:-}"
pytest() { "$BIN/python" -m pytest -q -p no:cacheprovider "$@"; }
took() { echo "make test: $1 took $(( $(date +%s) - $2 )) s" >&2; }
# a run's failure is the script's; a run that PYTEST_ARGS left with no test (pytest's exit 5) is not
run() { local rc=0; pytest "$@" "${ARGS[@]}" || rc=$?; [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || status=$rc; }

# every test file is in one of the runs below
stray=$(find tests -name 'test_*.py' -not -path '*/node_modules/*' \
  | grep -v -E '^tests/(unit|deploy|browser|integration|e2e)/' || true)
if [ -n "$stray" ]; then echo "make test: test files outside the runs of scripts/test-phases.sh: $stray" >&2; exit 1; fi

make -s clean-compiled
rm -rf build/mypyc-lib
mkdir -p build
start=$(date +%s)
# mypyc type-checks with mypy: a cache of its own, or it and the lint's mypy, starting at the same moment, race
# to create one (a fresh clone's lint once died with an INTERNAL ERROR)
MYPY_CACHE_DIR=build/mypyc-cache GATEWAY_COMPILE=1 "$BIN/python" setup.py -q build_ext --build-lib build/mypyc-lib \
  --build-temp build/mypyc-temp > build/compile.log 2>&1 &
compiling=$!
stop_compiling() { kill "$compiling" 2>/dev/null || true; wait "$compiling" 2>/dev/null || true; }
status=0
make -s tools lint e2e-deps || status=$?
took "the system tools, the lint and the end-to-end tests' tools" "$start"
[ "$status" -eq 0 ] && run tests/unit
took "the unit tests on the pure-Python build" "$start"
if [ "$status" -ne 0 ]; then stop_compiling; exit "$status"; fi
if ! wait "$compiling"; then cat build/compile.log >&2; exit 1; fi
took "the compile, beside them" "$start"
(cd build/mypyc-lib && find gateway -name '*.so') | while read -r so; do cp "build/mypyc-lib/$so" "$so"; done
"$BIN/python" -c 'import gateway, sys; sys.exit(0 if gateway.COMPILED else "the compiled modules are not in place")'
# The whole suite on the compiled build. First two at a time (a file's tests in one worker; tests/ports.py
# gives each worker its own ports): the unit, deploy and browser tests, and the integration tests that bound no
# time. Then alone: the integration tests marked `alone` (they bound the loop's steps, latencies or failover
# times, which another busy process on a 2-core machine would blur), and the end-to-end tests, whose model
# server takes both cores.
status=0
start=$(date +%s)
run -n 2 --dist loadfile -m "not alone" tests/unit tests/deploy tests/browser tests/integration
took "the unit, deploy, browser and integration tests, two at a time, on the compiled build" "$start"
start=$(date +%s)
run -m alone tests/integration
took "the integration tests marked alone on the compiled build" "$start"
start=$(date +%s)
run tests/e2e
took "the end-to-end tests on the compiled build" "$start"
exit "$status"
