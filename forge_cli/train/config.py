"""The trainer's name tables, torch-free so that ``forge.toml`` validates against them.

Each concept is defined once, here: ``[train.loss]`` and ``[train.engine]`` are discriminated
unions (``type`` names the member; each member has its own documented fields and knows the code
it selects), and the attention modes and split policies are tables of names with what each means.
``forge_cli.config`` builds its sections from these; the trainer dispatches through them.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

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


class _Member(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---- losses (forge_cli/train/loss.py holds the functions) ---------------------------------------------


class CISPOLoss(_Member):
    """CISPO (MiniMax-M1, eq. 4–5): a clipped, detached importance weight on every token's ``log π``."""

    type: Literal["cispo"] = "cispo"
    eps_low: float = Field(1e6, ge=0, description="Lower clip of the IS weight (large = no lower bound).")
    eps_high: float = Field(0.28, ge=0, description="Upper clip of the IS weight.")
    token_mask: bool = Field(False, description="The token mask of MiniMax-M1 eq. 6–7.")
    function_name: ClassVar[str] = "cispo"  # in forge_cli.train.loss


class PPOClipLoss(_Member):
    """PPO's clipped surrogate, token level (clipped tokens get no gradient)."""

    type: Literal["ppo_clip"] = "ppo_clip"
    eps_low: float = Field(0.2, ge=0, description="Lower clip of the ratio.")
    eps_high: float = Field(0.28, ge=0, description="Upper clip of the ratio.")
    function_name: ClassVar[str] = "ppo_clip"  # in forge_cli.train.loss


class GRPOLoss(PPOClipLoss):
    """GRPO (DeepSeekMath eq. 3 without the KL term): PPO's clip on group-normalised advantages."""

    type: Literal["grpo"] = "grpo"  # type: ignore[assignment]


class ReinforceLoss(_Member):
    """REINFORCE with advantages: ``−Â · log π`` (ignores the behaviour logprobs)."""

    type: Literal["reinforce"] = "reinforce"
    function_name: ClassVar[str] = "reinforce"  # in forge_cli.train.loss


class CrossEntropyLoss(_Member):
    """Supervised fine-tuning: ``−log π`` of every output token (ignores advantages and behaviour
    logprobs). The warm start (``forge model warmstart``) trains with it through the same step."""

    type: Literal["cross_entropy"] = "cross_entropy"
    function_name: ClassVar[str] = "cross_entropy"  # in forge_cli.train.loss


LossConfig = tagged_union(CISPOLoss, PPOClipLoss, GRPOLoss, ReinforceLoss, CrossEntropyLoss)
LOSS_CONFIGS: dict[str, type[_Member]] = name_table(CISPOLoss, PPOClipLoss, GRPOLoss, ReinforceLoss, CrossEntropyLoss)


def loss_function(cfg: Any) -> Callable[..., Any]:
    """The per-token loss of ``cfg`` (a member above, or anything with its ``type`` and fields)."""
    from forge_cli.errors import ForgeError
    from forge_cli.train import loss

    member = LOSS_CONFIGS.get(getattr(cfg, "type", None))
    if member is None:
        raise ForgeError(f"unknown loss {getattr(cfg, 'type', None)!r}: choose one of {', '.join(LOSS_CONFIGS)}")
    return getattr(loss, member.function_name)


# ---- train engines (forge_cli/train/engines.py) -------------------------------------------------------


class TorchTrainEngine(_Member):
    """One process, CPU or GPU: the embedded default."""

    type: Literal["torch"] = "torch"

    def build(self, model: Any, lr: float, **kw: Any) -> Any:
        from forge_cli.train.engines import TorchEngine

        return TorchEngine(model, lr, **kw)


class DeepSpeedTrainEngine(_Member):
    """DeepSpeed ZeRO, one process or several (DeepSpeed's launcher), CPU (gloo) or GPU (NCCL)."""

    type: Literal["deepspeed"] = "deepspeed"
    zero_stage: Literal[1, 2, 3] = Field(1, description="ZeRO stage: 1 optimizer states, 2 + gradients, 3 + parameters.")

    def build(self, model: Any, lr: float, **kw: Any) -> Any:
        from forge_cli.train.engines import DeepSpeedEngine

        return DeepSpeedEngine(model, lr, zero_stage=self.zero_stage, **kw)


TrainEngineConfig = tagged_union(TorchTrainEngine, DeepSpeedTrainEngine)
TRAIN_ENGINE_CONFIGS: dict[str, type[_Member]] = name_table(TorchTrainEngine, DeepSpeedTrainEngine)


# ---- the warm start (forge_cli/train/warmstart.py) ----------------------------------------------------


class WarmStartConfig(_Member):
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
    batch_size: int = Field(32, ge=1, description="Completions per supervised step.")
    lr: float = Field(3e-3, gt=0, description="Learning rate of the first supervised step (AdamW).")
    final_lr_fraction: float = Field(1.0, gt=0, le=1, description=(
        "The learning rate falls along a half cosine to lr x this (1: constant), over decay_steps steps (or, "
        "with decay_steps = 0, over max_minutes)."))
    decay_steps: int = Field(0, ge=0, description=(
        "Steps over which the learning rate falls (then it stays at the floor): with fresh_traces = 0 two warm "
        "starts of one seed then take the same steps; 0: over max_minutes of wall time instead, where they do not."))
    eval_every: int = Field(25, ge=1, description="Supervised steps between two held-out evaluations.")
