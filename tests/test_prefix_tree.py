"""The prefix tree: pure layout properties on random forests, and exactness on a real transformer."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.pool.types import Sample
from forge_cli.train.prefix_tree import pack, unique_tokens


def forest(rng: random.Random, n_groups: int = 3, vocab: int = 50) -> list[Sample]:
    """Agent-like samples: shared system prompts, multi-turn growth, branches, rewrites, duplicates."""
    samples = []
    for _ in range(n_groups):
        system = [rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
        for _ in range(rng.randrange(1, 4)):  # trajectories of a group
            history = list(system)
            for _ in range(rng.randrange(1, 4)):  # turns: each call's prompt is the history so far
                history += [rng.randrange(vocab) for _ in range(rng.randrange(1, 5))]
                out = [rng.randrange(vocab) for _ in range(rng.randrange(1, 6))]
                samples.append(Sample(history + out, len(history), [-rng.random() for _ in out], [rng.uniform(-1, 1) for _ in out]))
                if rng.random() < 0.2:  # context management: a rewrite that shares only a short prefix
                    history = history[: rng.randrange(1, len(history) + 1)]
                history += out
        if rng.random() < 0.3 and samples:
            samples.append(samples[-1])  # an exact duplicate
    return samples


def check_layout(samples: list[Sample], packs) -> None:
    terms = 0
    for b in packs:
        mask = b.attention_mask()[0, 0]
        for t in range(len(b.predictor)):
            i, p = b.sample[t], b.predictor[t]
            s = samples[i]
            # the predictor sees exactly its ancestors-or-self, and they spell the sample's prefix
            seen = mask[p].nonzero().flatten().tolist()
            prefix_len = b.position_ids[p] + 1
            assert [b.tokens[k] for k in seen] == list(s.tokens[:prefix_len])
            assert [b.position_ids[k] for k in seen] == list(range(prefix_len))
            assert b.tokens[p] == s.tokens[prefix_len - 1] and b.target[t] == s.tokens[prefix_len]
            assert b.old_logprob[t] == s.old_logprobs[prefix_len - s.prompt_len]
        terms += len(b.predictor)
    assert terms == sum(len(s.tokens) - s.prompt_len for s in samples)  # one term per output token, shared or not


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), budget=st.sampled_from([None, 8, 16, 40, 1000]))
def test_layout_properties(seed, budget):
    samples = forest(random.Random(seed))
    packs = pack(samples, budget)
    check_layout(samples, packs)
    if budget is None:
        assert len(packs) == 1 and len(packs[0]) == unique_tokens(samples)
    else:
        longest = max(len(s.tokens) for s in samples)
        assert all(len(b) <= max(budget, longest) for b in packs)  # only an unsplittable path may exceed


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), budget=st.sampled_from([None, 4, 8, 16, 40, 1000]))
def test_reuse_layout_properties(seed, budget):
    """Prefix reuse: every token laid out once; each predictor sees its trunks' tokens and then its
    in-batch ancestors, which spell its sample's prefix; trunks come before their dependants."""
    samples = forest(random.Random(seed))
    packs = pack(samples, budget, reuse_prefix=True)
    assert sum(len(b) for b in packs) == unique_tokens(samples)
    terms = 0
    open_trunks: list[int] = []
    for index, b in enumerate(packs):
        while open_trunks and open_trunks[-1] not in b.prefix:
            open_trunks.pop()
        assert list(b.prefix) == open_trunks  # depth-first: the prefix is the stack of open trunks
        assert b.prefix_len == sum(len(packs[t]) for t in b.prefix)
        prefix_tokens = [tok for t in b.prefix for tok in packs[t].tokens]
        mask = b.attention_mask()[0, 0] if not b.prefix else _mask_without_prefix(b)
        for t in range(len(b.predictor)):
            s, p = samples[b.sample[t]], b.predictor[t]
            seen = prefix_tokens + [b.tokens[k] for k in mask[p].nonzero().flatten().tolist()]
            prefix_len = b.position_ids[p] + 1
            assert seen == list(s.tokens[:prefix_len])
            assert b.target[t] == s.tokens[prefix_len]
        terms += len(b.predictor)
        if b.trunk:
            assert len(set(b.subtree_end)) == 1  # one run: every token of a trunk is an ancestor of its dependants
            open_trunks.append(index)
        if budget is not None:
            assert len(b) <= budget  # trunks too: long paths and long nodes are cut
    assert terms == sum(len(s.tokens) - s.prompt_len for s in samples)


def _mask_without_prefix(b):
    import dataclasses

    return dataclasses.replace(b, prefix=(), prefix_len=0).attention_mask()[0, 0]


def test_shared_prefix_is_stored_once():
    a = Sample([1, 2, 3, 4, 5], 3, [-0.1, -0.2], [1.0, 1.0])
    b = Sample([1, 2, 3, 9], 3, [-0.3], [0.5])
    [p] = pack([a, b])
    assert p.tokens == [1, 2, 3, 4, 5, 9] and p.position_ids == [0, 1, 2, 3, 4, 3]
    assert p.subtree_end == [6, 6, 6, 5, 5, 6]
    # token 9's predictor is the last shared token (position 2), as is token 4's
    assert sorted(zip(p.target, p.predictor)) == [(4, 2), (5, 3), (9, 2)]


def test_bad_samples():
    with pytest.raises(ForgeError, match="at least one prompt token"):
        Sample([1, 2], 0, [-1.0, -1.0], [0.0, 0.0])
    with pytest.raises(ForgeError, match="needs 2 old logprobs"):
        Sample([1, 2, 3], 1, [-1.0], [0.0, 0.0])


# ---- exactness on a real transformer ------------------------------------------------------------------


def tiny_llama(dtype, attn_implementation: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, attn_implementation=attn_implementation)
    model = LlamaForCausalLM(cfg).to(dtype)
    if dtype == torch.float64:
        # transformers' RMSNorm computes in float32 whatever the model's dtype; in float64 that
        # rounding (not the tree) would dominate the comparison, so keep it in float64 here
        import types

        def rms(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

        for module in model.modules():
            if type(module).__name__ == "LlamaRMSNorm":
                module.forward = types.MethodType(rms, module)
    return model


def separate_logprobs(model, samples):
    out = []
    for s in samples:
        ids = torch.tensor([list(s.tokens)])
        logits = model(input_ids=ids).logits[0].to(torch.float64)
        logp = torch.log_softmax(logits, -1)
        pred = torch.arange(s.prompt_len - 1, len(s.tokens) - 1)
        out.append(logp[pred, ids[0, s.prompt_len:]])
    return out


def merged_logprobs(model, samples, budget, attention):
    """Per-sample logprobs back from the packed forwards (the inverse of the layout)."""
    from forge_cli.train.prefix_tree import unpack_terms
    from forge_cli.train.step import packed_logprobs

    batches = pack(samples, budget)
    values = [packed_logprobs(model, b, attention=attention).to(torch.float64) for b in batches]
    per_sample = unpack_terms(samples, batches, [list(v) for v in values])
    assert all(v is not None for x in per_sample for v in x)  # every output token got its value
    return [torch.stack(x) for x in per_sample]


# the dense path runs the model's own attention, so it must be right on each implementation: eager
# adds the mask to the scores (a boolean mask would add 1, not mask), SDPA takes it as given
@pytest.mark.parametrize(("attention", "attn_implementation"), [("tree", "sdpa"), ("dense", "sdpa"), ("dense", "eager")])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), budget=st.sampled_from([None, 12, 24, 64]))
def test_merged_equals_unmerged(attention, attn_implementation, dtype, tol, budget, seed):
    """Random forests (shared system prompts, multi-turn growth, branches, rewrites, duplicates):
    per-token logprobs, the loss and every parameter gradient equal the sample-at-a-time computation."""
    samples = forest(random.Random(seed))
    model = tiny_llama(dtype, attn_implementation)
    assert model.config._attn_implementation == attn_implementation
    if attn_implementation == "eager" and dtype == torch.float64:
        tol = 1e-7  # eager attention takes its softmax in float32 whatever the dtype (errors ~1e-8 here)
    loss_of = lambda lps: sum((torch.tensor(s.advantages, dtype=torch.float64) * lp).sum() for s, lp in zip(samples, lps)) / sum(len(lp) for lp in lps)

    model.zero_grad()
    sep = separate_logprobs(model, samples)
    loss_sep = loss_of(sep)
    loss_sep.backward()
    grads_sep = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad()
    mer = merged_logprobs(model, samples, budget, attention)
    loss_mer = loss_of(mer)
    loss_mer.backward()

    for a, b in zip(sep, mer):
        assert torch.allclose(a, b, rtol=tol, atol=tol)
    assert torch.allclose(loss_sep, loss_mer, rtol=tol, atol=tol)
    for n, p in model.named_parameters():
        assert torch.allclose(grads_sep[n], p.grad, rtol=tol * 10, atol=tol), n


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), budget=st.sampled_from([4, 8, 16, 40]))
def test_prefix_reuse_equals_unmerged(dtype, tol, budget, seed):
    """Trees split into trunks whose keys/values (and gradients) are reused across micro-batches:
    the loss and every parameter gradient equal the sample-at-a-time computation."""
    from types import SimpleNamespace

    from forge_cli.train.step import policy_loss_backward

    samples = forest(random.Random(seed))
    model = tiny_llama(dtype)
    n = sum(len(s.tokens) - s.prompt_len for s in samples)
    model.zero_grad()
    loss_sep = -sum((torch.tensor(s.advantages, dtype=torch.float64) * lp).sum() for s, lp in zip(samples, separate_logprobs(model, samples))) / n
    loss_sep.backward()
    grads_sep = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    cfg = SimpleNamespace(type="reinforce", eps_low=1e6, eps_high=0.28, token_mask=False)
    stats = policy_loss_backward(model, samples, cfg, budget=budget, attention="tree", split="reuse")
    assert stats.packed_tokens == unique_tokens(samples)  # nothing recomputed
    assert stats.loss == pytest.approx(float(loss_sep), rel=tol, abs=tol)
    for k, p in model.named_parameters():
        assert torch.allclose(grads_sep[k], p.grad, rtol=tol * 10, atol=tol), k


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6), budget=st.sampled_from([None, 8, 24]))
def test_tree_plan_matches_the_mask(seed, budget):
    """Each run's queries see exactly the keys the dense tree mask allows: its ancestor runs' keys
    and its own earlier ones."""
    from forge_cli.train.tree_attention import TreePlan

    for b in pack(forest(random.Random(seed)), budget):
        mask = b.attention_mask()[0, 0]
        plan = TreePlan.from_subtree_end(b.subtree_end)
        assert plan.runs[0][0] == 0 and plan.runs[-1][1] == len(b) and all(x[1] == y[0] for x, y in zip(plan.runs, plan.runs[1:]))
        for (s, e), idx in zip(plan.runs, plan.ancestors):
            ancestors = [] if idx is None else idx.tolist()
            for q in range(s, e):
                assert mask[q].nonzero().flatten().tolist() == ancestors + list(range(s, q + 1))


@pytest.mark.parametrize("prefix_len", [0, 5])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_portable_tree_attention_equals_the_cpu_kernel_path(dtype, prefix_len):
    """The SDPA path other devices take gives the CPU flash path's outputs and gradients (with and
    without a reused prefix's keys)."""
    from forge_cli.train.tree_attention import TreePlan, _tree_sdpa, _TreeFlashCPU

    [b] = pack(forest(random.Random(11), n_groups=4), None)
    plan = TreePlan.from_subtree_end(b.subtree_end, prefix_len=prefix_len)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 3, len(b), 8, generator=g, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(1, 3, prefix_len + len(b), 8, generator=g, dtype=dtype, requires_grad=True) for _ in range(2))
    dout = torch.randn(1, 3, len(b), 8, generator=g, dtype=dtype)
    results = []
    for fn in (lambda: _TreeFlashCPU.apply(q, k, v, plan, 0.3), lambda: _tree_sdpa(q, k, v, plan, 0.3)):
        out = fn()
        grads = torch.autograd.grad(out, (q, k, v), dout)
        results.append((out, *grads))
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, c in zip(*results):
        assert torch.allclose(a, c, rtol=tol, atol=tol)


def test_tree_attention_refuses_what_it_cannot_do_exactly():
    from forge_cli.train.tree_attention import TreePlan, tree_attention_forward

    q = torch.zeros(1, 2, 3, 4)
    plan = TreePlan.from_subtree_end([3, 3, 3])
    with pytest.raises(ForgeError, match="sliding-window"):
        tree_attention_forward(None, q, q, q, None, tree_plan=plan, sliding_window=2)
    with pytest.raises(ForgeError, match="tree_plan"):
        tree_attention_forward(None, q, q, q, None)


@pytest.mark.gpu
@pytest.mark.parametrize("budget", [None, 24])
def test_flex_attention_block_mask_equals_unmerged_on_cuda(budget):
    """FlexAttention (CUDA only: no backward on CPU) with the block mask built from subtree_end."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from forge_cli.train.step import packed_logprobs

    samples = forest(random.Random(5))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=256, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)
    plain = LlamaForCausalLM(cfg).to(torch.float32)  # the reference: each sample alone, on CPU, no gradient
    plain.config._attn_implementation = "sdpa"
    with torch.no_grad():
        sep = torch.cat(separate_logprobs(plain, samples)).to(torch.float64)
    flex = LlamaForCausalLM(cfg).to(torch.float32)
    flex.load_state_dict(plain.state_dict())
    flex.to("cuda")
    flex.config._attn_implementation = "flex_attention"
    got = []
    for b in pack(samples, budget):
        values = packed_logprobs(flex, b, attention="flex")
        values.sum().backward()  # the backward pass exists on CUDA
        got += list(zip(b.sample, [b.position_ids[p] for p in b.predictor], values.detach().cpu().tolist()))
    got.sort()
    flat = [v for _, _, v in got]
    assert torch.allclose(torch.tensor(flat, dtype=torch.float64), sep, atol=1e-4)
