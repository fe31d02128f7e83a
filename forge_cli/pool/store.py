"""The data pool: a durable store of groups, trajectories, completions, events and rewards.

Two backends behind one class and one schema (:mod:`forge_cli.pool.schema`): SQLite in WAL mode
(the embedded default, safe for several processes on one machine) and PostgreSQL (many
machines). Every write is one transaction, committed (and, for SQLite, fsynced:
``synchronous=FULL``) before the call returns. Every bad input raises :class:`ForgeError`
before anything is written, so the pool is left unchanged.

Writers that change the queue (submitting groups, taking batches) serialise on one lock —
SQLite's ``BEGIN IMMEDIATE``, a ``FOR UPDATE`` on a meta row in PostgreSQL — so queue indices
are dense and in submission order, and a take sees a consistent queue.

Each running trajectory records the process that started it (:mod:`.owners`), so that a gateway
starting on a run can fail those a dead process left running (:meth:`DataPool.fail_interrupted`).
The reads (records, statistics, export) are in :mod:`.reads`.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from forge_cli.errors import ForgeError, one_line
from forge_cli.pool import owners
from forge_cli.pool.checks import check_rewards as _check_rewards
from forge_cli.pool.checks import CompletionRow, completion_reward_rows, completion_row, sent_ids
from forge_cli.pool.group_commit import GroupCommit
from forge_cli.pool.prompt_bases import Base, InBatch, PromptBases
from forge_cli.pool import scheduler as sched
from forge_cli.pool.reads import PoolReads
from forge_cli.pool.schema import (
    COMPLETION_COLS,
    COMPLETION_PROMPT_COLS,
    GROUP_COLS,
    POSTGRES,
    SCHEMA_VERSION,
    SQLITE,
    Cursor,
    Dialect,
    unpack_floats,
)
from forge_cli.pool.types import (
    INFRA_CAUSES,
    Batch,
    Completion,
    CompletionReward,
    Event,
    Group,
    GroupStatus,
    NewCompletion,
    Trajectory,
    TrajectoryStatus,
)
from forge_cli.token_ids import common_prefix

TERMINAL = tuple(s.value for s in TrajectoryStatus if s.terminal)


class DataPool(PoolReads):
    """A pool in one SQLite file or one PostgreSQL schema. Open with :meth:`sqlite`,
    :meth:`postgres` or :func:`open_pool`. Thread-safe; one connection per instance (open one
    instance per process)."""

    def __init__(self, conn: Any, dialect: Dialect, location: str, clock: Callable[[], float] = time.time) -> None:
        self._conn = conn
        self.dialect = dialect
        self.location = location
        self.clock = clock
        self._lock = threading.RLock()
        self._closed = False
        self._group = GroupCommit(self._tx)
        self._bases = PromptBases()
        self._init_schema()

    # ---- opening and closing -------------------------------------------------------------------

    @classmethod
    def sqlite(cls, path: str | Path, clock: Callable[[], float] = time.time, *, create: bool = True) -> "DataPool":
        path = Path(path)
        if not create and not path.is_file():
            raise NoPool(f"no pool at {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=60000")
        except sqlite3.Error as exc:
            raise ForgeError(f"cannot open the SQLite pool at {path}: {exc}") from None
        return cls(conn, SQLITE, str(path), clock)

    @classmethod
    def postgres(
        cls, url: str, schema: str = "forge", clock: Callable[[], float] = time.time, *, create: bool = True
    ) -> "DataPool":
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", schema):
            raise ForgeError(f"PostgreSQL schema name {schema!r} must be lowercase letters, digits and '_'")
        try:
            import psycopg
        except ImportError:
            raise ForgeError("pool.url names PostgreSQL but psycopg is not installed (pip install 'psycopg[binary]')") from None
        try:
            conn = psycopg.connect(url, autocommit=False, connect_timeout=10)
        except psycopg.Error as exc:
            raise ForgeError(f"cannot connect to the PostgreSQL pool at {redact_url(url)}: {one_line(str(exc))}") from None
        with conn.cursor() as cur:
            # several processes may create the schema at once: serialise on an advisory lock
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"forge-schema-{schema}",))
            if not create:
                cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,))
                if cur.fetchone() is None:
                    conn.close()
                    raise NoPool(f"no pool in schema {schema!r} at {redact_url(url)}")
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            cur.execute(f'SET search_path TO "{schema}"')
        conn.commit()
        return cls(conn, POSTGRES, f"{redact_url(url)} schema {schema}", clock)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> "DataPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transactions ----------------------------------------------------------------------

    @contextmanager
    def _tx(self, queue_lock: bool = False) -> Iterator[Any]:
        """One write transaction; ``queue_lock`` serialises with every other queue writer."""
        with self._lock:
            if self._closed:
                raise ForgeError(f"the pool at {self.location} is closed")
            cur = self._conn.cursor()
            try:
                if self.dialect is SQLITE:
                    cur.execute("BEGIN IMMEDIATE")
                elif queue_lock:
                    cur.execute("SELECT value FROM meta WHERE key = 'next_queue_index' FOR UPDATE")
                yield Cursor(cur, self.dialect)
                if self.dialect is SQLITE:
                    cur.execute("COMMIT")
                else:
                    self._conn.commit()
            except BaseException:
                if self.dialect is SQLITE:
                    if self._conn.in_transaction:
                        cur.execute("ROLLBACK")
                else:
                    self._conn.rollback()
                raise
            finally:
                cur.close()

    @contextmanager
    def _read(self) -> Iterator[Any]:
        """A consistent read (one snapshot)."""
        with self._lock:
            if self._closed:
                raise ForgeError(f"the pool at {self.location} is closed")
            cur = self._conn.cursor()
            try:
                if self.dialect is SQLITE:
                    cur.execute("BEGIN")
                yield Cursor(cur, self.dialect)
            finally:
                if self.dialect is SQLITE:
                    cur.execute("COMMIT")
                else:
                    self._conn.commit()
                cur.close()

    def _init_schema(self) -> None:
        with self._tx() as cur:
            if self.dialect is POSTGRES:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext('forge-tables'))")
            for statement in self.dialect.ddl():
                cur.execute(statement)
            for key, value in (("schema_version", str(SCHEMA_VERSION)), ("next_queue_index", "0"), ("trainer_version", "0")):
                cur.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (key, value))
            version = int(cur.one("SELECT value FROM meta WHERE key = 'schema_version'")[0])
            if version > SCHEMA_VERSION:
                raise ForgeError(f"the pool at {self.location} has schema version {version}; this Forge reads {SCHEMA_VERSION}")
            for old in range(version, SCHEMA_VERSION):  # an older pool: brought up to date, in this transaction
                for statement in self.dialect.migration(old):
                    cur.execute(statement)
            if version < SCHEMA_VERSION:
                cur.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    # ---- writes ----------------------------------------------------------------------------------

    def submit_group(
        self,
        task_id: str,
        n: int,
        scaffold: str,
        *,
        max_active: int | None = None,
        timeout_s: float | None = None,
        group_id: str | None = None,
        rewards_pending: bool = False,
        evaluation: bool = False,
        version: int | None = None,
    ) -> Group:
        """Append a group of ``n`` queued trajectories to the generation queue.

        ``max_active`` (N) is the admission bound: with N groups in flight it raises
        :class:`PoolFull` and writes nothing. In flight means submitted and not consumed, or
        consumed by a train step whose weights are not yet published (:meth:`publish_version`):
        a slot frees only when the rollout engine has the weights trained on it, which is what
        keeps strict FIFO within S = N/P − 1 versions (DESIGN.md §4).

        ``rewards_pending``: the caller will write the group's per-completion rewards once every
        member is terminal (:meth:`set_completion_rewards`); until then the group is not complete
        for the scheduler (a head that outlives its budget still times out).

        ``evaluation``: a held-out evaluation's group. It is recorded like any other but stays out
        of the generation queue (a negative queue index from its own counter, status
        ``evaluation``): no scheduler takes it, it never blocks the head, admission ignores it.

        ``version``: the policy version the rollout engine serves as the group is submitted (its
        samples are that version's or newer); recorded as at least the last one published
        (:meth:`publish_version`), which is also the default. The ``staleness_cap`` scheduler takes each
        group within its cap of it.
        """
        if not isinstance(n, int) or n < 1:
            raise ForgeError(f"a group needs n >= 1 trajectories, got {n!r}")
        if not task_id or not scaffold:
            raise ForgeError("a group needs a task_id and a scaffold")
        if timeout_s is not None and not timeout_s > 0:
            raise ForgeError(f"timeout_s must be > 0, got {timeout_s!r}")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
            raise ForgeError(f"version must be an integer >= 0, got {version!r}")
        group_id = group_id or uuid.uuid4().hex
        now = self.clock()
        with self._tx(queue_lock=True) as cur:
            if max_active is not None and not evaluation:
                active = cur.one(
                    "SELECT COUNT(*) FROM groups WHERE status = ? OR (status = ? AND consumed_step >= "
                    "(SELECT CAST(value AS BIGINT) FROM meta WHERE key = 'trainer_version'))",
                    (GroupStatus.ACTIVE.value, GroupStatus.CONSUMED.value),
                )[0]
                if active >= max_active:
                    raise PoolFull(f"{active} groups are active, the admission bound is {max_active}")
            if evaluation:  # below every queue index, counting down
                index = min(int(cur.one("SELECT COALESCE(MIN(queue_index), 0) FROM groups")[0]), 0) - 1
            else:
                index = int(cur.one("SELECT value FROM meta WHERE key = 'next_queue_index'")[0])
                cur.execute("UPDATE meta SET value = ? WHERE key = 'next_queue_index'", (str(index + 1),))
            status = GroupStatus.EVALUATION if evaluation else GroupStatus.ACTIVE
            # never below the published version: a caller that read the engine's version just before a publish
            # would otherwise record the group as older than admission (which stopped counting that step) thinks
            published = int(cur.one("SELECT value FROM meta WHERE key = 'trainer_version'")[0])
            version = published if version is None else max(version, published)
            cur.execute(
                f"INSERT INTO groups ({GROUP_COLS}, submitted_version) VALUES (?, ?, ?, ?, ?, ?, ?, 0, NULL, NULL, ?, ?)",
                (group_id, index, task_id, n, status.value, now, timeout_s, int(bool(rewards_pending)), version),
            )
            trajectories = []
            for member in range(n):
                tid = uuid.uuid4().hex
                cur.execute(
                    "INSERT INTO trajectories (id, group_id, member, task_id, scaffold, queue_index, status) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (tid, group_id, member, task_id, scaffold, index, TrajectoryStatus.QUEUED.value),
                )
                trajectories.append(Trajectory(tid, group_id, task_id, scaffold, index, TrajectoryStatus.QUEUED))
        return Group(group_id, index, task_id, n, status, now, timeout_s, trajectories=trajectories,
                     rewards_pending=bool(rewards_pending))

    def start_trajectory(self, trajectory_id: str, *, owner: str | None = None) -> None:
        """queued → running, owned by the calling process (or by ``owner``, a
        :func:`forge_cli.pool.owners.this_process` string of the process that runs it): see
        :meth:`fail_interrupted`."""
        self._transition(trajectory_id, (TrajectoryStatus.QUEUED,), TrajectoryStatus.RUNNING,
                         started=owner or owners.this_process())

    def finish_trajectory(self, trajectory_id: str, *, rewards: dict[str, float] | None = None) -> None:
        """running → completed, with its reward components in the same transaction.

        Setting the rewards here (rather than after) matters: the moment the last trajectory of a
        group is terminal, the scheduler may hand the group to the trainer.
        """
        self._transition(trajectory_id, (TrajectoryStatus.RUNNING,), TrajectoryStatus.COMPLETED, rewards=rewards)

    def fail_trajectory(
        self, trajectory_id: str, error: str, *, timed_out: bool = False, rewards: dict[str, float] | None = None,
        infra: str | None = None,
    ) -> None:
        """queued/running → failed (or timed_out): a crashing agent is a failed trajectory.

        ``rewards`` are its failure reward components, set in the same transaction. ``infra``: the
        cause (:data:`~forge_cli.pool.types.INFRA_CAUSES`) when it failed for a reason its policy
        could not cause.
        """
        if infra is not None and infra not in INFRA_CAUSES:
            raise ForgeError(f"infra: {infra!r} is not one of {', '.join(INFRA_CAUSES)}")
        status = TrajectoryStatus.TIMED_OUT if timed_out else TrajectoryStatus.FAILED
        self._transition(
            trajectory_id, (TrajectoryStatus.QUEUED, TrajectoryStatus.RUNNING), status, error=str(error)[:4000], rewards=rewards,
            infra=infra,
        )

    def _transition(
        self,
        trajectory_id: str,
        allowed: tuple[TrajectoryStatus, ...],
        to: TrajectoryStatus,
        *,
        started: str | None = None,
        error: str | None = None,
        rewards: dict[str, float] | None = None,
        infra: str | None = None,
    ) -> None:
        if rewards is not None:
            _check_rewards(rewards)
        now = self.clock()
        allowed_values = tuple(s.value for s in allowed)
        marks = ", ".join("?" * len(allowed_values))
        # one conditional UPDATE: a concurrent timeout (take_batch) and this call cannot both win
        if started:  # the owner
            sql, args = "UPDATE trajectories SET status = ?, started_at = ?, owner = ?", (to.value, now, started)
        else:
            sql, args = "UPDATE trajectories SET status = ?, finished_at = ?, error = ?, infra = ?", (to.value, now, error, infra)
        if to.terminal:
            self._bases.forget(trajectory_id)

        def work(cur: Cursor) -> None:
            row = cur.one(f"{sql} WHERE id = ? AND status IN ({marks}) RETURNING id", (*args, trajectory_id, *allowed_values))
            if row is None:
                current = cur.one("SELECT status FROM trajectories WHERE id = ?", (trajectory_id,))
                if current is None:
                    raise ForgeError(f"unknown trajectory {trajectory_id!r}")
                raise ForgeError(f"trajectory {trajectory_id} is {current[0]}; cannot become {to.value}")
            if rewards:
                self._write_rewards(cur, trajectory_id, rewards)

        self._group.run(work)  # a commit shared with other threads' writes, as completions are

    def fail_interrupted(self) -> int:
        """Fail, with the error "interrupted", every running trajectory whose owner process on this
        host is gone (killed, crashed: it can never finish them); returns how many.

        A gateway serving a run calls it once at start. A live owner's trajectories are left
        alone, and so are those owned by another host (their process cannot be checked from here;
        a gateway on that host fails them when it starts) and those with no recorded owner
        (started before the pool recorded owners).
        """
        now = self.clock()
        running = TrajectoryStatus.RUNNING.value
        with self._tx() as cur:
            rows = cur.all("SELECT id, owner FROM trajectories WHERE status = ? AND owner IS NOT NULL", (running,))
            dead = {owner for _, owner in rows if owners.is_local(owner) and owners.is_dead(owner)}
            failed = 0
            for tid, owner in rows:
                if owner in dead and cur.one(  # still running: PostgreSQL writers do not wait on this read
                    "UPDATE trajectories SET status = ?, finished_at = ?, error = ? WHERE id = ? AND status = ? RETURNING id",
                    (TrajectoryStatus.FAILED.value, now, "interrupted", tid, running),
                ):
                    failed += 1
        return failed

    def append_completion(self, completion: NewCompletion) -> Completion:
        """Record one LLM call of a running trajectory; its ``seq`` is the next in the trajectory.
        Durable when it returns; calls from several threads share commits (:mod:`.group_commit`)."""
        return self.append_completions([completion])[0]

    def append_completions(self, completions: list[NewCompletion]) -> list[Completion]:
        """Record several LLM calls at once (e.g. the ``n`` answers of one request), in order, all or
        none: each gets the next ``seq`` of its trajectory."""
        now = self.clock()
        # each call's prompt then output ids, copied once: what is compared, checked, stored and remembered
        sent = [sent_ids(c) for c in completions]
        bases = [self._base_of(c, sent[i], completions[:i], sent[:i]) for i, c in enumerate(completions)]
        # every check before anything is written
        rows = [completion_row(c, now, s, base.shared if base else 0) for c, base, s in zip(completions, bases, sent)]

        def work(cur: Cursor) -> list[int]:  # the least under the pool's lock: the rows, not the records
            seqs: list[int] = []
            for c, row, base in zip(completions, rows, bases):
                if isinstance(base, InBatch):
                    seqs.append(self._insert_completion(cur, c, row, seqs[base.index], None))
                elif base is not None and base.trajectory is not None:  # another trajectory's root
                    seqs.append(self._insert_completion(cur, c, row, None, (base.trajectory, base.seq)))
                else:
                    seqs.append(self._insert_completion(cur, c, row, None if base is None else base.seq, None))
            return seqs

        seqs = self._group.run(work)
        made = []
        for c, stored, seq, (ids, _), base in zip(completions, rows, seqs, sent, bases):  # durable now: later prompts may extend them
            self._bases.add(c.trajectory_id, seq, ids, whole=base is None)
            made.append(Completion(  # the caller's id lists, as they were given (the pool keeps no reference)
                stored.id, c.trajectory_id, seq, _as_list(c.prompt_ids), _as_list(c.output_ids),
                unpack_floats(stored.output_logprobs), c.policy_version, c.sampling, c.finish_reason, stored.started_at,
                stored.finished_at, c.tool_format, c.parse_errors or [], c.request, c.agent, tool_calls=c.tool_calls,
                history=c.history,
            ))
        return made

    def _base_of(self, c: NewCompletion, sent: tuple[list[int], int], before: list[Any],
                 before_sent: list[tuple[list[int], int]]) -> Base | InBatch | None:
        """The earlier completion its prompt (the first ``sent[1]`` of ``sent[0]``) extends longest: a
        durable one of ``c``'s trajectory or, for its first, another's root (:class:`PromptBases`), or
        one of ``before``, the same call's earlier completions (an :class:`InBatch`); None for a prompt
        stored whole."""
        ids, n_prompt = sent
        try:
            best: Base | InBatch | None = self._bases.find(c.trajectory_id, ids, n_prompt)
            for i, (prior, (prior_ids, _)) in enumerate(zip(before, before_sent)):
                if prior.trajectory_id == c.trajectory_id:
                    shared = min(common_prefix(prior_ids, ids), n_prompt)
                    if shared >= self._bases.min_shared and (best is None or shared > best.shared):
                        best = InBatch(i, shared)
        except Exception:  # something that is no id and cannot even be compared: stored whole, i.e. refused
            return None
        return best

    @staticmethod
    def _insert_completion(cur: Cursor, c: NewCompletion, stored: CompletionRow, base_seq: int | None,
                           root: tuple[str, int] | None) -> int:
        """Insert the row as the trajectory's next completion (its prompt's base: completion ``base_seq``
        of its trajectory, or ``root``, another trajectory's id and seq); its seq."""
        row = cur.one(
            "UPDATE trajectories SET n_completions = n_completions + 1 WHERE id = ? AND status = ? "
            "RETURNING n_completions - 1",
            (c.trajectory_id, TrajectoryStatus.RUNNING.value),
        )
        if row is None:
            status = cur.one("SELECT status FROM trajectories WHERE id = ?", (c.trajectory_id,))
            if status is None:
                raise ForgeError(f"unknown trajectory {c.trajectory_id!r}")
            raise ForgeError(f"trajectory {c.trajectory_id} is {status[0]}, not running: completion rejected")
        seq = int(row[0])
        cur.execute(
            f"INSERT INTO completions ({COMPLETION_COLS}, n_prompt, n_output, {COMPLETION_PROMPT_COLS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            stored.values(seq, base_seq, root),
        )
        return seq

    def append_events(self, trajectory_id: str, events: list[Event | dict[str, Any]]) -> None:
        """Record context-management actions, tool errors and the like, in order."""
        rows = []
        for event in events:
            if isinstance(event, dict):
                if "kind" not in event:
                    raise ForgeError("an event needs a 'kind'")
                event = Event(kind=str(event["kind"]), at=float(event.get("at", self.clock())), data=event.get("data", {}))
            try:
                rows.append((trajectory_id, event.at, event.kind, json.dumps(event.data)))
            except (TypeError, ValueError) as exc:
                raise ForgeError(f"event data is not JSON-serialisable: {exc}") from None
        with self._tx() as cur:
            if cur.one("SELECT 1 FROM trajectories WHERE id = ?", (trajectory_id,)) is None:
                raise ForgeError(f"unknown trajectory {trajectory_id!r}")
            for row in rows:
                cur.execute("INSERT INTO events (trajectory_id, at, kind, data) VALUES (?, ?, ?, ?)", row)

    def set_rewards(self, trajectory_id: str, components: dict[str, float]) -> float:
        """Set named reward components (replacing same-named ones); returns the trajectory's total.

        Only while its group is active: a consumed group's rewards were already trained on.
        """
        _check_rewards(components)
        with self._tx() as cur:
            # FOR UPDATE (PostgreSQL): a concurrent take_batch either sees this reward or makes us see 'consumed'
            lock = " FOR UPDATE OF g" if self.dialect is POSTGRES else ""
            row = cur.one(
                f"SELECT g.status FROM trajectories t JOIN groups g ON g.id = t.group_id WHERE t.id = ?{lock}",
                (trajectory_id,),
            )
            if row is None:
                raise ForgeError(f"unknown trajectory {trajectory_id!r}")
            if row[0] != GroupStatus.ACTIVE.value:
                raise ForgeError(f"trajectory {trajectory_id} belongs to a {row[0]} group: its reward can no longer change")
            return self._write_rewards(cur, trajectory_id, components)

    def set_completion_rewards(
        self, group_id: str, rewards: list[CompletionReward], *, trajectory_rewards: dict[str, dict[str, float]] | None = None
    ) -> None:
        """Write the per-completion rewards of a group (one :class:`CompletionReward` per completion
        of its members, the :mod:`forge_cli.rewards` result) in one transaction, and clear the
        group's ``rewards_pending``: the scheduler may hand it out from then on.

        Only while the group is active and every member is terminal (the rewards of a group are a
        function of all its members); each completion must belong to the group, once; values must be
        finite. Completions not listed keep what they had (None for a fresh one).
        ``trajectory_rewards`` (trajectory id → named components, as :meth:`set_rewards`) are written
        in the same transaction, for trajectories of this group.
        """
        for components in (trajectory_rewards or {}).values():
            _check_rewards(components)
        rows = completion_reward_rows(rewards)
        seen = {row[-1] for row in rows}
        with self._tx() as cur:
            lock = " FOR UPDATE" if self.dialect is POSTGRES else ""  # against a concurrent take_batch
            row = cur.one(f"SELECT status FROM groups WHERE id = ?{lock}", (group_id,))
            if row is None:
                raise ForgeError(f"unknown group {group_id!r}")
            if row[0] not in (GroupStatus.ACTIVE.value, GroupStatus.EVALUATION.value):
                raise ForgeError(f"group {group_id} is {row[0]}: its rewards can no longer change")
            running = cur.one(
                f"SELECT COUNT(*) FROM trajectories WHERE group_id = ? AND status NOT IN ({', '.join('?' * len(TERMINAL))})",
                (group_id, *TERMINAL),
            )[0]
            if running:
                raise ForgeError(f"group {group_id} has {running} trajectories still queued or running")
            members = {
                r[0]
                for r in cur.all(
                    "SELECT c.id FROM completions c JOIN trajectories t ON t.id = c.trajectory_id WHERE t.group_id = ?",
                    (group_id,),
                )
            }
            stray = sorted(seen - members)
            if stray:
                raise ForgeError(f"completion {stray[0]} is not a completion of group {group_id}")
            tids = {r[0] for r in cur.all("SELECT id FROM trajectories WHERE group_id = ?", (group_id,))}
            strangers = sorted(set(trajectory_rewards or {}) - tids)
            if strangers:
                raise ForgeError(f"trajectory {strangers[0]} is not a member of group {group_id}")
            for tid, components in (trajectory_rewards or {}).items():
                self._write_rewards(cur, tid, components)
            for args in rows:
                cur.execute(
                    "UPDATE completions SET reward = ?, reward_to_go = ?, advantage = ?, reward_components = ? WHERE id = ?",
                    args,
                )
            cur.execute("UPDATE groups SET rewards_pending = 0 WHERE id = ?", (group_id,))

    @staticmethod
    def _write_rewards(cur: Cursor, trajectory_id: str, components: dict[str, float]) -> float:
        for name, value in components.items():
            cur.execute(
                "INSERT INTO rewards (trajectory_id, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (trajectory_id, name) DO UPDATE SET value = excluded.value",
                (trajectory_id, name, float(value)),
            )
        total = float(cur.one("SELECT SUM(value) FROM rewards WHERE trajectory_id = ?", (trajectory_id,))[0])
        cur.execute("UPDATE trajectories SET reward = ? WHERE id = ?", (total, trajectory_id))
        return total

    # ---- the scheduler's side ----------------------------------------------------------------------

    def take_batch(
        self,
        max_groups: int,
        trainer_version: int,
        *,
        window: int | None,
        on_timeout: sched.OnTimeout = "drop",
        min_groups: int = 1,
        cap: int | None = None,
    ) -> Batch:
        """Take up to ``max_groups`` complete groups under the window rule and mark them consumed.

        Heads past their time budget are marked timed out first (see :mod:`.scheduler`). With
        ``min_groups`` it takes all or nothing. The whole decision is one transaction, so
        concurrent takers never get the same group. ``cap``: instead of the window, greedy takes that
        train every group within ``cap`` versions of the version it was submitted at
        (:func:`~forge_cli.pool.scheduler.select_capped`: exactly ``max_groups`` or none).
        """
        if max_groups < 1:
            raise ForgeError(f"max_groups must be >= 1, got {max_groups}")
        now = self.clock()
        with self._tx(queue_lock=True) as cur:
            rows = cur.all(
                "SELECT g.id, g.queue_index, g.submitted_at, g.timeout_s, "
                "SUM(CASE WHEN t.status IN (?, ?, ?) THEN 0 ELSE 1 END), g.rewards_pending, g.submitted_version "
                "FROM groups g JOIN trajectories t ON t.group_id = g.id WHERE g.status = ? "
                "GROUP BY g.id, g.queue_index, g.submitted_at, g.timeout_s, g.rewards_pending, g.submitted_version "
                "ORDER BY g.queue_index",
                (*TERMINAL, GroupStatus.ACTIVE.value),
            )
            # complete: every member terminal and, if the driver said so, the per-completion rewards written
            active = [sched.QueueEntry(r[1], r[0], int(r[4]) == 0 and not r[5], r[2], r[3], int(r[6])) for r in rows]
            if cap is None:
                decision = sched.select(active, max_groups, window, now, on_timeout, min_groups)
            else:
                decision = sched.select_capped(active, max_groups, trainer_version, cap, now, on_timeout)
            for gid in decision.timed_out:
                cur.execute(
                    "UPDATE trajectories SET status = ?, finished_at = ?, error = ? WHERE group_id = ? AND status IN (?, ?)",
                    (TrajectoryStatus.TIMED_OUT.value, now, "group timed out", gid,
                     TrajectoryStatus.QUEUED.value, TrajectoryStatus.RUNNING.value),
                )
                dropped = on_timeout == "drop"
                cur.execute(
                    "UPDATE groups SET timed_out = 1, status = ?, consumed_at = ? WHERE id = ?",
                    (GroupStatus.DROPPED.value if dropped else GroupStatus.ACTIVE.value, now if dropped else None, gid),
                )
            for gid in decision.take:
                cur.execute(
                    "UPDATE groups SET status = ?, consumed_at = ?, consumed_step = ? WHERE id = ?",
                    (GroupStatus.CONSUMED.value, now, trainer_version, gid),
                )
            roots: dict = {}
            groups = [self._load_group(cur, gid, roots) for gid in decision.take]
        ages = [trainer_version - c.policy_version for g in groups for t in g.trajectories for c in t.completions]
        return Batch(groups, trainer_version, ages, decision.head_before if decision.head_before is not None else -1, window, decision.timed_out)

    def publish_version(self, version: int) -> None:
        """Record that the rollout engine now serves weights ``version`` (the trainer calls this
        after each weight push); groups consumed at earlier steps stop counting as in flight."""
        if not isinstance(version, int) or version < 0:
            raise ForgeError(f"version must be an integer >= 0, got {version!r}")
        with self._tx(queue_lock=True) as cur:
            cur.execute("UPDATE meta SET value = ? WHERE key = 'trainer_version'", (str(version),))

    def unconsume_after(self, step: int) -> int:
        """Give back every group consumed at ``trainer_version >= step`` (resuming a checkpoint).

        Returns how many groups went back to the queue.
        """
        with self._tx(queue_lock=True) as cur:
            count = cur.one("SELECT COUNT(*) FROM groups WHERE status = ? AND consumed_step >= ?", (GroupStatus.CONSUMED.value, step))[0]
            cur.execute(
                "UPDATE groups SET status = ?, consumed_at = NULL, consumed_step = NULL WHERE status = ? AND consumed_step >= ?",
                (GroupStatus.ACTIVE.value, GroupStatus.CONSUMED.value, step),
            )
        return int(count)

    def drop_group(self, group_id: str, reason: str) -> None:
        """Drop an unconsumed group (its unfinished trajectories failed with ``reason``): no
        scheduler takes it. A ForgeError if it is consumed or dropped already."""
        now = self.clock()
        with self._tx(queue_lock=True) as cur:
            row = cur.one("SELECT status FROM groups WHERE id = ?", (group_id,))
            if row is None or row[0] not in (GroupStatus.ACTIVE.value, GroupStatus.EVALUATION.value):
                raise ForgeError(f"group {group_id} is {row[0] if row else 'unknown'}: it cannot be dropped")
            cur.execute("UPDATE trajectories SET status = ?, finished_at = ?, error = ? WHERE group_id = ? AND status IN (?, ?)",
                        (TrajectoryStatus.FAILED.value, now, reason, group_id,
                         TrajectoryStatus.QUEUED.value, TrajectoryStatus.RUNNING.value))
            cur.execute("UPDATE groups SET status = ?, consumed_at = ?, rewards_pending = 0 WHERE id = ?",
                        (GroupStatus.DROPPED.value, now, group_id))

    def max_policy_version(self) -> int | None:
        """The newest policy version any recorded completion was sampled by (None: no completion)."""
        with self._tx() as cur:
            value = cur.one("SELECT MAX(policy_version) FROM completions")[0]
        return None if value is None else int(value)

    def drop_unrewarded(self) -> int:
        """Drop every queued group whose rewards were never written (``rewards_pending``) or that has
        an interrupted trajectory — what a driver that died or was stopped mid-group leaves; call it after :meth:`fail_interrupted`, before a new
        driver starts. Their trajectories were cut off, not failed by the agent: training on them
        would teach a failure that never happened. Returns how many groups were dropped."""
        now = self.clock()
        with self._tx(queue_lock=True) as cur:
            ids = [r[0] for r in cur.all(
                "SELECT id FROM groups g WHERE status IN (?, ?) AND (rewards_pending = 1 OR EXISTS "
                "(SELECT 1 FROM trajectories t WHERE t.group_id = g.id AND t.error = 'interrupted'))",
                (GroupStatus.ACTIVE.value, GroupStatus.EVALUATION.value))]
            for gid in ids:
                cur.execute("UPDATE trajectories SET status = ?, finished_at = ?, error = ? WHERE group_id = ? AND status IN (?, ?)",
                            (TrajectoryStatus.FAILED.value, now, "interrupted", gid,
                             TrajectoryStatus.QUEUED.value, TrajectoryStatus.RUNNING.value))
                cur.execute("UPDATE groups SET status = ?, consumed_at = ? WHERE id = ?", (GroupStatus.DROPPED.value, now, gid))
        return len(ids)


def _as_list(ids: list[int] | tuple[int, ...]) -> list[int]:
    return ids if type(ids) is list else list(ids)


class PoolFull(ForgeError):
    """Raised by :meth:`DataPool.submit_group` when the admission bound is reached."""


class NoPool(ForgeError):
    """Raised when a pool opened with ``create=False`` is not there (a run that recorded nothing)."""


def redact_url(url: str) -> str:
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def open_pool(url: str, run_dir: Path, run_name: str | None = None, *, create: bool = True) -> DataPool:
    """The pool of a run: ``RUN_DIR/pool.sqlite``, or a PostgreSQL schema named after the run.

    ``create=False`` (inspection commands) refuses to create a pool that is not there.
    """
    if url == "sqlite":
        return DataPool.sqlite(Path(run_dir) / "pool.sqlite", create=create)
    if url.startswith(("postgresql://", "postgres://")):
        name = run_name or Path(run_dir).name
        schema = "run_" + re.sub(r"[^a-z0-9_]", "_", name.lower())
        return DataPool.postgres(url, schema, create=create)
    raise ForgeError(f'pool.url must be "sqlite" or a postgresql:// URL, got {url!r}')
