"""A model block's layers captured into one CUDA graph and replayed, as a server that captures
its decode steps runs them (needs a GPU and torch).

    python3 scripts/graph_probe.py OUT.json [--sets llama2-7b,llama2-13b,llama2-70b]
                                   [--m 1,16,64,128] [--group-size 128] [--reps 15]

For each set and M, the set's layers run in order, each reading a static input ``x`` [M, K]
of its own and writing a static output, over R passes whose weights rotate through R copies
of the whole block, R the harness's rotation for the block's bytes (``rotation_copies``: no
weight byte is still in the L2 when it is read again). Variants:
- ``marlin_graph``: ``matmul`` (the default dispatch) on torch tensors, captured with
  ``torch.cuda.graph``, one replay timed;
- ``marlin_graph_pdl``: the same with ``pdl=True``;
- ``fp16_graph``: ``torch.matmul`` (cuBLAS, the harness's faster FP16 GEMM on these shapes)
  into static outputs, fp16 weights rotated the same way, captured and replayed;
- ``marlin_stream`` and ``fp16_stream``: the same launches without a graph, back to back on one
  stream, events only around the R passes.
Each is timed by ``bench.harness.Timer`` (CUDA events, the host kept ahead by a spin kernel,
median), twice with the variants interleaved; ``block_us`` is the mean of the two medians
divided by R: one block's layers at M, their launches' gaps included. Outputs of every variant
of ours equal an eager ``matmul``'s bitwise (exit status 1 otherwise). Writes OUT.json and a
table in OUT.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import marlin_cupy as mc  # noqa: E402
from marlin_cupy import ops  # noqa: E402
from marlin_cupy.bench.harness import (L2_FACTOR, Timer, bench_stream,  # noqa: E402
                                       random_weight_rotation, rotation_copies)
from marlin_cupy.bench.shapes import ALL_SETS  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402

VARIANTS = ("marlin_stream", "marlin_graph", "marlin_graph_pdl", "fp16_stream", "fp16_graph")


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    p.add_argument("--m", default="1,16,64,128")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--reps", type=int, default=15, help="fewest replays per measurement")
    a = p.parse_args(argv)
    import torch
    sets = [s.strip() for s in a.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s not in ALL_SETS]
    if unknown:
        p.error(f"unknown sets {unknown}; choose from {', '.join(ALL_SETS)}")
    ms = [int(v) for v in a.m.split(",")]
    g = a.group_size
    l2 = int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id).get("l2CacheSize",
                                                                        50 << 20))
    rng = np.random.default_rng(0)
    rows, failures = [], 0
    with bench_stream(torch) as stream:
        timer = Timer(stream, budget_ms=30.0, min_reps=a.reps, max_reps=4 * a.reps)
        for name in sets:
            shapes = [tuple(s) for s in ALL_SETS[name]]
            q_bytes = sum(k * n // 2 for k, n in shapes)
            passes = rotation_copies(q_bytes, l2, 16 << 30, L2_FACTOR)
            h_bytes = sum(k * n * 2 for k, n in shapes)
            passes16 = rotation_copies(h_bytes, l2, 32 << 30, L2_FACTOR)
            # mws[r][j]: copy r of layer j (one random weight per layer, copied R times).
            per_layer = [random_weight_rotation(k, n, g, rng, copies=passes) for k, n in shapes]
            mws = [[per_layer[j][r] for j in range(len(shapes))] for r in range(passes)]
            w16 = [[torch.randn((k, n), device="cuda", dtype=torch.float16) for k, n in shapes]
                   for _ in range(passes16)]
            for m in ms:
                xs = [torch.randn((m, k), device="cuda", dtype=torch.float16) for k, _ in shapes]
                outs = {v: [torch.empty((m, n), device="cuda", dtype=torch.float16)
                            for _, n in shapes] for v in VARIANTS}
                configs = [ops.plan(m, n, k, g).config.name for k, n in shapes]

                def ours(variant, pdl):
                    def run():
                        for r in range(passes):
                            for j in range(len(shapes)):
                                mc.matmul(xs[j], mws[r][j], out=outs[variant][j], pdl=pdl)
                    return run

                def fp16(variant):
                    def run():
                        for r in range(passes16):
                            for j in range(len(shapes)):
                                torch.matmul(xs[j], w16[r][j], out=outs[variant][j])
                    return run

                def graph_of(run):
                    run()                          # compiles, loads, warms cuBLAS
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        run()
                    torch.cuda.synchronize()
                    return graph

                g_plain = graph_of(ours("marlin_graph", False))
                g_pdl = graph_of(ours("marlin_graph_pdl", True))
                g16 = graph_of(fp16("fp16_graph"))
                # variant -> (one timed call, passes it runs)
                calls = {"marlin_stream": (ours("marlin_stream", False), passes),
                         "marlin_graph": (g_plain.replay, passes),
                         "marlin_graph_pdl": (g_pdl.replay, passes),
                         "fp16_stream": (fp16("fp16_stream"), passes16),
                         "fp16_graph": (g16.replay, passes16)}
                times = {v: [] for v in VARIANTS}
                for _ in range(2):
                    for v in VARIANTS:
                        run = calls[v][0]
                        times[v].append(timer.measure(lambda i, run=run: run(), 1)
                                        .stats.median_us)
                # The last pass's outputs of ours, against eager calls of the same weights.
                stream.synchronize()
                want = [mc.matmul(xs[j], mws[passes - 1][j]) for j in range(len(shapes))]
                torch.cuda.synchronize()
                same = all(torch.equal(outs[v][j].view(torch.int16), want[j].view(torch.int16))
                           for v in ("marlin_stream", "marlin_graph", "marlin_graph_pdl")
                           for j in range(len(shapes)))
                failures += not same
                row = {"set": name, "m": m, "passes": passes, "passes_fp16": passes16,
                       "configs": configs, "equal": same}
                for v in VARIANTS:
                    n_passes = calls[v][1]
                    row[f"{v}_us"] = statistics.fmean(times[v]) / n_passes
                    row[f"{v}_runs_us"] = [t / n_passes for t in times[v]]
                rows.append(row)
                print(f"{name} M={m} (R={passes}/{passes16}): " + ", ".join(
                    f"{v} {row[f'{v}_us']:.1f}" for v in VARIANTS)
                    + f" us per block; graph speedup {row['fp16_graph_us'] / row['marlin_graph_us']:.2f}x"
                    f" (pdl {row['fp16_graph_us'] / row['marlin_graph_pdl_us']:.2f}x), stream "
                    f"{row['fp16_stream_us'] / row['marlin_stream_us']:.2f}x"
                    + ("" if same else "  MISMATCH"), flush=True)
                del g_plain, g_pdl, g16
            del mws, per_layer, w16
            cp.get_default_memory_pool().free_all_blocks()
            torch.cuda.empty_cache()
    record = {"kind": "graph_probe", **environment(), "group_size": g, "sets": sets,
              "batches": ms, "failures": failures, "rows": rows}
    out = Path(a.out)
    out.write_text(json.dumps(record, indent=1))
    out.with_suffix(".md").write_text(markdown(record))
    print(f"graph_probe: {len(rows)} rows, {failures} failures")
    return 1 if failures else 0


def markdown(record: dict) -> str:
    """The record's table: per set and M, each variant's time per block and the speedups."""
    dev = record.get("device") or {}
    lines = [f"# One block per CUDA graph replay ({dev.get('name', '?')}, "
             f"commit {record['git_commit'][:12]}, {record['date']})", "",
             "Time per block (µs): the set's layers in order, static inputs and outputs, "
             "weights rotated past the L2 over R passes per replay (`scripts/graph_probe.py`). "
             "Speedups are FP16's time over ours, graph against graph and stream against "
             "stream.", "",
             "| set | M | marlin stream | marlin graph | marlin graph pdl | fp16 stream | "
             "fp16 graph | graph x | graph pdl x | stream x | equal |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in record["rows"]:
        lines.append(
            f"| {r['set']} | {r['m']} | " + " | ".join(f"{r[f'{v}_us']:.1f}" for v in VARIANTS)
            + f" | {r['fp16_graph_us'] / r['marlin_graph_us']:.2f}"
            f" | {r['fp16_graph_us'] / r['marlin_graph_pdl_us']:.2f}"
            f" | {r['fp16_stream_us'] / r['marlin_stream_us']:.2f} | {r['equal']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
