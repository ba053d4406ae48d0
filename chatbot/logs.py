"""chatbot's loggers, all under ``chatbot``, which has a ``NullHandler``: a library logs, the
application decides where logs go (the CLI: :func:`chatbot.cli.main.main`). Imported only by the
modules that log, so that the commands that never do (``threads --json``) never import
:mod:`logging`."""

from __future__ import annotations

import logging

logging.getLogger("chatbot").addHandler(logging.NullHandler())


def logger(name: str = "") -> logging.Logger:
    """The logger ``chatbot.NAME`` (``chatbot`` itself without a name)."""
    return logging.getLogger(f"chatbot.{name}" if name else "chatbot")
