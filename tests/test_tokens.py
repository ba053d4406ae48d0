"""Token counts: OpenAI's vocabularies counted exactly, an honest estimate for other models,
and provider-reported usage trusted without a cap.

The reference is OpenAI's own tiktoken (``tests/reference_tokenizer.py``), never our code.
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from chatbot.memory.tokens import (
    ESTIMATE,
    MEDIA_TOKENS,
    MESSAGE_OVERHEAD,
    USAGE_KEY,
    LineCounts,
    TokenCounter,
    bpe_tokenizer,
    counter_for,
    encoding_for_model,
    estimate_tokens,
    tokenizer_for,
)
from tests import reference_tokenizer
from tests.helpers import ROOT

ZH = (
    "我叫小明，今年三十二岁，住在上海浦东新区。我在一家软件公司做后端工程师，主要写Python和Go。"
    "每天早上七点起床，先跑步三公里，然后喝一杯绿茶。周末我喜欢去图书馆看历史书，尤其是宋朝的历史。"
    "我的女儿今年五岁，她叫小雨，喜欢画画和唱歌。下个月我们全家打算去杭州旅游，住在西湖边的酒店。"
) * 2
EN = (
    "My name is Lance and I live in San Francisco. I work as a data engineer at a small "
    "startup, mostly writing Python and SQL. Every morning I run three miles, then drink a cup "
    "of green tea. On weekends I like to visit the library and read history books, especially "
    "about the Song dynasty. My daughter is five years old; her name is Rain and she loves "
    "painting and singing. Next month our family plans to travel to Hangzhou."
) * 2
MIXED = (
    "用户 Lance 说他的 API key 放在 .env 文件里，模型是 gpt-4o-mini，context window 是 128,000 "
    "tokens。他想把 CHATBOT_SUMMARY_TRIGGER 设成 fraction:0.8，然后用 /compact 手动压缩。"
    "Error: context_length_exceeded (HTTP 400)。"
) * 3
CODE = (ROOT / "chatbot" / "memory" / "policy.py").read_text()[:6000]
JA = (
    "私の名前は田中です。東京に住んでいて、ソフトウェアエンジニアとして働いています。毎朝七時に起きます。"
    * 3
)
KO = (
    "제 이름은 김민수입니다. 서울에 살고 있으며 소프트웨어 엔지니어로 일하고 있습니다. "
    "매일 아침 일곱 시에 일어납니다." * 3
)
RU = (
    "Меня зовут Иван, я живу в Москве и работаю инженером-программистом. Каждое утро я пью кофе."
    * 3
)
JSON = '{"thread_id": "1122-1015-3fa2", "messages": 12, "has_summary": true, "title": "hi"}\n' * 5

SAMPLES = {"en": EN, "zh": ZH, "mixed": MIXED, "code": CODE}
MORE_SAMPLES = {"ja": JA, "ko": KO, "ru": RU, "json": JSON}


# --- OpenAI's vocabularies, exactly --------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("name", [*SAMPLES, *MORE_SAMPLES])
def test_bpe_counts_equal_openais_own_tokenizer(encoding: str, name: str) -> None:
    text = {**SAMPLES, **MORE_SAMPLES}[name]
    tokenizer = bpe_tokenizer(encoding)
    assert tokenizer is not None, "bpe-openai is a dependency and works offline"
    assert tokenizer.count(text) == reference_tokenizer.count(text, encoding)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("openai/gpt-4.1-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("llama3.1", None),
        ("qwen-max", None),
        ("deepseek-chat", None),
        ("offline", None),
        ("", None),
    ],
)
def test_the_model_family_picks_the_vocabulary(model: str, expected: str | None) -> None:
    assert encoding_for_model(model) == expected
    assert tokenizer_for(model).name == (expected or "estimate")


def test_the_setting_overrides_the_model_family() -> None:
    assert tokenizer_for("gpt-4o", "estimate") is ESTIMATE
    assert tokenizer_for("llama3.1", "o200k_base").name == "o200k_base"
    assert tokenizer_for("my-azure-deployment", "cl100k_base").name == "cl100k_base"


def test_a_text_longer_than_the_vocabularys_limits_is_counted_whole() -> None:
    """bpe-openai refuses a text of a million characters or of 200,000 tokens; the count is
    made in pieces and is still the reference's count of the whole text."""
    text = ("chatbot remembers 你好 everything, even a very long paste.\n" * 25_000) + "x" * 10
    assert len(text) > 1_000_000
    assert tokenizer_for("gpt-4o").count(text) == reference_tokenizer.count(text)


# --- the estimate for other models ---------------------------------------------------------------


@pytest.mark.parametrize("name", list(SAMPLES))
def test_estimate_is_within_ten_percent_of_o200k_on_english_chinese_mixed_and_code(
    name: str,
) -> None:
    text = SAMPLES[name]
    ratio = estimate_tokens(text) / reference_tokenizer.count(text)
    assert 0.9 <= ratio <= 1.1, f"{name}: estimate/o200k = {ratio:.2f}"


@pytest.mark.parametrize("name", list(MORE_SAMPLES))
def test_estimate_is_within_fifteen_percent_of_o200k_in_other_scripts(name: str) -> None:
    text = MORE_SAMPLES[name]
    ratio = estimate_tokens(text) / reference_tokenizer.count(text)
    assert 0.85 <= ratio <= 1.15, f"{name}: estimate/o200k = {ratio:.2f}"


def test_chinese_is_no_longer_counted_three_times_too_low() -> None:
    """The old count (characters / 4) said ~1 token per 4 Chinese characters."""
    assert len(ZH) / 4 < reference_tokenizer.count(ZH) / 2.5
    assert estimate_tokens(ZH) >= 0.9 * reference_tokenizer.count(ZH)


def test_estimate_of_nothing_is_zero_and_of_anything_at_least_one() -> None:
    assert estimate_tokens("") == 0
    assert ESTIMATE.count("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("。") == 1


def _estimate_as_specified(text: str) -> int:
    """The estimate's rules, one piece at a time, as its docstring states them (written
    plainly: the estimate itself skips the pieces that count nothing)."""
    if not text:
        return 0
    rest, cjk = re.subn(
        "[\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
        "\uf900-\ufaff\U00020000-\U0002fa1f]",
        " ",
        text,
    )
    rest, hangul = re.subn("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]", " ", rest)
    total = cjk * 0.7 + hangul * 0.6
    pieces = r"[A-Za-z]+|[^\W\d_]+|\d+|[ \t]*\n\s*|[ \t]{2,}|[ \t]|[^\w\s]+"
    for piece in re.findall(pieces, rest):
        first = piece[0]
        if first.isascii() and first.isalpha():
            total += 1 + (len(piece) - 1) // 9
        elif first.isalpha():
            total += math.ceil(len(piece) / 4)
        elif first.isdigit():
            total += math.ceil(len(piece) / 3)
        elif first in " \t":
            total += 0 if len(piece) == 1 else 1
        elif first.isspace():
            total += 1
        else:
            ascii_marks = sum(1 for char in piece if char.isascii())
            total += math.ceil(ascii_marks / 3) + (len(piece) - ascii_marks)
    return max(1, math.ceil(total))


_MIXED = st.text(
    alphabet=st.sampled_from(
        list("abcXYZ éüßжщ中文字한국어 \t\n\r\x0b\u3000.,!?;:“”—…😀12３４_-'\"()½²ⅫÀ")
    ),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(
    text=st.one_of(
        _MIXED,
        st.text(alphabet=st.characters(max_codepoint=127), max_size=80),
        st.text(max_size=80),
    )
)
def test_estimate_counts_as_its_rules_say(text: str) -> None:
    assert estimate_tokens(text) == _estimate_as_specified(text)


_PROSE_WORD = st.text(
    alphabet=st.sampled_from(list("aZqLetters") * 4 + list("0123456789.,;:!?'\"()-_/\x00\x7f")),
    min_size=1,
    max_size=24,
)


@settings(max_examples=400, deadline=None)
@given(
    words=st.lists(
        st.one_of(_PROSE_WORD, st.text(alphabet="abcXYZ", min_size=1, max_size=30)), max_size=40
    ),
    gap=st.sampled_from([" ", "\r", " \x0b", "\x1f"]),
)
def test_prose_counts_as_its_rules_say(words: list[str], gap: str) -> None:
    # ASCII words between single blanks: counted run by run, without the regex
    text = gap.join(words)
    assert estimate_tokens(text) == _estimate_as_specified(text)


_ACCENTED_WORD = st.text(
    alphabet=st.sampled_from(list("abcXYZ12._-'\"(…—“”’éüßжщ😀½²ⅫÀ\u200b\xa0")),
    min_size=1,
    max_size=16,
)


@settings(max_examples=400, deadline=None)
@given(words=st.lists(_ACCENTED_WORD, max_size=30), lines=st.booleans())
def test_prose_with_marks_and_accents_counts_as_its_rules_say(
    words: list[str], lines: bool
) -> None:
    # words between single blanks, some not ASCII (no CJK or Hangul): the ASCII ones
    # counted without the regex; as a text of its own, and as a line of a longer text
    text = " ".join(words)
    assert estimate_tokens(text) == _estimate_as_specified(text)
    if lines:
        long = "\n".join([text, "x" * 600, text])
        assert ESTIMATE.count(long) == _estimate_as_specified(long)


@pytest.mark.parametrize("name", [*SAMPLES, *MORE_SAMPLES])
def test_estimate_of_the_samples_counts_as_its_rules_say(name: str) -> None:
    text = {**SAMPLES, **MORE_SAMPLES}[name]
    assert estimate_tokens(text) == _estimate_as_specified(text)


# --- messages ------------------------------------------------------------------------------------


def test_a_message_costs_its_text_plus_the_role_overhead() -> None:
    counter = counter_for("gpt-4o")
    message = HumanMessage(ZH)
    assert counter.raw_message(message) == MESSAGE_OVERHEAD + reference_tokenizer.count(ZH)
    assert counter.raw([message, message]) == 2 * counter.raw_message(message)


def test_images_and_files_count_as_media_tokens_not_as_their_base64() -> None:
    counter = counter_for("gpt-4o")
    image = {"type": "image", "base64": "A" * 400_000, "mime_type": "image/png"}
    url = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "B" * 9000}}
    message = HumanMessage(content=[{"type": "text", "text": "look"}, image, url])
    assert counter.raw_message(message) == MESSAGE_OVERHEAD + 1 + 2 * MEDIA_TOKENS


def test_tool_calls_are_counted() -> None:
    counter = counter_for("gpt-4o")
    call = {"name": "lookup", "args": {"query": ZH}, "id": "c1", "type": "tool_call"}
    plain = counter.raw_message(AIMessage(""))
    calling = counter.raw_message(AIMessage("", tool_calls=[call]))
    assert calling - plain >= reference_tokenizer.count(ZH)


# --- provider-reported usage ---------------------------------------------------------------------


def answered(counter: TokenCounter, sent: list[BaseMessage], reported: int) -> AIMessage:
    """A reply as the conversation node stores it: the provider's usage and our count."""
    reply = AIMessage(
        "ok",
        usage_metadata={"input_tokens": reported, "output_tokens": 1, "total_tokens": reported},
    )
    reply.response_metadata[USAGE_KEY] = counter.record(sent)
    return reply


def test_usage_scales_every_count_by_the_providers_over_ours_without_a_cap() -> None:
    counter = TokenCounter()
    sent: list[BaseMessage] = [SystemMessage("be brief"), HumanMessage(ZH)]
    ours = counter.raw(sent)
    reply = answered(counter, sent, reported=ours * 3)  # far past langchain-core's 1.25 cap
    messages = [HumanMessage(ZH), reply, HumanMessage("and then?")]
    assert counter.scale(messages) == pytest.approx(3.0)
    assert counter.messages(messages) == pytest.approx(counter.raw(messages) * 3, abs=1)
    per_message = counter.per_message(messages)
    assert sum(per_message) == pytest.approx(counter.messages(messages), abs=len(messages))


def test_the_newest_reply_with_usage_sets_the_scale() -> None:
    counter = TokenCounter()
    first = answered(counter, [HumanMessage("a b c")], reported=100)
    second = answered(
        counter, [HumanMessage("a b c d")], reported=counter.raw([HumanMessage("a b c d")]) * 2
    )
    messages = [HumanMessage("a b c"), first, HumanMessage("d"), second]
    assert counter.scale(messages) == pytest.approx(2.0)


def test_usage_measured_with_another_tokenizer_is_not_applied() -> None:
    estimate = TokenCounter()
    reply = answered(estimate, [HumanMessage(EN)], reported=5000)
    exact = counter_for("gpt-4o")
    assert exact.scale([reply]) == 1.0
    assert estimate.scale([reply]) != 1.0


@pytest.mark.parametrize("reported", [0, -5])
def test_nonsense_usage_is_ignored(reported: int) -> None:
    counter = TokenCounter()
    reply = answered(counter, [HumanMessage(EN)], reported=reported)
    assert counter.scale([reply]) == 1.0


def test_replies_without_our_record_or_without_usage_do_not_scale() -> None:
    counter = TokenCounter()
    bare = AIMessage(
        "hi", usage_metadata={"input_tokens": 900, "output_tokens": 1, "total_tokens": 901}
    )
    assert counter.scale([HumanMessage(EN), bare]) == 1.0
    unreported = AIMessage("hi")
    unreported.response_metadata[USAGE_KEY] = counter.record([HumanMessage(EN)])
    assert counter.scale([unreported]) == 1.0
    assert counter.messages([]) == 0
    assert counter.per_message([]) == []


_LINE = st.text(
    alphabet=st.sampled_from(list("abcXYZ éüß中文字한국어 \t\r\u3000.,!?“”—…😀12３_")), max_size=40
)
_BREAK = st.sampled_from(["\n", "\n\n", " \n", "\n ", "\t\n\u3000", "\n\r\n", "中\n", "\n한"])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.tuples(_LINE, _BREAK), min_size=1, max_size=60), tail=_LINE)
def test_a_long_text_counted_line_by_line_counts_as_the_whole(
    lines: list[tuple[str, str]], tail: str
) -> None:
    """The estimate counts a long text line by line from a cache of lines: the same count as
    the whole text, whether the lines were seen before or not."""
    text = "".join(line + brk for line, brk in lines) + tail
    text = (text + "\n") * (1 + 600 // max(1, len(text)))  # long enough to go line by line
    cache: LineCounts = {}
    assert estimate_tokens(text, cache) == _estimate_as_specified(text)
    assert cache or text.isspace()  # it went line by line
    assert estimate_tokens(text, cache) == _estimate_as_specified(text)  # from the cache
    headed = "Summary of conversation earlier: " + text
    assert estimate_tokens(headed, cache) == _estimate_as_specified(headed)
