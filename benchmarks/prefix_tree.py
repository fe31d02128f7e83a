"""Prefix-tree training vs one sample at a time vs ordinary packing, on realistic agent traces.

Traces: groups of 8 trajectories of one task; a long shared system prompt with tool schemas;
10–30 turns each with tool outputs; some trajectories rewrite their context (keep the system
prompt and the last turns). Every model call is one sample (prompt = the history, output = the
turn). For the same batch and a small Llama (float32, SDPA, CPU), forward + backward of the policy loss
(REINFORCE, so that all three compute the same objective) with:

  (a) each sample alone;
  (b) ordinary packing: samples concatenated up to the token budget, block-diagonal causal mask;
  (c) the prefix tree with a dense mask (``prefix_tree.pack``), split at branch points to the budget;
  (d) the prefix tree with ancestor-only attention (``tree_attention``): each node attends to its
      ancestors' cached keys/values — the figures ``speedup_vs_*`` and ``fraction_of_bound`` are (d)'s.

The bound on the speed-up is total tokens / unique tree tokens. ``max_abs_loss_diff`` compares
(c)'s loss with (a)'s. Each mode runs in a fresh process; peak memory is its max RSS.

    python benchmarks/prefix_tree.py [--groups 1] [--budget 2048] [--quick]

Writes benchmarks/results/prefix_tree.json.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from forge_cli.pool.types import Sample
from forge_cli.train.prefix_tree import Packed, unique_tokens  # noqa: E402
from forge_cli.train.step import policy_loss_backward  # noqa: E402

VOCAB = 4096
# REINFORCE (−Â·log π): the three modes then compute the same objective whatever the old logprobs
LOSS = SimpleNamespace(type="reinforce", eps_low=1e6, eps_high=0.28, token_mask=False)


def traces(rng: random.Random, groups: int, system_len: int, turns: tuple[int, int]) -> list[Sample]:
    samples = []
    for _ in range(groups):
        system = [rng.randrange(VOCAB) for _ in range(system_len)]  # system prompt + tool schemas
        task = [rng.randrange(VOCAB) for _ in range(rng.randrange(40, 120))]
        for _ in range(8):
            history = system + task
            for _turn in range(rng.randrange(*turns)):
                out = [rng.randrange(VOCAB) for _ in range(rng.randrange(20, 80))]  # the assistant turn
                samples.append(Sample(history + out, len(history), [-1.0] * len(out), [rng.uniform(-1, 1)] * len(out)))
                tool = [rng.randrange(VOCAB) for _ in range(rng.randrange(20, 200))]  # tool output
                history = history + out + tool
                if rng.random() < 0.05:  # context management: keep system + task + a recent tail
                    history = system + task + history[-rng.randrange(100, 400):]
    return samples


def model(dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, max_position_embeddings=32768, attn_implementation="sdpa", tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).to(dtype)


def naive(m, samples) -> float:
    n = sum(len(s.tokens) - s.prompt_len for s in samples)
    total = 0.0
    for s in samples:
        ids = torch.tensor([list(s.tokens)])
        logits = m(input_ids=ids).logits[0, s.prompt_len - 1 : -1]
        logp = torch.log_softmax(logits, -1).gather(-1, ids[0, s.prompt_len:, None])[:, 0]
        loss = (-(torch.tensor(list(s.advantages)) * logp)).sum() / n
        loss.backward()
        total += float(loss)
    return total


def packed_plain(m, samples, budget) -> float:
    """Ordinary packing: whole samples back to back, block-diagonal causal mask."""
    n = sum(len(s.tokens) - s.prompt_len for s in samples)
    bins: list[list[Sample]] = [[]]
    for s in samples:
        if bins[-1] and sum(len(x.tokens) for x in bins[-1]) + len(s.tokens) > budget:
            bins.append([])
        bins[-1].append(s)
    total = 0.0
    for group in bins:
        p = Packed()
        for s in group:
            start = len(p.tokens)
            p.tokens += list(s.tokens)
            p.position_ids += list(range(len(s.tokens)))
            p.subtree_end += [start + len(s.tokens)] * len(s.tokens)
            for j in range(s.prompt_len, len(s.tokens)):
                p.predictor.append(start + j - 1)
                p.target.append(s.tokens[j])
                p.advantage.append(s.advantages[j - s.prompt_len])
        from forge_cli.train.step import packed_logprobs

        logp = packed_logprobs(m, p)
        loss = (-(torch.tensor(p.advantage) * logp)).sum() / n
        loss.backward()
        total += float(loss)
    return total


def tree(m, samples, budget) -> float:
    return policy_loss_backward(m, samples, LOSS, budget=budget, attention="dense").loss


def tree_kv(m, samples, budget) -> float:
    return policy_loss_backward(m, samples, LOSS, attention="ancestors").loss


def timed(fn, *args) -> tuple[float, float, float]:
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    loss = fn(*args)
    return time.perf_counter() - t0, loss, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--system", type=int, default=1000, help="shared system prompt + tool schemas, tokens")
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--quick", action="store_true", help="short trajectories (a smoke run)")
    parser.add_argument("--mode", choices=["naive", "packed", "tree", "tree_kv"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    samples = traces(random.Random(0), args.groups, args.system, (4, 8) if args.quick else (10, 31))
    if args.mode:  # one mode, in this fresh process
        fn = {"naive": lambda m: naive(m, samples), "packed": lambda m: packed_plain(m, samples, args.budget),
              "tree": lambda m: tree(m, samples, args.budget), "tree_kv": lambda m: tree_kv(m, samples, args.budget)}[args.mode]
        secs, loss, _ = timed(fn, model())
        print(json.dumps({"seconds": secs, "loss": loss, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    import subprocess

    total = sum(len(s.tokens) for s in samples)
    unique = unique_tokens(samples)
    results = {}
    for name in ("tree_kv", "tree", "packed", "naive"):
        cmd = [sys.executable, __file__, "--mode", name, "--groups", str(args.groups), "--system", str(args.system),
               "--budget", str(args.budget)] + (["--quick"] if args.quick else [])
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    n_out = sum(len(s.tokens) - s.prompt_len for s in samples)
    row = {
        "samples": len(samples), "total_tokens": total, "unique_tokens": unique, "output_tokens": n_out,
        "bound": round(total / unique, 2), "budget": args.budget,
        "seconds": {k: round(v["seconds"], 2) for k, v in results.items()},
        "peak_rss_mib": {k: round(v["peak_rss_mib"], 1) for k, v in results.items()},
        "speedup_vs_naive": round(results["naive"]["seconds"] / results["tree_kv"]["seconds"], 2),
        "speedup_vs_packed": round(results["packed"]["seconds"] / results["tree_kv"]["seconds"], 2),
        "dense_tree_speedup_vs_naive": round(results["naive"]["seconds"] / results["tree"]["seconds"], 2),
        "max_abs_loss_diff": max(abs(results[k]["loss"] - results["naive"]["loss"]) for k in ("tree", "tree_kv")),
    }
    row["fraction_of_bound"] = round(row["speedup_vs_naive"] / row["bound"], 3)
    print(f"{len(samples)} samples, {total} tokens, {unique} unique in the tree: bound {row['bound']}×  (budget {args.budget})")
    print(f"{'mode':<10}{'seconds':>9}{'peak RSS MiB':>14}")
    for k in ("naive", "packed", "tree", "tree_kv"):
        print(f"{k:<10}{row['seconds'][k]:>9.2f}{row['peak_rss_mib'][k]:>14.1f}")
    print(f"tree (ancestor-only attention): speed-up vs naive {row['speedup_vs_naive']}× ({row['fraction_of_bound']} of the bound), "
          f"vs packed {row['speedup_vs_packed']}×; dense-mask tree {row['dense_tree_speedup_vs_naive']}×; "
          f"max |loss − loss(naive)| = {row['max_abs_loss_diff']:.2e}")
    out = HERE / "results" / "prefix_tree.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), **row}, indent=2) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
