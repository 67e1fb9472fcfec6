# mailstep: the Makefile is the interface. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export TZ := UTC
export PYTHONPATH := $(CURDIR)
# Bytecode is cached (__pycache__: ignored by git, left out of the Lambda asset, which ships its
# own): each CLI call and local runtime a test starts imports compiled modules instead of compiling
# them again, as it would where the environment sets PYTHONDONTWRITEBYTECODE (empty = write).
export PYTHONDONTWRITEBYTECODE :=

LOCK := requirements.lock
PYTEST := $(PY) -m pytest
# The e2e run also checks that every IAM grant of the template is used by some request
# (tests/e2e/conftest.py); it needs the whole e2e tier in one session.
GRANTS_CHECK := MAILSTEP_GRANTS_CHECK=1

.PHONY: setup lambda-python chromium lock test check test-unit test-integration test-infra test-e2e lint format synth \
	bootstrap diff deploy destroy demo dev bench clean

setup: $(VENV)/.installed lambda-python

# Every package at the version requirements.lock pins (the Lambda asset installs from it too).
# uv (itself pinned in the lock) installs them, bytecode compiled on every core: 44 s from PyPI
# where pip took 78 s. Compiled at install, not at first import: the test workers and the
# processes they start would each compile the same modules at once. pip stays in the
# virtualenv: the asset's bundling and the local runtime's boto3 install with it.
UV_PIN = $(shell grep -oE '^uv==[^ ;]+' $(LOCK))
$(VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "$(UV_PIN)"
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(PY) --constraint $(LOCK) -e ".[dev]"
	touch $@

# Re-resolve requirements.lock after a change to pyproject.toml's dependencies: every package,
# transitive ones included, at an exact version, with markers for the Pythons and platforms
# it must install on (3.11+ for development, the Lambda runtime's 3.12). Versions already in
# the lock are kept when they still fit; `make lock LOCK_ARGS=--upgrade` moves everything to
# the newest, `LOCK_ARGS="--upgrade-package NAME"` one package.
lock:
	@test -x $(BIN)/uv || $(MAKE) $(VENV)/.installed
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
		--custom-compile-command "make lock" --quiet $(LOCK_ARGS) -o $(LOCK)

# The local runtime runs every function on Python 3.12, the Lambda runtime's version:
# found on PATH or in pyenv, else installed with pyenv (docs/local-runtime.md).
lambda-python: $(VENV)/.installed
	@$(PY) -c "from local_aws.artifact import lambda_python; lambda_python()" 2>/dev/null \
		|| pyenv install --skip-existing 3.12

# The browser test (tests/e2e/test_signup_browser.py) drives Debian's headless Chromium. It is
# installed with apt when missing: as root, or through sudo; otherwise this stops and says how.
CHROMIUM ?= /usr/bin/chromium
export MAILSTEP_CHROMIUM := $(CHROMIUM)
chromium:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; \
	  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo"; \
	  else echo "make: $(CHROMIUM) is missing and neither root nor sudo is available to install it;" \
	    "run 'sudo apt-get install -y chromium' (Debian/Ubuntu), or set CHROMIUM=/path/to/chromium" >&2; exit 1; fi; \
	  command -v apt-get >/dev/null || { echo "make: no apt-get here; install Chromium and set CHROMIUM=/path/to/it" >&2; exit 1; }; \
	  echo "installing Debian's chromium (for the browser test) ..."; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@test -x $(CHROMIUM)

# Everything, as CI runs it (unit, integration, infra, e2e with the grants check). Three workers
# on two cores, a file each at a time: the e2e tier waits on queues, leases and the runtime's
# answers, and a third worker runs in those waits (docs/testing.md, Test tiers).
test: setup chromium
	$(GRANTS_CHECK) $(PYTEST) -n 3 --dist loadfile --no-loadscope-reorder -m "not bench" --durations=15

# The inner loop: lint, the unit and the integration tiers (no local runtime, no synthesis).
# Three workers on two cores, each taking the next test when it is free: these tiers wait on
# rate limiters and back-offs now and then, and a third worker fills those waits.
check: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(PYTEST) -n 3 --dist worksteal -m "not bench" tests/unit tests/integration

# One tier at a time (tests/<tier>; docs/testing.md).
test-unit: setup
	$(PYTEST) -p no:xdist -m "not bench" tests/unit

test-integration: setup
	$(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder -m "not bench" tests/integration

test-infra: setup
	$(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder -m "not bench" tests/infra

test-e2e: setup chromium
	$(GRANTS_CHECK) $(PYTEST) -n 3 --dist loadfile --no-loadscope-reorder -m "not bench" tests/e2e

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Deploying (docs/deploy.md). The CDK CLI runs through npx at a pinned version: CLI releases are
# numbered apart from aws-cdk-lib (2.1xxx) and read the cloud assembly of every aws-cdk-lib
# released before them; 2.1148.1 (2026-11-11) is newer than requirements.lock's aws-cdk-lib
# 2.275.0 (2026-10-26). Move it forward when the lock's aws-cdk-lib moves past it.
CDK_VERSION ?= 2.1148.1
CDK := npx --yes aws-cdk@$(CDK_VERSION)
# The command that synthesizes: this virtualenv's interpreter, whatever `python` is first on
# PATH (cdk.json's "app", `python app.py`, is for a shell with the virtualenv activated).
# Another virtualenv: make deploy VENV=/path/to/venv; no virtualenv at all (CI that installed
# the packages into its python): make deploy PY=python.
CDK_APP = $(PY) app.py
# Context for one run, as the CDK CLI takes it (synth accepts only -c options):
#   make deploy ARGS="-c mailstep:sesDomain=mail.example.com -c 'mailstep:fromAddress=Acme <hello@mail.example.com>'"
ARGS ?=

synth: setup
	$(CDK_APP) $(ARGS)

bootstrap: setup
	$(CDK) bootstrap --app "$(CDK_APP)" $(ARGS)

diff: setup
	$(CDK) diff --app "$(CDK_APP)" $(ARGS)

deploy: setup
	$(CDK) deploy --app "$(CDK_APP)" $(ARGS)

destroy: setup
	$(CDK) destroy --app "$(CDK_APP)" $(ARGS)

demo: setup
	$(BIN)/mailstep demo

dev: setup
	$(BIN)/mailstep dev

bench: setup
	$(PY) -m bench
	$(PY) -m bench capacity
	$(PY) -m bench coldstart
	$(PYTEST) -p no:xdist -m bench -q

clean:
	rm -rf cdk.out .pytest_cache .mypy_cache .ruff_cache
