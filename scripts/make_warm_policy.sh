#!/usr/bin/env bash
# The recipe of the warm policy Forge ships (forge_cli/engine/warm_policy): the embedded default,
# created afresh in a FORGE_HOME of its own, warm-started by `forge model warmstart` on the
# repository's forge.toml (its suite, scaffold and teacher) for a fixed number of steps with the
# learning rate falling over all of them — so the same command twice gives the same weights
# (tests/test_warm_policy.py replays its first steps against the record). 74 minutes here on 2 cores
# (2026-12-04, the test suite running beside it for most of them; the steps do not depend on the speed).
#
#   bash scripts/make_warm_policy.sh [OUT]      # default: forge_cli/engine/warm_policy
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-forge_cli/engine/warm_policy}"
home="$(mktemp -d)"
trap 'rm -rf "$home"' EXIT
FORGE_HOME="$home" .venv/bin/forge --config forge.toml --set run.dir="$home/runs" \
  --set train.warmstart.traces=4096 \
  --set train.warmstart.lr=3e-3 --set train.warmstart.final_lr_fraction=0.1 --set train.warmstart.decay_steps=4000 \
  --set train.warmstart.eval_every=500 \
  model warmstart --out "$out" --steps 4000 --minutes 240 --target 1.0 --run recipe
cp "$home/runs/recipe/metrics.jsonl" "$out/warmstart-metrics.jsonl"
