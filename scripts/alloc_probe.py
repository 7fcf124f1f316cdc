"""Does a GEMM's time depend on where its weights were allocated? (H200; one layer, one M)

    python3 scripts/alloc_probe.py [--shape 8192,57344] [--m 1] [--allocs 6] [--rounds 2]
                                   [--providers marlin,cublas-fp16] [--out RECORD.json]

Four reduced sweeps in one device call (`2026-12-04_h200_bef1449/call2/order/`) timed
cuBLAS's FP16 GEMM of llama2-70b's 8192x57344 at M = 1 at 229.6-231.1 µs in two of them
and 207.2-209.5 µs in the other two (p20-p80 within 1.5 µs each time), while our kernel
took 65.3-65.5 µs in all four. Each sweep allocates its weights anew (one copy: the layer is
larger than twice the L2). This script asks whether the allocation is what moves it: it
makes ``--allocs`` copies of the layer's weights per provider, all alive at once (so at
distinct addresses), and times every copy on its own with the sweep's harness (events
around each call, the same budget and statistics), ``--rounds`` times in turn. A time that
stays with its copy round after round is the allocation's; one that changes from round to
round on the same copy is the GPU's state.

The record (``kind`` ``alloc_probe``) holds, per provider and copy, its device addresses
(the weights' first array), and each round's median, p20 and p80.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _address(weights) -> int:
    """The device address of a provider copy's first array (MarlinWeight, tuple or array)."""
    if hasattr(weights, "qweight"):
        return int(weights.qweight.data.ptr)
    if isinstance(weights, tuple):
        return int(weights[0].data.ptr)
    return int(weights.data.ptr)


def spread(medians) -> float:
    """Largest over smallest median, minus one, in percent."""
    return 100.0 * (max(medians) / min(medians) - 1.0)


def markdown(rec: dict) -> str:
    lines = [f"# {rec['shape'][0]}x{rec['shape'][1]} at M = {rec['m']}: time per allocation "
             f"({rec['device']['name']}, {rec['git_commit']})", "",
             "| provider | copy | address | " + " | ".join(f"round {r + 1} median (p20-p80), µs"
                                                         for r in range(rec["rounds"])) + " |",
             "| --- | ---: | --- | " + "---: | " * rec["rounds"]]
    for p in rec["providers"]:
        for c in p["copies"]:
            cells = [f"{s['median_us']:.1f} ({s['p20_us']:.1f}-{s['p80_us']:.1f})" for s in c["rounds"]]
            lines.append(f"| {p['label']} | {c['copy']} | {c['address']:#x} | " + " | ".join(cells) + " |")
    lines += ["", "| provider | spread over copies, per round | spread over rounds, per copy (largest) |",
              "| --- | --- | ---: |"]
    for p in rec["providers"]:
        per_round = [spread([c["rounds"][r]["median_us"] for c in p["copies"]])
                     for r in range(rec["rounds"])]
        per_copy = max(spread([s["median_us"] for s in c["rounds"]]) for c in p["copies"])
        lines.append(f"| {p['label']} | " + ", ".join(f"{v:.1f} %" for v in per_round)
                     + f" | {per_copy:.1f} % |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="8192,57344", help="K,N of the layer")
    ap.add_argument("--m", type=int, default=1, help="batch size")
    ap.add_argument("--allocs", type=int, default=6, help="copies of the weights per provider")
    ap.add_argument("--rounds", type=int, default=2, help="times each copy is measured, in turn")
    ap.add_argument("--providers", default="marlin,cublas-fp16")
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="record path (JSON; a .md beside it)")
    args = ap.parse_args(argv)
    k, n = (int(v) for v in args.shape.split(","))

    import cupy as cp
    from marlin_cupy import records
    from marlin_cupy.bench import harness, providers
    from marlin_cupy.bench.workload import QuantizedLayer

    reason = harness.gpu_unavailable_reason()
    if reason:
        print(f"no GPU: {reason}")
        return 1
    env = records.environment()
    ql = QuantizedLayer(k, n, args.group_size, seed=args.seed)
    x = cp.random.RandomState(args.seed + 1).standard_normal((args.m, k), dtype=cp.float32).astype(cp.float16)
    ref = ql.reference(x)
    provs = providers.make_providers(args.providers.split(","))
    out = []
    with harness.bench_stream() as stream:
        timer = harness.Timer(stream)
        bound = {}
        for p in provs:
            p.prepare(ql, args.allocs)
            b = p.bind(x)
            b.call(0)
            stream.synchronize()
            err = harness.relative_error(b.output(), ref)
            if not harness.gate_passes(err, p.tolerance):
                raise SystemExit(f"{p.label}: relative error {err:.3g} > {p.tolerance:.3g}")
            bound[p.label] = b
            out.append({"label": p.label, "error": err,
                        "copies": [{"copy": i, "address": _address(w), "rounds": []}
                                   for i, w in enumerate(p.weights)]})
        for _ in range(args.rounds):
            for p, entry in zip(provs, out):
                b = bound[p.label]
                for c in entry["copies"]:
                    i = c["copy"]
                    meas = timer.measure(lambda _, i=i: b.call(i), copies=1)
                    c["rounds"].append(meas.stats.as_dict())
    rec = {"kind": "alloc_probe", "date": env["date"], "git_commit": env["git_commit"],
           "device": env["device"], "versions": env.get("versions", {}),
           "shape": [k, n], "m": args.m, "group_size": args.group_size, "rounds": args.rounds,
           "allocs": args.allocs, "clocks_end": harness.gpu_clocks(),
           "method": {"budget_ms": harness.DEFAULT_BUDGET_MS, "warmup": harness.DEFAULT_WARMUP,
                      "timing": "harness.Timer, events around every call, one copy at a time"},
           "providers": out}
    text = markdown(rec)
    print(text)
    if args.out:
        records.write_json(Path(args.out), rec, validate=False)
        Path(args.out).with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
