"""A deterministic chat model for tests and dry runs: replies chosen by role and input.

It recognises which of our prompts it was sent (:func:`parse_rendered`) and answers
with simple, reproducible text rules: first-person sentences of the speaker the prompt names as the memory
owner, rewritten in the third person (relative dates made absolute from the date the prompt gives), become
facts and events, capitalised names and numbers become details, and so on. It knows only what the prompt
says: without the owner's name or the session date in the prompt it cannot produce those facts. This exercises
every branch of the pipeline without a model. Tests pass their own ``rules`` to script exact replies.
"""

from __future__ import annotations

import json
import math
import re
import string
from datetime import date, timedelta
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from promem_fast.pipeline.words import content_words
from promem_fast.backends.base import Completion, GenerationRequest, Message
from promem_fast.config import LLMConfig
from promem_fast.eval.prompts import EVAL_TEMPLATES
from promem_fast.prompts import BLOCK, DIALOGUE, PER_ITEM, PREAMBLE, TEMPLATES
from promem_fast.store.prompts import STORE_TEMPLATES
from promem_fast.testing.eval_rules import EVAL_RULES
from promem_fast.testing.nli_lexical import LexicalNLI
from promem_fast.testing.overlap import coverage
from promem_fast.testing.store_rules import STORE_RULES

Rule = Callable[[dict[str, str]], Any]
"""Maps a prompt's fields to a reply: a JSON-able value, or a raw string sent as is."""

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_LINE = re.compile(r"^(?:\[turn (?P<tid>[^\]]+)\] )?(?P<role>[^:\n]+): (?P<text>.*)$", re.M)


def approx_tokens(text: str) -> int:
    """About four characters a token, the usual rule of thumb for English with BPE vocabularies."""
    return math.ceil(len(text) / 4)


_FIELD_PATTERNS = {"turns": r"[^\n]*"}
"""Fields whose values keep to one line: a detail or event item's turn list, followed by an optional part."""


def _match(pattern: str, text: str, known: dict[str, str]) -> dict[str, str] | None:
    """The values of ``pattern``'s fields in ``text`` (fields in ``known`` must repeat their value)."""
    regex, here = "", set()
    for literal, name, _, _ in string.Formatter().parse(pattern):
        regex += re.escape(literal)
        if not name:
            continue
        if name in known:
            regex += re.escape(known[name])
        elif name in here:
            regex += f"(?P={name})"
        else:
            regex += f"(?P<{name}>{_FIELD_PATTERNS.get(name, '.*?')})"
            here.add(name)
    found = re.fullmatch(regex, text, re.S)
    return found.groupdict() if found else None


def parse_rendered(messages: Sequence[Message]) -> tuple[str, dict[str, str]] | None:
    """The role and field values a rendered prompt was made from (None if it is not one of ours).

    Used by the scripted backend, which answers by role and input like a model would, from the prompt alone.
    A pipeline prompt's fields include those of its session block: ``user``, ``when`` and ``dialogue`` (the
    dialogue the block shows, "" when it shows none).
    """
    if len(messages) != 2:
        return None
    system, user = messages[0]["content"], messages[1]["content"]
    block = _match(BLOCK, system, {}) if system.startswith(BLOCK.split("{", 1)[0]) else None
    if system == PREAMBLE:  # a check outside any session (the store's update judge)
        block = {"dialogue": ""}
    elif block is not None:
        shown = block.pop("shown")
        head = DIALOGUE.split("{", 1)[0]
        block["dialogue"] = shown[len(head):] if shown.startswith(head) else ""
        for role, template in TEMPLATES.items():
            if not user.startswith(template.user.split("{", 1)[0]):
                continue
            fields = _match(template.user, user, block)
            if fields is not None:
                return role, {**block, **fields}
        return None
    for role, other in {**EVAL_TEMPLATES, **STORE_TEMPLATES}.items():
        if not system.startswith(f"{PREAMBLE}\n\n{other.system.split('{', 1)[0]}"):
            continue
        fields = _match(f"{PREAMBLE}\n\n{other.system}", system, {})
        more = _match(other.user, user, fields) if fields is not None else None
        if more is not None:
            return role, {**fields, **more}  # type: ignore[dict-item]
    return None


_LINK = re.compile(r"^(?P<n>\d+)\. source: entry (?P<source>\d+), target: entry (?P<target>\d+), relation: "
                   r"(?P<relation>\S+) \((?P<meaning>.*?)\)$", re.M)
_NUMBERED = re.compile(r"^(?P<n>\d+)\. (?P<text>.*)$", re.M)


def _by_number(lines: str) -> dict[int, str]:
    return {int(m.group("n")): m.group("text") for m in _NUMBERED.finditer(lines)}


def each_item(role: str, fields: dict[str, str], rule: Rule) -> dict[str, Any]:
    """A reply to a prompt of numbered items (links, questions): ``rule`` answers each item asked from the
    fields that item's line gives (a link's two entries looked up by number, its question when the prompt has
    one), with the prompt's other fields. The reply is keyed by the items' numbers, each holding the rule's
    answer (its ``question``, ``answerable`` or ``supported``). Verification answers only the links the prompt
    names to check."""
    answer = PER_ITEM[role][0]
    questions = _by_number(fields.get("questions", ""))
    checked = {int(k) for k in fields.get("check", "").split(", ") if k.strip().isdigit()}
    if role == "answer_flat":
        items = {k: {"question": q} for k, q in questions.items()}
    else:
        entries = _by_number(fields["entries"])
        items = {}
        for m in _LINK.finditer(fields["links"]):
            k = int(m.group("n"))
            if role == "verify_relation" and k not in checked:
                continue
            items[k] = {"source": entries[int(m.group("source"))], "target": entries[int(m.group("target"))],
                        "relation": m.group("relation"), "meaning": m.group("meaning"),
                        **({"question": questions[k]} if k in questions else {})}
    return {str(k): rule({**fields, **item})[answer] for k, item in items.items()}


def shown_text(fields: dict[str, str]) -> str:
    """The dialogue a prompt shows: the part in its item when it has one, else the block's dialogue."""
    text = fields.get("text", "").strip("\n")
    return text.split(":\n", 1)[1] if text else fields.get("dialogue", "")


def turn_lines(fields: dict[str, str], wanted: str) -> dict[str, str]:
    """The lines of each turn named in ``wanted`` ("3, 4"), from the item's part or the block's dialogue."""
    names = [t.strip() for t in wanted.split(",") if t.strip()]
    out: dict[str, list[str]] = {name: [] for name in names}
    part = fields.get("text", "").strip("\n")
    if part and len(names) == 1:  # the item shows the one turn it names (or a window of a long one)
        return {names[0]: part.split(":\n", 1)[1]}
    for line in (part.split(":\n", 1)[1] if part else fields.get("dialogue", "")).splitlines():
        m = _LINE.match(line)
        tid = m.group("tid").split(" on ", 1)[0] if m and m.group("tid") else None
        if tid in out:
            out[tid].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


# ------------------------------------------------------------------------------------------ schemas
def within_schema(reply: Any, schema: Mapping[str, Any] | None) -> Any:
    """Lists cut at the schema's ``maxItems``, as a grammar-constrained model (llama.cpp, vLLM) must stop."""
    if not isinstance(reply, dict) or not schema:
        return reply
    props = schema.get("properties", {})
    return {k: v[:props[k]["maxItems"]] if isinstance(v, list) and "maxItems" in props.get(k, {}) else v
            for k, v in reply.items()}


class ScriptedLLM:
    """Rule-based replies; ``rules`` (role → function of the prompt fields) override the defaults."""

    def __init__(self, config: LLMConfig | None = None, rules: Mapping[str, Rule] | None = None) -> None:
        self.config = config or LLMConfig(backend="scripted")
        self.context_length = int(self.config.context_length or 8192)
        self.rules: dict[str, Rule] = {**DEFAULT_RULES, **EVAL_RULES, **STORE_RULES, **(rules or {})}
        self.calls: list[int] = []
        """Batch sizes of every ``generate`` call, for tests that count backend calls."""

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(approx_tokens(m["content"]) + 4 for m in messages) + 2

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        self.calls.append(len(requests))
        out = []
        for request in requests:
            parsed = parse_rendered(request.messages)
            if parsed is None:
                reply: Any = {}
            else:
                role, fields = parsed
                if role in PER_ITEM and role in self.rules:
                    reply = each_item(role, fields, self.rules[role])
                else:
                    reply = self.rules[role](fields) if role in self.rules else {}
            reply = within_schema(reply, request.schema)
            text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
            n = approx_tokens(text)
            finish = "stop"
            if n > request.max_tokens:
                text, n, finish = text[: request.max_tokens * 4], request.max_tokens, "length"
            out.append(Completion(text=text, prompt_tokens=self.count_tokens(request.messages),
                                  completion_tokens=n, finish_reason=finish))
        return out


# ------------------------------------------------------------------------------------------ rules
_RELATIVE = {"today": 0, "tonight": 0, "yesterday": -1, "tomorrow": 1, "last week": -7, "next week": 7}
_RELATIVE_RE = re.compile(r"\b(?:" + "|".join(_RELATIVE) + r")\b", re.I)
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def lines_of(dialogue: str) -> list[tuple[str | None, str, str]]:
    """(turn header, speaker, text) of each ``[turn 3] Maya: ...`` line."""
    return [(m.group("tid"), m.group("role").strip(), m.group("text").strip()) for m in _LINE.finditer(dialogue)]


def day_in(text: str | None) -> date | None:
    """The first ISO date written in ``text`` (a prompt's session date line or a turn header)."""
    found = _ISO_DAY.search(text or "")
    return date(*map(int, found.groups())) if found else None


def absolute_dates(sentence: str, day: date | None) -> str:
    """'tomorrow' → 'on 2025-03-15' when the prompt gave the day; left as said otherwise."""
    if day is None:
        return sentence

    def swap(m: re.Match[str]) -> str:
        offset = _RELATIVE[m.group(0).lower()]
        try:
            target = (day + timedelta(days=offset)).isoformat()
        except OverflowError:  # a day past the calendar's ends: left as said
            return m.group(0)
        return f"on {target}" if abs(offset) < 7 else f"in the week of {target}"

    return _RELATIVE_RE.sub(swap, sentence)


def third_person(sentence: str, user: str) -> str:
    """'I moved to Berlin with my wife' → 'Maya moved to Berlin with Maya's wife' (crude, deterministic)."""
    s = sentence.strip()
    swaps = [(r"\bI'm\b", f"{user} is"), (r"\bI am\b", f"{user} is"), (r"\bI've\b", f"{user} has"),
             (r"\bI'll\b", f"{user} will"), (r"\bI'd\b", f"{user} would"), (r"\bI\b", user),
             (r"\b[Mm]y\b", f"{user}'s"), (r"\b[Mm]e\b", user), (r"\b[Mm]yself\b", user)]
    for pattern, repl in swaps:
        s = re.sub(pattern, repl, s)
    return s[0].upper() + s[1:] if s else s


def owner_sentences(dialogue: str, user: str | None, day: date | None = None) -> list[str]:
    """The statements (not questions, not fillers) of the speaker the prompt names as the owner, in the
    third person, relative dates made absolute when the prompt gave the day (a turn's own date first)."""
    out = []
    for header, role, text in lines_of(dialogue):
        if user is None or role != user:
            continue
        for m in _SENTENCE.finditer(text):
            sentence = m.group(0).strip()
            if sentence.endswith("?") or len(content_words(sentence)) < 2:
                continue
            said = absolute_dates(sentence.rstrip(".!"), day_in(header) or day)
            out.append(third_person(said, user) + ".")
    return out


def _listed(fields: dict[str, str]) -> set[str]:
    """What a continuation prompt says was already listed."""
    return {line[2:].strip().lower() for line in fields.get("more", "").splitlines() if line.startswith("- ")}


def _rest(items: list[str], fields: dict[str, str]) -> list[str]:
    listed = _listed(fields)
    return [item for item in items if item.strip().lower() not in listed]


def _owner_only(fields: dict[str, str]) -> bool:
    """Whether the detail task asks for the owner's words only (its source rule names the owner)."""
    return fields.get("user", "") in fields.get("source", "")


def _details(fields: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, lines in turn_lines(fields, fields["turns"]).items():
        said = [(role, text) for _, role, text in lines_of(lines)] or [("", lines)]
        if _owner_only(fields) and any(role == fields["user"] for role, _ in said):
            said = [(role, text) for role, text in said if role == fields["user"]]
        text = " ".join(t for _, t in said)
        found = re.findall(r"\b(?:[A-Z][a-z]+(?: [A-Z][a-z]+)+|\d[\d,.:]*(?: ?(?:am|pm|km|kg|%|years?|months?|days?))?)",
                           text)
        found += [m.group(0) for m in re.finditer(r"\b(?:at|in|on) [A-Z][\w-]+(?: [A-Z][\w-]+)*", text)]
        seen: list[str] = []
        for item in found:
            if item not in seen and f"turn {name}: {item}".lower() not in _listed(fields) \
                    and item.lower() not in _listed(fields):
                seen.append(item)
        out[name] = seen
    if fields.get("reply", "").startswith('"details"'):  # one turn asked, one flat list
        return {"details": next(iter(out.values()), [])}
    if "leave out a turn with none" in fields.get("reply", ""):
        return {name: found for name, found in out.items() if found}
    return out


def _owner(fields: dict[str, str], text: str) -> list[str]:
    return owner_sentences(text, fields.get("user"), day_in(fields.get("when")))


def _events(fields: dict[str, str]) -> dict[str, list[str]]:
    segment = "\n".join(turn_lines(fields, fields["turns"]).values())
    sentences = _owner(fields, segment)
    return {"events": _rest(sentences[:1] + ([max(sentences[1:], key=len)] if len(sentences) > 2 else []), fields)}


def _relations(fields: dict[str, str]) -> dict[str, list[list[Any]]]:
    n = len([line for line in fields["events"].splitlines() if line.strip()])
    allowed = [line[2:].split(":", 1)[0] for line in fields["relation_types"].splitlines() if line.startswith("- ")]
    kind = "temporal" if "temporal" in allowed else (allowed or ["temporal"])[0]
    return {"links": [[i, kind, i + 1] for i in range(min(n - 1, 6))]}


def _draft(fields: dict[str, str]) -> dict[str, list[str]]:
    return {"facts": _rest(_owner(fields, shown_text(fields))[::2], fields)}


def _decompose(fields: dict[str, str]) -> dict[str, list[str]]:
    entry = fields["entry"].rstrip(".")
    subject = entry.split(" ", 1)[0]
    parts = [p.strip() for p in re.split(r",| and | but ", entry) if p.strip()]
    facts = [p if p.split(" ", 1)[0] == subject else f"{subject} {p}" for p in parts]
    return {"facts": [f + "." for f in facts]}


def _adjudicate(fields: dict[str, str]) -> dict[str, Any]:
    turn, fact = fields["turn"], fields["fact"]
    if coverage(fact, turn) < 0.5:
        return {"action": "DISCARD", "revised_fact": None}
    candidates = _owner(fields, turn) or [fact]
    best = max(candidates, key=lambda s: (coverage(fact, s), -len(s)))
    return {"action": "REVISE", "revised_fact": best}


def _nli(fields: dict[str, str]) -> dict[str, str]:
    """The lexical NLI's verdict: a speaker's name in "Maya said:" resolves her "I", it is no evidence."""
    return {"label": LexicalNLI.judge(fields["premise"], fields["hypothesis"]).label}


def _probe(fields: dict[str, str]) -> dict[str, str]:
    return {"question": f"How is '{fields['source'].rstrip('.')}' {fields['relation']} to "
                        f"'{fields['target'].rstrip('.')}'?"}


def _answer_flat(fields: dict[str, str]) -> dict[str, Any]:
    """Answerable when one entry alone covers most of both linked facts named in the question."""
    parts = re.findall(r"'([^']*)'", fields["question"])
    entries = [re.sub(r"^\d+\. ", "", e) for e in fields["entries"].splitlines()]
    if len(parts) == 2:
        for entry in entries:
            if entry.rstrip(".") in parts:
                continue
            if coverage(parts[0], entry) >= 0.6 and coverage(parts[1], entry) >= 0.6:
                return {"answerable": True}
    return {"answerable": False}


def _verify(fields: dict[str, str]) -> dict[str, bool]:
    dialogue = shown_text(fields)
    return {"supported": coverage(fields["source"], dialogue) >= 0.5 and coverage(fields["target"], dialogue) >= 0.5}


DEFAULT_RULES: dict[str, Rule] = {
    "detail": _details, "event": _events, "relation": _relations, "draft": _draft, "decompose": _decompose,
    "adjudicate": _adjudicate, "nli": _nli, "probe": _probe, "answer_flat": _answer_flat,
    "verify_relation": _verify,
}
