"""Tree attention on a CUDA device: the three exact paths side by side on one realistic agent batch.

For the trace of ``benchmarks/prefix_tree.py`` (one group of 8 trajectories, 10–30 turns, a shared
1,000-token system prompt) and a Llama of the given width, forward + backward of the policy loss
through :func:`forge_cli.train.step.policy_loss_backward` with

  dense: the prefix tree under a dense ``[T, T]`` boolean mask (the model's SDPA), recompute split;
  tree:  ancestor-only attention (per-run SDPA on CUDA, ``tree_attention``), trunks reused;
  flex:  FlexAttention with the block-sparse mask from ``subtree_end`` (CUDA only), recompute split.

Each mode: one warm-up, then the median of ``--repeats`` timed runs (``torch.cuda.synchronize``
around each), peak device memory, the loss, and the largest relative difference of every parameter
gradient from ``dense``'s (the reference: every pair computed). Without CUDA it runs ``dense`` and
``tree`` on the CPU (a check of the script, not a figure).

    python benchmarks/tree_attention_cuda.py [--hidden 1024] [--layers 4] [--dtype bf16] [--quick]

Writes benchmarks/results/tree_attention_cuda.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from prefix_tree import LOSS, model, traces  # noqa: E402

from forge_cli.train.prefix_tree import unique_tokens  # noqa: E402
from forge_cli.train.step import policy_loss_backward  # noqa: E402

SPLIT = {"dense": "recompute", "tree": "reuse", "flex": "recompute"}


def run(m, samples, mode: str, budget: int, device: torch.device) -> tuple[float, float, dict]:
    """One forward + backward: (seconds, loss, gradients)."""
    m.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = policy_loss_backward(m, samples, LOSS, budget=budget, attention=mode, split=SPLIT[mode]).loss
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    return secs, loss, {n: p.grad.detach().float().clone() for n, p in m.named_parameters() if p.grad is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=1024, help="model width (heads of 64)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--budget", type=int, default=16384, help="micro-batch tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="short trajectories (a smoke run)")
    parser.add_argument("--out", default=str(HERE / "results" / "tree_attention_cuda.json"))
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    samples = traces(random.Random(0), 1, 1000, (4, 8) if args.quick else (10, 31))
    modes = ["dense", "tree", "flex"] if device.type == "cuda" else ["dense", "tree"]
    rows, reference = {}, None
    for mode in modes:
        m = model(args.hidden, args.layers, dtype).to(device)
        if mode == "flex":
            m.config._attn_implementation = "flex_attention"
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        run(m, samples, mode, args.budget, device)  # warm-up (FlexAttention compiles here)
        timed = [run(m, samples, mode, args.budget, device) for _ in range(args.repeats)]
        secs, loss, grads = timed[-1]
        reference = reference or grads
        diff = max(float((grads[n] - g).abs().max() / g.abs().max().clamp_min(1e-30)) for n, g in reference.items())
        rows[mode] = {"seconds": round(statistics.median(t for t, _, _ in timed), 4), "loss": loss,
                      "max_rel_grad_diff_vs_dense": diff,
                      "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if device.type == "cuda" else None}
        print(f"  {mode}: {rows[mode]['seconds']:.3f} s", file=sys.stderr)
        del m
    total = sum(len(s.tokens) for s in samples)
    result = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", "benchmarks/tree_attention_cuda.py", *sys.argv[1:]]),
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "model": {"hidden": args.hidden, "layers": args.layers, "dtype": args.dtype},
              "samples": len(samples), "total_tokens": total, "unique_tokens": unique_tokens(samples),
              "budget": args.budget, "modes": rows}
    print(f"{len(samples)} samples, {total} tokens, {result['unique_tokens']} unique; {result['device']}, "
          f"hidden {args.hidden} × {args.layers} layers, {args.dtype}")
    print(f"{'mode':<8}{'seconds':>10}{'vs dense':>10}{'peak MiB':>10}{'loss':>14}{'grad rel diff':>15}")
    for mode, r in rows.items():
        peak = f"{r['peak_mib']:.0f}" if r["peak_mib"] is not None else "-"
        print(f"{mode:<8}{r['seconds']:>10.3f}{rows['dense']['seconds'] / r['seconds']:>9.2f}×{peak:>10}"
              f"{r['loss']:>14.6g}{r['max_rel_grad_diff_vs_dense']:>15.2e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
