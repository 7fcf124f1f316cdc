"""A benchmark record (JSON) -> markdown tables and PNG plots. Needs no GPU.

    python -m marlin_cupy.bench.report \\
        benchmarks/results/2026-12-04_h200_989e35c/call2/2026-12-04_nvidia-h200_bench.json

writes ``<stem>.md``, ``<stem>_speedup.png`` and ``<stem>_roofline.png`` beside the JSON (or into
``--out-dir``). The sweep calls the same functions, so a table or plot never holds a number that
the JSON does not.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import metrics


def load(path) -> dict:
    from ..records import read_json     # a .json.gz too
    rec = read_json(path)
    if rec.get("kind") != "bench":
        raise ValueError(f"{path} is not a bench record (kind={rec.get('kind')!r}).")
    return rec


# ---------------------------------------------------------------------------------------------
# Shapes of the data
# ---------------------------------------------------------------------------------------------

def _labels(rec) -> list:
    """Provider labels in the record's provider order, those with rows only."""
    have = {r.get("label", r["provider"]) for r in rec["rows"]}
    order = list(rec.get("providers", {})) + sorted(have)
    return [label for label in dict.fromkeys(order) if label in have]


def _provider_of(rec, label) -> str:
    info = rec.get("providers", {}).get(label)
    if info:
        return info["provider"]
    for r in rec["rows"]:
        if r.get("label", r["provider"]) == label:
            return r["provider"]
    return label


def _is_fp16(rec, label) -> bool:
    return _provider_of(rec, label) in metrics.FP16_BASELINES


def _sets(rec) -> list:
    order = list(rec.get("sets", {})) + sorted({r["set"] for r in rec["rows"]})
    present = {r["set"] for r in rec["rows"]}
    return [s for s in dict.fromkeys(order) if s in present]


def _summary(rec) -> dict:
    """``{(set, label, m): summary entry}``, recomputed when the record has none."""
    entries = rec.get("summary")
    if entries is None:
        per_set = {s: len(v) for s, v in rec.get("sets", {}).items()}
        entries = metrics.summarize_sets(rec["rows"], per_set, rec["copy_bandwidth_GBps"])
    return {(e["set"], e["label"], e["m"]): e for e in entries}


def _batches(rec, set_name) -> list:
    return sorted({r["m"] for r in rec["rows"] if r["set"] == set_name})


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------

def _fmt(v, spec, missing="-"):
    return missing if v is None else format(v, spec)


def _table(header, rows, text_columns=0) -> list:
    """A markdown table; the last ``text_columns`` columns are left-aligned, the rest right."""
    align = ["---:"] * (len(header) - text_columns) + [":---"] * text_columns
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _clocks(c):
    if not c:
        return "n/a"
    text = f"SM {c.get('sm_mhz')} MHz"
    if c.get("sm_max_mhz") is not None:
        text += f" (max {c['sm_max_mhz']})"
    text += f", memory {c.get('mem_mhz')} MHz"
    if c.get("throttle_reasons") is not None:
        text += f", clock event reasons {c['throttle_reasons']}"
    return text


def _clocks_line(rec) -> str:
    """The record's clocks: at start (before any GPU work: an idle card's), after the copy
    bandwidth's warm-up (records since it was read), and at end."""
    clocks = rec.get("clocks") or {}
    parts = [f"clocks at start: {_clocks(clocks.get('start'))}"]
    if "after_warmup" in clocks:
        parts.append(f"after warm-up: {_clocks(clocks['after_warmup'])}")
    parts.append(f"at end: {_clocks(clocks.get('end'))}")
    return "- " + "; ".join(parts)


def ideal_text(rec) -> str:
    """The memory-bound ideal speedup as the report states it: 16 / (4 + 16/group_size) bits
    per weight, or with per-channel scales (group size -1) 16 / (4 + 16/K) for the record's K
    (``metrics.ideal_speedup``; the record's ``ideal_speedup`` is the large-K limit, 4x)."""
    gs = rec["group_size"]
    if gs != -1:
        return f"16 / (4 + 16/{gs}) = {metrics.ideal_speedup(gs):.2f}x"
    ks = sorted({r["k"] for r in rec.get("rows", [])}
                | {k for shapes_ in (rec.get("sets") or {}).values() for k, _ in shapes_})
    if not ks:
        return "16 / (4 + 16/K) with per-channel scales, below 4x"
    lo, hi = (metrics.ideal_speedup(-1, k=k) for k in (ks[0], ks[-1]))
    if len(ks) == 1:
        return f"16 / (4 + 16/K) with per-channel scales = {lo:.2f}x at K = {ks[0]}"
    return (f"16 / (4 + 16/K) with per-channel scales = {lo:.2f}x at K = {ks[0]} to "
            f"{hi:.2f}x at K = {ks[-1]}")


def _timing_sentence(rec) -> str:
    """How the record's times were taken: per call (the default) or in chains (--chain-len)."""
    chain = ((rec.get("method") or {}).get("chain_len")) or 0
    if chain:
        return (f"Times are medians over chains of {chain} calls back to back (one CUDA-event "
                f"pair per chain, divided by {chain}; compare only with other chain records)")
    return "Times are medians of CUDA-event GPU times per call"


def markdown(rec) -> str:
    dev = rec["device"]
    gs = rec["group_size"]
    labels = _labels(rec)
    quant = [lb for lb in labels if not _is_fp16(rec, lb)]
    summary = _summary(rec)
    v = rec.get("versions") or {}
    lines = [
        f"# Marlin benchmark on {dev['name']} ({dev['sms']} SMs)",
        "",
        f"- date {rec['date']}, commit `{rec['git_commit']}`"
        + (" (uncommitted changes)" if rec.get("git_dirty") else ""),
        f"- group size {gs}; copy bandwidth {rec['copy_bandwidth_GBps']:.0f} GB/s (device-to-device, "
        f"read + write, measured in the same run)",
        _clocks_line(rec),
        f"- CuPy {v.get('cupy')}, CUDA runtime {v.get('cuda_runtime')}, driver {v.get('cuda_driver')}, "
        f"torch {v.get('torch')}",
        "",
        _timing_sentence(rec) + ", weights rotated so they are never "
        "L2-resident, summed over the set's layers. **Speedup** = summed time of the fastest FP16 "
        "GEMM per layer (cublas-fp16 or torch-fp16) / summed time of the provider. "
        "**% roofline** = minimum bytes (int4 weights + scales + A + C) / time / copy bandwidth. "
        f"Ideal memory-bound speedup at group size {gs}: {ideal_text(rec)}.",
    ]
    if rec.get("aborted"):
        lines += ["", f"**The sweep was aborted early:** {rec['aborted']}"]

    for set_name in _sets(rec):
        shapes_ = rec.get("sets", {}).get(set_name)
        title = f"## {set_name}"
        if shapes_:
            title += " (" + ", ".join(f"{k}x{n}" for k, n in shapes_) + ")"
        lines += ["", title, "", "Summed time per batch size, µs:", ""]
        batches = _batches(rec, set_name)
        body = []
        for m in batches:
            body.append([m] + [_fmt(summary.get((set_name, lb, m), {}).get("time_us")
                                    if _complete(summary.get((set_name, lb, m))) else None, ".1f")
                               for lb in labels])
        lines += _table(["M"] + labels, body)

        if quant:
            lines += ["", "Summed speedup over the best FP16 GEMM, and % of roofline:", ""]
            header = ["M"] + [f"{lb} ×" for lb in quant] + [f"{lb} %roof" for lb in quant]
            body = []
            for m in batches:
                ents = [summary.get((set_name, lb, m), {}) for lb in quant]
                body.append([m] + [_fmt(e.get("summed_speedup"), ".2f") for e in ents]
                            + [_fmt(e.get("summed_pct_roofline"), ".0f") for e in ents])
            lines += _table(header, body)
        lines += _per_layer(rec, set_name, batches)

    lines += _problems(rec)
    return "\n".join(lines) + "\n"


def _complete(entry) -> bool:
    return bool(entry) and entry["layers"] == entry["layers_in_set"]


def _per_layer(rec, set_name, batches) -> list:
    """Marlin's speedup per layer (the default dispatch's label), with the config it ran."""
    rows = [r for r in rec["rows"] if r["set"] == set_name and r.get("label", r["provider"]) == "marlin"]
    if not rows:
        return []
    layer_ids = sorted({r["layer"] for r in rows})
    shapes_ = {r["layer"]: f"{r['k']}x{r['n']}" for r in rows}
    by = {(r["layer"], r["m"]): r for r in rows}
    body = []
    for m in batches:
        cells = []
        for i in layer_ids:
            r = by.get((i, m))
            cells.append("-" if r is None else f"{_fmt(r.get('speedup'), '.2f')} ({r['median_us']:.1f} µs)")
        body.append([m] + cells)
    return ["", "Marlin per layer: speedup (median time):", ""] + _table(
        ["M"] + [shapes_[i] for i in layer_ids], body)


def _problems(rec) -> list:
    lines = []
    failed = rec.get("failed") or []
    if failed:
        lines += ["", "## Failed (no timing row was recorded)", ""]
        lines += _table(["set", "layer", "provider", "M", "K x N", "what failed"],
                        [[f["set"], f["layer"], f.get("label", f["provider"]), f["m"],
                          f"{f['k']}x{f['n']}", f["reason"].replace("|", "/")] for f in failed],
                        text_columns=1)
    skipped = rec.get("skipped") or []
    if skipped:
        grouped = {}
        for s in skipped:
            grouped.setdefault((s.get("label", s["provider"]), s["reason"]), []).append(s)
        lines += ["", "## Skipped", ""]
        lines += _table(["provider", "runs", "batch sizes", "reason"],
                        [[lb, len(v), ",".join(str(m) for m in sorted({s["m"] for s in v})),
                          reason.replace("|", "/")] for (lb, reason), v in grouped.items()],
                        text_columns=1)
    return lines


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------

def _figure(n_panels):
    from matplotlib.figure import Figure
    cols = n_panels if n_panels <= 3 else (2 if n_panels == 4 else 3)
    rows = (n_panels + cols - 1) // cols
    fig = Figure(figsize=(max(7.0, 4.2 * cols), 3.6 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes


def _batch_axis(ax, batches):
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches)
    ax.set_xticklabels([str(b) for b in batches], fontsize=7)
    ax.set_xlabel("batch size M")
    ax.grid(True, which="major", alpha=0.3)


def _plot_series(ax, summary, set_name, labels, batches, field):
    """One line per provider label: ``field`` of the set's summary rows against batch size."""
    for lb in labels:
        pts = [(m, summary[(set_name, lb, m)][field]) for m in batches
               if summary.get((set_name, lb, m), {}).get(field) is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, label=lb)


def _panels(rec, field):
    """One panel per shape set with ``field`` drawn for every quantized provider; returns the
    figure, its axes and ``(ax, set_name, batches)`` per panel for the caller's decorations."""
    summary = _summary(rec)
    quant = [lb for lb in _labels(rec) if not _is_fp16(rec, lb)]
    sets = _sets(rec)
    fig, axes = _figure(len(sets))
    panels = []
    for ax, set_name in zip(axes, sets):
        batches = _batches(rec, set_name)
        _plot_series(ax, summary, set_name, quant, batches, field)
        panels.append((ax, set_name, batches))
    return fig, axes, panels


def _plot(rec, path, field, ylabel, suptitle, hlines) -> Path:
    """One panel per shape set of ``field`` vs batch size, with reference lines
    ``hlines = [(y, axhline keyword arguments), ...]``."""
    fig, axes, panels = _panels(rec, field)
    for ax, set_name, batches in panels:
        for y, style in hlines:
            ax.axhline(y, **style)
        _batch_axis(ax, batches)
        ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.set_title(set_name)
    axes[0].legend(fontsize=7)
    fig.suptitle(suptitle, fontsize=10)
    fig.savefig(path, dpi=120)
    return Path(path)


def plot_speedup(rec, path) -> Path:
    """Summed speedup over the best FP16 GEMM vs batch size, one panel per shape set."""
    gs = rec["group_size"]
    ideal = metrics.ideal_speedup(gs)     # per-channel: the large-K limit, 4x, every K below it
    return _plot(rec, path, "summed_speedup", "speedup over best FP16 (summed)",
                 f"INT4 x FP16 vs the best FP16 GEMM per layer, {rec['device']['name']}, "
                 f"group size {gs}",
                 [(ideal, dict(color="k", ls="--", lw=1,
                               label=f"ideal, memory-bound {ideal_text(rec)}"
                                     + ("; drawn at the large-K limit, 4x" if gs == -1 else ""))),
                  (1.0, dict(color="grey", ls=":", lw=1, label="best FP16 GEMM"))])


def plot_roofline(rec, path) -> Path:
    """Summed percent of the copy-bandwidth roofline vs batch size, one panel per shape set."""
    return _plot(rec, path, "summed_pct_roofline", "% of roofline (summed)",
                 f"Minimum bytes / time / copy bandwidth ({rec['copy_bandwidth_GBps']:.0f} GB/s), "
                 f"{rec['device']['name']}",
                 [(100, dict(color="k", ls="--", lw=1, label="copy bandwidth"))])


def short_table(rec) -> str:
    """Plain-text summed speedups per set (the last thing the command prints)."""
    summary = _summary(rec)
    quant = [lb for lb in _labels(rec) if not _is_fp16(rec, lb)]
    lines = [f"{rec['device']['name']}: copy bandwidth {rec['copy_bandwidth_GBps']:.0f} GB/s; "
             f"summed speedup over the best FP16 GEMM (% of roofline)"]
    for set_name in _sets(rec):
        lines.append(f"{set_name:>12} " + " ".join(f"{lb[:22]:>24}" for lb in quant))
        for m in _batches(rec, set_name):
            cells = []
            for lb in quant:
                e = summary.get((set_name, lb, m), {})
                sp, pct = e.get("summed_speedup"), e.get("summed_pct_roofline")
                cells.append(f"{_fmt(sp, '.2f')}x ({_fmt(pct, '.0f')}%)" if sp is not None else "-")
            lines.append(f"{'M=' + str(m):>12} " + " ".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def headline_table(rec, provider: str = "marlin", batches=None) -> str:
    """Markdown: one row per M, one column per set, "speedup (% of roofline)" of ``provider``
    summed over the set's layers (the README's table, produced from the record, not typed).
    Only the rows labelled ``provider`` count: an explicit config's (``marlin[NAME]``, which
    records before ``marlin-config`` filed under provider ``marlin``) are never its figures.
    Raises ``ValueError`` where the record holds none."""
    summary = _summary(rec)
    sets = _sets(rec)
    label = provider
    if label not in _labels(rec):
        raise ValueError(f"the record has no rows labelled {provider!r} (it has "
                         f"{', '.join(_labels(rec)) or 'none'}); an explicit config's rows "
                         f"(marlin[NAME]) are not the default dispatch's")
    ms = sorted({m for s_ in sets for m in _batches(rec, s_)})
    if batches:
        ms = [m for m in ms if m in batches]
    rows = []
    for m in ms:
        cells = [str(m)]
        for set_name in sets:
            e = summary.get((set_name, label, m), {})
            sp, pct = e.get("summed_speedup"), e.get("summed_pct_roofline")
            cells.append(f"{_fmt(sp, '.2f')}x ({_fmt(pct, '.0f')}%)" if sp is not None else "-")
        rows.append(cells)
    return "\n".join(_table(["M"] + sets, rows))


def write_report(rec, json_path, out_dir=None, plots: bool = True) -> list:
    """Markdown (and plots) for the record saved at ``json_path``; returns the paths written."""
    json_path = Path(json_path)
    out = Path(out_dir) if out_dir else json_path.parent
    out.mkdir(parents=True, exist_ok=True)
    stem = json_path.name.removesuffix(".gz").removesuffix(".json")
    md = out / f"{stem}.md"
    md.write_text(markdown(rec))
    written = [md]
    if plots and _sets(rec):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("matplotlib is not installed: no plots (pip install matplotlib, then run "
                  f"python -m marlin_cupy.bench.report {json_path})", file=sys.stderr)
            return written
        written.append(plot_speedup(rec, out / f"{stem}_speedup.png"))
        written.append(plot_roofline(rec, out / f"{stem}_roofline.png"))
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m marlin_cupy.bench.report",
                                 description="Markdown tables and PNG plots from a saved bench JSON.")
    ap.add_argument("json", help="a bench record written by python -m marlin_cupy.bench")
    ap.add_argument("--out-dir", help="where to write (default: beside the JSON)")
    ap.add_argument("--no-plot", action="store_true", help="write the markdown only")
    ap.add_argument("--headline", metavar="M,M,...", nargs="?", const="",
                    help="print only the marlin speedup table (for the README), optionally for "
                         "these batch sizes; writes nothing")
    ap.add_argument("--provider", default="marlin",
                    help="whose speedups --headline prints (default marlin; e.g. marlin-pdl "
                         "in a chain record)")
    args = ap.parse_args(argv)
    try:
        rec = load(args.json)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.headline is not None:
        wanted = [int(v) for v in args.headline.split(",") if v.strip()]
        try:
            print(headline_table(rec, provider=args.provider, batches=wanted or None))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    for path in write_report(rec, args.json, args.out_dir, plots=not args.no_plot):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
