"""How one provider call is timed: CUDA events, L2 rotation, warm-up, statistics, copy bandwidth.

The method (DESIGN.md s.7, and ``.library``'s measurement notes it follows):

* **Events around every call.** Each repetition is bracketed by a pair of CUDA events on the
  benchmark's stream; we keep the median and the 20th/80th percentiles of those GPU times.
* **No host overhead in the numbers.** A one-thread spin kernel (``cuda/timing.cu``) is queued
  first, long enough for the host to enqueue a whole burst of (event, call, event) triples behind
  it; the calls then run back to back and each event pair brackets GPU work alone. The largest gap
  between one call's end event and the next call's start event is recorded: a gap of more than a
  few microseconds means the GPU ran dry and the host's launch cost leaked into a sample.
* **Weights never L2-resident.** Calls rotate over ``rotation_copies`` independent weight copies,
  enough that at least ``2 x`` the L2 size (read from the device) of weights is read between two
  reads of the same weight byte (activations and outputs stay put: in serving they are hot in L2).
* **Adaptive repetitions.** Warm-up calls estimate the time per call; the repetition count then
  fills ``budget_ms`` of GPU time, clamped to ``[min_reps, max_reps]``.
* **Chains, optionally** (``Timer(chain_len=L)``, ``--chain-len``). An event pair brackets ``L``
  calls back to back instead of one, and a sample is that chain's time divided by ``L``. This
  is how a model runs its GEMMs, and the only way to see programmatic dependent launch
  (``marlin-pdl``): an event recorded between two kernels ends their overlap. It also drops the
  event between calls that the per-call method charges every sample. At least ``min_reps``
  chains are timed; gaps between calls cannot be seen, so ``max_gap_us`` is ``None``.

Pure helpers (statistics, rotation and repetition counts, the correctness gate's error) come first
and need no GPU; the GPU parts import CuPy when called.
"""
from __future__ import annotations

import contextlib
import math
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass

import numpy as np

#: Gate bounds on ``||out - ref|| / ||ref||`` against the float32 reference. FP16 outputs of an
#: fp32-accumulating GEMM land near 5e-4 (output rounding plus fp16 weight rounding); 5e-3 leaves
#: room for fp16 split-K reductions yet rejects a 1% scaling error. bf16 operands and output
#: (torch-int4) land near 5e-3 (x, scales, dequantized weights and output each round to 8 bits).
FP16_TOLERANCE = 5e-3
BF16_TOLERANCE = 2e-2

L2_FACTOR = 2.0               # rotate at least this many L2 sizes between two uses of a copy
DEFAULT_BUDGET_MS = 50.0      # GPU time per measurement
DEFAULT_MIN_REPS = 5
DEFAULT_MAX_REPS = 200
DEFAULT_WARMUP = 3
SPIN_MARGIN = 2.0             # the spin lasts this many times the host's enqueue estimate
SPIN_MAX_US = 20_000.0        # longest spin; a burst holds as many calls as fit behind it
STARVED_GAP_US = 10.0         # a gap between calls above this means the GPU waited for the host


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stats:
    """Median and 20th/80th percentiles of a list of per-call GPU times, in microseconds."""
    median_us: float
    p20_us: float
    p80_us: float
    reps: int

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples_us) -> Stats:
    """Median, p20 and p80 (linear interpolation between order statistics) of the samples."""
    a = np.asarray(samples_us, dtype=np.float64)
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError(f"need at least one finite sample; got {a.size} samples "
                         f"({int(np.sum(~np.isfinite(a)))} non-finite).")
    p20, p50, p80 = np.percentile(a, [20, 50, 80])
    return Stats(median_us=float(p50), p20_us=float(p20), p80_us=float(p80), reps=int(a.size))


def rotation_copies(weight_bytes: int, l2_bytes: int, cap_bytes: int,
                    factor: float = L2_FACTOR) -> int:
    """Weight copies to rotate over so that no weight byte is still in L2 when it is read again.

    Round-robin over ``n`` copies of ``S`` bytes reads ``n * S`` weight bytes between two reads
    of the same byte (``reuse_bytes``); we ask for ``n * S >= factor * L2``, so
    ``n = ceil(factor * L2 / S)``: one copy when a single copy already spans ``factor`` L2s.
    At most ``cap_bytes`` of copies are made (at least one); ``reuse_bytes`` then shows whether
    the capped rotation still clears the L2.
    """
    if weight_bytes <= 0 or l2_bytes < 0:
        raise ValueError(f"weight_bytes must be positive and l2_bytes non-negative; got "
                         f"{weight_bytes}, {l2_bytes}.")
    wanted = max(1, math.ceil(factor * l2_bytes / weight_bytes))
    return max(1, min(wanted, cap_bytes // weight_bytes))


def random_weight_rotation(k: int, n: int, group_size: int, rng, cap_bytes: int = 8 << 30,
                           zero_points: bool = False, copies: int | None = None) -> list:
    """Random 4-bit weights [K, N] (scales uniform in [1e-3, 1e-2)) packed once and copied to
    the device ``rotation_copies`` times, on the current device's L2 size: what the tuner and
    the probe scripts time a kernel on (call it with ``mws[i]`` for ``i`` in the rotation).
    ``zero_points``: with random 4-bit zero points (the zero-point kernels), drawn after
    everything else so that the symmetric weights of a seed stay the same. ``copies``: this
    many instead (a whole block rotated together, ``scripts/graph_probe.py``)."""
    import cupy as cp
    from ..layout import pack
    from ..weights import QuantizedWeight
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    l2 = int(dev.get("l2CacheSize", 50 << 20))
    groups = 1 if group_size == -1 else k // group_size
    q = rng.integers(0, 16, (k, n), dtype=np.uint8)
    scales = rng.uniform(1e-3, 1e-2, (groups, n)).astype(np.float16)
    zeros = rng.integers(0, 16, (groups, n), dtype=np.uint8) if zero_points else None
    host = pack(QuantizedWeight(q, scales, zeros, None, 4, group_size))
    if copies is None:
        copies = rotation_copies(k * n // 2, l2, cap_bytes)
    return [host.to_device() for _ in range(copies)]


def layer_cases(shapes, ms, group_size: int, rng, zero_points: bool = False):
    """The probe scripts' loop: for each layer (K, N), its random weights rotated past the L2
    (``random_weight_rotation``, built once per layer, with zero points if asked), then for
    each M ``(k, n, m, x, mws)`` with random fp16 activations ``x`` [M, K]. The memory pool is
    emptied between layers."""
    import cupy as cp
    for k, n in shapes:
        mws = random_weight_rotation(k, n, group_size, rng, zero_points=zero_points)
        for m in ms:
            yield k, n, m, cp.asarray(rng.standard_normal((m, k)).astype(np.float16)), mws
        del mws
        cp.get_default_memory_pool().free_all_blocks()


def reuse_bytes(copies: int, weight_bytes: int) -> int:
    """Weight bytes read between two reads of the same weight byte, rotating over ``copies``."""
    return copies * weight_bytes


def reps_for_budget(estimate_us: float, budget_ms: float, min_reps: int, max_reps: int) -> int:
    """Repetitions that fill ``budget_ms`` of GPU time at ``estimate_us`` per call, clamped."""
    if min_reps < 1 or max_reps < min_reps:
        raise ValueError(f"need 1 <= min_reps <= max_reps; got min_reps={min_reps}, max_reps={max_reps}.")
    if not estimate_us > 0:
        return max_reps
    return int(min(max_reps, max(min_reps, budget_ms * 1e3 // estimate_us)))


def relative_error(out, ref) -> float:
    """``||out - ref||_F / ||ref||_F`` computed in float32 on the arrays' own device.

    Any NaN or infinity in ``out`` (an unwritten, poisoned element, say) gives ``inf``, so it can
    never pass a gate.
    """
    xp = np if isinstance(ref, np.ndarray) else _cupy()
    diff = out.astype(xp.float32) - ref.astype(xp.float32)
    num = float(xp.sqrt(xp.sum(diff.astype(xp.float64) ** 2)))
    den = float(xp.sqrt(xp.sum(ref.astype(xp.float64) ** 2)))
    if not math.isfinite(num) or den == 0.0:
        return math.inf
    return num / den


def gate_passes(error: float, tolerance: float) -> bool:
    return math.isfinite(error) and error <= tolerance


def _cupy():
    import cupy
    return cupy


# ---------------------------------------------------------------------------------------------
# The device
# ---------------------------------------------------------------------------------------------

def gpu_unavailable_reason():
    """``None`` when CuPy sees a CUDA device, else a sentence saying why not."""
    from .. import records
    return records.gpu_unavailable_reason()


#: The ``nvidia-smi --query-gpu`` fields ``gpu_clocks`` asks for, tried in order: the clocks
#: with the SM clock's maximum and the active clock event (throttle) reasons, whose name changed
#: once (``clocks_throttle_reasons`` before driver 535), then the clocks alone.
CLOCK_QUERIES = (("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks_event_reasons.active"),
                 ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks_throttle_reasons.active"),
                 ("clocks.sm", "clocks.mem"))


def _smi_int(text):
    """An integer field of ``nvidia-smi``'s CSV (``None`` for ``[N/A]``, ``[Not Supported]``)."""
    try:
        return int(text.strip())
    except ValueError:
        return None


def gpu_clocks():
    """Current SM and memory clocks in MHz from ``nvidia-smi``, with the SM clock's maximum
    (``sm_max_mhz``) and the active clock event reasons (``throttle_reasons``, the bit mask as
    nvidia-smi prints it, ``0x0000000000000000`` when nothing holds the clock back; idle
    ``0x...0001``, power cap ``0x...0004``) where this driver's nvidia-smi gives them (``None``
    each where it does not). ``None`` where nvidia-smi is absent or answers none of
    ``CLOCK_QUERIES``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    for fields in CLOCK_QUERIES:
        try:
            out = subprocess.run([exe, "--query-gpu=" + ",".join(fields),
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        lines = out.stdout.strip().splitlines()
        vals = lines[0].split(",") if lines else []
        if out.returncode != 0 or "not a valid field" in out.stdout.lower() \
                or len(vals) != len(fields):
            continue              # an older nvidia-smi: the next, shorter query
        sm, mem = _smi_int(vals[0]), _smi_int(vals[1])
        if sm is None or mem is None:
            return None
        reasons = vals[3].strip() if len(vals) > 3 else ""
        return {"sm_mhz": sm, "mem_mhz": mem,
                "sm_max_mhz": _smi_int(vals[2]) if len(vals) > 2 else None,
                "throttle_reasons": reasons if reasons.lower().startswith("0x") else None}
    return None


@contextlib.contextmanager
def bench_stream(torch=None):
    """A fresh non-blocking stream, current for CuPy and (when ``torch`` is given) for PyTorch.

    Every provider, the events and the spin kernel then share one stream, so torch's kernels are
    timed exactly like CuPy's.
    """
    import cupy as cp
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        if torch is None:
            yield stream
        else:
            with torch.cuda.stream(torch.cuda.ExternalStream(stream.ptr)):
                yield stream


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------

@dataclass
class Measurement:
    stats: Stats
    max_gap_us: float | None   # largest idle gap between consecutive calls (see module
                               # docstring); None when timed in chains (no event between calls)
    host_us: float             # host time to enqueue one call, as measured in warm-up

    @property
    def starved(self) -> bool:
        return self.max_gap_us is not None and self.max_gap_us > STARVED_GAP_US


def chain_count(reps: int, chain_len: int, min_chains: int) -> int:
    """Chains of ``chain_len`` calls that cover ``reps`` calls, and at least ``min_chains``."""
    if chain_len < 1:
        raise ValueError(f"chain_len must be at least 1; got {chain_len}")
    return max(min_chains, -(-reps // chain_len))


class Timer:
    """Times ``call(i)`` (which launches one provider call on weight copy ``i``) on ``stream``."""

    def __init__(self, stream, budget_ms=DEFAULT_BUDGET_MS, min_reps=DEFAULT_MIN_REPS,
                 max_reps=DEFAULT_MAX_REPS, warmup=DEFAULT_WARMUP, chain_len: int = 0):
        import cupy as cp
        from .. import jit
        if chain_len < 0:
            raise ValueError(f"chain_len must be 0 (events around every call) or positive; "
                             f"got {chain_len}")
        self.cp = cp
        self.stream = stream
        self.budget_ms, self.min_reps, self.max_reps, self.warmup = budget_ms, min_reps, max_reps, warmup
        self.chain_len = chain_len
        self._spin = jit.load_module(jit.expand_source("timing.cu")).get_function("spin_ns")
        self._events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(max(max_reps, warmup, 1))]

    def spin(self, us: float) -> None:
        """Hold the stream busy for ``us`` microseconds."""
        self._spin((1,), (1,), (np.uint64(int(us * 1000)),))

    def measure(self, call, copies: int) -> Measurement:
        """Warm up, choose the repetition count from the budget, and time the calls."""
        # Warm-up: compiles, loads, creates handles; each call is also timed (on an idle GPU, so
        # including launch cost: an upper bound, fine for choosing the repetition count) and its
        # host enqueue time is read (host work only: the call returns before the GPU finishes).
        host, gpu = [], []
        for i in range(max(1, self.warmup)):
            start, end = self._events[i]
            t0 = time.perf_counter()
            start.record(self.stream)
            call(i % copies)
            end.record(self.stream)
            host.append((time.perf_counter() - t0) * 1e6)
            end.synchronize()
            gpu.append(self.cp.cuda.get_elapsed_time(start, end) * 1e3)
        host_us = min(host)
        reps = reps_for_budget(min(gpu), self.budget_ms, self.min_reps, self.max_reps)
        if self.chain_len:
            samples = self._run_chains(call, copies, reps, host_us, first=self.warmup)
            return Measurement(summarize(samples), None, host_us)
        samples, max_gap = self._run(call, copies, reps, host_us, first=self.warmup)
        return Measurement(summarize(samples), max_gap, host_us)

    def _run_chains(self, call, copies, reps, host_us, first=0):
        """Chains of ``chain_len`` calls, each queued behind a spin that outlasts its
        enqueueing; one sample per chain, its time divided by ``chain_len``."""
        start, end = self._events[0]
        samples, i = [], first
        for _ in range(chain_count(reps, self.chain_len, self.min_reps)):
            self.spin(min(SPIN_MAX_US, SPIN_MARGIN * host_us * self.chain_len + 50.0))
            start.record(self.stream)
            for _ in range(self.chain_len):
                call(i % copies)
                i += 1
            end.record(self.stream)
            end.synchronize()
            samples.append(self.cp.cuda.get_elapsed_time(start, end) * 1e3 / self.chain_len)
        return samples

    def _run(self, call, copies, reps, host_us, first=0):
        """``reps`` calls in bursts, each queued behind a spin that outlasts its enqueueing."""
        per_burst = max(1, min(len(self._events), int(SPIN_MAX_US / (SPIN_MARGIN * max(host_us, 1.0)))))
        samples, max_gap, i = [], 0.0, first
        while len(samples) < reps:
            burst = self._events[:min(per_burst, reps - len(samples))]
            self.spin(min(SPIN_MAX_US, SPIN_MARGIN * host_us * len(burst) + 50.0))
            for start, end in burst:
                start.record(self.stream)
                call(i % copies)
                end.record(self.stream)
                i += 1
            burst[-1][1].synchronize()
            elapsed = self.cp.cuda.get_elapsed_time
            samples += [elapsed(s, e) * 1e3 for s, e in burst]
            gaps = [elapsed(burst[j][1], burst[j + 1][0]) * 1e3 for j in range(len(burst) - 1)]
            max_gap = max([max_gap, *gaps])
        return samples, max_gap


def copy_bandwidth(timer: Timer, nbytes: int = 1 << 30):
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written.

    ``nbytes`` (1 GiB) is far past any L2; returns ``(GB/s, Measurement)`` from the median.
    """
    cp = timer.cp
    src = cp.random.randint(0, 256, size=nbytes, dtype=cp.uint8)
    dst = cp.empty_like(src)

    def call(_):
        dst.data.copy_from_device_async(src.data, nbytes, timer.stream)

    result = timer.measure(call, copies=1)
    del src, dst
    return 2 * nbytes / (result.stats.median_us * 1e-6) / 1e9, result
