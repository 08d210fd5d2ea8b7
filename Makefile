# Two commands matter: `make demo` (pipeline end to end on an embedded default) and
# `make test` (ruff, mypy, pytest). Both install what they need first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := $(CURDIR)/.venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.lock requirements-dev.lock | sha1sum | cut -c1-12)
# The installer: the locks are uv's (requirements-dev.lock's header); it installs them in half pip's time.
UV := uv==0.13.9

# Embedded default: everything under the project folder (git-ignored).
export CLOUDTRAIL_HOME := $(CURDIR)
export CLOUDTRAIL_LANDING ?= $(CURDIR)/data/landing
export CLOUDTRAIL_LAKE ?= $(CURDIR)/data/lake
export CLOUDTRAIL_SAMPLES ?= $(abspath $(CURDIR)/../shared/cloudtrail-samples)
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__PARALLELISM := 4
export AIRFLOW__LOGGING__LOGGING_LEVEL := WARNING
export AIRFLOW_CONN_SPARK_DEFAULT ?= {"conn_type":"spark","host":"local[*]"}
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(PY)
export PATH := $(VENV)/bin:$(PATH)
export PYTHONPATH := $(CURDIR):$(CURDIR)/plugins
# Great Expectations sends no usage statistics (jobs/validate_events.py sets it too, before GX is imported).
export GX_ANALYTICS_ENABLED := False
RUN_DATE ?= $(shell date -u +%Y-%m-%d)

STACK_HOME ?= $(CURDIR)/.stack
STACK_ENV ?= $(CURDIR)/.env
PG_BIN := /usr/lib/postgresql/15/bin

.PHONY: help setup debian-deps browser-deps demo run status test test-harness test-fast test-stack stack-up stack-status stack-down lint bench bench-history bench-s3 bench-investigations bench-publish bench-s3-lake bench-cluster bench-cost bench-ui bench-stack chaos chaos-s3 test-s3-burst fuzz fuzz-queue torture torture-s3 metadata-growth test-next-pyspark bench-next-pyspark clean

help:
	@echo "make setup           - create .venv with the pinned dependencies, runtime and dev (needs Java 17+)"
	@echo "make demo            - build a sample landing zone, run the DAG once, print a summary"
	@echo "make run             - one run of the DAG on \$$CLOUDTRAIL_LANDING into \$$CLOUDTRAIL_LAKE, then what it did"
	@echo "make status          - freshness per account and region, backlog, checkpoint and the last run"
	@echo "make test            - ruff, mypy and pytest"
	@echo "make test-fast       - the unit tests only (pytest -m unit): static frames and plain files, under 2 minutes"
	@echo "make test-harness    - the cost, S3, history and publish benchmark harnesses on tiny sizes (CI runs it after make test)"
	@echo "make lint            - ruff and mypy only (also a pre-commit hook: pre-commit install)"
	@echo "make test-stack      - docker-compose.yml's services natively (PostgreSQL, Airflow, Spark cluster): schedule, backfills, rebuild, a backfill clicked in the UI"
	@echo "make stack-up        - start those services on this machine (no Docker needed); prints the UI URL and admin password"
	@echo "make stack-status    - what runs, where, and the UI's credentials"
	@echo "make stack-down      - stop everything stack-up started"
	@echo "make bench-publish   - what publishing the Iceberg tables adds to a one-file run and a 1,000-file backfill, pruning over 30 dates, metadata over 100 publishes (moto's S3 + Glue)"
	@echo "make bench-s3-lake   - the ingest into a lake in S3 (moto's) against a folder lake and the recipe and DuckDB: a backfill and a one-file run, what each holds"
	@echo "make bench-cluster   - the same \$$RECORDS (2M) backfill on a Spark cluster of one worker and of two (one core each, no disk shared), lake and landing in S3 (moto's); a one-file run there and in local mode"
	@echo "make bench-investigations - the shipped investigations on a week of events: bytes, row groups and seconds, with and without the layout, and on the JSON"
	@echo "make chaos           - 20 random SIGKILLs of the ingest job, then the table against the oracle"
	@echo "make chaos-s3        - the same on a lake in S3 (moto's), \$$KILLS (10) kills, the table read through its catalog"
	@echo "make fuzz            - the property-based test with \$$FUZZ_EXAMPLES (300) generated landing zones"
	@echo "make fuzz-queue      - \$$QUEUE_EXAMPLES (50) random sequences of \$$QUEUE_STEPS (12) queue steps on moto: deliveries, hostile keys, re-sent notifications, expiries, runs dying mid-fetch or mid-delete"
	@echo "make torture         - \$$TORTURE_EXAMPLES (200) random operator sequences of up to \$$TORTURE_STEPS (12) steps, the table against the oracle after each"
	@echo "make torture-s3      - the same on lakes in S3 (moto's), \$$TORTURE_EXAMPLES (50) sequences, each with its own catalog"
	@echo "make bench           - the product against plain Spark and DuckDB (writes BENCHMARKS.md), then bench-history"
	@echo "make bench-history   - one run's cost against a year of history under 2, 20 and 100 accounts x 17 regions"
	@echo "make bench-s3        - an S3 landing on moto's server: one run's cost at 2, 100 and 1,000 accounts x 17 regions, the reconciliation's, the fetch against boto3's transfer manager"
	@echo "make test-s3-burst   - a burst of \$$S3_BURST (10,000) notifications taken in one run, the table against the oracle"
	@echo "make bench-cost      - CPU-seconds to ingest one day (17 regions x 288 files): hourly runs, an always-on stream, one daily run"
	@echo "make bench-ui        - how fast the Airflow UI's lake page answers on a year of daily runs"
	@echo "make bench-stack     - wall time of a quiet and a one-file DAG run on the native stack, against a bare spark-submit"
	@echo "make test-next-pyspark - this commit on pyspark \$$NEXT_PYSPARK ($(NEXT_PYSPARK)) in build/pyspark-<version>: install, then make test there"
	@echo "make bench-next-pyspark - the product, C and A on this checkout's pyspark against that one's, alternating"
	@echo "make metadata-growth - checkpoint and log sizes over 400 one-file batches"
	@echo "make build/jobs.zip  - the job code spark-submit ships to executors"
	@echo "make build/cloudtrail.jar - the JVM helpers (jobs/java/) every job's session loads"
	@echo "make build/jars      - the JVM dependencies (S3A, Iceberg) at tools/jars/pom.xml's pins, checked against jars.sha256"
	@echo "make build/spark-classes.jsa - the classes an ingest loads, archived: each driver maps them at start"
	@echo "make clean           - remove data/, .airflow/ and build/"

setup: $(STAMP) build/cloudtrail.jar build/jars build/spark-classes.jsa

# The bytecode is compiled ahead, on every core (uv's --compile-bytecode takes one): an environment with
# PYTHONDONTWRITEBYTECODE would otherwise compile every module again in every process.
# uv's cache and temporary files are the venv's own, removed once installed: in ~/.cache/uv it built pyspark's sdist
# again at each install and kept every build (1.9 GB a fresh clone; a CI machine that keeps its home filled its disk),
# and installed no faster from it (25 s either way, here). The prune removes the builds earlier installs left there.
$(STAMP): requirements.lock requirements-dev.lock
	@java -version 2>&1 | awk -F'"' '/version/ { split($$2, v, "."); if (v[1] + 0 < 17) { print "Java 17+ is required, found " $$2; exit 1 } found = 1 } END { if (!found) { print "Java 17+ is required and no java is on PATH (Debian: apt-get install openjdk-17-jre-headless)"; exit 1 } }'
	@[ -x $(PY) ] || python3.11 -m venv $(VENV)
	@$(PY) -m pip install -q $(UV)
	@mkdir -p $(VENV)/.uv-cache/tmp && TMPDIR=$(VENV)/.uv-cache/tmp $(VENV)/bin/uv pip install -q --cache-dir $(VENV)/.uv-cache --python $(PY) -r requirements-dev.lock
	@rm -rf $(VENV)/.uv-cache; $(VENV)/bin/uv cache prune -q
	@$(PY) -m compileall -q -j 0 $(VENV)/lib >/dev/null
	@rm -f $(VENV)/.installed-*; touch $@
	@echo "installed: $$($(PY) -c 'from importlib.metadata import version as v; print("pyspark", v("pyspark"), "airflow", v("apache-airflow"), "gx", v("great-expectations"))')"

# What the compose tests and the native stack need from Debian: a compose parser, PostgreSQL 15.
debian-deps:
	@if ! command -v docker-compose >/dev/null || [ ! -x $(PG_BIN)/initdb ]; then \
		apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-compose postgresql-15 >/dev/null; \
	fi

# Headless Chromium for the UI test: Playwright drives Debian's build (its own download is unreachable).
browser-deps:
	@command -v chromium >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null; }

# The job code shipped to Spark executors (--py-files).
build/jobs.zip: $(wildcard jobs/*.py jobs/*/*.py jobs/derived/rules/*)
	@$(PY) -m tools.package $@ >/dev/null

# The JVM helpers (jobs/java/): every Spark session of the jobs loads them (--jars under spark-submit).
build/cloudtrail.jar: $(wildcard jobs/java/cloudtrail/*.java) $(STAMP)
	@command -v javac >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openjdk-17-jdk-headless >/dev/null; }
	@$(PY) -m tools.package $@ >/dev/null

# The JVM dependencies the pyspark wheel lacks (S3A and the AWS SDK modules it calls, Iceberg, Spark's cloud module, SQLite's
# JDBC driver), at tools/jars/pom.xml's pinned versions: Maven checks Central's checksums, then each jar must match
# tools/jars/jars.sha256 (README, "Versions").
build/jars: tools/jars/pom.xml tools/jars/jars.sha256 $(STAMP)
	@command -v mvn >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends maven >/dev/null; }
	@$(PY) -m tools.package $@ >/dev/null

# The classes an ingest loads, archived for the JVM's class data sharing: each driver maps them at start.
# The ingest that writes it loads the helpers' jar and the dependencies (its quarantine is an Iceberg table), so they
# are built first; the archive records the jar's size and time, and a JVM passes it over once the jar changes, so a
# new jar means a new archive.
build/spark-classes.jsa: $(STAMP) build/cloudtrail.jar build/jars
	@$(PY) -m tools.class_archive > build/class_archive.log 2>&1 || { tail -5 build/class_archive.log; echo "no class archive written: drivers load their classes one by one"; }

$(AIRFLOW_HOME)/airflow.db: $(STAMP)
	@mkdir -p $(AIRFLOW_HOME)
	@airflow db migrate >/dev/null && airflow pools set cloudtrail_lake 1 "tasks that write the CloudTrail lake" >/dev/null

# Warnings `airflow dags test` prints about libraries this project does not use (graphviz for DAG
# images, httpx for Starlette's test client) and about its own DB once a DAG has changed between runs.
run demo: export PYTHONWARNINGS := ignore:Could not import graphviz,ignore:Using `httpx` with `starlette.testclient`,ignore:Multiple rows returned with uselist=False
run: setup build/jobs.zip $(AIRFLOW_HOME)/airflow.db
	@mkdir -p $(CLOUDTRAIL_LAKE)
	@airflow dags test cloudtrail_ingest $(RUN_DATE); code=$$?; \
		[ $$code -eq 0 ] || echo "THE DAG RUN FAILED (exit $$code): its task logs are under $(AIRFLOW_HOME)/logs; what its ingest job did:"; \
		$(PY) -m tools.status --run latest; exit $$code

# Freshness per account and region, the backlog, the checkpoint and the last run (the Airflow UI's "CloudTrail lake" page shows the same).
status: setup
	@$(PY) -m tools.status

demo: setup build/jobs.zip
	$(PY) -m tools.generate_landing --out $(CLOUDTRAIL_LANDING) --records 20000 --days 3 --late-event-files 2 --malformed-files 4 --digests --samples $(CLOUDTRAIL_SAMPLES) --if-absent
	CLOUDTRAIL_SETTLE="0 seconds" $(MAKE) --no-print-directory run
	airflow dags test cloudtrail_derived
	$(PY) -m tools.summary --lake $(CLOUDTRAIL_LAKE)

lint: $(STAMP)
	ruff check dags jobs plugins tools tests bench
	ruff format --check dags jobs plugins tools tests bench
	mypy jobs plugins tools bench

# The tests build their own jobs.zip and jar from the working tree (tests/conftest.py).
# Most tests wait on JVMs, subprocesses, servers and queues: a run of two workers kept the 2 cores busy about a quarter
# of the time (README, "Development"). Each worker starts on its share of the tests in order (the longest first:
# tests/conftest.py), and an idle one takes from the others.
TEST_WORKERS ?= 2
# Lint checks the code while the class archive is written (one core each).
test: debian-deps browser-deps
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not stack and not harness"

# The smoke runs of the cost, S3, history and publish benchmark harnesses: CI runs them after `make test` (.ci/run).
test-harness: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m harness

# The unit tests: in-process, on static frames and plain files (tests marked `unit`; the rest are `integration`).
test-fast: setup debian-deps
	$(PY) -m pytest -q -m unit

# Longer runs, outside `make test`.
test-stack: setup debian-deps browser-deps
	$(PY) -m pytest -q -m stack

stack-up: setup debian-deps
	$(PY) -m tools.stack up --home $(STACK_HOME) --env-file $(STACK_ENV)

stack-status: setup
	$(PY) -m tools.stack status --home $(STACK_HOME)

stack-down: setup
	$(PY) -m tools.stack down --home $(STACK_HOME)


chaos: setup
	$(PY) -m tests.chaos --kills 20 --seed $${SEED:-1}

bench-s3-lake: setup
	$(PY) -m bench.s3_lake --records $${RECORDS:-100000}

bench-cluster: setup
	$(PY) -m bench.cluster --records $${RECORDS:-2000000}

chaos-s3: setup
	$(PY) -m tests.chaos --kills $${KILLS:-10} --seed $${SEED:-1} --s3

test-s3-burst: setup
	S3_BURST=$${S3_BURST:-10000} $(PY) -m pytest -q tests/test_s3_landing.py -k burst

fuzz: setup
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-300} $(PY) -m pytest -q tests/test_fuzz.py

fuzz-queue: setup
	QUEUE_EXAMPLES=$${QUEUE_EXAMPLES:-50} QUEUE_STEPS=$${QUEUE_STEPS:-12} $(PY) -m pytest -q tests/test_queue_sequences.py

# A new seed each run; a failure prints the sequence and the blob that replays it.
torture: setup build/jobs.zip
	TORTURE_SEED=random TORTURE_EXAMPLES=$${TORTURE_EXAMPLES:-200} TORTURE_STEPS=$${TORTURE_STEPS:-12} \
		$(PY) -m pytest -q -s tests/test_operator_sequences.py -k "generated and not s3"

torture-s3: setup build/jobs.zip
	TORTURE_SEED=random TORTURE_EXAMPLES=$${TORTURE_EXAMPLES:-50} TORTURE_STEPS=$${TORTURE_STEPS:-12} \
		$(PY) -m pytest -q -s tests/test_operator_sequences.py -k "generated and s3"

bench: setup build/jobs.zip
	$(PY) -m bench.benchmark
	$(PY) -m bench.history
	$(PY) -m bench.s3
	$(PY) -m bench.publish

bench-publish: setup build/jobs.zip
	$(PY) -m bench.publish

bench-s3: setup
	$(PY) -m bench.s3

bench-investigations: setup
	$(PY) -m bench.investigations

bench-history: setup
	$(PY) -m bench.history

bench-cost: setup
	$(PY) -m bench.cost

bench-ui: setup
	$(PY) -m bench.lake_page

bench-stack: setup debian-deps
	$(PY) -m bench.stack_runs --repeats $${REPEATS:-3}

# The next pyspark before the pins can move to it (issue #32): its pyspark-client, which the Spark provider
# requires, is not on the registry yet, so the clone installs the locked set (its own $(STAMP) recipe), then
# swaps pyspark alone (a pyspark has every module a pyspark-client has); the stamp stays, so its `make test`
# keeps the swap and builds the JVM helpers and class archive against the swapped jars.
NEXT_PYSPARK ?= 4.2.0
NEXT := $(CURDIR)/build/pyspark-$(NEXT_PYSPARK)
NEXT_PY := $(NEXT)/.venv/bin/python
# make in the clone, without the lake and Airflow home this Makefile exports (they would be the clone's too).
NEXT_MAKE := cd $(NEXT) && env -u CLOUDTRAIL_LANDING -u CLOUDTRAIL_LAKE -u AIRFLOW_HOME -u MAKEFLAGS $(MAKE) --no-print-directory
test-next-pyspark: setup
	rm -rf $(NEXT) && git clone -q $(CURDIR) $(NEXT)
	$(NEXT_MAKE) $(NEXT)/.venv/$(notdir $(STAMP))
	if command -v uv >/dev/null 2>&1; then \
		uv pip uninstall -q --python $(NEXT_PY) pyspark pyspark-client && uv pip install -q --no-cache --python $(NEXT_PY) --no-deps pyspark==$(NEXT_PYSPARK); \
	else \
		$(NEXT_PY) -m pip uninstall -q -y pyspark pyspark-client && $(NEXT_PY) -m pip install -q --no-deps pyspark==$(NEXT_PYSPARK); \
	fi
	$(NEXT_MAKE) test

bench-next-pyspark: setup
	@[ -x $(NEXT_PY) ] || { echo "run make test-next-pyspark first"; exit 1; }
	$(PY) -m bench.pyspark_versions $(NEXT)

metadata-growth: setup
	$(PY) -m bench.metadata_growth --runs 4 --files-per-run 100

clean:
	rm -rf data .airflow build
