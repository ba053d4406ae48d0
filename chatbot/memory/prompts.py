"""The prompts: the summary's place in the conversation, and the create / extend prompts.

English and Chinese, chosen by ``CHATBOT_LANGUAGE``; the create and extend prompts can be
replaced by ``CHATBOT_SUMMARY_CREATE_PROMPT`` / ``CHATBOT_SUMMARY_EXTEND_PROMPT``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from xml.sax.saxutils import escape

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import get_buffer_string

from chatbot.memory.recall import NOTE as RECALL_NOTE
from chatbot.memory.recall import TOOL_NAME as RECALL_TOOL
from chatbot.memory.recall import query_of
from chatbot.parts import readable_text

Language = Literal["en", "zh"]


@dataclass(frozen=True)
class PromptSet:
    """The texts of one language."""

    summary_context: str
    create: str
    extend: str
    instructions: str
    extend_rules: str
    condense: str
    focus: str
    limit: str


PROMPTS: dict[str, PromptSet] = {
    "en": PromptSet(
        summary_context="Summary of conversation earlier: {summary}",
        create="Create a summary of the conversation above:",
        extend=(
            "This is summary of the conversation to date: {summary}\n\n"
            "Extend the summary by taking into account the new messages above:"
        ),
        instructions=(
            "Summarize the <conversation> in terse bullets under ## User, ## Facts (exact "
            "values), ## Decisions, ## Open tasks, ## Context; skip empty ones. Invent "
            "nothing. Use the user's language. Output only the summary."
        ),
        extend_rules=" Keep earlier points; newer values win.",
        condense=(
            "The summary has grown past about {limit} tokens: rewrite it condensed to under "
            "{limit} tokens, merging repeated points but keeping every section and every "
            "name, number, preference, decision and open task."
        ),
        focus="For this summary, pay special attention to: {focus}",
        limit=" At most {limit} tokens.",
    ),
    "zh": PromptSet(
        summary_context="此前对话的摘要：{summary}",
        create="请为以上对话生成摘要：",
        extend="这是截至目前的对话摘要：{summary}\n\n请结合以上新消息扩展这份摘要：",
        instructions=(
            "用简短要点总结 <conversation>，分列于 ## 用户、## 事实（确切的值）、## 决定、"
            "## 待办、## 背景之下；没有内容的标题省略。不要编造。使用用户的语言。只输出摘要。"
        ),
        extend_rules="保留之前的要点；新值取代旧值。",
        condense=(
            "摘要已超过约 {limit} 个 token：请将其精简到 {limit} 个 token 以内，"
            "合并重复内容，但保留每个小节以及所有姓名、数字、偏好、决定和待办任务。"
        ),
        focus="本次摘要请特别注意：{focus}",
        limit="最多 {limit} 个 token。",
    ),
}


def summary_context_message(summary: str, language: Language = "en") -> SystemMessage:
    """The SystemMessage that carries the summary into the conversation (never stored)."""
    return SystemMessage(content=PROMPTS[language].summary_context.format(summary=summary))


def conversation_input(
    messages: Sequence[BaseMessage],
    summary: str,
    system_prompt: str = "",
    language: Language = "en",
    recall: bool = False,
    memories: str = "",
) -> list[BaseMessage]:
    """What the chat model sees: system prompt, memories, summary, messages; with ``recall``
    the summary's message says older messages can be read again."""
    head = _head(summary, system_prompt, language, recall and bool(summary), memories)
    return [*head, *messages]


@functools.lru_cache(maxsize=8)
def _head(
    summary: str, system_prompt: str, language: Language, recall: bool = False, memories: str = ""
) -> tuple[BaseMessage, ...]:
    # The same messages are asked for by every router and node of a turn: made once.
    head: list[BaseMessage] = []
    if system_prompt.strip():
        head.append(SystemMessage(content=system_prompt))
    if memories:
        head.append(SystemMessage(content=memories))
    if summary:
        message = summary_context_message(summary, language)
        if recall:
            message = SystemMessage(content=f"{message.text}\n\n{RECALL_NOTE[language]}")
        head.append(message)
    return tuple(head)


def text_only(message: BaseMessage) -> BaseMessage:
    """The message as its readable text (:func:`chatbot.parts.readable_text`): each image,
    audio clip or file a marker, a link kept, each attachment set apart by a blank line."""
    if isinstance(message.content, str):
        return message
    return message.model_copy(update={"content": readable_text(message.content)})


def transcript(messages: Sequence[BaseMessage]) -> str:
    """The folded messages as unambiguous XML-like text (roles cannot be spoofed by content),
    media as markers (``[image: cat.png]``)."""
    return "\n".join(_element(text_only(message)) for message in messages)


def _element(message: BaseMessage) -> str:
    """One message as ``get_buffer_string(..., format="xml")`` writes it, with ``<user>...</user>``
    for ``<message type="user">...</message>`` (half the tokens, as safe: content is escaped)."""
    content = message.content
    recalled = _recall_element(message)
    if recalled is not None:
        return recalled
    if isinstance(content, str) and (
        isinstance(message, HumanMessage)
        or (
            isinstance(message, AIMessage)
            and not message.tool_calls
            and "function_call" not in message.additional_kwargs
        )
    ):
        role = "user" if isinstance(message, HumanMessage) else "assistant"
        return f"<{role}>{escape(content)}</{role}>"
    xml = get_buffer_string([message], human_prefix="user", ai_prefix="assistant", format="xml")
    return _ELEMENT.sub(r"<\1>\2</\1>", xml)


def _recall_element(message: BaseMessage) -> str | None:
    """A recall round, compactly: the call as ``[recall "query"]``, its answer as its first line
    (the words it returned are folded messages the summary has read)."""
    if isinstance(message, AIMessage) and message.tool_calls:
        if any(call.get("name") != RECALL_TOOL for call in message.tool_calls):
            return None
        calls = " ".join(f"[recall {query_of(call)!r}]" for call in message.tool_calls)
        text = message.text.strip()
        return f"<assistant>{escape(f'{text} {calls}' if text else calls)}</assistant>"
    if isinstance(message, ToolMessage) and message.name == RECALL_TOOL:
        first = message.text.split("\n", 1)[0]
        return f"<tool>{escape('[recall: ' + first + ']')}</tool>"
    return None


_ELEMENT = re.compile(r'<message type="([\w-]+)">(.*?)</message>', re.DOTALL)


def summary_request(
    messages: Sequence[BaseMessage],
    summary: str,
    *,
    language: Language = "en",
    max_summary_tokens: int | None = None,
    summary_tokens: int = 0,
    create_prompt: str | None = None,
    extend_prompt: str | None = None,
    focus: str = "",
    facts: str = "",
) -> list[BaseMessage]:
    """The summary model's input: instructions, the messages being folded, then the prompt
    (extending the previous summary; condensing it past ``max_summary_tokens``). ``facts``
    (:func:`chatbot.memory.facts.facts_request`) ends the instructions.
    """
    texts = PROMPTS[language]
    instructions = texts.instructions
    if summary:
        prompt = (extend_prompt or texts.extend).replace("{summary}", summary)
        instructions += texts.extend_rules
        if max_summary_tokens and summary_tokens > max_summary_tokens:
            prompt += "\n\n" + texts.condense.format(limit=max_summary_tokens)
    else:
        prompt = create_prompt or texts.create
    if focus.strip():
        prompt += "\n\n" + texts.focus.format(focus=" ".join(focus.split()))
    if max_summary_tokens:
        instructions += texts.limit.format(limit=max_summary_tokens)
    instructions += facts
    body = f"<conversation>\n{transcript(messages)}\n</conversation>\n\n{prompt}"
    return [SystemMessage(content=instructions), HumanMessage(content=body)]
