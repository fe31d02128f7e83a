"""Losses: CISPO by hand, and every loss gives the merged batch the unmerged batch's loss and gradients."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from forge_cli.configs.train import LOSS_CONFIGS
from forge_cli.train.loss import loss_function
from forge_cli.train.loss import cispo, ppo_clip
from forge_cli.train.step import policy_loss_backward
from tests.test_prefix_tree import forest, tiny_llama


def cfg(**kw):
    return SimpleNamespace(**{"type": "cispo", "eps_low": 1e6, "eps_high": 0.28, "token_mask": False, **kw})


def test_cispo_by_hand():
    # three tokens: ratio 2.0 with Â > 0 (clipped to 1.28), ratio 0.5 with Â < 0 (no lower bound),
    # ratio 1.0 with Â > 0 (inside)
    old = torch.log(torch.tensor([0.2, 0.4, 0.3], dtype=torch.float64))
    logp = torch.log(torch.tensor([0.4, 0.2, 0.3], dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    n = 3
    loss = cispo(logp, old, adv, cfg()).sum() / n
    loss.backward()
    weights = [1.28, 0.5, 1.0]  # sg(clip(r)): detached
    expected_loss = -sum(w * a * lp for w, a, lp in zip(weights, adv.tolist(), logp.detach().tolist())) / n
    assert float(loss.detach()) == pytest.approx(expected_loss, rel=1e-12)
    # the gradient flows only through log π: d loss / d logp_t = −w_t · Â_t / N, and no token is dropped
    assert logp.grad.tolist() == pytest.approx([-1.28 * 1.0 / 3, -0.5 * -2.0 / 3, -1.0 * 0.5 / 3], rel=1e-12)
    assert all(g != 0 for g in logp.grad.tolist())
    # PPO-clip on the same tokens drops the clipped first token's gradient
    logp2 = logp.detach().clone().requires_grad_()
    ppo_clip(logp2, old, adv, cfg(eps_low=0.2, eps_high=0.28)).sum().backward()
    assert logp2.grad[0] == 0 and logp2.grad[2] != 0
    # with the eq. 6–7 token mask, the first token (Â > 0, r > 1 + ε_high) is masked
    logp3 = logp.detach().clone().requires_grad_()
    cispo(logp3, old, adv, cfg(token_mask=True)).sum().backward()
    assert logp3.grad[0] == 0 and logp3.grad[1] != 0


def separate_backward(model, samples, loss_cfg):
    fn = loss_function(loss_cfg)
    n = sum(len(s.tokens) - s.prompt_len for s in samples)
    total = 0.0
    for s in samples:
        ids = torch.tensor([list(s.tokens)])
        logits = model(input_ids=ids).logits[0]
        logp = torch.log_softmax(logits[s.prompt_len - 1 : -1], -1).gather(-1, ids[0, s.prompt_len:, None])[:, 0]
        like = dict(dtype=logp.dtype)
        loss = fn(logp, torch.tensor(list(s.old_logprobs), **like), torch.tensor(list(s.advantages), **like), loss_cfg).sum() / n
        loss.backward()
        total += float(loss)
    return total


@pytest.mark.parametrize("loss_type", sorted(LOSS_CONFIGS))
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize(("budget", "attention", "split"), [
    (None, "dense", "auto"), (20, "dense", "recompute"), (None, "tree", "auto"), (20, "tree", "reuse"), (20, "tree", "recompute"),
])
def test_every_loss_merged_equals_unmerged(loss_type, dtype, tol, budget, attention, split):
    samples = forest(random.Random(7))
    # old logprobs near the model's own, so ratios land on both sides of the clip range
    model = tiny_llama(dtype)
    loss_cfg = cfg(type=loss_type, eps_low=0.2 if loss_type != "cispo" else 1e6)
    model.zero_grad()
    loss_sep = separate_backward(model, samples, loss_cfg)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    stats = policy_loss_backward(model, samples, loss_cfg, budget=budget, attention=attention, split=split)
    assert stats.loss == pytest.approx(loss_sep, rel=tol, abs=tol)
    assert stats.packed_tokens < sum(len(s.tokens) for s in samples)
    for n, p in model.named_parameters():
        assert torch.allclose(grads[n], p.grad, rtol=tol * 10, atol=tol), n


def test_cross_entropy_is_torch_cross_entropy():
    # the warm start's loss: −log π of each target, whatever the advantages and behaviour logprobs
    from forge_cli.train.loss import cross_entropy

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(9, 17, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 17, (9,), generator=g)
    logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]
    noise = torch.randn(9, generator=g, dtype=torch.float64)
    terms = cross_entropy(logp, noise, noise * 5, SimpleNamespace(type="cross_entropy"))
    assert float(terms.mean()) == pytest.approx(float(torch.nn.functional.cross_entropy(logits, targets)), rel=1e-12)
