"""The model cache: ``models.json`` in the user's cache folder, private (0600).

It keeps what the server said that would otherwise be asked at every start: the last model
listing (``endpoint``, ``models``) and the models' windows (``windows``:
:mod:`chatbot.engine.windows`), endpoints without their password. Best effort: a cache that
cannot be read is empty, one that cannot be written is left as it was.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chatbot.logs import logger

CACHE_NAME = "models.json"

log = logger("models")
_writing = threading.Lock()


def cache_path() -> Path:
    """``models.json`` in the user's cache folder (e.g. ``~/.cache/chatbot``)."""
    from platformdirs import user_cache_path

    return user_cache_path("chatbot", appauthor=False) / CACHE_NAME


def read_cache(path: Path | None = None) -> dict[str, Any]:
    """The cache's document (``{}`` when there is none, or it is not a JSON object; a named
    pipe or a device in its place is never opened: reading one would wait forever)."""
    path = path or cache_path()
    try:
        if not path.is_file():
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update_cache(change: Callable[[dict[str, Any]], None], path: Path | None = None) -> None:
    """Read the cache, let ``change`` edit it, and replace the file whole (one process's writers
    take turns; two processes at once may lose a change, asked again at the next start)."""
    from chatbot.files import make_private_dirs, replace_private

    path = path or cache_path()
    with _writing:
        document = read_cache(path)
        change(document)
        try:
            make_private_dirs(path.parent)
            replace_private(path, json.dumps(document, ensure_ascii=False))
        except OSError:
            log.debug("cannot write the model cache", exc_info=True)
