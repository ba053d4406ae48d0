"""The graph's state and its per-run context (the settings Studio shows as a form).

Three views of the state: :class:`ChatInput` is what a run takes (Studio's input form),
:class:`State` what every checkpoint keeps and a run returns, :class:`RunState` what the nodes
and routers see while a run goes on (the state and the run's own notes, never stored).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NotRequired, get_origin

from langchain_core.messages import AnyMessage
from langgraph.channels import LastValue, UntrackedValue
from langgraph.errors import InvalidUpdateError
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from chatbot.memory.channels import KINDS as _KINDS
from chatbot.memory.channels import delta_channel
from chatbot.memory.channels import described as _described


class Checked(LastValue[Any]):
    """A state key that keeps the last value written and refuses one of the wrong type, so an
    ``update_state`` from Studio or the SDK fails naming the key, not the next turn."""

    __slots__ = ()

    def update(self, values: Sequence[Any]) -> bool:
        if not values:
            return False
        kind = _kind(self.typ)
        for value in values:
            if not isinstance(value, kind):
                raise InvalidUpdateError(
                    f"the state's {self.key!r} must be {_KINDS.get(kind, kind.__name__)}, not "
                    f"{_described(value)}: nothing was changed; update it with one"
                )
        return super().update(values)


@functools.cache
def _kind(typ: Any) -> Any:
    """The class a value of the key's type is an instance of (``dict`` for ``dict[str, Any]``)."""
    return get_origin(typ) or typ


MessagesKey = Annotated[list[AnyMessage], delta_channel("messages")]
"""The state's ``messages``: a LangGraph ``DeltaChannel``, stored whole every
:data:`chatbot.memory.channels.MESSAGES_SNAPSHOT_EVERY` updates."""
SummaryKey = Annotated[str, delta_channel("summary")]
"""The state's ``summary``: stored whole where it changes (at a fold), nowhere else."""


class State(TypedDict):
    """The conversation: the kept messages, and the running summary of everything folded.

    ``messages`` holds the latest messages verbatim (``RemoveMessage`` deletes by id);
    ``summary`` is never stored as a message (the conversation node sends it as a
    SystemMessage). ``context_overflow`` is set while the provider has refused the pending
    message's request as too long. ``folded`` records what the summary holds
    (:func:`chatbot.history.summary.extend_fold_record`), so /tokens needs no history.
    ``system_prompt`` is the thread's own system prompt and ``system_role`` the role it came
    from (:func:`chatbot.config.roles.effective_prompt`). ``usage`` is the record of what the
    model calls cost (:mod:`chatbot.memory.pricing`). Every key refuses a value of the wrong
    type.
    """

    messages: MessagesKey
    summary: SummaryKey
    context_overflow: Annotated[dict[str, Any], Checked]
    folded: Annotated[dict[str, Any], Checked]
    system_prompt: Annotated[str, Checked]
    system_role: Annotated[str, Checked]
    usage: Annotated[dict[str, Any], Checked]


class ChatInput(TypedDict):
    """What a run takes: new messages, and optionally a summary or system prompt to set."""

    messages: MessagesKey
    summary: NotRequired[SummaryKey]
    system_prompt: NotRequired[str]


class RunState(State):
    """The state as the nodes and routers see it during one run; its untracked values are never
    checkpointed. ``fold_tried``: the run has tried a fold (a turn folds at most once)."""

    fold_tried: NotRequired[Annotated[bool, UntrackedValue]]
    memories: NotRequired[Annotated[str, UntrackedValue]]
    """The memories block this run's requests carry (:func:`chatbot.memory.facts.render`):
    never in a checkpoint, so no thread's history holds another thread's memories."""


@dataclass(kw_only=True)
class Context:
    """Per-run settings. Each empty field keeps the server's default from its .env file.

    LangGraph Studio shows these as a form; an assistant or a single run can set them.
    """

    chat_model: str = field(
        default="",
        metadata={"description": "Chat model name, or 'offline'. Empty: CHATBOT_MODEL."},
    )
    reply_model: str = field(
        default="",
        metadata={
            "description": "This run's reply only: a model over chat_model, leaving the summary "
            "model as it was (what /retry MODEL sends). Empty: chat_model."
        },
    )
    summary_model: str = field(
        default="",
        metadata={"description": "Model that writes the summary. Empty: CHATBOT_SUMMARY_MODEL."},
    )
    summary_trigger: str = field(
        default="",
        metadata={
            "description": "When to summarize: messages:N, tokens:N or fraction:F, several "
            "joined by commas (any fires). Empty: CHATBOT_SUMMARY_TRIGGER."
        },
    )
    summary_keep: str = field(
        default="",
        metadata={
            "description": "What stays verbatim after a summary: messages:N, tokens:N or "
            "fraction:F. Empty: CHATBOT_SUMMARY_KEEP."
        },
    )
    system_prompt: str = field(
        default="",
        metadata={
            "description": "System prompt for the chat model, over the thread's own (/system). "
            "Empty: the thread's, else CHATBOT_SYSTEM_PROMPT."
        },
    )
    compact: bool = field(
        default=False,
        metadata={
            "description": "Fold the older messages into the summary now, whatever the trigger "
            "says (keeping the usual window). Send with an empty message list to only compact."
        },
    )
    compact_focus: str = field(
        default="",
        metadata={"description": "With compact: what this summary should pay attention to."},
    )
    language: Literal["", "en", "zh"] = field(
        default="",
        metadata={
            "description": "Language of the summary prompts: en or zh. Empty: CHATBOT_LANGUAGE."
        },
    )
    memory: Literal["", "on", "off"] = field(
        default="",
        metadata={
            "description": "on: the user's memories (facts told in any thread) are given to "
            "the model and new ones noted when the conversation is folded; off: neither. "
            "Empty: CHATBOT_MEMORY."
        },
    )
    recall: Literal["", "auto", "off"] = field(
        default="",
        metadata={
            "description": "auto: once there is a summary, the model may call the recall tool "
            "to read folded messages word for word; off: never. Empty: CHATBOT_RECALL."
        },
    )


ChatGraph = CompiledStateGraph[RunState, Context, ChatInput, State]
"""The compiled chatbot graph, as :func:`chatbot.engine.graph.build_graph` returns it."""
