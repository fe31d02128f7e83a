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


def tiny_llama(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, attn_implementation="sdpa")
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


def packed_logprobs(model, samples, budget):
    per_sample = [[None] * (len(s.tokens) - s.prompt_len) for s in samples]
    for b in pack(samples, budget):
        ids = torch.tensor([b.tokens])
        mask = b.attention_mask()
        logits = model(input_ids=ids, attention_mask=mask, position_ids=torch.tensor([b.position_ids])).logits[0].to(torch.float64)
        logp = torch.log_softmax(logits, -1)
        values = logp[torch.tensor(b.predictor), torch.tensor(b.target)]
        for t, v in enumerate(values):
            s = samples[b.sample[t]]
            j = b.position_ids[b.predictor[t]] + 1 - s.prompt_len
            per_sample[b.sample[t]][j] = v
    return [torch.stack(x) for x in per_sample]


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), budget=st.sampled_from([None, 12, 24, 64]))
def test_merged_equals_unmerged(dtype, tol, budget, seed):
    """Random forests (shared system prompts, multi-turn growth, branches, rewrites, duplicates)."""
    samples = forest(random.Random(seed))
    model = tiny_llama(dtype)
    loss_of = lambda lps: sum((torch.tensor(s.advantages, dtype=torch.float64) * lp).sum() for s, lp in zip(samples, lps)) / sum(len(lp) for lp in lps)

    model.zero_grad()
    sep = separate_logprobs(model, samples)
    loss_sep = loss_of(sep)
    loss_sep.backward()
    grads_sep = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad()
    mer = packed_logprobs(model, samples, budget)
    loss_mer = loss_of(mer)
    loss_mer.backward()

    for a, b in zip(sep, mer):
        assert torch.allclose(a, b, rtol=tol, atol=tol)
    assert torch.allclose(loss_sep, loss_mer, rtol=tol, atol=tol)
    for n, p in model.named_parameters():
        assert torch.allclose(grads_sep[n], p.grad, rtol=tol * 10, atol=tol), n


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("seed", [0, 3])
def test_ancestor_only_attention_equals_unmerged(dtype, tol, seed):
    from forge_cli.train.tree_attention import supports, tree_logprobs

    samples = forest(random.Random(seed))
    model = tiny_llama(dtype)
    assert supports(model)
    model.zero_grad()
    sep = separate_logprobs(model, samples)
    loss_sep = sum((torch.tensor(s.advantages, dtype=torch.float64) * lp).sum() for s, lp in zip(samples, sep))
    loss_sep.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logp, terms = tree_logprobs(model, samples)
    loss_tree = (torch.tensor(terms["advantage"], dtype=logp.dtype) * logp).sum()
    loss_tree.backward()
    flat_sep = torch.cat(sep)
    order = [t for i in range(len(samples)) for t in range(len(terms["sample"])) if terms["sample"][t] == i]
    assert torch.allclose(flat_sep, logp[order].to(torch.float64), rtol=tol, atol=tol)
    assert torch.allclose(loss_sep, loss_tree.to(torch.float64), rtol=tol, atol=tol)
    for n, p in model.named_parameters():
        assert torch.allclose(grads[n], p.grad, rtol=tol * 10, atol=tol * 10), n


@pytest.mark.gpu
@pytest.mark.parametrize("budget", [None, 24])
def test_flex_attention_block_mask_equals_unmerged_on_cuda(budget):
    """FlexAttention (CUDA only: no backward on CPU) with the block mask built from subtree_end."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from forge_cli.train.step import packed_logprobs

    samples = forest(random.Random(5))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)
    flex = LlamaForCausalLM(cfg).to("cuda", torch.float32)
    flex.config._attn_implementation = "flex_attention"
    sep = torch.cat(separate_logprobs(flex.cpu().to(torch.float32), samples)).to(torch.float64)
    flex.to("cuda")
    got = []
    for b in pack(samples, budget):
        values = packed_logprobs(flex, b)
        values.sum().backward()  # the backward pass exists on CUDA
        got += list(zip(b.sample, [b.position_ids[p] for p in b.predictor], values.detach().cpu().tolist()))
    got.sort()
    flat = [v for _, _, v in got]
    assert torch.allclose(torch.tensor(flat, dtype=torch.float64), sep, atol=1e-4)
