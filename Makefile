# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Both make the virtualenv (.venv/) and build the servers (.cache/servers/) first.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SERVERS := $(CURDIR)/.cache/servers/bin
export LIFTBRIDGE_SERVER_BIN := $(SERVERS)/liftbridge
export NATS_SERVER_BIN := $(SERVERS)/nats-server

.PHONY: help setup venv server bench-go proto test unit unit-3.12 unit-3.13 lint demo bench chaos clean

help:
	@echo "make demo   - start a local Liftbridge server and show the SDK working"
	@echo "make test   - run the whole test suite against real servers"
	@echo "make bench  - run the benchmarks and print a table"
	@echo "make chaos  - the fault matrix on a 3-node cluster and a million fuzz inputs (<= 15 min)"
	@echo "make proto  - regenerate liftbridge_api from api.proto"
	@echo "make lint   - ruff and mypy"

$(VENV)/.installed: pyproject.toml setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,nats,pynats2,spark,testing]'
	touch $@

venv: $(VENV)/.installed

server:
	bash scripts/install-server.sh

# The virtualenv (pip, mostly network) and the servers (go build, mostly CPU) at once;
# on a fresh machine this is the first few minutes of `make test` and `make demo`.
setup:
	$(MAKE) --no-print-directory -j2 --output-sync=target venv server

# The Go client driver make bench compares the SDK with (bench/go, go-liftbridge v2.3.0).
bench-go:
	bash scripts/build-bench-go.sh

proto: venv
	$(PY) scripts/gen_proto.py

lint: venv
	$(VENV)/bin/ruff check liftbridge tests examples scripts bench chaos
	$(VENV)/bin/ruff format --check liftbridge tests examples scripts bench chaos
	$(VENV)/bin/mypy liftbridge tests examples bench chaos

# Under pyenv, make every installed 3.11-3.13 reachable as python3.1x for nox.
PYENV_PYTHONS := $(shell command -v pyenv >/dev/null 2>&1 && pyenv versions --bare | grep -E '^3\.1[123]\.' | paste -sd: -)

# The whole suite on the venv's Python (3.11), then the unit suite on 3.12 and 3.13.
# The Spark tests run in a pytest process of their own, first: PySpark starts its JVM
# with fork(), and a fork in a process where hundreds of gRPC tests had run crashed in
# gRPC's fork handling ("epoll_wait error: Bad file descriptor", JAVA_GATEWAY_EXITED).
# The tests mostly wait on servers and peers (a serial run used a third of one core),
# so the non-Spark suite runs on three pytest-xdist workers, a file per worker at a time
# (module fixtures such as a LocalCluster start once).
test: setup
	$(PY) -m pytest -q -p no:cacheprovider tests/spark
	$(PY) -m pytest -q -p no:cacheprovider -n 3 --dist loadfile tests --ignore=tests/spark
	$(MAKE) --no-print-directory -j2 --output-sync=target unit-3.12 unit-3.13

# One nox session per Python, both at once under `make test` (each output printed whole).
unit-3.12 unit-3.13: venv
	PYENV_VERSION="$(PYENV_PYTHONS)" $(VENV)/bin/nox -s $@ -- -n 2

unit: venv
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

demo: setup
	$(PY) examples/demo.py

bench: venv server bench-go
	$(PY) -m bench --cluster $(if $(wildcard bench/baseline.json),--baseline bench/baseline.json)
	$(PY) -m bench.spark

# Every row of the fault matrix, then 1,000,000 fuzzed inputs; the table goes to
# the terminal and chaos/results/last.json. `make test` runs the fast rows
# (tests/chaos/test_fast_matrix.py).
chaos: venv server
	timeout 900 $(PY) -m chaos

clean:
	rm -rf $(VENV) .cache build *.egg-info
