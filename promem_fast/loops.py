"""Replies that repeat themselves.

At temperature 0 a small model that writes the same words twice in a row (a list item, a clause of one
sentence) nearly always goes on writing them until its token budget runs out: on the CPU default's demo
sessions, every reply that repeated a span of 64 characters or more back to back was still repeating it
when it was cut, and every continuation of such a reply ("already listed: ...; list what is missing")
repeated it again. The repeated copies add nothing (lists are deduplicated), so the llama.cpp backend
stops decoding once a reply loops (finish reason ``"loop"``), and the pipeline neither continues such a
reply nor asks it again with a larger budget; what was complete before the loop is kept.

A loop is a span at the end of the text made of one block repeated back to back: the block is
:data:`MIN_PERIOD` to :data:`MAX_PERIOD` characters long and its copies cover at least :data:`MIN_SPAN`
characters. Well-formed JSON answers never hold 64 characters twice in a row except as a repeated item.
"""

from __future__ import annotations

MIN_PERIOD = 8
MAX_PERIOD = 400
MIN_SPAN = 64


def looping(text: str | bytes) -> bool:
    """Whether ``text`` ends in a block repeated back to back over at least :data:`MIN_SPAN` characters
    (bytes work alike: the llama.cpp backend checks the bytes generated so far, token by token)."""
    n = len(text)
    last = text[n - 1:]
    for period in range(MIN_PERIOD, min(MAX_PERIOD, n // 2) + 1):
        if text[n - 1 - period:n - period] != last or text[n - period:] != text[n - 2 * period:n - period]:
            continue
        copies = 2
        block = text[n - period:]
        while copies * period < MIN_SPAN and (copies + 1) * period <= n \
                and text[n - (copies + 1) * period:n - copies * period] == block:
            copies += 1
        if copies * period >= MIN_SPAN:
            return True
    return False
