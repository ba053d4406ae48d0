"""Text from a model, a file or a user, made safe to print: no control characters, no escape
sequences, nothing that reorders or hides text. Pure: no I/O.

A reply can hold bytes that a terminal obeys instead of showing: ``ESC [ 2 J`` clears the
screen, an OSC string sets the window title, writes the clipboard (OSC 52) or hides a link
behind text (OSC 8), and one C1 character such as U+009B is a whole CSI. The colours on the
screen are ours (Rich adds them); the model's never reach the terminal. Stored state keeps
what the model sent: text is made safe when it is printed or exported for reading.

Vocabulary (ECMA-48, as terminals parse it):

- **C0**: U+0000-U+001F and DEL (U+007F); **C1**: U+0080-U+009F.
- **CSI**: ``ESC [`` or U+009B, parameter bytes 0x30-0x3F, intermediate bytes 0x20-0x2F, one
  final byte 0x40-0x7E (``ESC [ 2 J``, ``ESC [ 31 m``).
- **control string**: OSC (``ESC ]``, U+009D), DCS (``ESC P``, U+0090), SOS (``ESC X``,
  U+0098), PM (``ESC ^``, U+009E) or APC (``ESC _``, U+009F), then a payload, ended by ST
  (``ESC \\``, U+009C) or BEL.
- **other escape sequences**: ESC, intermediate bytes, one final byte 0x30-0x7E (``ESC 7``,
  ``ESC ( B``, ``ESC c``).
- **bidi controls**: Unicode's Bidi_Control characters (U+061C, U+200E, U+200F,
  U+202A-U+202E, U+2066-U+2069). A terminal or an editor that follows them shows text in
  another order than it is (U+202E RIGHT-TO-LEFT OVERRIDE before ``fdp.exe`` shows
  ``exe.pdf``: the "Trojan Source" trick).
- **zero-width characters**: U+200B ZERO WIDTH SPACE, U+2060-U+2064 (WORD JOINER and the
  invisible operators), U+FEFF, U+180E: nothing on the screen, so a word, a command or a link
  can hide them. ZWNJ and ZWJ (U+200C, U+200D) are how emoji (👩‍💻) and Persian or Indic
  words are written: between two non-ASCII letters or symbols they are that, elsewhere (in an
  ASCII word, next to a space or at an end) only hidden.

The rules:

- Newline and tab stay. CR LF becomes LF, and a lone CR becomes LF: it would move the cursor
  back and let the rest overwrite the line.
- Every escape sequence is removed whole, its payload too (a title, a hidden URL, clipboard
  content are not text meant to be read).
- A sequence cut short, by the end of the text or by a control character inside it, is removed
  up to that point, and what follows is read afresh: a payload never swallows the next line.
- Every other C0 and C1 character is removed.
- Every bidi control and zero-width character is removed, but a ZWNJ or ZWJ between two
  visible non-ASCII characters; right-to-left text still shows right to left (a terminal
  that supports it orders it by the letters themselves).

So ``sanitize`` of any text, and of any prefix of it, holds no control character but newline
and tab: a streamed reply re-rendered as it grows is safe at every moment.
:class:`StreamSanitizer` serves output that cannot be taken back (text printed piece by
piece): it holds back the end of a piece that may be the start of a sequence, and a joiner
until the character after it comes.

Unlike escape codes, text that is not valid Unicode is made valid where it enters, once
(:func:`valid_text`): a lone surrogate (JSON can spell one, ``"\\ud800"``; bytes that were
not UTF-8 reach Python as one) can be neither encoded, stored nor printed, so it becomes
U+FFFD before anything keeps or shows it, and what is stored is what was shown.
"""

from __future__ import annotations

import re
from typing import Any

_CONTROL = r"\x00-\x1f\x7f-\x9f"
_STRING_START = r"(?:\x1b[P\]X^_]|[\x90\x98\x9d\x9e\x9f])"
_CSI_START = r"(?:\x1b\[|\x9b)"

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_ZERO_WIDTH = "\u180e\u200b\u2060-\u2064\ufeff"
_JOINERS = "\u200c\u200d"
_HIDDEN = _BIDI + _ZERO_WIDTH + _JOINERS
_SHOWN_NON_ASCII = rf"[^\x00-\x9f{_HIDDEN}]"
"""A character a joiner may stand between: not ASCII, not C1, not itself hidden."""

_ANY_CONTROL = re.compile(rf"[{_CONTROL}{_HIDDEN}]")
_SEQUENCE = re.compile(
    rf"{_STRING_START}[^{_CONTROL}]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC
    rf"|{_CSI_START}[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"  # CSI
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"  # any other escape sequence, or a lone ESC
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # every other control but newline and tab
    rf"|[{_BIDI}{_ZERO_WIDTH}]"  # what reorders or hides text
    rf"|(?<!{_SHOWN_NON_ASCII})[{_JOINERS}]|[{_JOINERS}](?!{_SHOWN_NON_ASCII})"  # a joiner alone
)
_SHOWN_BEFORE_A_JOINER = re.compile(_SHOWN_NON_ASCII)
_UNFINISHED = re.compile(
    rf"{_STRING_START}[^{_CONTROL}]*"
    rf"|{_CSI_START}[\x30-\x3f]*[\x20-\x2f]*"
    r"|\x1b[\x20-\x2f]*"
    r"|\r"  # an LF may follow
)
_STARTS = "\x1b\x90\x98\x9b\x9d\x9e\x9f\r"

MAX_HELD = 4096
""":class:`StreamSanitizer` holds back at most this many characters of an unfinished
sequence; past that it is treated as cut short (and removed), not waited for."""


def sanitize(text: str) -> str:
    """``text`` without escape sequences or control characters, newline and tab excepted.

    Linear in the length of the text; text without control characters comes back as is.
    """
    if not _ANY_CONTROL.search(text):
        return text
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _SEQUENCE.sub("", text)


class StreamSanitizer:
    """:func:`sanitize` for text that arrives and is printed in pieces.

    An escape sequence split across two pieces (``ESC [ 2`` then ``J``) is held back until the
    piece that completes it arrives, so no part of it is ever printed. :meth:`feed` returns
    what can be printed now; :meth:`flush` returns the rest at the end of the stream.
    """

    def __init__(self) -> None:
        self._held = ""
        self._before = ""
        """The last character let through to :func:`sanitize`: a joiner that follows it is
        kept or not by it, as in the whole text."""

    def feed(self, piece: str) -> str:
        """The safe text that ``piece`` (after what was held back) makes printable now."""
        text = self._held + piece
        start = max(text.rfind(char) for char in _STARTS)
        if (
            start >= 0
            and len(text) - start <= MAX_HELD
            and _UNFINISHED.fullmatch(text, start) is not None
        ):
            self._held = text[start:]
            return self._sanitize(text[:start])
        if text[-1:] in ("\u200c", "\u200d"):  # kept or not by the character after it
            self._held = text[-1]
            return self._sanitize(text[:-1])
        self._held = ""
        return self._sanitize(text)

    def flush(self) -> str:
        """What was held back, made safe (an unfinished sequence is dropped)."""
        text, self._held = self._held, ""
        return self._sanitize(text)

    def _sanitize(self, text: str) -> str:
        """:func:`sanitize`, a joiner at the start read after the previous piece's last
        character (which, not ASCII nor hidden, stays as it is and is not printed again)."""
        if not text:
            return ""
        before, self._before = self._before, text[-1]
        if text[0] in _JOINERS and _SHOWN_BEFORE_A_JOINER.fullmatch(before):
            return sanitize(before + text)[1:]
        return sanitize(text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, code point for code point (so a
    text made valid in pieces is the pieces made valid, joined); valid text comes back as is."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def valid_data(data: Any) -> Any:
    """``data`` (text, or lists and dicts holding text: a message's content blocks, its
    metadata) with :func:`valid_text` applied to every string in it; ``data`` itself when
    nothing needed it."""
    if isinstance(data, str):
        return data if data.isascii() else valid_text(data)
    if not _has_surrogate(data):  # (the usual case: nothing to copy)
        return data
    if type(data) is list or type(data) is tuple:  # (not a NamedTuple's fields)
        items = [valid_data(item) for item in data]
        changed = any(new is not old for new, old in zip(items, data, strict=True))
        return type(data)(items) if changed else data
    if type(data) is dict:
        pairs: dict[Any, Any] = {}
        changed = False
        for key, value in data.items():
            new_key, new_value = valid_data(key), valid_data(value)
            changed = changed or new_key is not key or new_value is not value
            pairs[new_key] = new_value
        return pairs if changed else data
    return data


def _has_surrogate(data: Any) -> bool:
    """True when a string in ``data`` (through the lists, tuples and dicts :func:`valid_data`
    walks) holds a lone surrogate."""
    if isinstance(data, str):
        return not data.isascii() and _SURROGATE.search(data) is not None
    if type(data) is list or type(data) is tuple:
        return any(_has_surrogate(item) for item in data)
    if type(data) is dict:
        return any(_has_surrogate(key) or _has_surrogate(value) for key, value in data.items())
    return False


_JSON_UNESCAPED_CONTROL = re.compile(rf"[\x7f-\x9f{_HIDDEN}]")


def escape_json_controls(json_text: str) -> str:
    """JSON text with DEL, C1, bidi controls and zero-width characters written as ``\\u``
    escapes, like C0 already is.

    ``json.dumps(..., ensure_ascii=False)`` leaves them raw: U+009B is a CSI to a terminal, and
    U+202E reorders what follows. Outside strings JSON is ASCII, so every such character is
    inside a string, where the escape means the same character: the data is unchanged.
    """
    return _JSON_UNESCAPED_CONTROL.sub(lambda found: f"\\u{ord(found.group()):04x}", json_text)
