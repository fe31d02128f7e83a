"""One schema, two SQL dialects (SQLite, PostgreSQL).

The statements are written once, with ``?`` placeholders and ``{blob}``/``{real}``/``{serial}``
type names that each dialect fills in. Token ids and logprobs are stored as packed
little-endian int32 / float32 bytes, never as JSON text; a prompt that extends an earlier completion
of its trajectory as that completion's ``seq`` and the ids after it, and one that begins as another
trajectory's whole-stored completion (a root) as that trajectory and seq and the ids after it
(:mod:`forge_cli.pool.prompt_bases`).

A pool written by an older schema is brought up to date when it is opened: ``MIGRATIONS[v]``
are the statements that turn version ``v`` into ``v + 1``.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 8

TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS groups (
    id TEXT PRIMARY KEY,
    queue_index BIGINT NOT NULL UNIQUE,
    task_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    status TEXT NOT NULL,
    submitted_at {real} NOT NULL,
    timeout_s {real},
    timed_out INTEGER NOT NULL DEFAULT 0,
    consumed_at {real},
    consumed_step BIGINT,
    rewards_pending INTEGER NOT NULL DEFAULT 0,
    submitted_version BIGINT
);
CREATE INDEX IF NOT EXISTS groups_status ON groups (status, queue_index);
CREATE TABLE IF NOT EXISTS trajectories (
    id TEXT PRIMARY KEY,
    group_id TEXT NOT NULL REFERENCES groups (id),
    member INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    scaffold TEXT NOT NULL,
    queue_index BIGINT NOT NULL,
    status TEXT NOT NULL,
    n_completions INTEGER NOT NULL DEFAULT 0,
    reward {real},
    started_at {real},
    finished_at {real},
    error TEXT,
    owner TEXT,
    infra TEXT
);
CREATE INDEX IF NOT EXISTS trajectories_group ON trajectories (group_id);
CREATE TABLE IF NOT EXISTS completions (
    id TEXT PRIMARY KEY,
    trajectory_id TEXT NOT NULL REFERENCES trajectories (id),
    seq INTEGER NOT NULL,
    prompt_ids {blob} NOT NULL,
    output_ids {blob} NOT NULL,
    output_logprobs {blob} NOT NULL,
    n_prompt INTEGER NOT NULL,
    n_output INTEGER NOT NULL,
    policy_version BIGINT NOT NULL,
    sampling TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    started_at {real} NOT NULL,
    finished_at {real} NOT NULL,
    tool_format TEXT,
    parse_errors TEXT NOT NULL,
    request TEXT,
    agent TEXT,
    tool_calls TEXT,
    history TEXT,
    reward {real},
    reward_to_go {real},
    advantage {real},
    reward_components TEXT,
    prompt_shared INTEGER NOT NULL DEFAULT 0,
    prompt_base INTEGER,
    prompt_root_trajectory TEXT,
    prompt_root_seq INTEGER,
    UNIQUE (trajectory_id, seq)
);
CREATE TABLE IF NOT EXISTS events (
    id {serial},
    trajectory_id TEXT NOT NULL REFERENCES trajectories (id),
    at {real} NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_trajectory ON events (trajectory_id, id);
CREATE TABLE IF NOT EXISTS rewards (
    trajectory_id TEXT NOT NULL REFERENCES trajectories (id),
    name TEXT NOT NULL,
    value {real} NOT NULL,
    PRIMARY KEY (trajectory_id, name)
);
"""

MIGRATIONS: dict[int, list[str]] = {
    # 1 → 2: which process started a running trajectory (forge_cli.pool.owners), so that the
    # trajectories of a process that died can be failed (DataPool.fail_interrupted)
    1: ["ALTER TABLE trajectories ADD COLUMN owner TEXT"],
    # 2 → 3: which agent of a trajectory made a completion (an orchestrator's workers, a request's
    # agent header), and the per-completion rewards: the reward credited to the completion, its
    # discounted reward-to-go, its group-normalised advantage, and the named components credited to
    # it (JSON); all NULL until :meth:`DataPool.set_completion_rewards` writes them for the group;
    # a group submitted with rewards_pending is not handed out before they are written
    2: [
        "ALTER TABLE groups ADD COLUMN rewards_pending INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE completions ADD COLUMN agent TEXT",
        "ALTER TABLE completions ADD COLUMN reward {real}",
        "ALTER TABLE completions ADD COLUMN reward_to_go {real}",
        "ALTER TABLE completions ADD COLUMN advantage {real}",
        "ALTER TABLE completions ADD COLUMN reward_components TEXT",
    ],
    # 3 → 4: the tool calls the gateway parsed from a completion (JSON; what the agent was told it
    # called, which the process reward judges), and how its prompt's history matched what was
    # sampled before (JSON PromptHistory: exact, reused or drifted, and where)
    3: [
        "ALTER TABLE completions ADD COLUMN tool_calls TEXT",
        "ALTER TABLE completions ADD COLUMN history TEXT",
    ],
    # 4 → 5: an infrastructure failure's cause (sandbox, install, launch, verifier, gateway) on a
    # trajectory that failed for a reason its policy could not cause; NULL for the policy's own ends
    4: ["ALTER TABLE trajectories ADD COLUMN infra TEXT"],
    # 5 → 6: a prompt stored as the earlier completion of its trajectory it extends (prompt_base, that
    # completion's seq) and how many leading ids come from it (prompt_shared); prompt_ids then holds
    # only the ids after those (forge_cli.pool.prompt_bases). Rows written before stay whole (NULL base).
    5: [
        "ALTER TABLE completions ADD COLUMN prompt_shared INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE completions ADD COLUMN prompt_base INTEGER",
    ],
    # 6 → 7: a prompt's first prompt_shared ids may be a root's: a completion of another trajectory stored
    # whole (prompt_root_trajectory, prompt_root_seq; prompt_base then NULL, so that a reader of schema 6
    # finds the row short and says the pool is damaged instead of rebuilding it from its own trajectory).
    # A group's task prompt, an agent's system prompt, stored once. Rows written before: NULL, NULL.
    6: [
        "ALTER TABLE completions ADD COLUMN prompt_root_trajectory TEXT",
        "ALTER TABLE completions ADD COLUMN prompt_root_seq INTEGER",
    ],
    # 7 → 8: the policy version a group was submitted at (the rollout engine's), which the staleness_cap
    # scheduler takes it by (forge_cli.pool.scheduler.select_capped). Groups written before: the version
    # published when the pool is migrated.
    7: ["ALTER TABLE groups ADD COLUMN submitted_version BIGINT",
        "UPDATE groups SET submitted_version = (SELECT CAST(value AS BIGINT) FROM meta WHERE key = 'trainer_version') "
        "WHERE submitted_version IS NULL"],
}

# the columns a record is read (and, for groups and completions, written) with
COMPLETION_COLS = (
    "id, trajectory_id, seq, prompt_ids, output_ids, output_logprobs, policy_version, sampling, "
    "finish_reason, started_at, finished_at, tool_format, parse_errors, request, agent, tool_calls, history"
)
# the per-completion reward columns, read after COMPLETION_COLS
COMPLETION_REWARD_COLS = "reward, reward_to_go, advantage, reward_components"
# where a stored prompt's leading ids come from: how many, which completion of its trajectory (its seq),
# or which root (a whole-stored completion of another trajectory: its id and seq); both NULL: stored
# whole; written after n_prompt, n_output, read last
COMPLETION_PROMPT_COLS = "prompt_shared, prompt_base, prompt_root_trajectory, prompt_root_seq"
TRAJ_COLS = "id, group_id, task_id, scaffold, queue_index, status, reward, started_at, finished_at, error, owner, infra"
GROUP_COLS = (
    "id, queue_index, task_id, n, status, submitted_at, timeout_s, timed_out, consumed_at, consumed_step, rewards_pending"
)


@dataclass(frozen=True)
class Dialect:
    name: str
    param: str
    blob: str
    real: str
    serial: str

    def sql(self, statement: str) -> str:
        return statement if self.param == "?" else statement.replace("?", self.param)

    def ddl(self) -> list[str]:
        text = TABLES.format(blob=self.blob, real=self.real, serial=self.serial)
        return [s.strip() for s in text.split(";") if s.strip()]

    def migration(self, old: int) -> list[str]:
        """The statements that turn a pool of schema version ``old`` into ``old + 1``."""
        return [s.format(blob=self.blob, real=self.real, serial=self.serial) for s in MIGRATIONS[old]]


SQLITE = Dialect("sqlite", "?", "BLOB", "REAL", "INTEGER PRIMARY KEY AUTOINCREMENT")
POSTGRES = Dialect("postgresql", "%s", "BYTEA", "DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY")


class Cursor:
    """A DB-API cursor that speaks ``?`` placeholders in either dialect."""

    def __init__(self, cur: Any, dialect: Dialect) -> None:
        self._cur = cur
        self._dialect = dialect

    def execute(self, sql: str, args: tuple = ()) -> None:
        self._cur.execute(self._dialect.sql(sql), args)

    def one(self, sql: str, args: tuple = ()) -> Any:
        self.execute(sql, args)
        return self._cur.fetchone()

    def all(self, sql: str, args: tuple = ()) -> list[Any]:
        self.execute(sql, args)
        return self._cur.fetchall()

_SWAP = sys.byteorder == "big"


def pack_ints(values: list[int]) -> bytes:
    arr = array("i", values)
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def unpack_ints(data: bytes) -> list[int]:
    arr = array("i")
    arr.frombytes(bytes(data))
    if _SWAP:
        arr.byteswap()
    return arr.tolist()


def pack_floats(values: list[float]) -> bytes:
    arr = array("f", values)
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def unpack_floats(data: bytes) -> list[float]:
    arr = array("f")
    arr.frombytes(bytes(data))
    if _SWAP:
        arr.byteswap()
    return arr.tolist()
