"""What ``matmul`` needs to be captured into CUDA graphs (CuPy's ``Stream.begin_capture`` or
``torch.cuda.graph``) and replayed safely.

A graph keeps the addresses its kernels were captured with, and replays them long after the
call returned. So nothing a captured launch reads or writes may be freed or handed to someone
else after capture, and what it relies on (counters at zero) must hold before every replay,
whatever ran before it. ``ops.matmul`` follows three rules while its stream captures:

- the locks, partial sums and act-order copy of ``x`` come from a workspace of that capture's
  own (``ops.workspace(..., captured=True)``, keyed by the stream and the capture's id,
  ``capture_id``), apart from the one its eager calls use and from other captures', so a
  replay on any stream never shares counters with eager launches or with replays of other
  graphs; its buffers are allocated and zeroed *outside* the graph (on a private stream, with
  this thread's capture mode relaxed meanwhile), and a buffer it outgrows is kept, not freed,
  since the launches captured before still point at it;
- compiling and loading a kernel, and every allocation, run with this thread's capture mode
  relaxed, as torch's own allocator does, so a capture in torch's default ("global") mode is
  not invalidated by ``cudaMalloc`` or module loading;
- with torch tensors the output is allocated by torch, so that under ``torch.cuda.graph`` it
  lives in the graph's private memory pool like any other intermediate.

What stays the caller's: keep ``x``, ``out`` and the weight alive while the graph lives (as
for any array a graph uses). Graphs captured separately, on one stream or by
``torch.cuda.graph`` (which captures every graph on one stream), may replay at the same time,
on any streams; CUDA orders the replays of one executable graph itself. The one thing that
shares a workspace is a capture instantiated twice (two executable graphs of one captured
graph, which neither ``cupy`` nor ``torch.cuda.CUDAGraph`` makes): do not replay those at the
same time. The cost: each capture keeps its own locks and partial sums for as long as the
process lives, unless ``ops.release_workspaces(captures=True)`` drops them once no graph
captured with ``matmul`` will be replayed again.
"""
from __future__ import annotations

import contextlib
import ctypes
import threading

from . import pdl

#: CUstreamCaptureMode (cuda.h)
CU_STREAM_CAPTURE_MODE_GLOBAL = 0
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_STREAM_CAPTURE_MODE_RELAXED = 2
#: CUstreamCaptureStatus (cuda.h)
CU_STREAM_CAPTURE_STATUS_ACTIVE = 1

_side = {}
_side_lock = threading.Lock()


def is_capturing(stream) -> bool:
    """Whether ``stream`` (a CuPy stream object) is capturing a graph now.

    Raises RuntimeError with what to do where the query itself is refused: the legacy default
    stream, while another stream captures, cannot be used at all."""
    try:
        return bool(stream.is_capturing())
    except Exception as e:      # CUDARuntimeError; its module differs between CuPy versions
        raise RuntimeError(
            f"cannot launch on stream {stream!r} while a CUDA graph is being captured ({e}). "
            f"Launch on the capturing stream: pass stream=, or make it CuPy's current stream "
            f"(torch tensors use torch's current stream, which torch.cuda.graph sets).") from e


def capture_id(stream) -> int | None:
    """The id of the graph capture that ``stream`` (a CuPy stream object) takes part in now,
    unique over the process's lifetime (``cuStreamGetCaptureInfo``), or None when it captures
    nothing. ``is_capturing``'s RuntimeError where the query is refused."""
    if not is_capturing(stream):
        return None
    status, ident = ctypes.c_int(), ctypes.c_uint64()
    err = _capture_info()(stream.ptr, ctypes.byref(status), ctypes.byref(ident),
                          None, None, None, None)
    if err != 0:
        raise RuntimeError(f"cuStreamGetCaptureInfo failed with CUresult {err}")
    if status.value != CU_STREAM_CAPTURE_STATUS_ACTIVE:
        raise RuntimeError(f"stream {stream.ptr:#x} reported a capture, then capture status "
                           f"{status.value}: the capture was invalidated by an earlier error.")
    return int(ident.value)


def _capture_info():
    """``cuStreamGetCaptureInfo`` from the driver library. The unversioned symbol has the
    CUDA 10 signature (stream, status, id); cuda.h maps the name to ``_v2`` (CUDA 12: + graph,
    dependencies, their count) or ``_v3`` (+ edge data). It is called with the longest form,
    the optional outputs NULL: any of the three reads the arguments it has and ignores the rest
    (the caller cleans up the arguments in the x86-64 and AArch64 calling conventions)."""
    vp = ctypes.c_void_p
    return pdl.driver_function("cuStreamGetCaptureInfo", (
        vp, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint64), vp, vp, vp, vp))


def _exchange(mode: int) -> int:
    fn = pdl.driver_function("cuThreadExchangeStreamCaptureMode", (ctypes.POINTER(ctypes.c_int),))
    m = ctypes.c_int(mode)
    err = fn(ctypes.byref(m))
    if err != 0:
        raise RuntimeError(f"cuThreadExchangeStreamCaptureMode failed with CUresult {err}")
    return m.value


@contextlib.contextmanager
def relaxed_capture_mode():
    """This thread may make calls that a capture in global or thread-local mode forbids
    (``cudaMalloc``, module loading, synchronizing another stream) within the block; the
    thread's previous mode is restored after it."""
    previous = _exchange(CU_STREAM_CAPTURE_MODE_RELAXED)
    try:
        yield
    finally:
        _exchange(previous)


def side_stream():
    """A private non-blocking stream of the current device, for work that must not become
    part of a graph being captured (zeroing a capture workspace's buffers)."""
    import cupy as cp
    dev = cp.cuda.Device().id
    with _side_lock:
        s = _side.get(dev)
        if s is None:
            s = _side[dev] = cp.cuda.Stream(non_blocking=True)
    return s


def zeros_outside_capture(size: int, dtype):
    """A new zeroed CuPy array that no graph's capture records: allocated and cleared on
    ``side_stream()`` with this thread's capture mode relaxed, then waited for."""
    import cupy as cp
    with relaxed_capture_mode():
        s = side_stream()
        with s:
            a = cp.zeros(size, dtype=dtype)
        s.synchronize()
    return a
