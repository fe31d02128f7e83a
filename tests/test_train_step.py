"""Train-step options: attention modes, precision."""

from __future__ import annotations

import copy
import random
from types import SimpleNamespace

import pytest
import torch

from forge_cli.errors import ForgeError
from forge_cli.train.engines import TorchTrainEngine, resolve_precision
from forge_cli.train.step import attention_mode, policy_loss_backward
from tests.test_prefix_tree import forest, tiny_llama

CISPO = SimpleNamespace(type="cispo", eps_low=1e6, eps_high=0.28, token_mask=False)


def test_attention_mode_picks_tree_for_interface_models_and_refuses_unknown_modes():
    model = tiny_llama(torch.float32)
    assert attention_mode(model) == "tree"
    assert attention_mode(model, "dense") == "dense"
    with pytest.raises(ForgeError, match="needs a model loaded with attn_implementation='flex_attention'"):
        policy_loss_backward(model, forest(random.Random(0)), CISPO, attention="flex")
    model.config._attn_implementation = "flex_attention"
    assert attention_mode(model) == "tree"  # FlexAttention has no backward on CPU: auto is flex on CUDA only
    with pytest.raises(ForgeError, match="unknown attention mode 'fast'"):
        attention_mode(model, "fast")


@pytest.mark.parametrize("split", ["reuse", "recompute"])
def test_a_budget_below_one_token_is_refused(split):
    from forge_cli.train.prefix_tree import pack

    samples = forest(random.Random(0))
    for budget in (0, -3):
        with pytest.raises(ForgeError, match="at least 1 token"):
            pack(samples, budget, reuse_prefix=split == "reuse")
        with pytest.raises(ForgeError, match="at least 1 token"):
            policy_loss_backward(tiny_llama(torch.float32), samples, CISPO, budget=budget, split=split)


def test_a_step_leaves_nothing_alive(monkeypatch):
    """A trunk's captured keys/values (held by its TreePlan) are freed when the step returns: the
    autograd node keeps only the layout, not the plan (a cycle through autograd would keep them)."""
    import gc
    import weakref

    from forge_cli.train import tree_attention

    plans = []
    make = tree_attention.TreePlan.from_subtree_end.__func__

    def spy(cls, *args, **kw):
        plan = make(cls, *args, **kw)
        plans.append(weakref.ref(plan))
        return plan

    monkeypatch.setattr(tree_attention.TreePlan, "from_subtree_end", classmethod(spy))
    model = tiny_llama(torch.float32)
    stats = policy_loss_backward(model, forest(random.Random(3)), CISPO, budget=4, split="reuse")
    gc.collect()
    assert stats.micro_batches > 3 and len(plans) >= stats.micro_batches
    assert [r for r in plans if r() is not None] == []


def test_precision_auto_is_float32_on_cpu():
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ForgeError, match="unknown precision 'fp8'"):
        resolve_precision("fp8", "cpu")


def test_a_step_uses_the_threads_it_is_given_in_the_thread_that_trains():
    """train.threads: the step's thread runs torch on that many threads (the loop trains in a worker
    thread, and torch's thread count is per calling thread), with the same result as torch's default."""
    import threading

    samples = forest(random.Random(3))
    base, seen, losses = tiny_llama(torch.float32), {}, {}
    for threads in (None, 1):
        engine = TorchTrainEngine(copy.deepcopy(base), lr=1e-3, threads=threads)

        def work(threads: int | None = threads, engine: TorchTrainEngine = engine) -> None:
            losses[threads] = engine.step(samples, CISPO).loss
            seen[threads] = torch.get_num_threads()

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    # torch hands the last count set to threads started later: give the rest of the suite its own back
    restore = threading.Thread(target=torch.set_num_threads, args=(seen[None],))
    restore.start()
    restore.join()
    assert seen[1] == 1
    assert seen[None] == torch.get_num_threads()  # unset: torch's own choice, untouched
    assert losses[1] == pytest.approx(losses[None], rel=1e-5)


def test_bf16_autocast_step_tracks_the_float32_step():
    """bf16 mixed precision (autocast; float32 master weights) on the tree path, whole and split:
    same loss to bf16's resolution, and the weights it updates stay float32."""
    samples = forest(random.Random(2))
    base = tiny_llama(torch.float32)
    results = {}
    for precision in ("fp32", "bf16"):
        model = copy.deepcopy(base)
        engine = TorchTrainEngine(model, lr=1e-3, precision=precision)
        first = engine.step(samples, CISPO)
        second = engine.step(samples, CISPO, budget=8)  # split into trunks whose keys/values are reused
        results[precision] = (first.loss, second.loss)
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert results["bf16"][0] == pytest.approx(results["fp32"][0], rel=3e-2, abs=1e-3)
    assert results["bf16"][1] == pytest.approx(results["fp32"][1], rel=3e-2, abs=1e-3)
    assert results["bf16"][0] != results["fp32"][0]  # autocast really ran in bf16


def test_tree_attention_refuses_a_model_that_bypasses_it_and_gradient_checkpointing():
    from forge_cli.pool.types import Sample
    from forge_cli.train.step import policy_loss_backward

    samples = [Sample([1, 2, 3, 4], 2, [-1.0, -1.0], [1.0, 1.0]), Sample([1, 2, 5], 2, [-1.0], [1.0])]
    model = tiny_llama(torch.float32)
    model.config.num_hidden_layers = 3  # one layer more than ran through the tree attention
    with pytest.raises(ForgeError, match="did not route every layer's attention"):
        policy_loss_backward(model, samples, CISPO, attention="tree")
    model = tiny_llama(torch.float32)
    model.gradient_checkpointing_enable()
    with pytest.raises(ForgeError, match="gradient checkpointing"):
        policy_loss_backward(model, samples, CISPO, attention="tree")
    assert model.config._attn_implementation == "sdpa"  # the switch was undone


def test_bf16_gradients_of_a_widely_shared_prefix_accumulate_in_float32():
    """An ancestor's key gradient sums over every descendant run; in bf16 that sum must not be
    rounded run by run (no worse than dense bf16 SDPA against a float64 reference)."""
    from forge_cli.train.tree_attention import TreePlan, _tree_sdpa, _TreeFlashCPU

    root, branches, width = 16, 300, 2
    T = root + branches * width
    subtree_end = [T] * root + [root + (b + 1) * width for b in range(branches) for _ in range(width)]
    plan = TreePlan.from_subtree_end(subtree_end)
    g = torch.Generator().manual_seed(0)
    q64, k64, v64 = (torch.randn(1, 2, T, 16, generator=g, dtype=torch.float64) for _ in range(3))
    dout = torch.randn(1, 2, T, 16, generator=g, dtype=torch.float64)
    mask = torch.tensor([[k <= q < subtree_end[k] for k in range(T)] for q in range(T)])

    def grad_k(fn, dtype):
        q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q64, k64, v64))
        (fn(q, k, v) * dout.to(dtype)).sum().backward()
        return k.grad.to(torch.float64)[:, :, :root]

    dense = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    tree = lambda q, k, v: _TreeFlashCPU.apply(q, k, v, plan, 16 ** -0.5)
    reference = grad_k(dense, torch.float64)
    err = lambda got: float((got - reference).norm() / reference.norm())
    portable = lambda q, k, v: _tree_sdpa(q, k, v, plan, 16 ** -0.5)  # the path used off CPU
    assert err(grad_k(tree, torch.float64)) < 1e-12 and err(grad_k(portable, torch.float64)) < 1e-12
    assert err(grad_k(tree, torch.bfloat16)) <= 2 * err(grad_k(dense, torch.bfloat16))
    assert err(grad_k(portable, torch.bfloat16)) <= 2 * err(grad_k(dense, torch.bfloat16))


class IgnoresLogitsToKeep(torch.nn.Module):
    """A causal LM that accepts ``logits_to_keep`` and ignores it (returns logits at every position)."""

    def __init__(self, inner: torch.nn.Module, rows: slice = slice(None)) -> None:
        super().__init__()
        self.inner, self.rows = inner, rows

    @property
    def config(self):
        return self.inner.config

    def forward(self, logits_to_keep=None, **kw):
        out = self.inner(**kw)
        out.logits = out.logits[:, self.rows]
        return out


@pytest.mark.parametrize("attention", ["tree", "dense"])
def test_a_model_that_ignores_logits_to_keep_gets_the_right_rows(attention):
    """Two samples [0,1,2] and [0,1,3], prompt length 1: 4 packed tokens and 4 loss terms, so the row
    count alone used to look honoured and the terms got rows 0..3 instead of their predictors."""
    from forge_cli.pool.types import Sample
    from forge_cli.train.prefix_tree import pack
    from forge_cli.train.step import packed_logprobs
    from tests.test_prefix_tree import separate_logprobs

    samples = [Sample([0, 1, 2], 1, [-1.0, -1.0], [1.0, 1.0]), Sample([0, 1, 3], 1, [-1.0, -1.0], [1.0, 1.0])]
    [batch] = pack(samples)
    assert len(batch.tokens) == len(batch.predictor) == 4  # the case where the counts coincide
    model = tiny_llama(torch.float64)
    want = torch.cat(separate_logprobs(model, samples))  # sample 0's terms, then sample 1's
    got = packed_logprobs(IgnoresLogitsToKeep(model), batch, attention=attention)
    order = sorted(range(len(got)), key=lambda t: (batch.sample[t], batch.position_ids[batch.predictor[t]]))
    assert torch.allclose(got[order], want, rtol=1e-10, atol=1e-10)
    assert torch.allclose(packed_logprobs(model, batch, attention=attention), got, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attention", ["tree", "dense"])
def test_ignoring_logits_to_keep_on_random_forests(attention):
    """The same per-term logprobs whether the model honours logits_to_keep or returns every row."""
    from forge_cli.train.prefix_tree import pack
    from forge_cli.train.step import packed_logprobs

    model = tiny_llama(torch.float64)
    fewer = 0
    for seed in range(4):
        for batch in pack(forest(random.Random(seed)), 24):
            fewer += len(set(batch.predictor)) < len(batch.tokens)  # rows kept < rows returned when ignored
            honoured = packed_logprobs(model, batch, attention=attention)
            ignored = packed_logprobs(IgnoresLogitsToKeep(model), batch, attention=attention)
            assert torch.allclose(honoured, ignored, rtol=1e-12, atol=1e-12)
    assert fewer > 0


def test_a_model_returning_neither_the_kept_rows_nor_all_is_refused():
    from forge_cli.train.prefix_tree import pack
    from forge_cli.train.step import packed_logprobs

    [batch] = pack(forest(random.Random(0)))
    with pytest.raises(ForgeError, match="logit rows"):
        packed_logprobs(IgnoresLogitsToKeep(tiny_llama(torch.float32), rows=slice(1, None)), batch, attention="dense")
