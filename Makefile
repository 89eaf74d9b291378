# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.trainprof-installed

.PHONY: setup browser demo test lint bench clean

setup: $(STAMP)

# torch goes in first, pinned, so that the package's own range (torch>=2.1) is already met
# and pip never fetches a multi-GB CUDA build. The editable install also compiles the trace
# scanner and the nsys rows reader in place (src/trainprof/trace/_scan.c, trace/nsys/_rows.c),
# so a change to either reinstalls.
$(STAMP): pyproject.toml setup.py src/trainprof/trace/_scan.c src/trainprof/trace/nsys/_rows.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: setup
	$(VENV)/bin/trainprof demo

# The HTML report's tests drive a real headless Chromium (Debian's package). Installed here when
# this user can; where it cannot be, the browser tests skip with a loud reason.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	        || echo '!!! could not install chromium: the browser tests will skip !!!'; \
	    else echo '!!! chromium is missing and this user cannot install it: the browser tests will skip !!!'; fi; }

test: setup browser
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m mypy

bench: setup
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/bench_analyze.py
	$(PY) benchmarks/bench_ranks.py

clean:
	rm -rf $(VENV) trainprof-demo .pytest_cache
