"""How validate/gate.py's Gate runs the phases: their order, what each phase's result makes the gate do next
(skip the rest and say why, mark the server stalled, measure a regression again), and how a stop (a signal,
the deadline, the gate's own error) ends the measuring and still gives a report that says where it stopped.

The measuring itself (HTTP, SSE, timing) is validate/phases.py's and has its own tests (test_phases_units.py,
test_client_*.py); here a scripted server stands in for the phase measurer (``Script``: it answers each
measurement with real result objects from validate/phases.py, built from the values a test gives), so each
test sets the one result it is about and runs the real Gate, its real judges and its real report in
milliseconds. Exact values throughout: messages, skip reasons, the order of what was measured."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import pytest
from _gate_helpers import check

from validate import baseline as store
from validate import gate as gate_module
from validate.config import parse_config
from validate.gate import Gate, GateOptions
from validate.load import LoadResult
from validate.metrics import RequestResult, compute_metrics
from validate.phases import (
    AccuracyAnswer,
    AccuracyResult,
    Health,
    Identity,
    ProbeResult,
    Readiness,
    ReferenceResult,
    ScoredAnswer,
    ServerInfo,
    SingleStream,
    StabilityStep,
    Throughput,
    Warmup,
    accuracy_settings,
    reference_prompts,
)
from validate.serverinfo import TEST_ENGINE_NOTE

# Small, fast phases; the judges' floors are set where a test needs one.
CFG: dict[str, Any] = {
    "readiness": {"timeout_s": 3, "max_health_latency_s": 1},
    "answers": {"probes": []},
    "accuracy": {"questions": 4, "concurrency": 2, "timeout_s": 7},
    "single_stream": {"timeout_s": 9, "repeats": 1},
    "throughput": {"num_prompts": 4, "timeout_s": 11, "repeats": 1, "warmup_requests": 0},
    "stability": {"concurrency": [2, 4], "step_timeout_s": 13, "health_timeout_s": 1},
    "baseline": {"confirm_wait_s": 0.0, "metrics": ["total_token_throughput", "single_stream_decode_tok_s"]},
}
STARTED = "2026-12-03T10:00:00+00:00"


def config(**over: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(CFG))
    for k, v in over.items():
        out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
    return out


# ----- the results a server gives (real phase result objects) -----


def answered(prompt: int = 10, out: int = 11, latency: float = 1.1, ttft: float = 0.1) -> RequestResult:
    """A request that streamed ``out`` tokens: decode speed (out - 1) / (latency - ttft) tok/s."""
    return RequestResult(
        success=True, prompt_len=prompt, output_len=out, latency=latency, ttft=ttft, text_chars=9, text="an answer"
    )


def failed(reason: str, error: str) -> RequestResult:
    r = RequestResult()
    r.fail(reason, error)
    return r


def load(
    tok_s: float = 200.0, n: int = 4, timed_out: bool = False, stalled: int = 0, deadline: float = 11
) -> LoadResult:
    """``n`` answered requests of 10 + 10 tokens at ``tok_s`` total tokens/s; ``stalled`` more cut by the deadline."""
    results = [answered(10, 10, 0.5, 0.05) for _ in range(n)]
    results += [failed("timeout", "no complete answer") for _ in range(stalled)]
    return LoadResult(results, compute_metrics(results, n * 20 / tok_s), timed_out, deadline)


def single(tok_s: float = 10.0) -> SingleStream:
    return SingleStream([answered(10, 11, 0.1 + 10 / tok_s, 0.1)], 9)


def throughput(tok_s: float = 200.0, **kw: Any) -> Throughput:
    return Throughput([load(tok_s, **kw)], 11)


def accuracy_result(cfg: Any, right: int = 4, timed_out: bool = False) -> AccuracyResult:
    answers = [AccuracyAnswer(i, 7, text="so 7" if i < right else "so 8") for i in range(4)]
    return AccuracyResult(accuracy_settings(cfg.accuracy), answers, 1.25, 7, timed_out=timed_out)


class Script:
    """The phase measurer the gate builds (validate.phases.Measurer), scripted: each method answers with the
    next result a test queued for it (or a healthy default) and records what the gate asked, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.made: list[tuple[str, str | None]] = []  # (base URL, container) of each Measurer the gate made
        self.ready = Readiness(True, 0.5)
        self.names = ["m"]
        self.engine = "sglang"
        self.facts: dict[str, dict[str, Any]] = {}  # when -> identity facts (default {"random_seed": 1})
        self.unhealthy: dict[str, str] = {}  # when -> /health error
        self.warmup = Warmup(answered(4, 4), 0.25)
        self.probe_results: list[ProbeResult] = []
        self.reference_result = ReferenceResult("recorded", recorded={"max_new_tokens": 32, "answers": []})
        self.accuracy_results: list[AccuracyResult] = []
        self.singles: list[SingleStream] = []
        self.throughputs: list[Throughput] = []
        self.steps: dict[int, StabilityStep] = {}
        self.hooks: dict[str, Any] = {}  # method -> coroutine function run first (a signal, a raise)
        self.stable_answers: list[bool] = []
        self.limits: list[int] = []
        self.cfg: Any = None

    def __call__(self, session: Any, base: str, cfg: Any, say: Any, container: str | None = None) -> Script:
        self.made.append((base, container))
        self.cfg = cfg
        return self

    async def _hook(self, name: str) -> None:
        if name in self.hooks:
            await self.hooks[name]()

    async def readiness(self) -> Readiness:
        self.calls.append(("readiness",))
        await self._hook("readiness")
        return self.ready

    async def server_info(self) -> ServerInfo:
        self.calls.append(("server_info",))
        await self._hook("server_info")
        return ServerInfo({"engine": self.engine, "source": "/get_server_info"}, self.names[0], {}, "", self.names)

    async def identity(self, when: str) -> Identity:
        self.calls.append(("identity", when))
        return Identity(when, self.facts.get(when, {"random_seed": 1}))

    async def health(self, when: str) -> Health:
        self.calls.append(("health", when))
        err = self.unhealthy.get(when, "")
        return Health(when, not err, err, 1.0, 0.01)

    async def sampler_warmup(self, timeout_s: float, of: str) -> Warmup:
        self.calls.append(("sampler_warmup", timeout_s, of))
        await self._hook("sampler_warmup")
        return self.warmup

    async def probes(self, model: str) -> list[ProbeResult]:
        self.calls.append(("probes", model))
        await self._hook("probes")
        return self.probe_results

    async def reference(self, stored: list[ScoredAnswer] | None, when: str = "") -> ReferenceResult:
        self.calls.append(("reference", stored, when))
        await self._hook("reference")
        return self.reference_result

    async def accuracy(self) -> AccuracyResult:
        self.calls.append(("accuracy",))
        await self._hook("accuracy")
        return self.accuracy_results.pop(0) if self.accuracy_results else accuracy_result(self.cfg)

    async def single_stream(self) -> SingleStream:
        self.calls.append(("single_stream",))
        await self._hook("single_stream")
        return self.singles.pop(0) if self.singles else single()

    async def throughput(self, limit: Any, stable: Any) -> Throughput:
        self.calls.append(("throughput", limit.wanted))
        await self._hook("throughput")
        tp = self.throughputs.pop(0) if self.throughputs else throughput()
        self.stable_answers.append(stable(tp.runs))
        return tp

    async def stability_step(self, idx: int, of: int, conc: int, limit: Any) -> StabilityStep:
        self.calls.append(("stability_step", idx, of, conc))
        self.limits.append(limit.wanted)  # the open-file limit the gate raised, passed on to each step
        await self._hook("stability_step")
        if idx in self.steps:
            return self.steps[idx]
        return StabilityStep(idx, of, conc, conc, load(n=conc), Health(f"after step {idx}", True, "", 1.0, 0.02))


def run(
    script: Script,
    monkeypatch: Any,
    cfg: dict[str, Any] | None = None,
    url: str = "http://gpu-1:30000",
    made: Any = lambda gate: None,
    **opts: Any,
) -> tuple[dict[str, Any], list[str], Gate]:
    """A real Gate on ``cfg`` whose measurer is ``script``; returns (report, every line it said, the gate)."""
    monkeypatch.setattr(gate_module, "Measurer", script)
    said: list[str] = []
    o = GateOptions(url=url, config=parse_config(cfg if cfg is not None else config()), config_path="flow.yml", **opts)
    gate = Gate(o, said.append)
    made(gate)
    return asyncio.run(gate.run()), said, gate


def names(report: dict[str, Any]) -> list[str]:
    return [c["name"] for c in report["checks"]]


HEALTHY_CALLS = [
    ("readiness",),
    ("server_info",),
    ("identity", "after readiness"),
    ("health", "after readiness"),
    ("sampler_warmup", 11.0, "throughput.timeout_s"),
    ("accuracy",),
    ("identity", "after accuracy"),
    ("single_stream",),
    ("health", "after the single stream"),
    ("identity", "after single_stream"),
    ("throughput", 4 + 64),
    ("health", "after the throughput phase"),
    ("identity", "after throughput"),
    ("stability_step", 1, 2, 2),
    ("stability_step", 2, 2, 4),
    ("identity", "after stability"),
]


WITH_PROBES = [("probes", "m"), ("identity", "after answers")]  # the answers phase, when it has probes

# ----- the order of a healthy run -----


def test_a_healthy_run_measures_every_phase_in_order_and_passes(monkeypatch):
    s = Script()
    s.probe_results = [ProbeResult(1, "Say hi", answered())]
    cfg = config(answers={"probes": [{"prompt": "Say hi", "expect": "answer"}]})
    report, said, _ = run(s, monkeypatch, cfg, url="http://gpu-1:30000/")
    assert s.made == [("http://gpu-1:30000", None)]  # one measurer, on the URL without its trailing slash
    assert report["url"] == "http://gpu-1:30000"
    assert s.calls == [*HEALTHY_CALLS[:5], *WITH_PROBES, *HEALTHY_CALLS[5:]]
    assert report["verdict"] == "pass", report["failed_checks"]
    assert names(report) == [
        "readiness",
        "server.model",
        "sampler_warmup.request",
        "answers.probe_1",
        "accuracy.failed_requests",
        "accuracy.score",
        "accuracy.invalid",
        "throughput.failed_requests",
        "stability.concurrency_2",
        "stability.concurrency_4",
        "output.empty_or_nan",
        "server.restarted",
        "server.health_latency",
    ]
    assert report["skipped"] == ["logs: no --log file given"]
    assert report["stopped"] is None
    assert s.stable_answers == [True]  # one run: nothing to disagree with
    assert s.limits == [68, 68]
    steps = report["phases"]["stability"]["steps"]
    assert [(st["step"], st["concurrency"], st["passed"]) for st in steps] == [(1, 2, True), (2, 4, True)]
    assert "accuracy: 4 of 4 right (1.000), 0 invalid, in 1.2s" in said
    # every step's verdict is said, a passed one too
    assert [x for x in said if x.startswith("stability")] == [
        check(report, "stability.concurrency_2")["message"],
        check(report, "stability.concurrency_4")["message"],
    ]
    assert check(report, "stability.concurrency_2")["message"].startswith("stability step 1/2 (concurrency 2): ok")
    assert [h["when"] for h in report["phases"]["health_checks"]] == [
        "after readiness",
        "after the single stream",
        "after the throughput phase",
        "after step 1",
        "after step 2",
    ]
    assert report["baseline"] == {"path": None, "used": False, "note": "no --baseline given: no regression check"}
    assert report["started_at"].endswith("+00:00")
    assert check(report, "server.health_latency")["message"] == (
        "slowest /health answer 0.02s (after step 1; allowed 1s: max_health_latency_s)"
    )
    assert not [x for x in said if "open-file" in x]  # the limit already fits: nothing to say


@pytest.mark.parametrize(
    ("url", "base"),
    [("http://gpu-1:30000", "http://gpu-1:30000"), ("http://proxy:8080/gpu-X//", "http://proxy:8080/gpu-X")],
)
def test_only_trailing_slashes_are_cut_from_the_url(monkeypatch, url, base):
    s = Script()
    off = {"enabled": False}
    report, _, _ = run(s, monkeypatch, config(accuracy=off, single_stream=off, throughput=off, stability=off), url=url)
    assert s.made == [(base, None)] and report["url"] == base


@pytest.mark.parametrize(
    ("logs", "container"),
    [(["/var/log/a.log"], None), (["/var/log/a.log", "docker:sglang", "docker:other"], "sglang")],
)
def test_the_measurer_is_told_the_first_docker_container_of_the_logs(monkeypatch, logs, container):
    s = Script()
    off = {"enabled": False}
    cfg = config(accuracy=off, single_stream=off, throughput=off, stability=off, logs=off)
    report, _, _ = run(s, monkeypatch, cfg, logs=logs)
    assert s.made == [("http://gpu-1:30000", container)]
    assert "logs" not in report["phases"] and not [x for x in report["skipped"] if x.startswith("logs")]


@pytest.mark.parametrize(
    ("over", "wanted"),
    [
        ({"throughput": {"num_prompts": 8, "max_concurrency": 3}}, 3),
        ({"throughput": {"num_prompts": 8}}, 8),
        ({"accuracy": {"enabled": True, "concurrency": 6, "questions": 5}}, 5),
        ({"accuracy": {"enabled": True, "concurrency": 5, "questions": 6}}, 5),
        ({"stability": {"enabled": True, "concurrency": [9, 5]}}, 9),
        ({}, 1),
    ],
)
def test_the_open_file_limit_fits_the_most_streams_a_phase_opens(monkeypatch, over, wanted):
    """Only phases that run count; a disabled one's numbers are far above the expected figure."""
    big = {"num_prompts": 500, "max_concurrency": 400}
    cfg = config(
        answers={"enabled": False},
        single_stream={"enabled": False},
        throughput={"enabled": "throughput" in over, **big, **over.get("throughput", {})},
        stability={"enabled": False, "concurrency": [300], **over.get("stability", {})},
        accuracy={"enabled": False, "concurrency": 200, "questions": 200, **over.get("accuracy", {})},
    )
    report, _, _ = run(Script(), monkeypatch, cfg)
    assert report["phases"]["open_files"]["wanted"] == wanted + 64


def test_a_limit_the_gate_had_to_change_is_said(monkeypatch):
    from validate.limits import FileLimit

    monkeypatch.setattr(gate_module, "raise_open_files", lambda n: FileLimit(70, 70, n + 64, "could not raise: test"))
    off = {"enabled": False}
    _, said, _ = run(Script(), monkeypatch, config(accuracy=off, single_stream=off, throughput=off, stability=off))
    assert said[0] == "could not raise: test"


def test_run_then_hands_the_report_and_the_seconds_left_to_finish(monkeypatch):
    s = Script()
    monkeypatch.setattr(gate_module, "Measurer", s)
    off = {"enabled": False}
    cfg = parse_config(config(deadline_s=100, accuracy=off, single_stream=off, throughput=off, stability=off))
    gate = Gate(GateOptions(url="http://h:1", config=cfg, config_path="flow.yml"), lambda _: None)
    got: list[Any] = []

    def finish(report: dict[str, Any], left: float) -> str:
        got.append((report["verdict"], left))
        return "written"

    assert asyncio.run(gate.run_then(finish)) == "written"
    ((verdict, left),) = got
    assert verdict == "pass" and 90 < left < 100


def test_the_log_tells_starts_before_the_gate_from_a_restart_during_it(monkeypatch, tmp_path):
    """Two start banners before the gate: a restart during start-up, reported; one during it: failed."""
    log = tmp_path / "server.log"
    log.write_text("INFO:     Started server process [11]\nINFO:     Started server process [12]\n")
    off = {"enabled": False}
    cfg = config(accuracy=off, throughput=off, stability=off)
    report, _, _ = run(Script(), monkeypatch, cfg, logs=[str(log)])
    assert check(report, "server.restarted") == {
        "name": "server.restarted",
        "passed": True,
        "measured": "same process",
        "required": "same process",
        "unit": "",
        "message": "same server process from 'after readiness' to 'after single_stream' (random_seed); before the "
        f"gate: {log}: 2 starts before the gate began (not during it)",
        "op": "",
    }
    s = Script()

    async def restart() -> None:
        with log.open("a") as f:
            f.write("INFO:     Started server process [12]\n")

    s.hooks["single_stream"] = restart
    report, _, _ = run(s, monkeypatch, cfg, logs=[str(log)])
    assert check(report, "server.restarted")["passed"] is False
    assert "its log shows a new start" in check(report, "server.restarted")["message"]


def test_the_test_engine_is_named_as_such(monkeypatch):
    s = Script()
    s.engine = "test-engine"
    off = {"enabled": False}
    report, said, _ = run(s, monkeypatch, config(accuracy=off, single_stream=off, throughput=off, stability=off))
    assert said[0] == "NOTE: " + TEST_ENGINE_NOTE
    assert report["engine"] == "test-engine"
    s2 = Script()
    _, said2, _ = run(s2, monkeypatch, config(accuracy=off, single_stream=off, throughput=off, stability=off))
    assert not [x for x in said2 if x.startswith("NOTE: ")]


@pytest.mark.parametrize(
    ("tp", "st", "warmed"),
    [
        (True, True, ("sampler_warmup", 11.0, "throughput.timeout_s")),
        (False, True, ("sampler_warmup", 13.0, "stability.step_timeout_s")),
        (True, False, ("sampler_warmup", 11.0, "throughput.timeout_s")),
    ],
)
def test_the_warm_up_waits_as_long_as_the_sampled_phase_it_warms(monkeypatch, tp, st, warmed):
    s = Script()
    off = {"enabled": False}
    cfg = config(accuracy=off, single_stream=off, throughput={"enabled": tp}, stability={"enabled": st})
    report, _, _ = run(s, monkeypatch, cfg)
    assert [c for c in s.calls if c[0] == "sampler_warmup"] == [warmed]
    assert check(report, "sampler_warmup.request")["message"] == "sampled warm-up answered in 0.25s"


def test_without_a_sampled_phase_the_warm_up_is_skipped(monkeypatch):
    s = Script()
    off = {"enabled": False}
    report, _, _ = run(s, monkeypatch, config(throughput=off, stability=off))
    assert not [c for c in s.calls if c[0] == "sampler_warmup"]
    assert report["skipped"][0] == "sampler_warmup: no sampled phase runs (throughput and stability are off)"
    assert report["skipped"][1:] == [
        "answers: no probes in the config, and the reference answers need --baseline",
        "throughput: disabled in config",
        "stability: disabled in config",
        "logs: no --log file given",
    ]


# ----- a phase that finds the server broken stops the phases after it -----

LATER = ["accuracy", "single_stream", "throughput", "stability"]


def skipped_after(why: str, phases: list[str] = LATER) -> list[str]:
    return [f"{p}: skipped, {why}" for p in phases]


def test_a_server_never_ready_is_not_asked_anything_else(monkeypatch):
    s = Script()
    s.ready = Readiness(False, 3.0, "/health: connection refused")
    report, said, _ = run(s, monkeypatch)
    assert s.calls == [("readiness",)]
    assert report["skipped"] == [
        "answers: no probes in the config, and the reference answers need --baseline",
        *skipped_after("the server never became ready"),
        "logs: no --log file given",
    ]
    assert names(report) == ["readiness"]
    assert said == ["FAILED server not ready within 3s (readiness.timeout_s); last: /health: connection refused"]


def test_a_server_never_ready_is_compared_as_an_unknown_engine(monkeypatch, tmp_path):
    """No server info, no engine: the group's reference (from sglang) is not compared, and says so."""
    path = tmp_path / "b.json"
    _reference_file(path, parse_config(config()), None, None)
    s = Script()
    s.ready = Readiness(False, 3.0, "/health: connection refused")
    report, _, _ = run(s, monkeypatch, baseline_path=str(path))
    assert report["engine"] == "unknown"
    assert check(report, "baseline.reference")["message"].startswith(
        "FAILED the speed figures were not compared with the group's reference: the reference was measured on "
        "engine 'sglang', this server is 'unknown'; "
    )


def test_a_server_serving_another_model_is_not_measured(monkeypatch):
    s = Script()
    s.names = ["other/model"]
    report, _, _ = run(s, monkeypatch, config(model="m"))
    assert s.calls == HEALTHY_CALLS[:4]  # identity and /health are read; nothing is sent to the model
    assert check(report, "server.model")["message"] == "FAILED expected model 'm'; the server names 'other/model'"
    assert report["skipped"][1:5] == skipped_after("the server serves another model")


def test_the_model_option_overrides_the_config_model(monkeypatch):
    s = Script()
    s.names = ["served-name"]
    off = {"enabled": False}
    cfg = config(model="wrong", accuracy=off, single_stream=off, throughput=off, stability=off)
    report, _, _ = run(s, monkeypatch, cfg, model="served-name")
    assert check(report, "server.model")["passed"] is True and report["verdict"] == "pass"


def test_a_server_unhealthy_after_readiness_is_not_warmed_or_measured(monkeypatch):
    s = Script()
    s.unhealthy["after readiness"] = "HTTP 503"
    report, _, _ = run(s, monkeypatch)
    assert s.calls == HEALTHY_CALLS[:4]
    assert report["failed_checks"] == ["readiness.server_healthy_after"]
    assert report["skipped"][1:5] == skipped_after("the server was down or wedged")


def test_a_warm_up_that_times_out_marks_the_server_stalled(monkeypatch):
    s = Script()
    s.warmup = Warmup(failed("timeout", "no complete answer within throughput.timeout_s = 11s"), 11.0)
    report, _, _ = run(s, monkeypatch)
    assert s.calls == [*HEALTHY_CALLS[:5], ("health", "after the failed warm-up request")]
    assert report["failed_checks"] == ["sampler_warmup.request"]  # /health still answered: stalled, not dead
    assert report["skipped"][1:5] == skipped_after("the server stalled (the sampled warm-up request did not finish)")


def test_a_warm_up_that_fails_otherwise_checks_health_and_goes_on_while_healthy(monkeypatch):
    s = Script()
    s.warmup = Warmup(failed("http_error", "HTTP 500: sampling kernel"), 0.5)
    report, _, _ = run(s, monkeypatch)
    assert s.calls == [*HEALTHY_CALLS[:5], ("health", "after the failed warm-up request"), *HEALTHY_CALLS[5:]]
    assert check(report, "sampler_warmup.request")["message"] == (
        "FAILED the sampled warm-up request failed (http_error): HTTP 500: sampling kernel"
    )
    assert report["skipped"][1:] == ["logs: no --log file given"]


def test_a_server_that_dies_at_the_warm_up_skips_everything_after(monkeypatch):
    s = Script()
    s.warmup = Warmup(failed("connect", "connection reset"), 0.1)
    s.unhealthy["after the failed warm-up request"] = "connection refused"
    report, _, _ = run(s, monkeypatch)
    assert report["failed_checks"] == ["sampler_warmup.request", "sampler_warmup.server_healthy_after"]
    assert report["skipped"][1:5] == skipped_after("the server was down or wedged")


def test_a_restart_seen_after_a_phase_skips_the_phases_after_it(monkeypatch):
    s = Script()
    s.facts["after accuracy"] = {"random_seed": 2}
    report, said, _ = run(s, monkeypatch)
    assert s.calls == HEALTHY_CALLS[:7]
    assert "the server's identity changed after accuracy: it restarted; the phases after this are skipped" in said
    assert report["skipped"][1:4] == skipped_after("the server restarted (seen after accuracy)", LATER[1:])
    assert check(report, "server.restarted")["message"] == (
        "FAILED the server restarted between 'after readiness' and 'after accuracy': random_seed 1 -> 2"
    )


def test_an_identity_without_facts_is_no_restart(monkeypatch):
    """A read that failed (no server info) has no facts: nothing to compare, not a restart."""
    s = Script()
    s.facts["after accuracy"] = {}
    _report, said, _ = run(s, monkeypatch)
    assert s.calls == HEALTHY_CALLS
    assert not [x for x in said if "identity changed" in x]
    s2 = Script()
    s2.facts["after readiness"] = {}
    s2.facts["after answers"] = {"random_seed": 5}
    run(s2, monkeypatch)
    assert s2.calls == HEALTHY_CALLS  # the first read had no facts: later reads compare with nothing


def test_a_second_reason_to_stop_keeps_the_first(monkeypatch):
    """The server is seen restarted after a stall: the skip names the stall, where it broke first."""
    s = Script()
    s.accuracy_results = [accuracy_result(parse_config(config()), timed_out=True)]
    s.facts["after accuracy"] = {"random_seed": 2}
    report, said, _ = run(s, monkeypatch)
    why = "the server stalled (accuracy questions unanswered at the 7s deadline)"
    assert report["skipped"][1:4] == skipped_after(why, LATER[1:])
    assert not [x for x in said if "identity changed" in x]


def test_a_dead_server_after_a_stalled_warm_up_is_named_dead(monkeypatch):
    """/health after the warm-up is asked first: a server it finds dead is "down", not "stalled"."""
    s = Script()
    s.warmup = Warmup(failed("timeout", "no complete answer within throughput.timeout_s = 11s"), 11.0)
    s.unhealthy["after the failed warm-up request"] = "timeout"
    report, _, _ = run(s, monkeypatch)
    assert report["skipped"][1:5] == skipped_after("the server was down or wedged")


def test_a_failed_health_after_another_model_keeps_the_model_as_the_reason(monkeypatch):
    s = Script()
    s.names = ["other/model"]
    s.unhealthy["after readiness"] = "HTTP 503"
    report, _, _ = run(s, monkeypatch, config(model="m"))
    assert report["skipped"][1:5] == skipped_after("the server serves another model")
    assert report["failed_checks"] == ["server.model", "readiness.server_healthy_after"]


def test_a_gate_error_in_a_phase_fails_it_and_the_next_phases_still_run(monkeypatch):
    s = Script()

    async def boom() -> None:
        raise KeyError("settings")

    s.hooks["accuracy"] = boom
    report, said, _ = run(s, monkeypatch)
    assert s.calls == HEALTHY_CALLS  # the identity after it is read, the phases after it run
    assert check(report, "accuracy.error") == {
        "name": "accuracy.error",
        "passed": False,
        "measured": None,
        "required": None,
        "unit": "",
        "message": "FAILED accuracy: gate error KeyError: 'settings'",
        "op": "",
    }
    assert report["failed_checks"] == ["accuracy.error"] and report["stopped"] is None
    assert "FAILED accuracy: gate error KeyError: 'settings'" in said


# ----- the phases' own outcomes -----


def test_a_single_stream_that_times_out_stalls_the_gate(monkeypatch):
    s = Script()
    s.singles = [SingleStream([failed("timeout", "no complete answer within single_stream.timeout_s = 9s")], 9)]
    report, _, _ = run(s, monkeypatch)
    assert s.calls == HEALTHY_CALLS[:10]
    assert report["skipped"][1:3] == skipped_after(
        "the server stalled (the single stream did not finish within 9s)", LATER[2:]
    )


def test_a_single_stream_that_fails_otherwise_does_not_stop_the_gate(monkeypatch):
    s = Script()
    s.singles = [SingleStream([failed("short", "2 of 11 tokens")], 9)]
    report, _, _ = run(s, monkeypatch)
    assert s.calls == HEALTHY_CALLS and report["failed_checks"] == ["single_stream.request"]


def test_a_throughput_that_hits_its_deadline_stalls_the_gate_with_the_open_requests(monkeypatch):
    s = Script()
    s.throughputs = [throughput(timed_out=True, stalled=3)]
    report, _, _ = run(s, monkeypatch)
    assert s.calls == HEALTHY_CALLS[:13]
    why = "the server stalled (3 throughput requests still open at the 11s deadline)"
    assert report["skipped"][1:] == [*skipped_after(why, ["stability"]), "logs: no --log file given"]
    assert check(report, "throughput.failed_requests")["message"].startswith(
        "FAILED throughput: 3 of 7 requests failed (3 not finished within the 11s deadline or failed)"
    )


def test_a_refused_throughput_phase_does_not_probe_health(monkeypatch):
    s = Script()
    s.throughputs = [Throughput([], 11, refused="needs 68 open files")]
    report, _, _ = run(s, monkeypatch)
    assert ("health", "after the throughput phase") not in s.calls
    assert report["failed_checks"] == ["throughput.open_files"]
    assert [c for c in s.calls if c[0] == "stability_step"] == [
        ("stability_step", 1, 2, 2),
        ("stability_step", 2, 2, 4),
    ]


def test_the_throughput_phase_asks_the_judge_whether_its_runs_agree(monkeypatch):
    s = Script()
    s.throughputs = [Throughput([load(200.0), load(400.0)], 11), Throughput([load(200.0), load(201.0)], 11)]
    cfg = config(throughput={"max_spread": 0.1, "repeats": 2}, baseline={"metrics": ["total_token_throughput"]})
    monkeypatch.setattr(gate_module, "Measurer", s)
    run(s, monkeypatch, cfg)
    s2 = Script()
    s2.throughputs = [Throughput([load(200.0), load(201.0)], 11)]
    run(s2, monkeypatch, cfg)
    assert (s.stable_answers, s2.stable_answers) == ([False], [True])


def test_a_warm_up_failure_of_the_throughput_phase_is_its_own_check(monkeypatch):
    s = Script()
    run_ = load()
    run_.warmup = [failed("http_error", "HTTP 500")]
    s.throughputs = [Throughput([run_], 11)]
    report, _, _ = run(s, monkeypatch)
    assert names(report)[6:8] == ["throughput.warmup", "throughput.failed_requests"]
    assert (
        check(report, "throughput.warmup")["message"] == "FAILED 1 of 1 warm-up requests failed (http_error): HTTP 500"
    )


def test_a_stability_step_that_kills_the_server_skips_the_steps_after_it(monkeypatch):
    s = Script()
    s.steps[1] = StabilityStep(1, 3, 2, 2, load(n=2), Health("after step 1", False, "connection refused", 1.0))
    report, said, gate = run(s, monkeypatch, config(stability={"concurrency": [2, 4, 8]}))
    assert [c for c in s.calls if c[0] == "stability_step"] == [("stability_step", 1, 3, 2)]
    assert gate.down == "the server was down or wedged"  # the reason the steps after it are skipped
    steps = report["phases"]["stability"]["steps"]
    assert steps[1:] == [
        {"step": 2, "of": 3, "concurrency": 4, "requests": 0, "skipped": True, "refused": ""},
        {"step": 3, "of": 3, "concurrency": 8, "requests": 0, "skipped": True, "refused": ""},
    ]
    assert steps[0]["passed"] is False and "passed" not in steps[1]
    assert report["failed_checks"] == ["stability.concurrency_2"]
    assert said[-1].startswith("FAILED stability step 1/3 (concurrency 2): the server died or wedged at this step")
    assert report["phases"]["health_checks"][-1] == {
        "when": "after step 1",
        "healthy": False,
        "error": "connection refused",
        "timeout_s": 1.0,
        "seconds": 0.0,
    }


def test_a_stability_step_that_hits_its_deadline_stalls_the_steps_after_it(monkeypatch):
    s = Script()
    s.steps[1] = StabilityStep(1, 3, 2, 2, load(n=2, timed_out=True, stalled=1, deadline=13), Health("h", True, "", 1))
    report, _, gate = run(s, monkeypatch, config(stability={"concurrency": [2, 4, 8]}))
    assert [c for c in s.calls if c[0] == "stability_step"] == [("stability_step", 1, 3, 2)]
    assert [st.get("skipped", False) for st in report["phases"]["stability"]["steps"]] == [False, True, True]
    assert gate.down == "the server stalled (stability step 1/3 (concurrency 2) hit its 13s deadline)"


def test_a_refused_stability_step_lets_the_next_one_run(monkeypatch):
    s = Script()
    s.steps[1] = StabilityStep(1, 2, 2, 2, refused="needs 66 open files")
    report, said, _ = run(s, monkeypatch)
    assert [c for c in s.calls if c[0] == "stability_step"] == [
        ("stability_step", 1, 2, 2),
        ("stability_step", 2, 2, 4),
    ]
    assert "FAILED stability step 1/2 (concurrency 2) refused: needs 66 open files" in said
    assert report["failed_checks"] == ["stability.concurrency_2"]


# ----- the answers phase: probes and the group's reference answers -----


PROBE = {"probes": [{"prompt": "p", "expect": "x"}]}
NO_REFERENCE = {"reference": {"enabled": False}}


@pytest.mark.parametrize(
    ("answers", "baseline", "why", "asked"),
    [
        ({"enabled": False, **PROBE}, True, "disabled in config", []),
        ({}, False, "no probes in the config, and the reference answers need --baseline", []),
        (NO_REFERENCE, True, "no probes in the config, and the reference answers need --baseline", []),
        (PROBE, False, "", ["probes"]),
        ({**PROBE, **NO_REFERENCE}, True, "", ["probes"]),
        ({}, True, "", ["reference"]),
        (PROBE, True, "", ["probes", "reference"]),
    ],
)
def test_the_answers_phase_asks_what_it_has_to_ask(monkeypatch, tmp_path, answers, baseline, why, asked):
    s = Script()
    s.probe_results = [ProbeResult(1, "p", answered())]
    off = {"enabled": False}
    cfg = config(answers=answers, accuracy=off, single_stream=off, throughput=off, stability=off)
    opts = {"baseline_path": str(tmp_path / "b.json")} if baseline else {}
    report, _, _ = run(s, monkeypatch, cfg, **opts)
    skipped = [x for x in report["skipped"] if x.startswith("answers")]
    assert skipped == ([f"answers: {why}"] if why else [])
    assert [c[0] for c in s.calls if c[0] in ("probes", "reference")] == asked
    assert (("identity", "after answers") in s.calls) == bool(asked)


def _reference_file(path: Any, cfg: Any, answers: dict[str, Any] | None, accuracy: dict[str, Any] | None) -> None:
    report = {
        "verdict": "pass",
        "engine": "sglang",
        "config": cfg.model_dump(mode="python"),
        "key_metrics": {"total_token_throughput": 200.0, "single_stream_decode_tok_s": 10.0},
        "started_at": STARTED,
        "reference_answers": answers,
        "accuracy": accuracy,
    }
    assert store.record(path, report, promote=False)[0]


def _stored_answers(max_new: int = 32) -> dict[str, Any]:
    return {
        "max_new_tokens": max_new,
        "answers": [
            {"prompt": p, "prompt_ids": [1, 2], "answer_ids": [3, 4], "logprobs": [-0.5, -0.25]}
            for p in reference_prompts()
        ],
    }


def test_the_group_answers_are_scored_when_comparable(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    off = {"enabled": False}
    cfg = config(accuracy=off, single_stream=off, throughput=off, stability=off)
    _reference_file(path, parse_config(cfg), _stored_answers(), None)
    s = Script()
    s.reference_result = ReferenceResult("compared", deltas=[0.01], divergence=[None])
    report, _, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    (call,) = [c for c in s.calls if c[0] == "reference"]
    assert call[2] == STARTED
    assert call[1] == [ScoredAnswer(p, [1, 2], [3, 4], [-0.5, -0.25]) for p in reference_prompts()]
    assert check(report, "answers.reference")["passed"] is True


def test_answers_of_other_settings_are_not_compared_and_say_why(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    off = {"enabled": False}
    cfg = config(accuracy=off, single_stream=off, throughput=off, stability=off)
    _reference_file(path, parse_config(cfg), _stored_answers(16), None)
    s = Script()
    report, _, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    (call,) = [c for c in s.calls if c[0] == "reference"]
    assert call[1:] == (None, STARTED)  # nothing to score: this server's own answers are recorded
    assert check(report, "answers.reference")["message"].startswith(
        f"FAILED the reference answers were not compared with the group's reference: reference answers settings "
        f"changed since the reference (from {STARTED}): max_new_tokens: 16 -> 32; "
    )
    assert report["phases"]["reference"]["not_compared"].endswith("max_new_tokens: 16 -> 32")


def test_a_group_without_a_reference_records_the_answers(monkeypatch, tmp_path):
    off = {"enabled": False}
    cfg = config(accuracy=off, single_stream=off, throughput=off, stability=off)
    s = Script()
    report, _, _ = run(s, monkeypatch, cfg, baseline_path=str(tmp_path / "none.json"))
    assert [c for c in s.calls if c[0] == "reference"] == [("reference", None, "")]
    assert check(report, "answers.reference")["message"].startswith("recorded 0 reference answers")


def test_a_reference_answer_that_times_out_stalls_the_gate(monkeypatch, tmp_path):
    s = Script()
    s.reference_result = ReferenceResult("error", error="timeout: no answer", timed_out=True)
    cfg = config(answers={"reference": {"timeout_s": 2.5}})
    report, _, _ = run(s, monkeypatch, cfg, baseline_path=str(tmp_path / "b.json"))
    why = "the server stalled (a reference answer did not come within answers.reference.timeout_s = 2.5s)"
    assert report["skipped"][:4] == skipped_after(why)
    assert check(report, "answers.reference")["message"] == "FAILED reference answers: timeout: no answer"


def test_a_probe_that_times_out_stalls_the_gate_before_the_reference_answers(monkeypatch, tmp_path):
    s = Script()
    s.probe_results = [ProbeResult(1, "p", failed("timeout", "no complete answer within single_stream.timeout_s = 9s"))]
    cfg = config(answers={"probes": [{"prompt": "p", "expect": "x"}]})
    report, _, _ = run(s, monkeypatch, cfg, baseline_path=str(tmp_path / "b.json"))
    assert not [c for c in s.calls if c[0] == "reference"]
    assert report["skipped"][:4] == skipped_after("the server stalled (a probe did not finish)")
    assert check(report, "answers.probe_1")["message"] == (
        "FAILED probe 1: request failed (timeout): no complete answer within single_stream.timeout_s = 9s"
    )


def test_a_probe_that_fails_otherwise_does_not_stop_the_gate(monkeypatch, tmp_path):
    s = Script()
    s.probe_results = [ProbeResult(1, "p", failed("short", "1 of 16 tokens"))]
    cfg = config(answers={"probes": [{"prompt": "p", "expect": "x"}]})
    run(s, monkeypatch, cfg, baseline_path=str(tmp_path / "b.json"))
    assert [c[0] for c in s.calls if c[0] in ("reference", "accuracy")] == ["reference", "accuracy"]


# ----- the accuracy phase against the group's reference -----


def test_accuracy_is_compared_with_the_group_reference(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    off = {"enabled": False}
    cfg = config(answers=off, single_stream=off, throughput=off, stability=off)
    settings = accuracy_settings(parse_config(cfg).accuracy)
    _reference_file(path, parse_config(cfg), None, {"settings": settings, "correct": 4, "questions": 4})
    s = Script()
    s.accuracy_results = [accuracy_result(parse_config(cfg), right=3)]
    report, said, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    assert "accuracy: 3 of 4 right (0.750), 1 invalid, in 1.2s" not in said  # "so 8" is a number: wrong, valid
    assert "accuracy: 3 of 4 right (0.750), 0 invalid, in 1.2s" in said
    acc = report["phases"]["accuracy"]
    assert (acc["reference_from"], acc["not_compared"]) == (STARTED, "")
    assert check(report, "accuracy.reference")["message"].startswith(
        f"accuracy 0.750 (3 of 4) vs the group's reference 1.000 (4 of 4, from {STARTED}): drop 0.250"
    )


def test_accuracy_of_other_settings_is_not_compared_and_says_why(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    off = {"enabled": False}
    cfg = config(answers=off, single_stream=off, throughput=off, stability=off)
    settings = {**accuracy_settings(parse_config(cfg).accuracy), "seed": 9}
    _reference_file(path, parse_config(cfg), None, {"settings": settings, "correct": 4, "questions": 4})
    report, _, _ = run(Script(), monkeypatch, cfg, baseline_path=str(path))
    acc = report["phases"]["accuracy"]
    assert acc["reference_from"] == STARTED
    assert acc["not_compared"] == f"accuracy settings changed since the reference (from {STARTED}): seed: 9 -> 1"
    assert check(report, "accuracy.reference")["passed"] is False


def test_accuracy_without_a_baseline_has_no_reference_check(monkeypatch):
    off = {"enabled": False}
    report, _, _ = run(Script(), monkeypatch, config(single_stream=off, throughput=off, stability=off))
    assert [n for n in names(report) if n.startswith("accuracy")] == [
        "accuracy.failed_requests",
        "accuracy.score",
        "accuracy.invalid",
    ]


# ----- a regression must persist: the confirmation -----


def confirm_cfg(**over: Any) -> dict[str, Any]:
    off = {"enabled": False}
    return config(answers=off, accuracy=off, stability=off, **over)


def _speed_reference(path: Any, cfg: dict[str, Any]) -> None:
    _reference_file(path, parse_config(cfg), None, None)  # 200 tok/s total, 10 tok/s single stream


def test_a_throughput_regression_that_persists_fails_with_both_measurements(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    cfg = confirm_cfg(baseline={"confirm_wait_s": 0.2})
    _speed_reference(path, cfg)
    s = Script()
    s.throughputs = [throughput(100.0), throughput(120.0)]
    t0 = time.monotonic()
    report, said, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    assert time.monotonic() - t0 >= 0.2  # it waited before measuring again
    assert s.calls[-4:] == [
        ("identity", "after throughput"),
        ("throughput", 4 + 64),
        ("health", "after the throughput phase"),
        ("identity", "after the baseline confirmation"),
    ]
    assert [c for c in s.calls if c[0] in ("throughput", "single_stream")] == [
        ("single_stream",),
        ("throughput", 68),
        ("throughput", 68),
    ]
    assert (
        "total_token_throughput below the group's reference; measuring throughput again in 0.2s "
        "(a regression must persist: baseline.confirm)" in said
    )
    conf = report["baseline"]["confirmation"]
    assert conf["wait_s"] == 0.2 and conf["remeasured"] == ["throughput"]
    assert list(conf["failed_first"]) == ["baseline.total_token_throughput"]
    assert conf["failed_first"]["baseline.total_token_throughput"].startswith(
        "FAILED regression: total_token_throughput: 100.0 tok/s vs baseline 200.0 tok/s"
    )
    assert report["phases"]["throughput_first"]["total_throughput"] == pytest.approx(100.0)
    assert report["phases"]["throughput"]["total_throughput"] == pytest.approx(120.0)
    assert "throughput.confirmation.failed_requests" in names(report)
    assert names(report).count("throughput.failed_requests") == 1
    assert report["failed_checks"] == ["baseline.total_token_throughput"]
    assert "single_stream_first" not in report["phases"]


def test_a_single_stream_regression_is_measured_again_alone(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    cfg = confirm_cfg()
    _speed_reference(path, cfg)
    s = Script()
    s.singles = [single(5.0), single(10.0)]
    report, said, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    assert [c for c in s.calls if c[0] in ("throughput", "single_stream")] == [
        ("single_stream",),
        ("throughput", 68),
        ("single_stream",),
    ]
    assert s.calls[-3:] == [
        ("single_stream",),
        ("health", "after the single stream"),
        ("identity", "after the baseline confirmation"),
    ]
    assert (
        "single_stream_decode_tok_s below the group's reference; measuring single_stream again in 0s "
        "(a regression must persist: baseline.confirm)" in said
    )
    assert report["baseline"]["confirmation"]["remeasured"] == ["single_stream"]
    assert report["phases"]["single_stream_first"]["decode_tok_s"] == 5.0
    assert report["phases"]["single_stream"]["decode_tok_s"] == 10.0
    assert report["verdict"] == "pass"  # the dip did not persist
    assert check(report, "baseline.single_stream_decode_tok_s")["message"].startswith(
        "single_stream_decode_tok_s: 10.0 tok/s vs baseline 10.0 tok/s"
    )
    assert "single_stream.confirmation.decode_tok_s" not in names(report)  # no floor configured: no check


def test_both_regressions_are_measured_again_single_stream_first(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    cfg = confirm_cfg(single_stream={"min_decode_tok_s": 1})
    _speed_reference(path, cfg)
    s = Script()
    s.singles = [single(5.0), single(5.0)]
    s.throughputs = [throughput(100.0), throughput(100.0)]
    report, said, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    assert [c for c in s.calls if c[0] in ("throughput", "single_stream")] == [
        ("single_stream",),
        ("throughput", 68),
        ("single_stream",),
        ("throughput", 68),
    ]
    assert (
        "total_token_throughput, single_stream_decode_tok_s below the group's reference; measuring single_stream "
        "and throughput again in 0s (a regression must persist: baseline.confirm)" in said
    )
    assert report["baseline"]["confirmation"]["remeasured"] == ["single_stream", "throughput"]
    assert [n for n in names(report) if ".confirmation." in n] == [
        "single_stream.confirmation.decode_tok_s",
        "throughput.confirmation.failed_requests",
    ]
    assert report["failed_checks"] == ["baseline.total_token_throughput", "baseline.single_stream_decode_tok_s"]


def test_a_server_that_dies_in_the_single_stream_confirmation_is_not_measured_further(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    cfg = confirm_cfg()
    _speed_reference(path, cfg)
    s = Script()
    s.singles = [single(5.0), SingleStream([failed("connect", "refused")], 9)]
    s.throughputs = [throughput(100.0)]

    async def dies() -> None:  # the second single stream finds the server gone
        if len([c for c in s.calls if c[0] == "single_stream"]) == 2:
            s.unhealthy["after the single stream"] = "connection refused"

    s.hooks["single_stream"] = dies
    report, _, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    assert [c for c in s.calls if c[0] in ("throughput", "single_stream")] == [
        ("single_stream",),
        ("throughput", 68),
        ("single_stream",),
    ]
    assert s.calls[-1] == ("identity", "after the baseline confirmation")
    assert "single_stream.confirmation.server_healthy_after" in report["failed_checks"]


@pytest.mark.parametrize("why", ["confirm off", "no regression", "reference unusable"])
def test_no_confirmation_without_a_regression_to_confirm(monkeypatch, tmp_path, why):
    path = tmp_path / "b.json"
    cfg = confirm_cfg(baseline={"confirm": why != "confirm off"})
    if why == "reference unusable":
        path.write_text("{oops")
    else:
        _speed_reference(path, cfg)
    s = Script()
    s.throughputs = [throughput(200.0 if why == "no regression" else 100.0)]
    report, said, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    assert [c for c in s.calls if c[0] in ("throughput", "single_stream")] == [("single_stream",), ("throughput", 68)]
    assert "confirmation" not in report["baseline"]
    assert not [x for x in said if "again in" in x]


def test_no_confirmation_without_a_baseline(monkeypatch):
    s = Script()
    s.throughputs = [throughput(1.0)]
    _report, _, _ = run(s, monkeypatch, confirm_cfg())
    assert [c for c in s.calls if c[0] == "throughput"] == [("throughput", 68)]
    assert s.calls[-1] == ("identity", "after throughput")


def test_a_down_server_is_not_confirmed(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    cfg = confirm_cfg()
    _speed_reference(path, cfg)
    s = Script()
    s.throughputs = [throughput(100.0)]
    s.unhealthy["after the throughput phase"] = "refused"
    report, _, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    assert [c for c in s.calls if c[0] == "throughput"] == [("throughput", 68)]
    assert "confirmation" not in report["baseline"]


# ----- stops: a signal, the deadline, the gate's own error -----


async def _sigint() -> None:
    # without the gate's handler the signal would end the whole test session (KeyboardInterrupt)
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.sleep(30)  # the gate's handler cancels this wait


@pytest.mark.parametrize(
    ("method", "phase", "done_before"),
    [
        ("readiness", "readiness", 0),
        ("server_info", "server info", 1),
        ("sampler_warmup", "sampler warm-up", 4),
        ("probes", "answers", 5),
        ("accuracy", "accuracy", 7),
        ("single_stream", "single_stream", 9),
        ("throughput", "throughput", 12),
        ("stability_step", "stability step 1/2", 15),
    ],
)
def test_a_signal_stops_the_phase_in_progress_and_the_report_names_it(
    monkeypatch, tmp_path, method, phase, done_before
):
    log = tmp_path / "server.log"
    log.write_text("started\n")
    s = Script()
    s.probe_results = [ProbeResult(1, "p", answered())]
    s.hooks[method] = _sigint
    cfg = config(answers={"probes": [{"prompt": "p", "expect": "answer"}]})
    t0 = time.monotonic()
    report, said, gate = run(s, monkeypatch, cfg, logs=[str(log)])
    assert time.monotonic() - t0 < 10  # not the 30 s wait: cancelled
    calls = [*HEALTHY_CALLS[:5], *WITH_PROBES, *HEALTHY_CALLS[5:]]
    assert s.calls == calls[: done_before + 1]  # nothing asked after the signal
    assert report["stopped"] == {"phase": phase, "reason": "it received SIGINT"}
    text = f"FAILED stopped in phase {phase} because it received SIGINT; the report holds what was measured"
    assert check(report, "gate.stopped") == {
        "name": "gate.stopped",
        "passed": False,
        "measured": phase,
        "required": None,
        "unit": "",
        "message": text,
        "op": "",
    }
    assert text in said and gate.interrupted is True
    assert report["skipped"][-1] == f"{phase}: stopped, it received SIGINT"
    # a signal leaves no time for the log: it is not read, and that fails
    assert check(report, "logs.crash_signatures")["message"] == (
        "FAILED cannot read log: the gate stopped before its logs were read (it received SIGINT)"
    )
    assert "logs" not in report["phases"]


def test_a_signal_while_the_log_is_fetched_stops_in_phase_logs(monkeypatch, tmp_path):
    """`docker logs` (a stub that signals the gate and waits) is cut: the log is unread and that fails."""
    from _gate_helpers import stub_docker

    stub_docker(tmp_path, monkeypatch, "kill -INT $PPID\nexec sleep 30")
    off = {"enabled": False}
    cfg = config(accuracy=off, single_stream=off, throughput=off, stability=off)
    t0 = time.monotonic()
    report, _, _ = run(Script(), monkeypatch, cfg, logs=["docker:srv"], report_dir=str(tmp_path / "rep"))
    assert time.monotonic() - t0 < 10  # not the 30 s fetch: cut
    assert report["stopped"] == {"phase": "logs", "reason": "it received SIGINT"}
    assert check(report, "logs.crash_signatures") == {
        "name": "logs.crash_signatures",
        "passed": False,
        "measured": None,
        "required": 0,
        "unit": "matches",
        "message": "FAILED cannot read log: the gate stopped before its logs were read (it received SIGINT)",
        "op": "",
    }
    # a stop is a stop wherever it comes: the check says where and why, once
    assert [c["message"] for c in report["checks"] if c["name"] == "gate.stopped"] == [
        "FAILED stopped in phase logs because it received SIGINT; the report holds what was measured"
    ]
    assert report["skipped"][-1] == "logs: stopped, it received SIGINT"


def test_a_signal_in_the_confirmation_is_reported_there(monkeypatch, tmp_path):
    path = tmp_path / "b.json"
    cfg = confirm_cfg()
    _speed_reference(path, cfg)
    s = Script()
    s.throughputs = [throughput(100.0)]
    calls: list[int] = []

    async def second_run_signals() -> None:
        calls.append(1)
        if len(calls) == 2:
            await _sigint()

    s.hooks["throughput"] = second_run_signals
    report, _, _ = run(s, monkeypatch, cfg, baseline_path=str(path))
    assert report["stopped"] == {"phase": "baseline confirmation", "reason": "it received SIGINT"}
    assert report["baseline"]["confirmation"]["remeasured"] == ["throughput"]


def test_a_gate_error_outside_the_phases_is_a_stop_in_phase_start(monkeypatch):
    def broken(*args: Any) -> None:
        raise RuntimeError("no measurer")

    monkeypatch.setattr(gate_module, "Measurer", broken)
    said: list[str] = []
    o = GateOptions(url="http://h:1", config=parse_config(config()), config_path="flow.yml")
    report = asyncio.run(Gate(o, said.append).run())
    assert report["stopped"] == {"phase": "start", "reason": "gate error RuntimeError: no measurer"}
    assert report["skipped"] == ["start: stopped, gate error RuntimeError: no measurer", "logs: no --log file given"]
    assert report["failed_checks"] == ["gate.stopped"]


def test_the_measuring_stops_a_reserve_before_the_deadline_and_the_logs_are_still_read(monkeypatch, tmp_path):
    """deadline_s 20: measuring stops 2 s (a tenth) before it; the log scan still runs in those 2 s."""
    log = tmp_path / "server.log"
    log.write_text("earlier line\n")
    s = Script()

    async def slow() -> None:
        with log.open("a") as f:
            f.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")
        await asyncio.sleep(30)  # cut at the measuring reserve

    s.hooks["throughput"] = slow
    gates: list[Gate] = []
    real_sizes = gate_module._sizes

    def late_start(logs: list[str]) -> dict[str, int]:  # the gate started 17.5 s ago: 2.5 s left, 0.5 to measure
        gates[0].t0 -= 17.5
        return real_sizes(logs)

    monkeypatch.setattr(gate_module, "_sizes", late_start)
    t0 = time.monotonic()
    report, _said, gate = run(s, monkeypatch, config(deadline_s=20), logs=[str(log)], made=gates.append)
    assert 0.3 < time.monotonic() - t0 < 10  # not the 30 s: cut
    assert report["stopped"] == {"phase": "throughput", "reason": "the gate's deadline_s (20s) passed"}
    assert gate.interrupted is False
    assert check(report, "logs.crash_signatures")["passed"] is False  # read: the crash written during the gate
    assert report["phases"]["logs"]["offsets"] == {str(log): len("earlier line\n")}
    assert report["skipped"][-1] == "throughput: stopped, the gate's deadline_s (20s) passed"


# ----- _bounded and _stop on their own -----


def bare_gate(deadline_s: float = 100.0) -> Gate:
    o = GateOptions(url="http://h:1", config=parse_config({"deadline_s": deadline_s}), config_path="x.yml")
    return Gate(o, lambda _: None)


async def _value(v: Any, wait: float = 0.0) -> Any:
    await asyncio.sleep(wait)
    return v


def test_a_stop_keeps_the_first_reason_and_a_hard_one_interrupts():
    g = bare_gate()
    g._stop("first", False)
    assert (g.stopped, g.interrupted) == ("first", False)
    g._stop("second", True)
    assert (g.stopped, g.interrupted) == ("first", True)


@pytest.mark.parametrize(
    ("measuring", "hard", "cancelled"), [(True, False, True), (False, False, False), (False, True, True)]
)
def test_a_stop_cancels_measuring_always_and_other_work_only_when_hard(measuring, hard, cancelled):
    async def go() -> tuple[Any, Gate]:
        g = bare_gate()
        asyncio.get_running_loop().call_later(0.05, g._stop, "why", hard)
        return await g._bounded(_value("done", 0.3), measuring=measuring), g

    got, g = asyncio.run(go())
    assert got == (None if cancelled else "done")
    assert g.stopped == "why" and g._task is None and g._measuring is False


def test_after_a_hard_stop_nothing_more_runs():
    started: list[str] = []

    async def work() -> str:
        started.append("yes")
        return "done"

    async def go(g: Gate, measuring: bool) -> Any:
        return await g._bounded(work(), measuring=measuring)

    g = bare_gate()
    g._stop("it received SIGTERM", True)
    assert asyncio.run(go(g, False)) is None and started == []
    soft = bare_gate()
    soft._stop("deadline", False)
    assert asyncio.run(go(soft, True)) is None and started == []  # no more measuring after a soft stop...
    assert asyncio.run(go(soft, False)) == "done" and started == ["yes"]  # ...but the report's work runs


def test_measuring_ends_a_reserve_before_the_deadline():
    async def go() -> tuple[Any, float, Gate]:
        g = bare_gate(100.0)  # reserve 10 s
        g.t0 = time.monotonic() - 89.5  # 10.5 s left: measuring may go on 0.5 s more
        t0 = time.monotonic()
        got = await g._bounded(_value("done", 30.0), measuring=True)
        return got, time.monotonic() - t0, g

    got, took, g = asyncio.run(go())
    assert got is None and 0.35 < took < 10  # cut at the reserve, not the 30 s
    assert (g.stopped, g.interrupted) == ("the gate's deadline_s (100s) passed", False)


def test_other_work_is_not_held_to_the_measuring_reserve():
    async def go() -> tuple[Any, Gate]:
        g = bare_gate(100.0)
        g.t0 = time.monotonic() - 89.9  # the measuring reserve would end in 0.1 s
        return await g._bounded(_value("done", 0.4)), g

    got, g = asyncio.run(go())
    assert got == "done" and g.stopped == ""


def test_the_measuring_timer_ends_with_the_measuring():
    async def go() -> Gate:
        g = bare_gate(100.0)
        g.t0 = time.monotonic() - 89.8  # the reserve starts in 0.2 s
        assert await g._bounded(_value("done"), measuring=True) == "done"
        await asyncio.sleep(0.4)
        return g

    assert asyncio.run(go()).stopped == ""


def test_an_error_of_the_gate_is_a_stop_with_its_message_cut_to_300_characters():
    async def broken() -> None:
        raise ValueError("x" * 400)

    async def go(g: Gate) -> Any:
        return await g._bounded(broken(), measuring=True)

    g = bare_gate()
    assert asyncio.run(go(g)) is None
    assert g.stopped == ("gate error ValueError: " + "x" * 400)[:300] and len(g.stopped) == 300
    g2 = bare_gate()
    g2._stop("earlier", False)
    assert asyncio.run(g2._bounded(broken())) is None and g2.stopped == "earlier"


def test_a_cancel_that_is_no_stop_of_the_gate_propagates():
    async def cancelled() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(bare_gate()._bounded(cancelled(), measuring=True))


def test_remaining_counts_down_from_the_start():
    g = bare_gate(50.0)
    assert 49.0 < g.remaining() <= 50.0
    g.t0 -= 20
    assert 29.0 < g.remaining() <= 30.0
