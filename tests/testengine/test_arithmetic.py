"""The TEST ENGINE's answers to the gate's arithmetic questions: its own solver (testengine/arithmetic.py)
against the generator's answers (validate/arithmetic.py), and the /generate route that serves them, with
SGLang's stop strings and the shifted_digits fault."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from testengine import arithmetic as stand_in
from validate import arithmetic as questions

STOP = list(questions.STOP)


def test_the_stand_ins_solver_agrees_with_the_generator_on_every_question():
    """Two implementations of one question set: a template or an answer one of them gets wrong fails here."""
    n = 0
    for seed in range(1, 21):
        for q in (*questions.questions(seed, 300), *(questions.question(seed, "shot", i) for i in range(8))):
            assert stand_in.solve(q.text) == q.answer, (seed, q.text)
            n += 1
    assert n == 20 * 308


def test_a_reply_answers_the_last_question_and_goes_on_as_a_base_model_would():
    prompt, answer = questions.prompts(7, 1, 3)[0]
    text = stand_in.reply(prompt)
    assert text == (
        f" Working through the question one step at a time gives {answer}.\n#### {answer}\n\n"
        "Question: and so on, as the examples before it went."
    )
    assert int(re.findall(r"\d+", text.split("Question")[0])[-1]) == answer
    assert stand_in.reply("Count from 1 to 100") is None  # not a few-shot question: filler as before
    assert stand_in.reply("Question: What colour is the sky?\nAnswer:") == (
        " I cannot work this one out from what the question says.\n\n"
        "Question: and so on, as the examples before it went."
    )
    assert stand_in.solve("A book has 3 pages left to read, pages are left") is None  # too few numbers


def test_pieces_stops_and_the_fault():
    parts = stand_in.pieces(" gives 12.\n#### 12\n\nQuestion: next")
    assert parts == [" gives", " 12.", "\n####", " 12", "\n\nQuestion:", " next"]
    assert stand_in.stop_cut(parts, STOP) == ([" gives", " 12.", "\n####", " 12", "\n\n"], "Question")
    assert stand_in.stop_cut(parts, ["nowhere"]) == (parts, None)
    assert stand_in.stop_cut(parts, ["next", "12"]) == ([" gives", " "], "12")  # the first one in the text
    assert stand_in.stop_cut(parts, ["", "gives"]) == ([" "], "gives")
    assert stand_in.shift_digits("gives 1,239.\n#### 1239 (x0)") == "gives 2,340.\n#### 2340 (x1)"


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("fault", ["", "shifted_digits"])
def test_generate_answers_a_question_and_ends_at_the_stop_string(engine_factory, fault):
    eng = engine_factory(*(["--engine-fault", fault] if fault else []))
    prompt, answer = questions.prompts(1, 1, 5)[0]
    params = {"temperature": 0, "max_new_tokens": 64, "stop": STOP}
    got = _post(eng.url + "/generate", {"text": prompt, "sampling_params": params})
    meta = got["meta_info"]
    shown = stand_in.shift_digits(str(answer)) if fault else str(answer)
    assert got["text"] == f" Working through the question one step at a time gives {shown}.\n#### {shown}\n\n"
    assert meta["finish_reason"] == {"type": "stop", "matched": "Question"}
    assert len(got["output_ids"]) == meta["completion_tokens"] == 14  # the stop's token is generated, its text cut
    # without the stop string it runs on to max_new_tokens, as a base model would
    long = _post(eng.url + "/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 30}})
    assert long["meta_info"]["finish_reason"] == {"type": "length", "length": 30} and len(long["output_ids"]) == 30
    assert long["text"].startswith(got["text"] + "Question: and so on")
    # fewer tokens allowed than the answer needs: cut by length before the stop
    short = _post(eng.url + "/generate", {"text": prompt, "sampling_params": {**params, "max_new_tokens": 5}})
    assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert short["text"] == " Working through the question one"


def test_the_fault_changes_digits_and_nothing_else(engine_factory):
    """The proxy kind of fault: ids, counts and log-probabilities are those of the honest engine."""
    honest, shifted = engine_factory(), engine_factory("--engine-fault", "shifted_digits")
    body = {"text": "Count from 1 to 100", "sampling_params": {"max_new_tokens": 12}, "return_logprob": True}
    a, b = _post(honest.url + "/generate", body), _post(shifted.url + "/generate", body)
    assert a["text"].startswith("1, 2, 3,") and b["text"] == stand_in.shift_digits(a["text"])
    assert b["text"].startswith("2, 3, 4,")
    assert a["output_ids"] == b["output_ids"]
    assert a["meta_info"]["output_token_logprobs"] == b["meta_info"]["output_token_logprobs"]
    with urllib.request.urlopen(shifted.url + "/get_server_info", timeout=10) as r:
        assert "shifted_digits" in json.loads(r.read())["test_engine_info"]["faults"]
