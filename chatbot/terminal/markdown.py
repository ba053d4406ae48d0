"""Rich's Markdown as chatbot draws a model's text (replies, the summary): raw HTML off, the
text made safe to print. Apart from :mod:`chatbot.terminal.render`, so that markdown-it is
imported only where Markdown is drawn."""

from __future__ import annotations

import functools

from markdown_it import MarkdownIt
from rich.console import JustifyMethod
from rich.markdown import Markdown as RichMarkdown
from rich.style import Style

from chatbot.sanitize import sanitize


class Markdown(RichMarkdown):
    """Rich's Markdown with raw HTML off (``<stdio.h>`` stays visible), the text sanitized."""

    def __init__(self, markup: str) -> None:
        # Rich's __init__ sets these and parses with a parser it makes each time (HTML on).
        self.markup = sanitize(markup)
        self.parsed = _markdown_parser().parse(self.markup)
        self.code_theme = self.inline_code_theme = "monokai"
        self.justify: JustifyMethod | None = None
        self.style: str | Style = "none"
        self.hyperlinks = False  # "text (url)": a link never hides its address
        self.inline_code_lexer: str | None = None


@functools.cache
def _markdown_parser() -> MarkdownIt:
    """CommonMark without raw HTML, with tables and strikethrough as Rich's: made once."""
    return MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
