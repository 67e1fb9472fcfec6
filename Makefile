# mailstep: the Makefile is the interface. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export TZ := UTC
export PYTHONPATH := $(CURDIR)

.PHONY: setup lambda-python test lint format synth demo dev bench clean

setup: $(VENV)/.installed lambda-python

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

# The local runtime runs every function on Python 3.12, the Lambda runtime's version:
# found on PATH or in pyenv, else installed with pyenv (docs/local-runtime.md).
lambda-python: $(VENV)/.installed
	@$(PY) -c "from cli.local.artifact import lambda_python; lambda_python()" 2>/dev/null \
		|| pyenv install --skip-existing 3.12

# The e2e run also checks that every IAM grant of the template is used by some request
# (tests/e2e/conftest.py).
test: setup
	MAILSTEP_GRANTS_CHECK=1 $(PY) -m pytest -n 2 --dist loadfile -m "not bench"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

synth: setup
	$(PY) app.py

demo: setup
	$(BIN)/mailstep demo

dev: setup
	$(BIN)/mailstep dev

bench: setup
	$(PY) -m bench
	$(PY) -m pytest -p no:xdist -m bench -q

clean:
	rm -rf cdk.out .pytest_cache .mypy_cache .ruff_cache
