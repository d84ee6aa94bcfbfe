# Two commands do all the set-up on a fresh machine (see README.md):
#   make demo   - install into .venv and run Grace's main job on the sample cluster
#   make test   - install into .venv and run the whole test suite (slow tests included)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -e '.[dev,torch]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/grace demo

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/pytest -q --durations=25

typecheck: $(STAMP)
	$(BIN)/mypy

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/scheduler.py
	$(BIN)/python benchmarks/twin_philly.py
	$(BIN)/python benchmarks/control_plane.py
	$(BIN)/python benchmarks/runtime.py
	$(BIN)/python benchmarks/twin_bursting.py
	$(BIN)/python benchmarks/twin_compare_parallel.py
	$(BIN)/python benchmarks/metrics_scrape.py
	@# needs a running Slurm (sudo bash .ci/slurm-up.sh); skipped, not failed, without one
	@if ! command -v sbatch >/dev/null 2>&1; then \
		echo "skipping benchmarks/slurm_start.py: no sbatch on PATH (a test Slurm: sudo bash .ci/slurm-up.sh)"; \
	elif ! timeout 20 sinfo -h >/dev/null 2>&1; then \
		echo "skipping benchmarks/slurm_start.py: sbatch is on PATH but no Slurm controller answers sinfo (sudo bash .ci/slurm-up.sh)"; \
	else \
		$(BIN)/python benchmarks/slurm_start.py; \
	fi

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache .mypy_cache
