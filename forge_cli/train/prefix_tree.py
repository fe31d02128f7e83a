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

A tree larger than the micro-batch token budget is split at branch points; each part carries
its own copy of the shared ancestor chain (recomputed), and the chain's loss terms are counted in
the first part only. Nothing is truncated or dropped: a single path longer than the budget goes
into a micro-batch of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from forge_cli.pool.types import Sample


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


def build_trie(samples: Sequence[Sample]) -> tuple[Node, list[list[tuple[Node, int]]]]:
    """A radix trie of all samples under a virtual root; and, per sample, for each of its tokens,
    (node, offset in node)."""
    root = Node(tokens=[], depth=0)
    for s in samples:
        node, i, toks = root, 0, list(s.tokens)
        while i < len(toks):
            child = node.children.get(toks[i])
            if child is None:
                node.children[toks[i]] = Node(tokens=toks[i:], depth=i)
                break
            # walk along child's run
            k = 0
            while k < len(child.tokens) and i + k < len(toks) and child.tokens[k] == toks[i + k]:
                k += 1
            if k < len(child.tokens):  # split the child at k
                tail = Node(tokens=child.tokens[k:], depth=child.depth + k, children=child.children)
                child.tokens = child.tokens[:k]
                child.children = {tail.tokens[0]: tail}
            node, i = child, i + k
    paths = []
    for s in samples:
        path: list[tuple[Node, int]] = []
        node, i, toks = root, 0, list(s.tokens)
        while i < len(toks):
            node = node.children[toks[i]]
            for off in range(len(node.tokens)):
                if i + off >= len(toks):
                    break
                path.append((node, off))
            i += len(node.tokens)
        paths.append(path)
    return root, paths


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

    def __len__(self) -> int:
        return len(self.tokens)

    def attention_mask(self):  # -> torch.BoolTensor [1, 1, T, T]
        """``mask[q, k] = k <= q < subtree_end[k]`` (True = may attend), as SDPA takes it."""
        import torch

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


def pack(samples: Sequence[Sample], budget: int | None = None, weights: Sequence[float] | None = None) -> list[Packed]:
    """Merge ``samples`` into prefix trees and pack them into micro-batches of at most ``budget``
    tokens (``None``: one micro-batch). ``weights[i]`` scales every term of sample ``i`` (default 1)."""
    if not samples:
        return []
    weights = list(weights) if weights is not None else [1.0] * len(samples)
    root, paths = build_trie(samples)
    for child in root.children.values():
        child.subtree_size()
    limit = budget if budget is not None else sum(c.size for c in root.children.values())
    parts: list[_Part] = []
    claimed: set[int] = set()
    for child in root.children.values():
        parts.extend(_split(child, [], limit, claimed))
    # first-fit, in order, parts into micro-batches
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
    # which sample tokens need terms: per node, the samples (and their token indices) through it
    needs: dict[int, list[tuple[int, int, int]]] = {}  # id(node) -> (sample, token index j, offset)
    for i, (s, path) in enumerate(zip(samples, paths)):
        for j, (node, off) in enumerate(path):
            if j >= s.prompt_len:
                needs.setdefault(id(node), []).append((i, j, off))
    return [_layout(b, samples, paths, needs, weights) for b in bins]


def _layout(parts: list[_Part], samples: Sequence[Sample], paths, needs, weights) -> Packed:
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
        # loss terms for tokens laid out in this part
        laid = [(n, True) for n in part.chain] + [(n, False) for n in laid_out]
        for node, in_chain in laid:
            if in_chain and id(node) not in part.owns:
                continue
            for i, j, off in needs.get(id(node), []):
                prev_node, prev_off = paths[i][j - 1]
                if id(prev_node) not in where:
                    raise AssertionError("a predictor is missing from its part")  # the split keeps ancestors
                s = samples[i]
                out.predictor.append(where[id(prev_node)] + prev_off)
                out.target.append(node.tokens[off])
                out.sample.append(i)
                out.old_logprob.append(float(s.old_logprobs[j - s.prompt_len]))
                out.advantage.append(float(s.advantages[j - s.prompt_len]))
                out.weight.append(float(weights[i]))
    return out


def unique_tokens(samples: Iterable[Sample]) -> int:
    """Tokens in the merged trie: the bound on what merging can save."""
    root, _ = build_trie(list(samples))
    return sum(c.subtree_size() for c in root.children.values())
