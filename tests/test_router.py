"""Cache-aware routing: the replica holding the longest prefix, unless load is imbalanced."""

from __future__ import annotations

import asyncio

import pytest

from forge_cli.engine.base import Engine, GenerationOutput, SamplingParams
from forge_cli.engine.router import PrefixTree, Router


class Replica(Engine):
    """A stand-in replica (the router's decisions are what is tested): echoes, after a delay."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(4096)
        self.delay = delay
        self.seen: list[list[int]] = []

    async def _generate(self, prompt_ids, params, context):
        self.seen.append(list(prompt_ids))
        await asyncio.sleep(self.delay)
        top = [[(7, -0.1), (9, -2.0)], [(8, -0.2), (9, -3.0)]] if params.top_logprobs else None
        return [GenerationOutput([7, 8], [-0.1, -0.2], "stop", self.version, top_logprobs=top, extra={"mine": 1})]

    async def _load_weights(self, weights):
        pass


def test_prefix_tree():
    tree = PrefixTree(max_nodes=10)
    tree.insert([1, 2, 3, 4])
    assert tree.match([1, 2, 3, 9]) == 3 and tree.match([2]) == 0
    tree.insert(list(range(100, 108)))  # over the budget: starts over
    assert tree.match([1, 2]) == 0 and tree.match([100, 101]) == 2


def test_multi_turn_sessions_stick_to_their_replica():
    async def run():
        replicas = [Replica(), Replica()]
        router = Router(replicas)
        sessions = {s: [1000 + s] * 40 for s in range(6)}
        placed: dict[int, set[int]] = {s: set() for s in sessions}
        for turn in range(5):
            for s, prompt in sessions.items():
                out = await router.generate(prompt, SamplingParams(max_tokens=2))
                placed[s].add(out[0].extra["replica"])
                sessions[s] = prompt + out[0].output_ids + [turn] * 10
        return placed, router

    placed, router = asyncio.run(run())
    assert all(len(p) == 1 for p in placed.values())  # every later turn went where its prefix was
    assert router.stats.by_cache == 6 * 4


def test_round_robin_ignores_prefixes():
    async def run():
        router = Router([Replica(), Replica()], policy="round_robin")
        return [(await router.generate([5] * 30, SamplingParams(max_tokens=2)))[0].extra["replica"] for _ in range(4)]

    assert asyncio.run(run()) == [0, 1, 0, 1]


def test_imbalance_sends_to_the_shortest_queue():
    async def run():
        replicas = [Replica(delay=0.2), Replica(delay=0.2)]
        router = Router(replicas, balance_abs=2, balance_rel=1.5)
        prompt = [3] * 50
        await router.generate(prompt, SamplingParams(max_tokens=2))  # replica 0 now holds the prefix
        outs = await asyncio.gather(*(router.generate(prompt, SamplingParams(max_tokens=2)) for _ in range(10)))
        return [o[0].extra["replica"] for o in outs]

    where = asyncio.run(run())
    assert where.count(1) >= 3  # the cache said 0, the queue length overrode it


def test_weights_and_pause_reach_every_replica():
    async def run():
        replicas = [Replica(), Replica()]
        router = Router(replicas)
        version = await router.load_weights({})
        return version, [r.version for r in replicas]

    assert asyncio.run(run()) == (1, [1, 1])


def test_the_router_passes_every_output_field_through():
    """Only the policy version is the router's own; top logprobs, stop reason and extras pass through,
    streamed or not."""
    async def run():
        router = Router([Replica(), Replica()])
        await router.load_weights({})
        params = SamplingParams(top_logprobs=2)
        [plain] = await router.generate([1, 2, 3], params)
        streamed = [item async for item in router.generate_stream([1, 2, 3], params)]
        return plain, streamed[-1]

    for out in asyncio.run(run()):
        assert out.top_logprobs == [[(7, -0.1), (9, -2.0)], [(8, -0.2), (9, -3.0)]]
        assert out.policy_version == 1 and out.extra["mine"] == 1 and "replica" in out.extra


def test_bad_config():
    with pytest.raises(ValueError):
        Router([])
    with pytest.raises(ValueError):
        Router([Replica()], policy="random")


class Flaky(Replica):
    """A replica that fails the requests whose prompt starts with 13 (after the delay), streamed or not."""

    async def _generate(self, prompt_ids, params, context):
        out = await super()._generate(prompt_ids, params, context)
        if prompt_ids[0] == 13:
            raise RuntimeError("this request broke the replica's sampler")
        return out


def test_one_replicas_failure_fails_only_its_request():
    """A replica failing one request fails that request alone: the others, on it or on the other
    replica, concurrent or later, streamed or not, finish; the load counts return to zero."""
    async def run():
        router = Router([Flaky(delay=0.05), Flaky(delay=0.05)], policy="round_robin")
        params = SamplingParams(max_tokens=2)

        async def streamed(prompt):
            return [item async for item in router.generate_stream(prompt, params)]

        prompts = [[13, 1], [1, 2], [2, 3], [13, 4], [3, 4], [4, 5]]
        results = await asyncio.gather(*(router.generate(p, params) for p in prompts), streamed([13, 9]),
                                       streamed([9, 9]), return_exceptions=True)
        after = await router.generate([13 + 1, 2], params)
        return router, results, after

    router, results, after = asyncio.run(run())
    failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert failed == [0, 3, 6] and all(isinstance(results[i], RuntimeError) for i in failed)
    for i in (1, 2, 4, 5):
        assert results[i][0].output_ids == [7, 8]
    assert results[7][-1].output_ids == [7, 8]
    assert after[0].output_ids == [7, 8] and router.load == [0, 0]
