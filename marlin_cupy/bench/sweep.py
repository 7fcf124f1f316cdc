"""The sweep: for every layer and batch size, gate each provider's product, then time it.

Order of work, per layer:
  1. build a random quantized layer (``workload``), random fp16 activations for the largest batch,
     and the float32 reference ``x @ W`` (a batch of ``m`` rows is the first ``m`` rows of both);
  2. each provider makes its rotation copies of the weights (``harness.rotation_copies``);
  3. per batch size and provider: poison the output, run once, compare with the reference
     (``harness.relative_error`` against the provider's tolerance); only a provider that passes is
     timed and gets a row. One that fails goes to ``failed`` with its error, one that cannot run
     the shape or batch goes to ``skipped`` with the reason. A fast wrong kernel never gets a row.
  4. a short cool-down between batch sizes, and all of the layer's memory is freed.

``run_sweep`` returns the record (DESIGN.md s.8 plus the fields documented in
``benchmarks/README.md``); writing it is the caller's business.
"""
from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field

from . import harness, metrics, shapes
from .providers import Skip


@dataclass
class SweepOptions:
    batches: tuple = shapes.DEFAULT_BATCHES
    group_size: int = shapes.DEFAULT_GROUP_SIZE
    budget_ms: float = harness.DEFAULT_BUDGET_MS
    min_reps: int = harness.DEFAULT_MIN_REPS
    max_reps: int = harness.DEFAULT_MAX_REPS
    warmup: int = harness.DEFAULT_WARMUP
    cooldown_s: float = 0.1                 # between batch sizes
    copy_cap_bytes: int = 40 * 10 ** 9      # all rotation copies of one layer together
    copy_bandwidth_bytes: int = 1 << 30
    l2_factor: float = harness.L2_FACTOR
    seed: int = 0
    chain_len: int = 0                      # 0: events around every call; L: chains of L calls
    progress: bool = True
    extra: dict = field(default_factory=dict)


class _Progress:
    """tqdm when it is installed and wanted, else silence; ``write`` never breaks the bar."""

    def __init__(self, total, enabled):
        self.bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm
                self.bar = tqdm(total=total, unit="run", dynamic_ncols=True, file=sys.stderr)
            except ImportError:
                pass

    def step(self, text):
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)

    def write(self, text):
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _error_text(exc) -> str:
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return last[:500]


def _context_broken():
    """The CUDA error that a failed launch left behind, or ``None`` while the context still works."""
    import cupy as cp
    try:
        cp.cuda.runtime.deviceSynchronize()
    except cp.cuda.runtime.CUDARuntimeError as e:  # an illegal address or instruction poisons the context
        return _error_text(e)
    return None


class _Outcomes:
    """The three lists a sweep fills: timed rows, failures, skips (one entry per run)."""

    def __init__(self, progress):
        self.rows, self.failed, self.skipped = [], [], []
        self.progress = progress

    def skip(self, layer, p, m, reason):
        self.skipped.append(_entry(layer, p, m, reason))

    def fail(self, layer, p, m, reason, rel_error=None):
        self.failed.append({**_entry(layer, p, m, reason), "rel_error": rel_error, "tolerance": p.tolerance})
        self.progress.write(f"FAILED {layer.name} m={m} {p.label}: {reason}")


def _entry(layer, p, m, reason) -> dict:
    return {"set": layer.set, "layer": layer.index, "provider": p.name, "label": p.label,
            "m": m, "k": layer.k, "n": layer.n, "reason": reason}


def run_sweep(layers, providers, options: SweepOptions = None) -> dict:
    """Measure ``providers`` on ``layers`` (``shapes.Layer``) at ``options.batches``; the record."""
    import cupy as cp
    from .. import records

    options = options or SweepOptions()
    t_start = time.time()
    env = records.environment()
    clocks_start = harness.gpu_clocks()
    batches = tuple(options.batches)

    availability, active = {}, []
    for p in providers:
        reason = p.unavailable_reason()
        if reason is None and p.chains_only and not options.chain_len:
            reason = ("timed only in chains (--chain-len): an event recorded between two calls "
                      "ends the overlap it exists for")
        availability[p.label] = {
            "provider": p.name, "available": reason is None, "reason": reason,
            "precision": p.precision, "weight_format": p.weight_format, "tolerance": p.tolerance,
            "max_m": p.max_m}
        if reason is None:
            active.append(p)
    torch = None
    if any(p.uses_torch for p in active):
        import torch

    progress = _Progress(len(layers) * len(batches) * len(active), options.progress)
    out = _Outcomes(progress)
    for p in providers:
        reason = availability[p.label]["reason"]
        if reason is not None:
            progress.write(f"skipping {p.label}: {reason}")
            out.skipped += [_entry(layer, p, m, reason) for layer in layers for m in batches]

    aborted = None
    with harness.bench_stream(torch) as stream:
        # The copy bandwidth is always timed per call (1 GiB copies: the events cost nothing).
        copy_bw, copy_meas = harness.copy_bandwidth(
            harness.Timer(stream, options.budget_ms, options.min_reps, options.max_reps,
                          options.warmup), options.copy_bandwidth_bytes)
        timer = harness.Timer(stream, options.budget_ms, options.min_reps, options.max_reps,
                              options.warmup, options.chain_len)
        progress.write(f"copy bandwidth {copy_bw:.0f} GB/s (read + write, median of {copy_meas.stats.reps})")
        # The clocks at start are read before any GPU work (an idle card's, 345 MHz on the
        # H200); these, after the copy bandwidth's 1 GiB copies, are what the timings start from.
        clocks_after_warmup = harness.gpu_clocks()
        # The copy cap is shared evenly by the weight formats in use (fp16, Marlin, GPTQ, tinygemm).
        cap = options.copy_cap_bytes // max(1, len({p.copies_key for p in active}))
        for index, layer in enumerate(layers):
            aborted = _sweep_layer(layer, index, active, options, timer, cap, env["device"], copy_bw, out)
            cp.get_default_memory_pool().free_all_blocks()
            if torch is not None:
                torch.cuda.empty_cache()
            if aborted:
                break
    progress.close()

    rows = out.rows
    metrics.add_speedups(rows)
    sets = {}
    for layer in layers:
        sets.setdefault(layer.set, []).append([layer.k, layer.n])
    summary = metrics.summarize_sets(rows, {name: len(v) for name, v in sets.items()}, copy_bw)
    versions = dict(env.get("versions", {}))
    if torch is not None:
        versions["torch"] = torch.__version__
    record = {
        "kind": "bench",
        "date": env["date"],
        "git_commit": env["git_commit"],
        "git_commit_from": env.get("git_commit_from"),
        "git_dirty": env.get("git_dirty"),
        "device": env["device"],
        "versions": versions,
        "platform": env.get("platform"),
        "clocks": {"start": clocks_start, "after_warmup": clocks_after_warmup,
                   "end": harness.gpu_clocks()},
        "tuned_tables": _tuned_tables((env.get("device") or {}).get("name")),
        "copy_bandwidth_GBps": copy_bw,
        "copy_bandwidth": {"bytes_read_and_written": 2 * options.copy_bandwidth_bytes,
                           **copy_meas.stats.as_dict()},
        "group_size": options.group_size,
        "batches": list(batches),
        "sets": sets,
        "ideal_speedup": metrics.ideal_speedup(options.group_size),
        "providers": availability,
        "method": {
            "timing": ("CUDA events around every call, calls queued back to back behind a spin "
                       "kernel; median, p20, p80 of per-call GPU time" if not options.chain_len
                       else f"CUDA events around chains of {options.chain_len} calls back to "
                            f"back, queued behind a spin kernel; median, p20, p80 of the "
                            f"chains' time per call"),
            "chain_len": options.chain_len,
            "budget_ms": options.budget_ms, "min_reps": options.min_reps,
            "max_reps": options.max_reps, "warmup": options.warmup,
            "cooldown_s": options.cooldown_s, "l2_factor": options.l2_factor,
            "copy_cap_bytes": options.copy_cap_bytes, "seed": options.seed,
            "reference": "float32 x @ dequant(W) on the GPU",
            "fp16_tolerance": harness.FP16_TOLERANCE, "bf16_tolerance": harness.BF16_TOLERANCE,
            **options.extra,
        },
        "duration_s": time.time() - t_start,
        "aborted": aborted,
        "rows": rows,
        "summary": summary,
        "failed": out.failed,
        "skipped": out.skipped,
    }
    if "kernel_defines" in env:
        # An experimental build ($MARLIN_CUPY_DEFINES): records.newest_sweep and every reader
        # must be able to tell it from the shipped one.
        record["kernel_defines"] = env["kernel_defines"]
    return record


def _tuned_tables(device_name):
    """The tuned tables the default dispatch (``marlin``) served this device from
    (``tune.table_provenance``: source, path, sha256, entries used), ``[]`` where none (the
    heuristic served), or ``[{"error": ...}]`` where one could not be read."""
    from .. import tune
    if not device_name:
        return []
    try:
        return tune.table_provenance(device_name)
    except ValueError as e:
        return [{"error": str(e)}]


def _sweep_layer(layer, index, active, options, timer, cap, device, copy_bw, out):
    """Steps 1-3 of the module docstring for one layer; returns the CUDA error that broke the
    context (the sweep must stop), or ``None``."""
    import cupy as cp
    from .workload import QuantizedLayer
    gs, batches = options.group_size, tuple(options.batches)
    try:
        ql = QuantizedLayer(layer.k, layer.n, gs, seed=options.seed + index)
        rng = cp.random.RandomState(options.seed + 1000 + index)
        x_all = rng.standard_normal((max(batches), layer.k), dtype=cp.float32).astype(cp.float16)
        ref_all = ql.reference(x_all)                                            # [M_max, N] fp32
    except Exception as e:       # out of memory, say: this layer is lost, the others need not be
        for p in active:
            for m in batches:
                out.fail(layer, p, m, f"layer setup: {_error_text(e)}")
                out.progress.step(layer.name)
        return _context_broken()

    copies = {}
    for p in active:
        wbytes = metrics.weight_bytes(p.weight_format, layer.k, layer.n, gs)
        n = harness.rotation_copies(wbytes, device["l2_bytes"], cap, options.l2_factor)
        try:
            p.prepare(ql, n)
            copies[p] = (n, wbytes)
        except Skip as e:
            out.skipped += [_entry(layer, p, m, str(e)) for m in batches]
        except Exception as e:
            for m in batches:
                out.fail(layer, p, m, f"prepare: {_error_text(e)}")
            if _context_broken():
                break
    if ql.packed_whole:
        out.progress.write(f"{layer.name}: the Marlin layout probe failed; packed the whole layer on the host")

    aborted = _context_broken()
    for m in batches:
        if aborted:
            break
        x, ref = x_all[:m], ref_all[:m]
        for p in active:
            out.progress.step(f"{layer.name} m={m} {p.label}")
            if p not in copies:
                continue
            if p.max_m is not None and m > p.max_m:
                out.skip(layer, p, m, f"batch {m} > {p.max_m}, the largest this provider is measured "
                                      f"at (--naive-fused-max-m)")
                continue
            result = _gate_and_time(p, x, ref, timer, copies[p])
            if "skip" in result:
                out.skip(layer, p, m, result["skip"])
            elif "failure" in result:
                out.fail(layer, p, m, result["failure"], result.get("rel_error"))
                aborted = _context_broken()
                if aborted:
                    break
            else:
                row = {"set": layer.set, "layer": layer.index, "provider": p.name, "label": p.label,
                       "m": m, "k": layer.k, "n": layer.n, **result}
                out.rows.append(metrics.derive(row, gs, copy_bw))
        time.sleep(options.cooldown_s)

    for p in copies:
        p.release()
    ql.release()
    return aborted


def _gate_and_time(p, x, ref, timer, copies) -> dict:
    """Gate one provider at one batch, then time it: the row's measured fields, or
    ``{"skip": reason}``, or ``{"failure": what failed, "rel_error": ...}``."""
    n_copies, wbytes = copies
    try:
        bound = p.bind(x)
        bound.poison()
        bound.call(0)
        timer.stream.synchronize()
        err = harness.relative_error(bound.output(), ref)
    except Skip as e:
        return {"skip": str(e)}
    except Exception as e:
        return {"failure": f"gate run: {_error_text(e)}"}
    if not harness.gate_passes(err, p.tolerance):
        return {"failure": f"gate: relative error {err:.3g} > tolerance {p.tolerance:.3g}",
                "rel_error": err if err != float("inf") else None}
    try:
        meas = timer.measure(bound.call, n_copies)
        info = p.describe(x.shape[0])
    except Exception as e:
        return {"failure": f"timing: {_error_text(e)}", "rel_error": err}
    return {**meas.stats.as_dict(), "copies": n_copies, "weight_bytes": wbytes,
            "reuse_bytes": harness.reuse_bytes(n_copies, wbytes),
            "max_gap_us": meas.max_gap_us, "starved": meas.starved, "host_us": meas.host_us,
            "error": err, "tolerance": p.tolerance, **info}
