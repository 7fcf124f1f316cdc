"""The launch side of ``matmul``, checked without a GPU: what the checked path refuses before it
launches (a stream that is not CuPy's, ``out`` overlapping ``x``, a ``scale_fma`` that is not a
bool), what it does without a launch (N = 0, K = 0), what the fast path must never send (a
launch prepared with a weight array or workspace buffer that has since been replaced), and the
workspaces (one per stream and per graph capture, safe to share between threads, released on
request).

Device arrays are CuPy array headers over made-up addresses (``_device_array``): the code
under test reads their addresses, shapes and dtypes, never their data. The CUDA calls it would
make are stood in for by recorders.
"""
import ctypes
import threading
import types

import numpy as np
import pytest

from marlin_cupy import graphs, ops, weights
from marlin_cupy.weights import MarlinWeight

cp = pytest.importorskip("cupy")

K, N, M = 256, 128, 16
STREAM = 0x5A                    # the launch stream's handle


def _device_array(address, shape, dtype):
    """A CuPy array of ``shape`` at device ``address``; no GPU is touched."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    memory = cp.cuda.UnownedMemory(address, nbytes, None, 0)
    return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(memory, 0))


def _weight(k=K, n=N, group_size=128, qweight=None, zeros=False):
    """A 4-bit MarlinWeight on the (made-up) device, symmetric unless ``zeros``."""
    g = 1 if group_size == -1 else k // group_size
    if qweight is None:
        qweight = _device_array(0x1000000, (k // 16, 2 * n), np.int32)
    z = _device_array(0x3000000, (g, n // 8), np.int32) if zeros else None
    return MarlinWeight(qweight, _device_array(0x2000000, (g, n), np.float16), z, None, 4,
                        group_size, k, n)


class FakeStream:
    """Stands in for the CuPy stream ``launch_stream_for`` gives: a handle and a context."""
    ptr = STREAM

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class TorchLikeStream:
    """What a torch.cuda.Stream offers: a handle as ``cuda_stream``, no ``ptr``."""
    cuda_stream = STREAM


@pytest.fixture(autouse=True)
def _scales_checked_on_the_host(monkeypatch):
    """``MarlinWeight`` reduces its scales on the device (``fma_scales``); these say True."""
    monkeypatch.setattr(weights, "scales_fit_fma", lambda scales: True)


@pytest.fixture
def checked(monkeypatch):
    """``_matmul_checked`` up to its plan, on device 0 and stream ``STREAM``: the plans it asks
    for (``planned``, and ``Planned`` raised instead of a plan) and the memsets it enqueues
    (``memsets``: address, value, bytes, stream)."""
    record = types.SimpleNamespace(planned=[], memsets=[])

    def plan(*args):
        record.planned.append(args)
        raise Planned(args)
    plan.generation = 0                 # as _PlanCache has

    shim = types.SimpleNamespace(
        ndarray=cp.ndarray, float16=cp.float16,
        empty=lambda shape, dtype: _device_array(0x7000000, shape, dtype),
        cuda=types.SimpleNamespace(
            Device=lambda *a: types.SimpleNamespace(id=0),
            Stream=cp.cuda.Stream, ExternalStream=cp.cuda.ExternalStream,
            runtime=types.SimpleNamespace(
                memsetAsync=lambda *args: record.memsets.append(args))))
    monkeypatch.setattr(ops, "_cupy", lambda: shim)
    monkeypatch.setattr(ops, "launch_stream_for", lambda x, stream=None: FakeStream())
    monkeypatch.setattr(graphs, "is_capturing", lambda stream: False)
    monkeypatch.setattr(ops, "_plan", plan)
    monkeypatch.setattr(ops, "FAST_PATH", False)
    return record


class Planned(Exception):
    """``_matmul_checked`` asked for a plan (the recorder stops the call there)."""


def _checked(x, mw, out=None, stream=None, scale_fma=None):
    """``matmul`` through its checked path (the ``checked`` fixture turns the fast path off)."""
    return ops.matmul(x, mw, out=out, stream=stream, scale_fma=scale_fma)


# ---------------------------------------------------------------------------------------------
# Bad inputs the checked path refuses before it launches
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shift", [0, 2 * M * N - 16, -(2 * M * K - 16)],
                         ids=["out_is_x", "out_ends_in_x", "out_starts_in_x"])
def test_out_overlapping_x_is_refused(checked, shift):
    """The kernel writes ``out`` while other CTAs still read ``x``; K == N so that ``out`` may
    be ``x`` itself."""
    mw = _weight(k=K, n=K)
    x = _device_array(0x4000000, (M, K), np.float16)
    out = _device_array(0x4000000 - shift, (M, K), np.float16)
    with pytest.raises(ValueError, match="out overlaps x"):
        _checked(x, mw, out)
    assert checked.planned == []


@pytest.mark.parametrize("where", ["qweight", "scales", "zeros"])
def test_out_overlapping_the_weight_is_refused(checked, where):
    mw = _weight(zeros=True)
    x = _device_array(0x4000000, (M, K), np.float16)
    out = _device_array(getattr(mw, where).data.ptr + 16, (M, N), np.float16)
    with pytest.raises(ValueError, match=f"out overlaps the weight's {where}"):
        _checked(x, mw, out=out)
    assert checked.planned == []


@pytest.mark.parametrize("m", [0, M])
@pytest.mark.parametrize("option,match", [
    (dict(config="t256_m1_n16_k8_s6_g8"), "config must be a KernelConfig"),
    (dict(max_ctas=-5), "max_ctas=-5 must be at least 1"),
    (dict(max_ctas=2.0), "max_ctas must be an integer or None"),
    (dict(max_ctas=True), "max_ctas must be an integer or None"),
])
def test_options_are_checked_also_when_there_is_nothing_to_compute(checked, m, option, match):
    x = _device_array(0x4000000, (m, K), np.float16)
    with pytest.raises(ValueError, match=match):
        ops.matmul(x, _weight(), **option)
    assert checked.planned == []


def test_out_just_after_x_is_accepted(checked):
    mw = _weight()
    x = _device_array(0x4000000, (M, K), np.float16)
    out = _device_array(0x4000000 + 2 * M * K, (M, N), np.float16)
    with pytest.raises(Planned):
        _checked(x, mw, out)


def test_a_torch_stream_is_refused_with_what_to_pass(checked):
    """A torch stream used to reach ``graphs.is_capturing``, whose error speaks of a graph
    capture; the fast path raised AttributeError. Both paths now say what to pass."""
    mw = _weight()
    x = _device_array(0x4000000, (M, K), np.float16)
    with pytest.raises(ValueError, match=r"cupy_stream_of\(torch_stream\).*ExternalStream"):
        _checked(x, mw, stream=TorchLikeStream())
    assert checked.planned == []


@pytest.mark.parametrize("bad", [0, 1, "no", 0.0])
def test_a_scale_fma_that_is_not_a_bool_is_refused(checked, bad):
    """0 is not False (it used to act like None), nor 1 True."""
    x = _device_array(0x4000000, (M, K), np.float16)
    with pytest.raises(ValueError, match=r"scale_fma must be None, True or False; got"):
        _checked(x, _weight(), scale_fma=bad)


@pytest.mark.parametrize("given, fused", [(None, True), (True, True), (np.True_, True),
                                          (False, False), (np.False_, False)])
def test_scale_fma_bools_of_numpy_are_bools(checked, given, fused):
    """The plan gets ``fma_scales`` (its last argument): the weight allows the fused form
    (``_scales_checked_on_the_host``), so only False forbids it."""
    x = _device_array(0x4000000, (M, K), np.float16)
    with pytest.raises(Planned) as info:
        _checked(x, _weight(), scale_fma=given)
    assert info.value.args[0][-1] is fused


# ---------------------------------------------------------------------------------------------
# N = 0 and K = 0: no launch
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("given_out", [False, True], ids=["new_out", "given_out"])
def test_n_zero_gives_an_empty_output_without_a_plan(checked, given_out):
    mw = _weight(n=0)
    x = _device_array(0x4000000, (2, M, K), np.float16)
    out = _device_array(0x5000000, (2, M, 0), np.float16) if given_out else None
    y = _checked(x, mw, out)
    assert y.shape == (2, M, 0)
    assert y is out or not given_out
    assert checked.planned == [] and checked.memsets == []


@pytest.mark.parametrize("given_out", [False, True], ids=["new_out", "given_out"])
def test_k_zero_gives_zeros_without_a_plan(checked, given_out):
    """x @ W over no rows of W is 0: the output is cleared on the launch stream."""
    mw = _weight(k=0)
    x = _device_array(0x4000000, (M, 0), np.float16)
    out = _device_array(0x5000000, (M, N), np.float16) if given_out else None
    y = _checked(x, mw, out)
    assert y.shape == (M, N)
    assert checked.planned == []
    assert checked.memsets == [(y.data.ptr, 0, 2 * M * N, STREAM)]


@pytest.mark.parametrize("m, n, k", [(1, 0, 4096), (1, 4096, 0), (0, 4096, 4096)])
def test_a_plan_of_an_empty_problem_is_refused(m, n, k):
    """Its grid would have no CTAs (the review's plans had grid 0); refused before the device
    is asked anything."""
    with pytest.raises(ValueError, match=rf"M={m}, N={n}, K={k}: a launch needs all three"):
        ops._plan_uncached(0, m, n, k, 128 if k else -1, False, None, None)


# ---------------------------------------------------------------------------------------------
# The fast path never sends a stale launch
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def fast(monkeypatch):
    """The fast path on device 0, no stream capturing: ``fast.sent`` holds the ``(x, out)``
    addresses of every launch it sends; ``fast.prepare(mw, x, out)`` stores the launch that
    ``_matmul_checked`` would leave after launching ``x @ mw`` into ``out`` on the null
    stream."""
    sent = []
    monkeypatch.setattr(ops, "_cu_launch_kernel", lambda: None)
    monkeypatch.setattr(ops, "_send", lambda rec: sent.append((rec.x_arg.value,
                                                               rec.out_arg.value)))
    monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: 0)
    monkeypatch.setattr(cp.cuda.runtime, "streamIsCapturing", lambda ptr: 0)
    monkeypatch.setattr(ops._tls, "launches", {}, raising=False)
    stream = cp.cuda.Stream.null
    plan = types.SimpleNamespace(kernel=types.SimpleNamespace(
        kernel=types.SimpleNamespace(ptr=0xF00)), grid=132, threads=256, smem=1024)

    def prepare(mw, x, out, ws=None, locks=None, scratch=None):
        ws = ws if ws is not None else ops.Workspace()
        if locks is None:
            locks = ws.locks = _device_array(0x9000000, (132,), np.int32)
            scratch = ws.scratch = _device_array(0xA000000, (4096,), np.float32)
        m, k = x.shape
        zeros = mw.zeros if mw.zeros is not None else mw.scales   # as _matmul_checked passes
        args = (x, mw.qweight, mw.scales, zeros, out, scratch, locks, np.int32(m),
                np.int32(mw.n), np.int32(k), np.int32(1))
        arrays = (ops._address(mw.qweight), ops._address(mw.scales), ops._address(mw.zeros),
                  None, mw.group_size)
        ops._prepare(ops._fast_key(0, 0, stream.ptr, mw, x, out, False, None, None, None),
                     mw, arrays, plan, ws, locks, scratch, args, stream.ptr, (m, mw.n), False,
                     ops._plan.generation)

    def call(x, mw, out, call_stream=stream, scale_fma=None):
        return ops._fast_matmul(x, mw, out, None, call_stream, None, False, scale_fma)
    return types.SimpleNamespace(sent=sent, prepare=prepare, call=call, stream=stream)


def test_the_fast_path_sends_a_prepared_launch_with_the_new_addresses(fast):
    """The harness itself: a call like the prepared one is sent, with its own x and out."""
    mw = _weight()
    fast.prepare(mw, _device_array(0x4000000, (M, K), np.float16),
                 _device_array(0x5000000, (M, N), np.float16))
    x, out = (_device_array(0x4100000, (M, K), np.float16),
              _device_array(0x5100000, (M, N), np.float16))
    assert fast.call(x, mw, out) is out
    assert fast.sent == [(0x4100000, 0x5100000)]


def test_a_weight_array_replaced_twice_between_calls_is_never_launched_at_its_old_address(fast):
    """``mw.qweight = a; mw.qweight = b``: b's header often takes the id of a's, freed by the
    second assignment, so ids cannot tell the arrays apart; the prepared launch holds a's
    address and must not be sent with b in the weight."""
    arena = _device_array(0x1000000, (3, K // 16, 2 * N), np.int32)
    mw = _weight(qweight=arena[0])
    x, out = (_device_array(0x4000000, (M, K), np.float16),
              _device_array(0x5000000, (M, N), np.float16))
    reused = 0
    for trial in range(200):
        mw.qweight = arena[0]
        fast.prepare(mw, x, out)
        prepared_id = id(mw.qweight)
        assert fast.call(x, mw, out) is out                  # unchanged: sent
        mw.qweight = arena[1]           # frees the prepared header ...
        mw.qweight = arena[2]           # ... whose id the next header may take
        reused += id(mw.qweight) == prepared_id
        assert fast.call(x, mw, out) is ops._MISS, f"trial {trial}: sent with a stale weight"
    assert len(fast.sent) == 200
    assert reused, "no header took a freed id: the test no longer shows the hazard"


def test_a_group_size_changed_in_place_is_not_launched_with_the_old_plan(fast):
    """K = 128: group_size 128 and -1 both have one group, so the weight accepts the change;
    the plan (group_blocks) does not."""
    mw = _weight(k=128)
    x, out = (_device_array(0x4000000, (M, 128), np.float16),
              _device_array(0x5000000, (M, N), np.float16))
    fast.prepare(mw, x, out)
    mw.group_size = -1
    assert fast.call(x, mw, out) is ops._MISS
    assert fast.sent == []


@pytest.mark.parametrize("shift", [0, 2 * M * N - 16, -(2 * M * K - 16)],
                         ids=["out_is_x", "out_ends_in_x", "out_starts_in_x"])
def test_the_fast_path_leaves_out_overlapping_x_to_the_checked_path(fast, shift):
    mw = _weight(k=K, n=K)
    fast.prepare(mw, _device_array(0x4000000, (M, K), np.float16),
                 _device_array(0x5000000, (M, K), np.float16))
    x = _device_array(0x6000000, (M, K), np.float16)
    out = _device_array(0x6000000 - shift, (M, K), np.float16)
    assert fast.call(x, mw, out) is ops._MISS
    assert fast.sent == []


@pytest.mark.parametrize("where", ["qweight", "scales", "zeros"])
def test_the_fast_path_leaves_out_overlapping_the_weight_to_the_checked_path(fast, where):
    mw = _weight(zeros=True)
    x = _device_array(0x4000000, (M, K), np.float16)
    fast.prepare(mw, x, _device_array(0x5000000, (M, N), np.float16))
    out = _device_array(getattr(mw, where).data.ptr, (M, N), np.float16)
    assert fast.call(x, mw, out) is ops._MISS
    assert fast.sent == []


def test_a_launch_prepared_before_a_reload_is_not_sent_and_holds_its_kernel(fast):
    """The generation is the one read before the plan was made: a reload between the plan and
    ``_prepare`` (another thread's) retires the launch; and the launch keeps its kernel (and so
    its module) alive while it may be sent."""
    mw = _weight()
    x, out = (_device_array(0x4000000, (M, K), np.float16),
              _device_array(0x5000000, (M, N), np.float16))
    before = ops._plan.generation
    ops._plan.cache_clear()                         # a reload after the plan, before _prepare
    m, k = x.shape
    ws = ops.Workspace()
    ws.locks = _device_array(0x9000000, (132,), np.int32)
    ws.scratch = _device_array(0xA000000, (4096,), np.float32)
    args = (x, mw.qweight, mw.scales, mw.scales, out, ws.scratch, ws.locks, np.int32(m),
            np.int32(N), np.int32(k), np.int32(1))
    kernel = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0xF00))
    plan = types.SimpleNamespace(kernel=kernel, grid=132, threads=256, smem=1024)
    ops._prepare(ops._fast_key(0, 0, fast.stream.ptr, mw, x, out, False, None, None, None), mw,
                 (ops._address(mw.qweight), ops._address(mw.scales), None, None, 128), plan, ws,
                 ws.locks, ws.scratch, args, fast.stream.ptr, (M, N), False, before)
    rec = next(iter(ops._tls.launches.values()))
    assert rec.kernel is kernel
    assert fast.call(x, mw, out) is ops._MISS
    assert fast.sent == []


def test_the_fast_path_leaves_a_torch_stream_to_the_checked_path(fast):
    """(It raised AttributeError: a torch stream has no ``ptr``.)"""
    mw = _weight()
    x, out = (_device_array(0x4000000, (M, K), np.float16),
              _device_array(0x5000000, (M, N), np.float16))
    fast.prepare(mw, x, out)
    assert fast.call(x, mw, out, call_stream=TorchLikeStream()) is ops._MISS
    assert fast.sent == []


def test_a_launch_prepared_with_since_replaced_buffers_is_never_sent(fast):
    """``_prepare`` keeps the buffers the launch used (another thread may have grown the
    workspace meanwhile, as ``ws`` below): the fast path sees that they are no longer the
    workspace's and goes through the checked path."""
    mw = _weight()
    x, out = (_device_array(0x4000000, (M, K), np.float16),
              _device_array(0x5000000, (M, N), np.float16))
    ws = ops.Workspace()
    used_locks = _device_array(0x9000000, (132,), np.int32)
    used_scratch = _device_array(0xA000000, (4096,), np.float32)
    ws.locks = _device_array(0x9100000, (264,), np.int32)         # grown by another thread
    ws.scratch = _device_array(0xA100000, (8192,), np.float32)
    fast.prepare(mw, x, out, ws, used_locks, used_scratch)
    rec = next(iter(ops._tls.launches.values()))
    assert rec.locks is used_locks and rec.scratch is used_scratch
    assert fast.call(x, mw, out) is ops._MISS
    assert fast.sent == []


# ---------------------------------------------------------------------------------------------
# Workspaces
# ---------------------------------------------------------------------------------------------
def test_threads_sharing_a_workspace_each_get_room_for_their_own_launch(monkeypatch):
    """Two threads on one stream grow its workspace at once (both saw the 50-counter buffers):
    the one that needs 200 must get buffers of at least 200, whichever assignment lands last.
    The stand-in allocator lets both threads into their allocations together when it can (and
    goes on alone after a timeout, as it must when the workspace's lock holds the other
    thread back); then the 100-thread assigns its locks after the 200-thread's."""
    together = threading.Barrier(2)
    big_assigned = threading.Event()

    def zeros(n, dtype):                  # the locks' allocation
        try:
            together.wait(timeout=0.5)
        except threading.BrokenBarrierError:
            pass
        if n == 100:
            big_assigned.wait(timeout=0.5)
        return np.zeros(n, dtype)

    def empty(n, dtype):                  # the scratch's, after the locks were assigned
        if n == 200:
            big_assigned.set()
            threading.Event().wait(0.2)   # the 100-thread assigns its locks meanwhile
        return np.empty(n, dtype)
    shim = types.SimpleNamespace(int32=np.int32, float32=np.float32, zeros=zeros, empty=empty)
    monkeypatch.setattr(ops, "_cupy", lambda: shim)
    ws = ops.Workspace()
    ws.locks, ws.scratch = np.zeros(50, np.int32), np.empty(50, np.float32)
    got = {}

    def launch(n):
        locks, scratch = ws.get(n, n)
        got[n] = (locks.size, scratch.size)
    threads = [threading.Thread(target=launch, args=(n,)) for n in (200, 100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got[200][0] >= 200 and got[200][1] >= 200, got
    assert got[100][0] >= 100 and got[100][1] >= 100, got


@pytest.fixture
def stream_table(monkeypatch):
    """An empty workspace table on device 0, streams standing in as ``Stream(ptr, capture)``
    (``capture``: the id of the capture it takes part in, or None), and the CUDA calls that
    ``release_workspaces`` makes recorded in ``synced``."""
    synced = []
    current = [0]                         # the current device

    class Stream:
        def __init__(self, ptr, capture=None):
            self.ptr, self.capture = ptr, capture

        def synchronize(self):
            synced.append(("stream", self.ptr))

    class Device:
        def __init__(self, dev=None):
            self.id = current[-1] if dev is None else dev

        def __enter__(self):
            current.append(self.id)

        def __exit__(self, *exc):
            current.pop()
    shim = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=Device, Stream=Stream, ExternalStream=Stream,
        get_current_stream=lambda: Stream(0),
        runtime=types.SimpleNamespace(
            deviceSynchronize=lambda: synced.append(("device", current[-1])))))
    monkeypatch.setattr(ops, "_cupy", lambda: shim)
    monkeypatch.setattr(graphs, "is_capturing", lambda s: s.capture is not None)
    monkeypatch.setattr(graphs, "capture_id", lambda s: s.capture)
    monkeypatch.setattr(ops, "_workspaces", {})
    monkeypatch.setattr(ops, "_last_capture", {}, raising=False)
    return types.SimpleNamespace(Stream=Stream, synced=synced)


def test_each_graph_capture_has_a_workspace_of_its_own(stream_table):
    """torch.cuda.graph captures every graph on one stream: graphs captured there separately
    must not share counters, or replaying them at once races."""
    s = stream_table.Stream(STREAM)
    eager = ops.workspace(s)
    s.capture = 7
    first = ops.workspace(s)
    assert ops.workspace(s) is first                  # the same capture: the same workspace
    s.capture = 8
    second = ops.workspace(s)
    s.capture = None
    assert ops.workspace(s) is eager
    assert ops.workspace(s, captured=True) is second  # after the capture: the latest one's
    assert first is not second and eager not in (first, second)
    assert first.captured and second.captured and not eager.captured


def test_capture_workspace_of_a_stream_that_never_captured_is_an_error(stream_table):
    with pytest.raises(ValueError, match="has captured no graph with matmul"):
        ops.workspace(stream_table.Stream(STREAM), captured=True)


def test_release_workspaces_drops_one_streams_or_all_after_synchronizing(stream_table):
    Stream, synced = stream_table.Stream, stream_table.synced
    s, t = Stream(STREAM), Stream(0x6B)
    ws_s, ws_t = ops.workspace(s), ops.workspace(t)
    s.capture = 3
    ws_g = ops.workspace(s)
    s.capture = None
    ops._workspaces[(1, STREAM, False)] = ws_other_device = ops.Workspace()
    for ws in (ws_s, ws_t, ws_g, ws_other_device):
        ws.locks = np.zeros(4, np.int32)
    assert ops.release_workspaces(s) == 1
    assert synced == [("stream", STREAM)]
    assert ws_s.locks is None and ws_t.locks is not None and ws_g.locks is not None
    fresh = ops.workspace(s)                    # a stream with that handle starts anew
    assert fresh is not ws_s and fresh.locks is None
    synced.clear()
    assert ops.release_workspaces() == 3        # fresh, t's and device 1's; not the capture's
    assert sorted(synced) == [("device", 0), ("device", 1)]
    assert ws_t.locks is None and ws_other_device.locks is None and ws_g.locks is not None
    assert ops.workspace(s, captured=True) is ws_g
    assert ops.release_workspaces(captures=True) == 1
    assert ws_g.locks is None and ops._workspaces == {}
    with pytest.raises(ValueError, match="has captured no graph"):
        ops.workspace(s, captured=True)


def test_release_workspaces_refuses_a_torch_stream(stream_table):
    with pytest.raises(ValueError, match="stream must be a CuPy stream"):
        ops.release_workspaces(TorchLikeStream())


def test_capture_id_asks_the_driver_with_the_optional_outputs_null(monkeypatch):
    """``graphs.capture_id`` through a stand-in with the driver's longest signature (a real
    foreign call): the id it writes comes back; a stream that captures nothing is not asked."""
    asked = []
    vp = ctypes.c_void_p
    proto = ctypes.CFUNCTYPE(ctypes.c_int, vp, ctypes.POINTER(ctypes.c_int),
                             ctypes.POINTER(ctypes.c_uint64), vp, vp, vp, vp)

    def driver(stream, status, ident, graph, deps, edges, count):
        asked.append((stream, graph, deps, edges, count))
        status[0] = graphs.CU_STREAM_CAPTURE_STATUS_ACTIVE
        ident[0] = 0x1234_5678_9ABC
        return 0
    fake = proto(driver)
    monkeypatch.setattr(graphs, "_capture_info", lambda: fake)
    capturing = types.SimpleNamespace(ptr=STREAM, is_capturing=lambda: True)
    idle = types.SimpleNamespace(ptr=STREAM, is_capturing=lambda: False)
    assert graphs.capture_id(capturing) == 0x1234_5678_9ABC
    assert asked == [(STREAM, None, None, None, None)]
    assert graphs.capture_id(idle) is None
    assert len(asked) == 1


def test_the_per_thread_default_stream_gives_each_thread_its_own_workspace(stream_table):
    """``cudaStreamPerThread`` (handle 2: CuPy's ``Stream.ptds``) is a different stream in each
    thread, so two threads' launches there run at once: one workspace would be shared locks,
    the deadlock or wrong sums the workspace exists to prevent."""
    ptds = stream_table.Stream(ops.PER_THREAD_STREAM)
    got = {}

    def other():
        got["ws"] = ops.workspace(ptds)
        got["again"] = ops.workspace(ptds)
    mine = ops.workspace(ptds)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got["ws"] is got["again"] and got["ws"] is not mine
    assert ops.workspace(ptds) is mine
    # A plain stream's handle is one stream whichever thread launches on it.
    plain = stream_table.Stream(STREAM)
    t = threading.Thread(target=lambda: got.update(plain=ops.workspace(plain)))
    t.start()
    t.join()
    assert got["plain"] is ops.workspace(plain)
    # Releasing the per-thread stream drops the calling thread's workspace only.
    assert ops.release_workspaces(ptds) == 1
    assert ops.workspace(ptds) is not mine
    assert got["ws"] in ops._workspaces.values()


def test_release_workspaces_drops_the_streams_device_not_the_current_one(stream_table):
    s = stream_table.Stream(STREAM)
    ws = ops.workspace(s)                               # device 0
    s.device_id = 0
    other = stream_table.Stream(0x6B)
    other.device_id = 1
    ops._workspaces[(1, 0x6B, False)] = on_one = ops.Workspace()
    assert ops.release_workspaces(other) == 1           # called with device 0 current
    assert (1, 0x6B, False) not in ops._workspaces and on_one.locks is None
    assert ops.workspace(s) is ws


class FakeTorch:
    """``sys.modules['torch']`` for the checks that ask whether something is a torch tensor."""
    class Tensor:
        def __init__(self, requires_grad=False):
            self.requires_grad = requires_grad


class MyTensor(FakeTorch.Tensor):
    """A subclass defined outside torch: still a torch tensor."""


def test_torch_tensors_are_known_by_isinstance(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "torch", FakeTorch)
    assert ops._is_torch(MyTensor()) and ops._is_torch(FakeTorch.Tensor())
    assert not ops._is_torch(_device_array(0x4000000, (M, K), np.float16))
    monkeypatch.delitem(sys.modules, "torch")
    assert not ops._is_torch(MyTensor())               # no torch imported: no torch tensor


@pytest.mark.parametrize("which", ["x", "out"])
def test_a_tensor_that_requires_grad_is_refused_with_what_to_do(checked, monkeypatch, which):
    """matmul has no backward: refused on the checked path (DLPack would refuse it with a
    message about dtypes), and the fast path leaves it to the checked path."""
    import sys
    monkeypatch.setitem(sys.modules, "torch", FakeTorch)
    x = MyTensor(requires_grad=which == "x")
    out = MyTensor(requires_grad=which == "out")
    with pytest.raises(ValueError, match=f"{which} requires grad, and matmul has no backward.*"
                                         f"torch.no_grad.*{which}.detach"):
        ops._matmul_checked(x, _weight(), out, None, None, None, False, None)
    assert checked.planned == []


def test_the_fast_path_leaves_a_tensor_that_requires_grad_to_the_checked_path(fast,
                                                                             monkeypatch):
    """Primed by a call without grad, the same call with ``x`` (or ``out``) requiring grad must
    not be sent: the checked path refuses it."""
    import sys

    class Tensor(FakeTorch.Tensor):
        def __init__(self, ptr, shape, requires_grad=False):
            super().__init__(requires_grad)
            self.ptr, self.shape = ptr, shape
            self.dtype = torch.float16
            self.device = "cuda:0"

        def get_device(self):
            return 0

        def is_contiguous(self):
            return True

        def data_ptr(self):
            return self.ptr

    torch = types.SimpleNamespace(
        Tensor=FakeTorch.Tensor, float16=object(),
        _C=types.SimpleNamespace(_cuda_getCurrentRawStream=lambda dev: fast.stream.ptr),
        cuda=types.SimpleNamespace(current_device=lambda: 0))
    monkeypatch.setitem(sys.modules, "torch", torch)
    mw = _weight()
    x_cp, out_cp = (_device_array(0x4000000, (M, K), np.float16),
                    _device_array(0x5000000, (M, N), np.float16))
    x, out = Tensor(0x4000000, (M, K)), Tensor(0x5000000, (M, N))
    # What _matmul_checked leaves after a torch call (kind 1) without grad:
    m, k = M, K
    ws = ops.Workspace()
    ws.locks = _device_array(0x9000000, (132,), np.int32)
    ws.scratch = _device_array(0xA000000, (4096,), np.float32)
    args = (x_cp, mw.qweight, mw.scales, mw.scales, out_cp, ws.scratch, ws.locks, np.int32(m),
            np.int32(N), np.int32(k), np.int32(1))
    plan = types.SimpleNamespace(kernel=types.SimpleNamespace(
        kernel=types.SimpleNamespace(ptr=0xF00)), grid=132, threads=256, smem=1024)
    ops._prepare(ops._fast_key(1, 0, fast.stream.ptr, mw, x, out, False, None, None, None), mw,
                 (ops._address(mw.qweight), ops._address(mw.scales), None, None, 128), plan, ws,
                 ws.locks, ws.scratch, args, fast.stream.ptr, (M, N), False,
                 ops._plan.generation)
    assert ops._fast_matmul(x, mw, out, None, None, None, False, None) is out    # primed
    for grad_x, grad_out in ((True, False), (False, True)):
        x.requires_grad, out.requires_grad = grad_x, grad_out
        assert ops._fast_matmul(x, mw, out, None, None, None, False, None) is ops._MISS
    assert len(fast.sent) == 1


def test_a_launch_past_the_kernels_32_bit_unit_counter_is_refused(monkeypatch):
    """The smallest forced tile, 16 x 128 x 64, at N = 57344, K = 28672: M = 171185 is more
    units than the kernel's int32 stripe arithmetic holds (a review found columns would go
    uncomputed, silently); the default tiles need M in the millions. Refused before any
    kernel is built; one row fewer of slabs plans on."""
    from marlin_cupy.config import KernelConfig
    cfg = KernelConfig.from_name("t128_m1_n8_k4_s6_g8_fp32")
    monkeypatch.setattr(ops, "device_facts", lambda device_id: {
        "sms": 132, "smem_optin": 232448, "smem_per_sm": 233472, "smem_reserved": 1024,
        "cc": "90", "name": "NVIDIA H200"})
    built = []
    monkeypatch.setattr(ops, "_kernel", lambda *a: built.append(a) or (_ for _ in ()).throw(
        Planned(a)))
    per_slab = (28672 // cfg.tile_k) * (57344 // cfg.tile_n)
    m_bad = (ops.UNITS_MAX // per_slab + 1) * cfg.tile_m
    with pytest.raises(ValueError, match=r"more than the kernel's 32-bit unit counter .*split x "
                                         r"into batches of at most \d+ rows"):
        ops._plan_uncached(0, m_bad, 57344, 28672, 128, False, cfg, None)
    assert built == []
    with pytest.raises(Planned):                     # within the limit: on to the kernel
        ops._plan_uncached(0, m_bad - cfg.tile_m, 57344, 28672, 128, False, cfg, None)
