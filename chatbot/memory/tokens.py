"""Token counts: the model family's real tokenizer where one ships offline, else an estimate.

One counter serves every decision and display: the trigger, the keep budget, the chunker, the
guard that folds before a call, ``/tokens``, ``/context`` and the status line; a request is
counted part by part with it in :mod:`chatbot.memory.sent`.

Vocabulary:
- *tokenizer*: counts the tokens of a text: OpenAI's real vocabularies ``o200k_base`` and
  ``cl100k_base`` from the ``bpe-openai`` wheel (no network), else ``estimate``
  (:func:`estimate_tokens`), calibrated on o200k_base.
- *raw count*: what the tokenizer says, plus a small per-message overhead (role markers).
- *usage scale*: the provider's reported ``input_tokens`` over our raw count of the request,
  which the conversation node records on each reply (:data:`USAGE_KEY`); every count is
  scaled by the newest reply's.

Pure computation: no I/O beyond loading the tokenizer library, no LangGraph.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

MESSAGE_OVERHEAD = 4
"""Tokens a chat message costs beyond its text (OpenAI: start, role, separator, end)."""
MEDIA_TOKENS = 1_000
"""What an image or file block is counted as; the provider's usage corrects it after a reply."""
TOOL_CALL_OVERHEAD = 8
USAGE_KEY = "chatbot_counted"
"""Key in a reply's ``response_metadata``: our raw count of the request it answered."""

_O200K_PREFIXES: tuple[str, ...] = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o")
_O200K_PREFIXES += ("gpt-oss", "o1", "o3", "o4", "codex-")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")


def encoding_for_model(model: str) -> str | None:
    """OpenAI's encoding for a model name (``openai/gpt-4o`` and dated names too), else None."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return None


# --- tokenizers ---------------------------------------------------------------------------------


MESSAGES_REMEMBERED = 8_192
"""Messages whose count a tokenizer keeps (:meth:`TokenCounter.raw_message`)."""


@dataclass(frozen=True, eq=False)
class Tokenizer:
    """A named way of counting the tokens of a text. Each one is made once (the estimate, and
    each vocabulary, by :func:`bpe_tokenizer`), so tokenizers compare as objects."""

    name: str
    count_text: Callable[[str], int]
    counted: dict[str, tuple[str, str | None, int]] = field(default_factory=dict, repr=False)
    """Messages' counts by message id, with the content and name they were counted for."""

    def count(self, text: str) -> int:
        """Tokens in ``text`` (0 for an empty text)."""
        return _cached_count(self, text) if text else 0


@functools.lru_cache(maxsize=16_384)
def _cached_count(tokenizer: Tokenizer, text: str) -> int:
    # Conversations are counted again on every turn; each message's text is counted once.
    return tokenizer.count_text(text)


@functools.cache
def _ascii_chunks() -> re.Pattern[str]:
    """ASCII text in pieces of one token each, as :func:`estimate_tokens` counts it: a word
    in chunks of up to 9 letters, digits and punctuation in chunks of up to 3, a line break
    or a run of blanks whole."""
    return re.compile(r"[A-Za-z]{1,9}|\d{1,3}|[ \t]*\n\s*|[ \t]{2,}|[^\w\s]{1,3}")


def _class_table(member: Any, mark: str) -> bytes:
    """A ``bytes.translate`` table: ASCII that ``member`` accepts to ``mark``, the rest blank."""
    return bytes(ord(mark) if c < 128 and member(chr(c)) else 32 for c in range(256))


_ASCII_CLASSES = tuple(
    (
        _class_table(member, mark),
        f" {mark}".encode(),
        mark.encode(),
        (mark * (size + 1)).encode(),
        size,
    )
    for member, mark, size in (
        (str.isalpha, "a", 9),  # [A-Za-z]{1,9}
        (str.isdigit, "d", 3),  # \d{1,3}
        (lambda c: not (c.isalnum() or c == "_" or c.isspace()), "p", 3),  # [^\w\s]{1,3}
    )
)
"""Letters, digits and marks, each with the size of :func:`_ascii_chunks`' chunks of them."""


def _ascii_tokens(text: str) -> int:
    """``len(_ascii_chunks().findall(text))`` for an ASCII ``text``; without line breaks,
    tabs or runs of blanks, counted by byte translation, cheaper than the regex over prose."""
    if "\n" in text or "\t" in text or "  " in text:
        return len(_ascii_chunks().findall(text))
    data = text.encode("ascii")
    total = 0
    for table, start, first, longer, size in _ASCII_CLASSES:
        marked = data.translate(table)
        if longer in marked:  # (a run of more than one chunk: count each)
            total += sum((len(run) + size - 1) // size for run in marked.split())
        else:
            total += marked.count(start) + marked.startswith(first)
    return total


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """CJK, Hangul and the pieces the rest is counted by: compiled at the first count, not at
    import (reading commands never count)."""
    return (
        re.compile(
            "[\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
            "\uf900-\ufaff\U00020000-\U0002fa1f]"
        ),
        re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]"),
        # (a single blank joins the next word: it is no piece, and counts nothing)
        re.compile(r"[A-Za-z]+|[^\W\d_]+|\d+|[ \t]*\n\s*|[ \t]{2,}|[^\w\s]+"),
    )


def estimate_tokens(text: str, lines: LineCounts | None = None) -> int:
    """A script-aware estimate of a modern BPE tokenizer's count (calibrated on o200k_base):
    CJK ~0.7 tokens a character, Hangul ~0.6; an ASCII word 1 per 9 letters, other letters 1
    per 4; digits in threes; punctuation 1 per 3 ASCII marks plus 1 per symbol; runs of blanks
    and line breaks 1 each. With ``lines`` (a cache the caller keeps) a long text is counted
    line by line, so a summary extended by a few lines costs only those.
    """
    if not text:
        return 0
    if lines is None or len(text) < _LINE_SPLIT_FROM or "\n" not in text:
        cjk, hangul, whole = _pieces(text, False, False)
    else:
        parts = _line_breaks().split(text)
        last = len(parts) - 1
        cjk = hangul = 0
        whole = last  # each run of line breaks is one token
        for index, line in enumerate(parts):
            if not line:
                continue
            key = (line, index > 0, index < last)
            known = lines.get(key)
            if known is None:
                if len(lines) >= _LINES_REMEMBERED:
                    lines.clear()  # (bounded; thread-safe where evicting one at a time is not)
                known = lines[key] = _pieces(line, index > 0, index < last)
            cjk, hangul, whole = cjk + known[0], hangul + known[1], whole + known[2]
    return max(1, math.ceil(cjk * 0.7 + hangul * 0.6 + whole))


_LINE_SPLIT_FROM = 512
"""Texts from this many characters up are counted line by line when a line cache is given."""
_LINES_REMEMBERED = 16_384


@functools.cache
def _line_breaks() -> re.Pattern[str]:
    """A run of line breaks, with the blanks around it: one piece, as the estimate counts."""
    return re.compile(r"[ \t]*\n\s*")


LineCounts = dict[tuple[str, bool, bool], tuple[int, int, int]]
"""Lines' counts for :func:`estimate_tokens`: CJK characters, Hangul syllables, other tokens."""


def _pieces(text: str, after_break: bool, before_break: bool) -> tuple[int, int, int]:
    """The CJK characters, Hangul syllables and other tokens of ``text``; ``after_break`` /
    ``before_break``: a line whose break at that end absorbs the blanks there."""
    if text.isascii():  # (whole tokens only: no fractions to add up)
        return 0, 0, _ascii_tokens(text)
    cjk_pattern, hangul_pattern, piece_pattern = _patterns()
    rest, cjk = cjk_pattern.subn(" ", text)
    rest, hangul = hangul_pattern.subn(" ", rest)
    if not (cjk or hangul or "\n" in text or "\t" in text or "  " in text) and text.strip() == text:
        # (words between single blanks, no CJK or Hangul: a curly quote or an accent does not
        # send the ASCII words around it through the regex; no piece spans a blank)
        plain: list[str] = []
        other: list[str] = []
        for word in text.split():
            (plain if word.isascii() else other).append(word)
        return 0, 0, _ascii_tokens(" ".join(plain)) + _piece_tokens(" ".join(other), piece_pattern)
    if after_break:
        rest = rest.lstrip()
        if not rest and before_break:  # (the breaks on both sides are one piece)
            return cjk, hangul, -1
    if before_break:
        rest = rest.rstrip(" \t")
    return cjk, hangul, _piece_tokens(rest, piece_pattern)


def _piece_tokens(rest: str, piece_pattern: re.Pattern[str]) -> int:
    """The tokens of the pieces of a text whose CJK and Hangul are blanked out."""
    total = 0
    for piece in piece_pattern.findall(rest):
        first = piece[0]
        if first.isalpha():
            total += 1 + (len(piece) - 1) // 9 if first.isascii() else math.ceil(len(piece) / 4)
        elif first.isdigit():
            total += math.ceil(len(piece) / 3)
        elif first.isspace():  # a line break, or a run of blanks
            total += 1
        else:
            ascii_marks = sum(1 for char in piece if char.isascii())
            total += math.ceil(ascii_marks / 3) + (len(piece) - ascii_marks)
    return total


_ESTIMATE_LINES: LineCounts = {}
"""The estimate tokenizer's cache of lines (:func:`estimate_tokens`)."""

ESTIMATE = Tokenizer("estimate", functools.partial(estimate_tokens, lines=_ESTIMATE_LINES))

_load_lock = threading.Lock()


@functools.cache
def bpe_tokenizer(encoding: str) -> Tokenizer | None:
    """OpenAI's real vocabulary ``encoding`` from bpe-openai; None if it cannot be loaded."""
    with _load_lock:
        try:
            import bpe_openai

            vocabulary = bpe_openai.get_encoding(encoding)
        except Exception:  # not installed, or a platform without a wheel: estimate instead
            return None

    def count(text: str) -> int:
        return sum(len(vocabulary.encode_ordinary(piece)) for piece in _slices(text))

    return Tokenizer(encoding, count)


PIECE = 100_000
"""The most characters bpe-openai is given at once (it refuses very long texts)."""


def _slices(text: str) -> Iterator[str]:
    """``text`` in pieces of at most :data:`PIECE` characters, cut before a blank where there is
    one (a word starts with the blank before it, so no word's tokens change)."""
    start = 0
    while len(text) - start > PIECE:
        end = start + PIECE
        blank = text.rfind(" ", start + 1, end)
        end = blank if blank > start + PIECE // 2 else end
        yield text[start:end]
        start = end
    yield text[start:]


def tokenizer_for(model: str, choice: str = "auto") -> Tokenizer:
    """The tokenizer for a model: ``choice`` when it names one, else the model family's."""
    encoding = encoding_for_model(model) if choice == "auto" else choice
    if encoding in (None, "estimate"):
        return ESTIMATE
    return bpe_tokenizer(encoding) or ESTIMATE


# --- counting messages ------------------------------------------------------------------------


def _block_tokens(block: Any, tokenizer: Tokenizer) -> int:
    if isinstance(block, str):
        return tokenizer.count(block)
    if not isinstance(block, dict):
        return tokenizer.count(str(block))
    kind = block.get("type")
    if kind == "text" or (kind is None and "text" in block):
        return tokenizer.count(str(block.get("text") or ""))
    if kind in ("tool_use", "tool_call", "function_call"):
        return tokenizer.count(str(block.get("name") or "")) + tokenizer.count(
            str(block.get("input") or block.get("args") or "")
        )
    return MEDIA_TOKENS  # image, image_url, file, audio, ...


def content_tokens(content: Any, tokenizer: Tokenizer) -> int:
    """Tokens of a message's content: a string, or a list of content blocks."""
    if isinstance(content, str):
        return tokenizer.count(content)
    if isinstance(content, list):
        return sum(_block_tokens(block, tokenizer) for block in content)
    return tokenizer.count(str(content or ""))


@dataclass(frozen=True)
class TokenCounter:
    """Counts messages with one tokenizer, scaled by the provider's reported usage."""

    tokenizer: Tokenizer = ESTIMATE

    @property
    def name(self) -> str:
        return self.tokenizer.name

    def text(self, text: str) -> int:
        """Tokens of a plain text (no message overhead, no scaling)."""
        return self.tokenizer.count(text)

    def raw_message(self, message: BaseMessage) -> int:
        """One message's tokens before usage scaling; a message with an id and text content is
        counted once (kept with the content and name it was counted for)."""
        content, key = message.content, message.id
        if key is None or not isinstance(content, str) or _has_tool_calls(message):
            return self._raw_message(message)
        counted = self.tokenizer.counted
        known = counted.get(key)
        if known is not None and known[0] == content and known[1] == message.name:
            return known[2]
        tokens = self._raw_message(message)
        if len(counted) >= MESSAGES_REMEMBERED:
            counted.clear()  # (bounded; thread-safe where evicting one at a time is not)
        counted[key] = (content, message.name, tokens)
        return tokens

    def _raw_message(self, message: BaseMessage) -> int:
        tokens = MESSAGE_OVERHEAD + content_tokens(message.content, self.tokenizer)
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                tokens += TOOL_CALL_OVERHEAD + self.tokenizer.count(str(call.get("name") or ""))
                tokens += self.tokenizer.count(_arguments(call.get("args")))
        if message.name:
            tokens += self.tokenizer.count(message.name)
        return tokens

    def raw(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of messages before usage scaling."""
        return sum(self.raw_message(message) for message in messages)

    def scale(self, messages: Sequence[BaseMessage]) -> float:
        """The provider's count over ours for the newest reply that carries both (else 1.0)."""
        for message in reversed(messages):
            if not isinstance(message, AIMessage):
                continue
            factor = usage_scale(message, self.tokenizer.name)
            if factor is not None:
                return factor
        return 1.0

    def messages(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of messages as the provider would count them (usage-scaled)."""
        return self.scaled(self.raw(messages), messages)

    def scaled(self, raw: int, messages: Sequence[BaseMessage]) -> int:
        """:meth:`messages` of messages whose :meth:`raw` count is ``raw``."""
        return math.ceil(raw * self.scale(messages)) if messages else 0

    def part(self, part: Sequence[BaseMessage], messages: Sequence[BaseMessage]) -> int:
        """Tokens of ``part``, some of ``messages``, as a request of ``messages`` counts them
        (usage-scaled as it is): what a fold takes out of it, and what was folded."""
        return self.scaled(self.raw(part), messages) if part else 0

    def per_message(self, messages: Sequence[BaseMessage]) -> list[int]:
        """Each message's tokens, usage-scaled like :meth:`messages`."""
        factor = self.scale(messages)
        return [max(1, math.ceil(self.raw_message(m) * factor)) for m in messages]

    def record(
        self, sent: Sequence[BaseMessage], raw: int | None = None, cut: bool = False
    ) -> dict[str, Any]:
        """What the conversation node stores on a reply: our raw count of the request; ``cut``:
        the server cut it, so its usage does not scale later counts."""
        record = {
            "tokens": self.raw(sent) if raw is None else raw,
            "tokenizer": self.tokenizer.name,
        }
        return {**record, "cut": True} if cut else record


def _has_tool_calls(message: BaseMessage) -> bool:
    # (a plain attribute test: a message without the field would go through pydantic's
    # __getattr__, which raises and catches an AttributeError at every count)
    return isinstance(message, AIMessage) and bool(message.tool_calls)


def usage_scale(reply: AIMessage, tokenizer: str) -> float | None:
    """Provider ``input_tokens`` over our recorded raw count of that request, if both exist."""
    counts = usage_counts(reply, tokenizer)
    return counts[1] / counts[0] if counts else None


def usage_counts(reply: AIMessage, tokenizer: str) -> tuple[int, int] | None:
    """Our raw count of the request a reply answered and the provider's, when both were
    recorded with ``tokenizer`` (None for a request the server cut)."""
    usage: dict[str, Any] = dict(reply.usage_metadata or {})
    counted = (reply.response_metadata or {}).get(USAGE_KEY)
    if not isinstance(counted, dict) or counted.get("tokenizer") != tokenizer:
        return None
    reported, ours = usage.get("input_tokens"), counted.get("tokens")
    if counted.get("cut") or not isinstance(reported, int | float):
        return None
    if not isinstance(ours, int | float):
        return None
    if reported <= 0 or ours <= 0:
        return None
    return int(ours), int(reported)


def _arguments(args: Any) -> str:
    if isinstance(args, str):
        return args
    import json

    try:
        return json.dumps(args, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(args)


def counter_for(model: str, choice: str = "auto") -> TokenCounter:
    """The counter for a chat model's name (``offline`` and unknown models: the estimate)."""
    return TokenCounter(tokenizer_for(model, choice))


_NAME_ATTRIBUTES = ("model_name", "model", "model_id")


def model_name(model: Any) -> str:
    """A chat model object's model name (``model_name``/``model``), or '' when it has none."""
    for attribute in _name_attributes(model.__class__):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return ""


@functools.cache
def _name_attributes(kind: Any) -> tuple[str, ...]:
    """Which of :data:`_NAME_ATTRIBUTES` a class of models can have (asking a pydantic model for
    one it lacks costs a raised AttributeError at every call)."""
    fields = getattr(kind, "model_fields", None)
    if not isinstance(fields, dict):
        return _NAME_ATTRIBUTES
    return tuple(name for name in _NAME_ATTRIBUTES if name in fields or hasattr(kind, name))
