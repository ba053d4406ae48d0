"""The graph ``langgraph dev`` and Studio serve: built from settings, without a checkpointer.

The LangGraph server brings its own persistence and refuses a graph compiled with one.
Per-run settings (models, trigger, keep, system prompt, language, recall) come from the graph's
context, which Studio shows as a form. The server keeps no search index: the recall tool reads
the thread's history instead, through the server's own API (``history_search``, async: the
server runs its graphs with ``astream``).
"""

import logging

from chatbot.config.settings import load_settings
from chatbot.engine.graph import build_graph, build_leaving_graph
from chatbot.engine.models import resolve_models
from chatbot.engine.recalling import history_search

settings = load_settings()
models = resolve_models(settings)
if models.notice:
    logging.getLogger("chatbot").warning(models.notice)
graph = build_graph(models.chat, models.summary, settings, recall_search=history_search)
remember = build_leaving_graph(graph)
