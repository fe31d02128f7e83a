"""Policy-gradient losses, as pure functions of per-token tensors.

Every loss maps ``(logp, old_logp, advantages, config)`` — each a ``[n_tokens]`` tensor, ``logp``
the trainer's ``log_softmax(logits / T)`` of the sampled ids (with gradient), ``old_logp`` the
engine's at sampling time — to per-token losses ``[n_tokens]``. The caller sums them (times each
term's weight) and divides by the number of logical output tokens of the whole global batch,
counted before micro-batching, so packing and gradient accumulation change nothing.

``[train.loss]``'s members (:mod:`forge_cli.configs.train`) name the losses; :data:`LOSSES` maps
each name to its function here.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from forge_cli.errors import ForgeError

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]


def cispo(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, cfg: Any) -> torch.Tensor:
    """CISPO (MiniMax-M1, arXiv:2506.13585, eq. 4–5):

    ``J = 1/Σ|o_i| · Σ_i Σ_t sg(clip(r_{i,t}, 1 − ε_low, 1 + ε_high)) · Â_{i,t} · log π_θ(o_{i,t} | …)``,
    ``r = π_θ / π_old``. The clipped weight is detached, so every token keeps a gradient — through
    ``log π`` only — unlike PPO's clip, which drops the tokens it clips. With ``cfg.token_mask``,
    the mask of eq. 6–7 zeroes tokens whose ratio left the trust region in the direction the
    advantage pushes (``Â > 0, r > 1 + ε_high`` or ``Â < 0, r < 1 − ε_low``). Returns ``−J``'s terms.
    """
    ratio = torch.exp(logp - old_logp)
    weight = torch.clamp(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high).detach()
    terms = -weight * adv * logp
    if getattr(cfg, "token_mask", False):
        keep = ~(((adv > 0) & (ratio > 1.0 + cfg.eps_high)) | ((adv < 0) & (ratio < 1.0 - cfg.eps_low)))
        terms = terms * keep.detach().to(terms.dtype)
    return terms


def ppo_clip(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, cfg: Any) -> torch.Tensor:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7), token level, as GRPO uses it
    (Shao et al. 2024, DeepSeekMath, eq. 3, without the KL term):
    ``−min(r · Â, clip(r, 1 − ε_low, 1 + ε_high) · Â)``. Clipped tokens get no gradient."""
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    return -torch.minimum(ratio * adv, clipped * adv)


def reinforce(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, cfg: Any) -> torch.Tensor:
    """REINFORCE (Williams 1992) with advantages: ``−Â · log π``; ignores ``old_logp``."""
    return -adv * logp



def cross_entropy(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, cfg: Any) -> torch.Tensor:
    """Supervised cross-entropy: ``−log π`` of each target token; ignores ``old_logp`` and ``adv``."""
    return -logp


# ``train.loss``: each loss's name (forge_cli.configs.train) -> its function (grpo is PPO's clip on group advantages)
LOSSES: dict[str, LossFn] = {
    "cispo": cispo, "ppo_clip": ppo_clip, "grpo": ppo_clip, "reinforce": reinforce, "cross_entropy": cross_entropy,
}


def loss_function(cfg: Any) -> LossFn:
    """The per-token loss of ``cfg`` (a ``[train.loss]`` member, or anything with its ``type`` and fields)."""
    fn = LOSSES.get(getattr(cfg, "type", None))  # type: ignore[arg-type]
    if fn is None:
        raise ForgeError(f"unknown loss {getattr(cfg, 'type', None)!r}: choose one of {', '.join(LOSSES)}")
    return fn
