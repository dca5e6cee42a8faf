"""A deterministic NLI stand-in: the hypothesis is entailed when the premise covers its content words.

No model, no randomness: it exists so the control flow of hallucination verification can be tested and
dry-run exactly. It is not a substitute for an NLI model on real data. Like a real NLI model it knows only
what the premise says: "I" stands for a person only when the premise says who is speaking
("Maya said: I moved to Lisbon" supports "Maya moved to Lisbon"; "I moved to Lisbon" alone does not).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from promem_fast.pipeline.words import content_set, content_words
from promem_fast.backends.base import NLIResult, label_from_scores
from promem_fast.config import NLIConfig

_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|(?i:my|me|myself))\b")
_SAID = re.compile(r"^(?P<on>On [^,\n]*, )?(?P<name>[^:\n]+?) said: (?P<text>.*)$", re.M)

ENTAIL_COVERAGE = 0.75
"""Share of the hypothesis' content words that must occur in the premise."""


class LexicalNLI:
    def __init__(self, config: NLIConfig | None = None) -> None:
        self.config = config or NLIConfig(backend="lexical")

    def entail(self, pairs: Sequence[tuple[str, str]]) -> list[NLIResult]:
        return [self.judge(p, h) for p, h in pairs]

    @staticmethod
    def judge(premise: str, hypothesis: str) -> NLIResult:
        """One pair's verdict (the scripted chat model's NLI answers use it too, so both judge alike)."""
        words = content_words(hypothesis)
        have = content_set(_SAID.sub(r"\g<on>\g<text>", premise))  # "X said:" names a speaker, it is no evidence
        speakers = {w for said in _SAID.finditer(premise) if _FIRST_PERSON.search(said.group("text"))
                    for w in content_words(said.group("name"))}
        # "I moved" said by Maya supports "Maya moved": her name in the hypothesis is resolved, not matched
        words = tuple(w for w in words if w not in speakers) or words
        if not words:
            return NLIResult("neutral", (0.0, 1.0, 0.0))
        coverage = sum(w in have for w in words) / len(words)
        entail = 1.0 if coverage >= ENTAIL_COVERAGE else coverage * 0.5
        scores = (entail, 1.0 - entail, 0.0)
        return NLIResult(label_from_scores(scores), scores)
