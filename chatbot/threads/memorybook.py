"""The user's memories for the commands (``/memory``, ``chatbot memory``): one class over any
LangGraph store, the database's own or a LangGraph server's (:class:`ServerStore`), read and
written by the graph's own functions (:mod:`chatbot.engine.remembering`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from chatbot.engine import remembering
from chatbot.memory import facts
from chatbot.threads.operations import BackendError
from chatbot.threads.runner import blocking


class MemoryBook:
    """The user's memories in ``store``, and each thread's own switch (``/memory off``)."""

    def __init__(self, store: BaseStore, thread_key: Callable[[str], str] = str) -> None:
        """``thread_key``: the id the graph knows a thread by, from the name the user gives."""
        self.store = store
        self.thread_key = thread_key

    def all(self) -> list[facts.Memory]:
        """Every memory, superseded ones too, oldest first."""
        # (the store's own sync call: a view may ask while a loop runs on this thread)
        return remembering.memories_of(
            self.store.search(remembering.NAMESPACE, limit=remembering.MOST)
        )

    def in_force(self) -> list[facts.Memory]:
        """The memories the model is given (not superseded)."""
        return [memory for memory in self.all() if memory.active]

    def add(self, text: str, thread_id: str = "") -> facts.Memory:
        """Remember ``text`` (``/memory add``): a new memory from ``thread_id``."""
        fact = _checked(text)
        memory = facts.Memory(
            facts.new_id(),
            fact,
            self.thread_key(thread_id) if thread_id else "",
            created_at=remembering.now(),
            origin="added",
        )
        blocking(remembering.write(self.store, facts.Changes([memory], [])))
        return memory

    def edit(self, memory_id: str, text: str) -> facts.Memory:
        """Give the memory ``memory_id`` a new text (its id and source stay)."""
        found = [memory for memory in self.all() if memory.id == memory_id.strip().lower()]
        if not found:
            raise BackendError(f"no memory {memory_id!r}: '/memory' lists them with their ids")
        edited = replace(found[0], text=_checked(text))
        blocking(remembering.write(self.store, facts.Changes([edited], [])))
        return edited

    def forget(self, id_or_text: str) -> list[facts.Memory]:
        """Forget the memory with that id, or the one whose text holds it; several matching
        a text are refused (naming their ids), none is an error."""
        if not id_or_text.strip():
            raise BackendError("say which memory: /memory forget ID or /memory forget TEXT")
        found = facts.find(self.all(), id_or_text)
        if not found:
            raise BackendError(
                f"no memory is {id_or_text!r} or holds it: '/memory' lists them with their ids"
            )
        if len(found) > 1:
            ids = ", ".join(memory.id for memory in found)
            raise BackendError(f"{len(found)} memories hold {id_or_text!r} ({ids}): give one id")
        self.forget_all(found)
        return found

    def forget_all(self, memories: Iterable[facts.Memory]) -> None:
        """Delete these memories from the store."""
        for memory in memories:
            blocking(self.store.adelete(remembering.NAMESPACE, memory.id))

    def from_thread(self, thread_id: str) -> list[facts.Memory]:
        """The memories noted in ``thread_id``."""
        return facts.from_thread(self.all(), self.thread_key(thread_id))

    def thread_on(self, thread_id: str) -> bool:
        """False when the thread has its memories turned off (``/memory off``)."""
        record = self._record(self.thread_key(thread_id))
        return record.get("memory") != "off"

    def set_thread(self, thread_id: str, on: bool) -> None:
        """Turn the thread's memories on or off (off: it neither reads nor notes any)."""
        key, off = self.thread_key(thread_id), None if on else "off"
        blocking(remembering.update_thread(self.store, key, memory=off))

    def move_thread(self, thread_id: str, new_id: str) -> None:
        """The thread is renamed: its memories and its record name it by ``new_id``."""
        old, new = self.thread_key(thread_id), self.thread_key(new_id)
        moved = [replace(memory, thread_id=new) for memory in facts.from_thread(self.all(), old)]
        blocking(remembering.write(self.store, facts.Changes(moved, [])))
        record = self._record(old)
        if record:
            blocking(remembering.update_thread(self.store, new, **record))
            self.forget_thread(thread_id)

    def _record(self, key: str) -> dict[str, Any]:
        return remembering.record_of(self.store.get(remembering.THREADS, key) if key else None)

    def forget_thread(self, thread_id: str) -> None:
        """Drop the thread's own record (the thread is deleted)."""
        key = self.thread_key(thread_id)
        blocking(remembering.update_thread(self.store, key, memory=None, noted=None))


def _checked(text: str) -> str:
    fact = facts.clean(text)
    if fact is None:
        if text.strip():
            raise BackendError(
                "that looks like it holds a key or a password, which is never remembered"
            )
        raise BackendError("give the fact to remember: /memory add TEXT")
    return fact


class ServerStore(BaseStore):
    """A LangGraph server's store as a ``BaseStore``: each operation one call of langgraph-sdk's
    ``client.store``, so a server's memories are its graph's own."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)

    def _one(self, op: Op) -> Result:
        store = self.client.store
        if isinstance(op, GetOp):
            try:
                found = store.get_item(list(op.namespace), op.key)
            except Exception as error:  # (the SDK raises for a missing item)
                if getattr(getattr(error, "response", None), "status_code", None) == 404:
                    return None
                raise
            return _item(found) if found else None
        if isinstance(op, PutOp):
            if op.value is None:
                store.delete_item(list(op.namespace), op.key)
            else:
                store.put_item(list(op.namespace), op.key, op.value)
            return None
        if isinstance(op, SearchOp):
            answer = store.search_items(
                list(op.namespace_prefix), filter=op.filter, limit=op.limit, offset=op.offset
            )
            return [_item(found, SearchItem) for found in answer.get("items", [])]
        if isinstance(op, ListNamespacesOp):
            answer = store.list_namespaces(limit=op.limit, offset=op.offset)
            return [tuple(found) for found in answer.get("namespaces", [])]
        raise BackendError(f"the server's store cannot do {type(op).__name__}")


def _item(found: Any, kind: type[Item] = Item) -> Any:
    return kind(
        namespace=tuple(found["namespace"]),
        key=found["key"],
        value=found["value"],
        created_at=found["created_at"],
        updated_at=found["updated_at"],
    )
