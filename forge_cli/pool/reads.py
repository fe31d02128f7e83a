"""The data pool's reads: records by id, every group in queue order, statistics, the JSONL export.

:class:`PoolReads` is the half of :class:`forge_cli.pool.store.DataPool` that writes nothing;
every read runs in one snapshot (``DataPool._read``).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.pool.schema import (
    COMPLETION_COLS,
    COMPLETION_PROMPT_COLS,
    COMPLETION_REWARD_COLS,
    GROUP_COLS,
    SQLITE,
    TRAJ_COLS,
    Cursor,
    Dialect,
    unpack_floats,
    unpack_ints,
)
from forge_cli.pool.types import (HISTORY_KINDS, Completion, Event, Group, GroupStatus, PromptHistory, Sampling, Trajectory,
                                  TrajectoryStatus)


class PoolReads:
    """Reads of a pool; the pool class provides the snapshot, ``dialect`` and ``location``."""

    dialect: Dialect
    location: str

    def _read(self) -> AbstractContextManager[Cursor]:
        raise NotImplementedError

    def _load_group(self, cur: Cursor, group_id: str, roots: dict | None = None) -> Group:
        row = cur.one(f"SELECT {GROUP_COLS} FROM groups WHERE id = ?", (group_id,))
        if row is None:
            raise ForgeError(f"unknown group {group_id!r}")
        tids = [r[0] for r in cur.all("SELECT id FROM trajectories WHERE group_id = ? ORDER BY member", (group_id,))]
        roots = {} if roots is None else roots
        return Group(
            row[0], row[1], row[2], row[3], GroupStatus(row[4]), row[5], row[6], bool(row[7]), row[8], row[9],
            trajectories=[self._load_trajectory(cur, tid, roots) for tid in tids], rewards_pending=bool(row[10]),
        )

    def _load_trajectory(self, cur: Cursor, trajectory_id: str, roots: dict | None = None) -> Trajectory:
        """A trajectory, its completions' prompts rebuilt; ``roots``: the other trajectories' whole-stored
        completions read so far in this snapshot (shared by the reads of a group, filled as needed)."""
        roots = {} if roots is None else roots
        row = cur.one(f"SELECT {TRAJ_COLS} FROM trajectories WHERE id = ?", (trajectory_id,))
        if row is None:
            raise ForgeError(f"unknown trajectory {trajectory_id!r}")
        completions: list[Completion] = []
        by_seq: dict[int, Completion] = {}
        for r in cur.all(
            f"SELECT {COMPLETION_COLS}, {COMPLETION_REWARD_COLS}, {COMPLETION_PROMPT_COLS}, n_prompt FROM completions "
            "WHERE trajectory_id = ? ORDER BY seq",
            (trajectory_id,),
        ):
            c = Completion(
                r[0], r[1], r[2], _prompt(cur, by_seq, roots, r), unpack_ints(r[4]), unpack_floats(r[5]), r[6],
                Sampling.from_dict(json.loads(r[7])),
                r[8], r[9], r[10], r[11], json.loads(r[12]), json.loads(r[13]) if r[13] is not None else None, r[14],
                r[17], r[18], r[19], json.loads(r[20]) if r[20] is not None else {},
                tool_calls=json.loads(r[15]) if r[15] is not None else None,
                history=PromptHistory.from_dict(json.loads(r[16])) if r[16] is not None else None,
            )
            completions.append(c)
            by_seq[c.seq] = c
            if r[22] is None and r[23] is None:  # stored whole: a root other trajectories' prompts may name
                roots[trajectory_id, c.seq] = (c.prompt_ids, c.output_ids)
        events = [
            Event(kind=r[1], at=r[0], data=json.loads(r[2]))
            for r in cur.all("SELECT at, kind, data FROM events WHERE trajectory_id = ? ORDER BY id", (trajectory_id,))
        ]
        rewards = {r[0]: r[1] for r in cur.all("SELECT name, value FROM rewards WHERE trajectory_id = ? ORDER BY name", (trajectory_id,))}
        return Trajectory(
            row[0], row[1], row[2], row[3], row[4], TrajectoryStatus(row[5]), row[6], rewards, row[7], row[8], row[9],
            events=events, completions=completions, owner=row[10], infra=row[11],
        )

    def trajectory(self, trajectory_id: str) -> Trajectory:
        with self._read() as cur:
            return self._load_trajectory(cur, trajectory_id)

    def group(self, group_id: str) -> Group:
        with self._read() as cur:
            return self._load_group(cur, group_id)

    def groups(self, status: GroupStatus | None = None, *, after_index: int | None = None) -> list[Group]:
        """Every group (with trajectories and completions), in queue order; ``after_index``: only
        those queued after the group with that ``queue_index``."""
        with self._read() as cur:
            conditions = [("status = ?", status.value)] if status else []
            conditions += [("queue_index > ?", after_index)] if after_index is not None else []
            where = "WHERE " + " AND ".join(c for c, _ in conditions) if conditions else ""
            args = tuple(a for _, a in conditions)
            ids = [r[0] for r in cur.all(f"SELECT id FROM groups {where} ORDER BY queue_index", args)]
            roots: dict = {}
            return [self._load_group(cur, gid, roots) for gid in ids]

    def trajectory_status(self, trajectory_id: str) -> str | None:
        """A trajectory's status, or None if there is no such trajectory."""
        with self._read() as cur:
            row = cur.one("SELECT status FROM trajectories WHERE id = ?", (trajectory_id,))
            return row[0] if row else None

    def completion_count(self, trajectory_id: str) -> int:
        """How many completions a trajectory has recorded (0 for an unknown one)."""
        with self._read() as cur:
            row = cur.one("SELECT n_completions FROM trajectories WHERE id = ?", (trajectory_id,))
            return int(row[0]) if row else 0

    def has_trajectory(self, trajectory_id: str) -> bool:
        with self._read() as cur:
            return cur.one("SELECT 1 FROM trajectories WHERE id = ?", (trajectory_id,)) is not None

    def published_version(self) -> int:
        """The policy version last published (:meth:`~forge_cli.pool.store.DataPool.publish_version`): the one
        the rollout engine serves, 0 before any."""
        with self._read() as cur:
            return int(cur.one("SELECT value FROM meta WHERE key = 'trainer_version'")[0])

    def stats(self, window: int | None = None) -> dict[str, Any]:
        """Counts by status, the queue head and window, off-policy ages, storage per token."""
        with self._read() as cur:
            traj = dict(cur.all("SELECT status, COUNT(*) FROM trajectories GROUP BY status"))
            infra = dict(cur.all("SELECT infra, COUNT(*) FROM trajectories WHERE infra IS NOT NULL GROUP BY infra"))
            groups = dict(cur.all("SELECT status, COUNT(*) FROM groups GROUP BY status"))
            head = cur.one("SELECT MIN(queue_index) FROM groups WHERE status = ?", (GroupStatus.ACTIVE.value,))[0]
            next_index = int(cur.one("SELECT value FROM meta WHERE key = 'next_queue_index'")[0])
            n_comp, n_prompt, n_output, token_bytes = cur.one(
                "SELECT COUNT(*), COALESCE(SUM(n_prompt), 0), COALESCE(SUM(n_output), 0), "
                "COALESCE(SUM(LENGTH(prompt_ids) + LENGTH(output_ids) + LENGTH(output_logprobs)), 0) FROM completions"
            )
            ages = [
                r[0]
                for r in cur.all(
                    "SELECT g.consumed_step - c.policy_version FROM completions c "
                    "JOIN trajectories t ON t.id = c.trajectory_id JOIN groups g ON g.id = t.group_id "
                    "WHERE g.status = ?",
                    (GroupStatus.CONSUMED.value,),
                )
            ]
            timed_out_groups = cur.one("SELECT COUNT(*) FROM groups WHERE timed_out = 1")[0]
            histories = cur.all("SELECT t.scaffold, c.tool_format, c.history FROM completions c "
                                "JOIN trajectories t ON t.id = c.trajectory_id WHERE c.history IS NOT NULL")
        tokens = int(n_prompt) + int(n_output)
        return {
            "location": self.location,
            "backend": self.dialect.name,
            "trajectories": {s.value: int(traj.get(s.value, 0)) for s in TrajectoryStatus},
            # of the failed and timed out, those that failed for a reason the policy could not cause, by cause
            "infra_failures": {str(cause): int(n) for cause, n in sorted(infra.items())},
            "groups": {s.value: int(groups.get(s.value, 0)) for s in GroupStatus} | {"timed_out": int(timed_out_groups)},
            "queue": {"head": head, "next_index": next_index, "window": window},
            "completions": int(n_comp),
            "tokens": {"prompt": int(n_prompt), "output": int(n_output)},
            "bytes_per_token": round(int(token_bytes) / tokens, 3) if tokens else None,
            "file_bytes_per_token": round(Path(self.location).stat().st_size / tokens, 3)
            if tokens and self.dialect is SQLITE
            else None,
            "offpolicy_age": {
                "n": len(ages),
                "mean": round(sum(ages) / len(ages), 3) if ages else None,
                "max": max(ages) if ages else None,
            },
            "prompt_history": prompt_history_rows(histories),
        }

    def export_jsonl(self, out: Any) -> int:
        """Write one JSON object per trajectory (with its group, completions, events, rewards)."""
        count = 0
        for group in self.groups():
            for t in group.trajectories:
                record = {
                    "group": {k: v for k, v in group.__dict__.items() if k != "trajectories"},
                    **{k: v for k, v in t.__dict__.items() if k not in ("completions", "events")},
                    "events": [e.__dict__ for e in t.events],
                    "completions": [{**c.__dict__, "sampling": c.sampling.as_dict(),
                                     "history": c.history.as_dict() if c.history is not None else None} for c in t.completions],
                }
                out.write(json.dumps(record, default=_json_default) + "\n")
                count += 1
        return count


def _prompt(cur: Cursor, earlier: dict[int, Completion], roots: dict[tuple[str, int], Any], row: Any) -> list[int]:
    """A completion row's prompt ids: those stored (``row[3]``), after the first ``prompt_shared``
    (``row[21]``) ids of the completion ``prompt_base`` (``row[22]``, a seq) of the same trajectory
    (already read: ``earlier``) or of the root ``prompt_root_trajectory``, ``prompt_root_seq``
    (``row[23]``, ``row[24]``: another trajectory's completion stored whole, read once a snapshot:
    ``roots``)."""
    ids = unpack_ints(row[3])
    shared, base_seq, root_trajectory, root_seq, n_prompt = row[21], row[22], row[23], row[24], row[25]
    if base_seq is not None or root_trajectory is not None:
        if root_trajectory is None:
            base = earlier.get(base_seq)
            full = None if base is None else (base.prompt_ids, base.output_ids)
        else:
            full = _root(cur, roots, root_trajectory, root_seq)
        if full is None or shared > len(full[0]) + len(full[1]):
            where = f"completion {base_seq} of trajectory {row[1]}" if root_trajectory is None else \
                f"completion {root_seq} of trajectory {root_trajectory}"
            raise ForgeError(f"completion {row[0]}'s prompt extends {where}, which is not there (or too short, "
                             "or not stored whole): the pool is damaged")
        head = full[0][:shared]
        if shared > len(head):
            head += full[1][: shared - len(head)]
        ids = head + ids
    if len(ids) != n_prompt:
        raise ForgeError(f"completion {row[0]}'s prompt has {len(ids)} ids, not the {n_prompt} recorded: the pool is damaged")
    return ids


def _root(cur: Cursor, roots: dict, trajectory_id: str, seq: Any) -> tuple[list[int], list[int]] | None:
    """The prompt and output ids of completion ``seq`` of ``trajectory_id``, a root (stored whole:
    anything else is None, a damaged pool), read once per snapshot."""
    key = (trajectory_id, seq)
    if key not in roots:
        row = cur.one("SELECT prompt_ids, output_ids, n_prompt, prompt_base, prompt_root_trajectory FROM completions "
                      "WHERE trajectory_id = ? AND seq = ?", key)
        whole = row is not None and row[3] is None and row[4] is None
        prompt = unpack_ints(row[0]) if whole else []
        roots[key] = (prompt, unpack_ints(row[1])) if whole and len(prompt) == row[2] else None
    return roots[key]


def _json_default(value: Any) -> Any:
    if hasattr(value, "value"):
        return value.value
    return str(value)


def prompt_history_rows(rows: list[Any]) -> list[dict[str, Any]]:
    """Token drift per (scaffold, tool format, model family): how many recorded prompts matched what
    was sampled before (``exact``, ``reused``), ``drifted``, or had no history (``first``), and the
    drift rate over those with a history."""
    counts: dict[tuple[str, str, str], dict[str, int]] = {}
    for scaffold, tool_format, history in rows:
        record = PromptHistory.from_dict(json.loads(history))
        key = (scaffold, tool_format or "", record.family or "unknown")
        bucket = counts.setdefault(key, {kind: 0 for kind in HISTORY_KINDS})
        bucket[record.kind] = bucket.get(record.kind, 0) + 1
    out = []
    for (scaffold, tool_format, family), bucket in sorted(counts.items()):
        matched = bucket["exact"] + bucket["reused"] + bucket["drifted"]
        out.append({"scaffold": scaffold, "tool_format": tool_format, "family": family, **bucket,
                    "drift_rate": round(bucket["drifted"] / matched, 4) if matched else None})
    return out
