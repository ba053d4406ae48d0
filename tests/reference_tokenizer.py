"""OpenAI's own tokenizer (tiktoken) as an independent reference, offline.

tiktoken downloads its vocabularies at first use. bpe-openai's wheel carries the same files;
they are put into a tiktoken cache folder here, and tiktoken checks each against OpenAI's
published SHA-256 before using it — so these counts are the official ones, computed by
OpenAI's code, not by ours.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


@functools.cache
def _cache_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="tiktoken-reference-"))
    spec = importlib.util.find_spec("bpe_openai")  # its data files, without importing it
    assert spec is not None and spec.submodule_search_locations
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    for name, url in _URLS.items():
        raw = gzip.decompress((data / f"{name}.tiktoken.gz").read_bytes())
        (folder / hashlib.sha1(url.encode()).hexdigest()).write_bytes(raw)
    return folder


@functools.cache
def encoding(name: str = "o200k_base") -> Any:
    """tiktoken's encoding ``name`` (its hash check passed), without network."""
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_cache_dir())
    import tiktoken

    return tiktoken.get_encoding(name)


def count(text: str, name: str = "o200k_base") -> int:
    """OpenAI's token count of ``text``."""
    return len(encoding(name).encode(text, disallowed_special=()))


def count_chat(messages: list[dict[str, Any]], name: str = "o200k_base") -> int:
    """Prompt tokens of a chat request the way OpenAI's cookbook counts them: 3 per message,
    its role and content, and 3 that prime the reply."""
    total = 3
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        total += 3 + count(str(message.get("role", ""))) + count(str(content or ""), name)
    return total
