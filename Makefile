# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test mutation bench dist clean

# Exact, hashed versions from the lock (docs/supply-chain.md), then the project itself and the
# example tool package (examples/provider_tools: the GitHub, Google and Slack tools).
$(STAMP): pyproject.toml requirements-dev.lock examples/provider_tools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e examples/provider_tools
	touch $(STAMP)

# `make demo PORT=9000` moves the MCP server; the dev AS and mock providers take PORT+1
# unless PROVIDERS_PORT says otherwise.
PORT           ?= 8000
PROVIDERS_PORT ?= $(shell echo $$(($(PORT) + 1)))

demo: $(STAMP)
	$(BIN)/mcp-url-connect demo --port $(PORT) --providers-port $(PROVIDERS_PORT)

# -rs lists every skipped test with why and how to enable it (Redis, nginx, chromium, and
# `bash tests/integration/node/install.sh` for tests/integration); with CI set they fail instead.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -q -rs
	@echo "Skipped tests (if any, listed above) need Redis, nginx, chromium or the npm servers of"
	@echo "tests/integration (bash tests/integration/node/install.sh): see README.md, 'Two commands'."

# Disables each security check in turn; fails if any is not caught by a test.
mutation: $(STAMP)
	$(BIN)/python scripts/mutation_check.py --copy

bench: $(STAMP)
	$(BIN)/python -m bench.flow

# The wheel and the sdist in dist/ (the wheel built from the sdist, so the sdist is complete),
# with the lock's setuptools and no download: what a release publishes, and what an adopter
# installs before there is one (docs/testing.md, "Install").
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist .

clean:
	rm -rf $(VENV) .mcp-url-connect .pytest_cache .mypy_cache .ruff_cache dist build
