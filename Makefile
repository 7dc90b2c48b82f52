# kiq: one command each for setup, tests and the demo. Every target is idempotent.
#   make setup   venv + kiq package + JVM jars (`kiq setup`: Kafka broker, Spark Kafka
#                connector, kiq's composite-key partitioner built from its shipped source)
#   make test    setup, the docs' strict build, then the test suite (starts its own broker
#                and Spark)
#   make lint       setup, then ruff: lint rules and the formatter's layout
#   make typecheck  setup, then mypy over src/ ([tool.mypy] in pyproject.toml)
#   make contracts  setup, then the import contracts: which layer may import which
#                   ([tool.importlinter] in pyproject.toml)
#   .ci/run         lint, typecheck, contracts, then test, stopping at the first failure
#   make demo    setup, then `kiq up` on the shipped stock application (src/kiq/apps/stocks/kiq.toml)
#   make docs    setup, then the docs site into site/ (mkdocs.yml), strict: a broken link,
#                anchor or reference fails; the reference pages are generated from the code
#   make diagram render docs/architecture.svg from docs/architecture.dot (needs Graphviz's
#                dot; the rendered svg is committed, so CI needs no Graphviz)
#   make lock-jars  after changing a pom in jvm/: pin the jars it resolves to (needs Maven)
#   make clean   stop the local broker, remove venv, caches and local state

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
JARS   := .cache/jars
PYTEST_ARGS ?=

.PHONY: setup deps jars lock-jars test test-fast lint typecheck contracts demo docs diagram stop clean

setup: deps $(BIN)/.installed jars

# A JDK 17+, a venv-capable Python (and wrk for benchmarks): from Debian's packages when
# missing and we may (root + apt-get); otherwise say what to install.
deps:
	@scripts/ensure-deps.sh

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

# The JVM jars, by the fetcher an installed kiq uses (`kiq setup`, so CI runs it every time):
# the Kafka broker and Spark's Kafka connector as pinned, with their checksums, in
# src/kiq/runtime/jvm/jars.lock.json (from Maven Central), and kiq's composite-key partitioner
# compiled with javac from the shipped source. Jars already there are verified, not fetched
# again. After changing a pom in jvm/, `make lock-jars` pins what it resolves to (the one
# step that needs Maven).
jars: $(BIN)/.installed
	$(BIN)/kiq setup --jars-dir $(JARS)

lock-jars: $(BIN)/.installed
	$(BIN)/python scripts/lock_jars.py

test: setup docs
	$(BIN)/pytest --durations=30 $(PYTEST_ARGS)

# Unit tests only: no broker, no Spark.
test-fast: setup
	$(BIN)/pytest -m "not integration and not spark" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

contracts: setup
	$(BIN)/lint-imports

demo: setup
	$(BIN)/kiq up --config src/kiq/apps/stocks/kiq.toml

# Seconds, no network: the Markdown in docs/, plus the pages scripts/docs_reference.py
# generates from the settings tree, the CLI and the OpenAPI document, and the Python API
# from the docstrings (mkdocstrings).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

diagram:
	dot -Tsvg docs/architecture.dot -o docs/architecture.svg

stop:
	@if [ -x $(BIN)/kiq ]; then $(BIN)/kiq broker stop; fi

clean: stop
	rm -rf $(VENV) .cache .kiq build site jvm/*/target src/*.egg-info .pytest_cache .ruff_cache .mypy_cache \
		.import_linter_cache
