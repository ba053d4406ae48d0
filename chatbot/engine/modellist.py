"""The models the endpoint serves: ``GET /v1/models``, and the names kept for completion.

:func:`list_models` asks the configured endpoint through the ``openai`` client; each listing
is kept in the model cache (:mod:`chatbot.engine.modelcache`) so that completion knows the names
without the network; :class:`ModelCatalog` refreshes it once in the background.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chatbot.config.sources import endpoint_of, without_password
from chatbot.engine.modelcache import cache_path, read_cache, update_cache
from chatbot.errors import FriendlyError
from chatbot.logs import logger

if TYPE_CHECKING:
    from chatbot.config.settings import Settings

OFFLINE = "offline"

log = logger("models")


@dataclass(frozen=True)
class ModelInfo:
    """One model the endpoint serves."""

    id: str
    owned_by: str = ""
    created: int | None = None
    listed: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The entry as the endpoint listed it (vLLM and llama.cpp say the window there)."""

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
    to_dict = getattr(model, "to_dict", None)
    listed = to_dict() if callable(to_dict) else {}
    return ModelInfo(
        name,
        owner if isinstance(owner, str) else "",
        created if isinstance(created, int) and not isinstance(created, bool) else None,
        listed if isinstance(listed, dict) else {},
    )


def list_models(settings: Settings) -> list[ModelInfo]:
    """The models the endpoint serves, sorted by name (and cached); without credentials the
    offline model alone. Errors are the ``openai`` client's."""
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


def save_cache(endpoint: str, names: list[str]) -> None:
    """Keep the last listing for completion, in the model cache (best effort)."""

    def listing(document: dict[str, object]) -> None:
        document.update(endpoint=without_password(endpoint), models=names)

    update_cache(listing)


def cached_names(endpoint: str) -> list[str]:
    """The names of the last listing of ``endpoint`` (``[]`` if there is none). A cache
    holding an endpoint with its password in it is deleted."""
    path = cache_path()
    data = read_cache(path)
    cached = data.get("endpoint")
    if isinstance(cached, str) and without_password(cached) != cached:
        with contextlib.suppress(OSError):
            path.unlink()
        return []
    if cached != without_password(endpoint):
        return []
    names = data.get("models")
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def unlisted(name: str, endpoint: str) -> list[str] | None:
    """The cached listing's names closest to ``name`` when it lacks it, best first; ``None``
    when it lists it, none is cached, or ``name`` is the offline model (never listed)."""
    names = cached_names(endpoint)
    if not names or name in names or name.strip().lower() == OFFLINE:
        return None
    import difflib

    return difflib.get_close_matches(name, names, n=3, cutoff=0.6)


def completion_names(endpoint: str, configured: str = "") -> list[str]:
    """What completes a model name: the configured one, the last listing, the offline model."""
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
