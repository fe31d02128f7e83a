"""Helpers on lists of token ids that several layers share (the gateway's history, the pool's
stored prompts, the trainer's prefix tree)."""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """The length of the common prefix of ``a`` and ``b[start:]``.

    By slice comparisons, which run in C: a list compares two elements that are the same object
    without calling ``__eq__``, so ids shared between the lists compare at memory speed. Where they
    differ, halving the remaining span compares each position a bounded number of times."""
    n = min(len(a), len(b) - start)
    if n <= 0:
        return 0
    head = min(n, 64)  # lists that differ early are told apart without copying them whole
    if a[:head] != b[start:start + head]:
        lo, hi = 0, head
    elif (a if n == len(a) else a[:n]) == (b if start == 0 and n == len(b) else b[start:start + n]):
        return n  # (a whole list is compared as it is, not copied)
    else:
        lo, hi = head, n  # a[:lo] matches; the first difference is before hi
    while hi - lo > 16:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[start + lo:start + mid]:
            lo = mid
        else:
            hi = mid
    while lo < hi and a[lo] == b[start + lo]:
        lo += 1
    return lo
