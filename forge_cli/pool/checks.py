"""Checks of what the pool is asked to write: each raises ForgeError before anything is written."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, NamedTuple

from forge_cli.errors import ForgeError
from forge_cli.pool.schema import pack_floats, pack_ints
from forge_cli.pool.types import CompletionReward, NewCompletion, Sampling

INT32_MAX = 2**31 - 1


_NO_SIGN_BIT = bytes(range(128))  # a packed id's most significant byte below 0x80: not negative


def pack_ids(name: str, values: Any) -> bytes:
    """``values`` packed (little-endian int32, :func:`~forge_cli.pool.schema.pack_ints`'s layout), if it
    is a list of token ids; else ForgeError. The checks run in C where they can: an 8k-token prompt is
    ~0.2 ms here, against ~0.5 ms for a Python pass over it and a second one to pack it."""
    if not isinstance(values, (list, tuple)):
        raise ForgeError(f"{name} must be a list of integers")
    if not set(map(type, values)) <= {int} and not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ForgeError(f"{name} must be a list of integers")  # an int subclass other than bool passes
    try:
        data = pack_ints(values)
    except OverflowError:
        raise ForgeError(f"{name} holds a token id outside 0..{INT32_MAX}") from None
    if data[3::4].translate(None, _NO_SIGN_BIT):  # some id's sign bit is set
        raise ForgeError(f"{name} holds a token id outside 0..{INT32_MAX}")
    return data


def check_logprobs(logprobs: Any, n: int) -> bytes:
    """``logprobs`` packed (float32), if it holds ``n`` numbers ≤ 0 (not bools, not NaN)."""
    if not isinstance(logprobs, (list, tuple)) or len(logprobs) != n:
        got = len(logprobs) if isinstance(logprobs, (list, tuple)) else type(logprobs).__name__
        raise ForgeError(f"output_logprobs must have one value per output id: {n} ids, {got} logprobs")
    if not set(map(type, logprobs)) <= {float, int} and not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in logprobs):
        raise ForgeError("output_logprobs must be numbers <= 0 (log-probabilities)")
    if any(map(math.isnan, logprobs)):
        raise ForgeError("output_logprobs holds NaN")
    if logprobs and max(logprobs) > 0.0:
        raise ForgeError("output_logprobs must be numbers <= 0 (log-probabilities)")
    return pack_floats(list(logprobs))


def check_rewards(components: dict[str, float]) -> None:
    if not components:
        raise ForgeError("rewards need at least one named component")
    for name, value in components.items():
        if not isinstance(name, str) or not name:
            raise ForgeError(f"reward component names must be non-empty strings, got {name!r}")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ForgeError(f"reward component {name!r} must be a finite number, got {value!r}")


def completion_reward_rows(rewards: Any) -> list[tuple[float, float, float, str, str]]:
    """``(reward, reward_to_go, advantage, components JSON, completion id)`` per CompletionReward, checked."""
    rows, seen = [], set()
    for item in rewards:
        if not isinstance(item, CompletionReward):
            raise ForgeError(f"set_completion_rewards takes CompletionReward records, got {type(item).__name__}")
        if item.completion_id in seen:
            raise ForgeError(f"completion {item.completion_id} is listed twice")
        seen.add(item.completion_id)
        for what, value in (("reward", item.reward), ("reward_to_go", item.reward_to_go), ("advantage", item.advantage)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ForgeError(f"completion {item.completion_id}: {what} must be a finite number, got {value!r}")
        if item.components:
            check_rewards(item.components)
        rows.append((float(item.reward), float(item.reward_to_go), float(item.advantage),
                     json.dumps({k: float(v) for k, v in item.components.items()}), item.completion_id))
    return rows


class CompletionRow(NamedTuple):
    """A checked completion as the ``completions`` table stores it, but for its ``seq`` (the store numbers
    it in the transaction): the columns of COMPLETION_COLS, then ``n_prompt, n_output, prompt_shared``
    (COMPLETION_PROMPT_COLS: its base is known once the seqs are)."""

    id: str
    trajectory_id: str
    prompt_ids: bytes
    output_ids: bytes
    output_logprobs: bytes
    policy_version: int
    sampling: str
    finish_reason: Any
    started_at: float
    finished_at: float
    tool_format: Any
    parse_errors: str
    request: str | None
    agent: str | None
    tool_calls: str | None
    history: str | None
    n_prompt: int
    n_output: int
    prompt_shared: int

    def values(self, seq: int, prompt_base: int | None, root: tuple[str, int] | None = None) -> tuple:
        """The INSERT's values, ``seq`` and the base's in their columns: the completion of the same
        trajectory whose ids the prompt's first ``prompt_shared`` are (``prompt_base``, its seq), or
        the root's (``root``: another trajectory's id and seq); neither when that is 0."""
        return (self.id, self.trajectory_id, seq, *self[2:], prompt_base, *(root or (None, None)))


def sent_ids(c: Any) -> tuple[list[int], int]:
    """``c``'s prompt ids then its output ids, in one new list, and how many are the prompt's: what the
    pool compares, checks, stores and remembers (a list the caller cannot change meanwhile); ForgeError
    for anything but a NewCompletion with id lists."""
    if not isinstance(c, NewCompletion):
        raise ForgeError(f"append_completion takes a NewCompletion, got {type(c).__name__}")
    for name in ("prompt_ids", "output_ids"):
        if not isinstance(getattr(c, name), (list, tuple)):
            raise ForgeError(f"{name} must be a list of integers")
    return [*c.prompt_ids, *c.output_ids], len(c.prompt_ids)


def completion_row(c: NewCompletion, now: float, sent: tuple[list[int], int], shared: int = 0) -> CompletionRow:
    """The row of ``c``, checked; a fresh id; ``now`` for unset times. ``sent``: ``sent_ids(c)``.
    ``shared``: how many of the prompt's leading ids are an earlier completion's — equal (``==``) to ids
    already checked and stored, and stored as those — so only the ids after them are checked and packed."""
    if not isinstance(c.sampling, Sampling):
        raise ForgeError(f"a completion's sampling must be a Sampling record, got {type(c.sampling).__name__}")
    if c.agent is not None and (not isinstance(c.agent, str) or not c.agent or len(c.agent) > 200):
        raise ForgeError(f"a completion's agent must be a name of 1 to 200 characters, got {c.agent!r}"[:300])
    prompt_ids, output_ids = sent[0][shared:sent[1]], sent[0][sent[1]:]
    prompt = pack_ids("prompt_ids", prompt_ids)
    output = pack_ids("output_ids", output_ids)
    logprobs = check_logprobs(c.output_logprobs, len(output_ids))
    if not isinstance(c.policy_version, int) or isinstance(c.policy_version, bool) or c.policy_version < 0:
        raise ForgeError(f"policy_version must be an integer >= 0, got {c.policy_version!r}")
    try:
        sampling_json = json.dumps(c.sampling.as_dict())
        errors_json = json.dumps(c.parse_errors or [])
        request_json = json.dumps(c.request) if c.request is not None else None
        calls_json = json.dumps(c.tool_calls) if c.tool_calls is not None else None
        history_json = json.dumps(c.history.as_dict()) if c.history is not None else None
    except (TypeError, ValueError) as exc:
        raise ForgeError(f"completion metadata is not JSON-serialisable: {exc}") from None
    return CompletionRow(
        uuid.uuid4().hex, c.trajectory_id, prompt, output, logprobs,
        c.policy_version, sampling_json, c.finish_reason,
        c.started_at if c.started_at is not None else now, c.finished_at if c.finished_at is not None else now,
        c.tool_format, errors_json, request_json, c.agent, calls_json, history_json, shared + len(prompt_ids),
        len(output_ids), shared,
    )
