"""A scripted chat model for tests: langchain-core's GenericFakeChatModel that also records.

Each call takes the next scripted item: a string or AIMessage is the reply, an exception is
raised, a callable gets the messages and returns the reply. Every call's input is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

Script = str | AIMessage | BaseException | Callable[[list[BaseMessage]], str]


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model that replies from a script and records what it was sent."""

    messages: Iterator[Any] = Field(default_factory=lambda: iter(()))
    script: list[Any] = Field(default_factory=list)
    default: Any = None
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    offered: list[list[str]] = Field(default_factory=list)
    """The names of the tools each call was offered (an empty list: none)."""
    takes_tools: bool = True
    """False: a model class without tools (``bind_tools`` raises NotImplementedError)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        if not self.takes_tools:
            raise NotImplementedError("this fake takes no tools")
        names = [convert_to_openai_tool(tool)["function"]["name"] for tool in tools]
        return self.bind(tools=names, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append(list(messages))
        self.offered.append(list(kwargs.get("tools") or []))
        item = self.script.pop(0) if self.script else self.default
        if item is None:
            item = f"reply {len(self.calls)}"
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            item = item(list(messages))
        message = item if isinstance(item, AIMessage) else AIMessage(content=item)
        return ChatResult(generations=[ChatGeneration(message=message)])


def summary_calls(model: ScriptedChatModel) -> list[list[BaseMessage]]:
    """The recorded calls that were summary requests (they carry the <conversation> block)."""
    return [call for call in model.calls if "<conversation>" in call[-1].text]


def chat_calls(model: ScriptedChatModel) -> list[list[BaseMessage]]:
    """The recorded calls that were conversation turns."""
    return [call for call in model.calls if "<conversation>" not in call[-1].text]
