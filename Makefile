# Set-up is part of every entry point: a fresh machine needs only `make demo` or `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# The stamp changes whenever pyproject.toml does, so dependency edits reinstall.
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
# COMMAND:DEBIAN-PACKAGE, installed when the command is missing.
DEBS := kcat:kcat java:openjdk-17-jre-headless nft:nftables unshare:util-linux ip:iproute2 chromium:chromium
PYTEST_ARGS ?=

.PHONY: setup debs demo test lint bench clean

setup: debs $(STAMP)

debs:
	@scripts/ensure-debs $(DEBS)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $@

lint: setup
	$(VENV)/bin/lint-imports

test: lint
	$(VENV)/bin/pytest $(PYTEST_ARGS)

demo: setup
	$(PY) -m harness.demo

bench: setup
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
