"""The main job in one command: quantize a real-shaped layer, pack it, and run it on the GPU.

    python -m marlin_cupy.demo [--k 4096] [--n 11008] [--m 16]

1. Quantize a random float32 weight ``W [K, N]`` (entries ~ N(0, 0.02), like a trained LLM
   layer) to 4-bit with groups of 128 and report the quantization error.
2. Pack it into the Marlin tiled layout and check that unpacking gives the codes back.
3. Where a GPU exists: run ``mc.matmul`` on ``x [M, K]`` in fp16, compare it and CuPy's FP16
   GEMM against a float64 reference on the same dequantized weights, and time both with CUDA
   events (median, L2 flushed before every run so the weights come from HBM as in serving).
   Without a GPU this step is skipped, and the output says why.

With ``--checkpoint FOLDER`` the same steps run on a GPTQ or AWQ checkpoint's layers instead,
one layer at a time (``iter_gptq_checkpoint`` / ``iter_awq_checkpoint``): each is read, packed
and unpacked again, and where a GPU exists run on ``x [M, K]`` against FP16 on its dequantized
weights, with the accuracy rule below and both times; a summary gives the summed times. A
layer whose shape the layout or the kernel does not take is listed as not run, with the reason.
``--layer NAME`` (repeatable) picks layers, ``--max-layers N`` stops after N.

Exit status: 0 when every step that ran passed; 1 when the kernel's result fails the accuracy
rule of DESIGN.md s.6 (error at most 2x cuBLAS FP16's plus 1e-4) or a layer does not unpack to
its codes; 2 when a checkpoint cannot be read (the message says why).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

import marlin_cupy as mc
from marlin_cupy import records
from marlin_cupy._cli import positive_int


def _step(name: str):
    """``mc.<name>``, or ``None`` when this build does not have it yet."""
    try:
        return getattr(mc, name)
    except (AttributeError, ImportError) as e:
        print(f"   mc.{name} is unavailable in this build ({type(e).__name__}: {e}); "
              f"skipping this step.")
        return None


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB"


def quantize_part(args):
    """Steps 1 and 2 on the CPU; returns the packed weight and its dequantized reference."""
    rng = np.random.default_rng(args.seed)
    w = (rng.standard_normal((args.k, args.n), dtype=np.float32) * 0.02)      # [K, N]

    print(f"1. quantize W [K={args.k}, N={args.n}] to 4 bits, group size {args.group_size}, "
          f"symmetric (uint4b8)")
    quantize = _step("quantize")
    if quantize is None:
        return None, None
    t0 = time.perf_counter()
    qw = quantize(w, bits=4, group_size=args.group_size, sym=True)
    seconds = time.perf_counter() - t0
    w_hat = qw.dequantize()                                                    # [K, N]
    err = w - w_hat
    rel = float(np.linalg.norm(err) / np.linalg.norm(w))
    sqnr = -20 * np.log10(rel)
    print(f"   {seconds:.2f} s; relative error ||W - W_hat|| / ||W|| = {rel:.4f} "
          f"(SQNR {sqnr:.1f} dB), max |W - W_hat| = {np.abs(err).max():.2e}")

    print("2. pack into the Marlin tiled layout")
    pack, unpack = _step("pack"), _step("unpack")
    if pack is None:
        return None, w_hat
    t0 = time.perf_counter()
    mw = pack(qw)
    seconds = time.perf_counter() - t0
    fp16_bytes = args.k * args.n * 2
    packed_bytes = mw.qweight.nbytes + mw.scales.nbytes
    print(f"   {seconds:.2f} s; qweight int32 {list(mw.qweight.shape)} + scales = "
          f"{_mb(packed_bytes)} (FP16 weight: {_mb(fp16_bytes)}, "
          f"{fp16_bytes / packed_bytes:.2f}x smaller)")
    if unpack is not None:
        same = unpack(mw).equals(qw)
        print(f"   unpack(pack(q)) == q: {'yes' if same else 'NO'}")
        if not same:
            raise SystemExit("unpack(pack(q)) differs from q: the layout code is broken")
    return mw, w_hat


def _median_us(run, flush, reps: int) -> float:
    """CUDA-event median of ``run()`` in microseconds, with ``flush()`` before every rep.

    A short spin kernel between the flush and the start event keeps the GPU busy while Python
    launches ``run()``, so the host's launch cost stays out of the measured interval (the
    benchmark harness does the same, see bench/harness.py).
    """
    import cupy as cp
    from .bench.harness import Timer
    timer = Timer(cp.cuda.get_current_stream())
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        flush()
        timer.spin(300.0)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
    return float(np.median(times))


def _relative_error(y, ref) -> float:
    import cupy as cp
    y = cp.asnumpy(y).astype(np.float64)
    if not np.isfinite(y).all():
        return float("nan")
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


class _Measure:
    """Accuracy against float64 and CUDA-event times against CuPy's FP16 GEMM, one weight at a
    time, with one L2-flushing buffer for all of them."""

    def __init__(self, args):
        import cupy as cp
        self.args = args
        self.dev = records.device_info()
        # Writing a buffer twice the L2 size before each run evicts the weights, as in serving
        # where other layers' weights pass through L2 between two calls of this one.
        self.scratch = cp.empty(2 * self.dev["l2_bytes"], dtype=cp.uint8)

    def __call__(self, mw, w_hat, seed: int) -> dict:
        """``mw`` (host) against ``w_hat`` [K, N]: errors, the accuracy rule and both medians."""
        import cupy as cp
        m, k = self.args.m, w_hat.shape[0]
        rng = np.random.default_rng(seed)
        x_host = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
        ref = x_host.astype(np.float64) @ w_hat.astype(np.float64)             # [M, N]
        x = cp.asarray(x_host)                                                 # [M, K]
        w16 = cp.asarray(w_hat.astype(np.float16))                             # [K, N]
        mw_dev = mw.to_device()
        err = _relative_error(mc.matmul(x, mw_dev), ref)
        err_fp16 = _relative_error(cp.matmul(x, w16), ref)
        bound = 2 * err_fp16 + 1e-4
        flush = (lambda: self.scratch.fill(1))
        for _ in range(3):                                                     # warm-up
            mc.matmul(x, mw_dev)
            cp.matmul(x, w16)
        t = _median_us(lambda: mc.matmul(x, mw_dev), flush, self.args.reps)
        t_fp16 = _median_us(lambda: cp.matmul(x, w16), flush, self.args.reps)
        return dict(err=err, err_fp16=err_fp16, bound=bound, passed=err <= bound,   # NaN fails
                    us=t, us_fp16=t_fp16)


def kernel_part(args, mw, w_hat) -> int:
    """Step 3 on the GPU: accuracy against float64 and speed against CuPy's FP16 GEMM."""
    measure = _Measure(args)
    print(f"3. GPU {measure.dev['name']} ({measure.dev['sms']} SMs): y = x @ W with x "
          f"[M={args.m}, K={args.k}] fp16")
    if _step("matmul") is None:
        return 0
    r = measure(mw, w_hat, args.seed + 1)
    print(f"   relative error against float64: marlin {r['err']:.2e}, cuBLAS FP16 on the same "
          f"dequantized weights {r['err_fp16']:.2e} -> {'PASS' if r['passed'] else 'FAIL'} "
          f"(bound 2x cuBLAS + 1e-4 = {r['bound']:.2e})")
    print(f"   median of {args.reps} runs, L2 flushed before each: marlin {r['us']:.1f} us, "
          f"cupy.matmul FP16 {r['us_fp16']:.1f} us -> speedup {r['us_fp16'] / r['us']:.2f}x")
    return 0 if r["passed"] else 1


def checkpoint_kind(folder) -> str:
    """``"gptq"`` or ``"awq"``, from the checkpoint's config: its ``quant_method``, else AWQ
    for AutoAWQ's ``quant_config.json`` or a config with ``zero_point``/``version``, else
    GPTQ (older AutoGPTQ configs name no method)."""
    from .formats import _read_config
    path, cfg = _read_config(folder, extra=("quant_config.json",))
    method = cfg.get("quant_method")
    if method is None:
        awq = path.name == "quant_config.json" or "zero_point" in cfg or "version" in cfg
        return "awq" if awq else "gptq"
    return str(method).lower()


def checkpoint_part(args) -> int:
    """The demo's steps on every layer of a checkpoint (``--checkpoint``), one at a time."""
    folder = Path(args.checkpoint)
    try:
        kind = args.format if args.format != "auto" else checkpoint_kind(folder)
        if kind not in ("gptq", "awq"):
            raise ValueError(f"{folder}'s config has quant_method={kind!r}; the demo reads "
                             f"'gptq' and 'awq' checkpoints.")
        iterate = mc.iter_gptq_checkpoint if kind == "gptq" else mc.iter_awq_checkpoint
        layers = iterate(folder, args.layer or None)
    except ValueError as e:
        print(f"cannot read the checkpoint: {e}", file=sys.stderr)
        return 2
    print(f"marlin-cupy demo: the layers of {kind.upper()} checkpoint {folder}, y = x @ W with "
          f"x [M={args.m}, K] fp16")
    reason = records.gpu_unavailable_reason()
    if reason is not None:
        print(f"No GPU: skipped the kernel part (reason: {reason}); each layer is read, packed "
              f"and unpacked on the CPU.")
    measure = _Measure(args) if reason is None else None
    if measure is not None:
        print(f"GPU {measure.dev['name']} ({measure.dev['sms']} SMs); times are medians of "
              f"{args.reps} runs, L2 flushed before each")
    counts = dict(layers=0, failed=0, skipped=0)
    total = total_fp16 = 0.0
    if args.max_layers is not None:            # stop before reading the next layer at all
        layers = itertools.islice(layers, args.max_layers)
    try:
        for name, qw in layers:
            counts["layers"] += 1
            what = (f"K={qw.k} N={qw.n} {qw.bits}-bit g{qw.group_size}"
                    f"{'' if qw.sym else ' zp'}{' act-order' if qw.g_idx is not None else ''}")
            try:
                mw = mc.pack(qw)
            except ValueError as e:            # a shape the layout does not take: its message
                counts["skipped"] += 1
                print(f"{name} ({what}): not packed: {e}")
                continue
            if not mc.unpack(mw).equals(qw):
                counts["failed"] += 1
                print(f"{name} ({what}): unpack(pack(q)) differs from q -> FAIL")
                continue
            if measure is None:
                print(f"{name} ({what}): packed, unpack(pack(q)) == q")
                continue
            if qw.bits != 4:
                counts["skipped"] += 1
                print(f"{name} ({what}): packed; not run (the kernel runs 4-bit weights only)")
                continue
            try:
                r = measure(mw, qw.dequantize(), args.seed + counts["layers"])
            except ValueError as e:            # a shape the kernel does not run: its message
                counts["skipped"] += 1
                print(f"{name} ({what}): packed; not run: {e}")
                continue
            counts["failed"] += not r["passed"]
            total, total_fp16 = total + r["us"], total_fp16 + r["us_fp16"]
            print(f"{name} ({what}): error {r['err']:.2e} (FP16 {r['err_fp16']:.2e}) -> "
                  f"{'PASS' if r['passed'] else 'FAIL'}; {r['us']:.1f} us, FP16 "
                  f"{r['us_fp16']:.1f} us, {r['us_fp16'] / r['us']:.2f}x")
    except ValueError as e:
        print(f"cannot read the checkpoint: {e}", file=sys.stderr)
        return 2
    ran = counts["layers"] - counts["skipped"] - counts["failed"]
    plural = "" if counts["layers"] == 1 else "s"
    print(f"{counts['layers']} layer{plural}: {ran} passed, {counts['failed']} failed, "
          f"{counts['skipped']} not run" + (
              f"; summed {total:.1f} us against FP16's {total_fp16:.1f} us -> "
              f"{total_fp16 / total:.2f}x" if total > 0 else ""))
    return 1 if counts["failed"] else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m marlin_cupy.demo", description=__doc__.split("\n")[0],
        epilog="Without a GPU the kernel part is skipped and the output says why. Exit status: "
               "0 when every step that ran passed, 1 when a result fails the accuracy rule or a "
               "layer does not unpack to its codes, 2 for bad arguments or an unreadable "
               "checkpoint.")
    ap.add_argument("--k", type=positive_int, default=4096,
                    help="in_features (default 4096; a multiple of 16 and of the group size)")
    ap.add_argument("--n", type=positive_int, default=11008,
                    help="out_features (default 11008; a multiple of 64)")
    ap.add_argument("--m", type=positive_int, default=16, help="batch rows of x (default 16)")
    ap.add_argument("--group-size", type=int, default=128, choices=(32, 64, 128, -1),
                    help="quantization group (default 128; -1: one per output channel)")
    ap.add_argument("--reps", type=positive_int, default=100,
                    help="timed runs per kernel (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", metavar="FOLDER",
                    help="run the steps on a GPTQ or AWQ checkpoint's layers instead (--k, --n "
                         "and --group-size are then the checkpoint's)")
    ap.add_argument("--format", choices=("auto", "gptq", "awq"), default="auto",
                    help="the checkpoint's format (default: from its config)")
    ap.add_argument("--layer", action="append", metavar="NAME",
                    help="only this layer of the checkpoint (repeatable)")
    ap.add_argument("--max-layers", type=positive_int, metavar="N",
                    help="stop after N layers of the checkpoint (N >= 1)")
    args = ap.parse_args(argv)
    if args.checkpoint is not None:
        return checkpoint_part(args)
    if args.group_size != -1 and args.k % args.group_size:
        ap.error(f"--k {args.k} is not a multiple of --group-size {args.group_size}")
    if args.k % 16 or args.n % 64:
        ap.error(f"the Marlin layout needs --k a multiple of 16 and --n a multiple of 64; got "
                 f"--k {args.k}, --n {args.n}")

    print(f"marlin-cupy demo: one linear layer y = x @ W, W [K={args.k}, N={args.n}], "
          f"4-bit weights x fp16 activations")
    mw, w_hat = quantize_part(args)

    reason = records.gpu_unavailable_reason()
    if reason is not None:
        print(f"No GPU: skipped the kernel part (reason: {reason}).")
        return 0
    if mw is None:
        print("3. kernel part skipped: there is no packed weight (see above).")
        return 0
    return kernel_part(args, mw, w_hat)


if __name__ == "__main__":
    sys.exit(main())
