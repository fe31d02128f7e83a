"""The loop `forge gateway serve`, `forge train` and `forge rollout` run on (forge_cli/gateway/event_loop.py):
uvloop's where installed, asyncio's when ``FORGE_EVENT_LOOP=asyncio``, a clear error for anything else."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from forge_cli.errors import ForgeError
from forge_cli.gateway import event_loop


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_auto_runs_on_uvloop_when_installed(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.run(_loop_module()).startswith("uvloop")
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    assert event_loop.run(_loop_module()).startswith("uvloop")


def test_asyncio_when_asked(monkeypatch):
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.run(_loop_module()).startswith("asyncio")


def test_the_result_and_the_exception_come_back(monkeypatch):
    async def fails() -> None:
        raise ForgeError("boom")

    for choice in ("auto", "asyncio"):
        monkeypatch.setenv(event_loop.ENV, choice)
        assert event_loop.run(asyncio.sleep(0, result=42)) == 42
        with pytest.raises(ForgeError, match="boom"):
            event_loop.run(fails())


def test_an_unknown_choice_is_a_clear_error_and_leaves_no_coroutine_unawaited(monkeypatch):
    monkeypatch.setenv(event_loop.ENV, "trio")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be a RuntimeWarning
        with pytest.raises(ForgeError, match=r"FORGE_EVENT_LOOP='trio': expected auto, uvloop or asyncio"):
            event_loop.run(_loop_module())


def test_asking_for_uvloop_without_it_says_so(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_uvloop(name, *args, **kwargs):
        if name == "uvloop":
            raise ImportError("No module named 'uvloop'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    with pytest.raises(ForgeError, match="uvloop is not installed"):
        event_loop.run(_loop_module())
    monkeypatch.setenv(event_loop.ENV, "auto")  # auto falls back to asyncio's loop
    assert event_loop.run(_loop_module()).startswith("asyncio")
