"""Report files: report.json (versioned), summary.md (one table at a glance), sweep.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .files import write_json_atomic, write_text_atomic


def _v(x: Any, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def _quantity(x: Any, unit: str) -> str:
    """A check's figure with its unit; ratios as percentages (a 13.5 % spread must not read "0.1")."""
    if x is None:
        return "-"
    if unit == "ratio" and isinstance(x, int | float) and not isinstance(x, bool):
        return f"{x * 100:.1f} %"
    return f"{_v(x)} {unit}".rstrip() if unit else _v(x)


def _cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def render_summary(r: dict[str, Any]) -> str:
    """Markdown summary: verdict, what ran, every check, the headline metrics, the sweep."""
    si = r.get("server_info") or {}
    lines = [f"# SGLang post-deploy gate: {r['verdict'].upper()}", ""]
    if r.get("failed_checks"):
        lines += ["**Failed:** " + ", ".join(f"`{n}`" for n in r["failed_checks"]), ""]
    if r.get("engine") == "test-engine":
        lines += [f"> **TEST ENGINE** - {r.get('engine_note')}", ""]
    labels = ", ".join(f"{k}={v}" for k, v in (r.get("labels") or {}).items()) or "-"
    lines += [
        "| url | engine | version | model | tp | radix cache | kv cache | labels |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        "| "
        + " | ".join(
            _cell(x)
            for x in (
                r.get("url"),
                r.get("engine"),
                _v(si.get("version")),
                _v(si.get("served_model_name") or si.get("model_path")),
                _v(si.get("tp_size")),
                _v(si.get("radix_cache")),
                _v(si.get("kv_cache_dtype")),
                labels,
            )
        )
        + " |",
        "",
        "## Checks",
        "",
        "| result | check | measured | required | message |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in r.get("checks", []):
        unit = c.get("unit") or ""
        req = f"{c.get('op', '')} {_quantity(c['required'], unit)}".strip() if c.get("required") is not None else "-"
        lines.append(
            f"| {'ok' if c['passed'] else '**FAIL**'} | {_cell(c['name'])} "
            f"| {_cell(_quantity(c.get('measured'), unit))} "
            f"| {_cell(req)} | {_cell(c['message'])} |"
        )
    for s in r.get("skipped", []):
        lines.append(f"| skipped | {_cell(s.split(':')[0])} | - | - | {_cell(s)} |")
    if r.get("stopped"):
        st = r["stopped"]
        lines += ["", f"**Stopped** in phase {st['phase']} because {st['reason']}."]
    tp = (r.get("phases") or {}).get("throughput")
    if tp and tp.get("refused"):
        lines += ["", f"Throughput phase refused: {tp['refused']}"]
    elif tp:
        lines += [
            "",
            "## Throughput at saturation (bench_serving definitions)",
            "",
            "| metric | value |",
            "| --- | --- |",
        ]
        reasons = ", ".join(f"{k} x{v}" for k, v in (tp.get("failure_reasons") or {}).items()) or "none"
        rows = [
            ("runs (figures below: median of the runs)", str(tp.get("repeats", 1))),
            ("completed / failed requests (all runs)", f"{tp['completed']} / {tp['failed']}"),
            ("failures by reason", reasons),
            ("duration (s)", _v(tp["duration_s"], 2)),
            ("request throughput (req/s)", _v(tp["request_throughput"], 2)),
            (
                "input / output / total tok/s",
                f"{_v(tp['input_throughput'])} / {_v(tp['output_throughput'])} / {_v(tp['total_throughput'])}",
            ),
            (
                "peak output tok/s / peak concurrency",
                f"{_v(tp['max_output_tokens_per_s'])} / {tp['max_concurrent_requests']}",
            ),
            (
                "TTFT mean / median / p99 (ms)",
                f"{_v(tp['mean_ttft_ms'])} / {_v(tp['median_ttft_ms'])} / {_v(tp['p99_ttft_ms'])}",
            ),
            (
                "ITL mean / median / p99 (ms)",
                f"{_v(tp['mean_itl_ms'], 2)} / {_v(tp['median_itl_ms'], 2)} / {_v(tp['p99_itl_ms'], 2)}",
            ),
            (
                "TPOT mean / median / p99 (ms)",
                f"{_v(tp['mean_tpot_ms'], 2)} / {_v(tp['median_tpot_ms'], 2)} / {_v(tp['p99_tpot_ms'], 2)}",
            ),
            (
                "E2E mean / median / p99 (ms)",
                f"{_v(tp['mean_e2e_latency_ms'])} / {_v(tp['median_e2e_latency_ms'])} / {_v(tp['p99_e2e_latency_ms'])}",
            ),
        ]
        lines += [f"| {a} | {_cell(b)} |" for a, b in rows]
        spread = tp.get("spread") or {}
        if spread:
            lines += [
                "",
                "| metric over the runs | median | min | max | spread |",
                "| --- | --- | --- | --- | --- |",
            ]
            for name, sp in spread.items():
                rel = f"{sp['spread']:.1%}" if sp.get("spread") is not None else "-"
                lines.append(f"| {name} | {_v(sp['median'])} | {_v(sp['min'])} | {_v(sp['max'])} | {rel} |")
    acc = (r.get("phases") or {}).get("accuracy")
    if acc:
        st = acc.get("settings") or {}
        lines += [
            "",
            f"Accuracy on known answers: {acc['correct']} of {acc['questions']} right ({acc['accuracy']:.3f}), "
            f"{acc['invalid']} invalid, {acc['failed']} failed, in {acc['seconds']:.1f} s "
            f"({st.get('set')} v{st.get('version')}, seed {st.get('seed')}, {st.get('shots')}-shot).",
        ]
    ss = (r.get("phases") or {}).get("single_stream")
    if ss and ss.get("success"):
        lines += [
            "",
            f"Single stream: {ss['output_tokens']} tokens in {ss['e2e_s']:.1f} s, "
            f"TTFT {ss['ttft_ms']:.0f} ms, "
            f"decode {ss['decode_tok_s']:.1f} tok/s.",
        ]
    steps = ((r.get("phases") or {}).get("stability") or {}).get("steps") or []
    if steps:
        lines += [
            "",
            "## Stability sweep",
            "",
            "| step | concurrency | result | failed | total tok/s | p99 TTFT (ms) | p99 E2E (ms) | /health after |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for s in steps:
            if s.get("skipped") or s.get("refused"):
                what = "refused" if s.get("refused") else "skipped"
                lines.append(f"| {s['step']} | {s['concurrency']} | {what} | - | - | - | - | - |")
                continue
            lines.append(
                f"| {s['step']} | {s['concurrency']} | {'ok' if s['passed'] else '**FAIL**'} | {s['failed']} "
                f"| {_v(s['total_throughput'])} | {_v(s['p99_ttft_ms'])} | {_v(s['p99_e2e_latency_ms'])} "
                f"| {'ok' if s['healthy_after'] else 'FAILED'} |"
            )
    patches = r.get("patch_record") or {}
    if patches:
        fixes = ", ".join(f"{k}={(v or {}).get('status', '?')}" for k, v in (patches.get("fixes") or {}).items())
        lines += [
            "",
            f"Image patch record: engine {patches.get('engine', '?')}, sglang {patches.get('sglang_version', '?')}, "
            f"flashinfer {patches.get('flashinfer_version', '?')}; fixes: {fixes or 'none'}.",
        ]
    base = r.get("baseline") or {}
    if base.get("note"):
        lines += ["", f"Baseline: {base['note']}"]
    lines += [
        "",
        f"Report: report.json (schema {r['schema_version']}), sweep.png. Gate: {r.get('tool')}.",
        "",
    ]
    return "\n".join(lines)


def plot_sweep(r: dict[str, Any], path: str | Path) -> bool:
    """Throughput and p99 latency against concurrency; failed steps marked in red.

    matplotlib is optional: the serving images carry validate/ for the gate on the host without
    it (summary.md and report.json hold every figure). Returns whether the plot was written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = [
        s
        for s in (((r.get("phases") or {}).get("stability") or {}).get("steps") or [])
        if not (s.get("skipped") or s.get("refused"))
    ]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    engine = r.get("engine", "unknown")
    title = "Stability sweep" + (" - TEST ENGINE figures, not SGLang" if engine == "test-engine" else f" ({engine})")
    ax.set_title(title, fontsize=10)
    if not steps:
        ax.text(
            0.5,
            0.5,
            "no sweep data (stability disabled or server not ready)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
    else:
        xs = [s["concurrency"] for s in steps]
        tput = [s["total_throughput"] for s in steps]
        # A step where nothing completed has no latency: leave a gap rather than plot 0.
        p99e = [s["p99_e2e_latency_ms"] / 1000 if s["completed"] else float("nan") for s in steps]
        p99t = [s["p99_ttft_ms"] / 1000 if s["completed"] else float("nan") for s in steps]
        ax.plot(xs, tput, "o-", color="tab:blue", label="total tok/s")
        ax.set_xlabel("concurrency")
        ax.set_ylabel("total tok/s", color="tab:blue")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_ylim(bottom=0)
        ax2 = ax.twinx()
        ax2.plot(xs, p99e, "s--", color="tab:orange", label="p99 E2E (s)")
        ax2.plot(xs, p99t, "^:", color="tab:green", label="p99 TTFT (s)")
        ax2.set_ylabel("p99 latency (s)")
        ax2.set_ylim(bottom=0)
        for s in steps:
            if not s.get("passed"):
                c = s["concurrency"]
                ax.axvspan(c / 1.15, c * 1.15, color="red", alpha=0.12)
                ax.plot([c], [s["total_throughput"]], "x", color="red", markersize=14, mew=3)
                why = "server died/wedged" if not s.get("healthy_after") else f"{s['failed']} failed"
                ax.annotate(
                    f"FAILED\n{why}",
                    (c, s["total_throughput"]),
                    color="red",
                    ha="center",
                    textcoords="offset points",
                    xytext=(0, 14),
                    fontsize=8,
                )
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def write_all(r: dict[str, Any], out_dir: str | Path) -> str:
    """Write the three files into ``out_dir``; returns the summary text."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    write_json_atomic(d / "report.json", r)
    text = render_summary(r)
    write_text_atomic(d / "summary.md", text)
    plot_sweep(r, d / "sweep.png")
    return text
