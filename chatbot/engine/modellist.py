"""The models the endpoint serves: ``GET /v1/models``, and the names kept for completion.

:func:`list_models` asks the configured OpenAI-compatible endpoint (through the ``openai``
client, with the configured key and timeout); without credentials only the offline model is
there. Each listing is cached (``models.json`` in the user's cache folder, 0600) so that Tab
completion of ``/model NAME`` and the shell's completion of ``--model`` know the names without
asking the network; :class:`ModelCatalog` refreshes that list once in the background.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatbot.config.sources import endpoint_of, without_password
from chatbot.errors import FriendlyError
from chatbot.logs import logger

if TYPE_CHECKING:
    from chatbot.config.settings import Settings

OFFLINE = "offline"
CACHE_NAME = "models.json"

log = logger("models")


@dataclass(frozen=True)
class ModelInfo:
    """One model the endpoint serves."""

    id: str
    owned_by: str = ""
    created: int | None = None

    def record(self) -> dict[str, object]:
        return {"id": self.id, "owned_by": self.owned_by, "created": self.created}


class ModelListError(FriendlyError):
    """The endpoint has no model list, or answered something else: one line for people."""


def _model_info(model: Any) -> ModelInfo | None:
    """A listed model as we keep it (``None`` for an entry without a usable name)."""
    name = getattr(model, "id", None)
    if not isinstance(name, str) or not name.isprintable() or name.split() != [name]:
        return None  # no name, or one no setting could hold (spaces, terminal escapes)
    owner = getattr(model, "owned_by", None)
    created = getattr(model, "created", None)
    return ModelInfo(
        name,
        owner if isinstance(owner, str) else "",
        created if isinstance(created, int) and not isinstance(created, bool) else None,
    )


def cache_path() -> Path:
    """``models.json`` in the user's cache folder (e.g. ``~/.cache/chatbot``)."""
    from platformdirs import user_cache_path

    return user_cache_path("chatbot", appauthor=False) / CACHE_NAME


def list_models(settings: Settings) -> list[ModelInfo]:
    """The models the endpoint serves, sorted by name (and cached for completion). Without an
    API key or a base URL, the offline model alone, without asking anything. Errors are the
    ``openai`` client's (a refused key, an unreachable server)."""
    if not settings.has_credentials:
        return [ModelInfo(OFFLINE, "chatbot")]
    from openai import NotFoundError, OpenAI

    from chatbot.engine.clients import http_client

    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    endpoint = endpoint_of(settings.openai_base_url)

    with OpenAI(
        api_key=key.strip() or "not-needed",  # local servers (Ollama, vLLM) accept any key
        base_url=endpoint,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        http_client=http_client(endpoint),
    ) as client:
        try:
            listed = [_model_info(model) for model in client.models.list()]
        except NotFoundError:
            raise ModelListError(
                f"{without_password(endpoint)} has no model list (GET /models answered 404): "
                "check that OPENAI_BASE_URL ends in /v1, or name the model yourself "
                "(CHATBOT_MODEL, /model NAME)"
            ) from None
        except (AttributeError, TypeError):  # an HTML page, a bare list...: not the API's shape
            raise ModelListError(
                f"the answer of {without_password(endpoint)}/models is not a model list: "
                "check that OPENAI_BASE_URL is an OpenAI-compatible API (it usually ends in /v1)"
            ) from None
    models = sorted((model for model in listed if model is not None), key=lambda m: m.id)
    save_cache(endpoint, [model.id for model in models])
    return models


def save_cache(endpoint: str, names: list[str], path: Path | None = None) -> None:
    """Keep the last listing for completion: a private file, replaced whole (best effort).
    The endpoint is kept without its password (``http://user:***@host/v1``): a cache is no
    place for a secret."""
    from chatbot.files import make_private_dirs, replace_private

    path = path or cache_path()
    try:
        make_private_dirs(path.parent)
        replace_private(path, json.dumps({"endpoint": without_password(endpoint), "models": names}))
    except OSError:
        log.debug("cannot cache the model list", exc_info=True)


def cached_names(endpoint: str, path: Path | None = None) -> list[str]:
    """The names of the last listing of ``endpoint`` (``[]`` if there is none). A listing
    cached by an older version with the endpoint's password in it is deleted."""
    path = path or cache_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    cached = data.get("endpoint") if isinstance(data, dict) else None
    if isinstance(cached, str) and without_password(cached) != cached:
        with contextlib.suppress(OSError):
            path.unlink()
        return []
    if cached != without_password(endpoint):
        return []
    names = data.get("models")
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def completion_names(endpoint: str, configured: str = "") -> list[str]:
    """What completes a model name: the configured model, the endpoint's last listing and
    the offline model, each once."""
    names = [configured.strip(), *cached_names(endpoint), OFFLINE]
    return list(dict.fromkeys(name for name in names if name))


class ModelCatalog:
    """The model names Tab completes in the REPL: the cached listing at first, then a fresh
    one fetched once in the background (:meth:`refresh`); a failed fetch is silent."""

    def __init__(self) -> None:
        self._settings: Settings | None = None
        self._started = threading.Lock()
        self._thread: threading.Thread | None = None

    def refresh(self, settings: Settings) -> None:
        """Fetch the list on a daemon thread (the first call only)."""
        with self._started:
            if self._thread is not None:
                return
            self._settings = settings
            self._thread = threading.Thread(
                target=self._fetch, args=(settings,), name="chatbot-models", daemon=True
            )
            self._thread.start()

    def _fetch(self, settings: Settings) -> None:
        try:
            list_models(settings)  # cached: names() reads the cache
        except Exception:
            log.debug("listing the models failed", exc_info=True)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the fetch to end (tests)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def names(self, current: str = "") -> list[str]:
        """The names to complete (none before the settings are known)."""
        settings = self._settings
        if settings is None:
            return []
        return completion_names(endpoint_of(settings.openai_base_url), current or settings.model)
