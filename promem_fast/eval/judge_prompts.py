"""Which prompts the HaluMem judges use: the project's own, or HaluMem's official ones from the user's checkout.

The paper judged with GPT-4o; HaluMem's published numbers come from its own judge prompts, which live in its
repository (module ``eval/eval_tools.py``, one string constant per judge). They are not ours to copy, so
``promem eval halumem --judge-prompts PATH`` reads them at run time from the user's own checkout of that
repository: the module is parsed with :mod:`ast` and only its string constants are taken (no foreign code is
run), each checked for the fields it is filled with. Every result records which prompts graded it (the
project's own, or the file with its sha256).

A prompt set turns one of our judge requests (template name + our fields) into chat messages and a reply
schema, and the parsed reply back into our reply shape, so the judges and the labels stay the same
whichever prompts are used:

================  =======================================  ==============================================
our template      HaluMem constant                         filled with
================  =======================================  ==============================================
judge_integrity   EVALUATION_PROMPT_FOR_MEMORY_INTEGRITY   memories, expected_memory_point
judge_accuracy    EVALUATION_PROMPT_FOR_MEMORY_ACCURACY    dialogue, golden_memories, candidate_memory
judge_update      EVALUATION_PROMPT_FOR_UPDATE_MEMORY      memories, updated_memory, original_memory
judge_halumem_qa  EVALUATION_PROMPT_FOR_QUESTION           question, reference_answer, key_memory_points,
                                                           response
================  =======================================  ==============================================

Lists and dialogues are laid out as HaluMem's evaluation lays them out (memories one a line, unnumbered; a
dialogue as ``[timestamp]role: content`` lines with a blank line after each assistant message), and the
whole prompt is sent as one user message.
"""

from __future__ import annotations

import ast
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promem_fast.backends.base import Message
from promem_fast.errors import ConfigError
from promem_fast.prompts import format_turn

from .prompts import eval_schema, render_eval
from .provenance import sha256_file

MODULE = Path("eval") / "eval_tools.py"
"""Where HaluMem's judge prompts live inside its repository."""

OFFICIAL: dict[str, tuple[str, dict[str, str]]] = {
    "judge_integrity": ("EVALUATION_PROMPT_FOR_MEMORY_INTEGRITY",
                        {"memories": "memories", "expected_memory_point": "point"}),
    "judge_accuracy": ("EVALUATION_PROMPT_FOR_MEMORY_ACCURACY",
                       {"dialogue": "dialogue", "golden_memories": "reference", "candidate_memory": "memory"}),
    "judge_update": ("EVALUATION_PROMPT_FOR_UPDATE_MEMORY",
                     {"memories": "memories", "updated_memory": "point", "original_memory": "previous"}),
    "judge_halumem_qa": ("EVALUATION_PROMPT_FOR_QUESTION",
                         {"question": "question", "reference_answer": "reference",
                          "key_memory_points": "evidence", "response": "answer"}),
}
"""Our judge template → (HaluMem's constant, its field → our field)."""


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


_TEXT = {"type": "string"}
_OFFICIAL_SCHEMAS: dict[str, dict[str, Any]] = {
    "judge_integrity": _object({"reasoning": _TEXT, "score": {"type": "string", "enum": ["2", "1", "0"]}}),
    "judge_accuracy": _object({"accuracy_score": {"type": "string", "enum": ["2", "1", "0"]},
                               "is_included_in_golden_memories": {"type": "string", "enum": ["true", "false"]},
                               "reason": _TEXT}),
    "judge_update": _object({"reason": _TEXT, "evaluation_result": {
        "type": "string", "enum": ["Correct", "Hallucination", "Omission", "Other"]}}),
    "judge_halumem_qa": _object({"reasoning": _TEXT, "evaluation_result": {
        "type": "string", "enum": ["Correct", "Hallucination", "Omission"]}}),
}
"""The replies HaluMem's prompts ask for (grades as strings, a reason beside them)."""


def _grade(value: Any) -> int | None:
    """A grade as HaluMem reads it (``int(...)``; anything else is no grade)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class JudgePrompts:
    """A set of judge prompts; this base class is the project's own (:data:`OWN`)."""

    def record(self) -> dict[str, Any]:
        """What the result records about the prompts' source."""
        return {"source": "promem_fast"}

    def covers(self, name: str) -> bool:
        """Whether this set has its own prompt for template ``name``."""
        return True

    def messages(self, name: str, fields: dict[str, str]) -> tuple[Message, ...]:
        return render_eval(name, **fields)

    def schema(self, name: str) -> dict[str, Any]:
        return eval_schema(name)

    def reply(self, name: str, parsed: dict[str, Any]) -> dict[str, Any]:
        """The parsed reply in our shape (``score``, ``in_reference`` as "true"/"false", ``verdict``)."""
        if name == "judge_accuracy":
            return {**parsed, "in_reference": "true" if parsed["in_reference"] else "false"}
        return dict(parsed)

    def listing(self, texts: Sequence[str]) -> str:
        """A list of memories or facts as the prompt shows it."""
        return "\n".join(f"{i + 1}. {text}" for i, text in enumerate(texts)) or "(none)"

    def turn(self, messages: Sequence[Any], turn_id: Any) -> str:
        """One dialogue turn as the accuracy judge reads it."""
        return format_turn(messages, turn_id)


OWN = JudgePrompts()
"""The project's own judge prompts (:data:`promem_fast.eval.prompts.EVAL_TEMPLATES`)."""


@dataclass(frozen=True)
class HaluMemPrompts(JudgePrompts):
    """HaluMem's official judge prompts, read from a checkout (:func:`load_halumem_prompts`)."""

    path: str = ""
    sha256: str = ""
    texts: dict[str, str] = field(default_factory=dict)
    """Our template name → HaluMem's prompt text, as read."""

    def record(self) -> dict[str, Any]:
        return {"source": "halumem", "path": self.path, "sha256": self.sha256,
                "constants": {name: OFFICIAL[name][0] for name in self.texts}}

    def covers(self, name: str) -> bool:
        return name in self.texts

    def messages(self, name: str, fields: dict[str, str]) -> tuple[Message, ...]:
        if name not in self.texts:
            return super().messages(name, fields)
        _, names = OFFICIAL[name]
        return ({"role": "user", "content": self.texts[name].format(**{k: fields[v] for k, v in names.items()})},)

    def schema(self, name: str) -> dict[str, Any]:
        return _OFFICIAL_SCHEMAS[name] if name in self.texts else super().schema(name)

    def reply(self, name: str, parsed: dict[str, Any]) -> dict[str, Any]:
        if name not in self.texts:
            return super().reply(name, parsed)
        if name == "judge_integrity":
            return {**parsed, "score": _grade(parsed["score"])}
        if name == "judge_accuracy":  # the flag kept as the judge wrote it: HaluMem counts "true"/"True" only
            return {**parsed, "score": _grade(parsed["accuracy_score"]),
                    "in_reference": parsed["is_included_in_golden_memories"]}
        return {**parsed, "verdict": parsed["evaluation_result"]}

    def listing(self, texts: Sequence[str]) -> str:
        return "\n".join(texts)

    def turn(self, messages: Sequence[Any], turn_id: Any) -> str:
        lines = []
        for m in messages:
            lines.append(f"[{m.timestamp or ''}]{m.role}: {m.text}")
            if m.role == "assistant":
                lines.append("")
        return "\n".join(lines)


def load_halumem_prompts(path: str | Path) -> HaluMemPrompts:
    """HaluMem's judge prompts from ``path``: a checkout of its repository (``eval/eval_tools.py`` inside it)
    or that module itself. Raises :class:`ConfigError` naming the file and the constant that is missing,
    not a string, or not filled with the fields HaluMem's evaluation passes it."""
    p = Path(path)
    module = p / MODULE if p.is_dir() else p
    if not module.is_file():
        raise ConfigError(f"{path}: no HaluMem judge prompts here (expected a checkout of the HaluMem repository "
                          f"holding {MODULE}, or that file)")
    try:
        tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{module}: cannot be read as a Python module: {exc}") from None
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constants[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            constants[node.target.id] = node.value
    texts = {}
    for ours, (name, names) in OFFICIAL.items():
        value = constants.get(name)
        if value is None:
            raise ConfigError(f"{module}: no {name} defined at the top level")
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            raise ConfigError(f"{module}: {name} is not a plain string constant")
        text = value.value
        try:
            used = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
        except ValueError as exc:
            raise ConfigError(f"{module}: {name} is not a format string: {exc}") from None
        if used != set(names):
            raise ConfigError(f"{module}: {name} is filled with {{{', '.join(sorted(used))}}}, expected "
                              f"{{{', '.join(sorted(names))}}}")
        texts[ours] = text
    return HaluMemPrompts(path=str(module.resolve()), sha256=sha256_file(module), texts=texts)


def judge_prompts(path: str | Path | None, kind: str) -> JudgePrompts:
    """The prompt set a run uses: the project's own unless ``path`` names HaluMem's (HaluMem runs only)."""
    if path is None:
        return OWN
    if kind != "halumem":
        raise ConfigError(f"--judge-prompts reads HaluMem's judge prompts; {kind} has its own judging")
    return load_halumem_prompts(path)
