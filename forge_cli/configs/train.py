"""``[train]``: the trainer's settings, torch-free so that ``forge.toml`` validates without it.

``[train.loss]`` and ``[train.engine]`` are unions told apart by ``type`` (each member has its own
documented fields); the code each name selects is in :data:`forge_cli.train.loss.LOSSES` and
:data:`forge_cli.train.engines.TRAIN_ENGINES`. The attention modes and split policies are tables of
names with what each means; :mod:`forge_cli.train.step` dispatches on them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from forge_cli.configs.common import Section
from forge_cli.unions import name_table, tagged_union

ATTENTION_MODES: dict[str, str] = {
    "auto": "flex for FlexAttention models on CUDA, else tree where the model dispatches through transformers' "
            "AttentionInterface, else dense",
    "tree": "only ancestor pairs are computed (any AttentionInterface model; CPU and GPU)",
    "flex": "FlexAttention's block-sparse mask (CUDA: it has no CPU backward)",
    "dense": "a [T, T] additive mask, for any model and attention implementation",
}
SPLITS: dict[str, str] = {
    "auto": "reuse where the attention allows (tree), else recompute",
    "reuse": "a tree over the budget: its shared part's keys/values are computed once and reused, with gradients "
             "(tree attention only)",
    "recompute": "a tree over the budget: each part recomputes the shared chain",
}


def names_in(table: dict[str, str]) -> str:
    return ", ".join(table)


# ---- losses (forge_cli.train.loss.LOSSES holds the functions) ---------------------------------------------


class CISPOLossConfig(Section):
    """CISPO (MiniMax-M1, eq. 4–5): a clipped, detached importance weight on every token's ``log π``."""

    type: Literal["cispo"] = "cispo"
    eps_low: float = Field(1e6, ge=0, description="Lower clip of the IS weight (large = no lower bound).")
    eps_high: float = Field(0.28, ge=0, description="Upper clip of the IS weight.")
    token_mask: bool = Field(False, description="The token mask of MiniMax-M1 eq. 6–7.")


class PPOClipLossConfig(Section):
    """PPO's clipped surrogate, token level (clipped tokens get no gradient)."""

    type: Literal["ppo_clip"] = "ppo_clip"
    eps_low: float = Field(0.2, ge=0, description="Lower clip of the ratio.")
    eps_high: float = Field(0.28, ge=0, description="Upper clip of the ratio.")


class GRPOLossConfig(PPOClipLossConfig):
    """GRPO (DeepSeekMath eq. 3 without the KL term): PPO's clip on group-normalised advantages."""

    type: Literal["grpo"] = "grpo"  # type: ignore[assignment]


class ReinforceLossConfig(Section):
    """REINFORCE with advantages: ``−Â · log π`` (ignores the behaviour logprobs)."""

    type: Literal["reinforce"] = "reinforce"


class CrossEntropyLossConfig(Section):
    """Supervised fine-tuning: ``−log π`` of every output token (ignores advantages and behaviour
    logprobs). The warm start (``forge model warmstart``) trains with it through the same step."""

    type: Literal["cross_entropy"] = "cross_entropy"


LossConfig = tagged_union(CISPOLossConfig, PPOClipLossConfig, GRPOLossConfig, ReinforceLossConfig, CrossEntropyLossConfig)
LOSS_CONFIGS: dict[str, type[Section]] = name_table(CISPOLossConfig, PPOClipLossConfig, GRPOLossConfig, ReinforceLossConfig, CrossEntropyLossConfig)


# ---- train engines (forge_cli.train.engines.TRAIN_ENGINES builds them) -------------------------------------------------------


class TorchTrainEngineConfig(Section):
    """One process, CPU or GPU: the embedded default."""

    type: Literal["torch"] = "torch"


class DeepSpeedTrainEngineConfig(Section):
    """DeepSpeed ZeRO, one process or several (DeepSpeed's launcher), CPU (gloo) or GPU (NCCL)."""

    type: Literal["deepspeed"] = "deepspeed"
    zero_stage: Literal[1, 2, 3] = Field(1, description="ZeRO stage: 1 optimizer states, 2 + gradients, 3 + parameters.")


TrainEngineConfig = tagged_union(TorchTrainEngineConfig, DeepSpeedTrainEngineConfig)
TRAIN_ENGINE_CONFIGS: dict[str, type[Section]] = name_table(TorchTrainEngineConfig, DeepSpeedTrainEngineConfig)


# ---- the warm start (forge_cli/train/warmstart.py) ----------------------------------------------------


class WarmstartConfig(Section):
    """Supervised fine-tuning on synthetic traces before RL: the project's scripted demo policies
    solve train tasks through the real gateway and scaffold, and the policy learns their completions
    with cross-entropy through the same prefix-tree step, until its *sampled* held-out success
    reaches ``target_success`` (measured every ``eval_every`` steps) or ``max_minutes`` run out."""

    when: Literal["auto", "always", "never"] = Field("auto", description=(
        "auto: when forge train starts the embedded default model and no warm-started copy exists; "
        "always: before every new run; never: start RL from the model as it is."))
    target_success: float = Field(0.3, gt=0, le=1, description=(
        "Stop once sampled held-out success reaches this: a policy that solves some but clearly not most tasks."))
    max_minutes: float = Field(6.0, gt=0, description="Stop after this long even below the target.")
    max_steps: int | None = Field(None, gt=0, description=(
        "Stop after this many supervised steps even below the target (with max_minutes as a bound too): with "
        "decay_steps and fresh_traces = 0, a warm start that the same command repeats bit for bit."))
    traces: int = Field(1024, ge=8, description="Synthetic train-split trajectories written before the first step.")
    fresh_traces: int = Field(0, ge=0, description=(
        "While the warm start trains, keep writing new traces in the background, this many at a time (0: learn "
        "only the first `traces`), which the steps learn as they come (each step takes what no step has learned "
        "yet first, always). "
        "Measured here it did not make the copying transition reliably sooner, and the writing takes CPU from "
        "the steps (benchmarks/RESULTS.md, 'Learning')."))
    teacher_slips: float = Field(0.0, ge=0, lt=1, description=(
        "The fraction of calc traces in which the demo teacher miscopies one digit (of the expression, or of "
        "the answer), as an imperfect teacher does. The warm start learns every trace the teacher finished, "
        "right or wrong, as it would a person's or a weaker model's; with 0 only the solved ones."))
    teacher_rechecks: float = Field(0.0, ge=0, lt=1, description=(
        "How often the calc teacher, having its result, sends the same calculator call again to re-check it "
        "before answering (and again after a re-check, at most twice): right but slow, what the completion-time "
        "reward teaches RL to drop."))
    teacher_warmups: float = Field(0.0, ge=0, lt=1, description=(
        "How often the calc teacher first tries the calculator on 1+1 before its real call, as an agent checks "
        "that a tool works (again after a warm-up with the same chance, at most `teacher_max_warmups` times; "
        "warm-ups and re-checks at most two in all, or `teacher_max_warmups` if more). It never uses that "
        "result, so only the completion-time reward argues against the habit (benchmarks/learning.py's speed "
        "part)."))
    teacher_max_warmups: int = Field(2, ge=1, le=3, description=(
        "The most warm-up calls the calc teacher makes in one trace (`teacher_warmups`): three, the real call "
        "and the answer fill the embedded scaffold's 5 turns. A costlier habit leaves the completion-time "
        "reward more to take."))
    batch_size: int = Field(32, ge=1, description="Completions per supervised step.")
    lr: float = Field(3e-3, gt=0, description="Learning rate of the first supervised step (AdamW).")
    final_lr_fraction: float = Field(1.0, gt=0, le=1, description=(
        "The learning rate falls along a half cosine to lr x this (1: constant), over decay_steps steps (or, "
        "with decay_steps = 0, over max_minutes)."))
    decay_steps: int = Field(0, ge=0, description=(
        "Steps over which the learning rate falls (then it stays at the floor): with fresh_traces = 0 two warm "
        "starts of one seed then take the same steps; 0: over max_minutes of wall time instead, where they do not."))
    eval_every: int = Field(25, ge=1, description="Supervised steps between two held-out evaluations.")


class TrainConfig(Section):
    """The trainer."""

    engine: TrainEngineConfig = Field(default_factory=DeepSpeedTrainEngineConfig, description=(
        'Train engine: [train.engine] with type = "deepspeed" (and zero_stage; the default: one process or many under '
        'its launcher) | "torch" (one process); train.engine = "torch" is short for its table.'))
    lr: float = Field(5e-5, gt=0, description="Learning rate (AdamW).")
    groups_per_step: int = Field(4, gt=0, description="P: groups consumed per train step.")
    group_size: int = Field(8, gt=0, description="n: trajectories sampled per task.")
    updates_per_step: int = Field(1, ge=1, le=16, description=(
        "Optimizer updates on each step's batch (PPO's epochs): more learning per sampled trajectory when rollouts "
        "are the bottleneck. The ratios stay against the sampler's logprobs: ppo_clip's and grpo's clip bounds the "
        "drift; cispo's detached weight does not (every token keeps its gradient), nor do reinforce and "
        "cross_entropy, which ignore the ratio. The step's logged stats are the last update's."))
    micro_batch_tokens: int = Field(8192, gt=0, description="Token budget of one packed micro-batch.")
    attention: Literal[tuple(ATTENTION_MODES)] = Field(  # type: ignore[valid-type]
        "auto", description="Prefix-tree attention: " + "; ".join(f"{k}: {v}" for k, v in ATTENTION_MODES.items()) + ".")
    split: Literal[tuple(SPLITS)] = Field(  # type: ignore[valid-type]
        "auto", description="A tree over micro_batch_tokens: " + "; ".join(f"{k}: {v}" for k, v in SPLITS.items()) + ".")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 mixed precision on a GPU that supports it, float32 otherwise.")
    threads: int | None = Field(None, ge=1, description=(
        "CPU threads a train step may use (unset: torch's default, every core); on a CPU that also runs the "
        "rollout engine, fewer leave it cores."))
    loss: LossConfig = Field(default_factory=CISPOLossConfig, description=(
        'The policy-gradient loss: [train.loss] with type = "cispo" | "ppo_clip" | "grpo" | "reinforce" and its fields.'))
    checkpoint_every: int = Field(10, ge=0, description="Train steps between checkpoints (0: only at the end).")
    eval_every: int = Field(10, ge=0, description="Train steps between held-out evaluations (0: none).")
    eval_tasks: int = Field(32, ge=1, description="Held-out tasks per evaluation (the same ones each time).")
    eval_samples: int = Field(4, ge=1, description="Sampled trajectories per held-out task per evaluation.")
    minutes: float | None = Field(None, gt=0, description=(
        "Wall-time budget of forge train (--minutes); unset: 15 on the embedded default, none with a model.path."))
    warmstart: WarmstartConfig = Field(default_factory=WarmstartConfig, description=(
        "[train.warmstart]: supervised fine-tuning on synthetic traces before RL (forge model warmstart)."))
