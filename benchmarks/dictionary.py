"""The zstd dictionary chatbot compresses stored values with, and what it saves.

    uv run --group dev python benchmarks/dictionary.py [--turns 400] [--write]

Not a timing benchmark: it makes the dictionary (``--write``: ``chatbot/store/zstd-1.dict``,
done once; the file is part of the storage format and never changes after it ships, see
:mod:`chatbot.store.compression`) and measures what it saves.

- **What it learns from**: the values a real thread stores, uncompressed: ``--turns`` turns
  through the real graph and ``LocalBackend`` (offline model, default settings, so it folds, with
  the recall tool offered, so some turns call it), on a new SQLite file, where each user message
  is made of random letters, digits and some Chinese, so the dictionary learns the skeleton that
  every checkpoint and message shares (LangGraph's keys, channel names and versions, message
  fields), not the words of any text; and replies shaped as langchain-openai makes them (its
  ``response_metadata`` and ``usage_metadata``), written as a turn writes them.
- **What it is measured on**: another thread of ``--turns`` turns, the one ``benchmarks/stores.py``
  takes (user messages of 60-120 common English words, seeded), never seen in training: the
  bytes of its checkpoints and writes uncompressed, compressed as before the dictionary (zstd,
  values over 256 bytes), and with it (values over 32 bytes); per turn and against the text.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import string
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import concurrency  # noqa: E402
from chatbot.store import compression  # noqa: E402

SIZE = 8192
"""Bytes of dictionary: enough for the skeleton; a bigger one would learn text."""


def gibberish(rng: random.Random, tag: str) -> str:
    """A user message of made-up words (letters and digits), some Chinese, some punctuation,
    now and then a question about something said before (the recall tool's cue)."""
    words = []
    for _ in range(rng.randint(8, 90)):
        kind = rng.random()
        if kind < 0.08:
            words.append(
                "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(2, 8)))
            )
        else:
            alphabet = (
                string.ascii_letters + string.digits if kind < 0.2 else string.ascii_lowercase
            )
            words.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 11))))
        if rng.random() < 0.1:
            words[-1] += rng.choice(".,;:!?")
    text = f"[{tag}] " + " ".join(words)
    if rng.random() < 0.05:
        text = f"What did I say earlier about {words[0]}?"
    return text


def openai_reply(rng: random.Random) -> Any:
    """A reply as langchain-openai's ``ChatOpenAI`` returns one."""
    from langchain_core.messages import AIMessage

    prompt, completion = rng.randint(50, 9000), rng.randint(5, 800)
    return AIMessage(
        content=gibberish(rng, "reply"),
        id=f"run--{uuid.UUID(int=rng.getrandbits(128))}-0",
        response_metadata={
            "token_usage": {
                "completion_tokens": completion,
                "prompt_tokens": prompt,
                "total_tokens": prompt + completion,
                "completion_tokens_details": {
                    "accepted_prediction_tokens": 0,
                    "audio_tokens": 0,
                    "reasoning_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
                "prompt_tokens_details": {"audio_tokens": 0, "cached_tokens": 0},
            },
            "model_name": rng.choice(("gpt-4o-mini-2024-07-18", "gpt-4.1-2025-04-14")),
            "system_fingerprint": "fp_"
            + "".join(rng.choice("0123456789abcdef") for _ in range(10)),
            "id": "chatcmpl-" + "".join(rng.choice(string.ascii_letters) for _ in range(29)),
            "service_tier": "default",
            "finish_reason": "stop",
            "logprobs": None,
        },
        usage_metadata={
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_token_details": {"audio": 0, "cache_read": 0},
            "output_token_details": {"audio": 0, "reasoning": 0},
        },
    )


def thread_values(
    turns: int, text: Callable[[random.Random, str], str], seed: int
) -> tuple[list[bytes], int]:
    """The values a thread of ``turns`` turns stores (each checkpoint and each pending write,
    serialized, uncompressed), and the UTF-8 bytes of text its turns added."""
    from chatbot.config.settings import Settings
    from chatbot.engine.graph import build_graph
    from chatbot.engine.models import OfflineChatModel
    from chatbot.store.postgres import open_store
    from chatbot.store.search import recaller
    from chatbot.threads.backend import LocalBackend

    folder = Path(tempfile.mkdtemp(prefix="chatbot-dictionary-"))
    rng = random.Random(seed)
    stored = compression.compress
    compression.compress = lambda kind, data: (kind, data)  # (as the serializer makes them)
    added = 0
    try:
        with open_store(str(folder / "values.sqlite")) as store:
            settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
            graph = build_graph(
                OfflineChatModel(),
                OfflineChatModel(role="summary"),
                settings,
                store.saver,
                recaller(store),
            )
            backend = LocalBackend(graph, store)
            for number in range(1, turns + 1):
                added += concurrency.take_turn(
                    backend, "values", text(rng, f"turn {number}")
                ).text_bytes
        conn = sqlite3.connect(folder / "values.sqlite")
        rows = conn.execute(
            "SELECT type, checkpoint FROM checkpoints UNION ALL SELECT type, value FROM writes"
        ).fetchall()
        conn.close()
    finally:
        compression.compress = stored
        shutil.rmtree(folder, ignore_errors=True)
    return [bytes(data) for kind, data in rows if kind and data], added


def training_samples(turns: int) -> list[bytes]:
    """What the dictionary learns from: a thread of made-up words, and replies shaped as
    langchain-openai's, each as a turn writes it (a list of one message)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    values, _ = thread_values(turns, gibberish, seed=1)
    rng = random.Random(2)
    serde = JsonPlusSerializer()
    replies = [serde.dumps_typed([openai_reply(rng)])[1] for _ in range(turns)]
    return values + replies


def before(data: bytes) -> int:
    """A value's bytes as chatbot stored it before the dictionary: zstd level 1 over 256 bytes."""
    import zstandard

    if len(data) <= 256:
        return len(data)
    return min(len(data), len(zstandard.ZstdCompressor(level=1).compress(data)))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument(
        "--write", action="store_true", help=f"make chatbot/store/{compression.DICTIONARY}"
    )
    args = parser.parse_args()
    for name in list(os.environ):  # offline, default settings
        if name.upper().startswith(concurrency.LEAKY_PREFIXES):
            del os.environ[name]
    target = ROOT / "chatbot" / "store" / compression.DICTIONARY
    if args.write:
        import zstandard

        if target.exists():
            raise SystemExit(f"{target} exists: it is part of the storage format, never remade")
        samples = training_samples(args.turns)
        made = zstandard.train_dictionary(
            SIZE, samples, dict_id=compression.DICTIONARY_ID, threads=1
        )
        target.write_bytes(made.as_bytes())
        print(f"wrote {target} ({len(made.as_bytes()):,} bytes) from {len(samples):,} values")
    values, text = thread_values(args.turns, concurrency.message, seed=11)
    raw = sum(len(v) for v in values)
    old = sum(before(v) for v in values)
    new = sum(len(compression.compress("msgpack", v)[1]) for v in values)
    print(
        f"{args.turns} turns of common English (benchmarks/stores.py's messages), "
        f"{len(values):,} values (checkpoints and writes), text {text / args.turns:,.0f} B a turn"
    )
    print("| values stored | bytes a turn | × text |")
    print("|---|---|---|")
    for label, total in (
        ("uncompressed", raw),
        ("zstd, values over 256 bytes (before)", old),
        (f"zstd with {compression.DICTIONARY}, values over {compression.SMALLEST} bytes", new),
    ):
        print(f"| {label} | {total / args.turns:,.0f} B | {total / text:.2f}× |")
    print(f"the dictionary stores {1 - new / old:.0%} fewer bytes of values than before")
    return 0


if __name__ == "__main__":
    sys.exit(main())
