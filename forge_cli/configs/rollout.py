"""``[rollout]``: what ``forge rollout`` runs on which tasks, and where scaffolds run."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from forge_cli.configs.common import Section

# ``rollout.executor``: where scaffolds run (forge_cli.rollout.executors.EXECUTORS holds the code)
EXECUTOR_NAMES = ("local", "ray")


class RolloutConfig(Section):
    """``forge rollout``: what runs on which tasks (each flag of the command overrides its key)."""

    scaffold: str = Field("react", description="The scaffold to run (forge scaffold list).")
    scaffold_mix: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(default_factory=dict, description=(
        "Mixed-scaffold rollouts: scaffold name -> weight (e.g. {opencode = 1, aider = 1, pi = 2}); groups take "
        "the scaffolds in a weighted round robin (every run of groups holds each in proportion), each with its "
        "own [scaffolds.NAME] options and sandbox. Empty: scaffold alone."))
    task: str = Field("calc", description="A registered task suite, or a JSONL file of tasks (then verifier is required).")
    verifier: str | None = Field(None, description="For a JSONL task file: module:function that verifies a task.")
    split: Literal["train", "heldout"] = Field("train", description="Which split of the suite.")
    groups: int = Field(4, ge=1, description="Tasks (groups) to run; each runs train.group_size trajectories.")
    concurrency: int = Field(8, ge=1, description="Trajectories running at once.")
    trajectory_timeout_s: float = Field(600.0, gt=0, description="A trajectory running longer is ended as timed out.")
    infra_retries: int = Field(2, ge=0, le=10, description=(
        "A trajectory that fails for a reason its policy could not cause (an infrastructure failure: the sandbox, the "
        "agent's install or launch, the verifier; any failure before its first model call) runs again, afresh, up to "
        "this many times; still failing, or failing so after the policy acted, its group is dropped whole with the "
        "reason: never trained as a reward of 0. 0: drop at once."))
    max_tokens_per_trajectory: int | None = Field(
        None, ge=1, description="Output tokens a trajectory may sample in all (calls past it get a 409); none if unset.")
    executor: Literal[tuple(EXECUTOR_NAMES)] = Field(  # type: ignore[valid-type]
        "local", description="Where scaffolds run: local (the driver's process) or ray (Ray tasks).")
    ray_address: str | None = Field(None, description="executor = ray: a Ray cluster's address (default: a local Ray).")
    sandbox: str = Field("local", description=(
        "Where black-box agents run: a registered sandbox (forge sandbox status / forge doctor), e.g. local "
        "(bubblewrap where installed) or docker; its options are [sandboxes.NAME]. A black-box agent's own "
        "[scaffolds.NAME] sandbox wins."))
    mix: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(default_factory=dict, description=(
        "Mixed-domain rollouts: suite name -> weight (e.g. {calc = 2.0, qa = 1.0}); each group's suite is drawn by "
        "weight from run.seed, its tasks keep their suite's verifier and tools. Empty: task alone."))
