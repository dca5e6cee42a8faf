"""What an extracted memory keeps of the dialogue around it: its source (the owner's words in its turns) and
its exchange (the other speaker's words around them), in both shapes the loaders give a dialogue.

HaluMem and chat logs put a user message and the assistant's reply in one turn; LoCoMo gives each message its
own turn, so the question the owner answered is the turn before. Expected words are the fixtures' own lines.
"""

from __future__ import annotations

from conftest import make_session, scripted_config
from promem_fast.engine import Engine
from promem_fast.types import Session, Turn

PAIRS = [
    ("I adopted a beagle named Biscuit last Saturday.", "Congratulations on adopting Biscuit!"),
    ("I moved to Lisbon in May for a job at Nordvik Labs.", "Lisbon is lovely; how is the new job?"),
    ("My sister Ana visits me in Lisbon every month.", "It is great that Ana visits so often."),
]

LINES = [  # (speaker, words): one message per turn, as LoCoMo's dialogue ids give them
    ("Melanie", "How was the ceramics class on Tuesday, Caroline?"),
    ("Caroline", "I made a blue bowl at the ceramics class on Tuesday."),
    ("Melanie", "A blue bowl sounds lovely for your kitchen."),
    ("Melanie", "Did the glaze come out the way you wanted?"),
    ("Caroline", "I glazed the bowl with cobalt and it came out shiny."),
]


def extract(session: Session, keep_exchange: bool = True) -> dict[int | str, list[tuple[str | None, str | None]]]:
    """The scripted profile's memories of the session: turn → (source, exchange) of each memory grounded there."""
    (graph,) = Engine(scripted_config(keep_exchange=keep_exchange)).extract([session])
    found: dict[int | str, list[tuple[str | None, str | None]]] = {}
    for node in graph.nodes:
        found.setdefault(node.turn_ids[0], []).append((node.source, node.exchange))
    return found


def test_a_memory_keeps_the_assistants_reply_of_its_turn_as_its_exchange() -> None:
    found = extract(make_session("maya-1", "Maya", PAIRS))
    assert set(found) == {0, 1, 2}  # every turn says something worth keeping
    for turn, (said, reply) in enumerate(PAIRS):
        assert set(found[turn]) == {(said, reply)}


def test_a_memory_of_a_one_message_turn_keeps_the_other_speakers_messages_next_to_it() -> None:
    turns = tuple(Turn(turn_id=f"D1:{k + 1}", role=who, text=text, timestamp="8 May, 2023")
                  for k, (who, text) in enumerate(LINES))
    session = Session(session_id="conv-1:session_1:Caroline", user="Caroline", turns=turns,
                      timestamp="1:56 pm on 8 May, 2023", owner_role="Caroline")
    found = extract(session)
    assert set(found) == {"D1:2", "D1:5"}  # Melanie's turns are no memory of Caroline's
    # the question before it and the reply after it; the last turn has only the question before it
    assert set(found["D1:2"]) == {(LINES[1][1], f"{LINES[0][1]}\n{LINES[2][1]}")}
    assert set(found["D1:5"]) == {(LINES[4][1], LINES[3][1])}


def test_a_pipeline_told_not_to_keep_exchanges_keeps_none_of_the_other_speakers_words() -> None:
    found = extract(make_session("maya-1", "Maya", PAIRS), keep_exchange=False)
    assert {turn: set(kept) for turn, kept in found.items()} == {turn: {(said, None)}
                                                                 for turn, (said, _) in enumerate(PAIRS)}
