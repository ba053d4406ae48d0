"""The user's memories: short facts about the user that every thread is given.

Pure rules, no I/O and no LangGraph: what a memory is, how the summary call's reply carries
new facts, how a newer fact supersedes an older one, and which memories a request carries.
:mod:`chatbot.engine.remembering` keeps them in LangGraph's ``BaseStore``.

Vocabulary:
- *memory*: one fact about the user or their preferences (``allergic to peanuts``), with the
  thread and message it came from and when; never the conversation itself.
- *noted*: a fact the model wrote in its ``<memories>`` section, new or replacing a memory
  (``replaces m3f2a1: lives in Porto``).
- *superseded*: a memory a newer one replaced; kept, marked, never sent again.
- *chosen*: the memories one request carries: all of them while they fit the budget, else the
  ones sharing most words with the latest messages.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from chatbot.errors import redact

Language = Literal["en", "zh"]
Origin = Literal["fold", "leave", "request", "added"]

OPEN, CLOSE = "<memories>", "</memories>"
"""The section of the summary call's reply that holds the noted facts."""
MAX_CHARS = 300
"""A memory is a short fact: a longer one is cut here."""
MAX_KNOWN = 60
"""At most this many known memories are shown to the summary model (to mark replacements)."""

_SECTION = re.compile(r"<memories>(.*?)(?:</memories>|\Z)", re.IGNORECASE | re.DOTALL)
_REPLACES = re.compile(
    r"^(?:replaces|取代|替换)\s+(m[0-9a-f]{4,12})\s*[:：]\s*(.+)$", re.IGNORECASE
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")
_NONE = {"none", "(none)", "nothing", "n/a", "无", "没有"}
_REQUEST = re.compile(
    r"^\s*(?:please\s+)?remember(?:\s+that|\s*:)\s*(.+?)\s*$"
    r"|^\s*(?:请)?记住[:：,，]?\s*(.+?)\s*$",
    re.IGNORECASE | re.DOTALL,
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@dataclass(frozen=True)
class Memory:
    """One memory as the store keeps it (its key is :attr:`id`)."""

    id: str
    text: str
    thread_id: str = ""
    """The thread it came from ('' for one added with ``/memory add`` outside a thread)."""
    message_id: str = ""
    """The message it came from, where one is known."""
    created_at: str = ""
    """When it was noted (ISO 8601, UTC)."""
    origin: Origin = "fold"
    replaces: str = ""
    """The id of the memory this one superseded."""
    superseded_by: str = ""
    """The id of the memory that replaced this one ('' while it is in force)."""
    superseded_at: str = ""

    @property
    def active(self) -> bool:
        """In force: not superseded."""
        return not self.superseded_by

    def value(self) -> dict[str, Any]:
        """The store's value for it (the id is the store's key)."""
        found = asdict(self)
        del found["id"]
        return found

    def record(self) -> dict[str, Any]:
        """The memory as JSON: its id, then the rest (exports)."""
        return asdict(self)

    @classmethod
    def from_value(cls, key: str, value: dict[str, Any]) -> Memory:
        """The memory a store item holds; unknown fields are left out, missing ones empty."""
        fields = {name: str(value.get(name) or "") for name in cls.__dataclass_fields__}
        fields["id"] = key
        if fields["origin"] not in ("fold", "leave", "request", "added"):
            fields["origin"] = "fold"
        return cls(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Noted:
    """A fact the model noted: its text, and the memory it replaces ('' for a new one)."""

    text: str
    replaces: str = ""


def new_id() -> str:
    """A new memory's id: short enough to type (``/memory forget m3f2a1``)."""
    return "m" + uuid.uuid4().hex[:6]


def clean(text: str) -> str | None:
    """The fact as it is stored: on one line, at most :data:`MAX_CHARS`; None for one holding
    a secret (anything :func:`chatbot.errors.redact` changes), never stored even redacted."""
    text = " ".join(str(text).split()).strip(" -*•")
    if not text or text.lower() in _NONE:
        return None
    if redact(text) != text:
        return None
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


# --- the summary call's part -------------------------------------------------------------

_ASK = {
    "en": (
        "{lead} a section {open}…{close}: durable facts about the user and "
        "their preferences stated in the <conversation> (name, where they live, allergies, "
        "languages and tools they use, likes and dislikes), one per line starting with '- ', "
        "in the user's language; not the conversation's topics or tasks, never a password or "
        "key. Write {open}{close} if there are none."
    ),
    "zh": (
        "{lead} {open}…{close} 小节：列出 <conversation> 中关于用户本人及其偏好的"
        "长期事实（姓名、住处、过敏、使用的语言和工具、喜好），每行一条，以 '- ' 开头，"
        "使用用户的语言；不要列对话的话题或任务，绝不写密码或密钥。没有则写 {open}{close}。"
    ),
}
_KNOWN = {
    "en": (
        " Already remembered (do not list these again unchanged): {known}. A fact that "
        "changes one of them starts 'replaces ID: ' (e.g. '- replaces {example}: lives in "
        "Porto')."
    ),
    "zh": (
        " 已记住的（不变的不要再列）：{known}。改变其中一条的事实以 'replaces ID: ' 开头"
        "（例如 '- replaces {example}: 住在波尔图'）。"
    ),
}


_LEAD = {
    "en": ("\n\nAfter the summary, add", "Write"),
    "zh": ("\n\n在摘要之后加一个", "写一个"),
}
LEAVING = {
    "en": "Read the <conversation> for what it tells about the user. Output only the section "
    "asked for.",
    "zh": "阅读 <conversation>，找出其中关于用户的信息。只输出要求的小节。",
}
"""The instructions of the call that reads a thread being left for facts alone."""


def facts_request(known: Sequence[Memory], language: Language = "en", alone: bool = False) -> str:
    """What the summary call's instructions add to ask for facts (``alone``: a call asking for
    them alone), with the known memories by id so a changed fact names the one it replaces."""
    lead = _LEAD[language][1 if alone else 0]
    ask = _ASK[language].format(lead=lead, open=OPEN, close=CLOSE)
    shown = [memory for memory in known if memory.active][-MAX_KNOWN:]
    if not shown:
        return ask
    listed = "; ".join(f"{memory.id}: {memory.text}" for memory in shown)
    return ask + _KNOWN[language].format(known=listed, example=shown[0].id)


def split_facts(reply: str) -> tuple[str, list[Noted]]:
    """The reply without its ``<memories>`` section, and the facts noted there, each once."""
    noted: list[Noted] = []
    seen: set[str] = set()
    for section in _SECTION.findall(reply):
        for line in section.splitlines():
            text = _BULLET.sub("", line).strip()
            replaced = _REPLACES.match(text)
            fact = clean(replaced[2] if replaced else text)
            if fact is None or fact.lower() in seen:
                continue
            seen.add(fact.lower())
            noted.append(Noted(fact, replaced[1].lower() if replaced else ""))
    summary = _SECTION.sub("", reply).strip()
    return summary, noted


def remember_request(text: str) -> str | None:
    """The fact a message asks to be remembered (``remember that I write Rust``), else None."""
    found = _REQUEST.match(text)
    if found is None:
        return None
    return clean(found[1] or found[2] or "")


# --- superseding -------------------------------------------------------------------------


@dataclass(frozen=True)
class Changes:
    """What noting some facts does to the store: new memories, and old ones now superseded."""

    added: list[Memory]
    superseded: list[Memory]

    @property
    def puts(self) -> list[Memory]:
        return [*self.superseded, *self.added]


def note(
    memories: Sequence[Memory],
    noted: Iterable[Noted],
    *,
    thread_id: str,
    message_id: str | Callable[[str], str] = "",
    now: str,
    origin: Origin = "fold",
    make_id: Callable[[], str] = new_id,
) -> Changes:
    """The new memories for ``noted`` facts, and the memories in force they supersede (a fact
    already remembered word for word is not added again). ``message_id`` is the source
    message, or finds it from the fact's text."""
    by_id = {memory.id: memory for memory in memories}
    known = {memory.text.lower() for memory in memories if memory.active}
    added: list[Memory] = []
    superseded: dict[str, Memory] = {}
    for fact in noted:
        old = by_id.get(fact.replaces)
        if fact.text.lower() in known and (old is None or old.text.lower() == fact.text.lower()):
            continue
        source = message_id(fact.text) if callable(message_id) else message_id
        memory = Memory(
            id=_unused(make_id, by_id),
            text=fact.text,
            thread_id=thread_id,
            message_id=source,
            created_at=_later(now, len(added)),
            origin=origin,
        )
        by_id[memory.id] = memory
        if old is not None and old.active and old.id not in superseded:
            memory = replace(memory, replaces=old.id)
            superseded[old.id] = replace(old, superseded_by=memory.id, superseded_at=now)
        known.add(fact.text.lower())
        added.append(memory)
    return Changes(added, list(superseded.values()))


def _unused(make_id: Callable[[], str], taken: dict[str, Memory]) -> str:
    """A new id that no memory has."""
    while (made := make_id()) in taken:
        pass
    return made


def _later(now: str, steps: int) -> str:
    """``now`` (ISO 8601) ``steps`` microseconds later: facts noted at once keep their order."""
    if not steps:
        return now
    try:
        moment = datetime.fromisoformat(now)
    except ValueError:
        return now
    return (moment + timedelta(microseconds=steps)).isoformat()


def source_of(fact: str, messages: Sequence[tuple[str, str]]) -> str:
    """The id of the user's message (``(id, text)`` pairs) sharing most of the fact's words,
    the latest on a tie; '' when there are none."""
    words = terms(fact)
    best, best_score = "", -1
    for message_id, text in messages:
        score = len(words & terms(text))
        if score >= best_score:
            best, best_score = message_id, score
    return best


# --- which memories a request carries -----------------------------------------------------


def terms(text: str) -> set[str]:
    """A text's lower-cased words of two letters or more, and its pairs of CJK characters."""
    found: set[str] = set()
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            chars = [c for c in word if _CJK.match(c)]
            found.update(a + b for a, b in itertools.pairwise(chars))
            found.update(chars if len(chars) == 1 else ())
        elif len(word) > 1:
            found.add(word)
    return found


def choose(
    memories: Sequence[Memory], query: str, budget: int, count: Callable[[str], int]
) -> list[Memory]:
    """The memories in force one request carries, in the order noted: all while they fit
    ``budget`` tokens, else those sharing most words with ``query`` (newest first on a tie)."""
    active = [memory for memory in memories if memory.active]
    sizes = {memory.id: count(line(memory)) for memory in active}
    if sum(sizes.values()) <= budget:
        return active
    words = terms(query)
    order = {memory.id: index for index, memory in enumerate(active)}
    ranked = sorted(active, key=lambda m: (len(words & terms(m.text)), order[m.id]), reverse=True)
    chosen: set[str] = set()
    used = 0
    for memory in ranked:
        if used + sizes[memory.id] <= budget:
            chosen.add(memory.id)
            used += sizes[memory.id]
    return [memory for memory in active if memory.id in chosen]


_HEADING = {
    "en": "What you remember about the user from earlier conversations (use it where it helps):",
    "zh": "你记得的关于用户的信息（来自之前的对话，在有帮助时使用）：",
}


def line(memory: Memory) -> str:
    """A memory as the request writes it."""
    return f"- {memory.text}"


def render(memories: Sequence[Memory], language: Language = "en") -> str:
    """The memories block of a request ('' for none)."""
    if not memories:
        return ""
    return "\n".join([_HEADING[language], *(line(memory) for memory in memories)])


def find(memories: Sequence[Memory], id_or_text: str) -> list[Memory]:
    """The memory with that id, else those whose text holds it (``/memory forget``)."""
    wanted = id_or_text.strip()
    exact = [memory for memory in memories if memory.id == wanted.lower()]
    if exact or not wanted:
        return exact
    folded = wanted.casefold()
    return [memory for memory in memories if folded in memory.text.casefold()]


def from_thread(memories: Sequence[Memory], thread_id: str) -> list[Memory]:
    """The memories noted in ``thread_id``."""
    return [memory for memory in memories if memory.thread_id == thread_id]
