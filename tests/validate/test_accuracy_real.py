"""The accuracy check on what real SGLang answered (tests/fixtures/sglang-0.5.17-h100-2026-12-07):
a random-weight model, whose answers are noise, must fail GLM-5's floor, the first host of a group
included; and the request the phase sends today must be the one that server was asked."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from validate import arithmetic
from validate import checks as judge
from validate.config import parse_config
from validate.phases import AccuracyAnswer, AccuracyResult

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "tests" / "fixtures" / "sglang-0.5.17-h100-2026-12-07"


def _glm5_config():
    doc = yaml.safe_load((REPO / "inventory/example/group_vars/all/main.yml").read_text())
    return parse_config({"accuracy": doc["sglang_gate_config"]["accuracy"]})


def test_the_recorded_request_is_the_one_the_phase_sends_and_its_answer_reads_wrong():
    rec = json.loads((RECORDED / "accuracy_answer.json").read_text())
    prompt, expected = arithmetic.prompts(1, 1, 5)[0]
    assert rec["request"]["text"] == prompt
    assert rec["expected"] == expected == 10378
    assert rec["request"]["sampling_params"]["temperature"] == 0.0
    # the number the gate reads from the server's own bytes, and so a wrong answer, not an invalid one
    assert judge.answer_value(rec["response"]["text"]) == 139


def test_real_noise_fails_glm5s_floor_on_the_first_host_of_a_group():
    rec = json.loads((RECORDED / "accuracy_glm5_floor.json").read_text())
    wrong = rec["accuracy"]["wrong"]
    assert len(wrong) == 5
    whole = json.loads((RECORDED / "accuracy_answer.json").read_text())
    # the report shows the first wrong answers cut short for the operator; the one recorded whole
    # joins them, so at least one answer is graded from the server's complete bytes
    answers = [AccuracyAnswer(w["question"], w["expected"], text=w["answer"]) for w in wrong]
    answers.append(AccuracyAnswer(0, whole["expected"], text=whole["response"]["text"]))
    res = AccuracyResult(rec["accuracy"]["settings"], answers, 2.15, 300.0)
    grade = judge.grade(res)
    assert (grade.questions, grade.correct) == (6, 0)
    by_name = {c.name: c for c in judge.accuracy(res, grade, _glm5_config(), group=True)}
    assert not by_name["accuracy.score"].passed
    assert by_name["accuracy.score"].required == 0.9
    assert by_name["accuracy.score"].message.startswith("FAILED accuracy 0.000 (0 of 6 right")
    # what the gate on the GPU said, at 200 questions: wrong, not invalid (the noise holds numbers)
    assert rec["verdict"] == "fail" and rec["failed_checks"] == ["accuracy.score"]
    assert (rec["accuracy"]["correct"], rec["accuracy"]["invalid"], rec["accuracy"]["questions"]) == (0, 0, 200)
