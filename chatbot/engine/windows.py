"""The model's context window: how much a request (and its reply) may hold, and who said so.

Where a window comes from, first found wins (:func:`window_of`):

- ``settings``: ``CHATBOT_MAX_INPUT_TOKENS``, what a request may hold (unless that is more than
  the server's window lets a request hold: then the server's);
- ``profile``: the model's profile (LangChain's, for models it knows), input only;
- ``server``: what the model server says of the model it runs (:mod:`chatbot.engine.servers`:
  llama.cpp, Ollama, vLLM, LM Studio), kept per base URL and model in the model cache with
  when it was asked (trusted :data:`WINDOW_AGE`; a server that said nothing, :data:`MAX_AGE`);
- ``refusal``: what a refusal said ("maximum context length is 2048 tokens"), or, when it gave
  no number, the size of the request it refused (or that the server cut silently).

A server's window (and a refusal's) holds the prompt and the reply, so room for the reply is
kept out of it (:func:`reply_room`) and sent as ``max_tokens``. :data:`BOOK` keeps what servers
and refusals said for the process; its :attr:`WindowBook.version` keys a run's cached settings.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from chatbot.engine.modelcache import cache_path, read_cache, update_cache
from chatbot.logs import logger

log = logger("models")

Source = Literal["settings", "profile", "server", "refusal"]

MAX_AGE = 24 * 3600.0
"""Seconds a server's silence is trusted (a server with no window API will not grow one);
after that it is asked again."""
SLOW_AGE = 600.0
"""Seconds a server that did not answer in time is left alone before it is asked again."""
WINDOW_AGE = 3600.0
"""Seconds a window a server said is trusted: a local server's window is set when it starts,
and a restart can change it (asking again is cheap)."""
MAX_REPLY_ROOM = 4096
"""The most tokens the automatic reply room keeps (a quarter of the window below 16k)."""
MIN_REPLY_ROOM = 64


@dataclass(frozen=True)
class Window:
    """A model's context window, in tokens, and where it is known from."""

    tokens: int
    source: Source
    server: str = ""
    """The server that said it (``llama.cpp``, ``Ollama``, ``vLLM``, ``LM Studio``...)."""
    detail: str = ""
    """Where the server says it (``n_ctx of /props``), or what the refusal said."""
    model_max: int | None = None
    """The model's own window, when the server runs it with a smaller one."""
    assumed: bool = False
    """The server did not say: this is its default."""
    until_loaded: bool = False
    """Assumed until the server has loaded the model (then it says): asked again after the
    next reply, and at the next start."""
    learned_at: float = 0.0

    @property
    def shared(self) -> bool:
        """True when the prompt and the reply share the window (a server's, a refusal's)."""
        return self.source in ("server", "refusal")

    def origin(self) -> str:
        """Where it comes from, for people: ``the server (llama.cpp: n_ctx of /props)``."""
        if self.source == "settings":
            return "CHATBOT_MAX_INPUT_TOKENS"
        if self.source == "profile":
            return "the model's profile"
        where = ": ".join(part for part in (self.server, self.detail) if part)
        said = "the server" if self.source == "server" else "a refusal of the server"
        if self.assumed:
            said = "the server's default"
        return f"{said} ({where})" if where else said

    def age(self, now: float | None = None) -> str:
        """How long ago it was learned (``''`` for a setting or a profile)."""
        if not self.learned_at:
            return ""
        seconds = max(0, int((now or time.time()) - self.learned_at))
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if seconds >= size:
                return f"{seconds // size} {unit} ago"
        return "just now"

    def note(self) -> str:
        """The line worth saying once about this window (the server runs the model smaller than it
        takes, and how to raise it; or the window is assumed), else ``''``."""
        if self.source != "server":
            return ""
        if self.until_loaded:
            return (
                f"{self.server} has not loaded this model yet: chatbot assumes a "
                f"{self.tokens:,}-token window ({self.detail}) and asks again after the first "
                "reply"
            )
        if self.assumed:
            return (
                f"{self.server} does not say this model's window: chatbot assumes "
                f"{self.tokens:,} tokens ({self.detail}); if it runs with more, "
                "CHATBOT_MAX_INPUT_TOKENS says so"
            )
        if not self.model_max or self.model_max <= self.tokens:
            return ""
        how = RAISE_HINTS.get(self.server, "")
        line = (
            f"{self.server or 'the server'} runs this model with a {self.tokens:,}-token window "
            f"(the model takes {self.model_max:,}): chatbot keeps every request within it"
        )
        return f"{line}; {how}" if how else line


RAISE_HINTS = {
    "Ollama": "to give it more, start Ollama with OLLAMA_CONTEXT_LENGTH=32768, or set "
    "num_ctx in a Modelfile",
    "llama.cpp": "to give it more, start llama-server with a larger -c (--ctx-size)",
    "LM Studio": "to give it more, load the model with a larger context length in LM Studio",
}


def reply_room(window: Window, setting: int | None) -> int:
    """Tokens kept for the reply in a shared window: ``CHATBOT_REPLY_TOKENS``, else a quarter of
    the window within :data:`MIN_REPLY_ROOM`..:data:`MAX_REPLY_ROOM`; at most half of it."""
    wanted = setting or max(MIN_REPLY_ROOM, min(MAX_REPLY_ROOM, window.tokens // 4))
    return max(1, min(wanted, window.tokens // 2))


def reply_origin(window: Window | None, setting: int | None, reply: int | None) -> str:
    """Where the room kept for the reply comes from, for people (``''``: none is kept)."""
    if not reply:
        return ""
    if setting and reply == setting:
        return "CHATBOT_REPLY_TOKENS"
    if setting:
        return f"CHATBOT_REPLY_TOKENS={setting}, held to half the window"
    return "a quarter of the window; CHATBOT_REPLY_TOKENS sets it"


def input_limit(window: Window, setting: int | None) -> int:
    """What a request may hold in ``window`` (a shared one less the reply's room)."""
    if not window.shared:
        return window.tokens
    return max(1, window.tokens - reply_room(window, setting))


# --- what servers and refusals said -------------------------------------------------------


@dataclass
class _Entry:
    window: Window | None
    """None: the server was asked and said nothing."""
    asked_at: float
    noted: bool = False
    slow: bool = False
    """The server did not answer in time (``window`` is what was known before)."""


Key = tuple[str, str]


class WindowBook:
    """The windows learned from servers and refusals, by (endpoint, model): in memory for
    the process, and in the model cache for the next one (read once, written on change)."""

    def __init__(self) -> None:
        self._entries: dict[Key, _Entry] = {}
        self._asked: set[Key] = set()
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._version = 0

    @property
    def version(self) -> int:
        """Changes whenever a window is learned (read after the cache, so reading is no change)."""
        with self._lock:
            self._load()
            return self._version

    def _load(self) -> None:
        """The cache's entries, read when first needed and again when the cache folder changes."""
        path = cache_path()
        if path == self._path:
            return
        self._path, self._entries, self._asked = path, {}, set()
        self._version += 1
        document = read_cache(path).get("windows")
        if not isinstance(document, dict):
            return
        for endpoint, models in document.items():
            if not isinstance(models, dict):
                continue
            for model, stored in models.items():
                entry = _entry_of(stored)
                if entry is not None:
                    self._entries[(endpoint, model)] = entry

    def lookup(self, endpoint: str, model: str) -> Window | None:
        """The window learned for ``model`` at ``endpoint`` (None: not known)."""
        with self._lock:
            self._load()
            entry = self._entries.get((_shown(endpoint), model))
        return entry.window if entry else None

    def fresh(self, endpoint: str, model: str, now: float | None = None) -> bool:
        """True when the server was asked lately enough that asking again tells nothing new (never
        for a window assumed until the model is loaded; a slow server: :data:`SLOW_AGE`)."""
        with self._lock:
            self._load()
            entry = self._entries.get((_shown(endpoint), model))
        if entry is None:
            return False
        age = (now or time.time()) - entry.asked_at
        window = entry.window
        if entry.slow:
            trusted = SLOW_AGE
        elif window is not None and window.until_loaded:
            return False
        elif window is None or (window.source == "refusal" and not window.server):
            trusted = MAX_AGE  # (a server with no window API: only a refusal says it)
        else:
            trusted = WINDOW_AGE
        return 0 <= age < trusted  # (a time in the future: a clock set back; asked again)

    def asked(self, endpoint: str, model: str) -> bool:
        """True once this process has asked the server about ``model``, answered or not."""
        key = (_shown(endpoint), model)
        with self._lock:
            self._load()
            if key in self._asked:
                return True
            self._asked.add(key)
        return False

    def record(self, endpoint: str, model: str, window: Window | None) -> None:
        """What the server said of ``model`` (None: nothing; a refusal's window then stays)."""
        now = time.time()
        key = (_shown(endpoint), model)
        with self._lock:
            self._load()
            old = self._entries.get(key)
            known = old.window if old else None
            refused = known is not None and known.source == "refusal"
            if refused and (window is None or window.assumed):  # (a refusal is surer)
                window = known
            if window is not None and window is not known:
                window = replace(window, learned_at=now)
            noted = bool(old and old.noted and _same(known, window))
            self._entries[key] = _Entry(window, now, noted)
            self._version += 1
        self._save(key)

    def record_slow(self, endpoint: str, model: str) -> None:
        """The server did not answer in time: it is left alone for :data:`SLOW_AGE`."""
        key = (_shown(endpoint), model)
        with self._lock:
            self._load()
            old = self._entries.get(key)
            self._entries[key] = _Entry(old.window if old else None, time.time(), slow=True)
        self._save(key)

    def learn_refusal(self, endpoint: str, model: str, limit: int | None, refused: int) -> None:
        """A request of ``refused`` tokens was refused as too long; ``limit``: the window stated,
        else the window is taken as the refused size (when smaller than what was known)."""
        key = (_shown(endpoint), model)
        if limit:
            tokens, detail = limit, f"it said {limit:,} tokens"
        else:
            tokens, detail = refused, f"it refused {refused:,} tokens"
        with self._lock:
            self._load()
            old = self._entries.get(key)
            known = old.window if old else None
            if not limit and known is not None and known.tokens <= tokens:
                return
            window = Window(tokens, "refusal", detail=detail, learned_at=time.time())
            if known is not None and known.source == "server":
                window = replace(window, server=known.server, model_max=known.model_max)
            self._entries[key] = _Entry(window, old.asked_at if old else time.time())
            self._version += 1
        log.info("the window of %s is %s tokens (%s)", model, tokens, detail)
        self._save(key)

    def take_note(self, endpoint: str, model: str) -> str:
        """:meth:`Window.note` of ``model``'s window, once per window; else ``''``."""
        with self._lock:
            self._load()
            entry = self._entries.get((_shown(endpoint), model))
            if entry is None or entry.window is None or entry.noted:
                return ""
            line = entry.window.note()
            if not line:
                return ""
            entry.noted = True
        self._save((_shown(endpoint), model))
        return line

    def _save(self, key: Key) -> None:
        """Write one entry to the model cache: at once, or from a (non-daemon) thread inside an
        event loop, where a LangGraph server forbids blocking calls."""
        with self._lock:
            entry = self._entries.get(key)
            path = self._path
        if entry is None or path is None:
            return
        stored = _stored(entry)

        def write() -> None:
            def change(document: dict[str, Any]) -> None:
                windows = document.get("windows")
                if not isinstance(windows, dict):
                    windows = document["windows"] = {}
                models = windows.get(key[0])
                if not isinstance(models, dict):
                    models = windows[key[0]] = {}
                models[key[1]] = stored

            update_cache(change, path)

        if in_event_loop():
            threading.Thread(target=write, name="chatbot-window-cache").start()
        else:
            write()


def _same(one: Window | None, other: Window | None) -> bool:
    """The same window, whenever each was learned."""
    if one is None or other is None:
        return one is other
    return replace(one, learned_at=0.0) == replace(other, learned_at=0.0)


def _shown(endpoint: str) -> str:
    from chatbot.config.sources import without_password

    return without_password(endpoint)


def _stored(entry: _Entry) -> dict[str, Any]:
    window = asdict(entry.window) if entry.window else None
    stored = {"window": window, "asked_at": entry.asked_at, "noted": entry.noted}
    return {**stored, "slow": True} if entry.slow else stored


def _entry_of(stored: Any) -> _Entry | None:
    """An entry as the cache keeps it (None for anything else: the entry is asked again)."""
    if not isinstance(stored, dict) or not isinstance(stored.get("asked_at"), int | float):
        return None
    raw = stored.get("window")
    window = None
    if isinstance(raw, dict):
        try:
            window = Window(**raw)
        except TypeError:
            return None
        if not isinstance(window.tokens, int) or window.tokens < 1:
            return None
        if window.source not in ("server", "refusal"):
            return None
    elif raw is not None:
        return None
    asked_at = float(stored["asked_at"])
    return _Entry(window, asked_at, bool(stored.get("noted")), bool(stored.get("slow")))


def in_event_loop() -> bool:
    """True inside a running event loop (where a LangGraph server forbids blocking calls)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


BOOK = WindowBook()
"""The process's windows."""


def window_of(
    model_name: str,
    endpoint: str,
    profile_tokens: int | None,
    setting: int | None,
    reply_setting: int | None = None,
) -> Window | None:
    """The window of a chat model (see the module), or None. A setting or profile bigger than
    what a server or refusal said gives way to it; a window only assumed never wins."""
    learned = BOOK.lookup(endpoint, model_name) if model_name else None
    said = learned is not None and not learned.assumed  # (what a server or refusal said)
    if setting:
        if said and learned and input_limit(learned, reply_setting) < setting:
            return learned
        return Window(setting, "settings")
    if profile_tokens:
        if said and learned and learned.tokens < profile_tokens:
            return learned  # (a server that runs a model by a known name, with less)
        return Window(profile_tokens, "profile")
    return learned
