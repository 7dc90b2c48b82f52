# kiq: one command each for setup, tests and the demo. Every target is idempotent.
#   make setup   venv + kiq package + Maven jars (Kafka broker, Spark Kafka connector,
#                kiq's composite-key partitioner, built from jvm/kiq-partitioner)
#   make test    setup, then the test suite (starts its own broker and Spark)
#   make lint       setup, then ruff: lint rules and the formatter's layout
#   make typecheck  setup, then mypy over src/ ([tool.mypy] in pyproject.toml)
#   make contracts  setup, then the import contracts: which layer may import which
#                   ([tool.importlinter] in pyproject.toml)
#   .ci/run         lint, typecheck, contracts, then test, stopping at the first failure
#   make demo    setup, then `kiq up` on the shipped stock application (src/kiq/apps/stocks/kiq.toml)
#   make docs    render docs/architecture.svg from docs/architecture.dot (needs Graphviz's dot)
#   make clean   stop the local broker, remove venv, caches and local state

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
JARS   := .cache/jars
MVN    := mvn -B -q -Dstyle.color=never
PYTEST_ARGS ?=

.PHONY: setup deps jars test test-fast lint typecheck contracts demo docs stop clean

setup: deps $(BIN)/.installed jars

# Java 17+, Maven, a venv-capable Python (and wrk for benchmarks): from Debian's packages when
# missing and we may (root + apt-get); otherwise say what to install.
deps:
	@scripts/ensure-deps.sh

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

jars: $(JARS)/kafka/.stamp $(JARS)/spark/.stamp $(JARS)/kiq/.stamp

$(JARS)/kafka/.stamp: jvm/kafka-broker/pom.xml
	@echo "fetching the Kafka broker jars from Maven Central into $(JARS)/kafka"
	@rm -rf $(JARS)/kafka
	$(MVN) -f jvm/kafka-broker/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JARS)/kafka
	@touch $@

# The connector's version is pinned in the pom, not taken from pyspark: Maven Central has no
# 4.3 connector, and the 4.2.0 one runs on pyspark 4.3.0 (tests/integration/test_spark_compat.py).
$(JARS)/spark/.stamp: jvm/spark-connector/pom.xml
	@echo "fetching Spark's Kafka connector from Maven Central into $(JARS)/spark"
	@rm -rf $(JARS)/spark
	$(MVN) -f jvm/spark-connector/pom.xml dependency:copy-dependencies \
		-DoutputDirectory=$(CURDIR)/$(JARS)/spark
	@touch $@

# The partitioner Spark's Kafka sink uses for composite keys: compiled here (javac), against
# kafka-clients from Maven Central.
$(JARS)/kiq/.stamp: jvm/kiq-partitioner/pom.xml $(shell find jvm/kiq-partitioner/src -name '*.java')
	@echo "building kiq's Kafka partitioner into $(JARS)/kiq"
	@rm -rf $(JARS)/kiq
	$(MVN) -f jvm/kiq-partitioner/pom.xml package -Dkiq.jars=$(CURDIR)/$(JARS)/kiq
	@touch $@

test: setup
	$(BIN)/pytest $(PYTEST_ARGS)

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

docs:
	dot -Tsvg docs/architecture.dot -o docs/architecture.svg

stop:
	@if [ -x $(BIN)/kiq ]; then $(BIN)/kiq broker stop; fi

clean: stop
	rm -rf $(VENV) .cache .kiq build jvm/*/target src/*.egg-info .pytest_cache .ruff_cache .mypy_cache \
		.import_linter_cache
