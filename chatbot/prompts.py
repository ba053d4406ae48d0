"""The prompts: the summary's place in the conversation, and the create / extend prompts.

English and Chinese, chosen by ``CHATBOT_LANGUAGE``; the create and extend prompts can be
replaced by ``CHATBOT_SUMMARY_CREATE_PROMPT`` / ``CHATBOT_SUMMARY_EXTEND_PROMPT``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import get_buffer_string

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
            "You maintain the running memory of a conversation between a user and an "
            "assistant. The conversation to fold in is given as <message> elements. Write a "
            "summary that lets the assistant carry on as if it had read everything. Use these "
            "sections, in this order, each a list of short bullet points:\n"
            "## User: who the user is: name, role, location, preferences, personal details.\n"
            "## Facts: key details with their exact values: numbers, dates, names, amounts, "
            "file names, links, identifiers.\n"
            "## Decisions: what was decided or agreed, and why.\n"
            "## Open tasks: questions still open, tasks promised or pending.\n"
            "## Context: what the conversation is about and where it stands now.\n"
            "Write 'none' under a section with nothing in it. Never invent anything; leave out "
            "greetings and small talk. Write in the language the user writes in. Reply with "
            "the summary only, no preamble."
        ),
        extend_rules=(
            " When extending, keep every section and every point of the summary so far; when "
            "a newer message corrects or updates a point, write only the newest value."
        ),
        condense=(
            "The summary has grown past about {limit} tokens: rewrite it condensed to under "
            "{limit} tokens, merging repeated points but keeping every section and every "
            "name, number, preference, decision and open task."
        ),
        focus="For this summary, pay special attention to: {focus}",
        limit=" Keep it under about {limit} tokens.",
    ),
    "zh": PromptSet(
        summary_context="此前对话的摘要：{summary}",
        create="请为以上对话生成摘要：",
        extend="这是截至目前的对话摘要：{summary}\n\n请结合以上新消息扩展这份摘要：",
        instructions=(
            "你负责维护用户与助手之间对话的持续记忆。需要并入摘要的对话以 <message> 元素给出。"
            "请写一份摘要，使助手在只读摘要的情况下也能继续对话。按以下顺序使用这些小节，"
            "每节用简短的要点列出：\n"
            "## 用户：用户是谁：姓名、身份、所在地、偏好、个人信息。\n"
            "## 事实：关键细节及其确切取值：数字、日期、名称、金额、文件名、链接、标识符。\n"
            "## 决定：已做出或已商定的决定及原因。\n"
            "## 待办：尚未解决的问题，承诺或待办的任务。\n"
            "## 背景：对话的主题以及目前的进展。\n"
            "没有内容的小节写“无”。不要编造任何内容；省略寒暄。使用用户所用的语言。"
            "只输出摘要本身，不要前言。"
        ),
        extend_rules=(
            "扩展时保留现有摘要的每个小节和每个要点；若新消息更正或更新了某个要点，只写最新的值。"
        ),
        condense=(
            "摘要已超过约 {limit} 个 token：请将其精简到 {limit} 个 token 以内，"
            "合并重复内容，但保留每个小节以及所有姓名、数字、偏好、决定和待办任务。"
        ),
        focus="本次摘要请特别注意：{focus}",
        limit="摘要保持在约 {limit} 个 token 以内。",
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
) -> list[BaseMessage]:
    """What the chat model sees: system prompt, then the summary, then the messages."""
    head: list[BaseMessage] = []
    if system_prompt.strip():
        head.append(SystemMessage(content=system_prompt))
    if summary:
        head.append(summary_context_message(summary, language))
    return [*head, *messages]


def text_only(message: BaseMessage) -> BaseMessage:
    """The message as its readable text (:func:`chatbot.parts.readable_text`): each image,
    audio clip or file a marker, a link kept, each attachment set apart by a blank line."""
    if isinstance(message.content, str):
        return message
    return message.model_copy(update={"content": readable_text(message.content)})


def transcript(messages: Sequence[BaseMessage]) -> str:
    """The folded messages as unambiguous XML-like text (roles cannot be spoofed by content).

    Images and files appear as markers (``[image: cat.png]``, ``[image: https://…]``,
    ``[file: report.pdf]``): the summary notes them, and the checkpoint history keeps the
    blocks themselves.
    """
    readable = [text_only(message) for message in messages]
    return get_buffer_string(readable, human_prefix="user", ai_prefix="assistant", format="xml")


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
) -> list[BaseMessage]:
    """The summary model's input: instructions, the messages being folded, then the prompt.

    Only the messages being folded go in (not the ones that stay), plus the previous summary
    through the extend prompt. Past ``max_summary_tokens`` the prompt asks for condensing;
    ``focus`` (from ``/compact FOCUS``) is added for this summary only.
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
    body = f"<conversation>\n{transcript(messages)}\n</conversation>\n\n{prompt}"
    return [SystemMessage(content=instructions), HumanMessage(content=body)]
