"""Judging: pure functions from measured results (validate/phases.py) and the config to named checks.

Nothing here does I/O, so each verdict rule can be read and tested alone with
hand-built results. A check's ``measured`` and ``required`` are the values compared
with ``op``; its message is what the operator reads (``FAILED ...`` when it failed).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from .answers import ReferenceResult
from .config import GateConfig
from .load import LoadResult
from .logscan import LogScanResult
from .metrics import KEY_METRICS, ROBUST_RUNS, RequestResult, Spread
from .phases import Health, Identity, ProbeResult, Readiness, SingleStream, StabilityStep, Throughput, Warmup
from .userregex import compile_user_regex


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
    if len(tp.runs) < 2:
        return None
    tc = cfg.throughput
    spreads = tp.spreads
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
        f"measurement stability over {len(tp.runs)} runs: {worst} {which} {value:.1%} "
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
    c = spread(Throughput(runs, cfg.throughput.timeout_s), cfg)
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


def restarted(ids: list[Identity], log_restarts: list[str]) -> Check | None:
    """Any change of the server's identity between two reads, or a start banner in the gate's
    window of the log: it restarted (Docker's restart policy hides a crash that way)."""
    if log_restarts:
        text = "FAILED the server restarted during the gate: its log shows a new start: " + "; ".join(log_restarts)
        return Check("server.restarted", False, "restarted", "same process", "", text[:1000])
    if len(ids) < 2:
        return None
    first = ids[0]
    for before, after in itertools.pairwise(ids):
        changed = [
            f"{k} {before.facts.get(k)!r} -> {after.facts.get(k)!r}"
            for k in sorted(set(before.facts) | set(after.facts))
            if k != "docker_error" and before.facts.get(k) != after.facts.get(k) and after.facts
        ]
        if changed:
            text = f"FAILED the server restarted between '{before.when}' and '{after.when}': " + "; ".join(changed)
            return Check("server.restarted", False, "restarted", "same process", "", text[:1000])
    text = (
        f"same server process from '{first.when}' to '{ids[-1].when}' ({', '.join(sorted(first.facts)) or 'no facts'})"
    )
    return Check("server.restarted", True, "same process", "same process", "", text)


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


def reference(res: ReferenceResult, cfg: GateConfig) -> Check:
    """``answers.reference``: the mean log-likelihood of the group's answers moved by at most the tolerance."""
    tol = cfg.answers.reference.tolerance
    if res.mode == "error":
        text = f"FAILED reference answers: {res.error}"
        return Check("answers.reference", False, None, tol, "nats/token", text, "<=")
    if res.mode == "recorded":
        n = len((res.recorded or {}).get("answers", []))
        text = f"recorded {n} reference answers (first gate of the group: not compared; stored with the baseline)"
        return Check("answers.reference", True, None, tol, "nats/token", text, "<=")
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
