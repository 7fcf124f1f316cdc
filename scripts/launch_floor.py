"""What a launch costs before any CTA does work, by its shape (needs a GPU).

    python3 scripts/launch_floor.py OUT_STEM

Times, as the benchmark harness times a call (``bench.harness.Timer``: CUDA events around each
launch, queued behind a spin so that the host's launch cost stays outside), an empty kernel
launched with the shapes our kernel uses (132 or 264 CTAs, 128 to 640 threads, up to 227 KB of
dynamic shared memory) and with the plain read's (``scripts/read_ceiling.py``: 2112 CTAs of 256
threads, no shared memory), and the plain read itself on a few bytes and on one llama2 layer's.

The question it answers (benchmarks/NOTES.md entries 63 and 80): the time outside any CTA
(3.0-3.3 µs per launch in the timelines) was taken to be paid by a plain read too. If a launch of
our shape costs more than one of the read's shape with no work in either, that difference is a
part of our fixed cost per launch that no kernel change reaches. Writes OUT_STEM.json and
OUT_STEM.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "scripts"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

EMPTY_SRC = r'''
// Does nothing unless flag says so (it never does): the launch and the CTAs' start and exit.
extern "C" __global__ void empty(int* sink, int flag) {
  if (flag == 12345 && threadIdx.x == 0) sink[blockIdx.x] = 1;
}
'''

#: (grid, threads, dynamic shared memory bytes); grid "sms" = one CTA per SM, "2sms" = two.
SHAPES = [(g, t, s) for g in ("sms", "2sms", 2112)
          for t in (128, 256, 384, 640)
          for s in (0, 48 * 1024, 100 * 1024, 200 * 1024, 227 * 1024)
          if not (g == 2112 and s > 0) and not (g == "2sms" and (s > 100 * 1024 or t > 384))]


def grid_of(g, sms: int) -> int:
    return sms if g == "sms" else 2 * sms if g == "2sms" else int(g)


def table(rows: list) -> str:
    """The markdown table of the rows (pure: tested on the CPU)."""
    lines = ["| kernel | grid | threads | dynamic smem (KB) | bytes read | median µs | p20 µs | p80 µs |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['grid']} | {r['threads']} | {r['smem'] // 1024} | "
                     f"{r['bytes']} | {r['median_us']:.2f} | {r['p20_us']:.2f} | {r['p80_us']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_stem")
    ap.add_argument("--reps", type=int, default=400)
    a = ap.parse_args(argv)

    import cupy as cp
    from marlin_cupy import jit, records
    from marlin_cupy.bench.harness import Timer, bench_stream
    from read_ceiling import READ_SRC

    sms = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]
    empty = jit.load_module(EMPTY_SRC).get_function("empty")
    empty.max_dynamic_shared_size_bytes = 227 * 1024
    read1 = jit.load_module(READ_SRC).get_function("read1")
    sink = cp.zeros(4096, cp.int32)
    small = [cp.zeros(4096 // 4, cp.int32)]                   # 4 KB, L2-resident
    # 4096x4096's weights and scales (8.65 MB), eight copies in turn: 69 MB, past the 60 MB L2
    layer = [cp.ones(4096 * 4096 // 8 + 4096 * 32 * 2 // 4, cp.int32) for _ in range(8)]
    rows = []
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=1e9, min_reps=a.reps, max_reps=a.reps)
        for g, t, s in SHAPES:
            grid = grid_of(g, sms)
            st = timer.measure(lambda i, grid=grid, t=t, s=s: empty(
                (grid,), (t,), (sink, np.int32(0)), shared_mem=s), 1).stats
            rows.append({"kernel": "empty", "grid": grid, "threads": t, "smem": s, "bytes": 0,
                         "median_us": st.median_us, "p20_us": st.p20_us, "p80_us": st.p80_us})
            print(f"empty grid {grid} x {t} smem {s}: {st.median_us:.2f} us", flush=True)
        for bufs in (small, layer):
            n4 = bufs[0].size // 4
            for grid in (sms, 2112):
                st = timer.measure(lambda i, grid=grid, bufs=bufs, n4=n4: read1(
                    (grid,), (256,), (bufs[i], np.int64(n4), bufs[i], np.int64(0), sink)),
                    len(bufs)).stats
                rows.append({"kernel": "read1", "grid": grid, "threads": 256, "smem": 0,
                             "bytes": int(bufs[0].nbytes), "median_us": st.median_us,
                             "p20_us": st.p20_us, "p80_us": st.p80_us})
                print(f"read1 grid {grid} bytes {bufs[0].nbytes}: {st.median_us:.2f} us",
                      flush=True)
    rec = {"kind": "launch_floor", "environment": records.environment(), "reps": a.reps,
           "method": "bench.harness.Timer: events around each launch behind a spin; the 4 KB "
                     "read stays in the L2, the layer-sized one rotates 8 copies (69 MB) past "
                     "it", "rows": rows}
    records.write_json(Path(a.out_stem + ".json"), rec)
    env = rec["environment"]
    Path(a.out_stem + ".md").write_text(
        f"# Launch floor ({env.get('device', {}).get('name', '?')}, commit "
        f"{str(env.get('git_commit', '?'))[:12]}, {env.get('date', '?')})\n\n"
        f"`scripts/launch_floor.py`, {a.reps} launches per row, the harness's timer.\n\n"
        + table(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
