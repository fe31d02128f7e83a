"""The warm start's learning-rate schedule: a half cosine from ``lr`` to ``lr * final_fraction``."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from forge_cli.train.warmstart import cosine_lr


@given(lr=st.floats(1e-6, 1.0), final=st.floats(0.01, 1.0), budget=st.floats(1.0, 3600.0),
       a=st.floats(0.0, 2.0), b=st.floats(0.0, 2.0))
def test_falls_from_lr_to_the_final_fraction_and_stays(lr, final, budget, a, b):
    assert math.isclose(cosine_lr(lr, final, 0.0, budget), lr)
    assert math.isclose(cosine_lr(lr, final, budget, budget), lr * final)
    assert math.isclose(cosine_lr(lr, final, 2 * budget, budget), lr * final)  # past the budget: the floor
    early, late = sorted((a * budget, b * budget))
    assert cosine_lr(lr, final, early, budget) >= cosine_lr(lr, final, late, budget) - 1e-15  # never rises
    mid = cosine_lr(lr, final, budget / 2, budget)
    assert math.isclose(mid, lr * (1 + final) / 2)  # the plain half-cosine's midpoint


def test_a_constant_schedule_and_no_budget():
    assert cosine_lr(3e-3, 1.0, 100.0, 200.0) == 3e-3
    assert cosine_lr(3e-3, 0.5, 0.0, 0.0) == 1.5e-3  # no time at all: already at the floor
