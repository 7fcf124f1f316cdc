"""``matmul``'s fast path, the parts that need no GPU: the plans' cache retires prepared
launches when it is cleared, and a thread that prepared none takes the checked path."""
import re
import threading
from pathlib import Path

import pytest

from marlin_cupy import ops


def test_clearing_the_plans_retires_prepared_launches():
    before = ops._plan.generation
    ops._plan.cache_clear()
    assert ops._plan.generation == before + 1
    assert ops._plan.cache_info().currsize == 0
    ops.reload_kernels()                 # reloads clear the plans too
    assert ops._plan.generation == before + 2


def test_use_kernel_retires_prepared_launches_on_entry_and_exit(monkeypatch):
    monkeypatch.setattr(ops, "_cupy", lambda: type("cp", (), {"cuda": type("c", (), {
        "Device": lambda: type("d", (), {"id": 0})()})}))
    before = ops._plan.generation
    cfg = type("cfg", (), {"compiled": "t_probe"})()
    with ops.use_kernel(cfg, object()):
        assert ops._plan.generation == before + 1
    assert ops._plan.generation == before + 2


def test_a_thread_without_prepared_launches_takes_the_checked_path():
    got = {}

    def run():
        got["r"] = ops._fast_matmul(object(), object(), None, None, None, None, False, None)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got["r"] is ops._MISS


def test_a_pdl_that_is_not_a_bool_takes_the_checked_path(monkeypatch):
    """A prepared pdl=True launch must not answer pdl="yes" (its key holds bool(pdl)): the
    fast path gives up before it looks at the call, and the checked path raises check_pdl's
    error."""
    def looked(*args):
        raise AssertionError("the fast path went on with pdl='yes'")
    monkeypatch.setattr(ops, "_call_kind", looked)
    got = {}

    def run():
        ops._tls.launches = {"anything": None}
        try:
            got["r"] = ops._fast_matmul(object(), object(), None, None, None, None, "yes", None)
        except AssertionError as e:
            got["r"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got["r"] is ops._MISS


def test_use_kernel_clears_the_locks_after_a_stamping_build(monkeypatch):
    """A MARLIN_PROBE build that stamps its timeline into the locks (``STAMP_PROBES``) leaves
    every workspace zeroed when the block ends (NOTES.md entry 100); other builds do not pay
    for it."""
    monkeypatch.setattr(ops, "_cupy", lambda: type("cp", (), {"cuda": type("c", (), {
        "Device": lambda: type("d", (), {"id": 3})()})}))
    zeroed = []
    monkeypatch.setattr(ops, "_zero_locks", zeroed.append)
    stamping, plain = object(), object()
    monkeypatch.setattr(ops, "stamps_timeline", lambda k: k is stamping)
    cfg = type("cfg", (), {"compiled": "t_probe"})()
    with ops.use_kernel(cfg, plain):
        pass
    assert zeroed == []
    with pytest.raises(KeyError):
        with ops.use_kernel(cfg, stamping):
            raise KeyError("the block failed")
    assert zeroed == [3]


def test_stamp_probes_are_the_kernels_stamping_builds():
    """``ops.STAMP_PROBES`` is the set of MARLIN_PROBE values for which cuda/marlin.cuh defines
    MARLIN_STAMPS, and ``STAMP_INTS`` the ints per CTA it writes (``locks[grid + 16 * cta + i]``)."""
    src = (Path(__file__).resolve().parent.parent / "cuda" / "marlin.cuh").read_text()
    m = re.search(r"#define MARLIN_STAMPS \(([^)]*)\)", src.replace("\\\n", " "))
    assert m, "MARLIN_STAMPS's definition moved"
    assert set(int(v) for v in re.findall(r"MARLIN_PROBE == (\d+)", m.group(1))) == \
        set(ops.STAMP_PROBES)
    assert f"locks[gridDim.x + {ops.STAMP_INTS} * blockIdx.x + i]" in src
    assert f"locks[gridDim.x + {ops.STAMP_INTS} * blockIdx.x + {ops.STAMP_INTS - 1}]" in src


def test_only_stamping_probe_builds_are_flagged():
    assert not ops.stamps_timeline(object())
    assert not ops.stamps_timeline(None)


def test_locks_left_names_the_workspaces_with_non_zero_locks(monkeypatch):
    """``ops.locks_left`` (what conftest.py checks after every GPU test), on host arrays."""
    import contextlib
    import types

    import numpy as np
    shim = types.SimpleNamespace(
        flatnonzero=np.flatnonzero, asnumpy=np.asarray,
        cuda=types.SimpleNamespace(Device=lambda dev=None: contextlib.nullcontext()))
    monkeypatch.setattr(ops, "_cupy", lambda: shim)
    clean = types.SimpleNamespace(locks=np.zeros(300, np.int32))
    dirty = types.SimpleNamespace(locks=np.zeros(3000, np.int32))
    dirty.locks[[128, 129, 2175]] = [7, -1, 124]
    unused = types.SimpleNamespace(locks=None)
    monkeypatch.setattr(ops, "_workspaces", {(0, 0, False): clean, (0, 0x5a, True): dirty,
                                             (1, 0, False): unused})
    assert ops.locks_left() == [(0, 0x5a, True, 3, [128, 129, 2175])]
    assert ops.locks_left(device_id=1) == []
    # The per-thread default stream's workspaces are keyed by (handle, thread): the handle is
    # what is reported.
    ptds = types.SimpleNamespace(locks=np.zeros(8, np.int32))
    ptds.locks[3] = 1
    ops._workspaces[(0, (ops.PER_THREAD_STREAM, 12345), False)] = ptds
    assert (0, ops.PER_THREAD_STREAM, False, 1, [3]) in ops.locks_left()
    ptds.locks[:] = 0
    dirty.locks[:] = 0
    assert ops.locks_left() == []


def test_a_plain_prepared_launch_goes_through_cu_launch_kernel(monkeypatch):
    """The fast path's ``cuLaunchKernel`` call (through a stand-in with the driver's signature,
    a real foreign call) gets the prepared grid, block, shared memory, stream and the current
    argument values; the null stream arrives as NULL."""
    import ctypes

    import numpy as np
    from marlin_cupy import pdl
    seen = {}
    vp, ui = ctypes.c_void_p, ctypes.c_uint
    proto = ctypes.CFUNCTYPE(ctypes.c_int, vp, ui, ui, ui, ui, ui, ui, ui, vp,
                             ctypes.POINTER(ctypes.c_void_p), vp)

    def driver(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        seen["call"] = (f, gx, gy, gz, bx, by, bz, smem, stream,
                        ctypes.cast(params[0], ctypes.POINTER(ctypes.c_int32)).contents.value,
                        extra)
        return 0
    fake = proto(driver)
    monkeypatch.setattr(ops, "_cu_launch_kernel", lambda: fake)
    monkeypatch.setattr(pdl, "_driver", lambda: pytest.fail("a plain launch went through Ex"))
    rec = ops._Launch()
    rec.pdl = False
    rec.launch = pdl.PreparedLaunch(0xabc, 264, 128, (np.int32(1),), 4096, 0, pdl=False)
    rec.launch.holders[0].value = 5
    ops._send(rec)
    assert seen["call"] == (0xabc, 264, 1, 1, 128, 1, 1, 4096, None, 5, None)
