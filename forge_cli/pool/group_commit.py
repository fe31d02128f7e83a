"""Group commit: many threads' writes made durable by one commit.

A caller hands :meth:`GroupCommit.run` a unit of work (a function of a cursor). Whichever caller finds
no commit in progress becomes the *leader*: it takes every unit queued so far, runs them in one
transaction — each under its own savepoint, so a unit that raises is undone alone and its caller
gets the exception — commits once (one fsync for SQLite with ``synchronous=FULL``) and wakes the
others. Every caller returns only after the commit that holds its unit, so what a call returned is
durable, as with one transaction per call; the callers merely share the fsync. A lone caller runs
its unit in a transaction of its own, without a savepoint: nothing changes when nobody else is
writing. If the commit itself fails, every unit of the batch raises its error.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class _Unit(Generic[T]):
    __slots__ = ("work", "value", "error", "done", "leads", "wake")

    def __init__(self, work: Callable[[Any], T]) -> None:
        self.work = work
        self.value: T | None = None
        self.error: BaseException | None = None
        self.done = False
        self.leads = False  # its caller was handed the lead (set under the mutex)
        self.wake = threading.Lock()  # held until the unit is done, or its caller is to lead the next commit
        self.wake.acquire()


class GroupCommit:
    """Runs units of work from any number of threads, as few commits as the traffic allows.

    ``transaction()`` opens one write transaction and yields its cursor (``execute(sql)``), committing
    when the block ends and rolling back if it raises; ``max_batch`` bounds the units of one commit.
    ``commits`` and ``units`` count what it did (a batch of ``units / commits`` on average).

    A waiting caller is woken once: when its unit is done, or to lead the next commit — the leader
    hands over to the caller of the oldest queued unit, whose unit that commit then holds.
    """

    def __init__(self, transaction: Callable[[], AbstractContextManager[Any]], max_batch: int = 256) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._transaction = transaction
        self._max_batch = max_batch
        self._mutex = threading.Lock()
        self._queue: list[_Unit[Any]] = []
        self._leading = False
        self.commits = 0
        self.units = 0

    @property
    def queued(self) -> int:
        """Units waiting for the next commit (not those of the commit in progress)."""
        with self._mutex:
            return len(self._queue)

    def run(self, work: Callable[[Any], T]) -> T:
        """Run ``work(cursor)`` in a transaction, possibly beside other threads' units; return its
        value once committed, or raise what it raised (then nothing of it was written)."""
        unit: _Unit[T] = _Unit(work)
        try:
            with self._mutex:
                self._queue.append(unit)
                if not self._leading:
                    self._leading = unit.leads = True
            if not unit.leads:
                unit.wake.acquire()  # done, or made the leader
        except BaseException:  # interrupted (a signal's handler raised): leave nothing waiting on this call
            self._abandon(unit)
            raise
        if not unit.done:
            self._lead(unit)
        if unit.error is not None:
            raise unit.error
        return unit.value  # type: ignore[return-value]

    def _abandon(self, unit: _Unit[Any]) -> None:
        """``unit``'s caller stopped waiting: take its unit out of the queue if it is still there, and
        if it had been handed the lead, hand it on (or lay it down). A unit a commit already holds is
        left to it (then it may be written though its caller raised)."""
        with self._mutex:
            if unit in self._queue:
                self._queue.remove(unit)
            if unit.leads and not unit.done:
                self._hand_on()

    def _lead(self, mine: _Unit[Any]) -> None:
        """Commit the oldest queued units (``mine`` among them: it is the oldest, or was queued when no
        commit was in progress), wake their callers, and hand the lead on or lay it down."""
        batch: list[_Unit[Any]] = []
        try:
            with self._mutex:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
            self._commit(batch)
        finally:
            for unit in batch:
                if not unit.done:  # the commit never ran (this thread was interrupted): none of it was written
                    unit.error, unit.done = RuntimeError("the pool's commit was interrupted"), True
                if unit is not mine:
                    unit.wake.release()
            with self._mutex:
                self._hand_on()

    def _hand_on(self) -> None:
        """(Under the mutex.) The caller of the oldest queued unit leads the next commit; none: no leader."""
        if self._queue:
            self._queue[0].leads = True
            self._queue[0].wake.release()
        else:
            self._leading = False

    def _commit(self, batch: list[_Unit[Any]]) -> None:
        try:
            with self._transaction() as cur:
                if len(batch) == 1:
                    batch[0].value = batch[0].work(cur)
                else:
                    for unit in batch:
                        cur.execute("SAVEPOINT forge_unit")
                        try:
                            unit.value = unit.work(cur)
                        except Exception as exc:  # this unit alone is undone
                            cur.execute("ROLLBACK TO SAVEPOINT forge_unit")
                            unit.error = exc
                        cur.execute("RELEASE SAVEPOINT forge_unit")
        except BaseException as exc:  # nothing of the batch was committed
            for unit in batch:
                if unit.error is None:
                    unit.error, unit.value = exc, None
        finally:
            self.commits += 1
            self.units += len(batch)
            for unit in batch:
                unit.done = True
