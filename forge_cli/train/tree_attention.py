"""Prefix-tree forward that attends over ancestor pairs only (Llama-family models).

The dense-mask layout of :mod:`.prefix_tree` computes every query × key pair of a micro-batch and
masks most away, so attention work does not shrink with the tree. Here each trie node is run as
its own segment, in depth-first order: its queries attend to the keys/values its ancestors
already computed plus its own, with a lower-right causal mask, and gradients flow back through
those cached keys/values. Attention work is then Σ_node |node| · depth — ancestor pairs only —
and every other operation runs once per unique token.

Works for decoder layers shaped like transformers' Llama (``input_layernorm``, ``self_attn`` with
``q/k/v/o_proj`` and rotary embeddings, ``post_attention_layernorm``, ``mlp``): Llama, Mistral,
Qwen2. :func:`supports` says whether a model fits.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from forge_cli.pool.types import Sample
from forge_cli.train.prefix_tree import Node, build_trie


def supports(model: Any) -> bool:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if inner is None or not layers or not hasattr(inner, "rotary_emb") or not hasattr(model, "lm_head"):
        return False
    attn = getattr(layers[0], "self_attn", None)
    return all(hasattr(attn, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")) and not hasattr(attn, "q_norm")


def tree_logprobs(model: Any, samples: Sequence[Sample], temperature: float = 1.0) -> tuple[torch.Tensor, dict[str, list]]:
    """``log_softmax(logits / T)`` of every output token of every sample, and the terms they belong to.

    Returns ``(logp [n_terms], terms)`` where ``terms`` has lists ``sample``, ``old_logprob``,
    ``advantage`` aligned with ``logp`` (one entry per output token, shared tokens included).
    """
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    inner = model.model
    device = next(model.parameters()).device
    root, paths = build_trie(samples)
    # which (node, offset) rows predict which terms
    wanted: dict[int, list[tuple[int, int, int]]] = {}  # id(node) -> (offset, term index, target)
    terms: dict[str, list] = {"sample": [], "old_logprob": [], "advantage": []}
    for i, (s, path) in enumerate(zip(samples, paths)):
        for j in range(s.prompt_len, len(s.tokens)):
            node, off = path[j - 1]
            wanted.setdefault(id(node), []).append((off, len(terms["sample"]), int(s.tokens[j])))
            terms["sample"].append(i)
            terms["old_logprob"].append(float(s.old_logprobs[j - s.prompt_len]))
            terms["advantage"].append(float(s.advantages[j - s.prompt_len]))
    out: list[torch.Tensor | None] = [None] * len(terms["sample"])

    # iterative DFS: (node, ancestors' per-layer (k, v) lists)
    stack: list[tuple[Node, list[list[tuple[torch.Tensor, torch.Tensor]]]]] = [(c, []) for c in reversed(list(root.children.values()))]
    while stack:
        node, ancestors = stack.pop()
        L = len(node.tokens)
        ids = torch.tensor([node.tokens], device=device)
        positions = torch.arange(node.depth, node.depth + L, device=device)[None]
        h = inner.embed_tokens(ids)  # [1, L, d]
        cos, sin = inner.rotary_emb(h, positions)
        kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        for li, layer in enumerate(inner.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            shape = (1, L, -1, attn.head_dim)
            q = attn.q_proj(x).view(shape).transpose(1, 2)  # [1, H, L, dh]
            k = attn.k_proj(x).view(shape).transpose(1, 2)  # [1, Hkv, L, dh]
            v = attn.v_proj(x).view(shape).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            kv.append((k, v))
            keys = torch.cat([a[li][0] for a in ancestors] + [k], dim=2)  # [1, Hkv, A + L, dh]
            values = torch.cat([a[li][1] for a in ancestors] + [v], dim=2)
            A = keys.shape[2] - L
            # lower-right causal: query i sees every ancestor key and its own keys up to i
            mask = (torch.arange(L, device=device)[:, None] + A) >= torch.arange(A + L, device=device)[None, :]
            o = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling,
                                                                 enable_gqa=q.shape[1] != keys.shape[1])
            h = h + attn.o_proj(o.transpose(1, 2).reshape(1, L, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        rows = wanted.get(id(node))
        if rows:
            hidden = inner.norm(h)[0, torch.tensor([r[0] for r in rows], device=device)]  # only the predictor rows
            logits = model.lm_head(hidden)
            logp = torch.log_softmax(logits / temperature, dim=-1)
            picked = logp.gather(-1, torch.tensor([r[2] for r in rows], device=device)[:, None])[:, 0]
            for (_, t, _), value in zip(rows, picked):
                out[t] = value
        for child in reversed(list(node.children.values())):
            stack.append((child, ancestors + [kv]))
    return torch.stack(out), terms  # type: ignore[arg-type]
