"""CUDA graphs: ``matmul`` captured (CuPy's ``Stream.begin_capture``, ``torch.cuda.graph``)
and replayed gives the eager outputs bitwise, replay after replay, with new inputs, on any
stream, ``pdl=True`` included; and the graph writes nothing it does not own.

Failure modes these guard (``marlin_cupy/graphs.py``; shared/research/user_reports.md s.2.2
and s.2.7): counters that a capture zeroed only inside the graph (the next eager launch or
another graph hangs), temporaries freed after capture and handed to someone else while
replays still write them (act-order's copy of ``x``, intermediates of a torch model), a
workspace outgrown during capture and freed under a launch captured before, launches of a
replay sharing counters with eager launches on another stream or with replays of a graph
captured separately, and module loading or ``cudaMalloc`` invalidating a capture in torch's
global mode.
"""
import zlib

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy import ops

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

# (K, N, zero points, act-order): a chain x -> y1 -> y2 -> y3, each layer reading the one
# before; the middle one takes the act-order path (a permuted copy of its input).
LAYERS = ((1024, 2048, False, False), (2048, 1536, True, True), (1536, 1024, False, False))
# One batch per M bucket family: swapped mma.sync, 16-row wgmma, 64-row slabs, > 128 rows.
BATCHES = (1, 16, 48, 130)


def _need_pdl(pdl):
    if pdl and int(ops.device_facts()["cc"]) < 90:
        pytest.skip("pdl=True needs compute capability 9.0+")


def _layers(seed, layers=LAYERS):
    rng = np.random.default_rng(seed)
    out = []
    for k, n, zp, act in layers:
        w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
        qw = mc.quantize(w, bits=4, group_size=128, sym=not zp)
        if act:
            g_idx = (rng.permutation(k) // 128).astype(np.int32)
            qw = mc.QuantizedWeight(qw.q, qw.scales, qw.zeros, g_idx, 4, 128)
        out.append(mc.pack(qw).to_device())
    return out


def _chain(x, mws, pdl, stream=None):
    ys = []
    for mw in mws:
        x = mc.matmul(x, mw, pdl=pdl, stream=stream)
        ys.append(x)
    return ys


def _same(a, b):
    return bool(cp.array_equal(a.view(cp.uint16), b.view(cp.uint16)))


def _eager(x_h, mws):
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        ys = _chain(cp.asarray(x_h), mws, pdl=False)
    s.synchronize()
    return ys


def _nan_blocks(sizes, dtype=cp.float16):
    """Arrays that take whatever blocks CuPy's pool has free, filled with NaN: a replay that
    writes into freed memory shows up as a value that is no longer NaN."""
    return [cp.full(sz, cp.nan, dtype=dtype) for sz in sizes]


def _all_nan(arrays):
    return all(bool(cp.isnan(a).all()) for a in arrays)


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
@pytest.mark.parametrize("m", BATCHES)
def test_cupy_capture_replays_the_eager_chain(m, pdl):
    """No warm-up: the first call of each shape compiles, loads and allocates inside the
    capture. Replays with new inputs, on the capture stream and on another, equal eager runs;
    the capture workspace's counters are zero after them; freed memory stays untouched."""
    _need_pdl(pdl)
    mws = _layers(zlib.crc32(b"chain") + m)
    rng = np.random.default_rng(m)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.zeros((m, LAYERS[0][0]), dtype=cp.float16)
        s.begin_capture()
        ys = _chain(x, mws, pdl)
        graph = s.end_capture()
        # Blocks freed since the capture (act-order's temporaries, had they been temporaries)
        # go to these, from the capture stream's own arena of CuPy's pool.
        guards = _nan_blocks([m * k for k, _, _, _ in LAYERS] * 2)
    s.synchronize()
    for trial, replay_stream in enumerate((s, s, cp.cuda.Stream(non_blocking=True))):
        x_h = rng.standard_normal(x.shape).astype(np.float16)
        with s:
            x[...] = cp.asarray(x_h)
        s.synchronize()
        graph.launch(stream=replay_stream)
        replay_stream.synchronize()
        want = _eager(x_h, mws)
        for i, (got, ref) in enumerate(zip(ys, want)):
            assert _same(got, ref), f"replay {trial}, layer {i}: differs from the eager run"
    assert _all_nan(guards), "a replay wrote into memory freed after the capture"
    ws = ops.workspace(s, captured=True)
    assert int(cp.count_nonzero(ws.locks)) == 0


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
def test_capture_workspace_outgrown_keeps_earlier_launches(pdl):
    """Within one capture a later launch needs more locks and scratch than an earlier one: the
    earlier launch's buffers are kept (the graph replays it with them), and replays give both
    outputs. The next capture on the stream has a workspace of its own."""
    _need_pdl(pdl)
    small, big = _layers(21, LAYERS[:1]), _layers(22, ((4096, 8192, False, False),))
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        xs = [cp.zeros((1, small[0].k), dtype=cp.float16),
              cp.zeros((200, big[0].k), dtype=cp.float16)]
        s.begin_capture()
        ys = [_chain(xs[0], small, pdl)[-1], _chain(xs[1], big, pdl)[-1]]
        graph = s.end_capture()
    s.synchronize()
    ws = ops.workspace(s, captured=True)
    assert ws.retired, "the test no longer outgrows the workspace"
    rng = np.random.default_rng(23)
    for trial in range(3):
        x_h = [rng.standard_normal(x.shape).astype(np.float16) for x in xs]
        with s:
            for x, h in zip(xs, x_h):
                x[...] = cp.asarray(h)
            graph.launch(stream=s)
        s.synchronize()
        for i, mws in enumerate((small, big)):
            assert _same(ys[i], _eager(x_h[i], mws)[-1]), f"replay {trial}, layer set {i}"
    assert int(cp.count_nonzero(ws.locks)) == 0
    with s:
        s.begin_capture()
        _chain(xs[0], small, pdl)
        s.end_capture()
    s.synchronize()
    assert ops.workspace(s, captured=True) is not ws


def test_graphs_captured_separately_replay_at_the_same_time():
    """Two graphs captured one after the other on one stream (``torch.cuda.graph`` captures
    every graph on its one capture stream) have workspaces of their own: replayed at the same
    time on two streams, each gives its eager output, round after round. Sharing counters,
    the two launches' CTAs would hand partial sums to each other (one K-long layer on few
    columns, so that many CTAs share each column)."""
    mws = _layers(51, ((8192, 1024, False, False),))
    m = 16
    rng = np.random.default_rng(52)
    s = cp.cuda.Stream(non_blocking=True)
    xs, ys, captured, spaces = [], [], [], []
    with s:
        for _ in range(2):
            x = cp.zeros((m, mws[0].k), dtype=cp.float16)
            s.begin_capture()
            ys.append(_chain(x, mws, pdl=False)[-1])
            captured.append(s.end_capture())
            spaces.append(ops.workspace(s, captured=True))
            xs.append(x)
    s.synchronize()
    assert spaces[0] is not spaces[1]
    assert spaces[0].locks.data.ptr != spaces[1].locks.data.ptr
    replay = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    for trial in range(20):
        x_h = [rng.standard_normal(x.shape).astype(np.float16) for x in xs]
        with s:
            for x, h in zip(xs, x_h):
                x[...] = cp.asarray(h)
        s.synchronize()
        for graph, stream in zip(captured, replay):
            graph.launch(stream=stream)
        for stream in replay:
            stream.synchronize()
        for i in range(2):
            assert _same(ys[i], _eager(x_h[i], mws)[-1]), f"round {trial}, graph {i}"
    assert all(int(cp.count_nonzero(ws.locks)) == 0 for ws in spaces)


def test_replays_beside_eager_calls_on_the_capture_stream():
    """A graph replayed on one stream while eager calls of the same shapes run on the stream it
    was captured on (warmed up there first): they must not share counters."""
    mws = _layers(31)
    m = 16
    s, r = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(32)
    x_h = rng.standard_normal((m, LAYERS[0][0])).astype(np.float16)
    with s:
        x = cp.asarray(x_h)
        _chain(x, mws, pdl=False)               # eager workspace of s exists and is warm
        s.begin_capture()
        ys = _chain(x, mws, pdl=False)
        graph = s.end_capture()
    s.synchronize()
    want = _eager(x_h, mws)
    x_e = cp.asarray(x_h)
    eager_runs = []
    for _ in range(20):
        graph.launch(stream=r)
        with s:
            eager_runs.append(_chain(x_e, mws, pdl=False)[-1])
    r.synchronize()
    s.synchronize()
    assert _same(ys[-1], want[-1])
    assert all(_same(y, want[-1]) for y in eager_runs)


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
def test_torch_graph_of_marlin_layers(monkeypatch, pdl, warm):
    """``torch.cuda.graph`` (global capture mode) around a model of ``MarlinLinear`` layers
    with biases and dropped intermediates; cold: no call before the capture (torch's warm-up
    skipped, so compiling and allocating happen in the capture). Replays equal eager calls and
    leave memory allocated after the capture alone. The layers' ``pdl`` reaches the captured
    launches (``pdl.launch``, which a capture's checked path takes for ``pdl=True`` only): the
    outputs alone would be the same bits without it."""
    from marlin_cupy import pdl as pdl_module
    torch = pytest.importorskip("torch")
    _need_pdl(pdl)
    pdl_launches = []
    real_launch = pdl_module.launch

    def counting(*args, **kwargs):
        pdl_launches.append(args[6] if len(args) > 6 else kwargs.get("pdl", True))
        return real_launch(*args, **kwargs)
    monkeypatch.setattr(pdl_module, "launch", counting)
    rng = np.random.default_rng(41 + warm + 2 * pdl)
    layers = []
    for (k, n, zp, act), mw in zip(LAYERS, _layers(42)):
        bias = rng.standard_normal(n).astype(np.float16)
        layers.append(mc.MarlinLinear(mw, bias=bias, pdl=pdl))

    def model(t):
        for layer in layers:
            t = layer(t)
        return t

    m = 8
    x = torch.zeros((m, LAYERS[0][0]), dtype=torch.float16, device="cuda")
    if warm:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model(x)
        torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    pdl_launches.clear()
    with torch.cuda.graph(g):
        y = model(x)
    torch.cuda.synchronize()
    assert pdl_launches == ([True] * len(layers) if pdl else [])
    sizes = [m * n for _, n, _, _ in LAYERS] * 2
    guards_cp = _nan_blocks(sizes)
    guards_t = [torch.full((sz,), float("nan"), dtype=torch.float16, device="cuda")
                for sz in sizes]
    for trial in range(3):
        x_h = rng.standard_normal((m, LAYERS[0][0])).astype(np.float16)
        x.copy_(torch.from_numpy(x_h).cuda())
        g.replay()
        torch.cuda.synchronize()
        want = model(torch.from_numpy(x_h).cuda())
        torch.cuda.synchronize()
        assert torch.equal(y.view(torch.int16), want.view(torch.int16)), f"replay {trial}"
    assert _all_nan(guards_cp), "a replay wrote into CuPy memory freed after the capture"
    assert all(bool(torch.isnan(t).all()) for t in guards_t), \
        "a replay wrote into torch memory allocated after the capture"
