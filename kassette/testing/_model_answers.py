"""What the fake model server answers: plausible text or a tool call, a function of the request.

A `Prompt` is a request reduced to what a model reads (model, system text, the turns, the
tools, the sampling parameters), whatever provider's wire format it came in. `answer(prompt,
seed=...)` writes a few sentences to a few paragraphs from the prompt's own words and a bank of
sentences. The answer is a pure function of the request: the same request always gets the same
answer. At temperature 0 it depends on the prompt alone; each sentence of the answer is
resampled with a probability that grows with the temperature (`(t / 2) ** 2`: 1% at 0.2, 25% at
1.0, every sentence at 2.0), from a generator seeded by the temperature, the server's seed and
the request's `seed`, so that low temperatures mostly give the prompt's answer and high ones
differ.

Standard library only: `kassette.testing.fake_model_server` imports it on call.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "Prompt", "Tool", "ToolCall", "answer", "count_tokens", "text_of"]

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")
_STOPWORD_TEXT = """
    a about above after again all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each either explain few
    for from further give had has have having he her here hers how i if in into is it its itself
    just let like list make me more most my need no nor not now of off on once only or other our
    out over own please same say she should show so some such tell than that the their them then
    there these they this those through to too under until up us use very want was we were what
    when where which while who whom why will with would write you your describe summarize
    summarise answer briefly short one two three check find look get call
    using run nothing else first day days today yesterday something anything everything thing
    things okay thanks hello"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_FALLBACK_TOPICS = ("the details", "the question")

_OPENERS = (
    "Here is how I would think about {a}.",
    "Good question: {a} comes up more often than people expect.",
    "Short version: {a} is mostly about {b}.",
    "There are a few ways to look at {a}, and they lead to slightly different answers.",
    "Let me start with what {a} actually has to guarantee.",
    "{A} is easier to reason about once you separate it from {b}.",
    "It helps to pin down what {a} means before deciding anything about {b}.",
)
_BODY = (
    "The first thing to settle is what {a} must never do, because that rules out most designs.",
    "In practice, most of the trouble with {a} comes from {b}, not from {a} itself.",
    "A useful test is to ask what happens to {a} if the process stops halfway through.",
    "If {b} changes often, keep it at the edge and let {a} stay simple.",
    "Most teams start with the simplest version of {a} and add structure only when it hurts.",
    "The trade-off is between doing {a} quickly and being able to explain it later.",
    "One common mistake is to treat {a} and {b} as the same concern.",
    "Measuring {a} before changing it usually saves a surprising amount of time.",
    "Writing down the assumptions behind {a} makes the weak ones obvious.",
    "A small, concrete example of {a} is worth more here than a general rule.",
    "When {b} is involved, it pays to make every step repeatable.",
    "There is no single right answer for {a}; it depends on what you can afford to lose.",
    "The cost of {b} tends to show up late, so it is worth estimating early.",
    "Keeping a record of each decision about {a} makes it easy to revisit later.",
    "If you only change one thing, change how {b} is handled.",
    "People often underestimate how much {b} shapes the rest of {a}.",
    "It is worth comparing two or three variants of {a} side by side before committing.",
    "The failure cases of {a} are more informative than the happy path.",
    "A clear boundary between {a} and {b} keeps either from leaking into the other.",
    "Good defaults for {a} matter more than many options.",
    "Start from the outcome you want from {a} and work backwards to {b}.",
    "Nothing about {a} needs to be clever; it needs to be predictable.",
    "The interesting part of {a} is what happens at the edges, with {b}.",
    "Try the idea on a small slice of {b} first and see whether it holds.",
    "A checklist for {a} would start with inputs, then limits, then what to do on failure.",
    "Over time, {a} tends to drift, so plan for reviewing it.",
    "The evidence so far suggests that {b} is the part worth getting right.",
    "You can usually tell a good approach to {a} by how little it surprises anyone.",
)
_CLOSERS = (
    "In short, keep {a} simple and make {b} explicit.",
    "That should be enough to get started with {a}.",
    "If it helps, I can sketch a concrete plan for {a}.",
    "Overall, the safest path is to test {a} against {b} early.",
    "Happy to go deeper into any part of {b}.",
    "So the answer depends less on {a} than on how you handle {b}.",
)


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, description and JSON Schema of arguments."""

    name: str
    description: str = ""
    schema: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model answers with: the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Prompt:
    """A model request as the model reads it, whatever the provider's wire format.

    `turns` are `(role, text)` pairs; `tool_choice` is `"auto"`, `"none"`, `"required"` or a
    tool's name; `after_tool_result` says the last turn hands back a tool's result (so the model
    answers in text rather than calling again).
    """

    model: str
    system: str = ""
    turns: tuple[tuple[str, str], ...] = ()
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"
    after_tool_result: bool = False
    temperature: float = 1.0
    seed: int | None = None
    max_tokens: int | None = None

    @property
    def last_user_text(self) -> str:
        return next((text for role, text in reversed(self.turns) if role == "user"), "")

    def key(self) -> str:
        """What the answer at temperature 0 depends on: the model, the texts, the tools."""
        tools = [tool.name for tool in self.tools]
        return json.dumps([self.model, self.system, self.turns, tools, self.tool_choice])


@dataclass(frozen=True)
class Answer:
    """The model's answer: text (possibly empty) and at most one tool call, with token counts."""

    text: str
    tool_call: ToolCall | None
    finish: str  # "stop", "length" or "tool_calls", mapped to each provider's word
    prompt_tokens: int
    completion_tokens: int


def count_tokens(text: str) -> int:
    """An approximate token count: words and punctuation marks."""
    return len(_TOKEN.findall(text))


def text_of(content: Any) -> str:
    """The text in a message's content: a string, or the text of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(filter(None, (_part_text(part) for part in content)))
    return ""


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    if isinstance(part.get("text"), str):
        return str(part["text"])
    if "content" in part:  # a tool result carrying text
        return text_of(part["content"])
    if isinstance(part.get("output"), str):
        return str(part["output"])
    return ""


def answer(prompt: Prompt, *, seed: int = 0) -> Answer:
    """The answer to `prompt` from a server seeded with `seed` (see the module docstring)."""
    base = random.Random(_digest(prompt.key()))
    sample_key = (prompt.key(), round(prompt.temperature, 3), seed, prompt.seed)
    topics = _topics(prompt)
    prompt_tokens = _prompt_tokens(prompt)
    tool = _chosen_tool(prompt, base)
    if tool is not None:
        rng = random.Random(_digest(json.dumps([*sample_key, "tool"])))
        call = ToolCall(tool.name, _arguments(tool.schema, topics, base, rng, prompt))
        arguments_tokens = count_tokens(json.dumps(call.arguments))
        return Answer("", call, "tool_calls", prompt_tokens, arguments_tokens + 8)
    text = _text(topics, base, sample_key, min(max(prompt.temperature, 0.0), 2.0))
    text, finish = _truncate(text, prompt.max_tokens)
    return Answer(text, None, finish, prompt_tokens, max(count_tokens(text), 1))


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _topics(prompt: Prompt) -> list[str]:
    """Runs of up to three content words from the last user turn (then the system text)."""
    phrases: list[str] = []
    seen: set[str] = set()  # `phrases` as a set: a long prompt has many
    said = prompt.last_user_text
    for tool in prompt.tools:  # a tool's name is how the user asks for it, not the topic
        said = re.sub(re.escape(tool.name), " ", said, flags=re.IGNORECASE)
    for source in (said, prompt.system):
        run: list[str] = []
        for match in [*_WORD.finditer(source), None]:
            word = _topic_word(source, match)
            if word and len(run) < 3:
                run.append(word)
                continue
            phrase = " ".join(run)
            if phrase and phrase not in seen:
                phrases.append(phrase)
                seen.add(phrase)
            run = [word] if word else []
        if len(phrases) >= 2:
            break
    phrases.sort(key=lambda phrase: -phrase.count(" "))  # "nightly export" before "export"
    return phrases if len(phrases) > 1 else [*phrases, *_FALLBACK_TOPICS][:2]


def _topic_word(source: str, match: re.Match[str] | None) -> str:
    """A content word as it reads inside a sentence ("" for a stop word or the end)."""
    if match is None:
        return ""
    word = match[0]
    if len(word) < 3 and not any(c.isdigit() or c.isupper() for c in word[1:]):
        return ""  # a short word, unless a name (S3, iPhone, GPT4)
    if word.lower() in _STOPWORDS:
        return ""
    if word.endswith("ed") and not word[:1].isupper():
        return ""  # mostly a verb (stopped, rotated), not what the text is about
    sentence_start = _before(source, match.start()) in ("", ".", "?", "!", ":")
    # a capital only starting a sentence is not a name; an acronym or a name keeps its case
    return word.lower() if sentence_start and not word.isupper() else word


def _before(source: str, end: int) -> str:
    """The last character before `end` that is not white space ("" at the start): found by
    walking back over the gap, not by copying all that comes before (quadratic in a prompt)."""
    at = end - 1
    while at >= 0 and source[at].isspace():
        at -= 1
    return source[at] if at >= 0 else ""


def _text(topics: list[str], base: random.Random, key: tuple[Any, ...], temperature: float) -> str:
    """Paragraphs of sentences; each sentence is the prompt's own or, at a chance, resampled."""
    paragraphs = base.choice((1, 2, 2, 3))
    lengths = [base.randint(2, 4) for _ in range(paragraphs)]
    slots = sum(lengths)
    own_seeds = [base.getrandbits(64) for _ in range(slots)]
    thresholds = [base.random() for _ in range(slots)]
    sentences: list[str] = []
    used: set[str] = set()
    for slot in range(slots):
        resampled = thresholds[slot] < (temperature / 2) ** 2
        slot_seed = _digest(json.dumps([*key, slot])) if resampled else own_seeds[slot]
        rng = random.Random(slot_seed)
        bank = _OPENERS if slot == 0 else _CLOSERS if slot == slots - 1 and slots > 3 else _BODY
        a, b = rng.choice(topics), rng.choice(topics)
        if a == b and len(topics) > 1:
            b = topics[(topics.index(a) + 1) % len(topics)]
        index = rng.randrange(len(bank))
        while bank[index] in used and len(used) < len(bank):  # no sentence said twice
            index = (index + 1) % len(bank)
        used.add(bank[index])
        sentence = bank[index].format(a=a, b=b, A=a[:1].upper() + a[1:])
        sentences.append(sentence[:1].upper() + sentence[1:])
    out: list[str] = []
    start = 0
    for length in lengths:
        out.append(" ".join(sentences[start : start + length]))
        start += length
    return "\n\n".join(out)


def _truncate(text: str, max_tokens: int | None) -> tuple[str, str]:
    """The text cut after `max_tokens` tokens, with finish `"length"` when it was cut."""
    if max_tokens is None:
        return text, "stop"
    tokens = list(_TOKEN.finditer(text))
    if len(tokens) <= max_tokens:
        return text, "stop"
    return text[: tokens[max(max_tokens, 1) - 1].end()], "length"


def _prompt_tokens(prompt: Prompt) -> int:
    """Tokens of the system text, each turn (plus a few for its role) and the tool schemas."""
    texts = [prompt.system, *(text for _role, text in prompt.turns)]
    tools = [json.dumps([tool.name, tool.description, tool.schema]) for tool in prompt.tools]
    return sum(map(count_tokens, texts + tools)) + 3 * len(prompt.turns) + 3


def _chosen_tool(prompt: Prompt, base: random.Random) -> Tool | None:
    """The tool the model calls: one it is told to, else one the last user turn names."""
    if not prompt.tools or prompt.after_tool_result or prompt.tool_choice == "none":
        return None
    by_name = {tool.name: tool for tool in prompt.tools}
    if prompt.tool_choice in by_name:
        return by_name[prompt.tool_choice]
    said = prompt.last_user_text.lower()
    named = [
        tool
        for tool in prompt.tools
        if tool.name.lower() in said or tool.name.lower().replace("_", " ") in said
    ]
    if named:
        return named[0]
    return base.choice(prompt.tools) if prompt.tool_choice == "required" else None


def _arguments(
    schema: dict[str, Any],
    topics: list[str],
    base: random.Random,
    rng: random.Random,
    prompt: Prompt,
) -> dict[str, Any]:
    """Plausible arguments for a JSON Schema object: every required property, some others."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or properties)
    return {
        name: _value(name, spec, topics, rng, prompt)
        for name, spec in properties.items()
        if isinstance(spec, dict) and (name in required or base.random() < 0.5)
    }


def _value(
    name: str, spec: dict[str, Any], topics: list[str], rng: random.Random, prompt: Prompt
) -> Any:
    kind = spec.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if spec.get("enum"):
        return rng.choice(spec["enum"])
    named = [topic for topic in topics if any(word[:1].isupper() for word in topic.split())]
    topic = rng.choice(named or topics)  # a name in the prompt is what a field most likely wants
    if kind == "integer":
        return rng.randint(int(spec.get("minimum", 1)), int(spec.get("maximum", 10)))
    if kind == "number":
        low, high = float(spec.get("minimum", 0.0)), float(spec.get("maximum", 100.0))
        return round(rng.uniform(low, high), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = spec.get("items")
        item: dict[str, Any] = items if isinstance(items, dict) else {}
        return [_value(name, item, topics, rng, prompt) for _ in range(rng.randint(1, 3))]
    if kind == "object":
        return _arguments(spec, topics, rng, rng, prompt)
    return _string(name.lower(), topic, prompt)


def _string(name: str, topic: str, prompt: Prompt) -> str:
    """A string argument that reads like what a model would put in a field of that name."""
    slug = re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-") or "item"
    if any(word in name for word in ("query", "question", "search", "prompt", "text")):
        return prompt.last_user_text.strip()[:200] or topic
    if any(word in name for word in ("city", "location", "place", "country", "title", "name")):
        names = [word for word in topic.split() if word[:1].isupper()]
        return " ".join(names) if names else topic.title()
    if "url" in name or "link" in name:
        return f"https://example.com/{slug}"
    if "email" in name:
        return f"{slug}@example.com"
    if "date" in name:
        return "2026-01-15"
    if name == "id" or name.endswith("_id"):
        return f"{slug}-{_digest(slug) % 1000:03d}"
    if "path" in name or "file" in name:
        return f"{slug}.md"
    return topic
