"""The times a question names, read as the window of days its memories are ranked up in.

Expected windows are the calendar's: the days a reader of each question would circle, worked out by hand.
"""

from __future__ import annotations

from datetime import date

import pytest

from promem_fast.store.when import said_within, window

ASKED = date(2023, 8, 10)  # a Thursday
EVER, NEVER = date.min, date.max


@pytest.mark.parametrize(("question", "first", "last"), [
    ("What did she do on 8 May 2023?", date(2023, 5, 8), date(2023, 5, 8)),
    ("What did she do on May 8th, 2023?", date(2023, 5, 8), date(2023, 5, 8)),
    ("What did she do in May 2023?", date(2023, 5, 1), date(2023, 5, 31)),
    ("What did she paint last May?", date(2023, 5, 1), date(2023, 5, 31)),
    ("What did she paint last September?", date(2022, 9, 1), date(2022, 9, 30)),
    ("Where did she travel in 2022?", date(2022, 1, 1), date(2022, 12, 31)),
    ("What happened yesterday?", date(2023, 8, 9), date(2023, 8, 9)),
    ("What did she read last week?", date(2023, 7, 31), date(2023, 8, 6)),
    ("Who did she meet last month?", date(2023, 7, 1), date(2023, 7, 31)),
    # bound words open the window on their side, the period named kept in it
    ("Was he hopeful before June 2029?", EVER, date(2029, 6, 30)),
    ("What is his pet preference as of Mar 23, 2032?", EVER, date(2032, 3, 23)),
    ("How has his income changed by April 25, 2033?", EVER, date(2033, 4, 25)),
    ("What might he wear after Dec 20, 2031?", date(2031, 12, 20), NEVER),
    ("Which hobbies has she taken up since 2023?", date(2023, 1, 1), NEVER),
    ("Where did he live till 2030?", EVER, date(2030, 12, 31)),
    ("What did she own prior to  2021?", EVER, date(2021, 12, 31)),
    ("What did she save up to 2024?", EVER, date(2024, 12, 31)),
])
def test_a_questions_time_is_read_as_the_days_it_names(question: str, first: date, last: date) -> None:
    found = window(question, ASKED)
    assert found is not None and (found.first, found.last) == (first, last)


def test_a_time_relative_to_the_story_names_no_days() -> None:
    assert window("What did she do before she moved?", ASKED) is None
    assert window("What did she paint last May?", None) is None  # "last May" needs the day it is asked
    # year 0 is on no calendar: no window, not an error
    assert window("What happened in 0000?", ASKED) is None and window("A trip in May 0000?", None) is None


def test_the_period_named_ranks_first_then_the_days_nearest_it() -> None:
    said = {"jan": "2032-01-05", "mar20": "2032-03-20T09:00:00", "mar23": "2032-03-23T18:00:00",
            "mar23b": "2032-03-23", "apr": "2032-04-02", "undated": None}
    as_of = window("What is his pet preference as of Mar 23, 2032?", None)
    assert as_of is not None
    # given in dense order: the day named first (its two memories in that order), then back in time; April is
    # after the window and an undated memory has no day to be placed on
    order = ["jan", "apr", "mar23b", "undated", "mar20", "mar23"]
    assert said_within(order, said.get, as_of) == ["mar23b", "mar23", "mar20", "jan"]
    month = window("What did he say in March 2032?", None)
    assert month is not None
    assert said_within(order, said.get, month) == ["mar23b", "mar20", "mar23"]  # inside one period: dense order
