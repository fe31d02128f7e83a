"""One schema, two SQL dialects (SQLite, PostgreSQL).

The statements are written once, with ``?`` placeholders and ``{blob}``/``{real}``/``{serial}``
type names that each dialect fills in. Token ids and logprobs are stored as packed
little-endian int32 / float32 bytes, never as JSON text.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass

SCHEMA_VERSION = 1

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
    consumed_step BIGINT
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
    error TEXT
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


SQLITE = Dialect("sqlite", "?", "BLOB", "REAL", "INTEGER PRIMARY KEY AUTOINCREMENT")
POSTGRES = Dialect("postgresql", "%s", "BYTEA", "DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY")

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
