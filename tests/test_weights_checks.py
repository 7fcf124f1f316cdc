"""The two weight containers refuse what the packers and the kernels would misread.

``QuantizedWeight`` and ``MarlinWeight`` check every field when they are made (``MarlinWeight``
again when a field is assigned), host (NumPy) and device arrays alike, and raise a ValueError
that names the values and the constraint. ``matmul`` trusts a ``MarlinWeight``: a float32 scale
array or a swapped K/N would be read as other bytes, not refused, if the weight did not refuse
it first. Device arrays are recognised by duck typing, so ``DeviceArray`` below (no CuPy, no
GPU) stands in for a CuPy array.
"""
import subprocess
import sys
from pathlib import Path

import types

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import marlin_cupy as mc
from marlin_cupy import layout
from marlin_cupy.formats import from_gptq, to_gptq
from marlin_cupy.weights import MarlinWeight, QuantizedWeight

SETTINGS = settings(max_examples=30, deadline=None)
ROOT = Path(__file__).resolve().parent.parent
K, N, GROUP = 256, 128, 64          # G = 4 groups


def quantized(bits=4, group_size=GROUP, sym=True, act_order=False, k=K, n=N, seed=0):
    rng = np.random.default_rng(seed)
    g = 1 if group_size == -1 else k // group_size
    q = rng.integers(0, 1 << bits, (k, n), dtype=np.uint8)
    scales = rng.uniform(1e-3, 1e-1, (g, n)).astype(np.float16)
    zeros = None if sym else rng.integers(0, 1 << bits, (g, n), dtype=np.uint8)
    g_idx = (rng.permutation(k) // group_size).astype(np.int32) if act_order else None
    return QuantizedWeight(q, scales, zeros, g_idx, bits, group_size)


def fields(mw):
    return dict(qweight=mw.qweight, scales=mw.scales, zeros=mw.zeros, perm=mw.perm,
                bits=mw.bits, group_size=mw.group_size, k=mw.k, n=mw.n)


class DeviceArray:
    """Stands in for a CuPy array: not a NumPy array, but with its attributes (``shape``,
    ``dtype``, ``flags``, ``astype`` ...), ``data`` (an address, ``ptr``, moved by ``shift``
    bytes, and a ``device_id``) and ``get()`` to copy it to the host."""

    def __init__(self, a, device_id=0, shift=0):
        self._a, self._device_id, self._shift = a, device_id, shift

    def __getattr__(self, name):
        return getattr(self._a, name)

    @property
    def data(self):
        ptr = self._a.__array_interface__["data"][0] // 256 * 256 + 256 + self._shift
        return types.SimpleNamespace(ptr=ptr, device_id=self._device_id)

    def get(self):
        return self._a.copy()


def on_device(f):
    return {key: DeviceArray(v) if isinstance(v, np.ndarray) else v for key, v in f.items()}


# ---------------------------------------------------------------------------------------------
# MarlinWeight
# ---------------------------------------------------------------------------------------------

BAD_MARLIN = [
    (lambda f: {**f, "scales": f["scales"].astype(np.float32)},
     r"scales must be float16 of shape \[G, N\] = \[4, 128\].*dtype=float32"),
    (lambda f: {**f, "k": f["n"], "n": f["k"]},
     r"qweight must be int32 of shape \[K/16, 2N\] = \[8, 512\] \(K=128, N=256, bits=4\); "
     r"got dtype=int32, shape=\[16, 256\]"),
    (lambda f: {**f, "qweight": f["qweight"].T.copy()},
     r"qweight must be int32 of shape \[K/16, 2N\] = \[16, 256\].*shape=\[256, 16\]"),
    (lambda f: {**f, "qweight": f["qweight"].view(np.uint32)}, "qweight must be int32.*uint32"),
    (lambda f: {**f, "group_size": 32},
     r"scales must be float16 of shape \[G, N\] = \[8, 128\] \(G = K / group_size = 256 / 32\)"
     r".*shape=\[4, 128\]"),
    (lambda f: {**f, "perm": np.arange(10, dtype=np.int32)},
     r"perm must be int32 of shape \[K\] = \[256\] or None; got dtype=int32, shape=\[10\]"),
    (lambda f: {**f, "perm": f["perm"].astype(np.int64)}, "perm must be int32.*dtype=int64"),
    (lambda f: {**f, "perm": np.concatenate([f["perm"][:-1], f["perm"][:1]])},
     r"perm must be a permutation of 0\.\.255; row \d+ appears 2 times"),
    (lambda f: {**f, "perm": np.where(f["perm"] == 7, -1, f["perm"]).astype(np.int32)},
     r"perm must be a permutation of 0\.\.255; got values -1\.\.255"),
    (lambda f: {**f, "zeros": np.zeros((4, 128), np.uint8)},
     r"zeros must be int32 of shape \[G, N\*bits/32\] = \[4, 16\] \(bits=4\) or None; "
     r"got dtype=uint8, shape=\[4, 128\]"),
    (lambda f: {**f, "bits": 3}, r"bits=3 is not supported; use one of \(4, 8\)"),
    (lambda f: {**f, "bits": 4.0}, r"bits must be an integer .*got 4\.0 \(float\)"),
    (lambda f: {**f, "group_size": True}, r"group_size must be an integer .*got True \(bool\)"),
    (lambda f: {**f, "group_size": 16}, "group_size=16 is not supported"),
    (lambda f: {**f, "k": 250}, r"K=250 .*multiple of 16"),
    (lambda f: {**f, "n": -64}, "N=-64"),
    (lambda f: {**f, "scales": f["scales"].tolist()}, "scales must be an array .*got list"),
    (lambda f: {**f, "qweight": None}, "qweight must be an array .*got NoneType"),
]


class TestMarlinWeightChecks:
    @pytest.fixture
    def good(self):
        return fields(layout.pack(quantized(sym=False, act_order=True)))

    @pytest.mark.parametrize("change,match", BAD_MARLIN)
    def test_host_arrays_refused(self, good, change, match):
        with pytest.raises(ValueError, match=match):
            MarlinWeight(**change(good))

    @pytest.mark.parametrize("change,match", BAD_MARLIN)
    def test_device_arrays_refused(self, good, change, match):
        with pytest.raises(ValueError, match=match):
            MarlinWeight(**on_device(change(good)))

    def test_device_arrays_accepted(self, good):
        mw = MarlinWeight(**on_device(good))
        assert mw.on_device and mw.fma_scales is False       # zero points: never fused

    def test_host_and_device_arrays_not_mixed(self, good):
        with pytest.raises(ValueError, match="qweight is a device array but scales is a NumPy "
                                             "array"):
            MarlinWeight(**{**good, "qweight": DeviceArray(good["qweight"])})

    @pytest.mark.parametrize("name", ["qweight", "scales", "zeros"])
    def test_misaligned_device_array_refused(self, good, name):
        """The kernel reads qweight, scales and zeros as 16-byte vectors: a view at an offset
        of a larger buffer (a safetensors blob, say) would fault in the kernel."""
        arrays = on_device(good)
        arrays[name] = DeviceArray(good[name], shift=8)
        with pytest.raises(ValueError, match=rf"{name} must start on a 16-byte boundary"):
            MarlinWeight(**arrays)

    @pytest.mark.parametrize("name", ["scales", "zeros"])
    def test_device_arrays_on_two_gpus_refused(self, good, name):
        arrays = on_device(good)
        arrays[name] = DeviceArray(good[name], device_id=1)
        with pytest.raises(ValueError, match=rf"{name} lives on GPU 1 but qweight on GPU 0"):
            MarlinWeight(**arrays)
        mw = MarlinWeight(**on_device(good))
        with pytest.raises(ValueError, match=rf"{name} lives on GPU 1"):
            setattr(mw, name, DeviceArray(good[name], device_id=1))

    def test_empty_device_arrays_hold_no_memory_to_check(self):
        """N = 0: every array is empty (CuPy gives empty arrays no real address), and the
        weight is accepted (matmul then launches nothing)."""
        arrays = dict(qweight=np.zeros((16, 0), np.int32), scales=np.zeros((2, 0), np.float16),
                      zeros=None, perm=None, bits=4, group_size=128, k=256, n=0)
        shifted = {**arrays, "qweight": DeviceArray(arrays["qweight"], shift=8),
                   "scales": DeviceArray(arrays["scales"], device_id=1, shift=2)}
        assert MarlinWeight(**shifted).on_device

    def test_non_contiguous_device_array_refused(self, good):
        wide = np.zeros((good["qweight"].shape[0], 2 * good["qweight"].shape[1]), np.int32)
        strided = wide[:, ::2]
        strided[...] = good["qweight"]
        with pytest.raises(ValueError, match="qweight must be C-contiguous"):
            MarlinWeight(**on_device({**good, "qweight": strided}))

    @SETTINGS
    @given(st.sampled_from([4, 8]), st.sampled_from([32, 64, 128, -1]), st.booleans(),
           st.booleans(), st.integers(0, 2**31 - 1))
    def test_every_packed_weight_passes_and_unpacks(self, bits, group_size, sym, act, seed):
        qw = quantized(bits, group_size, sym, act and group_size != -1, seed=seed)
        mw = layout.pack(qw)
        again = MarlinWeight(**on_device(fields(mw)))
        assert again.fma_scales is mw.fma_scales
        assert layout.unpack(MarlinWeight(**fields(mw))).equals(qw)

    def test_numpy_integers_become_python_ints(self, good):
        mw = MarlinWeight(**{**good, "bits": np.int64(4), "group_size": np.int32(64),
                             "k": np.int64(K), "n": np.uint16(N)})
        assert all(type(v) is int for v in (mw.bits, mw.group_size, mw.k, mw.n))

    def test_assignment_checked_and_refused_without_change(self, good):
        mw = MarlinWeight(**good)
        before = mw.scales
        with pytest.raises(ValueError, match="scales must be float16.*dtype=float32"):
            mw.scales = before.astype(np.float32)
        assert mw.scales is before
        with pytest.raises(ValueError, match=r"perm must be int32 of shape \[K\] = \[256\]"):
            mw.perm = np.arange(10, dtype=np.int32)
        mw.perm = None                                     # a valid change goes through
        assert mw.perm is None

    def test_host_checks_do_not_import_cupy(self):
        code = ("import sys, numpy as np, marlin_cupy as mc\n"
                "mw = mc.pack(mc.quantize(np.ones((128, 64), np.float32)))\n"
                "mw = mc.MarlinWeight(mw.qweight, mw.scales, None, None, 4, 128, 128, 64)\n"
                "mw.scales = mw.scales.copy(); mc.unpack(mw)\n"
                "print(sorted(m for m in sys.modules if m == 'cupy' or m.startswith('cupy.')))")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]", out.stdout


# ---------------------------------------------------------------------------------------------
# QuantizedWeight
# ---------------------------------------------------------------------------------------------

def q_args(**change):
    qw = quantized(sym=False, k=128, n=64)
    return {**dict(q=qw.q, scales=qw.scales, zeros=qw.zeros, g_idx=None, bits=4,
                   group_size=GROUP), **change}


class TestQuantizedWeightChecks:
    @pytest.mark.parametrize("change,match", [
        (dict(group_size=128.0), r"group_size must be an integer .*got 128\.0 \(float\)"),
        (dict(group_size=np.float64(64)), "group_size must be an integer"),
        (dict(group_size=True), r"group_size must be an integer .*got True \(bool\)"),
        (dict(bits=4.0), r"bits must be an integer .*got 4\.0 \(float\)"),
        (dict(bits=np.bool_(True)), "bits must be an integer"),
        (dict(scales=np.ones((2, 64)).tolist()), "scales must be a NumPy array.*got list"),
        (dict(zeros=[[0] * 64] * 2), "zeros must be a NumPy array.*got list"),
    ])
    def test_rejected_with_a_reason(self, change, match):
        with pytest.raises(ValueError, match=match):
            QuantizedWeight(**q_args(**change))

    @SETTINGS
    @given(st.integers(0, 1), st.integers(0, 63), st.sampled_from([np.nan, np.inf, -np.inf]))
    def test_non_finite_scale_refused_with_its_position(self, group, column, bad):
        scales = np.ones((2, 64), np.float16)
        scales[group, column] = bad
        with pytest.raises(ValueError, match=rf"1 non-finite scale\(s\); the first is "
                                             rf"scales\[{group}, {column}\] = {bad}"):
            QuantizedWeight(**q_args(scales=scales))

    def test_zero_scale_accepted_as_the_importers_accept_it(self):
        # A zero scale (a pruned group) dequantizes to 0; from_gptq/from_awq accept it too.
        scales = np.ones((2, 64), np.float16)
        scales[1, 3] = 0
        qw = QuantizedWeight(**q_args(scales=scales))
        assert np.all(qw.dequantize()[64:, 3] == 0)
        assert from_gptq(**to_gptq(qw, "gptq_v2"), sym=False,
                         checkpoint_format="gptq_v2").equals(qw)

    def test_numpy_integers_become_python_ints(self):
        qw = QuantizedWeight(**q_args(bits=np.int64(4), group_size=np.int16(64)))
        assert type(qw.bits) is int and type(qw.group_size) is int


# ---------------------------------------------------------------------------------------------
# What a weight prints as
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sym,act_order,group_size", [(True, False, GROUP), (False, True, GROUP),
                                                      (True, False, -1)])
def test_a_weight_prints_as_a_summary_not_its_arrays(sym, act_order, group_size):
    # The dataclasses' own repr printed every array (thousands of numbers for a real layer).
    qw = quantized(sym=sym, act_order=act_order, group_size=group_size)
    mw = layout.pack(qw)
    summary = (f"K={K}, N={N}, bits=4, group_size={group_size}, sym={sym}, "
               f"act_order={act_order}")
    assert repr(qw) == f"QuantizedWeight({summary})"
    assert repr(mw) == f"MarlinWeight({summary}, fma_scales={mw.fma_scales}, on='host')"
    assert str(mw) == repr(mw)
    # A stand-in device array has no CuPy device id: the place is named without one.
    assert repr(MarlinWeight(**on_device(fields(mw)))).endswith(", on='device')")


# ---------------------------------------------------------------------------------------------
# MarlinLinear
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("packed", [False, True])
def test_marlin_linear_refuses_8_bit_weights_when_made(monkeypatch, packed):
    # Refused before the weight is copied to the GPU, not on the first call.
    monkeypatch.setattr(MarlinWeight, "to_device",
                        lambda self: pytest.fail("the 8-bit weight was copied to the GPU"))
    weight = quantized(bits=8)
    with pytest.raises(ValueError, match="MarlinLinear runs 4-bit weights; this weight has "
                                         "bits=8"):
        mc.MarlinLinear(layout.pack(weight) if packed else weight)
