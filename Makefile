# Stepwise. `make demo` runs the app with demo jobs; `make test` runs the whole test suite.
# Both first run scripts/bootstrap.sh, which prepares a fresh Debian machine (see README.md).

PY := .venv/bin/python
ARGS ?=

.PHONY: demo test lint bootstrap

demo: bootstrap
	$(PY) manage.py rundemo $(ARGS)

test:
	bash scripts/bootstrap.sh --tests
	.venv/bin/pytest $(ARGS)

lint: bootstrap
	.venv/bin/ruff format --check .
	.venv/bin/ruff check .
	.venv/bin/mypy

bootstrap:
	bash scripts/bootstrap.sh
