"""Ctrl-C while checkpoints are decoded is an interruption, not ormsgpack's 'ext_hook failed'."""

from __future__ import annotations

import asyncio
import copy
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import ormsgpack
import pytest

from chatbot.interrupts import decoding
from chatbot.store.postgres import open_store
from chatbot.threads.runner import TurnRunner

_PRESS = {"now": False}


def _press_ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)  # a real signal, handled as Python handles Ctrl-C


@dataclass
class PressesCtrlC:
    """A value whose decoding is interrupted by Ctrl-C (when the test says so)."""

    text: str

    def __post_init__(self) -> None:
        if _PRESS["now"]:
            _press_ctrl_c()


def test_ormsgpack_turns_ctrl_c_in_its_hook_into_an_error_and_decoding_undoes_it() -> None:
    packed = ormsgpack.packb(ormsgpack.Ext(1, b"x"))

    def hook(code: int, data: bytes) -> object:
        _press_ctrl_c()
        return data

    with pytest.raises(ValueError, match="ext_hook failed"):  # what LangGraph's decoder meets
        ormsgpack.unpackb(packed, ext_hook=hook)
    with pytest.raises(KeyboardInterrupt), decoding():
        ormsgpack.unpackb(packed, ext_hook=hook)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "put back"
    with pytest.raises(ValueError, match="ext_hook failed"), decoding():  # no Ctrl-C: as it is
        ormsgpack.unpackb(packed, ext_hook=lambda code, data: 1 / 0)


def test_the_savers_decode_checkpoints_interruptibly(any_db: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    store = open_store(any_db)  # SQLite, then PostgreSQL
    try:
        saver = store.saver
        assert copy.deepcopy(saver.serde).loads_typed(saver.serde.dumps_typed(1)) == 1
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"value": PressesCtrlC("hello")}
        checkpoint["channel_versions"] = {"value": 1}
        at = {"configurable": {"thread_id": "interrupted", "checkpoint_ns": ""}}
        config = saver.put(at, checkpoint, {}, {"value": 1})  # type: ignore[arg-type]
        saver.put_writes(config, [("value", PressesCtrlC("again"))], "task")
        saved = saver.get_tuple(config)
        assert saved is not None
        assert saved.checkpoint["channel_values"]["value"] == PressesCtrlC("hello")
        _PRESS["now"] = True
        try:
            with pytest.raises(KeyboardInterrupt):
                saver.get_tuple(config)
            with pytest.raises(KeyboardInterrupt):
                list(saver.list(config))
        finally:
            _PRESS["now"] = False
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "put back"
    finally:
        store.close()


def test_a_second_ctrl_c_while_the_first_is_reported_is_ignored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from chatbot.cli.core import exit_code

    try:
        assert exit_code(KeyboardInterrupt()) == 130
        signal.raise_signal(signal.SIGINT)  # pressed again while leaving: no traceback
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert "interrupted" in capsys.readouterr().err


class _NoDisplay:
    def show(self, event: object) -> None:
        pass

    def tick(self) -> None:
        pass


async def _a_turn_that_would_take_long() -> AsyncIterator[Any]:
    await asyncio.sleep(30)
    yield None


def test_ctrl_c_landing_as_a_turn_starts_is_an_interruption_not_a_traceback() -> None:
    """The turn's Ctrl-C handler is in place before its task exists: a Ctrl-C landing then,
    from the moment ``signal.signal`` returns, cancels the task as it starts, and the turn
    ends interrupted; the session goes on."""

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_return" and getattr(arg, "__name__", "") == "signal":  # (_signal's)
            handler = signal.getsignal(signal.SIGINT)
            if type(handler).__module__ == "chatbot.threads.runner":  # the turn's, just set
                sys.setprofile(None)
                signal.raise_signal(signal.SIGINT)

    runner = TurnRunner()
    try:
        sys.setprofile(profile)
        try:
            outcome = runner.run(_a_turn_that_would_take_long(), _NoDisplay())
        finally:
            sys.setprofile(None)
        assert outcome.interrupted and outcome.error is None
        later = runner.run(_a_short_turn(), _NoDisplay())  # the session goes on
        assert not later.interrupted and later.error is None
    finally:
        runner.close()


async def _a_short_turn() -> AsyncIterator[Any]:
    yield None
