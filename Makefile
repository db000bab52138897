# edgetune — every target installs what it needs first (`make install` is idempotent).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test protos lint bench clean

install: $(STAMP)

# Reinstalled only when the dependency pins change. constraints.txt pins every version
# (generated from a resolved environment); torch 2.13.0 comes from the local CPU wheel.
$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,deploy,flower]'
	touch $(STAMP)

demo: install
	$(BIN)/python -m edgetune.demo

test: install
	$(BIN)/python -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

protos: install
	$(BIN)/python -m edgetune.proto.generate

lint: install
	$(BIN)/ruff check libs services tests experiments

bench: install
	$(BIN)/python -m edgetune.bench --out bench-results/results.json

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
