"""The model cache: ``models.json`` in the user's cache folder, private (0600).

It keeps what the model server said that chatbot would otherwise ask again at every start: the
endpoint's last model listing (``endpoint``, ``models``: what Tab completes) and the context
windows of its models (``windows``: see :mod:`chatbot.engine.windows`). Endpoints are kept
without their password (``http://user:***@host/v1``): a cache is no place for a secret.

Everything here is best effort: a cache that cannot be read is empty, one that cannot be written
is left as it was.
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
    """Read the cache, let ``change`` edit the document, and write it back whole (a private
    file, replaced at once). One process's writers take turns; two processes writing at the
    same moment may lose one of the two changes, which the next start asks again."""
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
