"""Attention over a packed prefix tree that computes ancestor pairs only.

The model runs its own forward on the packed micro-batch — every linear layer, norm and MLP once
per unique token, in big matrix products — and only its attention is replaced, through
transformers' ``AttentionInterface``, by :func:`tree_attention_forward`. A dense tree mask would
compute every query × key pair of the micro-batch and discard most of them; here attention work is
``Σ_run |run| · depth``, the ancestor pairs, which is the least any exact method can do.

A *run* is a maximal stretch of packed positions sharing ``subtree_end`` — a chain of trie nodes
with no branching inside. Its queries see (a) every key of its ancestor runs, without a mask, and
(b) its own keys, causally. On CPU the two parts are PyTorch's flash-attention kernels, merged by
their log-sum-exp::

    lse = logaddexp(lse_a, lse_b)
    out = out_a · exp(lse_a − lse) + out_b · exp(lse_b − lse)

and the backward pass calls each part's flash backward with the *merged* ``out`` and ``lse`` (the
identity ring attention uses: the softmax of the whole row is then exact), adding the ancestor
keys' gradients back with ``index_add_``. Nothing per-run is kept for backward — memory grows with
unique tokens, not with ``Σ depth`` — and no mask is ever built. Elsewhere (CUDA without
FlexAttention, other devices) the same runs go through autograd SDPA with a lower-right causal mask.

Sliding-window, soft-capped and sink attention are refused with a clear error: use
``attention="dense"`` for those models.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from forge_cli.errors import ForgeError

ATTN_IMPLEMENTATION = "forge_tree"


@dataclass
class TreePlan:
    """Where each run's queries are and which keys are its ancestors, for one packed micro-batch.

    Keys are indexed ``[prefix keys | this micro-batch's keys]``: with ``prefix_len = P`` every run's
    ancestors start with ``0 … P−1`` and its own keys are ``P + start … P + end − 1``.
    """

    runs: list[tuple[int, int]]  # [start, end) of each run's query positions, in packed order
    ancestors: list[torch.Tensor | None]  # [A] LongTensor of ancestor key positions (None: a root run)
    prefix_len: int = 0
    # per layer (``module.layer_idx``): the reused prefix's (key, value) ``[1, Hkv, P, d]``, with gradient
    prefix_kv: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    # when a dict: the (key, value) each layer computes here is recorded into it (a trunk's, for later reuse)
    capture: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    layers_seen: set = field(default_factory=set)  # layer_idx of every attention call
    calls: int = 0  # attention calls in this forward (checked against the model's layer count)

    @classmethod
    def from_subtree_end(cls, subtree_end: list[int], device: Any = "cpu", prefix_len: int = 0) -> "TreePlan":
        P = prefix_len
        runs: list[tuple[int, int]] = []
        start = 0
        for p in range(1, len(subtree_end) + 1):
            if p == len(subtree_end) or subtree_end[p] != subtree_end[start]:
                runs.append((start, p))
                start = p
        ancestors: list[torch.Tensor | None] = []
        open_runs: list[tuple[int, int, int]] = []  # (start, end, subtree_end) of runs whose subtree is still open
        for s, e in runs:
            while open_runs and open_runs[-1][2] <= s:
                open_runs.pop()
            ranges = ([(0, P)] if P else []) + [(a + P, b + P) for a, b, _ in open_runs]
            ancestors.append(torch.cat([torch.arange(a, b) for a, b in ranges]).to(device) if ranges else None)
            open_runs.append((s, e, subtree_end[s]))
        return cls(runs, ancestors, P)


def _flash(q, k, v, causal: bool, scale: float):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)


def _flash_backward(dout, q, k, v, out, lse, causal: bool, scale: float):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, causal, scale=scale)


class _TreeFlashCPU(torch.autograd.Function):
    """``q: [1, H, T, d]``, ``k, v: [1, H, P + T, d]`` (same head count) → ``out: [1, H, T, d]``,
    ancestor pairs only."""

    @staticmethod
    def forward(ctx, q, k, v, plan: TreePlan, scale: float):  # noqa: ANN001, ANN205 — autograd's signature
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = None
        P = plan.prefix_len
        for (s, e), idx in zip(plan.runs, plan.ancestors):
            qr = q[:, :, s:e]
            o, l = _flash(qr, k[:, :, P + s : P + e], v[:, :, P + s : P + e], True, scale)  # own keys, causal: o [1,H,L,d], l [1,H,L]
            if idx is not None:
                oa, la = _flash(qr, k.index_select(2, idx), v.index_select(2, idx), False, scale)  # ancestors: all
                merged = torch.logaddexp(la, l)
                o = oa * torch.exp(la - merged)[..., None] + o * torch.exp(l - merged)[..., None]
                l = merged
            if lse is None:
                lse = l.new_empty(q.shape[:3])
            out[:, :, s:e] = o
            lse[:, :, s:e] = l
        ctx.save_for_backward(q, k, v, out, lse)
        # only the layout: the plan itself holds a trunk's captured keys/values, which depend on this
        # node — keeping it here would be a reference cycle through autograd that never frees them
        ctx.runs, ctx.ancestors, ctx.prefix_len, ctx.scale = plan.runs, plan.ancestors, plan.prefix_len, scale
        return out

    @staticmethod
    def backward(ctx, dout):  # noqa: ANN001, ANN205
        q, k, v, out, lse = ctx.saved_tensors
        dout = dout.contiguous()
        # accumulate in float32 (an ancestor's key gradient sums over every descendant run)
        acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        dq, dk, dv = (torch.zeros(t.shape, dtype=acc, device=t.device) for t in (q, k, v))
        P = ctx.prefix_len
        for (s, e), idx in zip(ctx.runs, ctx.ancestors):
            qr, dor, outr, lser = q[:, :, s:e], dout[:, :, s:e], out[:, :, s:e], lse[:, :, s:e]
            gq, gk, gv = _flash_backward(dor, qr, k[:, :, P + s : P + e], v[:, :, P + s : P + e], outr, lser, True, ctx.scale)
            dq[:, :, s:e] += gq
            dk[:, :, P + s : P + e] += gk
            dv[:, :, P + s : P + e] += gv
            if idx is not None:
                gq, gk, gv = _flash_backward(dor, qr, k.index_select(2, idx), v.index_select(2, idx), outr, lser, False, ctx.scale)
                dq[:, :, s:e] += gq
                dk.index_add_(2, idx, gk.to(acc))
                dv.index_add_(2, idx, gv.to(acc))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def _tree_sdpa(q, k, v, plan: TreePlan, scale: float) -> torch.Tensor:
    """The portable path: per run, SDPA over gathered ancestor keys + own keys, lower-right causal."""
    outs = []
    P = plan.prefix_len
    # ancestors are gathered from a float32 copy of a 16-bit k/v, so the gradient an ancestor gets
    # from every descendant run sums in float32 (autograd accumulates in the source's dtype)
    wide = k.dtype in (torch.float16, torch.bfloat16) and any(idx is not None for idx in plan.ancestors)
    k_acc, v_acc = (k.float(), v.float()) if wide else (k, v)
    for (s, e), idx in zip(plan.runs, plan.ancestors):
        keys, values = k[:, :, P + s : P + e], v[:, :, P + s : P + e]
        if idx is not None:
            keys = torch.cat([k_acc.index_select(2, idx).to(k.dtype), keys], dim=2)
            values = torch.cat([v_acc.index_select(2, idx).to(v.dtype), values], dim=2)
        L, A = e - s, keys.shape[2] - (e - s)
        mask = (torch.arange(L, device=q.device)[:, None] + A) >= torch.arange(A + L, device=q.device)[None, :]
        outs.append(torch.nn.functional.scaled_dot_product_attention(q[:, :, s:e], keys, values, attn_mask=mask, scale=scale))
    return torch.cat(outs, dim=2)


def tree_attention_forward(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: Any, dropout: float = 0.0, scaling: float | None = None,
                           tree_plan: TreePlan | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query [1, H, T, d]``, ``key/value [1, Hkv, T, d]``
    → ``([1, T, H, d], None)``."""
    if tree_plan is None:
        raise ForgeError("tree attention needs a tree_plan: run the model through forge_cli.train.step.packed_logprobs")
    for unsupported in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(unsupported) is not None:
            raise ForgeError(f"tree attention does not support {unsupported.replace('_', '-')} attention; set train.attention = 'dense'")
    if dropout:
        raise ForgeError("tree attention does not support attention dropout; set the model's attention_dropout to 0")
    if query.shape[0] != 1:
        raise ForgeError("tree attention takes one packed sequence (batch size 1)")
    layer = getattr(module, "layer_idx", None)
    if layer is None and (tree_plan.capture is not None or tree_plan.prefix_len):
        raise ForgeError("reusing a prefix's keys/values needs attention modules with a layer_idx; set train.split = 'recompute'")
    tree_plan.layers_seen.add(layer)
    tree_plan.calls += 1
    if tree_plan.capture is not None:
        tree_plan.capture[layer] = (key, value)
    if tree_plan.prefix_len:
        prefix_key, prefix_value = tree_plan.prefix_kv[layer]  # type: ignore[index]
        # the prefix leaves may be float32 (their gradients accumulate there); attend in the layer's dtype
        key = torch.cat([prefix_key.to(key.dtype), key], dim=2)
        value = torch.cat([prefix_value.to(value.dtype), value], dim=2)
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention: repeat K/V heads (autograd sums their gradients back)
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    # one dtype for the kernels, as SDPA gets under autocast (rotary embeddings may have promoted q
    # and k to float32 while v stayed in the autocast dtype)
    device_type = query.device.type
    dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else query.dtype
    query, key, value = (t.to(dtype).contiguous() for t in (query, key, value))
    if query.device.type == "cpu":
        out = _TreeFlashCPU.apply(query, key, value, tree_plan, scale)
    else:
        out = _tree_sdpa(query, key, value, tree_plan, scale)
    return out.transpose(1, 2).contiguous(), None


@contextmanager
def tree_attention(model: Any) -> Iterator[None]:
    """Run ``model`` with :func:`tree_attention_forward` inside the block (restored afterwards)."""
    from transformers import AttentionInterface

    if ATTN_IMPLEMENTATION not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTN_IMPLEMENTATION, tree_attention_forward)
    configs = [m.config for m in model.modules() if hasattr(m, "config") and hasattr(m.config, "_attn_implementation_internal")]
    configs = list({id(c): c for c in configs}.values())
    before = [c._attn_implementation_internal for c in configs]
    for c in configs:
        c._attn_implementation_internal = ATTN_IMPLEMENTATION
    try:
        yield
    finally:
        for c, b in zip(configs, before):
            c._attn_implementation_internal = b


def supports(model: Any) -> bool:
    """Whether ``model`` dispatches its attention through transformers' AttentionInterface."""
    can = getattr(model, "_can_set_attn_implementation", None)
    try:
        return bool(can()) if callable(can) else False
    except Exception:  # noqa: BLE001 — a model that cannot say cannot be switched
        return False
