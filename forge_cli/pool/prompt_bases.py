"""Which earlier completion a new prompt extends, so the pool stores only its new tokens.

An agent resends its whole conversation every call: the prompt of call ``k`` is, as a rule, the
prompt and output of call ``k - 1`` followed by a tool result. The pool stores such a prompt as a
reference to that earlier completion of the same trajectory (its ``seq``), how many leading tokens
come from it (``prompt_shared``) and the tokens after those (the ``prompt_ids`` column); a read
rebuilds it (:mod:`forge_cli.pool.reads`). Writing a few hundred tokens instead of tens of thousands
a call is what makes ingest fast; and what is stored is exactly what was sent, since the shared
tokens are compared, never assumed.

A trajectory's first prompt has no earlier call of its own, yet it is often much of another
trajectory's: a group's members get the same task, and an agent's long system prompt and tool listing
start every task it runs. Such a prompt may be stored as a *root* — one of the last ``roots``
completions stored whole, of any trajectory (``prompt_root_trajectory``, ``prompt_root_seq``) — where
the root gives at least ``min_shared_root`` ids and at least half the prompt; a prompt a root covers
less is stored whole and becomes a root itself, so each group's task is stored whole once and roots
stay fresh. A root is stored whole, so a read makes one hop; the pool deletes no completion, so a
root is there for as long as what extends it. Only durable rows are roots: the members of a group
whose first calls are recorded at the same moment (as a gateway's sessions start) find none of each
other's and are each stored whole.

:class:`PromptBases` keeps, per trajectory this pool object wrote to, the full ids (prompt then
output) of its last few completions — copied when the call began, so a caller that changes its lists
later changes nothing here — each only once its row is committed: a base is always a durable row,
of the same trajectory with a smaller ``seq`` or a root. A trajectory that ends through this pool
object is forgotten (its roots stay); any other, least recently used first, past the token bound.
What it has forgotten, and what it never wrote, is stored whole or on a root, which is always correct.

The shared ids are compared by value (``==``): an id sent as ``5.0`` or ``True`` where the earlier call
(or a root of another trajectory) had ``5`` or ``1`` is the same id, stored as that call's int. The ids
after them are checked as any.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

from forge_cli.token_ids import common_prefix


class Base(NamedTuple):
    """A new prompt's first ``shared`` ids are those of the completion ``seq`` of its trajectory
    (that completion's prompt, then its output), or of ``trajectory`` where that is another (a root:
    a completion stored whole)."""

    seq: int
    shared: int
    trajectory: str | None = None


class InBatch(NamedTuple):
    """A new prompt's first ``shared`` ids are those of the completion appended before it in the same
    call (the ``index``-th: e.g. the first of a request's ``n`` answers, whose prompt they share)."""

    index: int
    shared: int


class PromptBases:
    """The last ``per_trajectory`` completions' ids of each trajectory, ``max_tokens`` in all (the
    least recently used trajectory forgotten first), and the last ``roots`` completions stored whole
    (of any trajectory, ``max_tokens`` in all besides); thread-safe. A base is used only where it gives
    at least ``min_shared`` ids (below that the row stays self-contained), a root of another trajectory
    where it gives ``min_shared_root`` and half the prompt."""

    def __init__(self, max_tokens: int = 2_000_000, per_trajectory: int = 4, min_shared: int = 32,
                 roots: int = 16, min_shared_root: int = 256) -> None:
        self.max_tokens = max_tokens
        self.per_trajectory = per_trajectory
        self.min_shared = min_shared
        self.roots = roots
        self.min_shared_root = min_shared_root
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, list[tuple[int, list[int]]]] = OrderedDict()
        self._tokens = 0
        self._roots: OrderedDict[tuple[str, int], list[int]] = OrderedDict()
        self._root_tokens = 0

    @property
    def tokens(self) -> int:
        """How many ids are held now for the trajectories' last completions (the roots: at most as many
        again; a list held by both is one list)."""
        return self._tokens

    def find(self, trajectory_id: str, ids: list[int], n_prompt: int | None = None) -> Base | None:
        """The earlier completion of ``trajectory_id`` whose ids begin the prompt longest — or, where the
        trajectory has none here, the root that does — or None: the prompt is ``ids[:n_prompt]`` (all of
        ``ids`` by default; the rest may be the call's output)."""
        n = len(ids) if n_prompt is None else n_prompt
        with self._lock:
            entries = self._entries.get(trajectory_id)
            if entries:
                self._entries.move_to_end(trajectory_id)
                entries = list(entries)
            roots = None if entries else list(self._roots.items())
        # the trajectory's own calls, the latest first (as a rule the one the prompt extends); where it has
        # none here (its first call, or all it had was forgotten), the roots — another's only for enough ids
        if entries:
            candidates = [(seq, full, None, self.min_shared) for seq, full in reversed(entries)]
        else:
            root_min = max(self.min_shared_root, (n + 1) // 2)
            candidates = [(seq, full, None, self.min_shared) if tid == trajectory_id else (seq, full, tid, root_min)
                          for (tid, seq), full in reversed(roots or ())]
        best: Base | None = None
        for seq, full, tid, enough in candidates:
            if best is not None and len(full) <= best.shared:
                continue  # it cannot give more
            shared = min(common_prefix(full, ids), n)
            if shared >= enough and (best is None or shared > best.shared):
                best = Base(seq, shared, tid)
                if shared == n:
                    break
        return best

    def add(self, trajectory_id: str, seq: int, full: list[int], whole: bool = False) -> None:
        """Completion ``seq`` of ``trajectory_id`` is durable; ``full`` is its prompt then its output
        (kept as given: the caller must not change it); ``whole``: its prompt is stored whole, so it
        may be a root of other trajectories' prompts."""
        if len(full) > self.max_tokens:
            return
        with self._lock:
            if whole and len(full) >= self.min_shared_root and self.roots:
                self._roots[trajectory_id, seq] = full
                self._root_tokens += len(full)
                while len(self._roots) > self.roots or self._root_tokens > self.max_tokens:
                    self._root_tokens -= len(self._roots.popitem(last=False)[1])
            entries = self._entries.setdefault(trajectory_id, [])
            self._entries.move_to_end(trajectory_id)
            entries.append((seq, full))
            self._tokens += len(full)
            while len(entries) > self.per_trajectory:
                self._tokens -= len(entries.pop(0)[1])
            while self._tokens > self.max_tokens:
                _, oldest = self._entries.popitem(last=False)
                self._tokens -= sum(len(f) for _, f in oldest)

    def forget(self, trajectory_id: str) -> None:
        """The trajectory has ended: no later completion of it will need its ids (its roots stay for
        other trajectories')."""
        with self._lock:
            entries = self._entries.pop(trajectory_id, None)
            if entries:
                self._tokens -= sum(len(f) for _, f in entries)
