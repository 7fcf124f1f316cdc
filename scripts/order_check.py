"""Does the order in which the sweep times its providers move the summed speedups? (no GPU needed)

    python3 scripts/order_check.py BENCH.json [BENCH.json ...] [--provider marlin] [--out SUMMARY.md]

The sweep (``marlin_cupy.bench.sweep``) rests ``--cooldown`` seconds after each batch size of a
layer and then times the providers in the order ``--providers`` gave them: by default our
kernel first, right after the rest, and the FP16 GEMMs after it. If the clocks fell in the
rest and had not come back by our kernel's timed calls, the default order would count
against us. Run the same sweep with ``--providers cublas-fp16,torch-fp16,marlin`` (ours last)
and with the default order, alternately in one device call, and give the records here.

Each record's order is read from its ``providers`` field (the sweep writes it in the order
the providers ran): ``first`` where ``--provider`` ran before every FP16 provider, ``last``
where after all of them, ``mixed`` otherwise. Per set and M, the table gives each record's
summed speedup (the record's own ``summary``: sum of the best FP16 time over the sum of
ours), our summed time and the best FP16's, then the mean speedup of the ``first`` and the
``last`` records and the change from ``first`` to ``last`` in percent. A change that stays
inside the spread of records of one order is the run's noise, not the order.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FP16_PROVIDERS = ("cublas-fp16", "torch-fp16")


def order_of(record: dict, provider: str = "marlin") -> str:
    """``first``, ``last`` or ``mixed``: where ``provider`` ran among the record's available
    FP16 providers (the ``providers`` field keeps the sweep's order)."""
    names = [v.get("provider", k) for k, v in record["providers"].items() if v.get("available")]
    if provider not in names:
        raise ValueError(f"{provider} did not run in this record (available: {names})")
    fp16 = [i for i, n in enumerate(names) if n in FP16_PROVIDERS]
    if not fp16:
        raise ValueError(f"no FP16 provider ran in this record (available: {names})")
    at = names.index(provider)
    if at < min(fp16):
        return "first"
    if at > max(fp16):
        return "last"
    return "mixed"


def summed(record: dict, provider: str = "marlin") -> dict:
    """``{(set, m): (summed_speedup, time_us, baseline_us)}`` for ``provider``'s complete sets."""
    out = {}
    for s in record["summary"]:
        if s.get("label", s["provider"]) != provider or s.get("summed_speedup") is None:
            continue
        out[(s["set"], s["m"])] = (s["summed_speedup"], s["time_us"], s["baseline_us"])
    return out


def compare(records, provider: str = "marlin") -> dict:
    """Per (set, m): each record's ``(speedup, ours, fp16)`` in the records' order (None where
    the record lacks that set and M) and the two orders' mean speedups."""
    orders = [order_of(r, provider) for r in records]
    sums = [summed(r, provider) for r in records]
    keys = sorted(set().union(*[s.keys() for s in sums]), key=lambda k: (k[0], k[1]))
    table = {}
    for key in keys:
        runs = [s.get(key) for s in sums]
        mean = {}
        for which in ("first", "last"):
            vals = [run[0] for o, run in zip(orders, runs) if run and o == which]
            mean[which] = statistics.fmean(vals) if vals else None
        change = (100.0 * (mean["last"] / mean["first"] - 1.0)
                  if mean["first"] and mean["last"] else None)
        table[key] = {"runs": runs, "mean_first": mean["first"], "mean_last": mean["last"],
                      "change_pct": change}
    return {"orders": orders, "table": table}


def markdown(records, names, provider: str = "marlin") -> str:
    res = compare(records, provider)
    lines = [f"# Provider order and the summed speedup of `{provider}`", ""]
    lines += ["| record | order | commit | clocks after warm-up | clocks at end | command |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name, r, o in zip(names, records, res["orders"]):
        c = r.get("clocks", {})
        aw, end = c.get("after_warmup") or {}, c.get("end") or {}
        cmd = (r.get("method") or {}).get("command", "")
        lines.append(f"| {name} | {o} | {r.get('git_commit', '')} | "
                     f"{aw.get('sm_mhz', '')} MHz {aw.get('throttle_reasons') or ''} | "
                     f"{end.get('sm_mhz', '')} MHz {end.get('throttle_reasons') or ''} | `{cmd}` |")
    lines += ["", "Per record: the summed speedup (the best FP16's summed time over ours), then, in "
                  "parentheses, our summed time / the best FP16's, in µs.", ""]
    head = "| set | M | " + " | ".join(f"{i + 1} ({o})" for i, o in enumerate(res["orders"]))
    lines += [head + " | mean first | mean last | last vs first |",
              "| --- | ---: | " + "---: | " * len(records) + "---: | ---: | ---: |"]
    for (set_name, m), row in res["table"].items():
        by_record = [f"{run[0]:.3f}x ({run[1]:.1f} / {run[2]:.1f})" if run else ""
                     for run in row["runs"]]
        f = f"{row['mean_first']:.3f}x" if row["mean_first"] else ""
        l_ = f"{row['mean_last']:.3f}x" if row["mean_last"] else ""
        ch = f"{row['change_pct']:+.2f} %" if row["change_pct"] is not None else ""
        lines.append(f"| {set_name} | {m} | " + " | ".join(by_record) + f" | {f} | {l_} | {ch} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+", help="benchmark records (JSON) of one device call")
    ap.add_argument("--provider", default="marlin", help="the provider whose place is compared")
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args(argv)
    from marlin_cupy.records import read_json          # plain or gzipped records
    records = [read_json(Path(p)) for p in args.records]
    text = markdown(records, list(args.records), args.provider)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
