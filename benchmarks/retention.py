"""Benchmark: how many planted facts survive a long conversation, in the spirit of LongMemEval.

    uv run python benchmarks/retention.py                       # offline model: a pipeline check
    OPENAI_BASE_URL=http://127.0.0.1:11434/v1 CHATBOT_MODEL=qwen2.5:7b \\
        uv run python benchmarks/retention.py --language zh     # a real model (any OpenAI API)
    uv run python benchmarks/retention.py --long                # 520 turns, 50 facts, 15 corrected

One script of user turns plants facts (names, numbers, codes), later corrects some of them
("the newest value wins"), buries everything under filler turns, then asks each fact back.
Five arms run the same script with the same chat model:

- full context: every message is sent every turn (the ceiling, when it fits the model);
- last-N: the newest messages that fit the same token budget chatbot works in (the floor);
- chatbot: the real graph, folding older messages into its running summary (recall off);
- chatbot + recall: the same on chatbot's own store, the model offered the recall tool once
  there is a summary (docs/memory.md#recall);
- chatbot, another thread: the facts told in one thread, each asked in a new thread, which
  knows only the user's memories (docs/memory.md#memories-across-threads;
  ``benchmarks/retention_threads.py``).

The judge is fixed and exact: an answer is right when it contains the newest value and not
the outdated one (normalised: case, spaces and punctuation ignored). Next to it, "in context"
checks whether the newest value was anywhere in what the model was sent for the question, which
measures the memory pipeline alone, and "reachable" whether it was there or in what recall
returned. The offline model only echoes (with recall, it quotes the first statement recall
returns), so offline the figures measure chatbot's pipeline, not a model.

Prints accuracy per arm, retention = (chatbot - floor) / (ceiling - floor), input tokens per
turn (recall's against chatbot's without it), summary calls and the final summary's size, and
writes a JSON report. ``--long`` runs a longer script (50 generated facts, 15 of them corrected,
7 filler turns after each: 520 turns), to measure a real endpoint as LongMemEval measures memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages
from langchain_core.outputs import LLMResult
from langgraph.checkpoint.memory import InMemorySaver

from chatbot.config.settings import Settings, SettingsError, load_settings
from chatbot.engine.graph import DURABILITY, build_graph
from chatbot.engine.models import max_input_tokens, resolve_models
from chatbot.engine.runsettings import counter_for_model
from chatbot.engine.stream import SUMMARY_TAG
from chatbot.memory import prompts
from chatbot.memory.policy import PolicyError
from chatbot.memory.tokens import TokenCounter
from chatbot.store.search import index_statements, recaller
from chatbot.store.sqlite import Store
from chatbot.threads.events import make_title
from chatbot.threads.runner import blocking

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.retention_threads import ARM, run_cross_thread


@dataclass(frozen=True)
class Fact:
    key: str
    statement: str
    value: str
    question: str
    correction: str = ""
    """A later message that changes the value (empty: the fact never changes)."""
    old_value: str = ""
    """The value before the correction: an answer that still gives it is wrong."""


FACTS: dict[str, list[Fact]] = {
    "en": [
        Fact("name", "By the way, my name is Dana Whitfield.", "Dana Whitfield",
             "What is my full name?"),
        Fact("locker", "My gym locker code is 4821, remind me if I forget.", "7390",
             "What is my gym locker code now?",
             "Correction: the gym changed my locker code, it is 7390 now.", "4821"),
        Fact("city", "I live in Tampere, in Finland.", "Porto",
             "Which city do I live in now?",
             "Update: I have just moved, I live in Porto now.", "Tampere"),
        Fact("dog", "My dog is a beagle called Biscuit.", "Biscuit",
             "What is my dog's name?"),
        Fact("flight", "My flight to Osaka is JL 0412 on the 14th of March.", "JL 0412",
             "What is my flight number to Osaka?"),
        Fact("budget", "The budget for the garden project is 48,500 euros.", "41,000",
             "What is the garden project's budget now, in euros?",
             "Bad news: the garden project's budget was cut to 41,000 euros.", "48,500"),
        Fact("allergy", "I am allergic to hazelnuts, keep that in mind for recipes.",
             "hazelnuts", "What am I allergic to?"),
        Fact("manager", "My manager is called Priya Raman.", "Priya Raman",
             "What is my manager's name?"),
        Fact("wifi", "The office wifi password is mangrove-27.", "mangrove-27",
             "What is the office wifi password?"),
        Fact("dentist", "My dentist appointment is on Thursday at 15:40.", "15:40",
             "At what time is my dentist appointment?"),
    ],
    "zh": [
        Fact("name", "顺便说一下，我叫林晓雯。", "林晓雯", "我叫什么名字？"),
        Fact("locker", "我健身房的储物柜密码是4821，我忘了的话提醒我。", "7390",
             "我健身房的储物柜密码现在是多少？",
             "更正一下：健身房换了我的储物柜密码，现在是7390。", "4821"),
        Fact("city", "我住在成都。", "青岛", "我现在住在哪个城市？",
             "告诉你个消息：我刚搬家了，现在住在青岛。", "成都"),
        Fact("dog", "我的狗是一只比格犬，叫饼干。", "饼干", "我的狗叫什么名字？"),
        Fact("flight", "我去大阪的航班是JL 0412，三月十四日。", "JL 0412",
             "我去大阪的航班号是多少？"),
        Fact("budget", "花园项目的预算是48,500元。", "41,000",
             "花园项目现在的预算是多少元？",
             "坏消息：花园项目的预算被削减到41,000元了。", "48,500"),
        Fact("allergy", "我对榛子过敏，做菜谱时请记住。", "榛子", "我对什么过敏？"),
        Fact("manager", "我的经理叫王思远。", "王思远", "我的经理叫什么名字？"),
        Fact("wifi", "办公室的无线网密码是mangrove-27。", "mangrove-27",
             "办公室的无线网密码是什么？"),
        Fact("dentist", "我的牙医预约在周四下午15:40。", "15:40", "我的牙医预约是几点？"),
    ],
}  # fmt: skip

FILLER: dict[str, list[str]] = {
    "en": [
        "Can you explain how a heat pump moves heat from a cold garden into a warm house? "
        "I keep reading that it is more efficient than a gas boiler and I want to understand "
        "why, including what the coefficient of performance means in practice in winter.",
        "I am planning a week of dinners for two. Suggest a plan that reuses leftovers, keeps "
        "the shopping list short, and has at least two vegetarian evenings. Explain briefly "
        "why each dish fits the plan.",
        "What is the difference between a Roth and a traditional retirement account? Walk me "
        "through a simple example with numbers so I can see when each one comes out ahead.",
        "Summarise the main causes of the French Revolution in a few paragraphs, the way a "
        "good history teacher would, with the economic, political and social causes apart.",
        "I want to start running. Give me an eight-week plan from zero to five kilometres, "
        "with rest days, and tell me what to watch out for so I do not get injured.",
        "How does public-key cryptography let two strangers agree on a secret over an open "
        "channel? Use the paint-mixing analogy and then tell me where the analogy breaks.",
        "Write a short, friendly email to a neighbour asking whether they would mind me "
        "trimming the hedge between our gardens next Saturday morning.",
        "Which houseplants survive in a dark north-facing flat, and how often should each be "
        "watered? Give me five options with a sentence of care instructions each.",
        "Explain what a Python generator is and when I would use one instead of a list. Show a "
        "small example that reads a large file line by line.",
        "What should I look for when buying a second-hand bicycle? Give me a checklist I can "
        "take to the seller, from the frame to the brakes and the chain.",
        "Tell me about the life cycle of a star like the Sun, from the nebula to the white "
        "dwarf, and roughly how long each stage lasts.",
        "I have a job interview for a project coordinator role. What questions are they likely "
        "to ask, and how should I structure my answers?",
    ],
    "zh": [
        "能解释一下热泵是怎么把寒冷花园里的热量搬进温暖的房子里的吗？我经常读到它比燃气锅炉更高效，"
        "我想弄明白为什么，包括能效比在冬天实际意味着什么。",
        "我想为两个人安排一周的晚餐。请给一个能利用剩菜、购物清单短、至少有两个素食晚上的计划，"
        "并简单说明每道菜为什么适合这个计划。",
        "个人养老金账户和普通储蓄有什么区别？请用一个带数字的简单例子说明各自在什么情况下更划算。",
        "请像一位好的历史老师那样，用几段话概括法国大革命的主要原因，把经济、政治和社会原因分开讲。",
        "我想开始跑步。请给我一个从零到五公里的八周计划，包括休息日，并告诉我要注意什么以免受伤。",
        "公钥密码学是怎么让两个陌生人在公开信道上商定一个秘密的？用调颜料的比喻讲，再告诉我这个比喻在哪里不成立。",
        "帮我写一封简短友好的邮件给邻居，问他们是否介意我下周六上午修剪我们两家花园之间的树篱。",
        "哪些室内植物能在朝北的昏暗公寓里存活，每种多久浇一次水？给我五个选择，每个附一句养护说明。",
        "解释一下Python的生成器是什么，什么时候应该用它而不是列表。举一个逐行读取大文件的小例子。",
        "买二手自行车时应该注意什么？给我一个可以带去见卖家的检查清单，从车架到刹车和链条。",
        "讲讲像太阳这样的恒星的一生，从星云到白矮星，每个阶段大约持续多久。",
        "我要去面试一个项目协调员的职位。他们可能会问哪些问题，我应该怎样组织回答？",
    ],
}


def long_facts(language: str, count: int = 50, corrected: int = 15) -> list[Fact]:
    """``count`` generated facts (an access code for each of ``count`` places), the first
    ``corrected`` of them changed later: the long script (``--long``), for a real endpoint."""
    sides = ["north", "south", "east", "west", "central"]
    rooms = ["warehouse", "studio", "office", "lab", "garage", "meeting room", "library",
             "workshop", "archive", "server room"]  # fmt: skip
    sides_zh = ["北", "南", "东", "西", "中"]
    rooms_zh = ["仓库", "工作室", "办公室", "实验室", "车库", "会议室", "图书室", "车间", "档案室",
                "机房"]  # fmt: skip
    facts: list[Fact] = []
    for n in range(count):
        side, room = n % len(sides), (n // len(sides)) % len(rooms)
        code, new = f"{(n * 7919 + 1031) % 9000 + 1000}", f"{(n * 4099 + 2203) % 9000 + 1000}"
        fix = n < corrected
        if language == "zh":
            place = sides_zh[side] + rooms_zh[room]
            facts.append(
                Fact(f"code{n}", f"{place}的门禁密码是{code}。", new if fix else code,
                     f"{place}的门禁密码现在是多少？",
                     f"更新：{place}的门禁密码现在改成了{new}。" if fix else "",
                     code if fix else "")
            )  # fmt: skip
        else:
            place = f"{sides[side]} {rooms[room]}"
            facts.append(
                Fact(f"code{n}", f"The access code for the {place} is {code}.",
                     new if fix else code, f"What is the access code for the {place} now?",
                     f"Update: the access code for the {place} is now {new}." if fix else "",
                     code if fix else "")
            )  # fmt: skip
    return facts


ANSWER_HINT = {
    "en": " Answer with just the value.",
    "zh": "只回答具体的值。",
}


@dataclass(frozen=True)
class Turn:
    text: str
    question: Fact | None = None


def script(language: str, filler_per_fact: int, long: bool = False) -> tuple[list[str], list[Fact]]:
    """The conversation (facts, then corrections, each followed by filler) and the facts."""
    facts = long_facts(language) if long else FACTS[language]
    filler = FILLER[language]
    turns: list[str] = []
    plants = [f.statement for f in facts] + [f.correction for f in facts if f.correction]
    for index, plant in enumerate(plants):
        turns.append(plant)
        for k in range(filler_per_fact):
            turns.append(filler[(index * filler_per_fact + k) % len(filler)])
    return turns, facts


def normalise(text: str) -> str:
    """Case, width, spaces and punctuation ignored: 'JL 0412' == 'jl0412', '41,000' == '41000'."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if ch.isalnum())


def judge(answer: str, fact: Fact) -> bool:
    """Right when the newest value is there and the outdated one is not."""
    said = normalise(answer)
    if normalise(fact.value) not in said:
        return False
    return not (fact.old_value and normalise(fact.old_value) in said)


# --- measuring what each call sends -------------------------------------------------------


@dataclass
class Call:
    kind: str  # "chat" or "summary"
    counted: int
    reported: int | None = None
    text: str = ""


class Recorder(BaseCallbackHandler):
    """Records every chat-model call of a run: what was sent, and the usage it reported."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.calls: list[Call] = []
        self._open: dict[Any, Call] = {}

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: Any,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        sent = messages[0]
        kind = "summary" if SUMMARY_TAG in (tags or []) else "chat"
        call = Call(kind, self.counter.raw(sent), text="\n".join(m.text for m in sent))
        self.calls.append(call)
        self._open[run_id] = call

    def on_llm_end(self, response: LLMResult, *, run_id: Any, **kwargs: Any) -> None:
        call = self._open.pop(run_id, None)
        if call is None:
            return
        for generations in response.generations:
            for generation in generations:
                usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
                if usage and usage.get("input_tokens"):
                    call.reported = int(usage["input_tokens"])


# --- the arms -----------------------------------------------------------------------------


@dataclass
class ArmResult:
    name: str
    keys: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    in_context: list[bool] = field(default_factory=list)
    reachable: list[bool] = field(default_factory=list)
    """The newest value was in what the model was sent, or in what recall returned."""
    chat_input_tokens: list[int] = field(default_factory=list)
    summary_calls: int = 0
    summary_input_tokens: int = 0
    summary_tokens: int = 0
    fits: bool = True
    note: str = ""
    seconds: float = 0.0

    def report(self) -> dict[str, Any]:
        turns = self.chat_input_tokens
        return {
            "arm": self.name,
            "accuracy": _ratio(self.correct),
            "correct": sum(self.correct),
            "in_context": _ratio(self.in_context),
            "in_context_count": sum(self.in_context),
            "reachable": _ratio(self.reachable),
            "reachable_count": sum(self.reachable),
            "input_tokens_per_turn_mean": round(sum(turns) / len(turns)) if turns else 0,
            "input_tokens_per_turn_max": max(turns, default=0),
            "chat_input_tokens_total": sum(turns),
            "summary_calls": self.summary_calls,
            "summary_input_tokens_total": self.summary_input_tokens,
            "final_summary_tokens": self.summary_tokens,
            "fits": self.fits,
            "note": self.note,
            "seconds": round(self.seconds, 2),
            "per_fact": [
                {
                    "fact": key,
                    "answer": answer,
                    "correct": right,
                    "in_context": seen,
                    "reachable": reach,
                }
                for key, answer, right, seen, reach in zip(
                    self.keys,
                    self.answers,
                    self.correct,
                    self.in_context,
                    self.reachable,
                    strict=False,
                )
            ],
        }


def _ratio(flags: Sequence[bool]) -> float:
    return round(sum(flags) / len(flags), 3) if flags else 0.0


def _question(fact: Fact, language: str) -> str:
    return fact.question + ANSWER_HINT[language]


def _score(
    arm: ArmResult, recorder: Recorder, facts: list[Fact], asked: list[tuple[int, int]]
) -> None:
    """Judge the answers and check what each question's calls were sent: ``asked`` holds the
    range of ``recorder.calls`` each question made (a question that recalls makes two chat
    calls: the first is what the model was sent, the second adds what recall returned)."""
    for fact, answer, (start, end) in zip(facts, arm.answers, asked, strict=True):
        chats = [c for c in recorder.calls[start:end] if c.kind == "chat"]
        arm.keys.append(fact.key)
        arm.correct.append(judge(answer, fact))
        texts = [normalise(c.text.replace(fact.question, "")) for c in chats]
        arm.in_context.append(bool(texts) and normalise(fact.value) in texts[0])
        arm.reachable.append(any(normalise(fact.value) in text for text in texts))
    chats = [c for c in recorder.calls if c.kind == "chat"]
    arm.chat_input_tokens = [c.reported or c.counted for c in chats]
    summaries = [c for c in recorder.calls if c.kind == "summary"]
    arm.summary_calls = len(summaries)
    arm.summary_input_tokens = sum(c.reported or c.counted for c in summaries)


def run_plain(
    name: str,
    model: BaseChatModel,
    counter: TokenCounter,
    turns: list[str],
    facts: list[Fact],
    settings: Settings,
    budget: int | None,
) -> ArmResult:
    """Full context (``budget=None``) or last-N truncation to ``budget`` tokens."""
    arm = ArmResult(name)
    started = time.perf_counter()
    recorder = Recorder(counter)
    config: dict[str, Any] = {"callbacks": [recorder]}
    limit = max_input_tokens(model) or settings.max_input_tokens

    def view(messages: list[BaseMessage]) -> list[BaseMessage]:
        if budget is None:
            return messages
        return list(
            trim_messages(
                messages,
                max_tokens=budget,
                token_counter=counter.raw,
                strategy="last",
                start_on="human",
            )
        )

    def send(messages: list[BaseMessage]) -> str:
        sent = prompts.conversation_input(
            view(messages), "", settings.system_prompt, settings.language
        )
        if limit and counter.raw(sent) > limit:
            arm.fits = False
            arm.note = (
                f"the full context ({counter.raw(sent):,} tokens) exceeds the model's {limit:,}"
            )
            return ""
        return str(model.invoke(sent, config=config).text)

    history: list[BaseMessage] = []
    for text in turns:
        history.append(HumanMessage(text))
        history.append(AIMessage(send(history)))
        if not arm.fits:
            break
    asked: list[tuple[int, int]] = []
    for fact in facts:
        if not arm.fits:
            break
        start = len(recorder.calls)
        arm.answers.append(send([*history, HumanMessage(_question(fact, settings.language))]))
        asked.append((start, len(recorder.calls)))
    if arm.fits:
        _score(arm, recorder, facts, asked)
    arm.seconds = time.perf_counter() - started
    return arm


def run_chatbot(
    chat: BaseChatModel,
    summary: BaseChatModel,
    counter: TokenCounter,
    turns: list[str],
    facts: list[Fact],
    settings: Settings,
    recall: bool = False,
) -> ArmResult:
    """The real graph with an in-memory checkpointer; each question is asked on a fork of the
    final checkpoint, so no question sees another's answer. With ``recall``: on chatbot's
    own store (a SQLite file in a temporary folder), whose search index the recall tool
    reads, each turn recorded and indexed as ``chatbot`` does it once the turn is saved."""
    arm = ArmResult("chatbot + recall" if recall else "chatbot")
    started = time.perf_counter()
    recorder = Recorder(counter)
    with contextlib.ExitStack() as stack:
        store: Store | None = None
        if recall:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            store = stack.enter_context(contextlib.closing(Store(folder / "recall.sqlite")))
            graph = build_graph(chat, summary, settings, store.saver, recaller(store))
        else:
            graph = build_graph(chat, summary, settings, InMemorySaver())
        _converse(arm, graph, recorder, counter, turns, facts, settings, store)
    arm.seconds = time.perf_counter() - started
    return arm


def _record_turn(store: Store | None, thread_id: str, out: dict[str, Any]) -> None:
    """What ``chatbot`` does once a turn is saved on its store (none: in memory): the thread's
    listing row, and the turn's messages indexed for search (the recall tool's)."""
    if store is None:
        return
    messages = out.get("messages") or []
    first = next((m for m in messages if isinstance(m, HumanMessage)), None)
    store.record_turn(
        thread_id,
        title=make_title(first.content if first else ""),
        message_count=len(messages),
        has_summary=bool(out.get("summary")),
        indexed=index_statements(store, thread_id),
    )


def _converse(
    arm: ArmResult,
    graph: Any,
    recorder: Recorder,
    counter: TokenCounter,
    turns: list[str],
    facts: list[Fact],
    settings: Settings,
    store: Store | None = None,
) -> None:
    thread = {"thread_id": f"retention-{uuid.uuid4().hex[:8]}"}
    config: dict[str, Any] = {"configurable": thread, "callbacks": [recorder]}
    for text in turns:
        out = blocking(
            graph.ainvoke({"messages": [HumanMessage(text)]}, config, durability=DURABILITY)
        )
        _record_turn(store, thread["thread_id"], out)
    final = graph.get_state({"configurable": thread})
    arm.summary_tokens = counter.text(final.values.get("summary", ""))
    asked: list[tuple[int, int]] = []
    for fact in facts:
        fork = {**config, "configurable": {**thread, **final.config["configurable"]}}
        start = len(recorder.calls)
        question = HumanMessage(_question(fact, settings.language))
        out = blocking(graph.ainvoke({"messages": [question]}, fork, durability=DURABILITY))
        _record_turn(store, thread["thread_id"], out)
        asked.append((start, len(recorder.calls)))
        arm.answers.append(str(out["messages"][-1].text))
    # Summary calls made while answering the questions belong to the arm's cost, not its score.
    _score(arm, recorder, facts, asked)


def run_other_thread(
    chat: BaseChatModel,
    summary: BaseChatModel,
    counter: TokenCounter,
    turns: list[str],
    facts: list[Fact],
    settings: Settings,
    offline: bool,
) -> ArmResult:
    """The cross-thread arm (:mod:`benchmarks.retention_threads`), judged as the others are:
    "in context" is the newest value in what the asking thread's request carried."""
    arm = ArmResult(ARM)
    recorder = Recorder(counter)
    questions = [_question(fact, settings.language) for fact in facts]
    starts: list[int] = []

    class Marking(BaseCallbackHandler):  # (where each question's calls start)
        def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
            if kwargs.get("parent_run_id") is None and isinstance(inputs, dict):
                sent = inputs.get("messages") or []
                if sent and getattr(sent[-1], "text", "") in questions:
                    starts.append(len(recorder.calls))

    arm.answers, arm.seconds = run_cross_thread(
        chat, summary, turns, questions, settings, [recorder, Marking()], offline
    )
    ends = [*starts[1:], len(recorder.calls)]
    _score(arm, recorder, facts, list(zip(starts, ends, strict=True)))
    return arm


def retention(ceiling: float, floor: float, summary: float) -> float | None:
    """(summary - floor) / (ceiling - floor), or None when the ceiling is no better."""
    if ceiling <= floor:
        return None
    return round((summary - floor) / (ceiling - floor), 3)


def run(settings: Settings, filler: int, long: bool = False) -> dict[str, Any]:
    models = resolve_models(settings)
    counter = counter_for_model(models.chat, settings)
    limit = max_input_tokens(models.chat) or settings.max_input_tokens
    policy = settings.policy(limit)
    budgets = [t for t in (lim.as_tokens(limit) for lim in policy.trigger) if t is not None]
    if not budgets:
        raise PolicyError("the benchmark needs a token trigger: --trigger tokens:N or fraction:F")
    budget = min(budgets)
    turns, facts = script(settings.language, filler, long)
    offline = models.chat_name == "offline"
    arms = [
        run_plain("full context", models.chat, counter, turns, facts, settings, None),
        run_plain("last-N", models.chat, counter, turns, facts, settings, budget),
        run_chatbot(models.chat, models.summary, counter, turns, facts, settings),
        run_chatbot(models.chat, models.summary, counter, turns, facts, settings, recall=True),
        run_other_thread(models.chat, models.summary, counter, turns, facts, settings, offline),
    ]
    ceiling, floor, ours, recalled, _ = arms
    report: dict[str, Any] = {
        "model": models.chat_name,
        "summary_model": models.summary_name,
        "offline": offline,
        "language": settings.language,
        "tokenizer": counter.tokenizer.name,
        "trigger": settings.summary_trigger,
        "keep": settings.summary_keep,
        "max_summary_tokens": settings.max_summary_tokens,
        "last_n_budget_tokens": budget,
        "turns": len(turns),
        "facts": len(facts),
        "corrected_facts": sum(1 for f in facts if f.correction),
        "arms": [arm.report() for arm in arms],
        "retention_accuracy": retention(
            _ratio(ceiling.correct), _ratio(floor.correct), _ratio(ours.correct)
        )
        if ceiling.fits
        else None,
        "retention_in_context": retention(
            _ratio(ceiling.in_context), _ratio(floor.in_context), _ratio(ours.in_context)
        )
        if ceiling.fits
        else None,
        "recall_tokens_per_turn_ratio": round(
            _mean(recalled.chat_input_tokens) / _mean(ours.chat_input_tokens), 3
        )
        if ours.chat_input_tokens
        else None,
    }
    return report


def _mean(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def print_report(report: dict[str, Any]) -> None:
    kind = (
        "offline model: it echoes, or quotes what it recalled; the figures measure the "
        "pipeline, not a model"
        if report["offline"]
        else f"model {report['model']} (summaries by {report['summary_model']})"
    )
    print(
        f"retention · {kind}\n"
        f"{report['turns']} turns ({report['language']}), {report['facts']} facts of which "
        f"{report['corrected_facts']} corrected later · trigger {report['trigger']}, keep "
        f"{report['keep']}, last-N budget {report['last_n_budget_tokens']:,} tokens · "
        f"counted with {report['tokenizer']}"
    )
    header = ("arm", "answers", "in context", "reachable", "input tok/turn", "max",
              "summary calls", "summary in", "summary size")  # fmt: skip
    rows = [header]
    for arm in report["arms"]:
        n = report["facts"]
        rows.append(
            (
                arm["arm"],
                f"{arm['correct']}/{n}" if arm["fits"] else "n/a",
                f"{arm['in_context_count']}/{n}" if arm["fits"] else "n/a",
                f"{arm['reachable_count']}/{n}" if arm["fits"] else "n/a",
                f"{arm['input_tokens_per_turn_mean']:,}",
                f"{arm['input_tokens_per_turn_max']:,}",
                str(arm["summary_calls"]),
                f"{arm['summary_input_tokens_total']:,}",
                f"{arm['final_summary_tokens']:,}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for arm in report["arms"]:
        if arm["note"]:
            print(f"{arm['arm']}: {arm['note']}")
    print(
        f"retention (summary - floor) / (ceiling - floor): answers "
        f"{_fmt(report['retention_accuracy'])}, in context {_fmt(report['retention_in_context'])}"
    )
    print(
        "recall: input tokens a turn "
        f"{_fmt(report['recall_tokens_per_turn_ratio'])}× chatbot's without it (goal ≤ 1.10×)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--language",
        choices=sorted(FACTS),
        default=None,
        help="script and prompt language (default: CHATBOT_LANGUAGE or en)",
    )
    parser.add_argument("--filler", type=int, default=3, help="filler turns after each fact")
    parser.add_argument(
        "--long",
        action="store_true",
        help="the long script: 50 facts, 15 corrected, 7 filler turns each (520 turns)",
    )
    parser.add_argument(
        "--trigger",
        default="tokens:2000",
        help="chatbot's trigger; its token budget is also last-N's (tokens:N)",
    )
    parser.add_argument("--keep", default="tokens:600", help="chatbot's keep window")
    parser.add_argument(
        "--report",
        type=Path,
        default=Path("retention-report.json"),
        help="where the JSON report goes",
    )
    args = parser.parse_args(argv)  # fmt: skip
    overrides: dict[str, Any] = {"summary_trigger": args.trigger, "summary_keep": args.keep}
    if args.language:
        overrides["language"] = args.language
    try:
        settings = load_settings(os.environ.get("CHATBOT_ENV_FILE", ".env"), **overrides)
        report = run(settings, 7 if args.long and args.filler == 3 else args.filler, args.long)
    except (SettingsError, PolicyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print_report(report)
    args.report.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
