"""What a request to the chat model holds, part by part, in tokens: the one count behind every
figure chatbot shows and every decision it makes about the size of the context.

The words, each with one meaning wherever a figure is shown:

- *system prompt*: the system prompt's message.
- *memories*: the message carrying the user's memories across threads
  (:func:`chatbot.memory.facts.render`), when there are any.
- *summary*: the summary's text.
- *summary message*: what the message that carries the summary adds to its text: the heading
  (``Summary of conversation earlier:``), the recall note when the tool is offered, and the
  message's own overhead.
- *recall tool*: the recall tool's definition, in a request that offers it (recall on and a
  summary to recall from).
- *messages*: the messages sent word for word.
- *context*: all of them, what the request holds (:attr:`Sent.total`).

Every part is counted by the run's :class:`~chatbot.memory.tokens.TokenCounter` and scaled as
the whole request is: each part but the messages rounded down, the messages what is left, so
the parts add up to the context. Pure: no I/O, no LangGraph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from chatbot.memory import prompts, recall
from chatbot.memory.tokens import TokenCounter


@dataclass(frozen=True)
class Sent:
    """A request to the chat model in tokens, part by part (see the module's words)."""

    system: int = 0
    memories: int = 0
    summary: int = 0
    summary_message: int = 0
    recall_tool: int = 0
    messages: int = 0
    raw: int = 0
    """The whole request before usage scaling: what a reply's usage record keeps."""

    @property
    def total(self) -> int:
        """The context: every part."""
        return (
            self.system
            + self.memories
            + self.summary
            + self.summary_message
            + self.recall_tool
            + self.messages
        )

    @property
    def summary_cost(self) -> int:
        """What the summary adds to every request: its text, its message and the recall tool."""
        return self.summary + self.summary_message + self.recall_tool


def sent_tokens(
    counter: TokenCounter,
    messages: Sequence[BaseMessage],
    summary: str = "",
    system_prompt: str = "",
    language: prompts.Language = "en",
    recall_on: bool = False,
    scaled_by: Sequence[BaseMessage] | None = None,
    memories: str = "",
) -> Sent:
    """The request :func:`chatbot.memory.prompts.conversation_input` makes of these, in tokens
    (the recall tool with ``recall_on`` and a summary), scaled by the newest reply's usage
    among ``scaled_by`` (default: the messages)."""
    offered = recall_on and bool(summary)
    raw_system = counter.raw(prompts.conversation_input([], "", system_prompt, language))
    raw_memories = counter.raw(prompts.conversation_input([], "", "", language, memories=memories))
    raw_memories = raw_memories if memories else 0
    raw_summary = counter.text(summary)
    carrier = prompts.conversation_input([], summary, "", language, offered)
    raw_carrier = counter.raw(carrier) - raw_summary if summary else 0
    raw_tool = recall.definition_tokens(counter) if offered else 0
    raw_messages = counter.raw(messages)
    raw = raw_system + raw_memories + raw_summary + raw_carrier + raw_tool + raw_messages
    factor = counter.scale(messages if scaled_by is None else scaled_by)
    system, remembered, text, carried, tool = (
        int(part * factor)
        for part in (raw_system, raw_memories, raw_summary, raw_carrier, raw_tool)
    )
    rest = math.ceil(raw * factor) - system - remembered - text - carried - tool
    return Sent(system, remembered, text, carried, tool, messages=rest, raw=raw)


FIRST_SUMMARY = "…"
"""Stands for a summary not made yet when a fold is weighed: one token, the least it holds."""


def after_fold(
    counter: TokenCounter,
    messages: Sequence[BaseMessage],
    kept: Sequence[BaseMessage],
    summary: str,
    system_prompt: str = "",
    language: prompts.Language = "en",
    recall_on: bool = False,
    memories: str = "",
) -> Sent:
    """The request a fold of ``messages`` would leave, before its summary is made: the ``kept``
    messages and the summary at its least (the summary now, or :data:`FIRST_SUMMARY`), scaled
    as the request of ``messages`` is, so the two compare."""
    head = summary or FIRST_SUMMARY
    return sent_tokens(
        counter, kept, head, system_prompt, language, recall_on, messages, memories=memories
    )
