# Two commands do everything on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
export DJANGO_SETTINGS_MODULE := memoryadmin.settings

.PHONY: run test test-sqlite lint bench venv migrate worker browser-deps clean e2e-llm test-postgres soak

# Packages are installed by uv (pinned below, itself from PyPI): the same pins from
# requirements.txt as pip would install, in a second or two instead of a minute
# (docs/dependencies.md). uv lives once per user beside its cache, not in each clone.
# First from uv's cache alone (--offline: no index request at all), then, if a pin is not
# in the cache yet, from the index. PIP=1 installs with pip instead, as before.
UV_VERSION := 0.13.10
UV_HOME ?= $(HOME)/.cache/memory-curation/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv
export UV_PYTHON_DOWNLOADS := never
# uv does not compile the packages to bytecode (all of them: ~20 s of CPU); Python compiles
# what it imports and keeps it in __pycache__ -- unless PYTHONDONTWRITEBYTECODE is set,
# when every process would compile its imports again (~6 s of CPU per Django process).
unexport PYTHONDONTWRITEBYTECODE

$(UV):
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/python -m pip install --quiet uv==$(UV_VERSION)

ifeq ($(PIP),1)
$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@
else
$(VENV)/.installed: requirements.txt | $(UV)
	test -x $(PY) || $(UV) venv --quiet --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --python $(PY) --offline -r requirements.txt 2>/dev/null \
	  || $(UV) pip install --quiet --python $(PY) -r requirements.txt
	touch $@
endif

venv: $(VENV)/.installed

migrate: venv
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0

# Web server (waitress: docs/operations.md "Web server") and worker side by side; Ctrl-C stops both
# (a clean exit), and so does either one exiting (its status is kept). `stop` names the
# two processes and clears the traps first: the old `kill 0` signalled this shell too,
# re-entering its own trap until bash crashed ("Segmentation fault").
# `bootstrap` migrates and queues the demo for the worker, so the server starts at once;
# the server loads its tokenizers after it listens (docs/operations.md "First start").
run: venv
	$(PY) manage.py bootstrap --queue-demo
	@echo "Dashboard: http://$(HOST):$(PORT)/  (worker: manage.py db_worker)"
	@stop() { trap - INT TERM EXIT; kill $$pids 2>/dev/null; wait; echo "Stopped the web server and the worker."; }; \
	trap 'stop; exit 0' INT TERM; trap stop EXIT; \
	$(PY) manage.py serve --listen $(HOST):$(PORT) & pids=$$!; \
	$(PY) manage.py db_worker --interval 1 --no-reload & pids="$$pids $$!"; \
	wait -n

worker: migrate
	$(PY) manage.py db_worker --interval 1 --no-reload

# Debian's chromium for the browser tests (never `playwright install`).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

# Lint, then the whole suite on SQLite and again on PostgreSQL (what CI runs: about
# 8 minutes on the 2-core machine, far inside CI's 90-minute limit).
test: test-sqlite test-postgres

# Lint and the suite on SQLite only: the quick local loop.
test-sqlite: venv browser-deps lint
	$(VENV)/bin/pytest

# The whole suite on a throwaway PostgreSQL server (installed from Debian when
# missing, on 127.0.0.1 on a free port, stopped afterwards).
test-postgres: venv browser-deps
	tests/helpers_reliability/postgres.sh $(VENV)/bin/pytest

# The reliability tests with many more kills, increments, jobs and examples
# (figures appended to test-artifacts/reliability.jsonl).
soak: venv
	@mkdir -p test-artifacts
	CRASH_KILLS=300 CONCURRENCY_INCREMENTS=200 WORKER_JOBS=600 REBUILD_KILLS=60 FUZZ_SCALE=10 \
	  CONCURRENCY_WEB_REQUESTS=200 RELIABILITY_LOG=test-artifacts/reliability.jsonl \
	  $(VENV)/bin/pytest -q tests/test_crash_writer.py tests/test_crash_rebuild.py \
	  tests/test_concurrency_writers.py tests/test_concurrency_worker.py tests/test_concurrency_web.py \
	  tests/test_properties_store.py tests/test_fuzz_frontmatter.py tests/test_fuzz_api.py

# Benchmarks print their figures; they are not timed unit tests.
bench: venv
	@mkdir -p .bench
	@# ext4: spread each run's folders over fresh block groups (Orlov), away from the
	@# inodes the previous run just deleted, which ext4 skips over when allocating.
	@chattr +T .bench 2>/dev/null || true
	@# bench_scale.py compares one machine with two on one PostgreSQL: a throwaway server.
	@set -e; for script in bench/bench_*.py; do echo "== $$script"; \
	  if [ "$$script" = bench/bench_scale.py ]; then tests/helpers_reliability/postgres.sh $(PY) $$script; \
	  else $(PY) $$script; fi; done

# Opt-in, not part of `make test`: the real chain against a small local model
# (llama-cpp-python's OpenAI-compatible server, built once into .e2e/venv).
e2e-llm: venv
	bash e2e/run.sh

clean:
	rm -rf $(VENV) var test-artifacts .pytest_cache .ruff_cache .mypy_cache
