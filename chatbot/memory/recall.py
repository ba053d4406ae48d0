"""Recall: the chat model reads folded messages again, word for word, through a tool.

A summary keeps the gist; the exact words of a folded message live on in the thread's history.
Once a thread has a summary, the chat model is offered ``recall(query)``, which searches its
folded messages and returns the best few verbatim. Pure: what the tool is, what its answer
says, and which rounds a turn may still make (:mod:`chatbot.engine.recalling` runs it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from chatbot.memory.recall_search import Recalled

TOOL_NAME = "recall"
MAX_HITS = 4
"""Messages one recall returns at most (newest first)."""
MAX_ROUNDS = 2
"""Tool rounds a turn may make; the round after them is offered no tool, so it answers."""
HIT_CHARS = 1_500
"""A longer message is cut to this many characters in the tool's answer (it says so)."""

TOOL_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Read summarized earlier messages word for word",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "words they contain"}},
            "required": ["query"],
        },
    },
}
"""The tool as OpenAI-compatible providers take it (LangChain's ``bind_tools`` accepts it)."""

NOTE = {
    "en": "(recall reads the summarized messages word for word.)",
    "zh": "（recall 工具可读取被摘要的原话。）",
}
"""What the summary's system message adds when recall is offered."""


def definition_tokens(counter: Any) -> int:
    """Tokens the tool's definition adds to a request that offers it, as ``counter`` counts it."""
    return int(counter.text(_SPEC_TEXT))


_SPEC_TEXT = (
    "namespace functions {\n// Read summarized earlier messages word for word\ntype recall = "
    "(_: {\n// words they contain\nquery: string,\n}) => any;\n} // namespace functions"
)
"""The definition as OpenAI's models are shown it (what a provider counts, not the JSON)."""


def rounds_this_turn(messages: Sequence[BaseMessage]) -> int:
    """Tool rounds made since the latest user message."""
    rounds = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, AIMessage) and message.tool_calls:
            rounds += 1
    return rounds


def wants_tools(message: BaseMessage | None) -> bool:
    """True for a reply that asks for tools (the graph runs them, then asks again)."""
    return isinstance(message, AIMessage) and bool(message.tool_calls)


def distinct(hits: Sequence[Recalled], window: set[str]) -> list[Recalled]:
    """The hits worth returning, at most :data:`MAX_HITS`: folded (not in the ``window`` of
    message ids), not a tool's answer (an earlier recall's), each text once (the newest)."""
    seen: set[str] = set()
    found: list[Recalled] = []
    for hit in hits:
        key = " ".join(hit.text.split())
        if hit.message_id in window or hit.role == "tool" or key in seen:
            continue
        seen.add(key)
        found.append(hit)
        if len(found) == MAX_HITS:
            break
    return found


def answer(query: str, found: Sequence[Recalled], *, searched: bool = True) -> str:
    """The tool's answer: the messages found, verbatim, each with its role, time and
    checkpoint; or one line saying there is nothing (or nothing folded) to find."""
    query = " ".join(query.split())
    if not query:
        return "recall needs a query: a few words the earlier message holds."
    if not searched:
        return "Nothing has been folded in this conversation yet: there is nothing to recall."
    if not found:
        return f"No folded message holds {query!r}. Try fewer or other words."
    parts = [f"{len(found)} earlier message(s) holding {query!r}, newest first:"]
    for hit in found:
        text = hit.text
        if len(text) > HIT_CHARS:
            text = text[:HIT_CHARS] + f"… [cut: {len(hit.text):,} characters in all]"
        when = f" {hit.time}" if hit.time else ""
        parts.append(f"[{hit.role}{when}, checkpoint {hit.checkpoint_id}]\n{text}")
    return "\n\n".join(parts)


_REFUSES_TOOLS = re.compile(
    r"\btool(?:s|_choice|_calls?)?\b.{0,80}\b(?:not supported|unsupported|not support|"
    r"not available|not allowed|unknown|unrecognized|invalid|not enabled)\b"
    r"|\b(?:not support|does not support|doesn't support|unsupported|unrecognized|unknown)"
    r"\b.{0,80}\btool(?:s|_choice|_calls?)?\b",
    re.IGNORECASE | re.DOTALL,
)


def refuses_tools(error: BaseException) -> bool:
    """True for a provider's error that says the model takes no tools."""
    if isinstance(error, NotImplementedError):
        return True
    return bool(_REFUSES_TOOLS.search(str(error)))


def query_of(call: Mapping[str, Any]) -> str:
    """The query a tool call asks for ('' when it names none)."""
    args: Any = call.get("args")
    if isinstance(args, dict):
        value = args.get("query")
        if value is None and len(args) == 1:  # (a model that named the argument otherwise)
            value = next(iter(args.values()))
        return " ".join(str(value or "").split())
    return " ".join(str(args or "").split())


# --- the offline model's rule ----------------------------------------------------------------

_RECALL_COMMAND = re.compile(r"^\s*(?:recall|回忆|回想)\s*[:：]?\s*(.+?)\s*$", re.I | re.S)
_EARLIER_EN = re.compile(
    r"\b(?:earlier|before|said|say|told|tell you|mentioned|mention|remember|previously|"
    r"last time|again|my|our|i|me|am|now|still|currently|the)\b",
    re.I,
)
_QUESTION_EN = re.compile(
    r"^\s*(?:what|which|where|when|who|how|at what|do you|did i|can you remind)\b", re.I
)
_ASKED = re.compile(r"[^?？]*[?？]")
_EARLIER_ZH = re.compile(r"之前|刚才|早先|先前|以前|说过|提到|提过|记得|告诉过")
_STOP_WORDS_EN = (
    "a about again all am an and any are as at be before currently in now still did do "
    "does earlier exactly for "
    "from gave give had has have how i i'd i'm is it it's last me mention mentioned my of "
    "on or our please previously remember remind said say so tell that the then there "
    "this time to told us was we were what when where which who why you your"
)
_STOP_EN = frozenset(_STOP_WORDS_EN.split())
_STOP_ZH = re.compile(
    r"之前|刚才|早先|先前|以前|说过|提到过|提到|提过|记得|告诉过你|告诉过|告诉|说|你还|还|我们|我的|你|"
    r"的|了|吗|呢|是什么|是多少|是哪|什么|哪个|哪里|多少|请|一下|现在|目前|[？?。，,！!：:]"
)
_QUESTION_ZH = re.compile(r"[?？]|什么|多少|哪|几|吗")
_ABOUT_ME_ZH = re.compile(r"我|现在")
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def offline_query(text: str) -> str | None:
    """What the offline model recalls for a user message: ``recall X`` recalls X, a question
    about something said earlier its content words; else None."""
    command = _RECALL_COMMAND.match(text)
    if command:
        return " ".join(command.group(1).split()) or None
    asked = _ASKED.match(text)
    if asked:  # (the question itself, not what follows it: "... ? Answer briefly.")
        text = asked.group(0)
    if _EARLIER_ZH.search(text) or (
        _HAN.search(text) and _QUESTION_ZH.search(text) and _ABOUT_ME_ZH.search(text)
    ):
        return " ".join(_zh_terms(_STOP_ZH.sub(" ", text).split())) or None
    if _EARLIER_EN.search(text) and _QUESTION_EN.search(text):
        words = re.findall(r"[\w-]+(?:'(?!s\b)\w+)?", text.lower())  # ("dog's": "dog")
        content = [w for w in words if w not in _STOP_EN and w != "s"]
        return " ".join(content) or None
    return None


def _zh_terms(chunks: list[str]) -> list[str]:
    """Chinese chunks as overlapping pairs of characters (a pair also as its characters), so
    ``牙医预约是几点`` finds ``我的牙医预约在周四``."""
    terms: list[str] = []
    for chunk in chunks:
        if len(chunk) <= 1 or not _HAN.search(chunk):
            terms.append(chunk)
        elif len(chunk) == 2:
            terms.extend([chunk, chunk[0], chunk[1]])
        else:
            terms.extend(chunk[i : i + 2] for i in range(len(chunk) - 1))
    return list(dict.fromkeys(terms))[:12]
