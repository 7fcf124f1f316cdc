"""``matmul``: check -> allocate -> launch, nothing else.

CuPy checks nothing about raw-kernel arguments (dtype, strides, device, alignment), so every
property the kernel relies on is checked here, before launch, with a message that names the
values and says what to do.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import re
import sys
import threading
import weakref
from typing import NamedTuple

import numpy as np

from . import graphs, jit, kernels, records
from . import pdl as _pdl
from .config import KernelConfig, choose_config, group_blocks_for
from .weights import MarlinWeight


def _cupy():
    try:
        import cupy as cp
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise RuntimeError("marlin_cupy.matmul needs CuPy: pip install 'marlin-cupy[cuda12]' "
                           "(or [cuda13]).") from e
    return cp


# ---------------------------------------------------------------------------------------------
# Device facts and per-(device, stream) workspaces
# ---------------------------------------------------------------------------------------------
_lock = threading.Lock()
_device_props: dict = {}
_workspaces: dict = {}
_kernels: dict = {}
_pdl_kernels: dict = {}
#: ``use_kernel``'s builds: (device, compiled config, has_zp) -> (kernel, its fma form).
_overrides: dict = {}

#: Prefix of the build that ``matmul(..., pdl=True)`` launches (cuda/marlin.cuh, MARLIN_PDL).
PDL_PREFIX = "#define MARLIN_PDL 4\n"


def device_facts(device_id: int | None = None) -> dict:
    """What the launches need to know of a device (the current one by default), read once:
    its name, SMs (``sms``: those this process's context may use, which the grid is capped by;
    ``device_sms``: the device's), shared memory limits and compute capability."""
    cp = _cupy()
    dev = cp.cuda.Device(device_id) if device_id is not None else cp.cuda.Device()
    facts = _device_props.get(dev.id)
    if facts is None:
        attrs = dev.attributes
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        with dev:
            # Since CUDA 12.0 cudaSetDevice initializes the device's primary context and makes it
            # current on this thread (cudaFree(0) would too, but is not allowed while a stream
            # is being captured, and the first plan may be made under a capture).
            cp.cuda.runtime.setDevice(dev.id)
            context_sms = _pdl.context_sm_count()
        every = attrs["MultiProcessorCount"]
        facts = {
            "name": name.decode() if isinstance(name, bytes) else str(name),
            # Every CTA of a launch must be resident at once (README, "What the kernel does
            # today"): a context given part of the SMs (MPS with an active thread percentage)
            # caps the grid at its share, where the device's count would wait forever.
            "sms": min(every, context_sms or every),
            "device_sms": every,
            "smem_optin": attrs["MaxSharedMemoryPerBlockOptin"],
            "smem_per_sm": cp.cuda.runtime.deviceGetAttribute(
                cp.cuda.runtime.cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev.id),
            "smem_reserved": cp.cuda.runtime.deviceGetAttribute(
                cp.cuda.runtime.cudaDevAttrReservedSharedMemoryPerBlock, dev.id),
            "cc": dev.compute_capability,
        }
        _device_props[dev.id] = facts
    return facts


class Workspace:
    """Locks (int32, zero between calls), FP32 partial-sum scratch and, for act-order weights
    under capture, the permuted copy of ``x``, for one device and stream.

    Streams must not share locks: two launches spinning on the same counters can deadlock.
    A stream's launches inside a graph capture use a workspace of that capture's own
    (``captured``; ``graphs``): its buffers are zeroed outside the capture, and one it outgrows
    is kept, since the launches captured before still use it.

    Threads that launch on the same stream share its workspace: the buffers are grown and read
    under the workspace's lock, and each caller gets the buffers it grew or checked (never
    another thread's smaller ones).
    """

    def __init__(self, captured: bool = False):
        self.captured = captured
        self.locks = None
        self.scratch = None
        self.xperm = None
        self.retired = []       # outgrown buffers that graphs may still use (captured only)
        self.lock = threading.Lock()

    def _grow(self, old, need: int, dtype, zero: bool):
        if old is not None and old.size >= need:
            return old
        cp = _cupy()
        if not self.captured:
            return cp.zeros(need, dtype=dtype) if zero else cp.empty(need, dtype=dtype)
        if old is not None:
            self.retired.append(old)
            need = max(need, 2 * old.size)     # fewer outgrown buffers kept
        return graphs.zeros_outside_capture(need, dtype)

    def get(self, n_locks: int, n_scratch: int):
        """``(locks, scratch)`` with room for ``n_locks`` counters and ``n_scratch`` floats."""
        cp = _cupy()
        with self.lock:
            locks = self.locks = self._grow(self.locks, max(n_locks, 1), cp.int32, zero=True)
            scratch = self.scratch = self._grow(self.scratch, max(n_scratch, 4), cp.float32,
                                                zero=False)
        return locks, scratch

    def permuted_x(self, m: int, k: int):
        """An ``[m, k]`` fp16 buffer for act-order's column permutation of ``x``."""
        cp = _cupy()
        with self.lock:
            xperm = self.xperm = self._grow(self.xperm, max(m * k, 8), cp.float16, zero=False)
        return xperm[:m * k].reshape(m, k)

    def release(self):
        """Drop the buffers (``release_workspaces``): a launch prepared for the fast path with
        them no longer matches (``_fast_matmul`` compares them)."""
        with self.lock:
            self.locks = self.scratch = self.xperm = None
            self.retired = []


#: (device, stream handle) -> the ``_workspaces`` key of that stream's latest capture.
_last_capture: dict = {}

#: ``cudaStreamPerThread``: one handle that names a different stream in every thread (CuPy's
#: ``Stream.ptds``, or CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1).
PER_THREAD_STREAM = 2


def _stream_key(ptr: int, thread: int | None = None):
    """What identifies a stream's workspace: its handle, and for the per-thread default stream
    the thread as well (launches of two threads there run concurrently, and must not share
    locks)."""
    if ptr == PER_THREAD_STREAM:
        return (ptr, threading.get_ident() if thread is None else thread)
    return ptr


def workspace(stream=None, captured: bool | None = None) -> Workspace:
    """The workspace of ``stream`` (default: CuPy's current stream) on the current device.

    ``captured`` (default: whether the stream captures a graph now): the workspace of the
    capture the stream takes part in. Each capture has its own (keyed by its id,
    ``graphs.capture_id``), so graphs captured separately, on one stream or on torch's one
    capture stream, never share counters and may be replayed at the same time. Asked with
    ``captured=True`` once the capture has ended: that stream's latest capture's."""
    cp = _cupy()
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    capture = None
    if captured is None or captured:
        capture = graphs.capture_id(stream)
        captured = capture is not None if captured is None else True
    device = cp.cuda.Device().id
    sid = _stream_key(stream.ptr)
    with _lock:
        if not captured:
            key = (device, sid, False)
        elif capture is not None:
            key = _last_capture[(device, sid)] = (device, sid, ("capture", capture))
        else:
            key = _last_capture.get((device, sid))
            if key is None:
                raise ValueError(f"stream {stream.ptr:#x} on device {device} has captured no "
                                 f"graph with matmul (or its capture workspaces were released); "
                                 f"ask with captured=True during or after a capture.")
        ws = _workspaces.get(key)
        if ws is None:
            ws = _workspaces[key] = Workspace(bool(captured))
    return ws


def release_workspaces(stream=None, captures: bool = False) -> int:
    """Drop the workspaces that ``matmul`` keeps per (device, stream), so that their memory
    goes back to CuPy's pool (``cupy.get_default_memory_pool().free_all_blocks()`` returns it
    to the device): ``stream``'s (a ``cupy.cuda.Stream``) on the current device, or, with
    ``stream=None``, every stream's on every device. Returns how many were dropped.

    Workspaces are otherwise kept for the life of the process, keyed by the stream's handle
    (and, on the per-thread default stream, by the thread: ``stream`` then drops the calling
    thread's): call this before destroying a stream you launched on, since CUDA may give a
    later stream the same handle (it would inherit the workspace). The stream (or, with ``stream=None``,
    every device that has workspaces) is synchronized first, so no launch still uses the
    buffers; the next call on the stream allocates new ones. Graph captures' workspaces are
    kept unless ``captures``: graphs replay with the buffers they were captured with, so pass
    ``captures=True`` only once no graph captured with ``matmul`` will be replayed again."""
    cp = _cupy()
    if stream is not None:
        _check_stream(stream)
        stream.synchronize()
        device = getattr(stream, "device_id", None)
        if not isinstance(device, int) or device < 0:      # (external streams may not know)
            device = cp.cuda.Device().id
        sid = _stream_key(stream.ptr)
        match = lambda dev, key: dev == device and key == sid            # noqa: E731
    else:
        with _lock:
            devices = sorted({dev for dev, _, _ in _workspaces})
        for dev in devices:
            with cp.cuda.Device(dev):
                cp.cuda.runtime.deviceSynchronize()
        match = lambda dev, key: True                                     # noqa: E731
    with _lock:
        keys = [key for key in _workspaces
                if match(key[0], key[1]) and (captures or key[2] is False)]
        dropped = [_workspaces.pop(key) for key in keys]
        for last, key in list(_last_capture.items()):
            if key not in _workspaces:
                del _last_capture[last]
    for ws in dropped:
        ws.release()
    return len(dropped)


def build_kernel(cfg: KernelConfig, has_zp: bool = False, prefix: str = "", fma: bool = False):
    """The compiled instance, ready to launch, from ``prefix`` (e.g. ``"#define MARLIN_PROBE
    4\n"``, for probe and A/B builds; see ``use_kernel``) + its source, for its own target.
    ``fma``: the build with the group scale inside the unpacking (``kernels.marlin_source``)."""
    module = jit.load_module(prefix + kernels.marlin_source(cfg, has_zp, fma=fma),
                             arch_suffix=cfg.arch_suffix)
    ker = module.get_function(kernels.marlin_entry(cfg, has_zp, fma))
    ker.max_dynamic_shared_size_bytes = cfg.smem_bytes(has_zp)
    if _switch(prefix, "MARLIN_PROBE") in STAMP_PROBES:
        _stamping.add(ker.kernel.ptr)
    if _switch(prefix, "MARLIN_WS_TMA_A") and cfg.producer and cfg.wgmma:
        _tma_maps[ker.kernel.ptr] = module.get_global("marlin_tmap_a")
    return ker


def _switch(prefix: str, name: str) -> int:
    """The value a build of ``prefix`` + ``kernels.marlin_source`` gives the switch ``name``:
    ``$MARLIN_CUPY_DEFINES``'s (its ``#define`` comes after the prefix's, and the later one
    holds), else the prefix's, else the kernel source's default (``kernels.switch_default``;
    a name the source has no switch of is an error)."""
    env = kernels.defines()
    if name in env:
        return env[name]
    found = re.search(rf"#define\s+{name}\s+(-?\d+)", prefix)
    return int(found.group(1)) if found else kernels.switch_default(name)


#: (Measurement, benchmarks/NOTES.md entry 101) The ``MARLIN_WS_TMA_A`` builds that
#: ``build_kernel`` made, by function handle: the device address of their module's
#: ``marlin_tmap_a``, the activations' tensor map that ``_matmul_checked`` writes there on the
#: launch stream before each launch that needs another map than the module's last one on that
#: stream (a benchmark's repeated calls on one ``x`` write it once, outside their timing).
#: Such a launch takes no fast path and no graph capture. One map per module: calls of one
#: build on two streams at once with different ``x`` can race (a measurement build, one stream).
_tma_maps: dict = {}
_tma_written: dict = {}          # module global's address -> (stream, key) of its last write


def _write_tma_map(memptr, x2, tile_m: int, stream) -> None:
    """``tma.activation_map`` of ``x2`` into the module global at ``memptr``, on ``stream``
    (stream-ordered: the launches before it read their own maps first), unless the last write
    there was this one on this stream."""
    from . import tma
    cp = _cupy()
    key = (x2.data.ptr, x2.shape[0], x2.shape[1], tile_m)
    if _tma_written.get(memptr.ptr) == (stream.ptr, key):
        return
    raw = np.frombuffer(tma.activation_map(*key), np.uint8)
    cp.ndarray((tma.MAP_BYTES,), cp.uint8, memptr=memptr).set(raw, stream=stream)
    _tma_written[memptr.ptr] = (stream.ptr, key)


#: The ``MARLIN_PROBE`` builds that write a timeline into the locks workspace, past the
#: counters of the launch, at ``locks[grid + 16 * cta + i]`` (cuda/marlin.cuh, MARLIN_STAMPS).
#: Those ints are counters of a launch with a larger grid: left there, they give it wrong sums
#: (benchmarks/NOTES.md entry 100). ``use_kernel`` sizes and clears the workspace for them.
STAMP_PROBES = frozenset({4, 5, 10, 18})
STAMP_INTS = 16                  # ints per CTA that a stamping build writes past the counters
_stamping: set = set()           # function handles of the stamping builds ``build_kernel`` made


def stamps_timeline(kernel) -> bool:
    """Whether ``kernel`` is a stamping ``MARLIN_PROBE`` build made by ``build_kernel``."""
    return getattr(getattr(kernel, "kernel", None), "ptr", None) in _stamping


def _kernel(cfg: KernelConfig, has_zp: bool, pdl: bool = False, fma: bool = False):
    cp = _cupy()
    key = (cp.cuda.Device().id, cfg.compiled, has_zp, fma)
    cache = _pdl_kernels if pdl else _kernels
    ker = cache.get(key)
    if ker is None:
        ker = cache[key] = build_kernel(cfg, has_zp, prefix=PDL_PREFIX if pdl else "", fma=fma)
    return ker


def resident_ctas(cfg: KernelConfig, has_zp: bool = False, pdl: bool = False,
                  fma: bool = False) -> int:
    """CTAs of this compiled instance (the ``pdl=True`` build if ``pdl``, the group scale inside
    the unpacking if ``fma``) that fit on one SM at once (occupancy calculator)."""
    return _resident(_kernel(cfg, has_zp, pdl, fma), cfg, has_zp)


def _resident(kernel, cfg: KernelConfig, has_zp: bool) -> int:
    from cupy_backends.cuda.api import driver
    return driver.occupancyMaxActiveBlocksPerMultiprocessor(
        kernel.kernel.ptr, cfg.launch_threads, cfg.smem_bytes(has_zp))


def kernel_resources(cfg: KernelConfig, has_zp: bool = False, pdl: bool = False,
                     fma: bool = False) -> dict:
    """Registers, spills and shared memory of the compiled instance (the ``pdl=True`` build if
    ``pdl``, the group scale inside the unpacking if ``fma``) on the current device."""
    ker = _kernel(cfg, has_zp, pdl, fma)
    local = int(ker.local_size_bytes)
    return {"registers": int(ker.num_regs), "spill_bytes": local, "stack_bytes": local,
            "shared_bytes": cfg.smem_bytes(has_zp)}


def reload_kernels():
    """Drop compiled kernels so edited sources in cuda/ are picked up (notebooks, autotuning)."""
    _kernels.clear()
    _pdl_kernels.clear()
    _overrides.clear()
    _plan.cache_clear()
    jit._modules.clear()
    kernels.reload_sources()


@contextlib.contextmanager
def use_kernel(cfg: KernelConfig, kernel, has_zp: bool = False, fma: bool = False):
    """Within the block, ``matmul`` with ``cfg`` (weights of ``has_zp``'s kind, without
    ``pdl``) launches ``kernel``: another build of the same instance, e.g. a ``MARLIN_PROBE`` or
    A/B build (scripts/ab_probe.py), whatever the weight's scales; ``fma`` says whether that
    build has the group scale inside the unpacking (``ops.build_kernel(..., fma=True)``), which
    the plan reports (``Plan.scale_fma``). An A/B against the default dispatch builds its A
    with the ``fma`` that ``use_scale_fma`` gives the weight. Plans hold their kernel, so they
    are dropped on the way in and out; a probe that only swapped the kernel dict once timed
    the same build twice.

    A stamping probe build (``STAMP_PROBES``: it writes its timeline into the stream's locks
    past the launch's counters) is planned with room for its stamps, and on the way out, once
    the device is idle, every workspace's locks of this device are zeroed again. Inside the
    block, the stamps of one launch are counters to a launch of another config with a larger
    grid on that stream: zero ``workspace(stream).locks`` before such a launch, as
    scripts/timeline_probe.py does."""
    cp = _cupy()
    device_id = cp.cuda.Device().id
    key = (device_id, cfg.compiled, has_zp)
    saved = _overrides.get(key)
    _overrides[key] = (kernel, bool(fma))
    _plan.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            _overrides.pop(key, None)
        else:
            _overrides[key] = saved
        _plan.cache_clear()
        if stamps_timeline(kernel):
            _zero_locks(device_id)


def _zero_locks(device_id: int):
    """Every workspace's locks on ``device_id`` back to zero, with the device idle before and
    after (no launch in flight reads them meanwhile)."""
    cp = _cupy()
    with cp.cuda.Device(device_id):
        cp.cuda.Device().synchronize()
        with _lock:
            spaces = [ws for (dev, _, _), ws in _workspaces.items() if dev == device_id]
        for ws in spaces:
            if ws.locks is not None:
                ws.locks.fill(0)
        cp.cuda.Device().synchronize()


def locks_left(device_id: int | None = None) -> list:
    """The workspaces whose locks are not all zero (on ``device_id``, default every device), as
    ``(device, stream handle, captured, non-zero count, first indices)``; ask with the device
    idle. Every launch leaves its locks at zero, so an entry means the contract broke: a
    stamping probe build's timeline (``STAMP_PROBES``), or a launch cut short. Launches with a
    larger grid would read those ints as counters and give wrong sums (benchmarks/NOTES.md
    entry 100). The GPU tests check this after every test (conftest.py)."""
    cp = _cupy()
    with _lock:
        items = list(_workspaces.items())
    left = []
    for (dev, stream_ptr, captured), ws in items:
        if ws.locks is None or (device_id is not None and dev != device_id):
            continue
        with cp.cuda.Device(dev):
            nonzero = cp.flatnonzero(ws.locks)
            if nonzero.size:
                first = [int(i) for i in cp.asnumpy(nonzero[:8])]
                handle = stream_ptr[0] if isinstance(stream_ptr, tuple) else stream_ptr
                left.append((dev, handle, bool(captured), int(nonzero.size), first))
    return left


def plan(m: int, n: int, k: int, group_size: int, has_zp: bool = False,
         config: KernelConfig | None = None, max_ctas: int | None = None,
         pdl: bool = False, fma_scales: bool = False) -> "Plan":
    """The launch ``matmul`` makes for this problem on the current device: its config (the
    tuned table's or the heuristic's), kernel, grid and shared memory. Benchmarks report
    ``plan(...).config`` so that the config they record is the one that ran. ``fma_scales``:
    the weight's scales allow the group scale inside the unpacking (``MarlinWeight.fma_scales``
    and ``matmul``'s ``scale_fma``); the plan then takes that build where the config has one
    (``Plan.scale_fma``)."""
    cp = _cupy()
    return _plan(cp.cuda.Device().id, m, n, k, group_size, has_zp, config, max_ctas, pdl,
                 bool(fma_scales))


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
def _is_torch(x) -> bool:
    """Whether ``x`` is a torch tensor (subclasses included; no import of torch: a tensor can
    only exist once torch is imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _check_no_grad(a, name: str):
    """A torch tensor that requires grad is refused: matmul has no backward, so its output
    would silently cut the graph (and DLPack refuses such tensors anyway)."""
    if getattr(a, "requires_grad", False) and _is_torch(a):
        raise ValueError(f"{name} requires grad, and matmul has no backward (it is for "
                         f"inference): call it under torch.no_grad() or torch.inference_mode(), "
                         f"or pass {name}.detach().")


def _as_cupy(x, name: str):
    """A CuPy view of ``x`` (CuPy, DLPack or CUDA array interface; zero-copy), or ValueError."""
    cp = _cupy()
    if isinstance(x, cp.ndarray):
        return x
    if isinstance(x, np.ndarray):
        raise ValueError(f"{name} is a NumPy array on the host; move it to the GPU first "
                         f"(cupy.asarray({name})).")
    if hasattr(x, "__dlpack__") or hasattr(x, "__cuda_array_interface__"):
        try:
            return cp.from_dlpack(x) if hasattr(x, "__dlpack__") else cp.asarray(x)
        except (BufferError, TypeError, ValueError, NotImplementedError) as e:
            # CuPy's own words for a CPU tensor (TypeError) or a bfloat16 one (CuPy 14.2:
            # NotImplementedError, without ml_dtypes) name neither the argument nor what to
            # pass instead. (CUDA errors are not caught: no GPU is reported elsewhere.)
            dtype, device = getattr(x, "dtype", "?"), getattr(x, "device", "?")
            raise ValueError(f"{name} ({type(x).__name__}, dtype {dtype}, device {device}) has "
                             f"no CuPy view ({type(e).__name__}: {e}). The kernel takes float16 "
                             f"arrays on the GPU: {_fp16_hint(name)}.") from e
    raise ValueError(f"{name} must be a CuPy array or a GPU tensor with __dlpack__ or "
                     f"__cuda_array_interface__; got {type(x).__name__}.")


def _fp16_hint(name: str) -> str:
    """How to pass a float16 GPU array as ``name``: a converted copy of ``x``; but ``out`` must
    be the caller's own buffer (a copy would take the result, not the buffer)."""
    if name == "out":
        return ("allocate out as a C-contiguous float16 GPU array (cupy.empty(shape, "
                "cupy.float16), torch.empty(shape, dtype=torch.float16, device='cuda')), or "
                "pass out=None")
    return (f"{name}.astype(cupy.float16) for CuPy, {name}.to('cuda', torch.float16) for torch "
            f"(a copy, and a rounding from bfloat16 or float32)")


def _stream_types(cp) -> tuple:
    """CuPy's stream classes: ``Stream`` (``from_external``'s too, CuPy 14+) and, while CuPy
    has it, ``ExternalStream``."""
    external = getattr(cp.cuda, "ExternalStream", None)
    return (cp.cuda.Stream,) if external is None else (cp.cuda.Stream, external)


def _check_stream(stream):
    """``stream`` must be a CuPy stream (or None): ``launch_stream_for`` and the fast path use
    it as one (its handle, ``ptr``; its capture state)."""
    cp = _cupy()
    if not isinstance(stream, _stream_types(cp)):
        raise ValueError(f"stream must be a CuPy stream (cupy.cuda.Stream) or None; got "
                         f"{type(stream).__module__}.{type(stream).__qualname__}. For a torch "
                         f"stream pass marlin_cupy.ops.cupy_stream_of(torch_stream) (or "
                         f"cupy.cuda.ExternalStream(torch_stream.cuda_stream)), or stream=None: "
                         f"torch tensors then run on torch's current stream.")


def _scale_fma_option(scale_fma):
    """``scale_fma`` as None, True or False (Python or NumPy bools), or ValueError: the paths
    compare it by identity, so 0 or ``numpy.False_`` would act like None."""
    if scale_fma is None or scale_fma is True or scale_fma is False:
        return scale_fma
    if isinstance(scale_fma, np.bool_):
        return bool(scale_fma)
    raise ValueError(f"scale_fma must be None, True or False; got {scale_fma!r} "
                     f"({type(scale_fma).__name__}).")


def _check_disjoint(x, out, mw=None):
    """``out`` must not share memory with ``x`` or the weight's arrays: CTAs write their tiles
    of ``out`` while others still read them."""
    out_lo = out.data.ptr
    read = [("x", x)] + ([] if mw is None else [
        (f"the weight's {name}", getattr(mw, name)) for name in ("qweight", "scales", "zeros")
        if getattr(mw, name) is not None])
    for what, a in read:
        lo = a.data.ptr
        if a.nbytes and out.nbytes and lo < out_lo + out.nbytes and out_lo < lo + a.nbytes:
            raise ValueError(f"out overlaps {what} ({what}: {a.nbytes} bytes at {lo:#x}, out: "
                             f"{out.nbytes} bytes at {out_lo:#x}): the kernel writes out while "
                             f"it still reads {what}. Pass a separate out (or out=None).")


def _check_fp16_array(a, name: str, shape):
    """``x`` or ``out``: float16 of ``shape``, C-contiguous, 16-byte aligned, on this device."""
    cp = _cupy()
    if a.dtype != np.float16:
        raise ValueError(f"{name} must have dtype float16; got {a.dtype}. Nothing is cast "
                         f"implicitly: {_fp16_hint(name)}.")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(a.shape)}.")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (row-major, no strides); got strides "
                         f"{a.strides}. " + (
                             "Pass a C-contiguous out (or out=None)." if name == "out" else
                             f"Use cupy.ascontiguousarray({name}) ({name}.contiguous() for "
                             f"torch)."))
    if a.data.ptr % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary (the kernel reads 16-byte "
                         f"vectors); its address is {a.data.ptr:#x}. Copy it into a fresh array.")
    if a.device.id != cp.cuda.Device().id:
        raise ValueError(f"{name} lives on GPU {a.device.id} but the current device is "
                         f"{cp.cuda.Device().id}; call inside `with cupy.cuda.Device(...)`.")


def _check_options(config, max_ctas):
    """``config`` and ``max_ctas`` as the plan takes them, checked on every call (also one
    with nothing to compute, which plans nothing)."""
    if config is not None and not isinstance(config, KernelConfig):
        raise ValueError(f"config must be a KernelConfig (KernelConfig.from_name('...')) or "
                         f"None; got {type(config).__name__}.")
    if max_ctas is not None:
        if isinstance(max_ctas, (bool, np.bool_)) or not isinstance(max_ctas, (int, np.integer)):
            raise ValueError(f"max_ctas must be an integer or None; got {max_ctas!r}.")
        if max_ctas < 1:
            raise ValueError(f"max_ctas={max_ctas} must be at least 1.")


def check_problem(cfg: KernelConfig, m: int, n: int, k: int, group_size: int, has_zp: bool,
                  smem_limit: int, device_cc: str | None = None):
    """Everything the chosen kernel instance needs of the problem, checked before launch."""
    cfg.validate(smem_limit, has_zp)
    errs = []
    if n % cfg.tile_n:
        errs.append(f"N={n} is not a multiple of the config's tile width {cfg.tile_n}")
    if k % cfg.tile_k:
        errs.append(f"K={k} is not a multiple of the config's tile depth {cfg.tile_k}")
    want = group_blocks_for(group_size, k)
    if cfg.group_blocks != want:
        errs.append(f"config group_blocks={cfg.group_blocks} does not match the weight's "
                    f"group_size={group_size} (needs group_blocks={want})")
    if cfg.wgmma and device_cc is not None and device_cc != "90":
        errs.append(f"wgmma configs run on compute capability 9.0 (sm_90a) only; this device "
                    f"is {device_cc}")
    if cfg.producer and device_cc is not None and int(device_cc) < 90:
        errs.append(f"producer configs (_ws) need compute capability 9.0 or newer; this device "
                    f"is {device_cc}")
    if cfg.max_m is not None and m > cfg.max_m:
        errs.append(f"M={m} is more than the {cfg.max_m} rows a swap_ab={cfg.swap_ab} config "
                    f"serves (swap_ab=2 or 0 serve any M)")
    if errs:
        raise ValueError(f"config {cfg.name} cannot run M={m}, N={n}, K={k}: " + "; ".join(errs)
                         + ". Pass config=None for the default choice.")


def pdl_padded_smem(smem: int, per_sm: int, smem_per_sm: int, reserved: int,
                    smem_optin: int) -> int:
    """Dynamic shared memory for a ``pdl=True`` launch of a kernel that needs ``smem`` bytes
    and runs ``per_sm`` CTAs per SM: enough that no further CTA fits an SM beside them.

    With programmatic dependent launch the next kernel's CTAs may become resident while this
    grid still runs, and wait at ``griddepcontrol.wait``. If a config leaves room for one more
    CTA on an SM, that waiting CTA takes the place of a running one's successor (measured:
    28672x8192 at M = 16, +25 % in chains; padded, -5 %; NOTES.md entry 32). Padding costs
    nothing else: the kernel uses only the first ``smem`` bytes.
    """
    if per_sm < 1:
        raise ValueError(f"per_sm={per_sm} must be at least 1.")
    return max(smem, min(smem_optin, smem_per_sm // per_sm - reserved))


def pad_for_pdl(kernel, smem: int, per_sm: int, facts: dict) -> int:
    """``pdl_padded_smem`` for ``kernel`` on the device of ``facts`` (``device_facts``), with the
    kernel's dynamic shared memory limit raised to it: what a ``pdl=True`` plan launches with."""
    smem = pdl_padded_smem(smem, per_sm, facts["smem_per_sm"], facts["smem_reserved"],
                           facts["smem_optin"])
    if kernel.max_dynamic_shared_size_bytes < smem:
        kernel.max_dynamic_shared_size_bytes = smem
    return smem


def check_pdl(pdl, device_cc: str | None):
    """``pdl`` must be a bool, and True only where programmatic dependent launch exists
    (compute capability 9.0 and newer)."""
    if not isinstance(pdl, (bool, np.bool_)):
        raise ValueError(f"pdl must be True or False; got {pdl!r}.")
    if pdl and device_cc is not None and int(device_cc) < 90:
        raise ValueError(f"pdl=True needs programmatic dependent launch, compute capability "
                         f"9.0 or newer; this device is {device_cc[:-1]}.{device_cc[-1]}. "
                         f"Use pdl=False.")


# ---------------------------------------------------------------------------------------------
# matmul
# ---------------------------------------------------------------------------------------------
class Plan(NamedTuple):
    """Everything about a launch that depends only on the problem's shape: decided once."""
    config: KernelConfig
    kernel: object
    grid: int
    threads: int
    parallel: int
    smem: int
    scratch_floats: int
    locks: int              # int32 counters the launch uses (grid, or chunks + 1 with dyn_chunk;
    #                         more for early-bottom builds and stamping probe builds)
    scale_fma: bool = False  # the kernel applies the group scale inside the unpacking


#: FP16 partial sums (``fp32_reduce=False``, name ``_fp16``) are rounded to FP16 at every
#: hand-over of a split column, so their error grows with the CTAs that share a column: with 16
#: of them it exceeded DESIGN.md s.6's bound (2x cuBLAS FP16's error + 1e-4) on the H200
#: (benchmarks/NOTES.md entry 70). Such configs get a grid on which no column has more sharers.
FP16_REDUCE_MAX_SHARERS = 4


#: The most units (k-tile x n-tile x slab) one launch may have: the kernel's int32 stripe ends
#: reach grid * ceil(units / grid), at most units + grid, and grids stay far below 2^20.
UNITS_MAX = (1 << 31) - 1 - (1 << 20)


def fp16_reduce_grid(units: int, k_tiles: int, grid: int,
                     max_sharers: int = FP16_REDUCE_MAX_SHARERS) -> int:
    """A grid, at most ``grid``, on which no column is shared by more than ``max_sharers`` CTAs:
    a column of ``k_tiles`` consecutive units meets at most ``ceil((k_tiles - 1) / iters) + 1``
    stripes of ``iters = ceil(units / grid)`` units, so the stripes must be at least ``need =
    ceil((k_tiles - 1) / (max_sharers - 1))`` long; the largest grid that gives them that."""
    if k_tiles <= max_sharers:
        return grid
    need = -(-(k_tiles - 1) // (max_sharers - 1))    # >= 2 here
    # ceil(units / g) >= need  <=>  g < units / (need - 1)
    return max(1, min(grid, -(-units // (need - 1)) - 1))


class _PlanCache:
    """``_plan``'s cache: an LRU cache of plans whose ``cache_clear()`` also retires every
    launch that ``matmul``'s fast path prepared from them (``generation``), so that a kernel
    swapped in by ``use_kernel``, a reload or an in-process tune applies to the next call."""

    def __init__(self, fn):
        self._cached = functools.lru_cache(maxsize=4096)(fn)
        self.generation = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        return self._cached(*args)

    def cache_clear(self):
        self.generation += 1
        self._cached.cache_clear()

    def cache_info(self):
        return self._cached.cache_info()


def _plan_uncached(device_id: int, m: int, n: int, k: int, group_size: int, has_zp: bool,
                   config: KernelConfig | None, max_ctas: int | None, pdl: bool = False,
                   fma_scales: bool = False) -> Plan:
    if m < 1 or n < 1 or k < 1:
        raise ValueError(f"M={m}, N={n}, K={k}: a launch needs all three positive (its grid "
                         f"would have no CTAs). matmul launches nothing for M = 0 or N = 0 and "
                         f"writes zeros for K = 0.")
    facts = device_facts(device_id)
    cfg = config if config is not None else choose_config(
        m, n, k, group_size, has_zp, facts["smem_optin"], facts["name"], facts["cc"],
        facts["sms"])
    check_problem(cfg, m, n, k, group_size, has_zp, facts["smem_optin"], facts["cc"])
    check_pdl(pdl, facts["cc"])
    _check_options(config, max_ctas)
    parallel = -(-m // cfg.tile_m)
    units = (k // cfg.tile_k) * (n // cfg.tile_n) * parallel
    if units > UNITS_MAX:
        # The kernel counts units in 32-bit ints (stripe ends reach grid * ceil(units / grid)):
        # past this, stripes wrap and columns go uncomputed, silently.
        raise ValueError(f"M={m}, N={n}, K={k} with config {cfg.name} is {units} tiles of work, "
                         f"more than the kernel's 32-bit unit counter takes ({UNITS_MAX}); "
                         f"split x into batches of at most "
                         f"{UNITS_MAX // ((k // cfg.tile_k) * (n // cfg.tile_n)) * cfg.tile_m} "
                         f"rows, or use a config with larger tiles.")
    # The group scale inside the unpacking: the same bits as the two-step form, for weights
    # whose scales allow it, on the instances that have it (NOTES.md entry 87).
    override = None if pdl else _overrides.get((device_id, cfg.compiled, has_zp))
    if override is not None:
        kernel, fma = override
    else:
        fma = use_scale_fma(cfg, has_zp, fma_scales)
        kernel = _kernel(cfg, has_zp, pdl, fma)
    # Every CTA must be resident at once (CTAs wait on each other's partial sums), so the grid
    # never exceeds what the hardware keeps resident: blocks_per_sm CTAs per SM, as far as the
    # occupancy calculator confirms for this compiled kernel.
    resident = _resident(kernel, cfg, has_zp)
    if resident < 1:
        raise ValueError(f"config {cfg.name} cannot launch on this device (no CTA fits an SM: "
                         f"{kernel.num_regs} registers x {cfg.launch_threads} threads, "
                         f"{cfg.smem_bytes(has_zp)} bytes of shared memory).")
    regs = cfg.producer_registers
    if regs is not None and -(-kernel.num_regs // 8) * 8 < regs[0]:
        # setmaxnreg.inc would wait forever for registers the CTA was never given.
        raise ValueError(f"config {cfg.name} was compiled to {kernel.num_regs} registers per "
                         f"thread; its producer warpgroup hands registers over on the "
                         f"assumption of {regs[0]} at launch (__launch_bounds__), so it cannot "
                         f"run safely.")
    per_sm = min(cfg.blocks_per_sm, resident)
    cap = facts["sms"] * per_sm
    cap = cap if max_ctas is None else min(max_ctas, cap)
    if cfg.column_ctas:
        cap = min(cap, cfg.column_grid(m, n))
    if cfg.dyn_chunk:
        # The stripes are the chunks, handed out at run time; never more CTAs than chunks.
        stripes = cfg.chunks(units)
        grid = min(stripes, cap)
        n_locks = stripes + 1   # a counter per column (at its top chunk), then the draws'
    else:
        grid = min(units, cap)
        if not cfg.fp32_reduce:
            grid = fp16_reduce_grid(units, k // cfg.tile_k, grid)
        stripes = n_locks = grid
    # One partial-sum slot per stripe for the serial reduction (the column's top CTA's); two
    # per stripe for the parallel one (the column it starts in, and the one it ends in).
    slots = stripes * (2 if cfg.parallel_reduce else 1)
    if cfg.early_bottom_fits:
        # MARLIN_PAR_EARLY_BOTTOM builds (cuda/marlin.cuh, early_slot; the parallel reduction
        # and the serial chain): a partial per column in the locks workspace, past the counters
        # and the timeline probe's 16 ints per CTA; zero between calls like the counters.
        # TOP_SUM builds (top_sum): a partial per CTA there instead.
        per = grid if cfg.top_sum else (n // cfg.tile_n) * parallel
        n_locks = (17 * grid + 3) // 4 * 4 + per * cfg.tile_m * cfg.tile_n
    if stamps_timeline(kernel):
        # A stamping probe build (use_kernel): its timeline lies past the counters.
        n_locks = max(n_locks, (STAMP_INTS + 1) * grid)
    smem = cfg.smem_bytes(has_zp)
    if pdl:
        smem = pad_for_pdl(kernel, smem, per_sm, facts)
    return Plan(cfg, kernel, grid, cfg.launch_threads, parallel, smem,
                slots * cfg.tile_m * cfg.tile_n, n_locks, fma)


_plan = _PlanCache(_plan_uncached)


def use_scale_fma(cfg: KernelConfig, has_zp: bool, fma_scales: bool) -> bool:
    """Whether a launch of ``cfg`` takes the build with the group scale inside the unpacking:
    symmetric weights whose scales all lie below ``config.FMA_SCALE_LIMIT`` (``fma_scales``),
    on an instance where the dispatch prefers that build (``KernelConfig.scale_fma_preferred``)."""
    return bool(fma_scales) and not has_zp and cfg.scale_fma_preferred


def matmul(x, mw: MarlinWeight, out=None, config: KernelConfig | None = None, stream=None,
           max_ctas: int | None = None, pdl: bool = False, scale_fma: bool | None = None):
    """``y = x @ W`` for fp16 ``x [..., K]`` and a Marlin-packed 4-bit weight ``W [K, N]``.

    ``x`` may be a CuPy array or any GPU tensor exposing ``__dlpack__`` (torch, zero-copy); a
    torch input gives a torch output (allocated by torch) and runs on torch's current stream
    unless ``stream`` is given. ``out`` (fp16 ``[..., N]``, contiguous) receives the result if
    given. Any M >= 0 runs in one launch (M beyond the config's tile as ceil(M / tile_m)
    slabs of its 16 to 128 rows inside the kernel).
    ``config`` (a ``KernelConfig``) overrides the dispatch's choice (the device's tuned table,
    else the heuristic); it is validated against the shape, the group size and the device.
    ``max_ctas`` caps the persistent grid (default: what the GPU keeps resident, the SMs times
    the config's CTAs per SM, 2 for ``_b2`` configs); tests use it to move stripe boundaries.

    CUDA graphs: calls may be captured (``cupy.cuda.Stream.begin_capture`` or
    ``torch.cuda.graph``, ``pdl=True`` included) and the graph replayed on any stream, with no
    reset between replays: the kernel leaves its locks at zero. Under capture the locks and
    partial sums come from a workspace of that capture's own, zeroed outside the graph and
    kept until ``release_workspaces(captures=True)`` (``marlin_cupy.graphs`` says what that
    guarantees, and what stays the caller's: keep ``x``, ``out`` and the weight alive; graphs
    captured separately may replay at the same time).

    ``stream``: a CuPy stream (``cupy.cuda.Stream``; for a torch stream,
    ``cupy_stream_of(torch_stream)``), or None. Eager launches on a stream use its workspace
    (locks and partial sums), kept per stream until ``release_workspaces``. ``out`` must not
    overlap ``x``. N = 0 gives an empty output and K = 0 zeros, with no launch (as M = 0).

    ``pdl=True`` (compute capability 9.0+) launches with programmatic dependent launch: the
    kernel may start while the previous kernel on the stream is still running, copies its first
    weight tiles (configs with a producer warpgroup, ``_ws``, wait first), and waits for that
    kernel to finish before it reads ``x`` or touches ``out`` and the workspace. Back to back it
    hides most of the start and end of each launch (benchmarks/NOTES.md entry 30). The
    contract: **the kernel launched just before on this stream must not write this weight**
    (``qweight``, ``scales``, ``zeros``), since they are read before the wait. Writing ``x``
    there is fine (a norm before the projection, say). Outputs are bitwise those of
    ``pdl=False``. The gain needs the kernel before to let this one start early (ours do).

    Host cost: a call like one this thread made before (the same weight, shape of ``x``,
    stream, options, and ``out`` given or not) takes a fast path (``FAST_PATH``): it checks only
    what can differ between such calls and launches through the driver with the prepared
    arguments, 10-16 µs of host time per call on the H200's host against 26-47 µs through every
    check (torch tensors: 15-24 against 111-199 µs; NOTES.md entry 99). Eager callers see it:
    a llama2-7b block at M = 1 launched layer after layer took 59.5 µs of wall time for 55.0 of
    GPU time, and 173.2 µs before. Graph captures and act-order weights always take the
    checked path.

    ``scale_fma``: the group scale inside the unpacking (one fp16 FMA per pair of weights instead
    of a bias subtraction and a scale multiply; 1.5-5 % faster from M = 128 on, NOTES.md entry
    87, and 0.6-3.7 % per model at M = 33..64, where it replaces the FP32 fold of 64-row tiles,
    entry 88), which the wgmma kernels of symmetric, grouped weights take when every scale lies
    below 2^-4 in magnitude (``mw.fma_scales``, checked when the weight was made). The outputs
    are bitwise those of the two-step unpacking (weights scaled in fp16). ``None`` (default):
    whenever the weight allows it and the instance gains (``use_scale_fma``); ``False``: never,
    each instance's own build instead, which on the instances that scale FP32 sums
    (``KernelConfig.wg_defer``) rounds differently; ``True``: as ``None``, but a weight whose
    scales do not allow it is an error instead of the two-step form.
    """
    scale_fma = _scale_fma_option(scale_fma)
    if FAST_PATH:
        y = _fast_matmul(x, mw, out, config, stream, max_ctas, pdl, scale_fma)
        if y is not _MISS:
            return y
    return _matmul_checked(x, mw, out, config, stream, max_ctas, pdl, scale_fma)


def _matmul_checked(x, mw, out, config, stream, max_ctas, pdl, scale_fma):
    """``matmul`` with every check, CuPy's launch (or ``pdl.launch``), and the launch prepared
    for the fast path where the call allows one."""
    cp = _cupy()
    out_arg = out                     # the caller's (``out`` is the output from here on)
    is_torch = _is_torch(x)
    _check_no_grad(x, "x")
    _check_no_grad(out, "out")
    if not isinstance(mw, MarlinWeight):
        raise ValueError(f"mw must be a MarlinWeight (from mc.pack); got {type(mw).__name__}.")
    if stream is not None:
        _check_stream(stream)
    try:
        launch_stream = launch_stream_for(x, stream)   # the first CUDA call of a first call
    except Exception as e:
        records.raise_if_no_gpu("marlin_cupy.matmul", e)
        raise
    check_pdl(pdl, None)
    capturing = graphs.is_capturing(launch_stream)
    # Under capture, everything below may compile, load a module or allocate: calls that a
    # capture in torch's default (global) mode forbids unless this thread relaxes its mode.
    with (graphs.relaxed_capture_mode() if capturing else contextlib.nullcontext()), \
            launch_stream:
        # Inside the launch stream: DLPack's hand-over then orders nothing between streams
        # (a torch tensor made on this stream needs no event), and CuPy's memory pool hands a
        # block back to the stream that allocated it, so an output allocated on another stream
        # could be reused there while this kernel still writes it.
        x_cp = _as_cupy(x, "x")
        if not mw.on_device:
            raise ValueError("the MarlinWeight is on the host; call mw = mw.to_device() once "
                             "and reuse it (copying weights on every call would dominate the "
                             "run time).")
        if mw.bits != 4:
            raise ValueError(f"the fused kernel supports 4-bit weights; this weight has bits="
                             f"{mw.bits}. 8-bit weights can be packed and unpacked but not run "
                             f"yet.")
        if mw.qweight.device.id != cp.cuda.Device().id:
            raise ValueError(f"the MarlinWeight lives on GPU {mw.qweight.device.id} but the "
                             f"current device is {cp.cuda.Device().id}; call inside `with "
                             f"cupy.cuda.Device(...)` or move the weight with "
                             f"mw.to_host().to_device().")
        k, n = mw.k, mw.n
        if x_cp.ndim < 1 or x_cp.shape[-1] != k:
            raise ValueError(f"x must have shape [..., K] with K={k} (the weight's "
                             f"in_features); got {tuple(x_cp.shape)}.")
        lead = tuple(x_cp.shape[:-1])
        m = int(np.prod(lead)) if lead else 1
        _check_fp16_array(x_cp, "x", lead + (k,))
        x2 = x_cp.reshape(m, k)
        if out is None and is_torch:
            import torch
            # torch's allocator ties a block to the stream current at allocation: make that the
            # launch stream, so the block is not handed out again while this kernel writes it.
            with (torch.cuda.stream(torch.cuda.ExternalStream(launch_stream.ptr))
                  if stream is not None else contextlib.nullcontext()):
                out = torch.empty(lead + (n,), dtype=torch.float16, device=x.device)
        if out is not None:
            out_cp = _as_cupy(out, "out")
            _check_fp16_array(out_cp, "out", lead + (n,))
            _check_disjoint(x2, out_cp, mw)
        else:
            out_cp = cp.empty(lead + (n,), dtype=cp.float16)
        has_zp = mw.zeros is not None
        fma_scales = bool(mw.fma_scales) and not has_zp
        if scale_fma is True and not fma_scales:
            raise ValueError("scale_fma=True: this weight cannot take the group scale inside "
                             "the unpacking (it needs symmetric weights whose scales all lie "
                             "below 2^-4 in magnitude; mw.fma_scales is False)")
        fma_scales = fma_scales and scale_fma is not False
        _check_options(config, max_ctas)
        if m == 0 or n == 0:
            return out if out is not None else out_cp          # nothing to compute
        if k == 0:
            # x @ W over no rows of W is 0: zeros, on the launch stream, and no launch (its
            # grid would have no CTAs).
            cp.cuda.runtime.memsetAsync(out_cp.data.ptr, 0, out_cp.nbytes, launch_stream.ptr)
            return out if out is not None else out_cp
        group_size = mw.group_size
        # The plans' generation before planning: a reload between the two retires this launch.
        generation = _plan.generation
        plan = _plan(cp.cuda.Device().id, m, n, k, group_size, has_zp, config, max_ctas,
                     bool(pdl), fma_scales)
        ws = workspace(launch_stream, captured=capturing)
        if mw.perm is not None:
            # act-order: columns in group order. Under capture into the workspace's buffer,
            # which outlives the call (a temporary would be freed while the graph uses it).
            x2 = cp.take(x2, mw.perm, axis=1, out=ws.permuted_x(m, k) if capturing else None)
        locks, scratch = ws.get(plan.locks, plan.scratch_floats)
        zeros = mw.zeros if has_zp else mw.scales     # never read without zero points
        args = (x2, mw.qweight, mw.scales, zeros, out_cp, scratch, locks,
                np.int32(m), np.int32(n), np.int32(k), np.int32(plan.parallel))
        tmap = _tma_maps.get(plan.kernel.kernel.ptr)
        if tmap is not None:
            if capturing:
                raise ValueError("a MARLIN_WS_TMA_A build (a measurement build, NOTES.md entry "
                                 "101) writes its tensor map before every launch and cannot "
                                 "be captured in a graph")
            _write_tma_map(tmap, x2, plan.config.tile_m, launch_stream)
        if pdl:
            _pdl.launch(plan.kernel, plan.grid, plan.threads, args, plan.smem, launch_stream)
        else:
            plan.kernel((plan.grid,), (plan.threads,), args, shared_mem=plan.smem)
        if FAST_PATH and not capturing and mw.perm is None and tmap is None:
            kind = _call_kind(x, out_arg, stream)
            if kind is not None:
                # The weight as launched (the arrays in args, not read again from mw, which
                # another thread may have changed since), in _arrays_of's form.
                arrays = (_address(args[1]), _address(args[2]),
                          _address(args[3]) if has_zp else None, None, group_size)
                _prepare(_fast_key(kind, cp.cuda.Device().id, launch_stream.ptr, mw, x, out_arg,
                                   pdl, config, max_ctas, scale_fma),
                         mw, arrays, plan, ws, locks, scratch, args, launch_stream.ptr,
                         lead + (n,), bool(pdl), generation)
    return out if out is not None else out_cp


# ---------------------------------------------------------------------------------------------
# The fast path: a call like one made before on this thread
# ---------------------------------------------------------------------------------------------
#: Whether ``matmul`` takes its fast path. A call whose signature (device, stream, weight, the
#: shape of ``x``, whether ``out`` is given, and the options) matches one that this thread made
#: before through every check reuses that call's plan, workspace and prepared arguments: it
#: checks only what may differ between such calls (``x``'s and ``out``'s dtype, layout,
#: alignment, device and overlap; the stream's type; the weight's arrays, by address; the
#: workspace's buffers; whether the stream captures a graph now) and launches through the
#: driver with ``x``'s and ``out``'s addresses written into the prepared arguments. Any other
#: call, and any of those checks that fails, goes through ``_matmul_checked``, which raises the
#: same errors as always. False: every call takes that path (tests and
#: ``scripts/host_probe.py`` compare the two; the results are the same bits).
#: ``pdl=True`` calls launch through ``cuLaunchKernelEx`` with a prepared launch configuration.
#: Not taken: graph captures, act-order weights, inputs other than CuPy arrays and torch
#: tensors, torch tensors with an explicit ``stream``, and outputs of the other library.
FAST_PATH = True
_FAST_MAX = 4096                 # prepared launches per thread before the cache starts over
_F16 = np.dtype(np.float16)
_tls = threading.local()
_MISS = object()


class _Launch:
    """A launch prepared by ``_matmul_checked`` for the fast path: the kernel, its grid and its
    arguments as ctypes holders in ``launch`` (``x_arg`` and ``out_arg`` rewritten per call), and
    what must still hold for it to apply."""
    __slots__ = ("weight", "arrays", "ws", "locks", "scratch", "gen", "out_shape", "x_bytes",
                 "out_bytes", "launch", "pdl", "x_arg", "out_arg", "kernel", "weight_ranges")


def _address(a):
    """What a prepared launch holds of a device array: its address, shape and dtype."""
    return None if a is None else (a.data.ptr, a.shape, a.dtype)


def _arrays_of(mw) -> tuple:
    """The weight as a prepared launch sees it: its arrays' addresses (not their ids: a
    replaced array's freed id is often the next array's, at another address), shapes and
    dtypes, and its group size."""
    return (_address(mw.qweight), _address(mw.scales), _address(mw.zeros), _address(mw.perm),
            mw.group_size)


def _call_kind(x, out, stream):
    """0 for CuPy ``x`` (and ``out``), 1 for torch ``x`` (and ``out``) on torch's current
    stream, None where the fast path never applies."""
    cp = sys.modules["cupy"]
    if type(x) is cp.ndarray:
        return 0 if out is None or type(out) is cp.ndarray else None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and stream is None:
        return 1 if out is None or isinstance(out, torch.Tensor) else None
    return None


def _fast_key(kind, device, stream_ptr, mw, x, out, pdl, config, max_ctas, scale_fma) -> tuple:
    """The signature a prepared launch applies to."""
    return (kind, device, stream_ptr, id(mw), tuple(x.shape), out is None, bool(pdl), config,
            max_ctas, scale_fma)


@functools.lru_cache(maxsize=None)
def _cu_launch_kernel():
    """``cuLaunchKernel`` from the CUDA driver library (RuntimeError if it cannot be loaded)."""
    vp, ui = ctypes.c_void_p, ctypes.c_uint
    return _pdl.driver_function("cuLaunchKernel", (vp, ui, ui, ui, ui, ui, ui, ui, vp,
                                                   ctypes.POINTER(ctypes.c_void_p), vp))


def _torch_stream_ptr(torch) -> int:
    """The handle of torch's current stream on its current device (``launch_stream_for``'s), by
    torch's raw-stream query where it has one."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(torch.cuda.current_device()))
    return int(torch.cuda.current_stream().cuda_stream)


def _prepare(key, mw, arrays, plan, ws, locks, scratch, args, stream_ptr: int,
             out_shape: tuple, pdl: bool, generation: int):
    """Remember the launch ``_matmul_checked`` just made of ``mw`` (whose arrays it launched
    with are ``arrays``, ``_arrays_of``'s form) with ``ws``'s buffers ``locks`` and ``scratch``
    (those it got, which another thread may have replaced since), for the fast path:
    ``pdl=True`` launches are sent as prepared (``cuLaunchKernelEx``), the others through
    ``cuLaunchKernel`` with the same parameter array. ``generation``: the plans' generation
    read before the plan was made (a reload after it retires the launch), and the kernel is
    held, so that its module stays loaded while the launch may be sent."""
    cache = getattr(_tls, "launches", None)
    if cache is None or len(cache) >= _FAST_MAX:
        cache = _tls.launches = {}
    try:
        _cu_launch_kernel()
        if pdl:
            _pdl._driver()
    except RuntimeError:
        return                        # no driver entry point: every call takes the checked path
    rec = _Launch()
    rec.weight = weakref.ref(mw)
    rec.arrays = arrays
    rec.ws, rec.locks, rec.scratch = ws, locks, scratch
    rec.gen = generation
    rec.kernel = plan.kernel
    rec.weight_ranges = tuple((a[0], a[0] + int(np.prod(a[1])) * np.dtype(a[2]).itemsize)
                              for a in arrays[:3] if a is not None)
    rec.out_shape = out_shape
    m, n, k = (int(v) for v in args[7:10])
    rec.x_bytes, rec.out_bytes = 2 * m * k, 2 * m * n       # fp16 x [m, K] and out [m, N]
    rec.launch = _pdl.PreparedLaunch(plan.kernel.kernel.ptr, plan.grid, plan.threads, args,
                                     plan.smem, stream_ptr, pdl)
    rec.pdl = pdl
    rec.x_arg, rec.out_arg = rec.launch.holders[0], rec.launch.holders[4]
    cache[key] = rec


def _fast_matmul(x, mw, out, config, stream, max_ctas, pdl, scale_fma):
    """``matmul`` for a call like one this thread made before (``FAST_PATH``), or ``_MISS``."""
    cache = getattr(_tls, "launches", None)
    if not cache or not isinstance(pdl, (bool, np.bool_)):   # (check_pdl's error: checked path)
        return _MISS
    cp = sys.modules["cupy"]
    kind = _call_kind(x, out, stream)
    if kind is None:
        return _MISS
    if kind == 0:
        if stream is None:
            stream_ptr = cp.cuda.get_current_stream().ptr
        elif isinstance(stream, _stream_types(cp)):
            stream_ptr = stream.ptr
        else:
            return _MISS              # (_check_stream's error: checked path)
    else:
        torch = sys.modules["torch"]
        stream_ptr = _torch_stream_ptr(torch)
    device = cp.cuda.runtime.getDevice()
    rec = cache.get(_fast_key(kind, device, stream_ptr, mw, x, out, pdl, config, max_ctas,
                              scale_fma))
    if (rec is None or rec.gen != _plan.generation or rec.weight() is not mw
            or _arrays_of(mw) != rec.arrays or rec.ws.locks is not rec.locks
            or rec.ws.scratch is not rec.scratch):
        return _MISS
    try:
        if cp.cuda.runtime.streamIsCapturing(stream_ptr):
            return _MISS
    except Exception:                 # the checked path says what is wrong
        return _MISS
    if kind == 0:
        if x.dtype != _F16 or not x.flags.c_contiguous or x.data.device_id != device:
            return _MISS
        x_ptr = x.data.ptr
        if out is None:
            if stream is None:
                y = cp.empty(rec.out_shape, dtype=cp.float16)
            else:
                with stream:          # the pool ties the block to the stream that uses it
                    y = cp.empty(rec.out_shape, dtype=cp.float16)
        else:
            if (out.dtype != _F16 or out.shape != rec.out_shape or not out.flags.c_contiguous
                    or out.data.device_id != device):
                return _MISS
            y = out
        y_ptr = y.data.ptr
    else:
        if (x.dtype is not torch.float16 or x.get_device() != device or not x.is_contiguous()
                or x.requires_grad):
            return _MISS
        x_ptr = x.data_ptr()
        if out is None:
            y = torch.empty(rec.out_shape, dtype=torch.float16, device=x.device)
        else:
            if (out.dtype is not torch.float16 or out.get_device() != device
                    or tuple(out.shape) != rec.out_shape or not out.is_contiguous()
                    or out.requires_grad):
                return _MISS
            y = out
        y_ptr = y.data_ptr()
    if x_ptr % 16 or y_ptr % 16:
        return _MISS
    if out is not None and (x_ptr < y_ptr + rec.out_bytes and y_ptr < x_ptr + rec.x_bytes
                            or any(lo < y_ptr + rec.out_bytes and y_ptr < hi
                                   for lo, hi in rec.weight_ranges)):
        return _MISS                  # out overlaps x or the weight (_check_disjoint's error)
    rec.x_arg.value = x_ptr
    rec.out_arg.value = y_ptr
    _send(rec)
    return y


def _send(rec: _Launch):
    """Enqueue a prepared launch: ``cuLaunchKernelEx`` with its attribute for ``pdl=True``, else
    ``cuLaunchKernel`` (CuPy's own launch) with the same parameters."""
    if rec.pdl:
        rec.launch.send()
        return
    c = rec.launch.config
    err = _cu_launch_kernel()(rec.launch.function, c.gridDimX, 1, 1, c.blockDimX, 1, 1,
                              c.sharedMemBytes, c.hStream, rec.launch.params, None)
    if err != 0:
        raise RuntimeError(f"cuLaunchKernel failed with CUresult {err}")


def launch_stream_for(x, stream=None):
    """The CuPy stream ``matmul`` launches on for input ``x``: ``stream`` if given, else torch's
    current stream for a torch tensor, else CuPy's current stream."""
    cp = _cupy()
    if stream is not None:
        return stream
    if _is_torch(x):
        import torch
        return cupy_stream_of(torch.cuda.current_stream(), cp)
    return cp.cuda.get_current_stream()


def cupy_stream_of(torch_stream, cp=None):
    """A CuPy stream for a torch (or other foreign) CUDA stream: through the CUDA stream
    protocol (``cupy.cuda.Stream.from_external``, CuPy 14+) when both sides have it, else
    ``cupy.cuda.ExternalStream`` on its handle (deprecated in CuPy 14, the only way in 13)."""
    cp = cp if cp is not None else _cupy()
    from_external = getattr(cp.cuda.Stream, "from_external", None)
    if from_external is not None and hasattr(torch_stream, "__cuda_stream__"):
        return from_external(torch_stream)
    return cp.cuda.ExternalStream(torch_stream.cuda_stream)
