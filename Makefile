# tidemq: `make run` starts a local cluster, `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# What the daemons, mqadmin and the dashboard need (tidemq and its dependencies), and what the
# tests, linters and Spark add to it (the dev and spark extras): `make run` installs the first
# alone, `make test` both.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
PYTEST_ARGS ?=
# `make test`'s worker processes (pytest-xdist; 0: all in this one); a module's tests run in one
# worker (--dist loadscope), so its module-scoped fixtures are made once. Three on two cores:
# most of a test's time is spent waiting (on daemons, clients, timeouts), and the long modules
# go first (tests/conftest.py).
TEST_WORKERS ?= 3
# e.g. make run RUN_ARGS='-o namesrv:listenPort=19876' (see tidemq-cluster run --help)
RUN_ARGS ?=
# e.g. make run PORT_BASE=20000: every port of `make run` moved at once (name server 20000,
# broker-a 20010-20012, broker-a-s 20020 and 20022, dashboard 20030; README, "Quick start")
PORT_BASE ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The Cython sources too: `pip install -e` rebuilds the compiled modules when one changed.
CYTHON_SOURCES := $(shell find store ha client broker -name '*.pyx' -o -name '*.pxi' 2>/dev/null)

# pip's output goes to the log; what it is at (each package collected, the build of the
# compiled modules, the install) is shown as it happens, so a minute of building is not silent.
comma := ,
define pip_install
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing $(1) into $(VENV) (log: $(VENV)/install.log)"
	@set -o pipefail; { $(BIN)/python -m pip install --progress-bar off --upgrade pip && \
	   $(BIN)/python -m pip install --progress-bar off -e '$(2)'; } 2>&1 | tee -a $(VENV)/install.log | \
		{ grep --line-buffered -E '^ *(Collecting|Building|Installing collected|Successfully installed)' \
		  | sed -u -E 's/^ */  /; s/^(.{98}).+/\1 .../' || true; } || \
		{ tail -30 $(VENV)/install.log; echo "install failed: see $(VENV)/install.log"; exit 1; }
endef

.PHONY: python-version
python-version:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "tidemq needs Python >= 3.11 (found $$($(PYTHON) --version))"; exit 1; }

$(RUN_STAMP): pyproject.toml $(CYTHON_SOURCES) | python-version build-packages
	$(call pip_install,tidemq and what it runs on,.[protocol])
	@$(MAKE) --no-print-directory typing-tree
	@touch $(RUN_STAMP)

$(TEST_STAMP): pyproject.toml $(CYTHON_SOURCES) | python-version build-packages
	$(call pip_install,tidemq with the dev and spark extras for tests and lint,.[dev$(comma)spark$(comma)protocol])
	@$(MAKE) --no-print-directory typing-tree
	@touch $(RUN_STAMP) $(TEST_STAMP)

# mypy reads the packages under their installed names: a tree of links, tidemq/store -> store/
# and so on, as pyproject.toml's package-dir maps them (the editable install's import hook is
# invisible to mypy). Links to folders, so new modules need no reinstall.
TYPING := $(VENV)/typing/tidemq
.PHONY: typing-tree
typing-tree:
	@mkdir -p $(TYPING)
	@for package in store ha client broker; do ln -sfn ../../../$$package $(TYPING)/$$package; done
	@ln -sfn ../../../store/common $(TYPING)/common
	@ln -sf ../../../client/_tidemq/__init__.py ../../../client/_tidemq/py.typed $(TYPING)/

# Debian packages, as command:package (or /file:package for a package without a command),
# installed with apt-get when run as root and missing (CI runs as root); otherwise the one
# command to run is printed and the install goes on.
# - BUILD_PACKAGES: what the compiled modules are built with, for `make run` too. libssl-dev:
#   OpenSSL's headers, for the compiled codec's request signatures (client/remoting/_codec.pyx
#   links libcrypto); without them the whole codec falls back to its pure-Python twin.
# - SYSTEM_PACKAGES: what the tests run; the daemons need none of them (setpriv is for the tests
#   that drop privileges as deploy/systemd does). They come before the test extras: pyfuse3 is
#   built from source against libfuse3-dev (found by pkg-config); fusermount3 (fuse3) mounts the
#   lossy file system of the power-cut tests.
BUILD_PACKAGES ?= /usr/include/openssl/sha.h:libssl-dev
SYSTEM_PACKAGES ?= java:openjdk-17-jre-headless nft:nftables iptables:iptables setpriv:util-linux \
	chromium:chromium chromedriver:chromium-driver etcd:etcd-server fusermount3:fuse3 \
	pkg-config:pkg-config /usr/include/fuse3/fuse_lowlevel.h:libfuse3-dev node:nodejs npm:npm \
	$(BUILD_PACKAGES)
define debian_install
	@missing=""; for pair in $(1); do \
		what="$${pair%%:*}"; \
		{ command -v "$$what" || test -e "$$what"; } >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian packages:$$missing (log: /tmp/tidemq-apt.log)"; \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; } \
			> /tmp/tidemq-apt.log 2>&1 || { tail -20 /tmp/tidemq-apt.log; echo "apt-get failed: see /tmp/tidemq-apt.log"; exit 1; }; \
	else \
		echo "missing system packages; run: sudo apt-get install$$missing"; \
	fi
endef
.PHONY: build-packages system-packages
build-packages:
	$(call debian_install,$(BUILD_PACKAGES))
system-packages:
	$(call debian_install,$(SYSTEM_PACKAGES))

# The RocketMQ 5 protocol's Python modules (git-ignored): generated from the .proto files by
# grpcio-tools, again whenever a .proto is newer than its module.
.PHONY: protocol
protocol: $(RUN_STAMP)
	@$(BIN)/python broker/proxy/protocol/generate.py
	@# Bytecode of every module, as a wheel's install writes it: the daemons then start without
	@# compiling (0.35 s of CPU per brokerd start here, where PYTHONDONTWRITEBYTECODE is set);
	@# a module edited later is compiled again in memory, as Python checks each file's mtime.
	@$(BIN)/python -m compileall -q -j 0 store broker client ha > /dev/null

# The official RocketMQ 5 Python client in a virtual environment of its own (its grpcio and
# protobuf pins are not tidemq's): the peer of tests/integration/test_rocketmq5_client.py.
RMQ5_VENV := .venv-rmq5
RMQ5_CLIENT ?= rocketmq-python-client==5.1.2
RMQ5_STAMP := $(RMQ5_VENV)/.installed-$(subst ==,-,$(RMQ5_CLIENT))
$(RMQ5_STAMP):
	@test -x $(RMQ5_VENV)/bin/python || $(PYTHON) -m venv $(RMQ5_VENV)
	@echo "installing $(RMQ5_CLIENT) into $(RMQ5_VENV) (log: $(RMQ5_VENV)/install.log)"
	@$(RMQ5_VENV)/bin/python -m pip install '$(RMQ5_CLIENT)' > $(RMQ5_VENV)/install.log 2>&1 || \
		{ tail -30 $(RMQ5_VENV)/install.log; echo "install failed: see $(RMQ5_VENV)/install.log"; exit 1; }
	@touch $(RMQ5_STAMP)

# The official RocketMQ 5 Node.js client (rocketmq-client-nodejs, its version pinned in
# tests/support/rmq5node/package.json, every dependency in its package-lock.json) in that
# folder's node_modules: the peer of tests/integration/test_rocketmq5_nodejs.py. Installed again
# only when the lock file changes. npm's install scripts are not run (the client needs none).
RMQ5NODE_DIR := tests/support/rmq5node
RMQ5NODE_STAMP := $(RMQ5NODE_DIR)/node_modules/.installed
$(RMQ5NODE_STAMP): $(RMQ5NODE_DIR)/package-lock.json | system-packages
	@command -v npm >/dev/null || { echo "npm is missing: apt-get install nodejs npm"; exit 1; }
	@echo "installing rocketmq-client-nodejs into $(RMQ5NODE_DIR) (log: /tmp/tidemq-npm.log)"
	@cd $(RMQ5NODE_DIR) && npm ci --ignore-scripts --no-audit --no-fund > /tmp/tidemq-npm.log 2>&1 || \
		{ tail -30 /tmp/tidemq-npm.log; echo "npm ci failed: see /tmp/tidemq-npm.log"; exit 1; }
	@touch $(RMQ5NODE_STAMP)

.PHONY: install-run
install-run: $(RUN_STAMP) protocol ## create .venv with tidemq and what its daemons, mqadmin and dashboard need

.PHONY: install
install: system-packages $(TEST_STAMP) protocol $(RMQ5_STAMP) $(RMQ5NODE_STAMP) ## install-run, then what the tests need: the dev and spark extras, the RocketMQ 5 clients (Python, Node.js), Debian packages

.PHONY: run
run: install-run ## a local name server, SYNC_MASTER and SLAVE with a status line (Ctrl-C stops them)
	@$(BIN)/tidemq-cluster run local --data data $(if $(PORT_BASE),--port-base $(PORT_BASE)) $(RUN_ARGS)

# make dist DIST=/tmp/release: where the sdist and the wheel go
DIST ?= dist
.PHONY: dist
dist: install ## a release: an sdist and a wheel with the compiled modules in dist/ (DIST=dir: elsewhere)
	@rm -rf $(DIST)/tidemq-*
	@$(BIN)/python -m build --outdir $(DIST) . > $(VENV)/dist.log 2>&1 || \
		{ tail -30 $(VENV)/dist.log; echo "make dist failed: see $(VENV)/dist.log"; exit 1; }
	@# The compiled modules are optional to a build without a compiler: a release has them, and
	@# the generated protocol modules (tests/support/release.py checks both).
	@$(BIN)/python -m tests.support.release $(DIST)/tidemq-*.whl
	@ls -1 $(DIST)/tidemq-*

.PHONY: fmt
fmt: install ## format the code
	$(BIN)/ruff format store broker client ha tests
	$(BIN)/ruff check --fix store broker client ha tests

.PHONY: lint
lint: install ## ruff (format and rules) and mypy strict
	$(BIN)/ruff format --check store broker client ha tests
	$(BIN)/ruff check store broker client ha tests
	$(BIN)/mypy

.PHONY: test
test: install lint ## lint, then every test: unit, integration, fault
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=30 $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: install ## unit tests only (no processes, no sockets)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

# make fuzz FUZZ_RUNS=100000 FUZZ_TARGETS='frame header_msgpack' (see tests/fuzz/__main__.py)
# FUZZ_REQUEST_SECONDS: how long the request fuzzer attacks live daemons afterwards (0: not at
# all); FUZZ_SEED=n repeats a request-fuzzing run (tests/fuzz/requests.py); FUZZ_GRPC_SECONDS:
# how long the gRPC endpoint is fuzzed after that (tests/fuzz/grpc_requests.py; 0: not at all);
# FUZZ_LANES: clients fuzzing the daemons' requests (and the gRPC endpoint) at once
FUZZ_RUNS ?= 1000000
FUZZ_TARGETS ?=
FUZZ_REQUEST_SECONDS ?= 600
FUZZ_GRPC_SECONDS ?= 600
FUZZ_SEED ?=
FUZZ_LANES ?= 4
.PHONY: fuzz
fuzz: install ## fuzz every decoder, then requests to live daemons; findings go to fuzz-crashes/
	$(BIN)/python -m tests.fuzz --runs $(FUZZ_RUNS) --out fuzz-crashes $(FUZZ_TARGETS)
	@if [ "$(FUZZ_REQUEST_SECONDS)" != 0 ]; then \
		$(BIN)/python -m tests.fuzz --requests $(FUZZ_REQUEST_SECONDS) --out fuzz-crashes \
			--lanes $(FUZZ_LANES) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED)); fi
	@if [ "$(FUZZ_GRPC_SECONDS)" != 0 ]; then \
		$(BIN)/python -m tests.fuzz --grpc $(FUZZ_GRPC_SECONDS) --out fuzz-crashes \
			--lanes $(FUZZ_LANES) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED)); fi

# make soak SOAK_ROUNDS=20 (see tests/fault/soak.py); SOAK_SEED=n repeats a run
SOAK_ROUNDS ?= 100
SOAK_SEED ?=
.PHONY: soak
soak: install ## kill, power-cut or pause the master or slave under load each round; the history checker judges both
	$(BIN)/python -m tests.fault.soak --rounds $(SOAK_ROUNDS) $(if $(SOAK_SEED),--seed $(SOAK_SEED))

# make partitions PARTITION_ROUNDS=20 (see tests/fault/partitions.py); PARTITION_SEED=n repeats
PARTITION_ROUNDS ?= 100
PARTITION_SEED ?=
.PHONY: partitions
partitions: install ## partitions and pauses during failover (etcd, 3 brokers, namespaces); one history checked
	$(BIN)/python -m tests.fault.partitions --rounds $(PARTITION_ROUNDS) $(if $(PARTITION_SEED),--seed $(PARTITION_SEED))

# make powercut POWERCUT_ROUNDS=20 POWERCUT_SCENARIO=ha (see tests/fault/powercut.py: sync-flush,
# async-flush, ha or ha-async-flush); POWERCUT_SEED=n repeats a run. Needs root and /dev/fuse
# (a FUSE mount).
POWERCUT_ROUNDS ?= 100
POWERCUT_SCENARIO ?= sync-flush
POWERCUT_SEED ?=
.PHONY: powercut
powercut: install ## power cuts of brokers on a lossy FUSE file system; check nothing acknowledged is lost
	$(BIN)/python -m tests.fault.powercut --scenario $(POWERCUT_SCENARIO) --rounds $(POWERCUT_ROUNDS) \
		$(if $(POWERCUT_SEED),--seed $(POWERCUT_SEED))

.PHONY: bench
bench: install ## benchmarks: prints throughput figures and ratios to their baselines
	$(BIN)/python -m tests.bench

.PHONY: clean
clean: ## remove the virtual environment and caches
	rm -rf $(VENV) $(RMQ5_VENV) $(RMQ5NODE_DIR)/node_modules .pytest_cache .mypy_cache .ruff_cache dist
