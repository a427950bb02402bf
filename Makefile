# The few commands people type. Each creates .venv and builds the extension when needed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint rust-test py-test bench build clean

# The virtual environment with every dependency (torch included, installed once).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q maturin
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q --extras dev,torch
	touch $(STAMP)

# Rebuild the extension in place (release); cargo makes this a no-op when nothing changed.
build: $(STAMP)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q

demo: build
	$(PY) -m neuroneval.demo

lint: $(STAMP)
	cargo fmt --all --check
	cargo clippy --all-targets --release -- -D warnings
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest neuroneval._core --allowlist .stubtest-allowlist

rust-test:
	cargo test --release -q

py-test: build
	$(PY) -m pytest -q python/neuroneval tests benches --benchmark-disable

test: lint rust-test py-test

# Timed benchmarks at the full workload (about a minute): each run is saved; from the second run on it is compared with the last
# saved one and fails when the fastest round regresses by over 15%.
bench: build
	@if ls .benchmarks/*/*.json >/dev/null 2>&1; then \
		compare="--benchmark-compare --benchmark-compare-fail=min:15%"; \
	else \
		echo "no saved benchmark run yet: this run becomes the baseline"; compare=""; \
	fi; \
	NEURONEVAL_BENCH_FULL=1 $(PY) -m pytest benches -q --benchmark-only --benchmark-autosave $$compare -s

clean:
	rm -rf $(VENV) target
