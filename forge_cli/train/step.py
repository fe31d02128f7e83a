"""One policy-gradient step over a batch of samples, merged into prefix trees.

    terms  = pack(samples, budget)                   # micro-batches of packed trees
    N      = Σ_i |o_i|                               # logical output tokens, whole batch
    for each micro-batch:
        logits = model(tokens, tree, depth)[keep]    # [K, V], keep = the distinct predictors; ancestors only
        logp   = log_softmax(logits / T)[row, target]   # [n_terms], row = each term's predictor in keep
        loss   = Σ LOSS(logp, old_logp, Â) · weight / N           # the same sum as unmerged
        loss.backward()                              # gradients accumulate across micro-batches
    optimizer.step()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from forge_cli.configs.train import ATTENTION_MODES, SPLITS, names_in
from forge_cli.errors import ForgeError
from forge_cli.pool.types import Sample
from forge_cli.train import tree_attention
from forge_cli.train.loss import loss_function
from forge_cli.train.prefix_tree import Packed, pack


def packed_logprobs(model: Any, batch: Packed, temperature: float = 1.0, attention: str = "auto", *,
                    prefix_kv: dict | None = None, capture: dict | None = None) -> torch.Tensor:
    """``log_softmax(logits / T)`` of every loss term's target, from one packed forward. ``[n_terms]``

    ``attention`` (see :func:`attention_mode`): ``"tree"`` — ancestor pairs only
    (:mod:`.tree_attention`); ``"flex"`` — FlexAttention's block-sparse mask (CUDA); ``"dense"`` —
    a ``[1, 1, T, T]`` additive float mask (0 or the dtype's minimum) through the model's own
    attention (any model and attention implementation, eager included; every pair computed).
    Logits are asked for (``logits_to_keep``) at the distinct predictor positions only; a model
    that ignores that and returns all ``T`` rows is detected by its row count and indexed here.
    Tree attention only: ``prefix_kv`` holds, per layer, the keys/values of ``batch.prefix``;
    ``capture`` (a dict) receives this batch's own per-layer keys/values.
    """
    device = next(model.parameters()).device
    ids = torch.tensor([batch.tokens], device=device)
    positions = torch.tensor([batch.position_ids], device=device)  # depth in the tree = position in the sample
    predictor = torch.tensor(batch.predictor, device=device, dtype=torch.long)
    target = torch.tensor(batch.target, device=device, dtype=torch.long)
    mode = attention_mode(model, attention)
    # logits only at the distinct predictor rows: T × V shrinks to K × V before the lm_head. A model
    # that honours this returns K rows; one that ignores it returns T, and K == T only when every
    # position is kept (keep = 0 … T−1), where both are the same rows — the two cannot be confused
    keep, row = torch.unique(predictor, sorted=True, return_inverse=True)
    # no KV cache: nothing decodes after this forward, and the cache would hold every layer's K/V
    kw = dict(input_ids=ids, position_ids=positions, logits_to_keep=keep, use_cache=False)
    if mode == "tree":
        if getattr(model, "is_gradient_checkpointing", False):
            raise ForgeError("tree attention cannot run under gradient checkpointing (the recomputed forward would "
                             "not see the tree); set train.attention = 'dense'")
        plan = tree_attention.TreePlan.from_subtree_end(batch.subtree_end, device, batch.prefix_len)
        plan.prefix_kv, plan.capture = prefix_kv, capture
        with tree_attention.tree_attention(model):
            logits = model(**kw, tree_plan=plan).logits[0]  # [K, V]
        layers = getattr(model.config, "num_hidden_layers", None)
        if not plan.calls or (layers is not None and plan.calls != layers):
            raise ForgeError(f"{type(model).__name__} did not route every layer's attention through transformers' "
                             "AttentionInterface, so the tree mask was not applied; set train.attention = 'dense'")
    elif batch.prefix:
        raise ForgeError(f"reusing a prefix's keys/values needs tree attention, not {mode!r}")
    elif mode == "flex":
        if getattr(model.config, "_attn_implementation", None) != "flex_attention":
            raise ForgeError("attention = 'flex' needs a model loaded with attn_implementation='flex_attention'; "
                             "use 'tree' or 'auto'")
        # the training kernel always: for a pack under 128 tokens inductor would pick its decoding kernel,
        # which found no kernel for a backward on an H200 (torch 2.11, float32; seen 2026-12-04)
        logits = model(**kw, attention_mask=flex_block_mask(batch, device),
                       kernel_options={"FORCE_USE_FLEX_ATTENTION": True}).logits[0]
    else:
        logits = model(**kw, attention_mask=additive_mask(batch, model)).logits[0]  # ancestors-or-self, causal
    T = len(batch.tokens)
    if logits.shape[0] != len(keep):
        if logits.shape[0] != T:
            raise ForgeError(f"{type(model).__name__} returned {logits.shape[0]} logit rows for a {T}-token micro-batch "
                             f"asked for {len(keep)} (logits_to_keep): expected {len(keep)} or {T}")
        logits = logits.index_select(0, keep)  # a model that ignores a tensor logits_to_keep: [T, V] → [K, V]
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.log_softmax(logits / temperature, dim=-1)[row, target]


def additive_mask(batch: Packed, model: Any) -> torch.Tensor:
    """The tree mask as the model's attention adds it to the scores: ``[1, 1, T, T]`` in the model's
    dtype, 0 where ``k <= q < subtree_end[k]`` and the dtype's minimum elsewhere.

    A boolean mask is right for SDPA only: eager attention adds the mask to the scores, so a
    boolean one would add 1 to the allowed pairs and mask nothing. An additive float mask means the
    same to every implementation (SDPA adds a float mask too)."""
    parameter = next(model.parameters())
    dtype = parameter.dtype if parameter.dtype.is_floating_point else torch.float32
    allowed = batch.attention_mask().to(parameter.device)
    return torch.zeros(allowed.shape, dtype=dtype, device=parameter.device).masked_fill_(~allowed, torch.finfo(dtype).min)


def attention_mode(model: Any, attention: str = "auto") -> str:
    """``"auto"`` → ``"flex"`` for a model loaded with FlexAttention on CUDA (it has no backward on
    CPU), else ``"tree"`` where the model dispatches through transformers' AttentionInterface, else
    ``"dense"``."""
    if attention not in ATTENTION_MODES:
        raise ForgeError(f"unknown attention mode {attention!r}: choose {names_in(ATTENTION_MODES)}")
    if attention != "auto":
        return attention
    on_cuda = next(model.parameters()).device.type == "cuda"
    if getattr(model.config, "_attn_implementation", None) == "flex_attention" and on_cuda:
        return "flex"

    return "tree" if tree_attention.supports(model) else "dense"


def flex_block_mask(batch: Packed, device: Any):
    """FlexAttention's block-sparse mask from ``subtree_end`` (CUDA: it has no backward on CPU).

    ``mask_mod(q, k) = k <= q < subtree_end[k]``; blocks with no allowed pair are skipped.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    end = torch.tensor(batch.subtree_end, device=device)
    T = len(batch.tokens)

    def mask_mod(b, h, q, k):  # noqa: ANN001 — FlexAttention's signature
        return (k <= q) & (q < end[k])

    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=T, KV_LEN=T, device=device)


@dataclass
class StepStats:
    loss: float
    tokens: int  # logical output tokens (N)
    packed_tokens: int  # tokens actually computed
    micro_batches: int
    grad_norm: float | None = None
    mean_ratio: float | None = None


def _accumulator(t: torch.Tensor) -> torch.Tensor:
    """A detached copy of ``t`` in a dtype fit to accumulate gradients in (float32 for 16-bit types)."""
    t = t.detach()
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


@dataclass
class _Trunk:
    """A micro-batch whose keys/values later micro-batches attend to (``pack(..., reuse_prefix=True)``)."""

    index: int
    loss: torch.Tensor  # its own terms' loss, graph kept until its dependants are done
    kv: dict[int, tuple[torch.Tensor, torch.Tensor]]  # per layer, as computed (in the graph)
    leaves: dict[int, tuple[torch.Tensor, torch.Tensor]]  # detached copies the dependants use; .grad collects theirs

    def surrogate(self) -> torch.Tensor:
        """``loss + Σ ⟨kv, ∂L_dependants/∂kv⟩``: a scalar whose gradient is the trunk's own plus exactly
        what the dependants send back through its keys/values."""
        total = self.loss
        for layer, (k, v) in self.kv.items():
            for computed, leaf in ((k, self.leaves[layer][0]), (v, self.leaves[layer][1])):
                if leaf.grad is not None:
                    total = total + (computed.to(leaf.dtype) * leaf.grad).sum()
        return total


def policy_loss_backward(
    model: Any, samples: Sequence[Sample], loss_cfg: Any, *, budget: int | None = None, temperature: float = 1.0,
    attention: str = "auto", split: str = "auto", backward: Any = None, loss_scale: float = 1.0,
    pad_to: Callable[[int], int] | None = None,
) -> StepStats:
    """Accumulate the loss's gradients over all micro-batches (no optimizer step).

    ``budget`` caps the tokens of one micro-batch (``None``: the whole batch at once); ``attention``
    is :func:`packed_logprobs`'. ``split`` — how a tree over the budget is split: ``"reuse"`` (its
    shared part's keys/values are computed once and reused, tree attention only), ``"recompute"``
    (each part recomputes the shared chain), ``"auto"`` (reuse where the attention allows).
    ``backward(loss, last)`` defaults to ``loss.backward()``; it is called once per micro-batch,
    ``last`` true on the final call (a DeepSpeed engine marks its accumulation boundary with it);
    ``loss_scale`` multiplies every micro-batch's loss first. ``pad_to(count)`` maps this batch's
    count of micro-batches to the number of forward/backward passes to run; the extra ones are
    empty (zero loss) — for ranks that must stay in step.
    """
    if split not in SPLITS:
        raise ForgeError(f"unknown split {split!r}: choose {names_in(SPLITS)}")
    mode = attention_mode(model, attention)
    reuse = split == "reuse" or (split == "auto" and mode == "tree")
    if reuse and mode != "tree":
        raise ForgeError(f"split = 'reuse' needs tree attention, not {mode!r}")
    fn = loss_function(loss_cfg)
    n_out = sum(len(s.tokens) - s.prompt_len for s in samples)  # logical output tokens of the whole batch
    n = max(n_out, 1)
    total, ratio_sum, packed_tokens = 0.0, 0.0, 0
    batches = pack(samples, budget, reuse_prefix=reuse)
    calls, n_calls = 0, len(batches) if pad_to is None else max(pad_to(len(batches)), len(batches))

    def run_backward(loss: torch.Tensor) -> None:  # exactly one call per micro-batch
        nonlocal calls
        calls += 1
        if backward is None:
            loss.backward()
        else:
            backward(loss, calls == n_calls)

    pending: list[_Trunk] = []  # trunks whose dependants are still to run, root first
    for index, batch in enumerate(batches):
        while pending and pending[-1].index not in batch.prefix:  # batches come in depth-first order
            run_backward(pending.pop().surrogate())
        if [t.index for t in pending] != list(batch.prefix):
            raise AssertionError("micro-batches out of depth-first order")
        prefix_kv = {layer: tuple(torch.cat([t.leaves[layer][i] for t in pending], dim=2) for i in (0, 1))
                     for layer in pending[0].leaves} if pending else None
        capture: dict | None = {} if batch.trunk else None
        logp = packed_logprobs(model, batch, temperature, mode, prefix_kv=prefix_kv, capture=capture)  # [n_terms]
        like = dict(device=logp.device, dtype=logp.dtype)
        old = torch.tensor(batch.old_logprob, **like)
        adv = torch.tensor(batch.advantage, **like)
        weight = torch.tensor(batch.weight, **like)
        loss = (fn(logp, old, adv, loss_cfg) * weight).sum() / n
        if batch.trunk:
            # the dependants' gradients accumulate in these leaves: at least float32 (bf16/fp16 would round each one)
            leaves = {layer: (_accumulator(k).requires_grad_(), _accumulator(v).requires_grad_()) for layer, (k, v) in capture.items()}
            pending.append(_Trunk(index, loss * loss_scale, capture, leaves))
        else:
            run_backward(loss * loss_scale)
        total += float(loss.detach())
        ratio_sum += float(torch.exp(logp.detach() - old).sum())
        packed_tokens += len(batch)
    while pending:
        run_backward(pending.pop().surrogate())
    pad = torch.zeros(1, 1, dtype=torch.long, device=next(model.parameters()).device)
    for _ in range(n_calls - len(batches)):  # padding: the same collectives, no gradient
        run_backward(model(input_ids=pad, logits_to_keep=1).logits.sum() * 0.0)
    return StepStats(total, n_out, packed_tokens, len(batches), mean_ratio=ratio_sum / n)


def train_step(
    model: Any, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], loss_cfg: Any, *,
    max_grad_norm: float | None = 1.0, **kw: Any,
) -> StepStats:
    """One optimizer step of the configured loss on ``samples`` (``kw``: :func:`policy_loss_backward`'s)."""
    optimizer.zero_grad(set_to_none=True)
    stats = policy_loss_backward(model, samples, loss_cfg, **kw)
    if max_grad_norm is not None:
        stats.grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    optimizer.step()
    return stats
