"""Prefix-tree training vs one sample at a time vs ordinary packing, on realistic agent traces.

Traces: groups of 8 trajectories of one task; a long shared system prompt with tool schemas;
10–30 turns each with tool outputs; some trajectories rewrite their context (keep the system
prompt and the last turns). Every model call is one sample (prompt = the history, output = the
turn). For the same batch and a small Llama (float32, CPU), forward + backward of the policy loss
(REINFORCE, so that all modes compute the same objective) with:

  (a) naive:   each sample alone (causal flash attention; logits only at output positions);
  (b) packed:  ordinary packing — whole samples back to back up to the token budget, each attending
               only to itself (variable-length packing: no cross-sample pairs are computed);
  (c) tree_dense: the prefix tree under a dense [T, T] tree mask (any model), split to the budget;
  (d) tree:    the prefix tree with ancestor-only attention (``tree_attention``, the default),
               split to the budget into trunks whose keys/values are reused — the figures
               ``speedup_vs_*`` and ``fraction_of_bound`` are (d)'s;
  (e) tree_recompute: as (d), but each part of a split tree recomputes the shared chain.

``bound`` = total tokens / unique tree tokens: the speed-up if every token cost the same. Attention
does not: a token's attention cost grows with its depth, and deep tokens are the least shared, so
``compute_bound`` (multiply-adds of the model below: linear layers per token, attention per
query–key pair, the lm_head per output row, in each mode's own accounting) is the speed-up an exact
method can reach with this model. ``max_abs_loss_diff`` compares every mode's loss with (a)'s.
Each mode runs in a fresh process; peak memory is its max RSS.

    python benchmarks/prefix_tree.py [--groups 1] [--budget 8192] [--hidden 256] [--quick]

Writes benchmarks/results/prefix_tree.json.

**On what real agents sent** (``--from-pool RUN [RUN ...]``): the samples are a pool's recorded
completions instead — every call of every trajectory, prompt and output as the gateway recorded them
(make the pools with `benchmarks/agent_pools.py`: real agents' sessions, groups of 8). One row per
pool, named by its run folder. The advantages are not the point (the loss is REINFORCE in every mode):
each completion gets one drawn from its id, the same in every mode. Writes
benchmarks/results/prefix_tree_pools.json (or ``--out``).

    python benchmarks/prefix_tree.py --from-pool benchmarks/results/agent-pools/runs/* [--skip tree_dense,tree_recompute]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from forge_cli.pool.types import Sample  # noqa: E402
from forge_cli.train.prefix_tree import Packed, build_trie, unique_tokens  # noqa: E402
from forge_cli.train.step import packed_logprobs, policy_loss_backward  # noqa: E402

VOCAB = 4096
# REINFORCE (−Â·log π): every mode then computes the same objective whatever the old logprobs
LOSS = SimpleNamespace(type="reinforce", eps_low=1e6, eps_high=0.28, token_mask=False)
MODES = ("naive", "packed", "tree_dense", "tree", "tree_recompute")
OPTIONAL = {"packed", "tree_dense", "tree_recompute"}  # --skip may leave these out of a long run


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


def pool_samples(run: Path) -> list[Sample]:
    """Every recorded completion with output tokens in the pool of ``run`` (a run folder or its
    pool.sqlite), trajectory by trajectory, each with one advantage drawn from its id."""
    import hashlib

    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(run / "pool.sqlite" if run.is_dir() else run, create=False)
    try:
        samples = []
        for group in pool.groups():
            for t in group.trajectories:
                for c in pool.trajectory(t.id).completions:
                    if not c.output_ids or not c.prompt_ids:
                        continue
                    adv = random.Random(hashlib.sha256(c.id.encode()).hexdigest()).uniform(-1, 1)
                    samples.append(Sample(list(c.prompt_ids) + list(c.output_ids), len(c.prompt_ids),
                                          list(c.output_logprobs), [adv] * len(c.output_ids), c.id))
    finally:
        pool.close()
    return samples


def vocab_of(samples: list[Sample]) -> int:
    return max(VOCAB, 1 + max((max(s.tokens) for s in samples), default=0))


def model(hidden: int, layers: int, dtype=torch.float32, vocab: int = VOCAB):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 8 // 3, num_hidden_layers=layers,
                      num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64, max_position_embeddings=32768,
                      attn_implementation="sdpa", tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).to(dtype)


def naive(m, samples, budget) -> float:
    """One sample per forward; logits only where they are used (``logits_to_keep``)."""
    n = sum(len(s.tokens) - s.prompt_len for s in samples)
    total = 0.0
    for s in samples:
        ids = torch.tensor([list(s.tokens)])
        k = len(s.tokens) - s.prompt_len
        logits = m(input_ids=ids, logits_to_keep=k + 1).logits[0, :-1]  # [k, V]: predictors of the output tokens
        logp = torch.log_softmax(logits, -1).gather(-1, ids[0, s.prompt_len:, None])[:, 0]
        loss = (-(torch.tensor(list(s.advantages)) * logp)).sum() / n
        loss.backward()
        total += float(loss.detach())
    return total


def packed(m, samples, budget) -> float:
    """Ordinary packing: whole samples back to back up to ``budget``, each attending to itself only."""
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
            p.subtree_end += [start + len(s.tokens)] * len(s.tokens)  # block-diagonal: one run per sample
            for j in range(s.prompt_len, len(s.tokens)):
                p.predictor.append(start + j - 1)
                p.target.append(s.tokens[j])
                p.advantage.append(s.advantages[j - s.prompt_len])
        logp = packed_logprobs(m, p, attention="tree")  # no ancestors: variable-length causal attention
        loss = (-(torch.tensor(p.advantage) * logp)).sum() / n
        loss.backward()
        total += float(loss.detach())
    return total


def tree_dense(m, samples, budget) -> float:
    return policy_loss_backward(m, samples, LOSS, budget=budget, attention="dense").loss


def tree(m, samples, budget) -> float:
    return policy_loss_backward(m, samples, LOSS, budget=budget, attention="tree", split="reuse").loss


def tree_recompute(m, samples, budget) -> float:
    return policy_loss_backward(m, samples, LOSS, budget=budget, attention="tree", split="recompute").loss


def compute_bound(samples: list[Sample], hidden: int, layers: int, vocab: int = VOCAB) -> dict:
    """Multiply-adds of one forward, for one-at-a-time and for the tree (backward is ~2× both)."""
    ff = hidden * 8 // 3
    per_token = layers * (4 * hidden * hidden + 3 * hidden * ff)  # q, k, v, o + gated MLP
    per_pair = layers * 2 * hidden  # q·k and p·v over all heads
    head = sum(len(s.tokens) - s.prompt_len for s in samples) * hidden * vocab  # lm_head at output rows (both)
    naive_pairs = sum(len(s.tokens) * (len(s.tokens) + 1) // 2 for s in samples)
    root, _ = build_trie(samples)
    tree_pairs, stack = 0, list(root.children.values())
    while stack:
        node = stack.pop()
        L = len(node.tokens)
        tree_pairs += L * node.depth + L * (L + 1) // 2
        stack.extend(node.children.values())
    naive_macs = sum(len(s.tokens) for s in samples) * per_token + naive_pairs * per_pair + head
    tree_macs = unique_tokens(samples) * per_token + tree_pairs * per_pair + head
    return {"naive_gmac": round(naive_macs / 1e9, 1), "tree_gmac": round(tree_macs / 1e9, 1),
            "pair_bound": round(naive_pairs / tree_pairs, 2), "compute_bound": round(naive_macs / tree_macs, 2)}


def timed(fn, *args) -> tuple[float, float]:
    t0 = time.perf_counter()
    loss = fn(*args)
    return time.perf_counter() - t0, loss


def measure(samples: list[Sample], args: argparse.Namespace, modes: list[str], source: list[str]) -> dict:
    """Each mode in a fresh process (``source``: how that process finds the same samples); the row."""
    vocab = vocab_of(samples)
    total = sum(len(s.tokens) for s in samples)
    unique = unique_tokens(samples)
    results = {}
    for name in reversed(modes):
        cmd = [sys.executable, __file__, "--mode", name, *source, "--budget", str(args.budget), "--hidden", str(args.hidden),
               "--layers", str(args.layers)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"mode {name} failed:\n{done.stderr[-3000:]}")
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  {name}: {results[name]['seconds']:.2f} s", file=sys.stderr)
    secs = {k: v["seconds"] for k, v in results.items()}
    row = {
        "model": {"hidden": args.hidden, "layers": args.layers, "vocab": vocab, "dtype": "float32"},
        "samples": len(samples), "total_tokens": total, "unique_tokens": unique,
        "output_tokens": sum(len(s.tokens) - s.prompt_len for s in samples), "budget": args.budget,
        "bound": round(total / unique, 2), **compute_bound(samples, args.hidden, args.layers, vocab),
        "seconds": {k: round(secs[k], 2) for k in modes},
        "peak_rss_mib": {k: round(results[k]["peak_rss_mib"], 1) for k in modes},
        "speedup_vs_naive": round(secs["naive"] / secs["tree"], 2),
        "speedup_vs_packed": round(secs["packed"] / secs["tree"], 2) if "packed" in secs else None,
        "dense_tree_speedup_vs_naive": round(secs["naive"] / secs["tree_dense"], 2) if "tree_dense" in secs else None,
        "reuse_vs_recompute": round(secs["tree_recompute"] / secs["tree"], 3) if "tree_recompute" in secs else None,
        "max_abs_loss_diff": max(abs(results[k]["loss"] - results["naive"]["loss"]) for k in modes),
    }
    row["max_rel_loss_diff"] = row["max_abs_loss_diff"] / max(abs(results["naive"]["loss"]), 1e-12)
    row["fraction_of_bound"] = round(row["speedup_vs_naive"] / row["bound"], 3)
    row["fraction_of_compute_bound"] = round(row["speedup_vs_naive"] / row["compute_bound"], 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--system", type=int, default=1000, help="shared system prompt + tool schemas, tokens")
    parser.add_argument("--budget", type=int, default=8192, help="micro-batch tokens for (b)–(e)")
    parser.add_argument("--hidden", type=int, default=256, help="model width (heads of 64)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="short trajectories (a smoke run)")
    parser.add_argument("--skip", default="", help="comma-separated optional modes to leave out (packed, tree_dense, tree_recompute)")
    parser.add_argument("--from-pool", nargs="+", type=Path, metavar="RUN", help=(
        "train on what these runs' pools recorded (a run folder or a pool.sqlite each), one row per pool"))
    parser.add_argument("--out", default=None, help="default: benchmarks/results/prefix_tree.json (--from-pool: prefix_tree_pools.json)")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # one mode, in this fresh process
        if args.from_pool:
            samples = pool_samples(args.from_pool[0])
        else:
            samples = traces(random.Random(0), args.groups, args.system, (4, 8) if args.quick else (10, 31))
        m = model(args.hidden, args.layers, vocab=vocab_of(samples))
        secs, loss = timed(globals()[args.mode], m, samples, args.budget)
        print(json.dumps({"seconds": secs, "loss": loss, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    skip = {m for m in args.skip.split(",") if m}
    if skip - OPTIONAL:
        parser.error(f"--skip takes only {', '.join(sorted(OPTIONAL))}")
    modes = [m for m in MODES if m not in skip]
    command = " ".join(["python", "benchmarks/prefix_tree.py", *sys.argv[1:]])
    if args.from_pool:
        for run in args.from_pool:
            if not (run / "pool.sqlite" if run.is_dir() else run).is_file():
                parser.error(f"no pool at {run} (a run folder with pool.sqlite, or the file)")
        rows = []
        for run in args.from_pool:
            samples = pool_samples(run)
            if not samples:
                print(f"{run}: no recorded completions, skipped", file=sys.stderr)
                continue
            name = (run if run.is_dir() else run.parent).name
            print(f"{name}: {len(samples)} samples", file=sys.stderr)
            rows.append({"pool": name, **measure(samples, args, modes, ["--from-pool", str(run)])})
            report_pools(rows)
        out = Path(args.out or HERE / "results" / "prefix_tree_pools.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "command": command, "rows": rows}, indent=2) + "\n")
        print(f"wrote {out}")
        return
    samples = traces(random.Random(0), args.groups, args.system, (4, 8) if args.quick else (10, 31))
    source = ["--groups", str(args.groups), "--system", str(args.system)] + (["--quick"] if args.quick else [])
    row = measure(samples, args, modes, source)
    secs = row["seconds"]
    print(f"{row['samples']} samples, {row['total_tokens']} tokens, {row['unique_tokens']} unique in the tree: bound {row['bound']}×, "
          f"compute bound {row['compute_bound']}× (attention pairs {row['pair_bound']}×); "
          f"model hidden {args.hidden} × {args.layers} layers")
    print(f"{'mode':<16}{'seconds':>9}{'vs naive':>10}{'peak RSS MiB':>14}")
    for k in modes:
        print(f"{k:<16}{secs[k]:>9.2f}{secs['naive'] / secs[k]:>9.2f}×{row['peak_rss_mib'][k]:>14.1f}")
    print(f"tree: {row['speedup_vs_naive']}× vs naive = {row['fraction_of_bound']} of the bound, "
          f"{row['fraction_of_compute_bound']} of the compute bound; {row['speedup_vs_packed']}× vs packed; "
          f"reuse vs recompute {row['reuse_vs_recompute'] or '(skipped)'}×; max |loss − loss(naive)| = {row['max_abs_loss_diff']:.2e}")
    out = Path(args.out or HERE / "results" / "prefix_tree.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "command": command, **row}, indent=2) + "\n")
    print(f"wrote {out}")


def report_pools(rows: list[dict]) -> None:
    """The per-pool table (printed again after each pool, so a long run shows what it has)."""
    print(f"\n{'pool':<34}{'samples':>8}{'tokens':>10}{'unique':>9}{'bound':>8}{'compute':>9}{'naive s':>9}{'packed s':>9}"
          f"{'tree s':>8}{'vs naive':>9}{'of cb':>7}{'RSS MiB':>9}{'loss diff':>11}")
    for r in rows:
        s = r["seconds"]
        print(f"{r['pool']:<34}{r['samples']:>8}{r['total_tokens']:>10}{r['unique_tokens']:>9}{r['bound']:>7.1f}×"
              f"{r['compute_bound']:>8.1f}×{s['naive']:>9.1f}{s.get('packed', float('nan')):>9.1f}{s['tree']:>8.1f}{r['speedup_vs_naive']:>8.1f}×"
              f"{r['fraction_of_compute_bound']:>7.2f}{r['peak_rss_mib']['tree']:>9.0f}{r['max_abs_loss_diff']:>11.1e}", flush=True)


if __name__ == "__main__":
    main()
