"""Routing over engine replicas, cache-aware (the SGLang router's rule).

Each replica keeps an approximate tree of the prompts it has served. A request goes to the
replica whose tree shares the longest prefix with it, when that prefix covers at least
``cache_threshold`` of the prompt — unless load is imbalanced (the busiest replica has more than
``balance_abs`` requests in flight beyond the idlest *and* more than ``balance_rel`` times as
many), in which case, as when no replica holds enough of the prompt, the shortest queue wins.
The router is itself an :class:`~forge_cli.engine.base.Engine`: the gateway cannot tell it from
one replica. Weight updates and pauses go to every replica.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from forge_cli.engine.base import Engine, GenerationOutput, SamplingParams

class PrefixTree:
    """Token-id trie with a node budget; past it, the tree starts over (approximate, like SGLang's)."""

    def __init__(self, max_nodes: int = 200_000) -> None:
        self.root: dict[int, dict] = {}
        self.nodes = 0
        self.max_nodes = max_nodes

    def match(self, ids: list[int]) -> int:
        node, depth = self.root, 0
        for tok in ids:
            node = node.get(tok)
            if node is None:
                break
            depth += 1
        return depth

    def insert(self, ids: list[int]) -> None:
        if self.nodes + len(ids) > self.max_nodes:
            self.root, self.nodes = {}, 0
        node = self.root
        for tok in ids:
            child = node.get(tok)
            if child is None:
                child = node[tok] = {}
                self.nodes += 1
            node = child


@dataclass
class RouteStats:
    by_cache: int = 0
    by_load: int = 0
    per_replica: list[int] = field(default_factory=list)


class Router(Engine):
    name = "router"

    def __init__(
        self,
        replicas: list[Engine],
        *,
        policy: str = "cache_aware",
        cache_threshold: float = 0.5,
        balance_abs: int = 4,
        balance_rel: float = 1.5,
    ) -> None:
        if not replicas:
            raise ValueError("a router needs at least one replica")
        if policy not in ROUTERS:
            raise ValueError(f"unknown routing policy {policy!r}: choose one of {', '.join(ROUTERS)}")
        super().__init__(min(r.max_model_len for r in replicas))
        self.replicas = replicas
        self.policy = policy
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.trees = [PrefixTree() for _ in replicas]
        self.load = [0] * len(replicas)
        self.stats = RouteStats(per_replica=[0] * len(replicas))
        self._rr = itertools.cycle(range(len(replicas)))
        self.eos_token_id = replicas[0].eos_token_id
        self.tokenizer = getattr(replicas[0], "tokenizer", None)

    def choose(self, prompt_ids: list[int]) -> int:
        """The replica for a prompt (pure decision; :meth:`_generate` records it)."""
        return ROUTERS[self.policy](self, prompt_ids)

    def _round_robin(self, prompt_ids: list[int]) -> int:
        return next(self._rr)

    def _cache_aware(self, prompt_ids: list[int]) -> int:
        busiest, idlest = max(self.load), min(self.load)
        shortest = self.load.index(idlest)
        if busiest - idlest > self.balance_abs and busiest > self.balance_rel * idlest:
            self.stats.by_load += 1
            return shortest
        matches = [tree.match(prompt_ids) for tree in self.trees]
        best = max(range(len(matches)), key=lambda i: (matches[i], -self.load[i]))
        if matches[best] >= self.cache_threshold * len(prompt_ids):
            self.stats.by_cache += 1
            return best
        self.stats.by_load += 1
        return shortest

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, context: Any) -> list[GenerationOutput]:
        i = self.choose(prompt_ids)
        self.stats.per_replica[i] += 1
        self.trees[i].insert(prompt_ids)
        self.load[i] += 1
        try:
            outputs = await self.replicas[i].generate(prompt_ids, params, context=context)
        finally:
            self.load[i] -= 1
        for out in outputs:
            out.extra["replica"] = i
            self.trees[i].insert(prompt_ids + out.output_ids)
        return [replace(o, policy_version=self.version) for o in outputs]

    async def _generate_stream(self, prompt_ids: list[int], params: SamplingParams, context: Any):
        i = self.choose(prompt_ids)
        self.stats.per_replica[i] += 1
        self.trees[i].insert(prompt_ids)
        self.load[i] += 1
        try:
            async for item in self.replicas[i].generate_stream(prompt_ids, params, context=context):
                if isinstance(item, GenerationOutput):
                    self.trees[i].insert(prompt_ids + item.output_ids)
                    item.extra["replica"] = i
                    item = replace(item, policy_version=self.version)
                yield item
        finally:
            self.load[i] -= 1

    async def _load_weights(self, weights: Any) -> None:
        await asyncio.gather(*(r.load_weights(weights) for r in self.replicas))

    async def close(self) -> None:
        await asyncio.gather(*(r.close() for r in self.replicas))


# ``model.routing``: each policy's name (forge_cli.configs.model.ROUTING_POLICIES says what it does) -> its rule
ROUTERS: dict[str, Callable[[Router, list[int]], int]] = {
    "cache_aware": Router._cache_aware,
    "round_robin": Router._round_robin,
}
