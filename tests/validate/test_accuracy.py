"""The accuracy phase on known answers: the question set (validate/arithmetic.py), how an answer is read
and judged (validate/checks.py), and the phase's requests (validate/phases.py) against stub servers and
the TEST ENGINE (not SGLang; its answers come from its own solver, testengine/arithmetic.py)."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from _gate_helpers import app_in_thread
from aiohttp import web

from validate import arithmetic
from validate import checks as judge
from validate.client import make_session
from validate.config import parse_config
from validate.phases import AccuracyAnswer, AccuracyResult, Measurer, accuracy_settings

FAST = ("--engine-decode-base-ms", "1", "--engine-decode-per-req-ms", "0")
EQUATION = re.compile(r"((?:\d+ [-+*/] )+\d+) = (\d+)")


# ----- the question set -----


def test_a_seed_names_one_exact_set_forever():
    """SHA-256 draws, not ``random``: these values are the set's identity (change one: bump VERSION)."""
    assert (arithmetic.NAME, arithmetic.VERSION) == ("sglang-deploy-arithmetic", 1)
    assert arithmetic.fingerprint(1, 200, 5) == "78a83db61732e242"
    assert arithmetic.fingerprint(1, 20, 5) == "4ee940c008f43ecd"
    assert arithmetic.fingerprint(2, 200, 5) == "9b0bc60114e8fdd9"
    assert arithmetic.fingerprint(1, 200, 4) != arithmetic.fingerprint(1, 200, 5)
    first = arithmetic.questions(1, 1)[0]
    assert first.text == (
        "Lucas runs 6 laps of 338 meters every day from Monday to Friday, and 238 meters on Saturday. How many "
        "meters does Lucas run in the whole week?"
    )
    assert first.answer == 10378 == 5 * 6 * 338 + 238
    assert arithmetic.questions(1, 5) == arithmetic.questions(1, 8)[:5]  # a longer set starts with the shorter


def test_every_worked_solution_computes_right_and_ends_on_its_answer():
    """Each step ``a op b = c`` of every solution is true arithmetic, and the last number is the answer:
    the expected answers are checked without a second copy of the templates."""
    qs = [*arithmetic.questions(3, 400), *(arithmetic.question(3, "shot", i) for i in range(16))]
    steps = 0
    for q in qs:
        for left, right in EQUATION.findall(q.solution):
            assert eval(left) == int(right), (q.solution, left, right)  # digits and + - * / only (the regex)
            steps += 1
        assert int(re.findall(r"\d+", q.solution)[-1]) == q.answer >= 0
        assert len(EQUATION.findall(q.solution)) >= 2, q.solution  # multi-step
    assert steps > 2 * len(qs)


def test_the_set_uses_every_template_and_the_examples_walk_through_them():
    endings = {q.text.rsplit(". ", 1)[-1].split()[:3][-1] for q in arithmetic.questions(1, 200)}
    assert len(endings) >= 6  # "stickers", "muffins", "dollars", "pages", "plants", "passengers", ...
    shots = [arithmetic.question(1, "shot", i) for i in range(8)]
    kinds = [q.text.split(" ")[:2] for q in shots]
    assert len({" ".join(k) for k in kinds}) >= 6 and shots[0].text != arithmetic.question(1, "ask", 0).text
    head = arithmetic.few_shot(1, 2)
    assert head.count("Question: ") == 2 and head.endswith("\n\n") and head.count("\n#### ") == 2
    prompt, answer = arithmetic.prompts(1, 1, 2)[0]
    assert prompt == head + "Question: " + arithmetic.questions(1, 1)[0].text + "\nAnswer:"
    assert answer == 10378 and arithmetic.prompts(1, 1, 0)[0][0].startswith("Question: Lucas runs")
    assert arithmetic.STOP == ("Question", "Assistant:", "<|separator|>")  # SGLang's few_shot_gsm8k stops


def test_draws_stay_in_their_bounds_and_differ_by_space_seed_and_index():
    d = arithmetic._Draws(1, "ask", 0)
    vals = [d.int(3, 5) for _ in range(300)]
    assert set(vals) == {3, 4, 5} and d.n == 300
    assert [arithmetic._Draws(1, "ask", 0).int(0, 10**9) for _ in range(2)] == [
        arithmetic._Draws(1, "ask", 0).int(0, 10**9)
    ] * 2
    keys = {arithmetic._Draws(s, sp, i).int(0, 10**12) for s in (1, 2) for sp in ("ask", "shot") for i in (0, 1)}
    assert len(keys) == 8
    assert arithmetic._Draws(1, "ask", 0).pick(("a",)) == "a"


# ----- reading and judging answers -----


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (" She has 12 + 3 = 15 apples.\n#### 15", 15),
        ("The answer is 1,234.", 1234),  # commas removed, as SGLang does
        ("-5", 5),  # SGLang reads digits: no sign
        ("3.75", 75),  # ... and no decimals (the set's answers are whole numbers)
        ("no number at all", None),
        ("", None),
        ("7 then 8", 8),  # the last number
    ],
)
def test_an_answer_is_read_as_sglangs_few_shot_gsm8k_reads_it(text, value):
    assert judge.answer_value(text) == value


def _result(texts: list[str], expected: list[int], failures: dict[int, str] | None = None, **kw) -> AccuracyResult:
    answers = [AccuracyAnswer(i, e, text=t) for i, (t, e) in enumerate(zip(texts, expected, strict=True))]
    for i, why in (failures or {}).items():
        answers[i].text, answers[i].failure, answers[i].error = "", why, f"{why} error"
    settings = {"set": "sglang-deploy-arithmetic", "version": 1, "seed": 1, "shots": 5}
    return AccuracyResult(settings, answers, 1.0, 30.0, **kw)


def test_grading_counts_right_wrong_invalid_and_failed_answers():
    res = _result(["#### 4", "#### 5", "none", "#### 9", "x", *["#### 1"] * 6], [4, 4, 3, 9, 0, *[2] * 6], {4: "abort"})
    g = judge.grade(res)
    assert (g.questions, g.correct, g.invalid, g.failed) == (11, 2, 2, 1)
    assert g.failure_reasons == {"abort": 1} and g.first_error == "abort error"
    assert g.accuracy == pytest.approx(2 / 11) and g.invalid_rate == pytest.approx(2 / 11)
    assert len(g.wrong) == judge.SHOWN_WRONG == 5  # the first five wrong answers, for the operator
    assert g.wrong[0] == {"question": 1, "expected": 4, "got": 5, "answer": "#### 5"}
    assert g.wrong[1] == {"question": 2, "expected": 3, "got": None, "answer": "none"}
    d = g.to_dict()
    assert d["accuracy"] == 0.1818 and d["invalid_rate"] == 0.1818 and d["failed"] == 1
    empty = judge.grade(_result([], []))
    assert (empty.accuracy, empty.invalid_rate) == (0.0, 0.0)


def test_a_drop_is_judged_against_binomial_noise():
    drop, allowed, se = judge.accuracy_drop(200, 200, 199, 200, 3.0)
    assert drop == pytest.approx(0.005) and se == pytest.approx(0.00854, abs=1e-5) and allowed == pytest.approx(3 * se)
    assert drop <= allowed  # one wrong answer of 200 after 200 of 200 is no regression
    drop, allowed, se = judge.accuracy_drop(190, 200, 170, 200, 3.0)
    assert drop == pytest.approx(0.1) and allowed == pytest.approx(0.0899, abs=1e-4) and drop > allowed
    assert judge.accuracy_drop(10, 20, 15, 20, 2.0)[0] == pytest.approx(-0.25)  # better than the reference
    assert judge.accuracy_drop(0, 0, 5, 10, 3.0)[0] == 0.0


CFG = parse_config({"accuracy": {"min_accuracy": 0.9, "max_invalid": 0.05}})


def test_the_floors_and_the_reference_read_as_figures():
    ok = _result(["#### 3"] * 20, [3] * 20)
    checks = judge.accuracy(ok, judge.grade(ok), CFG, group=False)
    assert [(c.name, c.passed, c.measured, c.required, c.op) for c in checks] == [
        ("accuracy.failed_requests", True, 0, 0, "<="),
        ("accuracy.score", True, 1.0, 0.9, ">="),
        ("accuracy.invalid", True, 0.0, 0.05, "<="),
    ]
    assert (
        checks[1].message
        == "accuracy 1.000 (20 of 20 right on sglang-deploy-arithmetic v1, seed 1, 5-shot; required at least 0.9)"
    )
    wrong = _result(["#### 4"] * 18 + ["dunno"] * 2, [3] * 20)
    checks = judge.accuracy(wrong, judge.grade(wrong), CFG, group=False)
    assert [c.passed for c in checks] == [True, False, False]
    assert checks[1].message == (
        "FAILED accuracy 0.000 (0 of 20 right on sglang-deploy-arithmetic v1, seed 1, 5-shot; required at least "
        "0.9); e.g. question 0: expected 3, read 4 from '#### 4'"
    )
    assert checks[2].message == (
        "FAILED invalid answers 0.100 (2 of 20 without a number or without an answer; allowed at most 0.05)"
    )
    edge = _result(["#### 3"] * 18 + ["#### 4", "x"], [3] * 20)  # 0.9 and 0.05 exactly: pass
    assert all(c.passed for c in judge.accuracy(edge, judge.grade(edge), CFG, group=False))
    off = parse_config({"accuracy": {"min_accuracy": None, "max_invalid": None}})
    assert [c.name for c in judge.accuracy(wrong, judge.grade(wrong), off, group=False)] == ["accuracy.failed_requests"]
    late = _result(["#### 3"] * 19 + [""], [3] * 20, {19: "timeout"}, timed_out=True)
    first = judge.accuracy(late, judge.grade(late), CFG, group=False)[0]
    assert not first.passed and first.message == (
        "FAILED accuracy: 1 of 20 requests failed (1 not finished within the 30s deadline or failed) (allowed 0); "
        "by reason: timeout x1; first error: timeout error"
    )


def test_the_group_reference_is_recorded_compared_or_failed_naming_the_way_out():
    res = _result(["#### 3"] * 19 + ["#### 1"], [3] * 20)
    g = judge.grade(res)
    rec = judge.accuracy(res, g, CFG, group=True)[-1]
    assert (rec.name, rec.passed, rec.measured) == ("accuracy.reference", True, "recorded")
    assert rec.message.startswith("recorded: accuracy 0.950 on sglang-deploy-arithmetic v1, seed 1, 5-shot (the group")
    res.reference, res.reference_from = {"correct": 20, "questions": 20}, "T0"
    same = judge.accuracy(res, g, CFG, group=True)[-1]
    assert same.passed and same.message == (
        "accuracy 0.950 (19 of 20) vs the group's reference 1.000 (20 of 20, from T0): drop 0.050, allowed 0.227 = "
        "3 x binomial standard error 0.076"
    )
    bad = _result(["#### 3"] * 120 + ["#### 1"] * 80, [3] * 200, reference={"correct": 195, "questions": 200})
    c = judge.accuracy(bad, judge.grade(bad), CFG, group=True)[-1]
    assert (
        not c.passed and (c.measured, c.required) == (0.375, 0.1095) and c.message.startswith("FAILED accuracy 0.600")
    )
    res.reference, res.not_compared = None, "accuracy settings changed since the reference (from T0): seed: 1 -> 2"
    nc = judge.accuracy(res, g, CFG, group=True)[-1]
    assert (nc.passed, nc.measured) == (False, "not compared")
    assert nc.message == (
        "FAILED the accuracy was not compared with the group's reference: accuracy settings changed since the "
        "reference (from T0): seed: 1 -> 2; " + judge.ACCEPT
    )
    # a promotion accepts what could not be compared, never a drop that was measured
    accepted = judge.promoted(nc)
    assert accepted.passed and accepted.message.startswith(
        "accepted on purpose (--promote-baseline replaces the group's reference): the accuracy was not compared"
    )
    assert judge.promoted(c) is c and judge.promoted(same) is same


# ----- the phase's requests -----


@pytest.fixture
def stub():
    """/generate answering each question right (or as the test says), recording bodies and the most in flight."""
    state = {"bodies": [], "in_flight": 0, "most": 0, "delay": 0.02, "answer": None}

    async def generate(request):
        body = await request.json()
        state["bodies"].append(body)
        state["in_flight"] += 1
        state["most"] = max(state["most"], state["in_flight"])
        try:
            await asyncio.sleep(state["delay"])
            if state["answer"] is not None:
                status, payload = state["answer"](body)
                return web.Response(status=status, text=json.dumps(payload), content_type="application/json")
            right = dict(arithmetic.prompts(1, 200, 5))[body["text"]]
            meta = {"finish_reason": {"type": "stop", "matched": "Question"}, "completion_tokens": 3}
            answer = {"text": f" so {right}.\n#### {right}", "output_ids": [1, 2, 3], "meta_info": meta}
            return web.json_response(answer)
        finally:
            state["in_flight"] -= 1

    app = web.Application()
    app.router.add_post("/generate", generate)
    with app_in_thread(app) as base:
        yield base, state


def _accuracy(url: str, cfg: dict, said: list[str] | None = None) -> AccuracyResult:
    async def go():
        async with make_session() as s:
            config = parse_config({"progress_interval_s": 0.1, "accuracy": cfg})
            return await Measurer(s, url, config, (said if said is not None else []).append).accuracy()

    return asyncio.run(go())


def test_the_phase_asks_every_question_greedily_with_sglangs_stops_a_few_at_a_time(stub):
    url, state = stub
    said: list[str] = []
    res = _accuracy(url, {"questions": 12, "concurrency": 3, "max_new_tokens": 99}, said)
    assert len(state["bodies"]) == 12 and state["most"] == 3  # never more than the concurrency in flight
    assert sorted(b["text"] for b in state["bodies"]) == sorted(p for p, _ in arithmetic.prompts(1, 12, 5))
    assert {json.dumps(b["sampling_params"], sort_keys=True) for b in state["bodies"]} == {
        json.dumps(
            {"temperature": 0.0, "max_new_tokens": 99, "stop": ["Question", "Assistant:", "<|separator|>"]},
            sort_keys=True,
        )
    }
    assert all(set(b) == {"text", "sampling_params"} for b in state["bodies"])  # raw prompt, not streamed
    g = judge.grade(res)
    assert (g.correct, g.invalid, g.failed) == (12, 0, 0) and not res.timed_out and res.deadline_s == 300
    assert [a.output_tokens for a in res.answers] == [3] * 12 and {a.finish for a in res.answers} == {"stop"}
    assert res.settings == accuracy_settings(
        parse_config({"accuracy": {"questions": 12, "max_new_tokens": 99}}).accuracy
    )
    assert res.settings["fingerprint"] == arithmetic.fingerprint(1, 12, 5)
    assert said[0] == (
        "accuracy: 12 questions (sglang-deploy-arithmetic v1, seed 1, 5-shot), 3 at a time, greedy /generate, "
        "deadline 300s"
    )
    assert all(re.fullmatch(r"accuracy: \d+ of 12 answered after \d+s", line) for line in said[1:])
    assert res.to_dict()["output_tokens"] == 36 and 0 < res.seconds < 10


def test_answers_the_server_gave_up_on_are_failures_by_reason(stub):
    url, state = stub
    shapes = iter(
        [
            (500, {"error": "boom"}),
            (200, {"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "queue full"}}}),
            (200, {"text": "", "meta_info": {"finish_reason": {"type": "stop", "matched": "NaN happened"}}}),
            (200, ["not", "an", "answer"]),
            (200, {"text": "#### 1", "meta_info": {"finish_reason": {"type": "length"}}}),  # no ids: not counted
        ]
    )
    state["delay"], state["answer"] = 0, lambda body: next(shapes)
    res = _accuracy(url, {"questions": 5, "concurrency": 1})
    assert [a.failure for a in res.answers] == ["http_error", "abort", "nan", "bad_payload", ""]
    assert res.answers[1].error == "aborted by the server: queue full"
    assert res.answers[4].output_tokens is None and res.answers[4].finish == "length"
    assert judge.grade(res).failure_reasons == {"http_error": 1, "abort": 1, "nan": 1, "bad_payload": 1}


def test_a_phase_past_its_deadline_ends_there_and_says_so(stub):
    url, state = stub
    state["delay"] = 30
    t0 = time.monotonic()
    res = _accuracy(url, {"questions": 6, "concurrency": 2, "timeout_s": 0.5})
    assert time.monotonic() - t0 < 3 and res.timed_out
    assert {(a.failure, a.error) for a in res.answers} == {("timeout", "no answer within accuracy.timeout_s = 0.5s")}


def test_the_test_engine_answers_right_and_its_fault_answers_fluently_wrong(engine_factory):
    honest = _accuracy(engine_factory(*FAST).url, {"questions": 16, "concurrency": 16})
    assert judge.grade(honest).correct == 16
    assert honest.answers[0].text == " Working through the question one step at a time gives 10378.\n#### 10378\n\n"
    wrong = _accuracy(engine_factory(*FAST, "--engine-fault", "shifted_digits").url, {"questions": 16})
    g = judge.grade(wrong)
    assert (g.correct, g.invalid, g.failed) == (0, 0, 0)  # fluent, well-formed, every number wrong
    assert wrong.answers[0].text == " Working through the question one step at a time gives 21489.\n#### 21489\n\n"
    assert [a.output_tokens for a in wrong.answers] == [a.output_tokens for a in honest.answers]  # counts untouched
