#!/usr/bin/env bash
# The GPU checks, prepared as one run for a lent CUDA machine. The `device` tool's H200 has Python
# 3.12 with CUDA torch, transformers, pytest, hypothesis, typer and pluggy, and no network.
#
#   here, once:  bash scripts/gpu_check.sh --fetch   # the wheels the image lacks -> .whl/ (git-ignored)
#   there:       bash scripts/gpu_check.sh           # run with .whl carried; results land in $OUT
#
# What it checks:
#   - the gpu-marked tests: FlexAttention's block mask from subtree_end equals the unmerged batch,
#     and its backward runs;
#   - benchmarks/tree_attention_cuda.py: dense, tree (per-run SDPA) and flex side by side, with
#     timings, peak memory and gradient agreement, in fp32 (quick) and in bf16.
# Not checked: vLLM on CUDA. Its wheel (~400 MB) is over the 64 MiB a call may carry, and the image
# has none.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 typing-inspection==0.4.5 annotated-types==0.8.0)
if [[ "${1:-}" == "--fetch" ]]; then
  exec python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${WHEELS[@]}"
fi
OUT="${OUT:-/tmp/forge-gpu-check}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" | tee "$OUT/versions.txt"
rc=0
timeout 240 python3 -m pytest -m gpu -p no:cacheprovider -q tests/test_prefix_tree.py 2>&1 | tee "$OUT/pytest.log" || rc=1
timeout 120 python3 benchmarks/tree_attention_cuda.py --quick --dtype fp32 --out "$OUT/tree_attention_cuda_fp32_quick.json" 2>&1 | tee "$OUT/bench_fp32_quick.log" || rc=1
timeout 240 python3 benchmarks/tree_attention_cuda.py --out "$OUT/tree_attention_cuda.json" 2>&1 | tee "$OUT/bench_bf16.log" || rc=1
exit $rc
