"""chatbot: a stateful terminal chatbot on LangGraph whose memory never overflows.

``chatbot.build_graph(chat_model, summary_model, settings, checkpointer)`` builds the graph for
embedding in other programs; ``chatbot.Settings`` and ``chatbot.load_settings`` configure it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Settings", "Store", "__version__", "build_graph", "load_settings", "resolve_models"]

if TYPE_CHECKING:
    from chatbot.config.settings import Settings, load_settings
    from chatbot.engine.graph import build_graph
    from chatbot.engine.models import resolve_models
    from chatbot.store.sqlite import Store

_LAZY = {
    "build_graph": "chatbot.engine.graph",
    "resolve_models": "chatbot.engine.models",
    "Settings": "chatbot.config.settings",
    "load_settings": "chatbot.config.settings",
    "Store": "chatbot.store.sqlite",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that `chatbot --version` and `--help` do not import LangGraph.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'chatbot' has no attribute {name!r}")
