# Set-up is part of every entry point: a fresh machine needs only `make demo` or `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# The stamp changes whenever pyproject.toml does, so dependency edits reinstall.
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
# COMMAND:DEBIAN-PACKAGE, installed when the command is missing (python3/MODULE: when python3 cannot
# import MODULE; ensurepip is what `python3 -m venv` needs).
DEBS := python3/ensurepip:python3-venv kcat:kcat java:openjdk-17-jre-headless nft:nftables unshare:util-linux ip:iproute2 chromium:chromium
PYTEST_ARGS ?=
# make test prints its 30 slowest test phases (--durations): CI's log shows where its time went.
# Parallel test processes (pytest-xdist). The suite mostly waits (fault runs, timeouts, real
# clusters), so more workers than the 2 cores of CI still shorten it (1,883 tests: 9 min 28 s with
# 4 workers on a quiet machine, 12 min 16 s with 3 under some load); PYTEST_WORKERS=0 runs serially.
PYTEST_WORKERS ?= 4

.PHONY: setup debs spark-archive demo smoke test lint bench clean fresh-machine

setup: debs $(STAMP) spark-archive

# A java that is present but older than 17 is not replaced: check-java names it and what to install.
debs:
	@scripts/ensure-debs $(DEBS)
	@scripts/check-java 17

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	scripts/fetch-junit-xsd $(VENV)
	rm -f $(VENV)/.installed-*
	touch $@

# The Spark driver's class-data-sharing archive (checkers/class_archive.py): every check's JVM
# then starts about 2.5 s sooner. Built once per machine and Java/PySpark (about 30 s, 160 MB
# under ~/.cache/logquake); without it checks are only slower, so a failed build warns.
spark-archive: $(STAMP)
	@$(PY) -m harness.spark_archive || echo "warning: no Spark class archive; checks start slower"

lint: setup
	$(VENV)/bin/lint-imports

# The Docker back end's and Compose tests (tests/cluster/test_docker_backend.py, test_docker_compose.py)
# need a daemon, docker-compose and the node image: scripts/ensure-docker installs docker.io and
# docker-compose and starts a private daemon when none answers
# (stopped after the tests if this target started it). The image (cold: about 3.5 minutes, mostly
# debootstrap's downloads, once per machine; a changed cluster/ or proxy/ source rebuilds one
# layer in seconds) builds in the background while lint and the suite run: the tests' fixture
# takes the same build lock (harness.image.LOCK_PATH), so a Docker test that comes early waits
# for it on one worker instead of the whole suite waiting. The Spark class archive (see
# spark-archive) builds in the background too, instead of before the suite: a check that starts
# before it is in place runs without it, only slower (the builder renames it in atomically).
test: debs $(STAMP)
	@docker_up=0; scripts/ensure-docker status >/dev/null 2>&1 && docker_up=1; \
	export DOCKER_HOST="$$(scripts/ensure-docker)" || exit 1; \
	build_log=$$(mktemp /tmp/logquake-image-build.XXXXXX); \
	$(VENV)/bin/logquake image build >"$$build_log" 2>&1 & build=$$!; \
	archive_log=$$(mktemp /tmp/logquake-spark-archive.XXXXXX); \
	$(PY) -m harness.spark_archive >"$$archive_log" 2>&1 & archive=$$!; \
	status=0; $(VENV)/bin/lint-imports || status=$$?; \
	[ $$status != 0 ] || $(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist worksteal --durations=30 $(PYTEST_ARGS) || status=$$?; \
	wait $$build || { echo "logquake image build failed:"; cat "$$build_log"; [ $$status != 0 ] || status=1; }; \
	wait $$archive && cat "$$archive_log" || { echo "warning: no Spark class archive; checks start slower:"; cat "$$archive_log"; }; \
	rm -f "$$build_log" "$$archive_log"; [ $$docker_up = 1 ] || scripts/ensure-docker stop >/dev/null; exit $$status

# A real Jepsen-style test against the bundled cluster: 3 brokers, queue workload, crash and
# network-partition faults for 60 s, checked by the Spark checkers, with an HTML report. The
# client and cluster ask for durability (acks=all, idempotence, min.insync.replicas=2), so the
# run tests every claim. Ends by printing where the results are (results/latest/report.html)
# and exits with the verdict's code (0 valid, 1 invalid, 2 unknown).
DEMO_ARGS ?= --workload queue --brokers 3 --nemesis kill,partition --time-limit 60 --name demo \
	--client-config enable.idempotence=true --cluster-config min.insync.replicas=2
demo: setup
	@$(VENV)/bin/logquake test $(DEMO_ARGS); status=$$?; \
	echo "report: results/latest/report.html   (browse all runs: $(VENV)/bin/logquake serve)"; exit $$status

# Seconds-long sanity check of the bundled broker with confluent-kafka (no harness).
smoke: setup
	$(PY) -m harness.demo

# Every benchmark in bench/, one after the other; each prints its own figures.
bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) -m bench.$$(basename $$b .py) || exit 1; done

# Proves the Quick start: a fresh Debian 12 root file system (debootstrap) runs make setup, make demo,
# make lint and a few test files on a clean clone of HEAD. Root only; minutes; not part of make test.
fresh-machine:
	@scripts/ensure-debs debootstrap:debootstrap
	scripts/fresh-machine-check

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
