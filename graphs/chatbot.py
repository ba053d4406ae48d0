"""The graph ``langgraph dev`` and Studio serve: built from settings, without a checkpointer.

The LangGraph server brings its own persistence and refuses a graph compiled with one.
"""

from chatbot.graph import build_graph
from chatbot.models import resolve_models
from chatbot.settings import load_settings

settings = load_settings()
models = resolve_models(settings)
graph = build_graph(models.chat, models.summary, settings)
