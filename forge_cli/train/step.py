"""One policy-gradient step over a batch of samples, merged into prefix trees.

    terms  = pack(samples, budget)                   # micro-batches of packed trees
    N      = Σ_i |o_i|                               # logical output tokens, whole batch
    for each micro-batch:
        logits = model(tokens, tree mask, depth)     # [1, T, V]
        logp   = log_softmax(logits[predictor] / T)[target]      # [n_terms]
        loss   = Σ LOSS(logp, old_logp, Â) · weight / N           # the same sum as unmerged
        loss.backward()                              # gradients accumulate across micro-batches
    optimizer.step()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from forge_cli.train.loss import LOSSES
from forge_cli.pool.types import Sample
from forge_cli.train.prefix_tree import Packed, pack


def packed_logprobs(model: Any, batch: Packed, temperature: float = 1.0) -> torch.Tensor:
    """``log_softmax(logits / T)`` of every loss term's target, from one packed forward. ``[n_terms]``"""
    device = next(model.parameters()).device
    ids = torch.tensor([batch.tokens], device=device)
    positions = torch.tensor([batch.position_ids], device=device)
    if getattr(model.config, "_attn_implementation", None) == "flex_attention":
        mask = flex_block_mask(batch, device)  # block-sparse: only ancestor blocks are computed
    else:
        mask = batch.attention_mask().to(device)  # [1, 1, T, T] bool: ancestors-or-self, causal
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[0]  # [T, V]
    predictor = torch.tensor(batch.predictor, device=device)
    target = torch.tensor(batch.target, device=device)
    # only the predictor rows are needed: T × V logits shrink to n_terms × V before the softmax
    rows = logits.index_select(0, predictor).float() if logits.dtype in (torch.float16, torch.bfloat16) else logits.index_select(0, predictor)
    return torch.log_softmax(rows / temperature, dim=-1).gather(-1, target[:, None])[:, 0]


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


def policy_loss_backward(
    model: Any, samples: Sequence[Sample], loss_cfg: Any, *, budget: int | None = None, temperature: float = 1.0,
    attention: str = "auto", backward: Any = None,
) -> StepStats:
    """Accumulate the loss's gradients over all micro-batches (no optimizer step).

    ``backward(loss)`` defaults to ``loss.backward()``; a DeepSpeed engine passes its own.

    ``attention``: ``"ancestors"`` runs each trie node as a segment attending to its ancestors'
    cached keys/values (:mod:`.tree_attention`; Llama-family models), ``"dense"`` packs trees with
    a boolean mask to ``budget``; ``"auto"`` takes the first where the model supports it.
    """
    fn = LOSSES[loss_cfg.type]
    n = sum(len(s.tokens) - s.prompt_len for s in samples)
    backward = backward or (lambda loss: loss.backward())
    from forge_cli.train import tree_attention

    if attention == "ancestors" or (attention == "auto" and tree_attention.supports(model)):
        logp, terms = tree_attention.tree_logprobs(model, samples, temperature)
        like = dict(device=logp.device, dtype=logp.dtype)
        old = torch.tensor(terms["old_logprob"], **like)
        loss = fn(logp, old, torch.tensor(terms["advantage"], **like), loss_cfg).sum() / n
        backward(loss)
        from forge_cli.train.prefix_tree import unique_tokens

        return StepStats(float(loss.detach()), n, unique_tokens(samples), 1,
                         mean_ratio=float(torch.exp(logp.detach() - old).sum()) / max(n, 1))
    total, ratio_sum, packed_tokens = 0.0, 0.0, 0
    batches = pack(samples, budget)
    for batch in batches:
        logp = packed_logprobs(model, batch, temperature)
        like = dict(device=logp.device, dtype=logp.dtype)
        old = torch.tensor(batch.old_logprob, **like)
        adv = torch.tensor(batch.advantage, **like)
        weight = torch.tensor(batch.weight, **like)
        loss = (fn(logp, old, adv, loss_cfg) * weight).sum() / n
        backward(loss)
        total += float(loss.detach())
        ratio_sum += float(torch.exp(logp.detach() - old).sum())
        packed_tokens += len(batch)
    return StepStats(total, n, packed_tokens, len(batches), mean_ratio=ratio_sum / max(n, 1))


def train_step(
    model: Any, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], loss_cfg: Any, *,
    budget: int | None = None, temperature: float = 1.0, max_grad_norm: float | None = 1.0, attention: str = "auto",
) -> StepStats:
    """One optimizer step of the configured loss on ``samples``."""
    optimizer.zero_grad(set_to_none=True)
    stats = policy_loss_backward(model, samples, loss_cfg, budget=budget, temperature=temperature, attention=attention)
    if max_grad_norm is not None:
        stats.grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    optimizer.step()
    return stats
