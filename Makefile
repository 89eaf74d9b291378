# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.trainprof-installed

.PHONY: setup demo test lint bench clean

setup: $(STAMP)

# torch goes in first, pinned, so that the package's own range (torch>=2.1) is already met
# and pip never fetches a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: setup
	$(VENV)/bin/trainprof demo

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

bench: setup
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/bench_analyze.py

clean:
	rm -rf $(VENV) trainprof-demo .pytest_cache
