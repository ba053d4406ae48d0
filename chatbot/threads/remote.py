"""The same thread operations against a LangGraph server (``langgraph dev`` or a deployment).

Threads, checkpoints and state history live on the server; replies stream from it through
langgraph-sdk. The server wants UUID thread ids, so the names people type (``main``, ``work``)
are kept in each thread's metadata under ``chatbot_name``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, convert_to_messages

from chatbot.config.sources import without_password
from chatbot.engine.runsettings import RunSettings
from chatbot.history.snapshots import (
    ACTION_KEY,
    ORIGIN_KEY,
    SYSTEM_PROMPT_KEY,
    SYSTEM_ROLE_KEY,
    Snapshot,
    fork_values,
    snapshot_from_parts,
)
from chatbot.sanitize import valid_text
from chatbot.store.base import ThreadInfo
from chatbot.threads.attachments import Content
from chatbot.threads.events import (
    Event,
    NothingToFold,
    Reply,
    Token,
    TurnStream,
    Unanswered,
    custom_event,
    make_title,
    thread_title,
)
from chatbot.threads.operations import BackendError, ThreadOperations
from chatbot.threads.reaching import unreachable_line

if TYPE_CHECKING:
    from chatbot.store.search import Hit
    from chatbot.threads.memorybook import MemoryBook

NAME_KEY = "chatbot_name"
ASSISTANT = "chatbot"
LEAVING = "remember"
"""The server's graph that reads a thread being left for memories (langgraph.json)."""
STREAM_MODES = ["messages-tuple", "custom", "updates"]
_PAGE = 200


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _when(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def snapshot_from_state(state: dict[str, Any]) -> Snapshot | None:
    """A server ``ThreadState`` as a :class:`Snapshot` (``None`` for a thread with no state)."""
    checkpoint = state.get("checkpoint") or {}
    checkpoint_id = checkpoint.get("checkpoint_id") or state.get("checkpoint_id")
    if not checkpoint_id:
        return None
    parent = state.get("parent_checkpoint") or {}
    return snapshot_from_parts(
        checkpoint_id=checkpoint_id,
        parent_id=parent.get("checkpoint_id") or state.get("parent_checkpoint_id"),
        metadata=state.get("metadata") or {},
        values=state.get("values") if isinstance(state.get("values"), dict) else {},
        next_nodes=state.get("next") or (),
        created_at=state.get("created_at"),
    )


def _title_of(values: dict[str, Any]) -> str:
    """The title of a thread given none (made in Studio): its first user message."""
    raw = values.get("messages") or []
    return thread_title(convert_to_messages([m])[0] for m in raw if isinstance(m, dict))


def events_from_parts(parts: Any) -> Iterator[Event]:
    """Translate a server stream (``messages-tuple``, ``custom``, ``updates``) into events."""
    for part in parts:
        kind, data = part.event, part.data
        if kind == "messages" and isinstance(data, list | tuple) and len(data) == 2:
            chunk, metadata = data
            if (
                isinstance(chunk, dict)
                and chunk.get("type") in ("AIMessageChunk", "ai")
                and (metadata or {}).get("langgraph_node") == "conversation"
                and isinstance(chunk.get("content"), str)
                and chunk["content"]
            ):
                yield Token(valid_text(chunk["content"]))
        elif kind == "custom":
            event = custom_event(data)
            if event is not None:
                yield event
        elif kind == "updates" and isinstance(data, dict) and data.get("conversation"):
            raw = [m for m in data["conversation"].get("messages", []) if m.get("type") == "ai"]
            if raw:
                message = convert_to_messages([raw[-1]])[0]
                if isinstance(message, AIMessage) and not message.tool_calls:
                    yield Reply(message)
        elif kind == "error":
            detail = data.get("message") if isinstance(data, dict) else data
            raise BackendError(f"the server's run failed: {detail}")


def _probe_answer(part: Any) -> tuple[bool, NothingToFold | None]:
    """What one part of a compaction probe's stream says: (answered, nothing to fold)."""
    if part.event == "error":
        return True, None  # (the real run meets the same and says it)
    event = custom_event(part.data) if part.event == "custom" else None
    if isinstance(event, NothingToFold):
        return True, event
    return event is not None, None  # a fold announced, made or failed: there is something


class RemoteBackend(ThreadOperations):
    """Threads on a LangGraph server, driven through langgraph-sdk."""

    def __init__(self, url: str, assistant: str = ASSISTANT) -> None:
        from langgraph_sdk import get_sync_client

        self.url = url.rstrip("/")
        self.location = without_password(self.url)  # (what people see)
        self.local_only_note = f"this session uses the LangGraph server at {self.location}"
        self.assistant = assistant
        self._check_reachable()
        self.client = get_sync_client(url=self.url)
        self._aclient: tuple[Any, Any] | None = None  # (the loop, its client: see _async_client)
        self._ids: dict[str, str] = {}
        self._metadata: dict[str, dict[str, Any]] = {}  # (by server id, as last seen)

    def _check_reachable(self) -> None:
        """Fail fast (the SDK retries a refused connection for several seconds)."""
        import httpx

        try:
            answer = httpx.get(f"{self.url}/ok", timeout=5)
        except httpx.HTTPError as error:
            raise BackendError(unreachable_line(self.url, error)) from None
        if answer.status_code != 200:
            raise BackendError(
                f"{self.location} answered HTTP {answer.status_code} to /ok: "
                "is it a LangGraph server?"
            )

    def _call(self, action: Any) -> Any:
        """Run an SDK call; a connection or HTTP problem becomes one BackendError line."""
        with self._answering():
            return action()

    @contextmanager
    def _answering(self, streaming: bool = False) -> Iterator[None]:
        """Around an SDK call (or reading a run's stream): the server unreachable (or lost),
        or refusing, is one BackendError line."""
        import httpx
        from langgraph_sdk import errors

        try:
            yield
        except httpx.TransportError as error:
            if streaming:
                lost = f"lost the LangGraph server at {self.location} ({type(error).__name__})"
                raise BackendError(lost) from None
            raise BackendError(unreachable_line(self.url, error)) from None
        except (httpx.HTTPStatusError, errors.APIStatusError) as error:
            refused = f"the LangGraph server at {self.location} refused: {error}"
            raise BackendError(refused) from None

    # --- names ----------------------------------------------------------------------------

    def _find(self, name: str) -> str | None:
        if name in self._ids:
            return self._ids[name]
        found = self._call(  # (the oldest: a copy made on the server carries the name too)
            lambda: self.client.threads.search(
                metadata={NAME_KEY: name}, limit=1, sort_by="created_at", sort_order="asc"
            )
        )
        if found:
            return self._remember(name, found[0])
        if _is_uuid(name):
            try:
                thread = self.client.threads.get(name)
            except Exception:
                return None
            return self._remember(name, thread)
        return None

    def _remember(self, name: str, thread: Mapping[str, Any]) -> str:
        server_id = str(thread["thread_id"])
        self._ids[name] = server_id
        self._metadata[server_id] = dict(thread.get("metadata") or {})
        return server_id

    def _require(self, name: str) -> str:
        thread_id = self._find(name)
        if thread_id is None:
            raise BackendError(
                f"no thread {name!r} on {self.location} ('--url ... threads' lists them)"
            )
        return thread_id

    def _create(self, name: str, metadata: dict[str, Any] | None = None) -> str:
        thread = self._call(
            lambda: self.client.threads.create(
                metadata={NAME_KEY: name, **(metadata or {})}, graph_id=self.assistant
            )
        )
        return self._remember(name, thread)

    def _title(self, server_id: str, title: str) -> None:
        """Give a thread made before its first message that message's title, as locally."""
        metadata = self._metadata.get(server_id)
        if metadata is None or metadata.get("title") or not title:
            return
        self._call(lambda: self.client.threads.update(server_id, metadata={"title": title}))
        metadata["title"] = title

    def _update(self, server_id: str, values: dict[str, Any]) -> None:
        """Write ``values`` into the thread's state, as its graph's last node would."""
        self._call(
            lambda: self.client.threads.update_state(
                server_id, values, as_node="summarize_conversation"
            )
        )

    def _marked(self, server_id: str, state: dict[str, Any]) -> dict[str, Any]:
        """A server state with a fork's first checkpoint marked as the local store marks it."""
        origin = (self._metadata.get(server_id) or {}).get(ORIGIN_KEY)
        metadata = state.get("metadata") or {}
        if not origin or state.get("parent_checkpoint") or metadata.get("source") != "update":
            return state
        return {**state, "metadata": {**metadata, ACTION_KEY: "fork", ORIGIN_KEY: origin}}

    # --- turns ------------------------------------------------------------------------------

    def _run(
        self,
        server_id: str,
        first: tuple[Event, ...] = (),
        sent: tuple[str, str] | None = None,
        probe: dict[str, Any] | None = None,
        **arguments: Any,
    ) -> TurnStream:
        """A run on the server as events (``first`` before them), cancelled by the server when
        the stream closes (Ctrl-C). ``sent``: the thread's name and the id of the message sent.
        ``probe``: a compaction probe asked first; when it finds nothing to fold, that is the
        one event and the thread is not run."""
        arguments = {"stream_mode": STREAM_MODES, "on_disconnect": "cancel", **arguments}

        async def cancellable() -> AsyncIterator[Event]:
            for event in first:
                yield event
            if probe is not None:
                nothing = await self._aprobe(probe)
                if nothing is not None:
                    yield nothing
                    return
            with self._answering(streaming=True):
                async for part in self._async_client().runs.stream(
                    server_id, self.assistant, **arguments
                ):
                    for event in events_from_parts([part]):
                        yield event

        if sent is None:
            return TurnStream(cancellable)
        name, message_id = sent
        return TurnStream(cancellable, message_id=message_id, current=lambda: self.current(name))

    def _async_client(self) -> Any:
        """The SDK's async client for the running loop (its connections belong to a loop)."""
        import asyncio

        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient[0] is not loop:
            from langgraph_sdk import get_client

            self._aclient = (loop, get_client(url=self.url))
        return self._aclient[1]

    def send(
        self, thread_id: str, content: Content, context: dict[str, Any] | None = None
    ) -> TurnStream:
        """Run one turn on the server, streaming the reply (``content``: text or blocks)."""
        server_id = self._find(thread_id)
        first: tuple[Event, ...] = ()
        if server_id is None:
            server_id = self._create(thread_id, {"title": make_title(content)})
        else:
            now = self.current(thread_id)
            held = now.messages if now is not None else ()
            # (a thread made elsewhere, Studio's, is titled by its own first message)
            self._title(server_id, thread_title(held, "" if held else content))
            if now is not None and now.awaiting_reply:
                first = (Unanswered(thread_id),)
        message_id = str(uuid.uuid4())
        return self._run(
            server_id,
            first,
            (thread_id, message_id),
            input={"messages": [{"role": "user", "content": content, "id": message_id}]},
            context=context or None,
        )

    def resume(
        self, thread_id: str, checkpoint_id: str | None, context: dict[str, Any] | None = None
    ) -> TurnStream:
        """Run on from a checkpoint (default: the latest), as LangGraph time travel does. What
        the thread has spent goes with the run in its metadata, so that it still counts
        (:mod:`chatbot.memory.pricing`)."""
        from chatbot.memory.pricing import spent_metadata

        server_id = self._require(thread_id)
        return self._run(
            server_id,
            input=None,
            context=context or None,
            checkpoint_id=checkpoint_id,
            metadata=spent_metadata(self.current(thread_id)) or None,
        )

    def compact(
        self, thread_id: str, focus: str = "", context: dict[str, Any] | None = None
    ) -> TurnStream:
        """Fold the older messages into the summary now, on the server. With nothing to fold
        nothing runs on the thread, as locally: a probe asks the server's own rule first."""
        server_id = self._require(thread_id)
        run_context = {**(context or {}), "compact": True, "compact_focus": focus}
        return self._run(
            server_id,
            probe=self._compaction_probe(server_id, run_context),
            input={"messages": []},
            context=run_context,
            metadata={ACTION_KEY: "compact"},
        )

    def _compaction_probe(self, server_id: str, context: dict[str, Any]) -> dict[str, Any] | None:
        """The arguments of a stateless run telling whether a compaction would fold anything
        by the server's rule: the thread's values as input, the offline model as summary model
        (no provider is called: a fold announces itself first). ``None`` when there is no
        reply yet (the real run says why)."""
        values = self._values(server_id)
        messages = values.get("messages") or []
        if not messages or messages[-1].get("type") != "ai":
            return None
        probe_input = {"messages": messages, "summary": str(values.get("summary") or "")}
        if values.get(SYSTEM_PROMPT_KEY):
            probe_input["system_prompt"] = str(values[SYSTEM_PROMPT_KEY])
        return {
            "input": probe_input,
            "context": {**context, "summary_model": "offline"},
            "stream_mode": ["custom"],
            "on_disconnect": "cancel",
        }

    async def _aprobe(self, probe: dict[str, Any]) -> NothingToFold | None:
        """Run a compaction probe to its end: its :class:`NothingToFold`, or ``None``."""
        found: NothingToFold | None = None
        answered = False
        with self._answering(streaming=True):
            async for part in self._async_client().runs.stream(None, self.assistant, **probe):
                if not answered:
                    answered, found = _probe_answer(part)
        return found

    def regenerate(self, thread_id: str, context: dict[str, Any] | None = None) -> TurnStream:
        """Answer the last message again from the state as it is now (summary included)."""
        server_id = self._require(thread_id)
        messages = self._values(server_id).get("messages") or []
        if not messages or messages[-1].get("type") != "ai":
            raise BackendError("nothing to regenerate: the last message has no reply")
        last = {"type": "remove", "id": messages[-1]["id"], "content": ""}
        self._update(server_id, {"messages": [last]})
        return self.resume(thread_id, None, context)

    # --- reading ----------------------------------------------------------------------------

    def current(self, thread_id: str) -> Snapshot | None:
        """The thread's latest state on the server (``None`` if it has none)."""
        server_id = self._find(thread_id)
        if server_id is None:
            return None
        return snapshot_from_state(self._call(lambda: self.client.threads.get_state(server_id)))

    def history(self, thread_id: str) -> list[Snapshot]:
        """Every checkpoint of the thread on the server, newest first."""
        server_id = self._find(thread_id)
        if server_id is None:
            return []
        snapshots: list[Snapshot] = []
        before: Any = None
        while True:
            page = self._call(
                lambda before=before: self.client.threads.get_history(
                    server_id, limit=_PAGE, before=before
                )
            )
            states = (snapshot_from_state(self._marked(server_id, state)) for state in page)
            snapshots += [s for s in states if s]
            if len(page) < _PAGE:
                return snapshots
            before = page[-1]["checkpoint"]

    def recent_checkpoint_ids(self, thread_id: str, limit: int) -> list[str]:
        """The ids of the thread's newest ``limit`` checkpoints on the server, newest first."""
        server_id = self._find(thread_id)
        if server_id is None or limit <= 0:
            return []
        page = self._call(lambda: self.client.threads.get_history(server_id, limit=limit))
        ids = [(state.get("checkpoint") or {}).get("checkpoint_id") for state in page]
        return [str(checkpoint_id) for checkpoint_id in ids if checkpoint_id]

    def threads(self) -> list[ThreadInfo]:
        """The server's threads, most recently updated first."""
        found = self._call(
            lambda: self.client.threads.search(limit=100, sort_by="updated_at", sort_order="desc")
        )
        # A copy made on the server carries its original's name: the oldest thread keeps it
        # (the one a name finds), the others are listed by their own ids.
        owners: dict[str, tuple[str, str]] = {}
        for thread in found:
            if name := (thread.get("metadata") or {}).get(NAME_KEY):
                made = (str(thread.get("created_at") or ""), str(thread["thread_id"]))
                owners[name] = min(owners.get(name, made), made)
        listing = []
        for thread in found:
            metadata = thread.get("metadata") or {}
            server_id = str(thread["thread_id"])
            values = thread.get("values")
            if not isinstance(values, dict):  # (a copy made on the server: its state is
                values = self._values(server_id)  # copied, not its listing)
            name = metadata.get(NAME_KEY) or server_id
            if name in owners and owners[name][1] != server_id:
                name = server_id
            if name not in self._ids:
                self._remember(name, thread)
            origin = str(metadata.get("chatbot_origin") or "")
            listing.append(
                ThreadInfo(
                    thread_id=name,
                    checkpoints=None,
                    last_active=_when(thread.get("updated_at")),
                    title=str(metadata.get("title") or "") or _title_of(values),
                    message_count=len(values.get("messages") or []) if values else 0,
                    has_summary=bool(values.get("summary")) if values else False,
                    origin_thread=origin.partition("@")[0] or None,
                    origin_checkpoint=origin.partition("@")[2] or None,
                )
            )
        return listing

    def _values(self, server_id: str) -> dict[str, Any]:
        """A thread's latest values, read from its state (``{}`` for a thread with none)."""
        state = self._call(lambda: self.client.threads.get_state(server_id))
        values = state.get("values") if isinstance(state, dict) else None
        return values if isinstance(values, dict) else {}

    def search(
        self,
        text: str,
        *,
        thread_id: str | None = None,
        limit: int = 20,
        progress: Any = None,
        index: bool = True,
    ) -> list[Hit]:
        """Not on a server: its threads have no search index of chatbot's."""
        raise self._local_only("search")

    def thread_exists(self, thread_id: str) -> bool:
        """True if the server has a thread by that name (or id)."""
        return self._find(thread_id) is not None

    def run_settings(
        self, context: dict[str, Any] | None, thread_prompt: str = ""
    ) -> RunSettings | None:
        """``None``: the server resolves its runs with its own settings and models."""
        return None

    def set_system_prompt(self, thread_id: str, prompt: str, role: str = "") -> bool:
        """Store the thread's own system prompt; False when it already was this prompt."""
        server_id = self._find(thread_id)
        if server_id is None and not prompt:
            return False
        if server_id is not None:
            values = self._values(server_id)
            now = (values.get(SYSTEM_PROMPT_KEY) or "", values.get(SYSTEM_ROLE_KEY) or "")
            if now == (prompt, role):
                return False
        else:
            server_id = self._create(thread_id)
        self._update(server_id, {SYSTEM_PROMPT_KEY: prompt, SYSTEM_ROLE_KEY: role})
        return True

    # --- changing ---------------------------------------------------------------------------

    def fork(self, thread_id: str, checkpoint_id: str | None, new_id: str) -> None:
        """A new server thread holding the state of ``thread_id`` at a checkpoint."""
        server_id = self._require(thread_id)
        if self._find(new_id) is not None:
            raise BackendError(f"thread {new_id!r} already exists: pick another name")
        state = self._call(
            lambda: self.client.threads.get_state(server_id, checkpoint_id=checkpoint_id)
        )
        source = snapshot_from_state(state)
        if source is None:
            raise BackendError(f"thread {thread_id!r} has no state to fork")
        thread = self._call(lambda: self.client.threads.get(server_id))
        origin = f"{thread_id}@{source.checkpoint_id}"
        title = (thread.get("metadata") or {}).get("title", "")
        new_server_id = self._create(new_id, {ORIGIN_KEY: origin, "title": title})
        self._update(new_server_id, fork_values(state.get("values") or {}))

    def _local_only(self, what: str) -> BackendError:
        return BackendError(f"{what} works on local threads only ({self.local_only_note})")

    def restore(self, thread_id: str, checkpoint_id: str | None, action: str) -> None:
        raise self._local_only(f"/{action}")

    def rename(self, thread_id: str, new_id: str) -> None:
        raise self._local_only("rename")

    def delete(self, thread_id: str) -> bool:
        raise self._local_only("delete")

    def memory_book(self) -> MemoryBook:
        """The user's memories: the server's store, which its graph reads and writes."""
        from chatbot.threads.memorybook import MemoryBook, ServerStore

        return MemoryBook(
            ServerStore(self.client), thread_key=lambda name: self._find(name) or name
        )

    def leave(self, thread_id: str, context: dict[str, Any] | None = None) -> int:
        """The thread is being left: one that never folded is read for facts about the user by
        the server's ``remember`` graph. How many memories it added (none without that graph)."""
        from langgraph_sdk import errors

        server_id = self._find(thread_id)
        values = self._values(server_id) if server_id is not None else {}
        if not values.get("messages") or values.get("summary"):
            return 0
        leaving = {"thread_id": server_id, "messages": values["messages"]}

        def read() -> Any:
            try:
                return self.client.runs.wait(None, LEAVING, input=leaving, context=context or None)
            except errors.NotFoundError:
                return None

        answer = self._call(read)
        return int(answer.get("added") or 0) if isinstance(answer, dict) else 0

    def answering_elsewhere(self, thread_id: str) -> bool:
        return False  # (the server runs one run a thread at a time itself)
