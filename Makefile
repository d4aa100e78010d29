# `make run` and `make test` work on a fresh machine: they create .venv and install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# `make run` gets a venv of its own with the runtime dependencies only (no SDKs, linters, Helm tooling);
# `make run EXTRAS=aws,gcp` adds pyproject's extras (aws: Bedrock's botocore, gcp: Vertex's google-auth)
RUN_VENV ?= .venv-run
EXTRAS ?=
comma := ,
RUN_STAMP := $(RUN_VENV)/.installed-stamp$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)))
PYTEST_ARGS ?=
ARGS ?=

.PHONY: run test lint typecheck unit tools e2e-deps bench bench-ws clean compile clean-compiled

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

$(RUN_STAMP): pyproject.toml
	test -x $(RUN_VENV)/bin/python || $(PY) -m venv $(RUN_VENV)
	$(RUN_VENV)/bin/python -m pip install -q -U pip
	$(RUN_VENV)/bin/python -m pip install -q -e .$(if $(EXTRAS),'[$(EXTRAS)]')
	touch $(RUN_STAMP)

run: $(RUN_STAMP)
	$(RUN_VENV)/bin/gateway serve $(ARGS)

# System tools the tests drive for real (redis-server, prometheus/promtool, valgrind, ...).
tools:
	bash scripts/ensure-tools.sh

# What tests/e2e runs for real: a portable llama.cpp server (built once per machine, cached in
# ~/.cache/llm-gateway/wheels), the Gemma 3 270M GGUF, the openai Node SDK.
e2e-deps: $(STAMP)
	bash scripts/e2e-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check gateway tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The compiled build made while the system tools, the lint, the end-to-end tests' tools and the pure-Python
# build's unit tests run beside it, then the whole suite on the compiled build, which is what the image ships
# and `make bench` measures (scripts/test-phases.sh, docs/compiled.md).
test: $(STAMP)
	BIN=$(BIN) PYTEST_ARGS="$(PYTEST_ARGS)" bash scripts/test-phases.sh

# gateway/core and gateway/providers/convert compiled with mypyc, in place (its modules shadow their sources until `make clean-compiled`;
# an edited source makes `import gateway` refuse until one of the two is run again)
compile: $(STAMP)
	GATEWAY_COMPILE=1 $(BIN)/python setup.py -q build_ext --inplace --build-temp build/mypyc-temp

clean-compiled:
	find gateway -name '*.so' -delete
	rm -f gateway/core/COMPILED

bench: $(STAMP) compile  ## make bench BENCH_ARGS="--baseline ../base --store --only S1,S2"; then the agent turns (bench-ws)
	$(BIN)/python -m bench.run $(BENCH_ARGS)
	$(BIN)/python -m bench.ws_turns $(BENCH_WS_ARGS)

bench-ws: $(STAMP) compile  ## the compiled build, as `make bench`: agent turns over the Responses API's WebSocket mode vs HTTP (bench/README.md)
	$(BIN)/python -m bench.ws_turns $(BENCH_WS_ARGS)

clean: clean-compiled
	rm -rf $(VENV) $(RUN_VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
