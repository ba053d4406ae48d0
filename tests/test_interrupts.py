"""Ctrl-C while checkpoints are decoded is an interruption, not ormsgpack's 'ext_hook failed'."""

from __future__ import annotations

import copy
import signal
from dataclasses import dataclass

import ormsgpack
import pytest

from chatbot.interrupts import decoding
from chatbot.store.postgres import open_store

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
    store = open_store(any_db)  # SQLite, then PostgreSQL
    try:
        serde = store.saver.serde
        blob = serde.dumps_typed(PressesCtrlC("hello"))
        assert serde.loads_typed(blob) == PressesCtrlC("hello")
        assert copy.deepcopy(serde).loads_typed(blob) == PressesCtrlC("hello")  # (copyable)
        _PRESS["now"] = True
        try:
            with pytest.raises(KeyboardInterrupt):
                serde.loads_typed(blob)
        finally:
            _PRESS["now"] = False
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
