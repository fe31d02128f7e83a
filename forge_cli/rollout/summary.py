"""A rollout's summary: success (in all, per suite and per scaffold of a mix, per difficulty), rewards by component,
tokens and time per trajectory, the prefix-share ratio of what was recorded, and context-management
events per trajectory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Sequence

from forge_cli.rewards.components import duration
from forge_cli.train.prefix_tree import unique_tokens  # the trainer's own trie: what it will compute

if TYPE_CHECKING:
    from forge_cli.rollout.records import RolloutRequest, TrajectoryResult


def prefix_share(sequences: Sequence[Sequence[int]]) -> float | None:
    """tokens / unique tokens of their trie (1.0: nothing shared); ``None`` for no tokens."""
    total = sum(len(s) for s in sequences)
    return total / unique_tokens([SimpleNamespace(tokens=list(s)) for s in sequences]) if total else None


@dataclass(frozen=True)
class RolloutSummary:
    scaffold: str
    suite: str
    run_dir: Path | None
    trajectories: int
    by_status: dict[str, int]
    success_rate: float
    mean_reward: float | None
    mean_components: dict[str, float]
    completions_per_trajectory: float
    tokens_per_trajectory: float  # prompt + output tokens of all its completions
    output_tokens: int
    wall_s: float
    wall_s_per_trajectory: float
    prefix_share: float | None
    context_events_per_trajectory: float
    by_difficulty: dict[str, float] = field(default_factory=dict)  # success rate per task difficulty
    by_suite: dict[str, tuple[int, int]] = field(default_factory=dict)  # suite -> (solved, trajectories)
    by_scaffold: dict[str, tuple[int, int]] = field(default_factory=dict)  # scaffold -> (solved, trajectories)
    # how fast the solved ones were (what the completion-time reward trains): their mean wall-clock span
    # (the pool's timestamps, as the reward's default source reads them) and tool calls
    solved_seconds: float | None = None
    solved_tool_calls: float | None = None
    # failures the policy could not cause, by cause (their groups dropped; not in the success rate)
    infra_failures: dict[str, int] = field(default_factory=dict)

    def rows(self) -> list[tuple[str, str]]:
        """The summary as (label, value) rows, for a table."""
        def num(x: float | None, fmt: str = ".3f") -> str:
            return "—" if x is None else format(x, fmt)

        rows = [("trajectories", f"{self.trajectories}  (" + ", ".join(f"{k} {v}" for k, v in self.by_status.items()) + ")")]
        if self.infra_failures:
            rows += [("infrastructure failures", f"{sum(self.infra_failures.values())}  ("
                      + ", ".join(f"{k} {v}" for k, v in sorted(self.infra_failures.items())) + "; groups dropped, not trained)")]
        rows += [("success rate", num(self.success_rate, ".1%")), ("mean reward", num(self.mean_reward))]
        rows += [(f"  {name}", num(value)) for name, value in self.mean_components.items()]
        rows += [("completions / trajectory", num(self.completions_per_trajectory, ".1f")),
                 ("tokens / trajectory", num(self.tokens_per_trajectory, ".0f")),
                 ("output tokens/s", num(self.output_tokens / self.wall_s if self.wall_s else None, ".1f")),
                 ("wall time / trajectory", num(self.wall_s_per_trajectory, ".2f") + " s"),
                 ("prefix share (tokens / unique)", num(self.prefix_share, ".2f")),
                 ("context events / trajectory", num(self.context_events_per_trajectory, ".2f"))]
        if len(self.by_suite) > 1:
            rows += [(f"success on {name}", f"{num(solved / ended if ended else None, '.1%')}  ({solved}/{ended})")
                     for name, (solved, ended) in sorted(self.by_suite.items())]
        if len(self.by_scaffold) > 1:
            rows += [(f"success in {name}", f"{num(solved / ended if ended else None, '.1%')}  ({solved}/{ended})")
                     for name, (solved, ended) in sorted(self.by_scaffold.items())]
        rows += [(f"success at difficulty {d}", num(rate, ".1%")) for d, rate in sorted(self.by_difficulty.items())]
        return rows


def summarize_rollout(pool: Any, results: Sequence["TrajectoryResult"], wall_s: float, request: "RolloutRequest",
              run_dir: Path | None = None, difficulty: dict[str, str] | None = None) -> RolloutSummary:
    """The summary of ``results``, with token counts read back from the pool."""
    by_status: dict[str, int] = {}
    for r in results:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    sequences: list[list[int]] = []
    completions, output, events = 0, 0, 0
    solved_seconds: list[float] = []
    solved_calls: list[int] = []
    for r in results:
        trajectory = pool.trajectory(r.trajectory_id)
        completions += len(trajectory.completions)
        if r.solved:
            seconds = duration(trajectory)
            if seconds is not None:
                solved_seconds.append(seconds)
            solved_calls.append(sum(len(c.tool_calls or []) for c in trajectory.completions))
        for c in trajectory.completions:
            sequences.append(list(c.prompt_ids) + list(c.output_ids))
            output += len(c.output_ids)
        events += sum(1 for e in trajectory.events if e.kind.startswith("context."))
    n = len(results) or 1
    names = sorted({k for r in results for k in r.rewards})
    rewards = [sum(r.rewards.values()) for r in results]  # a trajectory without components earned 0
    per_difficulty: dict[str, list[bool]] = {}
    per_suite: dict[str, list[bool]] = {name: [] for name in request.weights}
    per_scaffold: dict[str, list[bool]] = {name: [] for name in request.scaffolds}
    for r in results:
        if difficulty and r.task_id in difficulty:
            per_difficulty.setdefault(difficulty[r.task_id], []).append(r.solved)
        per_suite.setdefault(r.suite, []).append(r.solved)
        if r.infra is None:  # as the success rate: the policy's trajectories
            per_scaffold.setdefault(r.scaffold or request.scaffold, []).append(r.solved)
    infra: dict[str, int] = {}
    for r in results:
        if r.infra is not None:
            infra[r.infra] = infra.get(r.infra, 0) + 1
    policy_ran = len(results) - sum(infra.values())  # the success rate is the policy's: infrastructure failures out
    return RolloutSummary(
        scaffold=request.scaffold_label, suite=request.label, run_dir=run_dir, trajectories=len(results), by_status=by_status,
        success_rate=sum(1 for r in results if r.solved) / (policy_ran or 1), infra_failures=infra,
        mean_reward=fmean(rewards) if rewards else None,
        mean_components={k: fmean(r.rewards.get(k, 0.0) for r in results) for k in names},
        completions_per_trajectory=completions / n, tokens_per_trajectory=sum(map(len, sequences)) / n,
        output_tokens=output, wall_s=wall_s, wall_s_per_trajectory=fmean(r.wall_s for r in results) if results else 0.0,
        prefix_share=prefix_share(sequences), context_events_per_trajectory=events / n,
        by_difficulty={d: sum(v) / len(v) for d, v in per_difficulty.items()},
        by_suite={name: (sum(v), len(v)) for name, v in per_suite.items()},
        by_scaffold={name: (sum(v), len(v)) for name, v in per_scaffold.items()},
        solved_seconds=fmean(solved_seconds) if solved_seconds else None,
        solved_tool_calls=fmean(solved_calls) if solved_calls else None,
    )
