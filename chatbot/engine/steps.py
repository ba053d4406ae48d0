"""Model calls written once, run both ways: a node's logic is a generator that yields the
calls it needs and gets their replies back, and :func:`drive` / :func:`adrive` make the calls.

The synchronous driver serves ``graph.invoke`` and ``graph.stream`` (tests, embedding, the
benchmarks); the asynchronous one serves ``astream`` (the terminal and LangGraph's server),
where cancelling the task closes the HTTP request at once.

This is where a model's reply enters chatbot: the drivers hand the steps a reply made valid
text (:func:`chatbot.sanitize.valid_text`), so a lone surrogate in what a provider sent is
U+FFFD in the reply, the summary, the store and the terminal alike.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable

from chatbot.sanitize import valid_data

Result = TypeVar("Result")
Call = tuple[Runnable[Any, Any], list[BaseMessage]]
"""A model (or a model with its config) and the messages to send it."""
Steps = Generator[Call, AIMessage, Result]
"""Yields calls; each call's reply is sent back in, or its exception thrown in."""


def drive(steps: Steps[Result]) -> Result:
    """Run the steps, calling each model synchronously."""
    try:
        model, request = next(steps)
        while True:
            try:
                reply = model.invoke(request)
            except Exception as error:  # the steps decide what a failed call means
                model, request = steps.throw(error)
            else:
                model, request = steps.send(valid_reply(reply))
    except StopIteration as done:
        return done.value


async def adrive(steps: Steps[Result]) -> Result:
    """Run the steps, awaiting each model call (cancellable, unlike a call in a thread)."""
    try:
        model, request = next(steps)
        while True:
            try:
                reply = await model.ainvoke(request)
            except Exception as error:
                model, request = steps.throw(error)
            else:
                model, request = steps.send(valid_reply(reply))
    except StopIteration as done:
        return done.value
    finally:
        steps.close()


def valid_reply(reply: AIMessage) -> AIMessage:
    """The reply with its text valid (content, tool call arguments, metadata): the reply
    itself when it already was."""
    fields = ("content", "additional_kwargs", "response_metadata", "tool_calls")
    changed = {}
    for name in fields:
        value = getattr(reply, name, None)
        valid = valid_data(value)
        if valid is not value:
            changed[name] = valid
    return reply.model_copy(update=changed) if changed else reply


def watched(steps: Steps[Result], seen: Callable[[AIMessage], None]) -> Steps[Result]:
    """The same steps, telling ``seen`` each reply as it comes back (before the steps get it):
    how a node counts the calls a helper's steps make, failed or not."""
    try:
        call = next(steps)
    except StopIteration as done:
        return done.value
    while True:
        try:
            reply = yield call
        except GeneratorExit:
            steps.close()
            raise
        except BaseException as error:  # a failed call: the steps decide what it means
            try:
                call = steps.throw(error)
            except StopIteration as done:
                return done.value
            continue
        seen(reply)
        try:
            call = steps.send(reply)
        except StopIteration as done:
            return done.value
