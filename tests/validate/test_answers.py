"""The answer rule (validate/checks.py) on what a real SGLang server streamed, and on garbage shapes;
the reference-answers phase (validate/phases.py) against the test engine and stub servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _gate_helpers import app_in_thread

from validate.checks import AnswerRule, degenerate, longest_run
from validate.client import GenerateError
from validate.metrics import Spread
from validate.phases import ReferenceResult, ScoredAnswer, reference_prompts

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200-2026-12-03"
PROOF = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200-2026-12-04"
RULE = AnswerRule(min_tokens=8, max_repeat_fraction=0.5)  # 8: the recorded answers are 12 tokens long


def _events(name: str) -> list[dict]:
    raw = (FIX / name).read_text()
    return [json.loads(e[len("data: ") :]) for e in raw.split("\n\n") if e.startswith("data: {")]


def test_real_sglang_answers_are_answers():
    """Random-weight Llama on an H200 (SGLang 0.5.17): varied text, varied ids: not degenerate."""
    for name in ("generate_input_ids.sse", "generate_text.sse"):
        last = _events(name)[-1]
        ids, text = last["output_ids"], last["text"]
        assert len(ids) == 12 and last["meta_info"]["completion_tokens"] == 12
        assert degenerate(RULE, len(ids), text, ids) == ""
    pieces = [
        (c["delta"].get("content") or "")
        for e in _events("chat_completions.sse")
        for c in e.get("choices") or []
        if c["delta"].get("content")
    ]
    assert len(pieces) >= 8 and degenerate(RULE, len(pieces), "".join(pieces), None, pieces) == ""


@pytest.mark.parametrize(
    ("tokens", "text", "ids", "pieces", "why"),
    [
        (
            32,
            "!" * 32,
            [0] * 32,
            None,
            "token id 0 repeated 32 times in a row (32 of 32 tokens): '!!!!!!!!!!!!!!!!!!!!!!!!...'",
        ),
        (32, "", [5] * 32, None, "32 tokens but no text"),
        (32, "   \n  ", list(range(32)), None, "32 tokens but no text"),
        (20, "\ufffd" * 11 + "abcdefghi", list(range(20)), None, "not decodable: 11 of 20 characters are U+FFFD"),
        (40, "!" * 40, None, ["!"] * 40, "the piece '!' repeated 40 times in a row (40 of 40 pieces)"),
        (
            20,
            "a b " + "x" * 16,
            None,
            None,
            "the character 'x' repeated 16 times in a row (16 of 18 characters): 'a b xxxxxxxxxxxxxxxx'",
        ),
        # a loop that takes 17 of 32 tokens: over the half
        (
            32,
            "t" * 32,
            list(range(15)) + [7] * 17,
            None,
            "token id 7 repeated 17 times in a row (17 of 32 tokens): 'tttttttttttttttttttttttt...'",
        ),
    ],
)
def test_garbage_is_degenerate(tokens, text, ids, pieces, why):
    assert degenerate(AnswerRule(16, 0.5), tokens, text, ids, pieces) == why


def test_the_rule_leaves_short_answers_and_honest_repeats_alone():
    rule = AnswerRule(16, 0.5)
    assert degenerate(rule, 15, "", [0] * 15) == ""  # below min_tokens: too short to tell
    assert degenerate(rule, 32, "x" * 32, list(range(16)) + [7] * 16) == ""  # exactly half: allowed
    honest = [1, 2, 2, 2, 3, 4, 5, 5, 6, 7, 8, 9, 9, 9, 10, 11]  # runs of 3 at most, as measured on real SGLang
    assert degenerate(rule, 16, "Count 1, 2, 3 ...", honest) == ""
    assert degenerate(rule, 20, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11", None, [f"{i}, " for i in range(20)]) == ""
    assert longest_run([]) == (0, None) and longest_run("abbbc") == (3, "b") and longest_run([1]) == (1, 1)


def test_the_reference_prompts_are_a_few_hundred_characters():
    prompts = reference_prompts()
    assert len(prompts) == 8 and len(set(prompts)) == 8
    assert 150 < sum(len(p) for p in prompts) < 1500


def test_the_judged_spread_is_the_middle_half_from_four_runs():
    three = Spread.of([100.0, 110.0, 80.0])
    assert three.n == 3 and three.judged == pytest.approx(30 / 100)
    seven = Spread.of([100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 60.0])  # one disturbed run of seven
    assert seven.spread == pytest.approx(42 / 100) and seven.judged == pytest.approx(
        (100.5 - 98.5) / 100
    )  # numpy linear quartiles
    assert Spread.of([0.0, 0.0]).judged is None


def test_every_honest_answer_of_the_real_server_passes_the_default_rule():
    """16 answers of 64 tokens (greedy and sampled, 8 plain prompts) that real SGLang 0.5.17 gave on
    the H200: the greedy ones of a random-weight model loop a little (up to 13 in a row), none is
    near half of its answer; the garbage shape (one id over the whole answer) is."""
    rows = json.loads((PROOF / "honest_answers.json").read_text())
    assert len(rows) == 16 and {r["sampling"] for r in rows} == {"greedy", "sampled"}
    runs = []
    for r in rows:
        assert len(r["output_ids"]) == 64
        assert degenerate(AnswerRule(), 64, r["text"], r["output_ids"]) == "", r["prompt"]
        runs.append(longest_run(r["output_ids"])[0])
    assert max(runs) == 13 and min(len(set(r["output_ids"])) for r in rows) == 28
    half = rows[0]["output_ids"][:32] + [0] * 32  # half an honest answer, then token 0: exactly half is allowed
    assert degenerate(AnswerRule(), 64, "x" * 64, half) == ""
    assert degenerate(AnswerRule(), 64, "x" * 64, rows[0]["output_ids"][:31] + [0] * 33).startswith(
        "token id 0 repeated 33 times in a row (33 of 64 tokens)"
    )


def test_the_reference_check_on_what_real_sglang_scored():
    """The three gates of docs/real-sglang-h200.md: the first recorded, the same server scored the
    same answers identically, a model of the same shape with other weights moved 3.6-4.1 nats/token."""
    from validate.checks import reference as judge_reference
    from validate.config import parse_config

    reports = {n: json.loads((PROOF / f"gate-answers-{n}.report.json").read_text()) for n in ("1", "2", "other")}
    recorded = reports["1"]["reference_answers"]["answers"]
    assert len(recorded) == 8 and all(len(a["answer_ids"]) == 32 == len(a["logprobs"]) for a in recorded)
    assert recorded[0]["prompt"] == "The capital of France is" and recorded[0]["prompt_ids"] == [
        1447,
        5197,
        399,
        22200,
        330,
    ]
    cfg = parse_config({})
    for name, verdict in (("2", True), ("other", False)):
        ref = reports[name]["phases"]["reference"]
        res = ReferenceResult("compared", deltas=ref["deltas"], divergence=ref["first_divergence"])
        check = judge_reference(res, cfg)
        assert check.passed is verdict and reports[name]["verdict"] == ("pass" if verdict else "fail")
    other = reports["other"]["phases"]["reference"]
    assert min(other["deltas"]) > 3.5 and other["first_divergence"] == [0] * 8
    assert reports["2"]["phases"]["reference"]["deltas"] == [0.0] * 8


# ----- the reference phase against the test engine (in process) -----

FAST = ("--engine-decode-base-ms", "1", "--engine-decode-per-req-ms", "0")


def _phase(url: str, stored: list[ScoredAnswer] | None, when: str = "", **cfg: object):
    import asyncio

    from validate.client import make_session
    from validate.config import parse_config
    from validate.phases import Measurer

    said: list[str] = []

    async def go():
        async with make_session() as s:
            mm = Measurer(s, url, parse_config({"answers": {"reference": cfg}} if cfg else {}), said.append)
            return await mm.reference(stored, when)

    return asyncio.run(go()), said


def _scored(recorded: dict) -> list[ScoredAnswer]:
    return [ScoredAnswer(**a) for a in recorded["answers"]]


def test_the_reference_phase_records_compares_and_fails_other_weights(engine_factory):
    eng = engine_factory(*FAST)
    first, said = _phase(eng.url, None)
    assert first.mode == "recorded" and first.error == "" and first.deltas == []
    assert said == ["reference answers: 8 greedy answers of 32 tokens, scored, (recorded with the report)"]
    rec = first.recorded
    assert rec["max_new_tokens"] == 32 and len(rec["answers"]) == 8
    a = rec["answers"][0]
    assert a["prompt"] == "The capital of France is" and a["answer_ids"] == [1000 + i for i in range(32)]
    assert a["prompt_ids"] == [sum(map(ord, "The capital of France is"[i : i + 4])) % 32000 for i in range(0, 24, 4)]
    assert len(a["logprobs"]) == 32 and all(lp < 0 for lp in a["logprobs"])
    same, said = _phase(eng.url, _scored(rec), "2026-12-04T10:00:00+00:00")
    assert said == ["reference answers: 8 greedy answers of 32 tokens, scored, and scoring the group's 8"]
    assert (same.mode, same.deltas, same.divergence) == ("compared", [0.0] * 8, [None] * 8)
    assert same.reference_from == "2026-12-04T10:00:00+00:00" and same.worst == 0.0
    assert same.recorded == rec  # its own answers too: stored if this gate becomes the reference
    other = engine_factory(*FAST, "--engine-weights-seed", "1")
    bad, _ = _phase(other.url, _scored(rec))
    assert bad.mode == "compared" and bad.divergence == [0] * 8
    assert bad.deltas == pytest.approx([0.3] * 8, abs=1e-9)
    assert bad.recorded["answers"][0]["answer_ids"][0] == 1007  # other weights: other greedy answers


def test_a_server_that_cannot_answer_the_reference_fails_with_the_reason(engine_factory):
    broken = engine_factory(*FAST, "--engine-fault", "error_rate:1")
    res, _ = _phase(broken.url, None)
    assert res.mode == "error" and res.error.startswith("HTTP 500 Internal Server Error: ")
    assert not res.timed_out and res.recorded is None


@pytest.mark.parametrize(
    ("meta", "why"),
    [
        ({}, "the server returned no input_token_logprobs (return_logprob unsupported?)"),
        ({"input_token_logprobs": [[None]]}, "input_token_logprobs: unexpected entry [None]"),
    ],
)
def test_log_probability_entries_of_an_unexpected_shape_are_named(meta, why):
    from validate.phases import _logprob_entries

    with pytest.raises(GenerateError) as exc:
        _logprob_entries(meta, "input_token_logprobs")
    assert str(exc.value) == why and exc.value.failure == "bad_payload"
    assert _logprob_entries({"k": [[None, 5, "x"], [-1.5, 7]]}, "k") == [(None, 5), (-1.5, 7)]


def test_the_reference_verdict_reads_as_figures():
    from validate.checks import reference as judge_reference
    from validate.config import parse_config

    cfg = parse_config({})
    rec = judge_reference(ReferenceResult("recorded", recorded={"answers": [1, 2, 3]}), cfg)
    assert (rec.name, rec.passed, rec.measured, rec.required, rec.unit, rec.op) == (
        "answers.reference",
        True,
        "recorded",
        0.1,
        "nats/token",
        "<=",
    )
    assert rec.message == (
        "recorded 3 reference answers (the group has none yet; stored with its reference when this gate passes)"
    )
    why = "reference answers settings changed since the reference (from T): max_new_tokens: 32 -> 16"
    nc = judge_reference(ReferenceResult("recorded", recorded={"answers": [1]}, not_compared=why), cfg)
    assert (nc.passed, nc.measured, nc.required) == (False, "not compared", "compared")
    assert nc.message == (
        "FAILED the reference answers were not compared with the group's reference: " + why + "; to accept the "
        "change on purpose, promote this gate to the group's reference: --promote-baseline (role variable "
        "sglang_gate_promote_baseline: true)"
    )
    ok = judge_reference(ReferenceResult("compared", deltas=[0.0, 0.02, 0.01], divergence=[None, 7, 3]), cfg)
    assert (
        ok.passed
        and ok.measured == 0.02
        and ok.message
        == (
            "reference answers: mean log-likelihood moved by at most 0.0200 nats/token (answer 2 of 3; allowed 0.1); "
            "greedy answers first diverge at token 3"
        )
    )
    bad = judge_reference(ReferenceResult("compared", deltas=[0.5, 0.1000001], divergence=[None, None]), cfg)
    assert (
        not bad.passed
        and bad.measured == 0.5
        and bad.message
        == (
            "FAILED reference answers: mean log-likelihood moved by at most 0.5000 nats/token (answer 1 of 2; "
            "allowed 0.1); greedy answers identical"
        )
    )
    edge = judge_reference(ReferenceResult("compared", deltas=[0.1], divergence=[None]), cfg)
    assert edge.passed  # exactly the tolerance passes
    err = judge_reference(ReferenceResult("error", error="HTTP 500: boom"), cfg)
    assert (err.passed, err.measured, err.message) == (False, None, "FAILED reference answers: HTTP 500: boom")
    d = ReferenceResult(
        "compared", recorded={"answers": [1, 2]}, deltas=[0.123456, 0.5], divergence=[None, 0], reference_from="T"
    ).to_dict()
    assert d == {
        "mode": "compared",
        "error": "",
        "answers": 2,
        "deltas": [0.1235, 0.5],
        "worst_delta": 0.5,
        "first_divergence": [None, 0],
        "reference_from": "T",
        "not_compared": "",
        "timed_out": False,
    }
    assert ReferenceResult("recorded", recorded={"answers": [1, 2]}).to_dict()["answers"] == 2


# ----- what a server that answers wrongly gets told (a stub server: the code under test is the client) -----


@pytest.fixture
def stub():
    """A loopback HTTP server whose /generate answers what the test sets (status, body); records bodies."""
    import asyncio

    from aiohttp import web

    state = {"answers": [], "bodies": [], "content_types": []}

    async def generate(request):
        state["bodies"].append(await request.json())
        state["content_types"].append(request.headers.get("Content-Type"))
        status, body, *delay = state["answers"].pop(0)
        if delay:
            await asyncio.sleep(delay[0])
        return web.Response(status=status, text=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/generate", generate)
    with app_in_thread(app) as base:
        yield base, state


def _call(url: str, name: str, *args, timeout_s: float = 5):
    import asyncio

    from validate.client import make_session
    from validate.config import parse_config
    from validate.phases import Measurer

    async def go():
        cfg = parse_config({"answers": {"reference": {"timeout_s": timeout_s}}})
        async with make_session() as s:
            return await getattr(Measurer(s, url, cfg, print), name)(*args)

    return asyncio.run(go())


def test_the_reference_requests_and_their_refusals(stub):
    url, state = stub
    meta = {"input_token_logprobs": [[None, 11, None], [-0.5, 12, None]]}
    state["answers"] = [(200, json.dumps({"output_ids": [5, 6], "meta_info": meta}))]
    assert _call(url, "greedy_answer", "hi", 2) == ([11, 12], [5, 6])
    assert state["bodies"][-1] == {
        "text": "hi",
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 2},
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    scored = {"input_token_logprobs": [[-0.1, 12, None], [-0.25, 5, None], [-0.75, 6, None]]}
    state["answers"] = [(200, json.dumps({"meta_info": scored}))]
    assert _call(url, "score", [11, 12], [5, 6]) == [-0.25, -0.75]
    assert state["bodies"][-1] == {
        "input_ids": [11, 12, 5, 6],
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 1},
        "return_logprob": True,
        "logprob_start_len": 1,
    }
    cases = [
        ((500, '{"error": "boom"}'), "greedy_answer", ("hi", 2), 'HTTP 500 Internal Server Error: {"error": "boom"}'),
        (
            (200, "not json"),
            "greedy_answer",
            ("hi", 2),
            "not JSON: Expecting value: line 1 column 1 (char 0): not json",
        ),
        ((200, "[1, 2]"), "greedy_answer", ("hi", 2), "not a /generate answer: [1, 2]"),
        (
            (200, json.dumps({"output_ids": [], "meta_info": meta})),
            "greedy_answer",
            ("hi", 2),
            "the greedy answer has no output_ids",
        ),
        (
            (200, json.dumps({"meta_info": {"input_token_logprobs": [[-0.1, 5, None], [-0.2, 9, None]]}})),
            "score",
            ([11], [5, 6]),
            "input_token_logprobs do not line up with the 2 answer tokens (got 2 entries)",
        ),
        (
            (200, json.dumps({"meta_info": {"input_token_logprobs": [[None, 5, None], [-0.2, 6, None]]}})),
            "score",
            ([11], [5, 6]),
            "input_token_logprobs do not line up with the 2 answer tokens (got 2 entries)",
        ),
    ]
    for answer, fn, args, why in cases:
        state["answers"] = [answer]
        with pytest.raises(GenerateError) as exc:
            _call(url, fn, *args)
        assert str(exc.value) == why


def test_the_reference_requests_are_json_bounded_in_time_and_their_errors_short(stub):
    url, state = stub
    meta = {"input_token_logprobs": [[None, 11, None]]}
    state["answers"] = [(200, json.dumps({"output_ids": [5], "meta_info": meta}))]
    assert _call(url, "greedy_answer", "hi", 1) == ([11], [5])
    assert state["content_types"] == ["application/json"]
    state["answers"] = [(200, json.dumps({"output_ids": [5], "meta_info": meta}), 3.0)]  # answers after 3 s
    with pytest.raises(GenerateError) as exc:
        _call(url, "greedy_answer", "hi", 1, timeout_s=1)
    assert (str(exc.value), exc.value.failure) == ("no answer within 1s", "timeout")
    state["answers"] = [(500, "x" * 500)]
    with pytest.raises(GenerateError) as exc:
        _call(url, "greedy_answer", "hi", 1)
    assert str(exc.value) == "HTTP 500 Internal Server Error: " + "x" * 268
    state["answers"] = [(200, json.dumps(list(range(200))))]
    with pytest.raises(GenerateError) as exc:
        _call(url, "greedy_answer", "hi", 1)
    assert str(exc.value) == "not a /generate answer: " + str(list(range(200)))[:200]
    # an answer with no prompt before it: its log-probabilities start at token 0
    state["answers"] = [(200, json.dumps({"meta_info": {"input_token_logprobs": [[-0.5, 5, None]]}}))]
    assert _call(url, "score", [], [5]) == [-0.5]
    assert state["bodies"][-1]["logprob_start_len"] == 0


def test_an_unexpected_entry_is_cut_to_two_hundred_characters():
    from validate.phases import _logprob_entries

    with pytest.raises(GenerateError) as exc:
        _logprob_entries({"k": [["x" * 500]]}, "k")
    assert len(str(exc.value)) == 200 and str(exc.value).startswith("k: unexpected entry ['xxx")


def _phase_at(url: str, stored: list[ScoredAnswer] | None, when: str = ""):
    import asyncio

    from validate.client import make_session
    from validate.config import parse_config
    from validate.phases import Measurer

    async def go():
        cfg = parse_config({"answers": {"reference": {"timeout_s": 5, "max_new_tokens": 2}}})
        async with make_session() as s:
            return await Measurer(s, url, cfg, lambda _m: None).reference(stored, when)

    return asyncio.run(go())


def test_the_compared_phase_asks_for_the_reference_length_and_names_where_its_reference_is_from(stub, monkeypatch):
    import validate.phases

    monkeypatch.setattr(validate.phases, "reference_prompts", lambda: ["p"])
    url, state = stub
    state["answers"] = [(500, "down")]
    res = _phase_at(url, None)
    assert (res.mode, res.error, res.reference_from) == ("error", "HTTP 500 Internal Server Error: down", "")
    stored = [ScoredAnswer("p", [11], [5, 6], [-0.5, -0.5])]
    scored = {"input_token_logprobs": [[-0.1, 11, None], [-0.25, 5, None], [-0.75, 6, None]]}
    short = {"output_ids": [5], "meta_info": {"input_token_logprobs": [[None, 11, None]]}}  # stopped early
    own = {"input_token_logprobs": [[-0.1, 11, None], [-0.5, 5, None]]}
    state["answers"] = [
        (200, json.dumps(short)),
        (200, json.dumps({"meta_info": own})),
        (200, json.dumps({"meta_info": scored})),
    ]
    res = _phase_at(url, stored, "2026-12-04T10:00:00+00:00")
    assert res.mode == "compared" and res.divergence == [None]  # agrees as far as it went
    assert res.deltas == pytest.approx([0.0])
    assert res.recorded == {
        "max_new_tokens": 2,
        "answers": [{"prompt": "p", "prompt_ids": [11], "answer_ids": [5], "logprobs": [-0.5]}],
    }
    assert state["bodies"][0]["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 2}
    state["answers"] = [(503, "busy")]
    res = _phase_at(url, stored, "2026-12-04T10:00:00+00:00")
    assert (res.mode, res.reference_from) == ("error", "2026-12-04T10:00:00+00:00")
    assert res.error == "HTTP 503 Service Unavailable: busy"
    state["answers"] = [(200, json.dumps(short), 7.0)]  # slower than answers.reference.timeout_s (5 s)
    res = _phase_at(url, stored)
    assert (res.mode, res.timed_out, res.error) == ("error", True, "no answer within 5s")


def test_rule_edges_each_side():
    rule = AnswerRule()  # 16 tokens, more than half
    assert degenerate(rule, 16, "!" * 16, ids=[7] * 16).startswith("token id 7 repeated 16 times")  # at min_tokens
    assert degenerate(rule, 15, "!" * 15, ids=[7] * 15) == ""  # below it: too short to tell
    half = [7] * 8 + list(range(8))
    assert degenerate(rule, 16, "a b c d e f g h i j k l m n o p", ids=half) == ""  # half is not more than half
    assert degenerate(rule, 16, "a\ufffd\ufffdb") == ""  # 2 of 4 characters undecodable: half
    assert degenerate(rule, 16, "ab\ufffd\ufffdc") == ""  # 2 of 5
    assert degenerate(rule, 16, "a\ufffd\ufffd\ufffdb") == "not decodable: 3 of 5 characters are U+FFFD"
    assert (
        degenerate(rule, 16, "ab" * 16, pieces=["ab"] * 16)
        == "the piece 'ab' repeated 16 times in a row (16 of 16 pieces)"
    )
    pieces = ["ab"] * 8 + list("cdefghij")
    assert degenerate(rule, 16, "".join(pieces), pieces=pieces) == ""  # 8 of 16 pieces
    assert degenerate(
        rule, 16, "x" * 16
    ) == "the character 'x' repeated 16 times in a row (16 of 16 characters): " + repr("x" * 16)
    assert degenerate(rule, 16, "xxxxxxxxabcdefgh") == ""  # 8 of 16 characters


def test_the_longest_run_keeps_the_first_of_equal_runs_and_a_shown_answer_is_cut_after_24():
    assert longest_run([1, 1, 2, 2]) == (2, 1)
    assert longest_run([]) == (0, None)
    assert degenerate(AnswerRule(), 24, "y" * 24).endswith(": " + repr("y" * 24))
    assert degenerate(AnswerRule(), 25, "y" * 25).endswith(": " + repr("y" * 24 + "..."))


def test_a_reference_result_rounds_to_four_places():
    d = ReferenceResult("compared", recorded={"answers": [1, 2]}, deltas=[0.123456, 0.01]).to_dict()
    assert d["worst_delta"] == 0.1235 and d["deltas"] == [0.1235, 0.01] and d["answers"] == 2
