"""The graph on LangGraph's dev server, driven by langgraph-sdk and by the REPL in remote mode.

One ``langgraph dev`` (``tests.helpers.DevServer``) per module, offline model, on a free port
of 127.0.0.1, in a temporary directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from chatbot.cli.commands import app
from tests.helpers import DevServer, worth_folding

pytestmark = pytest.mark.integration


@pytest.fixture
def client(dev_server: DevServer) -> Any:
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=dev_server.url, timeout=30)


def run_turn(client: Any, thread_id: str, text: str, **kwargs: Any) -> list[Any]:
    return list(
        client.runs.stream(
            thread_id,
            "chatbot",
            input={"messages": [{"role": "user", "content": text}]},
            stream_mode=["messages-tuple", "custom", "updates"],
            **kwargs,
        )
    )


@pytest.mark.slow
def test_server_reports_the_port_it_bound_and_serves_the_graph(
    dev_server: DevServer, client: Any
) -> None:
    assert dev_server.url.startswith("http://127.0.0.1:")
    (assistant,) = client.assistants.search(graph_id="chatbot", limit=5)
    schema = client.assistants.get_schemas(assistant["assistant_id"])["context_schema"]
    for field in ("chat_model", "summary_model", "summary_trigger", "summary_keep"):
        assert schema["properties"][field]["description"], f"{field} is described for Studio"
    assert {"system_prompt", "language", "recall"} <= set(schema["properties"])


@pytest.mark.slow
def test_turns_on_the_server_fold_messages_into_a_summary(client: Any) -> None:
    thread = client.threads.create()
    for text in ["hi, I'm Ada", "I like tea", "and biscuits"]:
        run_turn(client, thread["thread_id"], text)
    state = client.threads.get_state(thread["thread_id"])
    assert "- hi, I'm Ada" in state["values"]["summary"]
    assert len(state["values"]["messages"]) == 2

    history = client.threads.get_history(thread["thread_id"], limit=50)
    counts = [len((h["values"] or {}).get("messages", [])) for h in history]
    assert max(counts) == 6, "an older checkpoint still holds the messages later folded"


@pytest.mark.slow
def test_reply_stream_has_no_summary_tokens(client: Any) -> None:
    thread = client.threads.create()
    run_turn(client, thread["thread_id"], "first message")
    run_turn(client, thread["thread_id"], "another message")
    parts = run_turn(client, thread["thread_id"], "second message")
    streamed = "".join(
        part.data[0]["content"]
        for part in parts
        if part.event == "messages" and isinstance(part.data[0].get("content"), str)
    )
    assert 'You said: "second message"' in streamed
    assert "extractive summary" not in streamed
    assert any(p.event == "custom" and p.data.get("event") == "summarized" for p in parts)
    nodes = {p.data[1].get("langgraph_node") for p in parts if p.event == "messages"}
    assert nodes == {"conversation"}


@pytest.mark.slow
def test_a_per_run_context_overrides_the_trigger(client: Any) -> None:
    thread = client.threads.create()
    run_turn(
        client,
        thread["thread_id"],
        worth_folding("summarize me at once"),  # (folding it makes the context smaller)
        context={"summary_trigger": "messages:1", "summary_keep": "messages:1"},
    )
    values = client.threads.get_state(thread["thread_id"])["values"]
    assert "- summarize me at once" in values["summary"]
    assert len(values["messages"]) == 1

    other = client.threads.create()
    run_turn(client, other["thread_id"], "no override")
    assert not client.threads.get_state(other["thread_id"])["values"].get("summary")


@pytest.mark.slow
def test_remote_repl_session_and_ask(dev_server: DevServer) -> None:
    runner = CliRunner()
    script = "\n".join(
        [
            "hello from the terminal",
            "second line",
            "third line",
            "/threads",
            "/summary",
            "/history 3",
            "/fork",
            "/undo",
            "/thread remote-main",
            "/retry",
            "/tokens",
            "/model",
            "/context",
            "/model offline",
            "after switching",
            "/model gpt-4o",
            "needs a key",
            "/exit",
        ]
    )
    result = runner.invoke(
        app, ["chat", "--url", dev_server.url, "--thread", "remote-main"], input=script + "\n"
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    greeting = out.splitlines()[0]
    assert " · the server's model · threads in http://127.0.0.1:" in greeting, greeting
    assert "(the server's model)" not in out, "no placeholder where a name would be"
    assert "chat model: the server's (its CHATBOT_MODEL)" in out
    assert 'You said: "hello from the terminal"' in out
    assert "remote-main" in out and "hello from the terminal" in out
    assert "summarized 4 messages" in out, "the server's summary event reaches the REPL"
    assert "summary (" in out, "/summary shows the server's summary"
    assert "forked remote-main" in out and "remote-main-fork1" in out
    assert "/undo works on local threads only" in out
    assert "set by the server's settings" in out, "/tokens does not claim the local trigger"
    said = " ".join(out.split())
    assert "context of thread remote-main: about" in said, "/context: estimated here"
    assert "| trigger unknown (set by the server's settings)" in said
    assert "next fold: decided by the server's settings" in said
    assert "chat model is now offline for this session (on the server)" in out
    assert 'You said: "after switching"' in out
    (failed,) = [line for line in out.splitlines() if line.startswith("error:")][-1:]
    assert "model 'gpt-4o' needs OPENAI_API_KEY" in failed, "the server's error, in one line"

    asked = runner.invoke(app, ["ask", "one more", "--url", dev_server.url, "-t", "remote-main"])
    assert asked.exit_code == 0, asked.output
    assert 'You said: "one more"' in asked.stdout
    shown = runner.invoke(app, ["show", "remote-main", "--url", dev_server.url, "--json"])
    document = json.loads(shown.stdout)
    assert document["thread_id"] == "remote-main"
    assert "- hello from the terminal" in document["summary"]
    history = runner.invoke(app, ["history", "remote-main", "--url", dev_server.url, "--json"])
    turns = json.loads(history.stdout)
    said = [t["text"] for t in turns if t["kind"] == "turn"]
    assert said[0] == "one more" and said[-1] == "hello from the terminal"
    assert any(not t["finished"] for t in turns), "the run that failed on the server"
    folds = [(t["kind"], t["text"], t["fate"]) for t in turns if t["folded"]]
    assert folds[-2:] == [("retry", "third line", None), ("turn", "third line", "retried")]
    listing = runner.invoke(app, ["threads", "--url", dev_server.url, "--json"])
    names = {t["thread_id"] for t in json.loads(listing.stdout)}
    assert {"remote-main", "remote-main-fork1"} <= names


def test_unreachable_server_is_one_clear_line(refused_port: int) -> None:
    result = CliRunner().invoke(app, ["threads", "--url", f"http://127.0.0.1:{refused_port}"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "cannot reach the LangGraph server" in line


@pytest.mark.slow
def test_delete_with_a_server_url_refuses_and_keeps_the_local_thread(
    dev_server: DevServer, tmp_path: Path
) -> None:
    runner = CliRunner()
    db = str(tmp_path / "local.sqlite")
    assert runner.invoke(app, ["ask", "precious", "-t", "work", "--db", db]).exit_code == 0
    for args in (
        ["--url", dev_server.url, "--db", db, "delete", "work", "--yes"],
        ["delete", "work", "--yes", "--db", db, "--url", dev_server.url],
    ):
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2
        assert refused.stderr.strip() == (
            "error: delete works on local threads only (this session uses the LangGraph "
            f"server at {dev_server.url})"
        )
    listing = json.loads(runner.invoke(app, ["threads", "--json", "--db", db]).stdout)
    assert [t["thread_id"] for t in listing] == ["work"], "the local thread is still there"


@pytest.mark.slow
def test_remote_compact_and_retry_after_it(dev_server: DevServer) -> None:
    runner = CliRunner()
    for text in [worth_folding("first fact: the cat is Tom"), "second fact: the dog is Rex"]:
        asked = runner.invoke(app, ["ask", text, "--url", dev_server.url, "-t", "remote-compact"])
        assert asked.exit_code == 0, asked.output

    compacted = runner.invoke(
        app, ["compact", "remote-compact", "--focus", "keep the pets", "--url", dev_server.url]
    )
    assert compacted.exit_code == 0, compacted.output
    assert "compacted: folded" in compacted.stdout
    shown = json.loads(
        runner.invoke(app, ["show", "remote-compact", "--url", dev_server.url, "--json"]).stdout
    )
    assert "the cat is Tom" in shown["summary"]
    kept = [m["content"] for m in shown["messages"]]
    assert len(kept) == 2, "the keep window (messages:2) stays verbatim"

    retried = runner.invoke(
        app,
        ["chat", "--url", dev_server.url, "--thread", "remote-compact"],
        input="/retry\n/exit\n",
    )
    assert retried.exit_code == 0, retried.output
    assert 'You said: "second fact: the dog is Rex"' in retried.stdout
    after = json.loads(
        runner.invoke(app, ["show", "remote-compact", "--url", dev_server.url, "--json"]).stdout
    )
    assert after["summary"] == shown["summary"], "/retry keeps the compaction"
    assert [m["content"] for m in after["messages"]] == kept


@pytest.mark.slow
def test_threads_made_by_the_sdk_or_copied_on_the_server_are_listed_by_their_first_message(
    dev_server: DevServer, client: Any
) -> None:
    runner = CliRunner()
    made = client.threads.create()  # (as Studio makes one: no metadata of chatbot's)
    run_turn(client, made["thread_id"], "hello from Studio")
    copied = client.threads.copy(made["thread_id"])
    empty = client.threads.create()
    asked = runner.invoke(
        app, ["ask", "later words", "--url", dev_server.url, "-t", made["thread_id"]]
    )
    assert asked.exit_code == 0, asked.output

    listing = runner.invoke(app, ["threads", "--url", dev_server.url, "--json"])
    assert listing.exit_code == 0, listing.output
    rows = {row["thread_id"]: row for row in json.loads(listing.stdout)}
    assert (rows[made["thread_id"]]["title"], rows[made["thread_id"]]["messages"]) == (
        "hello from Studio",
        4,
    )
    assert (rows[copied["thread_id"]]["title"], rows[copied["thread_id"]]["messages"]) == (
        "hello from Studio",
        2,
    )
    assert (rows[empty["thread_id"]]["title"], rows[empty["thread_id"]]["messages"]) == ("", 0)

    # A copy of a chatbot thread carries its name: listed by its own id, the name kept once.
    named = runner.invoke(app, ["ask", "named words", "--url", dev_server.url, "-t", "named"])
    assert named.exit_code == 0, named.output
    (original,) = client.threads.search(metadata={"chatbot_name": "named"})
    twin = client.threads.copy(original["thread_id"])
    listing = runner.invoke(app, ["threads", "--url", dev_server.url, "--json"])
    ids = [row["thread_id"] for row in json.loads(listing.stdout)]
    assert ids.count("named") == 1 and twin["thread_id"] in ids
    assert original["thread_id"] not in ids, "the name is the original's"
    again = runner.invoke(app, ["ask", "more words", "--url", dev_server.url, "-t", "named"])
    assert again.exit_code == 0, again.output
    assert len(client.threads.get_state(original["thread_id"])["values"]["messages"]) == 4
    assert len(client.threads.get_state(twin["thread_id"])["values"]["messages"]) == 2


@pytest.mark.slow
def test_a_remote_retry_counts_the_chat_call_it_makes(dev_server: DevServer) -> None:
    result = CliRunner().invoke(
        app,
        ["chat", "--url", dev_server.url, "--thread", "remote-retry-cost"],
        input="one\n/retry\n/tokens\n/exit\n",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count('You said: "one"') == 2
    assert "2 chat calls and 0 summary calls" in " ".join(result.stdout.split())


@pytest.mark.slow
def test_studio_input_form_takes_what_a_user_gives_and_output_is_the_whole_state(
    client: Any,
) -> None:
    (assistant,) = client.assistants.search(graph_id="chatbot", limit=5)
    schemas = client.assistants.get_schemas(assistant["assistant_id"])
    assert set(schemas["input_schema"]["properties"]) == {"messages", "summary", "system_prompt"}
    output = set(schemas["output_schema"]["properties"])
    assert {"messages", "summary", "folded", "usage", "system_role", "context_overflow"} <= output
    assert "fold_tried" not in output, "the run's own note is not part of the state"


@pytest.mark.slow
def test_state_edits_without_as_node_after_a_turn_while_paused_and_from_an_old_checkpoint(
    client: Any,
) -> None:
    """What Studio's state editor sends: ``update_state`` with no ``as_node``."""
    thread = client.threads.create()["thread_id"]
    run_turn(client, thread, "hi, I'm Ada")
    client.threads.update_state(thread, {"summary": "The user is called Grace."})
    state = client.threads.get_state(thread)
    assert state["values"]["summary"] == "The user is called Grace." and state["next"] == []

    first = state["values"]["messages"][0]
    client.threads.update_state(
        thread, {"messages": [{"type": "human", "content": "hi, I'm Grace", "id": first["id"]}]}
    )
    edited = client.threads.get_state(thread)["values"]["messages"]
    assert edited[0]["content"] == "hi, I'm Grace"

    paused = client.threads.create()["thread_id"]
    run_turn(client, paused, "first", interrupt_before=["conversation"])
    assert client.threads.get_state(paused)["next"] == ["conversation"]
    client.threads.update_state(paused, {"summary": "Edited while paused."})
    assert client.threads.get_state(paused)["next"] == ["conversation"]
    list(client.runs.stream(paused, "chatbot", input=None, stream_mode="updates"))
    resumed = client.threads.get_state(paused)["values"]
    assert resumed["summary"] == "Edited while paused."
    assert [m["type"] for m in resumed["messages"]] == ["human", "ai"]

    history = client.threads.get_history(thread, limit=50)
    old = next(h for h in history if len(h["values"].get("messages", [])) == 2)
    forked = client.threads.update_state(
        thread, {"summary": "a fork"}, checkpoint_id=old["checkpoint"]["checkpoint_id"]
    )
    fork_state = client.threads.get_state(
        thread, checkpoint_id=forked["checkpoint"]["checkpoint_id"]
    )
    assert fork_state["values"]["summary"] == "a fork"
    assert fork_state["parent_checkpoint"]["checkpoint_id"] == old["checkpoint"]["checkpoint_id"]


@pytest.mark.slow
def test_a_state_edit_of_the_wrong_type_is_refused_with_its_reason(client: Any) -> None:
    """The SDK (or Studio's editor) sends a number as the summary: HTTP 400 saying what the
    key must be, and the thread as it was."""
    import httpx

    thread = client.threads.create()["thread_id"]
    run_turn(client, thread, "hi")
    before = client.threads.get_state(thread)

    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.threads.update_state(thread, {"summary": 42})

    assert refused.value.response.status_code == 400
    assert "the state's 'summary' must be text" in refused.value.response.text
    after = client.threads.get_state(thread)
    assert after["checkpoint"] == before["checkpoint"]
    run_turn(client, thread, "still here")
    assert len(client.threads.get_state(thread)["values"]["messages"]) == 4


@pytest.mark.slow
def test_the_server_graph_recalls_folded_messages_from_its_checkpoints(
    dev_server: DevServer,
) -> None:
    """The server keeps no search index: recall reads the thread's checkpoints, and the REPL
    shows the round as it does locally."""
    runner = CliRunner()
    base = ["--url", dev_server.url, "-t", "remote-recall"]
    for text in ["My parking spot is B-42 on level 3.", "nice weather", "more weather"]:
        said = runner.invoke(app, ["ask", text, *base])
        assert said.exit_code == 0, said.output
    asked = runner.invoke(app, ["ask", "What was my parking spot?", *base])
    assert asked.exit_code == 0, asked.output
    assert 'recalling "parking spot"…' in asked.output
    assert 'You said: "My parking spot is B-42 on level 3."' in asked.stdout
    shown = json.loads(runner.invoke(app, ["show", "remote-recall", *base[:2], "--json"]).stdout)
    kinds = [m["type"] for m in shown["messages"]]
    assert "tool" in kinds or "B-42" not in shown["summary"], kinds


def test_the_servers_graph_remembers_in_the_servers_store(dev_server: DevServer) -> None:
    """The graph ``langgraph dev`` serves is compiled without a store: it reads and writes the
    server's, which ``--url`` lists and forgets through langgraph-sdk's client.store."""
    runner = CliRunner()
    url = dev_server.url
    asked = runner.invoke(app, ["ask", "remember that I write Go", "--url", url, "-t", "mem-a"])
    assert asked.exit_code == 0, asked.output
    listed = runner.invoke(app, ["memory", "list", "--json", "--url", url])
    assert listed.exit_code == 0, listed.output
    (memory,) = [m for m in json.loads(listed.stdout) if m["text"] == "I write Go"]
    assert memory["origin"] == "request" and memory["thread_id"]  # (the server's thread id)
    exported = runner.invoke(app, ["export", "mem-a", "-f", "json", "--url", url])
    assert [m["text"] for m in json.loads(exported.stdout)["memories"]] == ["I write Go"]
    gone = runner.invoke(app, ["memory", "forget", memory["id"], "--url", url])
    assert gone.exit_code == 0, gone.output
    again = runner.invoke(app, ["memory", "list", "--json", "--url", url])
    assert all(m["id"] != memory["id"] for m in json.loads(again.stdout))


@pytest.mark.slow
def test_a_server_thread_that_never_folded_is_read_for_memories_when_left(
    tmp_path: Path,
) -> None:
    """Leaving a server's thread runs the server's ``remember`` graph (a run of no thread): the
    server's summary model reads what the thread said, the server's store keeps the fact, and
    a thread left again with nothing new is not read twice."""
    from tests.fake_openai import FakeOpenAI
    from tests.helpers import is_summary_request, summary_requests

    def respond(body: dict[str, Any]) -> str:
        facts = "- a summary\n\n<memories>\n- Is vegan\n</memories>"
        return facts if is_summary_request(body) else "noted."

    with FakeOpenAI() as model_server:
        model_server.responder = respond
        workdir = tmp_path / "server"
        workdir.mkdir()
        server = DevServer(
            workdir,
            env={"CHATBOT_MODEL": "gpt-4o-mini", "OPENAI_BASE_URL": model_server.base_url},
        )
        try:
            runner = CliRunner()
            base = ["--url", server.url]
            script = "I'm vegan, by the way\n/thread rem-y\n/thread rem-x\n/thread rem-y\n/exit\n"
            said = runner.invoke(app, ["chat", *base, "--thread", "rem-x"], input=script)
            assert said.exit_code == 0, said.output
            assert "remembered 1 fact about you from rem-x" in said.stdout
            reads = summary_requests(model_server)
            assert len(reads) == 1, "rem-x is read once: nothing new the second time it is left"
            assert "vegan" in reads[0].last_user_text
            listed = runner.invoke(app, ["memory", "list", "--json", *base])
            (memory,) = json.loads(listed.stdout)
            assert (memory["text"], memory["origin"]) == ("Is vegan", "leave")
            assert memory["message_id"], "the message it came from"
        finally:
            server.stop()
