# The README's words: `make demo`, `make test`, `make bench`, `make lint`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
PYTEST_WORKERS ?= 2
TORCH_VERSION ?= 2.13.0

.PHONY: install demo soak test test-fast bench lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch is only for the probe's tests (the server never imports it). Pin the CPU build this
	# machine ships; an unpinned `torch` would pull a multi-GB CUDA build.
	$(PIP) install -q "torch==$(TORCH_VERSION)" || echo "make: torch $(TORCH_VERSION) not installable here; probe tests will fail"
	$(PIP) install -q -e '.[dev]'
	touch $@

## The demo: twin + collectors + dashboard on SQLite and a real Redis (started if none is configured).
demo: install
	$(PY) -m fabricmon.demo

## The product as used for an hour (twin, collectors, dashboard, faults, invariants): `make soak`,
## or shorter: `make soak SOAK_MINUTES=10`. Prints its figures and one BENCH soak line.
SOAK_MINUTES ?= 60
soak: install
	$(PY) bench/soak.py --minutes $(SOAK_MINUTES)

## Everything: unit, integration against real services on loopback, browser end-to-end.
test: install
	bash scripts/test.sh

## Units only: no services, no browser, no seeded sweeps (marked slow); seconds in all.
test-fast: install
	$(PY) -m pytest -q -m "not integration and not e2e and not slow" -n $(PYTEST_WORKERS)

bench: install
	bash scripts/bench.sh

## ruff (the rules in pyproject.toml), mypy strict on core and collectors, the layer contracts.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy fabricmon/core collectors
	$(VENV)/bin/lint-imports

clean:
	rm -rf var test-output .pytest_cache
