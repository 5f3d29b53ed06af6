"""Judging: pure functions from measured results (validate/phases.py) and the config to named checks.

Nothing here does I/O, so each verdict rule can be read and tested alone with
hand-built results. A check's ``measured`` and ``required`` are the values compared
with ``op``; its message is what the operator reads (``FAILED ...`` when it failed).

The rules that decide what an answer is live here too: the degenerate-answer rule (which
the client applies to every streamed request, so this module imports no phase at run
time) and the accuracy rules (how an answer's number is read, what a drop beyond noise is).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .config import GateConfig
from .metrics import KEY_METRICS, ROBUST_RUNS, RequestResult, Spread, key_metric_spreads
from .userregex import compile_user_regex

if TYPE_CHECKING:  # only types: the phases import this module (the answer rule) at run time
    from .load import LoadResult
    from .logscan import LogScanResult
    from .phases import (
        AccuracyResult,
        Health,
        Identity,
        ProbeResult,
        Readiness,
        ReferenceResult,
        SingleStream,
        StabilityStep,
        Throughput,
        Warmup,
    )

# ----- what counts as an answer -----
#
# A broken NVFP4 GEMM or attention kernel, or NaN logits that SGLang >= 0.5.17 silently
# sanitizes before sampling, look the same from outside: the server streams at full speed,
# finishes with ``length`` and says nothing, but every answer is one token over and over
# ("!!!!...", token id 0). A gate that only measures speed passes that server. So each
# request's answer is judged, in every phase (validate/client.py applies the rule), and a
# degenerate answer is a failed request (reason ``degenerate``), counted like an abort.
#
# The rule, calibrated on what a real SGLang 0.5.17 server answered (a random-weight 0.9 B
# Llama on an H200, docs/real-sglang-h200.md: 54-63 distinct tokens of 64, no token more than
# 3 times in a row; the recorded transcripts in tests/fixtures): an answer of at least
# ``answers.min_tokens`` tokens is degenerate when
#
# * it has no text at all, or more than half of its characters are U+FFFD (not decodable);
# * one token id (``/generate`` streams the ids) repeats back to back over more than
#   ``answers.max_repeat_fraction`` of the answer;
# * without ids (the OpenAI routes stream text pieces): one piece, or one non-blank
#   character, repeats back to back over more than that share.
#
# Honest text has runs of 1-3; a broken kernel gives one run over the whole answer. The
# defaults (16 tokens, half the answer) leave a wide margin on both sides.

REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class AnswerRule:
    """The two numbers of the rule (``answers.min_tokens``, ``answers.max_repeat_fraction``)."""

    min_tokens: int = 16
    max_repeat_fraction: float = 0.5


def longest_run(items: Sequence[Any]) -> tuple[int, Any]:
    """(length, item) of the longest back-to-back repetition in ``items``; (0, None) when empty."""
    best, best_item, run = 0, None, 0
    for i, item in enumerate(items):
        run = run + 1 if i and item == items[i - 1] else 1
        if run > best:
            best, best_item = run, item
    return best, best_item


def _show(text: str) -> str:
    return repr(text[:24] + ("..." if len(text) > 24 else ""))


def degenerate(
    rule: AnswerRule, tokens: int, text: str, ids: Sequence[int] | None = None, pieces: Sequence[str] | None = None
) -> str:
    """Why this answer is degenerate, or "" when it is an answer.

    ``tokens``: how many tokens were streamed; ``ids``: the token ids when the route streams
    them; ``pieces``: the streamed text pieces (OpenAI routes).
    """
    if tokens < rule.min_tokens:
        return ""  # too short to tell a loop from an answer
    if not text.strip():
        return f"{tokens} tokens but no text"
    bad = text.count(REPLACEMENT)
    if bad * 2 > len(text):
        return f"not decodable: {bad} of {len(text)} characters are U+FFFD"
    limit = rule.max_repeat_fraction
    if ids:
        run, tok = longest_run(ids)
        if run > limit * len(ids):
            return f"token id {tok} repeated {run} times in a row ({run} of {len(ids)} tokens): {_show(text)}"
        return ""
    if pieces and len(pieces) >= rule.min_tokens:
        run, piece = longest_run(pieces)
        if run > limit * len(pieces):
            return f"the piece {piece!r} repeated {run} times in a row ({run} of {len(pieces)} pieces)"
    chars = "".join(text.split())
    run, ch = longest_run(chars)
    if len(chars) >= rule.min_tokens and run > limit * len(chars):
        return f"the character {ch!r} repeated {run} times in a row ({run} of {len(chars)} characters): {_show(text)}"
    return ""


@dataclass
class Check:
    """One gate decision; ``required`` is compared to ``measured`` with ``op``."""

    name: str
    passed: bool
    measured: float | int | str | None
    required: float | int | str | None
    unit: str
    message: str
    op: str = ""


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
    return str(v)


def _msg(ok: bool, text: str) -> str:
    return text if ok else "FAILED " + text


def threshold(name: str, measured: float | None, required: float | None, op: str, unit: str, what: str) -> Check | None:
    """A floor (op '>=') or ceiling (op '<=') check; None when the config sets no threshold.

    ``measured`` None means nothing completed to measure: a failed check, never a pass
    (a latency ceiling must not pass because every request failed).
    """
    if required is None:
        return None
    if measured is None:
        return Check(name, False, None, required, unit, f"FAILED {what}: not measured, no request completed", op)
    ok = measured >= required if op == ">=" else measured <= required
    verb = "at least" if op == ">=" else "at most"
    text = f"{what}: {fmt(measured)} {unit} (required {verb} {fmt(required)} {unit})"
    return Check(name, ok, round(measured, 3), required, unit, _msg(ok, text), op)


def readiness(r: Readiness, timeout_s: float) -> Check:
    if r.ready:
        return Check("readiness", True, r.seconds, timeout_s, "s", f"server ready after {r.seconds:.1f}s", "<=")
    text = f"server not ready within {timeout_s:g}s (readiness.timeout_s); last: {r.last_error}"
    return Check("readiness", False, None, timeout_s, "s", "FAILED " + text, "<=")


def health(phase: str, h: Health) -> Check | None:
    """A failed /health after a phase (None while healthy: a healthy probe is no decision)."""
    if h.healthy:
        return None
    text = f"/health {h.when}: {h.error} (stability.health_timeout_s = {h.timeout_s:g}s): the server died or is wedged"
    return Check(f"{phase}.server_healthy_after", False, "unhealthy", "healthy", "", "FAILED " + text)


def reasons_text(reasons: dict[str, int]) -> str:
    """'abort x55, short x2': the failure histogram in one line."""
    return ", ".join(f"{k} x{v}" for k, v in reasons.items())


def failed_requests(
    prefix: str,
    failed: int,
    total: int,
    max_failed: int,
    reasons: dict[str, int],
    first_error: str,
    timed_out: bool = False,
    deadline_s: float = 0.0,
) -> Check:
    ok = failed <= max_failed
    late = f" ({failed} not finished within the {deadline_s:g}s deadline or failed)" if timed_out else ""
    text = f"{prefix}: {failed} of {total} requests failed{late} (allowed {max_failed})"
    if failed:
        text += f"; by reason: {reasons_text(reasons)}"
    if not ok and first_error:
        text += f"; first error: {first_error}"
    return Check(f"{prefix}.failed_requests", ok, failed, max_failed, "requests", _msg(ok, text), "<=")


def single_stream(ss: SingleStream, cfg: GateConfig) -> list[Check]:
    sc = cfg.single_stream
    r = ss.request
    if not r.success:
        text = f"single-stream request failed ({r.failure}): {r.error}"
        return [Check("single_stream.request", False, r.failure, "success", "", "FAILED " + text)]
    out = [
        threshold(
            "single_stream.decode_tok_s",
            ss.decode_tok_s,
            sc.min_decode_tok_s,
            ">=",
            "tok/s",
            "single-stream decode speed",
        ),
        threshold("single_stream.ttft_ms", r.ttft * 1000, sc.max_ttft_ms, "<=", "ms", "single-stream TTFT"),
    ]
    return [c for c in out if c is not None]


def _gated_load_metrics(cfg: GateConfig) -> list[str]:
    """Load metrics compared relatively or against a floor: those must be stable across the repeats.

    Throughput floors and every load metric in ``baseline.metrics`` count. Latency ceilings
    do not: they are absolute limits far above a healthy median, and TTFT swings far more
    than throughput from run to run on a real server (docs/measurement.md), so checking its spread
    would fail healthy hosts. Put a latency in ``baseline.metrics`` to have its spread checked.
    """
    tc = cfg.throughput
    floors = {"total_token_throughput": tc.min_total_tok_s, "output_token_throughput": tc.min_output_tok_s}
    names = [k for k, v in floors.items() if v is not None]
    names += [m for m in cfg.baseline.metrics if KEY_METRICS[m][2] is not None and m not in names]
    return names


def _settled(w: Spread, cfg: GateConfig) -> bool:
    """Runs that agree within max_spread, or (from ROBUST_RUNS runs) a median known within max_noise."""
    tc = cfg.throughput
    if (w.judged or 0.0) <= tc.max_spread:
        return True
    return w.n >= ROBUST_RUNS and w.noise is not None and w.noise <= tc.max_noise


def spread(tp: Throughput, cfg: GateConfig) -> Check | None:
    """'Unstable measurement': a compared metric whose repeats disagree and whose median is not known.

    Runs that agree within ``max_spread`` pass. A healthy GPU server's runs often do not: on an
    idle H100 (docs/real-sglang-h200.md, 8 B model) single runs varied with a CV of 8-9 %, so the
    middle half of 4-7 runs spans 9-15 % and a fixed spread limit failed one healthy gate in eight.
    What the floors and the baseline need is the median, so from ROBUST_RUNS runs a metric also
    passes when its median's relative standard error is within ``max_noise``; runs that really
    scatter (a throttling card, a neighbour) keep a wide standard error and still fail.

    Neither a pass nor a regression: the host could not be measured, and the message
    says which metric moved and how far, so the operator re-runs or finds the noise.
    """
    return _spread(tp.runs, cfg)


def _spread(runs: list[LoadResult], cfg: GateConfig) -> Check | None:
    if len(runs) < 2:
        return None
    tc = cfg.throughput
    spreads = key_metric_spreads([r.metrics for r in runs])
    gated = _gated_load_metrics(cfg)
    if not gated:
        return None
    unsettled = [k for k in gated if not _settled(spreads[k], cfg)]
    worst = max(unsettled or gated, key=lambda k: spreads[k].judged or 0.0)
    w = spreads[worst]
    value = w.judged or 0.0
    ok = not unsettled
    unit = KEY_METRICS[worst][1]
    which = "spread" if w.n < ROBUST_RUNS else "spread of the middle half"
    text = (
        f"measurement stability over {len(runs)} runs: {worst} {which} {value:.1%} "
        f"(min {fmt(w.min)} / median {fmt(w.median)} / max {fmt(w.max)} {unit}; allowed {tc.max_spread:.0%})"
    )
    if value > tc.max_spread and w.noise is not None and w.n >= ROBUST_RUNS:
        settled = "within" if ok else "above"
        text += f"; the median's standard error {w.noise:.1%}, {settled} max_noise {tc.max_noise:.0%}"
    if ok and value > tc.max_spread:
        noise = w.noise or 0.0
        return Check("throughput.spread", True, round(noise, 4), tc.max_noise, "ratio", _msg(True, text), "<=")
    if not ok:
        text = "unstable measurement: " + text + "; the medians are not trusted for floors or the baseline"
    return Check("throughput.spread", ok, round(value, 4), tc.max_spread, "ratio", _msg(ok, text), "<=")


def throughput(tp: Throughput, cfg: GateConfig) -> list[Check]:
    tc = cfg.throughput
    if tp.refused:
        return [Check("throughput.open_files", False, None, None, "", f"FAILED throughput refused: {tp.refused}")]
    med = tp.median
    total = med["completed"] + med["failed"]
    out: list[Check | None] = [
        failed_requests(
            "throughput",
            med["failed"],
            total,
            tc.max_failed,
            med["failure_reasons"],
            med["first_error"],
            tp.timed_out,
            tp.deadline_s,
        ),
        spread(tp, cfg),
    ]
    lat = med["completed"] > 0  # latencies of zero completed requests are not measurements
    n = len(tp.runs)
    of = f" (median of {n} runs)" if n > 1 else ""
    out += [
        threshold(
            "throughput.total_tok_s",
            med["total_throughput"],
            tc.min_total_tok_s,
            ">=",
            "tok/s",
            "total token throughput" + of,
        ),
        threshold(
            "throughput.output_tok_s",
            med["output_throughput"],
            tc.min_output_tok_s,
            ">=",
            "tok/s",
            "output token throughput" + of,
        ),
        threshold(
            "throughput.p99_ttft_ms",
            med["p99_ttft_ms"] if lat else None,
            tc.max_p99_ttft_ms,
            "<=",
            "ms",
            "p99 TTFT" + of,
        ),
        threshold(
            "throughput.p99_e2e_ms",
            med["p99_e2e_latency_ms"] if lat else None,
            tc.max_p99_e2e_ms,
            "<=",
            "ms",
            "p99 E2E latency" + of,
        ),
        threshold(
            "throughput.mean_e2e_ms",
            med["mean_e2e_latency_ms"] if lat else None,
            tc.max_mean_e2e_ms,
            "<=",
            "ms",
            "mean E2E latency" + of,
        ),
    ]
    return [c for c in out if c is not None]


def spread_settled(runs: list[LoadResult], cfg: GateConfig) -> bool:
    """Whether the throughput runs so far agree well enough to stop repeating (the phase asks this)."""
    c = _spread(runs, cfg)
    return c is None or c.passed


def warmups(tp: Throughput) -> Check | None:
    """The load's warm-up requests are untimed, never unjudged: one that fails fails the gate."""
    bad = [r for r in tp.warmup if not r.success]
    if not tp.warmup:
        return None
    n = len(tp.warmup)
    if not bad:
        return Check("throughput.warmup", True, 0, 0, "requests", f"{n} warm-up request(s) answered", "<=")
    text = f"FAILED {len(bad)} of {n} warm-up requests failed ({bad[0].failure}): {bad[0].error}"
    return Check("throughput.warmup", False, len(bad), 0, "requests", text, "<=")


def sampler_warmup(w: Warmup) -> Check:
    """The first sampled request: a sampling kernel missing for the GPU fails exactly this kind."""
    r = w.request
    if r.success:
        return Check(
            "sampler_warmup.request", True, w.seconds, None, "s", f"sampled warm-up answered in {w.seconds:g}s"
        )
    text = f"FAILED the sampled warm-up request failed ({r.failure}): {r.error}"
    return Check("sampler_warmup.request", False, r.failure, "success", "", text)


def health_latency(healths: list[Health], limit_s: float) -> Check | None:
    """/health after ready must answer within readiness.max_health_latency_s (SGLang's is a 1-token step)."""
    answered = [h for h in healths if h.healthy]
    if not answered:
        return None
    slow = max(answered, key=lambda h: h.seconds)
    ok = slow.seconds <= limit_s
    text = f"slowest /health answer {slow.seconds:.2f}s ({slow.when}; allowed {limit_s:g}s: max_health_latency_s)"
    return Check("server.health_latency", ok, slow.seconds, limit_s, "s", _msg(ok, text), "<=")


def model(expected: str | None, names: list[str]) -> Check:
    """The server serves the model that was deployed (config ``model`` / --model)."""
    if expected is None:
        text = f"serves {', '.join(names) or 'no name'} (no expected model given: not checked)"
        return Check("server.model", True, ", ".join(names), None, "", text)
    ok = expected in names
    text = f"expected model {expected!r}; the server names {', '.join(repr(n) for n in names) or 'nothing'}"
    return Check("server.model", ok, ", ".join(names), expected, "", _msg(ok, text), "in")


def restarted(ids: list[Identity], log_restarts: list[str], earlier: Sequence[str] = ()) -> Check | None:
    """The server restarted during the gate: its identity changed between two reads, or its log shows a
    start banner after the gate began (Docker's restart policy hides a crash that way).

    ``earlier``: starts seen before the gate began (an earlier run of the server in the same log, a
    restart during start-up): reported as such, not a restart during the gate; with a restart during
    the gate as well, the server is crash-looping, and the message says so."""

    def failed(how: str) -> Check:
        text = f"FAILED the server restarted {how}"
        if earlier:
            seen = "; ".join(earlier)
            text = f"FAILED the server is crash-looping: it started before the gate ({seen}) and restarted {how}"
        return Check("server.restarted", False, "restarted", "same process", "", text[:1000])

    if log_restarts:
        return failed("during the gate: its log shows a new start: " + "; ".join(log_restarts))
    before = f"; before the gate: {'; '.join(earlier)} (not during it)" if earlier else ""
    if len(ids) < 2:
        if not earlier:
            return None
        return Check(
            "server.restarted", True, "same process", "same process", "", f"no restart during the gate{before}"
        )
    first = ids[0]
    for prev, now in itertools.pairwise(ids):
        changed = [
            f"{k} {prev.facts.get(k)!r} -> {now.facts.get(k)!r}"
            for k in sorted(set(prev.facts) | set(now.facts))
            if k != "docker_error" and prev.facts.get(k) != now.facts.get(k) and now.facts
        ]
        if changed:
            return failed(f"between '{prev.when}' and '{now.when}': " + "; ".join(changed))
    text = (
        f"same server process from '{first.when}' to '{ids[-1].when}' ({', '.join(sorted(first.facts)) or 'no facts'})"
    )
    return Check("server.restarted", True, "same process", "same process", "", text + before)


def probes(results: list[ProbeResult], cfg: GateConfig) -> list[Check]:
    """Each user probe's answer contains its ``expect`` substring or matches its ``expect_regex``."""
    out = []
    for res in results:
        p = cfg.answers.probes[res.index - 1]
        name = f"answers.probe_{res.index}"
        r = res.request
        want = f"contains {p.expect!r}" if p.expect is not None else f"matches /{p.expect_regex}/"
        if not r.success:
            out.append(
                Check(
                    name,
                    False,
                    r.failure,
                    want,
                    "",
                    f"FAILED probe {res.index}: request failed ({r.failure}): {r.error}",
                )
            )
            continue
        if p.expect is not None:
            ok = p.expect in r.text
        else:
            ok = compile_user_regex(p.expect_regex or "").search(r.text) is not None
        shown = r.text[:120].replace("\n", " ")
        text = f"probe {res.index} ({res.prompt[:60]!r}): the answer {'' if ok else 'does not '}{want}: {shown!r}"
        out.append(Check(name, ok, shown, want, "", _msg(ok, text)))
    return out


def stability_step(st: StabilityStep, cfg: GateConfig) -> Check:
    sc = cfg.stability
    name = f"stability.concurrency_{st.concurrency}"
    if st.refused:
        return Check(
            name,
            False,
            None,
            sc.max_failed,
            "failed requests",
            f"FAILED stability {st.label} refused: {st.refused}",
            "<=",
        )
    assert st.load is not None
    m = st.load.metrics
    healthy = bool(st.health and st.health.healthy)
    ok = healthy and m.failed <= sc.max_failed
    facts = f"{m.failed} of {st.requests} requests failed (allowed {sc.max_failed})"
    if m.failed:
        facts += f" [{reasons_text(m.failure_reasons)}]"
    facts += ", " + (
        f"total {m.total_throughput:,.0f} tok/s, p99 E2E {m.p99_e2e_latency_ms:,.0f} ms"
        if m.completed
        else "none completed"
    )
    if st.load.timed_out:
        facts += f", {sc.step_timeout_s:g}s step deadline hit"
    if ok:
        msg = f"stability {st.label}: ok: {facts}; /health ok after the step"
    elif not healthy:
        err = st.health.error if st.health else "not probed"
        msg = f"FAILED stability {st.label}: the server died or wedged at this step: /health after the step: {err}"
        msg += f"; {facts}"
        if m.first_error:
            msg += f"; first error: {m.first_error}"
    else:
        msg = f"FAILED stability {st.label}: {facts}; first error: {m.first_error}"
    return Check(name, ok, m.failed, sc.max_failed, "failed requests", msg, "<=")


def output(results: list[RequestResult]) -> Check | None:
    """NaN or empty answers among the requests whose stream ended (SGLang's NaN detector, empty text)."""
    ended = [r for r in results if r.success or r.failure in ("nan", "short")]
    if not ended:
        return None
    bad = [r for r in ended if r.nan_output]
    example = ""
    if bad:
        fr = bad[0].finish_reason or {}
        example = f"; e.g. finish_reason {fr}" if fr else "; e.g. empty text"
    text = f"{len(bad)} of {len(ended)} finished requests returned empty text or NaN{example}"
    return Check("output.empty_or_nan", not bad, len(bad), 0, "requests", _msg(not bad, text), "<=")


def logs(scan: LogScanResult) -> Check:
    first = scan.first
    n = len(scan.files)
    if first is None and not scan.errors:
        return Check(
            "logs.crash_signatures",
            True,
            0,
            0,
            "matches",
            f"no crash signature in {n} log file(s) ({scan.lines_scanned:,} lines)",
            "<=",
        )
    if first is None:
        return Check(
            "logs.crash_signatures",
            False,
            None,
            0,
            "matches",
            "FAILED cannot read log: " + "; ".join(scan.errors),
            "<=",
        )
    counts = ", ".join(f"{k} x{v}" for k, v in scan.counts.items())
    text = f"FAILED crash signature '{first.signature}' in {first.file}:{first.line_no}: {first.line} (all: {counts})"
    return Check("logs.crash_signatures", False, sum(scan.counts.values()), 0, "matches", text, "<=")


def allowed_drop(cfg: GateConfig, ref_noise: float | None, now_noise: float | None) -> tuple[float, str]:
    """How far a key metric may fall below the group's reference before it is a regression.

    At least 1 - tolerance; wider when the two medians are noisy (noise_z x their combined relative
    standard error, measured from the runs), never wider than max_drop: a healthy server's medians
    move by chance (on one idle H200 the gate's medians moved by up to a third between gates,
    docs/real-sglang-h200.md), a regression beyond max_drop fails whatever the noise.
    """
    b = cfg.baseline
    floor = 1 - b.tolerance
    combined = ((ref_noise or 0.0) ** 2 + (now_noise or 0.0) ** 2) ** 0.5
    drop = min(max(floor, b.noise_z * combined), max(b.max_drop, floor))
    if drop > floor:
        return drop, f"allowed drop {drop:.1%}: {b.noise_z:g} x measured noise {combined:.1%}, at most {b.max_drop:.0%}"
    return drop, f"allowed drop {drop:.1%}: 1 - tolerance"


def baseline(
    reference: dict[str, float | None],
    now: dict[str, float | None],
    cfg: GateConfig,
    ref_noise: dict[str, float | None] | None = None,
    now_noise: dict[str, float | None] | None = None,
) -> list[Check]:
    """Key metrics against the group's reference: higher-is-better >= (1 - drop) x ref, latencies
    <= ref / (1 - drop), the drop from :func:`allowed_drop`."""
    out = []
    for name in cfg.baseline.metrics:
        bv, mv = reference.get(name), now.get(name)
        if bv is None or mv is None:
            continue
        higher, unit, _ = KEY_METRICS[name]
        drop, why = allowed_drop(cfg, (ref_noise or {}).get(name), (now_noise or {}).get(name))
        required = bv * (1 - drop) if higher else bv / (1 - drop)
        op = ">=" if higher else "<="
        ok = mv >= required if higher else mv <= required
        text = f"{name}: {fmt(mv)} {unit} vs baseline {fmt(bv)} {unit} (required {op} {fmt(required)}; {why})"
        out.append(
            Check(
                f"baseline.{name}",
                ok,
                round(mv, 3),
                round(required, 3),
                unit,
                text if ok else "FAILED regression: " + text,
                op,
            )
        )
    return out


def verdict(checks: list[Check]) -> str:
    """'pass' only when at least one check ran and every check passed."""
    return "pass" if checks and all(c.passed for c in checks) else "fail"


# ----- comparisons with the group's reference -----
#
# A group's reference (validate/baseline.py) holds the first passing gate's speed figures, its
# reference answers and its accuracy. Whatever keeps a later gate from comparing with it (the
# workload, the engine, the answer or accuracy settings changed, a reference without that part,
# an unreadable file) is a failed check that says what changed and how to accept it: a
# comparison is never switched off in silence. The first gate of a group is "recorded".

NOT_COMPARED = "not compared"
ACCEPT = (
    "to accept the change on purpose, promote this gate to the group's reference: --promote-baseline "
    "(role variable sglang_gate_promote_baseline: true)"
)


def not_compared(name: str, what: str, why: str) -> Check:
    """``what`` could not be compared with the group's reference, ``why``: a failure, with the way out."""
    return Check(
        name,
        False,
        "not compared",
        "compared",
        "",
        f"FAILED {what} not compared with the group's reference: {why}; {ACCEPT}",
    )


def group_reference(path: str, why_not: str, reference_from: str | None) -> Check:
    """``baseline.reference``: the group's reference file, usable for this gate's figures or not.
    ``reference_from``: when the reference was measured; None when the group has none yet."""
    if why_not:
        return not_compared("baseline.reference", "the speed figures were", why_not)
    if reference_from is None:
        text = (
            f"recorded: no reference for this group yet ({path}); this gate is its first, and its figures, "
            "answers and accuracy become the reference when it passes"
        )
        return Check("baseline.reference", True, "recorded", "compared", "", text)
    text = f"compared with the group's reference from {reference_from or 'an unknown time'} ({path})"
    return Check("baseline.reference", True, "compared", "compared", "", text)


def promoted(c: Check) -> Check:
    """Under ``--promote-baseline`` this gate replaces the group's reference on purpose: a comparison
    that could not be made (:func:`not_compared`) is reported as accepted. A comparison that was made
    and failed (a regression, answers that moved, accuracy that dropped) stands: a promotion never
    turns a worse server into the reference."""
    if c.passed or c.measured != NOT_COMPARED:
        return c
    text = "accepted on purpose (--promote-baseline replaces the group's reference): " + c.message.removeprefix(
        "FAILED "
    )
    return replace(c, passed=True, message=text)


def reference(res: ReferenceResult, cfg: GateConfig) -> Check:
    """``answers.reference``: the mean log-likelihood of the group's answers moved by at most the tolerance."""
    tol = cfg.answers.reference.tolerance
    if res.mode == "error":
        text = f"FAILED reference answers: {res.error}"
        return Check("answers.reference", False, None, tol, "nats/token", text, "<=")
    if res.not_compared:
        return not_compared("answers.reference", "the reference answers were", res.not_compared)
    if res.mode == "recorded":
        n = len((res.recorded or {}).get("answers", []))
        text = (
            f"recorded {n} reference answers (the group has none yet; stored with its reference when this gate passes)"
        )
        return Check("answers.reference", True, "recorded", tol, "nats/token", text, "<=")
    worst = res.worst
    ok = worst <= tol
    i = res.deltas.index(worst)
    div = [d for d in res.divergence if d is not None]
    where = f"; greedy answers first diverge at token {min(div)}" if div else "; greedy answers identical"
    text = (
        f"reference answers: mean log-likelihood moved by at most {worst:.4f} nats/token "
        f"(answer {i + 1} of {len(res.deltas)}; allowed {tol:g}){where}"
    )
    return Check("answers.reference", ok, round(worst, 4), tol, "nats/token", _msg(ok, text), "<=")


# ----- accuracy on known answers -----
#
# The questions (validate/arithmetic.py) have exact answers; an answer's number is read as
# SGLang's own few_shot_gsm8k reads it, so a figure here means what SGLang's means. A host is
# judged on the profile's floors (accuracy.min_accuracy, accuracy.max_invalid) on every gate,
# the first of a group included, and, once the group has a reference, on a drop below the
# reference's accuracy beyond what binomial sampling noise explains.

SHOWN_WRONG = 5  # wrong answers kept in the report, for the operator to read


def answer_value(text: str) -> int | None:
    """The answer's number as SGLang's few_shot_gsm8k reads it (``get_answer_value``): commas
    removed, the last run of digits; None (its INVALID) when there is none."""
    numbers = re.findall(r"\d+", text.replace(",", ""))
    return int(numbers[-1]) if numbers else None


@dataclass
class AccuracyGrade:
    """The answers graded: right, with no number (or no answer at all), failed requests."""

    questions: int
    correct: int
    invalid: int
    failed: int
    failure_reasons: dict[str, int] = field(default_factory=dict)
    first_error: str = ""
    wrong: list[dict[str, Any]] = field(default_factory=list)  # the first few wrong answers

    @property
    def accuracy(self) -> float:
        return self.correct / self.questions if self.questions else 0.0

    @property
    def invalid_rate(self) -> float:
        return self.invalid / self.questions if self.questions else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "correct": self.correct,
            "invalid": self.invalid,
            "failed": self.failed,
            "accuracy": round(self.accuracy, 4),
            "invalid_rate": round(self.invalid_rate, 4),
            "failure_reasons": self.failure_reasons,
            "wrong": self.wrong,
        }


def grade(res: AccuracyResult) -> AccuracyGrade:
    """Each answer against its known value; a failed request has no answer (it counts as invalid)."""
    g = AccuracyGrade(len(res.answers), 0, 0, 0)
    for a in res.answers:
        if a.failure:
            g.failed += 1
            g.invalid += 1
            g.failure_reasons[a.failure] = g.failure_reasons.get(a.failure, 0) + 1
            g.first_error = g.first_error or a.error
            continue
        got = answer_value(a.text)
        if got == a.expected:
            g.correct += 1
            continue
        g.invalid += got is None
        if len(g.wrong) < SHOWN_WRONG:
            g.wrong.append({"question": a.index, "expected": a.expected, "got": got, "answer": a.text[-300:]})
    return g


def accuracy_drop(ref_correct: int, ref_n: int, correct: int, n: int, z: float) -> tuple[float, float, float]:
    """(drop, allowed drop, standard error) of this gate's accuracy below the reference's.

    The standard error is binomial sampling noise of the two scores, sqrt(p0 (1 - p0) / n0 +
    p1 (1 - p1) / n1), each p with one right and one wrong answer added (Agresti-Caffo), so a
    perfect score still has noise and one wrong answer of 200 after 200 of 200 is no regression.
    The allowed drop is ``z`` of them (accuracy.noise_z).
    """

    def var(k: int, m: int) -> float:
        p = (k + 1) / (m + 2)
        return p * (1 - p) / (m + 2)

    se = math.sqrt(var(ref_correct, ref_n) + var(correct, n))
    drop = ref_correct / ref_n - correct / n if ref_n and n else 0.0
    return drop, z * se, se


def accuracy(res: AccuracyResult, g: AccuracyGrade, cfg: GateConfig, group: bool) -> list[Check]:
    """The accuracy checks: failed requests, the floors, and (``group``: a --baseline was given)
    the comparison with the group's reference accuracy."""
    ac = cfg.accuracy
    st = res.settings
    n = g.questions
    on = f"{st['set']} v{st['version']}, seed {st['seed']}, {st['shots']}-shot"
    out: list[Check] = [
        failed_requests("accuracy", g.failed, n, 0, g.failure_reasons, g.first_error, res.timed_out, res.deadline_s)
    ]
    example = ""
    if g.wrong:
        w = g.wrong[0]
        example = (
            f"; e.g. question {w['question']}: expected {w['expected']}, read {w['got']} from {w['answer'][-80:]!r}"
        )
    if ac.min_accuracy is not None:
        ok = g.accuracy >= ac.min_accuracy
        text = f"accuracy {g.accuracy:.3f} ({g.correct} of {n} right on {on}; required at least {ac.min_accuracy:g})"
        out.append(
            Check(
                "accuracy.score",
                ok,
                round(g.accuracy, 4),
                ac.min_accuracy,
                "ratio",
                _msg(ok, text + ("" if ok else example)),
                ">=",
            )
        )
    if ac.max_invalid is not None:
        ok = g.invalid_rate <= ac.max_invalid
        text = (
            f"invalid answers {g.invalid_rate:.3f} ({g.invalid} of {n} without a number or without an answer; "
            f"allowed at most {ac.max_invalid:g})"
        )
        out.append(
            Check("accuracy.invalid", ok, round(g.invalid_rate, 4), ac.max_invalid, "ratio", _msg(ok, text), "<=")
        )
    if not group:
        return out
    if res.not_compared:
        out.append(not_compared("accuracy.reference", "the accuracy was", res.not_compared))
    elif res.reference is None:
        text = (
            f"recorded: accuracy {g.accuracy:.3f} on {on} (the group has no accuracy yet; stored with its "
            "reference when this gate passes)"
        )
        out.append(Check("accuracy.reference", True, "recorded", None, "", text))
    else:
        ref_k, ref_n = int(res.reference["correct"]), int(res.reference["questions"])
        drop, allowed, se = accuracy_drop(ref_k, ref_n, g.correct, n, ac.noise_z)
        ok = drop <= allowed
        text = (
            f"accuracy {g.accuracy:.3f} ({g.correct} of {n}) vs the group's reference {ref_k / ref_n:.3f} "
            f"({ref_k} of {ref_n}, from {res.reference_from or 'an unknown time'}): drop {max(drop, 0.0):.3f}, "
            f"allowed {allowed:.3f} = {ac.noise_z:g} x binomial standard error {se:.3f}"
        )
        out.append(Check("accuracy.reference", ok, round(drop, 4), round(allowed, 4), "ratio", _msg(ok, text), "<="))
    return out
