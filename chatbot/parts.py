"""Reading what a message holds: the one reader of message content, used by every place that
shows, searches, summarizes or splits a message. Pure: no I/O, no LangChain.

Vocabulary:
- *content*: a message's content as langchain-core holds it: a string, or a list of blocks
  (strings, or dicts with a ``type``).
- *part*: one block, read (:class:`Part`). Its *kind* is ``text`` (typed, or written by the
  model), ``file text`` (a text file attached with ``/file``: its name, then its content
  fenced; :func:`file_text` writes one, and langchain-core's ``text-plain`` document reads
  as one), or a medium: ``image``, ``audio``, ``video``, ``file``. Blocks of any other type
  (reasoning, tool calls, provider-specific blocks) are not part of what was said.
- *marker*: a medium as text: ``[image: cat.png]``, ``[image: https://example.com/cat.png]``,
  ``[audio]``, ``[file: report.pdf (https://…/report.pdf)]``. As in langchain-core's XML
  transcript (``get_buffer_string(format="xml")``) a link or a file id is kept, being what
  someone gave, and base64 data or a ``data:`` URL never is. The block shapes read are
  langchain-core's standard ones (``url``, ``base64``, ``file_id``, the file name in
  ``extras``), its older ``source_type`` ones, and OpenAI's (``image_url``, ``input_audio``,
  ``file``).
- *readable text*: the whole message as text, for people (``show``, the Markdown export), the
  summarizer and the search index: text as written, each attached file and marker set apart
  by a blank line, so typed text never runs into a file's header. Text in pieces (several
  ``text`` blocks in a row) joins as langchain-core's ``.text`` joins it: as one text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

Kind = Literal["text", "file text", "image", "audio", "video", "file"]

SEPARATOR = "\n\n"
"""Between typed text and each attachment in :func:`readable_text`."""

_MEDIA: dict[str, Kind] = {
    "image": "image",
    "image_url": "image",
    "input_image": "image",
    "audio": "audio",
    "input_audio": "audio",
    "video": "video",
    "file": "file",
    "input_file": "file",
}
_FILE_TEXT = re.compile(r"(?P<name>[^\n]+):\n(?P<fence>`{3,})text\n.*\n(?P=fence)", re.DOTALL)


class Part(NamedTuple):
    """One block of a message, read."""

    kind: Kind
    text: str = ""
    """The text of a ``text`` or ``file text`` part as written (a file's with its header)."""
    name: str = ""
    """A file's name (or, without one, a provider's file id)."""
    link: str = ""
    """Where a medium is (an http(s) or other URL; never a ``data:`` URL)."""
    block: Any = None
    """The block itself."""

    @property
    def label(self) -> str:
        """What the part goes by in a list of attachments: its name, its link, or its kind."""
        return self.name or self.link or self.kind

    def marker(self) -> str:
        """A medium as text (see the module's vocabulary); a text part's text as written."""
        if self.kind in ("text", "file text"):
            return self.text
        if self.name and self.link:
            return f"[{self.kind}: {self.name} ({self.link})]"
        if self.name or self.link:
            return f"[{self.kind}: {self.name or self.link}]"
        return f"[{self.kind}]"


def fenced(text: str) -> str:
    """Text as a fenced block, the fence longer than any run of backticks inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def file_text(name: str, text: str) -> str:
    """An attached text file as a text block holds it: ``name:`` then the content fenced."""
    return f"{name}:\n{fenced(text)}"


def _link(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str) or value.strip()[:5].lower() == "data:":
        return ""
    return value.strip()


def _inside(block: dict[str, Any], key: Any) -> dict[str, Any]:
    value = block.get(key)
    return value if isinstance(value, dict) else {}


def _medium(kind: Kind, block: dict[str, Any]) -> Part:
    inner = _inside(block, block.get("type"))  # OpenAI's {"type": "file", "file": {...}}
    named = (
        block.get("filename")
        or _inside(block, "extras").get("filename")
        or _inside(block, "metadata").get("filename")
        or inner.get("filename")
        or block.get("file_id")
        or inner.get("file_id")
    )
    link = _link(block.get("url")) or _link(block.get("image_url")) or _link(block.get("file_url"))
    return Part(kind, name=str(named) if named else "", link=link, block=block)


def read_block(block: Any) -> Part | None:
    """One block of content as a :class:`Part`, or None when it is not part of what was said."""
    if isinstance(block, str):
        return Part("text", block, block=block)
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text" or (kind is None and "text" in block):
        text = str(block.get("text") or "")
        found = _FILE_TEXT.fullmatch(text)
        if found:
            return Part("file text", text, name=found.group("name"), block=block)
        return Part("text", text, block=block)
    if kind == "text-plain" and isinstance(block.get("text"), str):
        name = str(block.get("title") or block.get("filename") or "document")
        return Part("file text", file_text(name, block["text"]), name=name, block=block)
    if kind == "text-plain":
        return _medium("file", block)
    medium = _MEDIA.get(str(kind))
    return _medium(medium, block) if medium else None


def read_parts(content: Any) -> list[Part]:
    """The parts of a message's content, in order (a string is one text part)."""
    if isinstance(content, str):
        return [Part("text", content, block=content)] if content else []
    if not isinstance(content, list):
        return []
    return [part for part in map(read_block, content) if part is not None]


def _joined(parts: Sequence[Part]) -> str:
    """Parts as text: text in pieces as one text, a blank line around every attachment."""
    pieces: list[str] = []
    typing = False  # the last piece is typed text, which the next text piece continues
    for part in parts:
        text = part.marker()
        if part.kind == "text" and typing:
            pieces[-1] += text
        elif text:
            pieces.append(text)
            typing = part.kind == "text"
    return SEPARATOR.join(piece for piece in pieces if piece)


def readable_text(content: Any) -> str:
    """The whole message as text (see the module's vocabulary): for ``show``, the Markdown
    export, the summarizer and the search index."""
    return _joined(read_parts(content))


def typed_text(content: Any) -> str:
    """Only what was typed (or written by the model): no attached file, no marker."""
    return _joined([part for part in read_parts(content) if part.kind == "text"])


def attached(content: Any) -> list[Part]:
    """The attachments of a message: attached text files and media."""
    return [part for part in read_parts(content) if part.kind != "text"]


def describe(content: Any) -> str:
    """A message on one line's worth, for titles and ``history``: the typed text, then
    ``[+ notes.txt, cat.png]`` when something is attached."""
    said = typed_text(content)
    labels = [part.label for part in attached(content)]
    if not labels:
        return said
    listed = f"[+ {', '.join(labels)}]"
    return f"{said} {listed}" if said.strip() else listed


def text_and_media(content: Any) -> tuple[str, list[Any]]:
    """A message's text (typed text and attached text files, as in :func:`readable_text`)
    and every other block, in order: what can be split, and what goes whole with a part."""
    if isinstance(content, str):
        return content, []
    blocks = content if isinstance(content, list) else []
    texts: list[Part] = []
    media: list[Any] = []
    for block in blocks:
        part = read_block(block)
        if part is not None and part.kind in ("text", "file text"):
            texts.append(part)
        else:
            media.append(block)
    return _joined(texts), media
