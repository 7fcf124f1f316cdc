"""The SM clock and the board power while one GEMM runs back to back for a few seconds (needs a
GPU and ``nvidia-smi``): is a layer at large M bound by the chip's power, and does our kernel
spend more of it per FLOP than FP16 cuBLAS? (benchmarks/NOTES.md entry 87.)

    python3 scripts/power_probe.py OUT.json [--layers 8192x57344,4096x22016] [--m 1024,2048]
                                   [--seconds 3] [--probe 8[,P...]] [--reverse]

For every layer K x N and M, runs in turn, each ``--seconds`` of back-to-back calls on one
stream (one weight copy: at large M the layer is far from memory-bound; at M <= 64 pick layers
larger than the L2, NOTES.md entry 92):
- ``marlin``: ``matmul`` with its default dispatch (the shipped table's config);
- ``marlin-probeP``: the same config built with ``#define MARLIN_PROBE P`` (a measurement build
  whose output is garbage; 8 leaves out the dequantization's FP16 arithmetic, 6 the group
  scale's HMUL2, 1 the math, 16 the stream; a comma-separated list runs each in turn;
  ``--probe 0`` skips these runs);
- ``cublas-fp16``: ``cupy.matmul`` on FP16 weights of the same distribution (codes less 8 times
  a column scale).
Meanwhile ``nvidia-smi -lms 50`` samples the SM clock, the board power, the power limit and the
active clock-event reasons; a sample counts if it arrived between 0.5 s after the run started
and its end (host time of arrival). Per run: the time per call (events around the whole run),
TFLOP/s, the median and range of the clock and power samples, and the reasons seen. A
second of idle between runs lets the board cool a little; the order of the runs is the same
for every case (``--reverse``: cuBLAS first), so a pair of runs in both orders says which
kernel draws what on a warm chip, not the absolute steady state of a long job.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import cupy as cp  # noqa: E402

from marlin_cupy import ops  # noqa: E402
from marlin_cupy.bench.harness import random_weight_rotation  # noqa: E402
from marlin_cupy.records import environment  # noqa: E402

FIELDS = ["clocks.sm", "power.draw", "power.limit", "clocks_event_reasons.active"]
OLD_FIELDS = ["clocks.sm", "power.draw", "power.limit", "clocks_throttle_reasons.active"]


def smi_fields(exe):
    """The query fields this driver's nvidia-smi takes (the reasons' name changed once)."""
    for fields in (FIELDS, OLD_FIELDS, FIELDS[:3]):
        r = subprocess.run([exe, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode == 0 and "not a valid field" not in r.stdout.lower():
            return fields
    raise SystemExit("nvidia-smi takes none of the query fields " + ",".join(FIELDS))


class Sampler:
    """``nvidia-smi -lms`` in the background; every line stamped with its host arrival time."""

    def __init__(self, exe, fields, period_ms=50):
        self.fields = fields
        self.samples = []
        self.proc = subprocess.Popen(
            [exe, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits",
             f"-lms={period_ms}"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            vals = [v.strip() for v in line.split(",")]
            if len(vals) != len(self.fields):
                continue
            self.samples.append((time.monotonic(), vals))

    def window(self, t0, t1):
        return [v for t, v in self.samples if t0 <= t <= t1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def summarize(vals, fields):
    """Median, min and max of the clock and power; the set of reasons seen."""
    out = {"samples": len(vals)}
    for i, name in enumerate(fields):
        col = [v[i] for v in vals]
        if name.endswith("reasons.active"):
            out["reasons"] = sorted(set(col))
            continue
        try:
            nums = np.array([float(c) for c in col])
        except ValueError:
            out[name] = col[:3]
            continue
        if len(nums):
            out[name] = {"median": float(np.median(nums)), "min": float(nums.min()),
                         "max": float(nums.max())}
    return out


def run_for(call, seconds, stream):
    """Back-to-back calls for about ``seconds``; returns (calls, GPU ms, host t0, host t1)."""
    for _ in range(3):
        call()
    stream.synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    t0 = time.monotonic()
    start.record(stream)
    calls = 0
    # Enqueue in batches and keep at most about two batches ahead of the GPU.
    batch_end = None
    while time.monotonic() - t0 < seconds:
        for _ in range(20):
            call()
        calls += 20
        if batch_end is not None:
            batch_end.synchronize()
        batch_end = cp.cuda.Event()
        batch_end.record(stream)
    end.record(stream)
    end.synchronize()
    t1 = time.monotonic()
    return calls, cp.cuda.get_elapsed_time(start, end), t0, t1


def probe_list(spec: str) -> list:
    """``--probe``'s measurement builds, in the order given: "8" -> [8], "1,8,16" -> [1, 8, 16];
    0 (alone or in the list) runs none."""
    out = []
    for v in spec.split(","):
        n = int(v)
        if n < 0:
            raise ValueError(f"--probe takes MARLIN_PROBE numbers (0 for none), not {n}")
        if n and n not in out:
            out.append(n)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--layers", default="8192x57344,4096x22016")
    p.add_argument("--m", default="1024,2048")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--probe", default="8",
                   help="MARLIN_PROBE builds to run beside ours, comma-separated; 0: none")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--reverse", action="store_true",
                   help="run the case's runs in the opposite order (cuBLAS first): the board warms "
                        "over a case, so a second run in the other order separates the kernels "
                        "from their place in it")
    a = p.parse_args(argv)
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise SystemExit("power_probe needs nvidia-smi")
    fields = smi_fields(exe)
    layers = [tuple(int(v) for v in s.split("x")) for s in a.layers.split(",")]
    ms = [int(v) for v in a.m.split(",")]
    probes = probe_list(a.probe)
    rng = np.random.default_rng(0)
    sampler = Sampler(exe, fields)
    rows = []
    try:
        time.sleep(1.0)
        idle = summarize(sampler.window(0, time.monotonic()), fields)
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            for k, n in layers:
                mw = random_weight_rotation(k, n, a.group_size, rng, copies=1)[0]
                # FP16 weights with the packed ones' distribution (4-bit codes less 8, times
                # a column scale in [1e-3, 1e-2)): the tensor cores' power follows the bits.
                cp.random.seed(1)
                w16 = ((cp.random.randint(0, 16, (k, n)) - 8).astype(cp.float16)
                       * cp.random.uniform(1e-3, 1e-2, (1, n)).astype(cp.float16))
                for m in ms:
                    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                    out = cp.empty((m, n), dtype=cp.float16)
                    cfg = ops.plan(m, n, k, a.group_size).config
                    runs = [("marlin", lambda: ops.matmul(x, mw, out=out), None)]
                    # Built in the form the default dispatch takes for this weight.
                    fma = ops.use_scale_fma(cfg, False, mw.fma_scales)
                    for probe in probes:
                        kern = ops.build_kernel(cfg, False, prefix=f"#define MARLIN_PROBE {probe}\n",
                                                fma=fma)
                        runs.append((f"marlin-probe{probe}", lambda: ops.matmul(x, mw, out=out),
                                     kern))
                    runs.append(("cublas-fp16", lambda: cp.matmul(x, w16, out=out), None))
                    for name, call, kern in (runs[::-1] if a.reverse else runs):
                        time.sleep(1.0)
                        if kern is not None:
                            with ops.use_kernel(cfg, kern, fma=fma):
                                assert ops.plan(m, n, k, a.group_size).kernel is kern
                                calls, ms_gpu, t0, t1 = run_for(call, a.seconds, stream)
                        else:
                            calls, ms_gpu, t0, t1 = run_for(call, a.seconds, stream)
                        us = 1e3 * ms_gpu / calls
                        row = {"k": k, "n": n, "m": m, "run": name,
                               "config": cfg.name if name.startswith("marlin") else None,
                               "calls": calls, "us_per_call": us,
                               "tflops": 2.0 * m * n * k / us / 1e6,
                               **summarize(sampler.window(t0 + 0.5, t1), fields)}
                        rows.append(row)
                        clk = row.get("clocks.sm", {}).get("median")
                        pw = row.get("power.draw", {}).get("median")
                        print(f"{k}x{n} M={m} {name}: {us:.1f} us/call, {row['tflops']:.0f} "
                              f"TFLOP/s, SM {clk} MHz, {pw} W, reasons {row.get('reasons')}",
                              flush=True)
                    del x, out
                del mw, w16
                cp.get_default_memory_pool().free_all_blocks()
    finally:
        sampler.stop()
    with open(a.out, "w") as f:
        json.dump({"kind": "power_probe", "fields": fields, "seconds": a.seconds,
                   "order": "reversed" if a.reverse else "marlin, probes, cublas",
                   "probe": probes, "group_size": a.group_size, "idle": idle,
                   "environment": environment(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
