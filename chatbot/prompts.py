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

Language = Literal["en", "zh"]


@dataclass(frozen=True)
class PromptSet:
    """The texts of one language."""

    summary_context: str
    create: str
    extend: str
    instructions: str
    condense: str


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
            "summary that lets the assistant carry on as if it had read everything. Keep every "
            "fact about the user: names, preferences, personal details, decisions made, "
            "questions still open and tasks promised or pending, with concrete numbers, dates "
            "and names. Use short sections (User, Facts, Decisions, Open tasks) with bullet "
            "points; leave out greetings and small talk. Never invent anything. Write in the "
            "language the user writes in. Reply with the summary only, no preamble."
        ),
        condense=(
            "The summary has grown past about {limit} tokens: rewrite it condensed to under "
            "{limit} tokens, merging repeated points but keeping every name, preference, "
            "decision and open task."
        ),
    ),
    "zh": PromptSet(
        summary_context="此前对话的摘要：{summary}",
        create="请为以上对话生成摘要：",
        extend="这是截至目前的对话摘要：{summary}\n\n请结合以上新消息扩展这份摘要：",
        instructions=(
            "你负责维护用户与助手之间对话的持续记忆。需要并入摘要的对话以 <message> 元素给出。"
            "请写一份摘要，使助手在只读摘要的情况下也能继续对话。保留关于用户的所有事实："
            "姓名、偏好、个人信息、已做出的决定、尚未解决的问题以及承诺或待办的任务，"
            "保留具体的数字、日期和名称。用简短的小节（用户、事实、决定、待办）和要点列出；"
            "省略寒暄。不要编造任何内容。使用用户所用的语言。只输出摘要本身，不要前言。"
        ),
        condense=(
            "摘要已超过约 {limit} 个 token：请将其精简到 {limit} 个 token 以内，"
            "合并重复内容，但保留所有姓名、偏好、决定和待办任务。"
        ),
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


def transcript(messages: Sequence[BaseMessage]) -> str:
    """The folded messages as unambiguous XML-like text (roles cannot be spoofed by content)."""
    return get_buffer_string(messages, human_prefix="user", ai_prefix="assistant", format="xml")


def summary_request(
    messages: Sequence[BaseMessage],
    summary: str,
    *,
    language: Language = "en",
    max_summary_tokens: int | None = None,
    summary_tokens: int = 0,
    create_prompt: str | None = None,
    extend_prompt: str | None = None,
) -> list[BaseMessage]:
    """The summary model's input: instructions, the messages being folded, then the prompt.

    Only the messages being folded go in (not the ones that stay), plus the previous summary
    through the extend prompt. Past ``max_summary_tokens`` the prompt asks for condensing.
    """
    prompts = PROMPTS[language]
    if summary:
        prompt = (extend_prompt or prompts.extend).replace("{summary}", summary)
        if max_summary_tokens and summary_tokens > max_summary_tokens:
            prompt += "\n\n" + prompts.condense.format(limit=max_summary_tokens)
    else:
        prompt = create_prompt or prompts.create
    instructions = prompts.instructions
    if max_summary_tokens:
        instructions += (
            f" Keep it under about {max_summary_tokens} tokens."
            if language == "en"
            else f" 摘要保持在约 {max_summary_tokens} 个 token 以内。"
        )
    body = f"<conversation>\n{transcript(messages)}\n</conversation>\n\n{prompt}"
    return [SystemMessage(content=instructions), HumanMessage(content=body)]
