"""The TEST ENGINE's answers to the gate's arithmetic questions (validate/arithmetic.py, version 1).

This is the stand-in's "model", not a model: it finds the last ``Question: ...\\nAnswer:`` of a
raw prompt (SGLang's few-shot GSM8K shape), recognises which of the question set's eight
sentence templates it is by one phrase, reads the numbers in the order the template writes
them and computes the answer, then writes it the way the few-shot examples do (``#### N``)
and goes on to the next ``Question:`` as a base model would, so the gate's stop strings
end it. A prompt it does not recognise gets a fluent answer with no number in it.

It shares no code with validate/ (which generates the questions and their answers): two
implementations, so an expected answer the generator gets wrong shows up as a wrong answer
of an honest engine (tests/testengine/test_arithmetic.py keeps them in agreement).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# (a phrase only that template writes, the answer from its numbers in the order written)
RULES: tuple[tuple[str, Callable[[list[int]], int]], ...] = (
    ("packs with", lambda n: n[0] + n[1] * n[2] - n[3]),
    ("equally among", lambda n: (n[0] * n[1] - n[2]) // n[3]),
    ("saves", lambda n: n[0] * n[1] + n[2] - n[3]),
    ("pages are left", lambda n: n[0] - n[1] * n[2] - n[3]),
    ("moves half", lambda n: (n[0] * n[1] - n[2] + n[3]) // 2),
    ("doubles", lambda n: 2 * (n[0] - n[1] + n[2])),
    ("change", lambda n: n[4] - n[0] * n[1] - n[2] * n[3]),
    ("laps of", lambda n: 5 * n[0] * n[1] + n[2]),
)
_QUESTION = re.compile(r"Question: (.*)\nAnswer:\s*$", re.S)
_PIECE = re.compile(r"\s*\S+")
_SHIFT = str.maketrans("0123456789", "1234567890")


def solve(question: str) -> int | None:
    """The answer to one question of the set, or None when no template matches."""
    numbers = [int(x) for x in re.findall(r"\d+", question)]
    for phrase, rule in RULES:
        if phrase in question:
            try:
                return rule(numbers)
            except IndexError:
                return None
    return None


def reply(prompt: str) -> str | None:
    """What the engine writes after a few-shot arithmetic prompt (None: not such a prompt)."""
    m = _QUESTION.search(prompt)
    if m is None:
        return None
    question = m.group(1).rsplit("Question: ", 1)[-1]
    answer = solve(question)
    if answer is None:
        body = " I cannot work this one out from what the question says."
    else:
        body = f" Working through the question one step at a time gives {answer}.\n#### {answer}"
    return body + "\n\nQuestion: and so on, as the examples before it went."


def pieces(text: str) -> list[str]:
    """The reply cut into tokens: one word with the blanks before it each."""
    return _PIECE.findall(text)


def stop_cut(parts: list[str], stops: list[str]) -> tuple[list[str], str | None]:
    """The tokens up to the first stop string, that string trimmed (as SGLang returns it), and which
    one matched; ``(parts, None)`` when none occurs."""
    text = "".join(parts)
    found = [(text.find(s), s) for s in stops if s and s in text]
    if not found:
        return parts, None
    at, stop = min(found)
    out: list[str] = []
    pos = 0
    for p in parts:
        if pos + len(p) > at:
            out.append(p[: at - pos])
            break
        out.append(p)
        pos += len(p)
    return out, stop


def shift_digits(text: str) -> str:
    """The ``shifted_digits`` fault: every digit one up (9 -> 0): fluent, well-formed and wrong."""
    return text.translate(_SHIFT)
