# The README's two commands (make setup, make train), the test command, and a few conveniences.
VENV ?= .venv
export FORGE_VENV := $(abspath $(VENV))

.PHONY: setup system-deps train test test-fast bench bench-pools clean

setup:            ## create/refresh the project venv (a no-op when nothing changed)
	@bash scripts/setup.sh

system-deps:      ## Debian packages the tests use (PostgreSQL server), installed if missing
	@bash scripts/system-deps.sh

train: setup      ## the main job: forge train on the embedded default (RL from the shipped warm policy; 15 minutes)
	$(VENV)/bin/forge train

test: setup system-deps  ## the whole test suite, slow tests included (what CI runs)
	$(VENV)/bin/python -m pytest -n 2 --durations=30  # two workers (tests/conftest.py: the heavy modules on one, in order); the slowest 30 in the log

test-fast: setup system-deps  ## everything but the slow tests
	$(VENV)/bin/python -m pytest -n 2 -m "not slow"

bench: setup      ## every benchmark; figures go to benchmarks/results/
	$(VENV)/bin/python benchmarks/cli_startup.py
	$(VENV)/bin/python benchmarks/scheduler_sim.py
	$(VENV)/bin/python benchmarks/pool_ingest.py
	$(VENV)/bin/python benchmarks/gateway_overhead.py
	$(VENV)/bin/python benchmarks/gateway_long_prompts.py
	$(VENV)/bin/python benchmarks/gateway_long_prompts.py --tokenizer qwen3 --out benchmarks/results/gateway_long_prompts_qwen3.json
	$(VENV)/bin/python benchmarks/engine_throughput.py
	$(VENV)/bin/python benchmarks/router.py
	$(VENV)/bin/python benchmarks/prefix_tree.py

bench-pools: setup  ## the prefix tree on what real agents sent: record their pools, then train on them (~30 min)
	$(VENV)/bin/python benchmarks/agent_pools.py --out benchmarks/results/agent-pools
	$(VENV)/bin/python benchmarks/prefix_tree.py --skip tree_dense,tree_recompute --from-pool \
		benchmarks/results/agent-pools/runs/agents-opencode benchmarks/results/agent-pools/runs/agents-gptme \
		benchmarks/results/agent-pools/runs/white-tool-call-truncate benchmarks/results/agent-pools/runs/white-tool-call-summarize

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist
