"""The one place chat models are made: OpenAI-compatible servers, or the offline model.

``CHATBOT_MODEL=offline`` (or no API key and no base URL) gives :class:`OfflineChatModel`, a
deterministic stand-in that needs no network and says plainly that it is not an LLM.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from chatbot.config.settings import OFFLINE_MODEL, Settings, SettingsError
from chatbot.memory import recall
from chatbot.memory.tokens import ESTIMATE, TokenCounter
from chatbot.parts import readable_text

OFFLINE_MAX_INPUT_TOKENS = 32_000
OFFLINE_SUMMARY_HEADER = "Offline extractive summary (no LLM was asked) - what the user said:"
_MAX_BULLET_CHARS = 300
_MAX_BULLETS = 60
_USER_MESSAGE = re.compile(r"<user>(.*?)</user>", re.DOTALL)
_CONVERSATION = re.compile(r"<conversation>.*?</conversation>", re.DOTALL)


class OfflineChatModel(BaseChatModel):
    """A deterministic chat model for offline use and demos, not a language model: it quotes
    the user's last message, and as a summary model writes an extractive summary."""

    role: Literal["chat", "summary"] = "chat"
    max_summary_tokens: int = 1000
    """The extractive summary keeps the newest points that fit in about this many tokens."""

    @property
    def _llm_type(self) -> str:
        return "chatbot-offline"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": OFFLINE_MODEL, "role": self.role}

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        """Takes tools as providers do; it calls only ``recall``, by :func:`_recall_call`'s rule."""
        from langchain_core.utils.function_calling import convert_to_openai_tool

        names = [convert_to_openai_tool(tool)["function"]["name"] for tool in tools]
        return self.bind(tools=names, **kwargs)

    def _recall_call(self, messages: list[BaseMessage], tools: Any) -> dict[str, Any] | None:
        """The offline rule for the recall tool: when it is offered and the user's message
        asks about something said earlier (or says ``recall X``), call it
        (:func:`chatbot.memory.recall.offline_query`)."""
        if self.role != "chat" or not tools or recall.TOOL_NAME not in tools or not messages:
            return None
        last = messages[-1]
        if not isinstance(last, HumanMessage):
            return None
        query = recall.offline_query(readable_text(last.content))
        if query is None:
            return None
        digest = hashlib.sha1(f"{last.id}:{query}".encode()).hexdigest()[:16]
        return {"name": recall.TOOL_NAME, "args": {"query": query}, "id": f"call_{digest}"}

    def _reply(self, messages: list[BaseMessage]) -> str:
        if self.role == "chat" and messages and isinstance(messages[-1], ToolMessage):
            return _recalled_reply(messages[-1])
        if self.role == "summary":
            request = messages[-1].text if messages else ""
            return extractive_summary(request, self.max_summary_tokens)
        last = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        last_user = readable_text(last.content) if last is not None else ""
        quoted = " ".join(last_user.split())
        if len(quoted) > 200:
            quoted = quoted[:199] + "…"
        return (
            f'You said: "{quoted}". (This is chatbot\'s offline model: no LLM is configured, '
            "so it only echoes. Set OPENAI_API_KEY or OPENAI_BASE_URL for real answers.)"
        )

    def _usage(self, messages: list[BaseMessage], text: str, tools: Any = None) -> dict[str, int]:
        # Counted the way chatbot estimates unknown models, as a provider would report it
        # (a provider counts the tools it was offered too).
        counter = TokenCounter(ESTIMATE)
        input_tokens = counter.raw(messages)
        if tools and recall.TOOL_NAME in tools:
            input_tokens += recall.definition_tokens(counter)
        output_tokens = ESTIMATE.count(text)
        return {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }

    def _result(self, messages: list[BaseMessage], tools: Any = None) -> ChatResult:
        call = self._recall_call(messages, tools)
        if call is not None:
            message = AIMessage(
                content="",
                tool_calls=[call],
                usage_metadata=self._usage(messages, json.dumps(call["args"]), tools),
                response_metadata=_metadata("tool_calls"),
            )
        else:
            text = self._reply(messages)
            message = AIMessage(
                content=text,
                usage_metadata=self._usage(messages, text, tools),
                response_metadata=_metadata(),
            )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _chunks(
        self, messages: list[BaseMessage], tools: Any = None
    ) -> Iterator[ChatGenerationChunk]:
        call = self._recall_call(messages, tools)
        if call is not None:
            arguments = json.dumps(call["args"], ensure_ascii=False)
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {"name": call["name"], "args": arguments, "id": call["id"], "index": 0}
                    ],
                )
            )
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    usage_metadata=self._usage(messages, arguments, tools),
                    response_metadata=_metadata("tool_calls"),
                    chunk_position="last",
                )
            )
            return
        text = self._reply(messages)
        for piece in re.findall(r"\S+\s*|\s+", text):
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=self._usage(messages, text, tools),
                response_metadata=_metadata(),
                chunk_position="last",
            )
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(messages, kwargs.get("tools"))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages, kwargs.get("tools")):
            if run_manager and chunk.text:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    # Native async (LangChain's default runs the sync methods in a thread, one hop per piece
    # of the reply): the REPL and ``chatbot ask`` stream turns with ``astream``.
    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(messages, kwargs.get("tools"))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages, kwargs.get("tools")):
            if run_manager and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


def _metadata(finish_reason: str = "") -> dict[str, Any]:
    """The offline model's ``response_metadata`` (with a finish reason for a tool call)."""
    metadata = {"model_name": OFFLINE_MODEL, "model_provider": OFFLINE_MODEL}
    return {**metadata, "finish_reason": finish_reason} if finish_reason else metadata


def _recalled_reply(answer: ToolMessage) -> str:
    """The offline model's answer after a recall: what came back, quoted."""
    text = readable_text(answer.content).strip()
    head, _, rest = text.partition("\n\n")
    if not rest:
        return f"I looked back: {head} (This is chatbot's offline model: it only quotes.)"
    hits = [hit.lstrip("[").partition("\n")[::2] for hit in rest.split("\n\n[")]
    said = [words for about, words in hits if about.startswith("user")]  # (what the user said,
    statements = [words for words in said if recall.offline_query(words) is None]  # not asked)
    words = (statements or said or [hits[0][1]])[0]
    who = "You said" if said else "The newest"
    quoted = " ".join(words.split())
    if len(quoted) > 400:
        quoted = quoted[:399] + "…"
    return (
        f'I looked back: {head.rstrip(":")}. {who}: "{quoted}" '
        "(This is chatbot's offline model: it quotes what recall found.)"
    )


def extractive_summary(request: str, max_tokens: int = 1000) -> str:
    """The offline summary: earlier bullet points, then one bullet per user message folded in;
    past ``max_tokens`` the oldest points give way to newer ones."""
    outside = _CONVERSATION.sub("", request)
    previous = [line.strip() for line in outside.splitlines() if line.strip().startswith("- ")]
    conversation = _CONVERSATION.search(request)
    folded = _USER_MESSAGE.findall(conversation.group(0)) if conversation else []
    bullets = list(previous)
    for raw in folded:
        text = " ".join(html.unescape(raw).split())
        if len(text) > _MAX_BULLET_CHARS:
            text = text[: _MAX_BULLET_CHARS - 1] + "…"
        if text:
            bullets.append(f"- {text}")
    bullets = bullets[-_MAX_BULLETS:]
    room = max_tokens - ESTIMATE.count(OFFLINE_SUMMARY_HEADER)
    while len(bullets) > 1 and sum(ESTIMATE.count(b) + 1 for b in bullets) > room:
        bullets.pop(0)
    return "\n".join([OFFLINE_SUMMARY_HEADER, *bullets]) if bullets else ""


# --- the factory ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Models:
    """The chat and summary models the app runs with, and why."""

    chat: BaseChatModel
    summary: BaseChatModel
    chat_name: str
    summary_name: str
    notice: str = ""
    """What to say at start-up: the offline model stands in, or (once) what the server said of
    a model's window (:meth:`chatbot.engine.windows.WindowBook.take_note`)."""


def is_offline(name: str) -> bool:
    """True for the built-in offline model's name."""
    return name.strip().lower() == OFFLINE_MODEL


class MissingCredentials(SettingsError):
    """A real model was asked for, but neither an API key nor a server URL is set."""


def needs_credentials(name: str, settings: Settings) -> bool:
    """True when the model ``name`` cannot be reached with these settings: every model but the
    offline one needs an API key or an OpenAI-compatible URL."""
    return not is_offline(name) and not settings.has_credentials


def make_model(name: str, settings: Settings, *, role: Literal["chat", "summary"]) -> BaseChatModel:
    """A chat model by name: the offline model, or ``ChatOpenAI`` against the configured server
    (summaries at temperature 0; calls logged with ``CHATBOT_LOG``). One that
    :func:`needs_credentials` is refused with one :class:`MissingCredentials` line."""
    if needs_credentials(name, settings):
        raise MissingCredentials(
            f"model {name!r} needs OPENAI_API_KEY or OPENAI_BASE_URL; only 'offline' works "
            "without them"
        )
    from chatbot.engine.calllog import call_log

    callbacks = call_log(settings.log, role, name)  # CHATBOT_LOG: one line per call
    if is_offline(name):
        return OfflineChatModel(
            role=role,
            callbacks=callbacks,
            max_summary_tokens=settings.max_summary_tokens,
            profile={"max_input_tokens": OFFLINE_MAX_INPUT_TOKENS},
        )
    from langchain_openai import ChatOpenAI  # imported on demand: it is slow to import

    from chatbot.engine.clients import async_http_client, http_client

    key = settings.openai_api_key
    if key is None or not key.get_secret_value().strip():
        # Local OpenAI-compatible servers (Ollama, vLLM, LM Studio) accept any key.
        from pydantic import SecretStr

        key = SecretStr("not-needed")
    model = ChatOpenAI(
        model=name,
        api_key=key,
        base_url=settings.openai_base_url,
        temperature=0 if role == "summary" else settings.temperature,
        timeout=settings.timeout,
        max_retries=0,  # (asked again in engine.folding.ask, each wait told: engine.retries)
        http_client=http_client(settings.openai_base_url),
        http_async_client=async_http_client(settings.openai_base_url),
        stream_usage=True,
        callbacks=callbacks,
    )
    if max_input_tokens(model) is None:
        from chatbot.engine.servers import learn_from_server

        learn_from_server(settings, name)  # (once: the model cache keeps the answer)
    return model


def reply_limit(tokens: int | None, settings: Settings) -> dict[str, Any]:
    """What a call is bound with so its reply stops at ``tokens``: the request's own
    ``max_tokens`` for a compatible server (Ollama and llama-cpp-python read no other), else
    ChatOpenAI's ``max_tokens``."""
    if not tokens:
        return {}
    if settings.openai_base_url:
        return {"extra_body": {"max_tokens": tokens}}
    return {"max_tokens": tokens}


def resolve_models(settings: Settings, chat_name: str | None = None) -> Models:
    """The models for these settings, falling back to offline when nothing real is configured."""
    chat = chat_name or settings.model
    summary = settings.summary_model_name if chat_name is None else (settings.summary_model or chat)
    notice = ""
    if needs_credentials(chat, settings) or needs_credentials(summary, settings):
        notice = (
            "No OPENAI_API_KEY or OPENAI_BASE_URL is set, so chatbot uses its offline model, "
            "which only echoes. Set one in .env, or in your config file for every folder "
            "(chatbot config init), to talk to a real model."
        )
        chat = summary = OFFLINE_MODEL
    models = Models(
        chat=make_model(chat, settings, role="chat"),
        summary=make_model(summary, settings, role="summary"),
        chat_name=chat,
        summary_name=summary,
        notice=notice,
    )
    if not settings.openai_base_url:
        return models
    from chatbot.config.sources import endpoint_of
    from chatbot.engine.windows import BOOK

    endpoint = endpoint_of(settings.openai_base_url)
    notes = dict.fromkeys(BOOK.take_note(endpoint, name) for name in (chat, summary))
    return replace(models, notice=" ".join(note for note in notes if note))


def max_input_tokens(model: BaseChatModel) -> int | None:
    """The model's context size from its profile, if it publishes one."""
    profile = getattr(model, "profile", None) or {}
    value = profile.get("max_input_tokens")
    return int(value) if isinstance(value, int | float) and value > 0 else None
