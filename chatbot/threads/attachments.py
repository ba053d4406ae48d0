"""Files attached to a message (``/file PATH`` in the REPL, ``chatbot ask -f PATH``).

Vocabulary:
- *attachment*: one file read for the next message, as one content block of it: a text file
  is its name then its content fenced; an image (told by its first bytes) is langchain-core's
  standard image block, the name in ``extras``.
- *content*: what a message holds: a string when nothing is attached, else a list of blocks,
  the typed text first; :mod:`chatbot.parts` reads it back.
- *limits*: what the model in use accepts: images or not (``None``: unknown, left to the
  provider), and its input size (a file that would not fit is refused).

Any other problem is one :class:`AttachmentError` line. In the REPL a path with ``*``, ``?`` or
``[`` that names no file is a pattern (``/file src/*.py``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from chatbot.errors import FriendlyError
from chatbot.parts import file_text

if TYPE_CHECKING:
    from chatbot.engine.runsettings import RunSettings
    from chatbot.memory.tokens import TokenCounter

Content = str | list[str | dict[str, Any]]
"""A message's content, as langchain-core's messages hold it."""

MAX_FILE_BYTES = 20 * 1024 * 1024
"""The largest file read at all (OpenAI's limit for one image)."""

IMAGE_TYPES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

TEXT_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)
"""Byte-order marks of text that is not UTF-8 but says what it is (Windows tools write UTF-16)."""


class AttachmentError(FriendlyError, ValueError):
    """A file that cannot be attached; the message is one line for the user."""


class AlreadyAttached(AttachmentError):
    """The same file given twice for one message: it is attached once."""


class Limits(NamedTuple):
    """What the model in use accepts (see the module's vocabulary)."""

    model: str = ""
    images: bool | None = None
    max_input_tokens: int | None = None
    counter: TokenCounter | None = None


class Attachment(NamedTuple):
    """A file read for the next message."""

    name: str
    kind: str
    """``text`` or ``image``."""
    size: int
    """Bytes on disk."""
    tokens: int
    """What the model is counted to read (an image: the counter's flat estimate)."""
    block: dict[str, Any]
    source: str = ""
    """The file's resolved path (the same file given twice is attached once)."""

    def describe(self) -> str:
        """``notes.txt (1.2 kB, 312 tokens)``, ``cat.png (image, 48.0 kB)``."""
        if self.kind == "image":
            return f"{self.name} (image, {human_size(self.size)})"
        return f"{self.name} ({human_size(self.size)}, {self.tokens:,} tokens)"


def limits_for(
    run: RunSettings | None, model: str = "", counter: TokenCounter | None = None
) -> Limits:
    """The limits of a run's chat model; without run settings (a server's model) nothing is
    known and the server decides (``counter``: what sizes are counted with)."""
    if run is None:
        return Limits(model=model or "the server's model", counter=counter)
    from chatbot.engine.models import OfflineChatModel
    from chatbot.memory.tokens import model_name

    chat = run.chat_model
    profile = getattr(chat, "profile", None) or {}
    images: bool | None = None
    if isinstance(chat, OfflineChatModel):
        images, model = False, "the offline model"
    elif "image_inputs" in profile:
        images = bool(profile["image_inputs"])
    return Limits(
        model=model or model_name(chat) or "this model",
        images=images,
        max_input_tokens=run.policy.max_input_tokens,
        counter=run.counter,
    )


def check_system_prompt(prompt: str, run: RunSettings | None, model: str = "") -> None:
    """Refuse (:class:`~chatbot.config.roles.RoleError`) a thread's system prompt that alone
    fills the input of the model ``run`` sends it to; without run settings nothing is refused."""
    if run is None:
        return
    from chatbot.config.roles import check_prompt_fits

    limits = limits_for(run, model)
    check_prompt_fits(prompt, run.counter.text(prompt), limits.max_input_tokens, limits.model)


def human_size(size: int) -> str:
    """``812 B``, ``1.2 kB``, ``3.4 MB``."""
    if size < 1000:
        return f"{size} B"
    if size < 1000**2:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1000**2:.1f} MB"


def image_type(data: bytes) -> str | None:
    """The MIME type of a PNG, JPEG, GIF or WebP image, from its first bytes; else None."""
    for magic, mime in IMAGE_TYPES:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def display_name(given: str) -> str:
    """The name a file goes by in the message: a relative path as given, else the file's name."""
    path = Path(given)
    if path.is_absolute() or given.startswith("~"):
        return path.name
    return os.path.normpath(given)


def expand_patterns(given: Sequence[str]) -> list[str]:
    """The paths given, each pattern (``*``, ``?``, ``[``; ``**``) that is not a file's name
    replaced by the files it matches, sorted; one matching nothing stays (refused as missing)."""
    import glob  # (here: showing a thread reads attachments' text, never a pattern)

    paths: list[str] = []
    for item in given:
        if not glob.has_magic(item) or os.path.lexists(os.path.expanduser(item)):
            paths.append(item)
            continue
        found = sorted(
            match
            for match in glob.glob(os.path.expanduser(item), recursive=True)
            if os.path.isfile(match)
        )
        paths.extend(found or [item])
    return paths


def _decode_text(data: bytes, name: str) -> str:
    for bom, encoding in TEXT_BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                break
    if b"\x00" in data[:8192]:
        raise AttachmentError(
            f"{name} is a binary file: only text files and PNG, JPEG, GIF or WebP images "
            "can be attached"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise AttachmentError(
            f"{name} is not UTF-8 text: convert it first (iconv -t UTF-8)"
        ) from None


def _check_image(data: bytes, mime: str, name: str) -> None:
    """Refuse an image whose header is cut or damaged: the provider would reject it, and the
    message holding it would fail again on every /retry."""
    whole = {
        "image/png": len(data) >= 33 and data[12:16] == b"IHDR",
        "image/gif": len(data) >= 13,
        "image/webp": data[12:15] == b"VP8",
        "image/jpeg": len(data) >= 4,
    }.get(mime, True)
    if not whole:
        kind = mime.removeprefix("image/").upper()
        raise AttachmentError(f"{name} starts like a {kind} image but is damaged: not attached")


def _read(given: str) -> tuple[Path, bytes]:
    path = Path(given).expanduser()
    shown = repr(given)
    if "\x00" in given:  # (the system refuses it: "embedded null byte")
        raise AttachmentError(f"no file {shown}: a path cannot hold a NUL character")
    try:
        info = path.stat()
    except FileNotFoundError:
        raise AttachmentError(f"no file {shown}: check the path") from None
    except OSError as error:
        raise AttachmentError(f"cannot read {shown}: {error.strerror or error}") from None
    if stat.S_ISDIR(info.st_mode):
        raise AttachmentError(f"{shown} is a folder: attach the files in it one by one")
    if not stat.S_ISREG(info.st_mode):
        raise AttachmentError(f"{shown} is not a regular file: only files can be attached")
    if info.st_size > MAX_FILE_BYTES:
        raise AttachmentError(
            f"{shown} is too big to attach ({human_size(info.st_size)}; "
            f"at most {human_size(MAX_FILE_BYTES)})"
        )
    try:
        return path, path.read_bytes()
    except PermissionError:
        raise AttachmentError(f"cannot read {shown}: permission denied") from None
    except OSError as error:
        raise AttachmentError(f"cannot read {shown}: {error.strerror or error}") from None


def load(given: str, limits: Limits, pending: Sequence[Attachment] = ()) -> Attachment:
    """Read one file as an attachment for the model of ``limits``, fitting with ``pending``."""
    path, data = _read(given)
    name = display_name(given)
    source = str(path.resolve())
    if any(a.source == source for a in pending):
        raise AlreadyAttached(f"{name} is already attached to the next message")
    mime = image_type(data)
    if mime is not None:
        _check_image(data, mime, name)
        if limits.images is False:
            raise AttachmentError(
                f"{limits.model} does not take images: {name} not attached "
                "(pick one that does: /model NAME in the chat, chatbot --model NAME ask for ask)"
            )
        import base64

        from chatbot.memory.tokens import MEDIA_TOKENS

        block: dict[str, Any] = {
            "type": "image",
            "base64": base64.b64encode(data).decode("ascii"),
            "mime_type": mime,
            "extras": {"filename": name},
        }
        attachment = Attachment(name, "image", len(data), MEDIA_TOKENS, block, source)
    else:
        text = _decode_text(data, name)
        body = file_text(name, text.removesuffix("\n"))  # (the file's last newline)
        tokens = limits.counter.text(body) if limits.counter is not None else 0
        block = {"type": "text", "text": body}
        attachment = Attachment(name, "text", len(data), tokens, block, source)
    _check_fits(attachment, limits, pending)
    return attachment


def _check_fits(attachment: Attachment, limits: Limits, pending: Sequence[Attachment]) -> None:
    most = limits.max_input_tokens
    if not most:
        return
    if attachment.tokens > most:
        raise AttachmentError(
            f"{attachment.name} is too big for {limits.model}: {attachment.tokens:,} tokens, "
            f"and the model takes {most:,} at most"
        )
    together = attachment.tokens + sum(a.tokens for a in pending)
    if together > most:
        raise AttachmentError(
            f"{attachment.name} does not fit with the files already attached: {together:,} "
            f"tokens together, and {limits.model} takes {most:,} at most (/file clear drops them)"
        )


def message_content(text: str, attachments: Sequence[Attachment]) -> Content:
    """A message's content: the text alone, or the text then each attachment's block."""
    if not attachments:
        return text
    blocks: list[str | dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
    blocks += [dict(a.block) for a in attachments]
    return blocks
