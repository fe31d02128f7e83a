"""Merge samples that share token prefixes into a trie, and lay it out as packed sequences.

Pure code, no model (DESIGN.md §5). Each trie node's tokens appear once. In the packed layout
(depth-first pre-order), for the token at packed position ``p``:

- ``position_ids[p]`` is its depth in the tree — its index in any sample that contains it;
- ``subtree_end[p]`` is the packed index just past the subtree of the node holding ``p``;
- token ``q`` may attend to token ``k`` iff ``k <= q < subtree_end[k]`` (ancestor-or-self, causal).

The loss keeps one term per output token of every sample, shared tokens included:
``(predictor, target, sample, old_logprob, advantage, weight)``, where ``predictor`` is the packed
position whose logits predict ``target`` — the previous token of that sample, which for the first
token of a branch is the last token of its parent node. Reducing these terms exactly as the
unmerged batch would gives the same loss and gradients.

A tree larger than the micro-batch token budget is split at branch points, in one of two ways
(DESIGN.md §5 asks for both, measured in ``benchmarks/prefix_tree.py``):

- *recompute* (default; any attention): each part carries its own copy of the shared ancestor
  chain, whose loss terms are counted in the first part only; a single path longer than the
  budget goes into a micro-batch of its own;
- *reuse* (``reuse_prefix=True``; tree attention only): the node that does not fit becomes a
  *trunk* micro-batch of its own, and the parts under it carry no copy — ``prefix`` names the
  trunks whose keys/values precede them, which the trainer keeps (with their graph) and feeds to
  each part's attention, sending the parts' gradients back through them. Each token is computed
  once, and a path (even a single node) longer than the budget is cut into trunks, so every
  micro-batch stays within the budget.

Nothing is truncated or dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from forge_cli.errors import ForgeError
from forge_cli.pool.types import Sample
from forge_cli.token_ids import common_prefix


@dataclass
class Node:
    tokens: list[int]
    depth: int  # depth of tokens[0]
    children: dict[int, "Node"] = field(default_factory=dict)
    # filled by layout: packed start of this node's tokens in its part
    size: int = 0  # tokens in the subtree (computed)

    def subtree_size(self) -> int:
        self.size = len(self.tokens) + sum(c.subtree_size() for c in self.children.values())
        return self.size


def build_trie(samples: Sequence[Sample], max_node_len: int | None = None) -> tuple[Node, list[list[Node]]]:
    """A radix trie of all samples under a virtual root; and, per sample, the nodes its tokens run
    through, in order (``locate`` finds the node of one token). ``max_node_len`` cuts longer nodes
    into chains of nodes of at most that many tokens."""
    root = Node(tokens=[], depth=0)
    for s in samples:
        node, i, toks = root, 0, list(s.tokens)
        while i < len(toks):
            child = node.children.get(toks[i])
            if child is None:
                node.children[toks[i]] = Node(tokens=toks[i:], depth=i)
                break
            k = common_prefix(child.tokens, toks, i)
            if k < len(child.tokens):
                _cut(child, k)
            node, i = child, i + k
    if max_node_len is not None:
        stack = list(root.children.values())
        while stack:
            node = stack.pop()
            if len(node.tokens) > max_node_len:
                _cut(node, max_node_len)
            stack.extend(node.children.values())
    paths = []
    for s in samples:
        path: list[Node] = []
        node, i, toks = root, 0, s.tokens
        while i < len(toks):
            node = node.children[toks[i]]
            path.append(node)
            i += len(node.tokens)
        paths.append(path)
    return root, paths


def _cut(node: Node, k: int) -> None:
    """Split ``node`` after its first ``k`` tokens: the rest becomes its only child."""
    tail = Node(tokens=node.tokens[k:], depth=node.depth + k, children=node.children)
    node.tokens = node.tokens[:k]
    node.children = {tail.tokens[0]: tail}


def locate(path: list[Node], j: int) -> tuple[Node, int]:
    """(node, offset in node) of token ``j`` of the sample whose ``path`` this is."""
    lo, hi = 0, len(path)
    while hi - lo > 1:  # the last node whose depth is <= j
        mid = (lo + hi) // 2
        if path[mid].depth <= j:
            lo = mid
        else:
            hi = mid
    return path[lo], j - path[lo].depth


@dataclass
class Packed:
    """One micro-batch: packed tokens, the tree mask data, and its loss terms."""

    tokens: list[int] = field(default_factory=list)
    position_ids: list[int] = field(default_factory=list)
    subtree_end: list[int] = field(default_factory=list)
    # loss terms
    predictor: list[int] = field(default_factory=list)
    target: list[int] = field(default_factory=list)
    sample: list[int] = field(default_factory=list)
    old_logprob: list[float] = field(default_factory=list)
    advantage: list[float] = field(default_factory=list)
    weight: list[float] = field(default_factory=list)
    # prefix reuse (``pack(..., reuse_prefix=True)``)
    prefix: tuple[int, ...] = ()  # earlier trunk micro-batches (root first) whose tokens are ancestors of all of these
    prefix_len: int = 0  # their tokens, in all
    trunk: bool = False  # later micro-batches attend to this one's keys/values

    def __len__(self) -> int:
        return len(self.tokens)

    def attention_mask(self):  # -> torch.BoolTensor [1, 1, T, T]
        """``mask[q, k] = k <= q < subtree_end[k]`` (True = may attend), as SDPA takes it."""
        import torch

        if self.prefix:
            raise ForgeError("a micro-batch that reuses a prefix's keys/values needs tree attention, not a dense mask")
        T = len(self.tokens)
        idx = torch.arange(T)
        end = torch.tensor(self.subtree_end)
        q, k = idx[:, None], idx[None, :]
        return ((k <= q) & (q < end[None, :]))[None, None]


@dataclass
class _Part:
    """A piece of one tree: a chain of ancestor nodes (root first) and the subtrees hung under it.
    ``owns`` holds the chain nodes whose loss terms are counted here (each in exactly one part)."""

    chain: list[Node]
    subtrees: list[Node]
    owns: set[int]
    prefix: tuple[int, ...] = ()  # reuse mode: indices of the trunk micro-batches above this part
    trunk: bool = False

    def size(self) -> int:
        return sum(len(n.tokens) for n in self.chain) + sum(s.size for s in self.subtrees)


def _split(node: Node, chain: list[Node], budget: int, claimed: set[int]) -> list[_Part]:
    """Parts for ``node``'s subtree under ``chain``, each within ``budget`` where possible.

    A chain node's terms go to the first part that carries it (``claimed`` records which are taken).
    """

    def make(part_chain: list[Node], subtrees: list[Node]) -> _Part:
        owns = {id(n) for n in part_chain if id(n) not in claimed}
        claimed.update(owns)
        return _Part(part_chain, subtrees, owns)

    chain_len = sum(len(n.tokens) for n in chain)
    if chain_len + node.size <= budget or not node.children:
        return [make(chain, [node])]
    # node does not fit: it joins the chain, its children are distributed
    new_chain = chain + [node]
    base = chain_len + len(node.tokens)
    parts: list[_Part] = []
    current: list[Node] = []
    for child in node.children.values():
        if base + child.size > budget:
            parts.extend(_split(child, new_chain, budget, claimed))
            continue
        if current and base + sum(c.size for c in current) + child.size > budget:
            parts.append(make(new_chain, current))
            current = []
        current.append(child)
    if current:
        parts.append(make(new_chain, current))
    return parts


def _split_reuse(node: Node, prefix: tuple[int, ...], budget: int, out: list[_Part]) -> None:
    """Reuse mode, for ``node`` whose subtree does not fit: ``node`` (and the single-child nodes
    below it that do not fit either, while the trunk fits) becomes a trunk micro-batch; its children
    that fit are binned into parts under it, the others recurse. ``out`` is in execution order:
    a trunk comes before everything that attends to it."""
    trunk, size = [node], len(node.tokens)
    while len(trunk[-1].children) == 1:
        (child,) = trunk[-1].children.values()
        if child.size <= budget or size + len(child.tokens) > budget:
            break
        trunk.append(child)
        size += len(child.tokens)
    out.append(_Part(trunk, [], {id(n) for n in trunk}, prefix, trunk=True))
    under = prefix + (len(out) - 1,)
    current: list[Node] = []
    used = 0
    for child in trunk[-1].children.values():
        if child.size > budget:
            _split_reuse(child, under, budget, out)
            continue
        if current and used + child.size > budget:
            out.append(_Part([], current, set(), under))
            current, used = [], 0
        current.append(child)
        used += child.size
    if current:
        out.append(_Part([], current, set(), under))


def _first_fit(parts: list[_Part], limit: int) -> list[list[_Part]]:
    bins: list[list[_Part]] = []
    sizes: list[int] = []
    for part in parts:
        n = part.size()
        for b, used in enumerate(sizes):
            if used + n <= limit:
                bins[b].append(part)
                sizes[b] += n
                break
        else:
            bins.append([part])
            sizes.append(n)
    return bins


def pack(samples: Sequence[Sample], budget: int | None = None, weights: Sequence[float] | None = None,
         reuse_prefix: bool = False) -> list[Packed]:
    """Merge ``samples`` into prefix trees and pack them into micro-batches of at most ``budget``
    tokens (``None``: one micro-batch), in execution order. ``weights[i]`` scales every term of
    sample ``i`` (default 1). ``reuse_prefix``: split oversized trees into trunks whose keys/values
    later micro-batches reuse, instead of recomputing the shared chain in each part."""
    if budget is not None and budget < 1:
        raise ForgeError(f"the micro-batch budget must be at least 1 token, got {budget}")
    if not samples:
        return []
    weights = list(weights) if weights is not None else [1.0] * len(samples)
    root, paths = build_trie(samples, max_node_len=budget if reuse_prefix else None)
    for child in root.children.values():
        child.subtree_size()
    limit = budget if budget is not None else sum(c.size for c in root.children.values())
    if reuse_prefix:
        small = [_Part([], [c], set()) for c in root.children.values() if c.size <= limit]
        bins = _first_fit(small, limit)  # whole trees that fit: no prefix, any order
        chained: list[_Part] = []
        for child in root.children.values():
            if child.size > limit:
                _split_reuse(child, (), limit, chained)
        shift = len(bins)
        for part in chained:
            part.prefix = tuple(i + shift for i in part.prefix)
            bins.append([part])
    else:
        parts: list[_Part] = []
        claimed: set[int] = set()
        for child in root.children.values():
            parts.extend(_split(child, [], limit, claimed))
        bins = _first_fit(parts, limit)
    # loss terms go where their predictor is: per node, the (sample, target index j, predictor offset)
    needs: dict[int, list[tuple[int, int, int]]] = {}
    for i, (s, path) in enumerate(zip(samples, paths)):
        for j in range(s.prompt_len, len(s.tokens)):
            node, off = locate(path, j - 1)
            needs.setdefault(id(node), []).append((i, j, off))
    out = [_layout(b, samples, needs, weights) for b in bins]
    for b, packed in zip(bins, out):
        if b[0].trunk or b[0].prefix:
            packed.trunk, packed.prefix = b[0].trunk, b[0].prefix
            packed.prefix_len = sum(len(out[t]) for t in packed.prefix)
    return out


def _layout(parts: list[_Part], samples: Sequence[Sample], needs, weights) -> Packed:
    out = Packed()
    for part in parts:
        where: dict[int, int] = {}  # id(node) -> packed start, for this part
        for node in part.chain:
            where[id(node)] = len(out.tokens)
            out.tokens += node.tokens
            out.position_ids += range(node.depth, node.depth + len(node.tokens))
            out.subtree_end += [0] * len(node.tokens)  # fixed below: the chain spans the whole part
        laid_out: list[Node] = []

        def visit(node: Node) -> None:
            where[id(node)] = len(out.tokens)
            start = len(out.tokens)
            out.tokens.extend(node.tokens)
            out.position_ids.extend(range(node.depth, node.depth + len(node.tokens)))
            out.subtree_end.extend([0] * len(node.tokens))
            laid_out.append(node)
            for child in node.children.values():
                visit(child)
            end = len(out.tokens)
            for p in range(start, start + len(node.tokens)):
                out.subtree_end[p] = end

        for sub in part.subtrees:
            visit(sub)
        part_end = len(out.tokens)
        for node in part.chain:  # the chain is an ancestor of everything in its part
            start = where[id(node)]
            for p in range(start, start + len(node.tokens)):
                out.subtree_end[p] = part_end
        # loss terms whose predictor is laid out in this part (a chain copy counts only where owned)
        laid = [(n, True) for n in part.chain] + [(n, False) for n in laid_out]
        for node, in_chain in laid:
            if in_chain and id(node) not in part.owns:
                continue
            for i, j, off in needs.get(id(node), []):
                s = samples[i]
                out.predictor.append(where[id(node)] + off)
                out.target.append(s.tokens[j])
                out.sample.append(i)
                out.old_logprob.append(float(s.old_logprobs[j - s.prompt_len]))
                out.advantage.append(float(s.advantages[j - s.prompt_len]))
                out.weight.append(float(weights[i]))
    return out


def unpack_terms(samples: Sequence[Sample], batches: Sequence[Packed], values: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The inverse of the layout: per-term values of each micro-batch (``values[b][t]``, e.g. the
    logprobs ``packed_logprobs`` returns) back to each sample's output tokens, in order:
    ``out[i][k]`` belongs to ``samples[i].tokens[prompt_len + k]``."""
    out: list[list[Any]] = [[None] * (len(s.tokens) - s.prompt_len) for s in samples]
    for batch, vals in zip(batches, values):
        for t, value in enumerate(vals):
            i = batch.sample[t]
            j = batch.position_ids[batch.predictor[t]] + 1  # the target's index in its sample
            out[i][j - samples[i].prompt_len] = value
    return out


def unique_tokens(samples: Iterable[Sample]) -> int:
    """Tokens in the merged trie: the bound on what merging can save (only ``.tokens`` is read)."""
    root, _ = build_trie(list(samples))
    return sum(c.subtree_size() for c in root.children.values())
