"""The accuracy phase's questions: a seeded set of multi-step arithmetic word problems, exact answers.

Why the project writes its own: the gate must judge accuracy on every host with nothing
downloaded at run time (hosts are air-gapped) and no data set whose licence or copy the
project would have to carry. Grade-school word problems in SGLang's few-shot GSM8K shape
(``sglang.test.few_shot_gsm8k``: ``Question: ...\\nAnswer: ...`` examples, the last number of
the answer is the prediction) are easy to generate with exact integer answers; a healthy model
of GLM-5's class solves them, random weights and a kernel that writes wrong digits do not.

It is **not GSM8K**: two to four steps of +, -, x and exact division on small integers, one
of eight sentence templates each. Published GSM8K scores are a lower bound for it, not its
expected value (validate/README.md, "Accuracy").

Every draw comes from SHA-256 of (set, version, space, seed, index, draw number), never
from ``random`` (whose integer draws may change between Python versions), so a seed names
the same questions on every machine forever; :func:`fingerprint` hashes a whole set, and
the gate stores it with the group's reference, so a changed generator cannot be compared
with an old reference by mistake. Change a template or a range: bump :data:`VERSION`.

The test engine answers these questions with its own solver (testengine/arithmetic.py): two
independent implementations, which tests/testengine keeps in agreement.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

NAME = "sglang-deploy-arithmetic"
VERSION = 1
# SGLang's few_shot_gsm8k stops generation at these (sgl.gen(stop=...)).
STOP = ("Question", "Assistant:", "<|separator|>")
PEOPLE = ("Maria", "Tom", "Aisha", "Kenji", "Lena", "Omar", "Sofia", "David", "Priya", "Lucas", "Mei", "Noah")
THINGS = ("stickers", "marbles", "cards", "stamps", "shells", "beads")
BAKES = ("muffins", "rolls", "cookies", "buns")
BUYS = ("bike helmet", "board game", "pair of shoes", "backpack")


@dataclass(frozen=True)
class Question:
    """One problem: the text asked, a worked solution (for the few-shot examples) and the answer."""

    text: str
    solution: str
    answer: int


class _Draws:
    """Integers drawn from SHA-256: the same (seed, space, index) gives the same numbers everywhere."""

    def __init__(self, seed: int, space: str, index: int) -> None:
        self.key = f"{NAME}/{VERSION}/{space}/{seed}/{index}"
        self.n = 0

    def int(self, lo: int, hi: int) -> int:
        """A whole number in [lo, hi]."""
        self.n += 1
        digest = hashlib.sha256(f"{self.key}/{self.n}".encode()).digest()
        return lo + int.from_bytes(digest[:8], "big") % (hi - lo + 1)

    def pick(self, items: tuple[str, ...]) -> str:
        return items[self.int(0, len(items) - 1)]


def _packs(d: _Draws) -> Question:
    who, thing = d.pick(PEOPLE), d.pick(THINGS)
    a, b, c = d.int(3, 40), d.int(2, 9), d.int(2, 12)
    got = b * c
    d_ = d.int(1, a + got)
    ans = a + got - d_
    text = (
        f"{who} has {a} {thing}. {who} buys {b} packs with {c} {thing} in each pack and then gives "
        f"{d_} {thing} to a friend. How many {thing} does {who} have now?"
    )
    sol = (
        f"{who} buys {b} * {c} = {got} {thing}. Then {who} has {a} + {got} = {a + got} {thing}. "
        f"After giving {d_} away, {who} has {a + got} - {d_} = {ans} {thing}."
    )
    return Question(text, sol, ans)


def _bakery(d: _Draws) -> Question:
    bake = d.pick(BAKES)
    a, b, shops, each = d.int(2, 9), d.int(4, 12), d.int(2, 6), d.int(1, 12)
    while a * b - shops * each < 1:  # at least one sold in the morning
        each = d.int(1, 12)
    sold = a * b - shops * each
    text = (
        f"A bakery bakes {a} trays of {b} {bake}. It sells {sold} {bake} in the morning and shares the rest "
        f"equally among {shops} shops. How many {bake} does each shop get?"
    )
    sol = (
        f"The bakery bakes {a} * {b} = {a * b} {bake}. After the morning {a * b} - {sold} = {shops * each} are left. "
        f"Each shop gets {shops * each} / {shops} = {each} {bake}."
    )
    return Question(text, sol, each)


def _savings(d: _Draws) -> Question:
    who, item = d.pick(PEOPLE), d.pick(BUYS)
    a, b, c = d.int(2, 25), d.int(2, 10), d.int(5, 50)
    spent = d.int(1, a * b + c)
    ans = a * b + c - spent
    text = (
        f"{who} saves {a} dollars every week for {b} weeks. Then {who}'s aunt gives {who} {c} dollars, and "
        f"{who} spends {spent} dollars on a {item}. How many dollars does {who} have left?"
    )
    sol = (
        f"{who} saves {a} * {b} = {a * b} dollars. With the gift {who} has {a * b} + {c} = {a * b + c} dollars. "
        f"After buying the {item}, {who} has {a * b + c} - {spent} = {ans} dollars."
    )
    return Question(text, sol, ans)


def _book(d: _Draws) -> Question:
    who = d.pick(PEOPLE)
    per_day, days, extra, left = d.int(5, 30), d.int(2, 9), d.int(1, 40), d.int(0, 150)
    pages = per_day * days + extra + left
    text = (
        f"A book has {pages} pages. {who} reads {per_day} pages every day for {days} days and then {extra} "
        f"more pages on the next day. How many pages are left to read?"
    )
    sol = (
        f"{who} reads {per_day} * {days} = {per_day * days} pages, then {per_day * days} + {extra} = "
        f"{per_day * days + extra} pages in all. Left to read: {pages} - {per_day * days + extra} = {left} pages."
    )
    return Question(text, sol, left)


def _garden(d: _Draws) -> Question:
    who = d.pick(PEOPLE)
    rows, per_row = d.int(2, 12), d.int(3, 15)
    died = d.int(1, rows * per_row - 1)
    planted = d.int(1, 30)
    if (rows * per_row - died + planted) % 2:
        planted += 1
    total = rows * per_row - died + planted
    text = (
        f"A garden has {rows} rows with {per_row} plants in each row. {died} plants die, and {who} plants "
        f"{planted} new ones. Then {who} moves half of the plants to another garden. How many plants stay in "
        f"the first garden?"
    )
    sol = (
        f"The garden starts with {rows} * {per_row} = {rows * per_row} plants. After {died} die there are "
        f"{rows * per_row} - {died} = {rows * per_row - died}, and with the new ones {rows * per_row - died} + "
        f"{planted} = {total}. Half of them stay: {total} / 2 = {total // 2} plants."
    )
    return Question(text, sol, total // 2)


def _bus(d: _Draws) -> Question:
    start = d.int(5, 60)
    off, on = d.int(0, start), d.int(1, 30)
    mid = start - off + on
    text = (
        f"A bus leaves the station with {start} passengers. At the first stop {off} passengers get off and {on} "
        f"get on. At the second stop the number of passengers doubles. How many passengers are on the bus now?"
    )
    sol = (
        f"After the first stop there are {start} - {off} + {on} = {mid} passengers. At the second stop the number "
        f"doubles: {mid} * 2 = {2 * mid} passengers."
    )
    return Question(text, sol, 2 * mid)


def _change(d: _Draws) -> Question:
    who = d.pick(PEOPLE)
    price, books, pens, pen_price = d.int(2, 9), d.int(2, 8), d.int(1, 6), d.int(1, 4)
    cost = price * books + pens * pen_price
    paid = (cost // 10 + 1 + d.int(0, 3)) * 10
    text = (
        f"Notebooks cost {price} dollars each. {who} buys {books} notebooks and {pens} pens that cost {pen_price} "
        f"dollars each, and pays with {paid} dollars. How much change does {who} get, in dollars?"
    )
    sol = (
        f"The notebooks cost {price} * {books} = {price * books} dollars and the pens {pens} * {pen_price} = "
        f"{pens * pen_price} dollars, {price * books} + {pens * pen_price} = {cost} dollars in all. "
        f"The change is {paid} - {cost} = {paid - cost} dollars."
    )
    return Question(text, sol, paid - cost)


def _laps(d: _Draws) -> Question:
    who = d.pick(PEOPLE)
    laps, meters, saturday = d.int(2, 10), d.int(100, 400), d.int(100, 3000)
    week = 5 * laps * meters
    text = (
        f"{who} runs {laps} laps of {meters} meters every day from Monday to Friday, and {saturday} meters on "
        f"Saturday. How many meters does {who} run in the whole week?"
    )
    sol = (
        f"Each weekday {who} runs {laps} * {meters} = {laps * meters} meters, so {laps * meters} * 5 = {week} "
        f"meters from Monday to Friday. With Saturday that is {week} + {saturday} = {week + saturday} meters."
    )
    return Question(text, sol, week + saturday)


TEMPLATES: tuple[Callable[[_Draws], Question], ...] = (
    _packs,
    _bakery,
    _savings,
    _book,
    _garden,
    _bus,
    _change,
    _laps,
)


def question(seed: int, space: str, index: int) -> Question:
    """Question ``index`` of ``space`` ("ask": the questions asked, "shot": the few-shot examples)."""
    d = _Draws(seed, space, index)
    # the examples walk through the templates in turn; the asked questions draw theirs
    t = index % len(TEMPLATES) if space == "shot" else d.int(0, len(TEMPLATES) - 1)
    return TEMPLATES[t](d)


def questions(seed: int, n: int) -> list[Question]:
    """The ``n`` questions asked for ``seed``."""
    return [question(seed, "ask", i) for i in range(n)]


def example(q: Question, with_answer: bool) -> str:
    """One question in few_shot_gsm8k's shape; a worked answer ends with ``#### N`` as GSM8K's do."""
    head = f"Question: {q.text}\nAnswer:"
    return f"{head} {q.solution}\n#### {q.answer}" if with_answer else head


def few_shot(seed: int, shots: int) -> str:
    """The examples before every question: ``shots`` worked problems drawn apart from the asked ones."""
    return "".join(example(question(seed, "shot", i), True) + "\n\n" for i in range(shots))


def prompts(seed: int, n: int, shots: int) -> list[tuple[str, int]]:
    """(prompt, exact answer) for each of the ``n`` questions: the examples, then the question."""
    head = few_shot(seed, shots)
    return [(head + example(q, False), q.answer) for q in questions(seed, n)]


def fingerprint(seed: int, n: int, shots: int) -> str:
    """16 hex digits of SHA-256 over every prompt and answer: one value names one exact set."""
    h = hashlib.sha256()
    for prompt, answer in prompts(seed, n, shots):
        h.update(f"{prompt}\x00{answer}\x00".encode())
    return h.hexdigest()[:16]
