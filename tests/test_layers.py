"""``MarlinLinear`` hands its options (``pdl``, ``config``) and the call's (``out``, ``stream``)
to ``matmul``. No GPU needed: ``matmul`` is replaced by a recorder and the weight stays on the
host. (The GPU tests compare the layer's outputs, which are the same bits with and without
PDL: only this check sees a dropped ``pdl=``.)"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy import layers, ops
from marlin_cupy.config import KernelConfig
from marlin_cupy.weights import MarlinWeight

pytest.importorskip("cupy", reason="MarlinLinear's call picks its stream through CuPy "
                                   "(ops.launch_stream_for)")


@pytest.fixture
def matmul_calls(monkeypatch):
    """The keyword arguments of every ``ops.matmul`` call (the recorder returns a marker)."""
    calls = []

    def recorder(x, mw, **kw):
        calls.append(dict(kw, x=x, mw=mw))
        return "y"
    monkeypatch.setattr(ops, "matmul", recorder)
    monkeypatch.setattr(MarlinWeight, "to_device", lambda self: self)   # no GPU: stay on host
    return calls


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
def test_the_layer_passes_pdl_and_its_config_to_matmul(matmul_calls, pdl):
    w = np.random.default_rng(0).standard_normal((256, 128)).astype(np.float32) * 0.02
    cfg = KernelConfig.from_name("t256_m1_n8_k16_s6_g8_fp32par_sw1")
    layer = mc.MarlinLinear.from_float(w, config=cfg, pdl=pdl)
    x, out, stream = object(), object(), object()
    assert layer(x, out=out, stream=stream) == "y"
    assert len(matmul_calls) == 1
    call = matmul_calls[0]
    assert call.get("pdl") is pdl
    assert call.get("config") is cfg
    assert call["x"] is x and call["mw"] is layer.weight
    assert call.get("out") is out and call.get("stream") is stream


def test_without_a_stream_the_layer_leaves_the_choice_to_matmul(matmul_calls, monkeypatch):
    """``stream=None`` reaches ``matmul`` as None: it then picks the stream itself (torch's
    current one for torch tensors) and torch calls may take its fast path, which an explicit
    ``stream=`` excludes for torch. The layer used to pass ``launch_stream_for``'s stream."""
    monkeypatch.setattr(ops, "launch_stream_for", lambda x, stream=None: "the launch stream")
    w = np.random.default_rng(0).standard_normal((256, 128)).astype(np.float32) * 0.02
    layer = mc.MarlinLinear.from_float(w)
    assert layer(object()) == "y"
    assert len(matmul_calls) == 1
    assert matmul_calls[0].get("stream", "missing") is None


class FakeParameter:
    """Stands in for a torch parameter: ``detach``, ``float``, ``cpu`` and ``numpy`` as torch
    spells them, over a NumPy array."""

    def __init__(self, a):
        self.a = np.asarray(a)

    def detach(self):
        return self

    def float(self):
        return FakeParameter(self.a.astype(np.float32))

    def double(self):
        return FakeParameter(self.a.astype(np.float64))

    def cpu(self):
        return self

    def numpy(self):
        return self.a


class FakeLinear:
    def __init__(self, weight, bias=None):
        self.weight, self.bias = weight, bias


@pytest.mark.parametrize("wrap", [FakeParameter, np.asarray], ids=["torch-like", "numpy"])
def test_from_linear_quantizes_the_transpose(matmul_calls, wrap):
    # torch keeps Linear.weight as [out, in]; W is [in, out]. On a square layer passing the
    # weight itself to from_float would run unnoticed with the wrong product.
    w_nk = (np.random.default_rng(1).standard_normal((128, 256)) * 0.02).astype(np.float16)
    layer = mc.MarlinLinear.from_linear(FakeLinear(wrap(w_nk)), group_size=64)
    assert (layer.in_features, layer.out_features) == (256, 128)
    expected = mc.quantize(w_nk.T.astype(np.float32), bits=4, group_size=64, sym=True)
    assert mc.unpack(layer.weight).equals(expected)
    assert layer.bias is None


@pytest.mark.parametrize("wrap", [FakeParameter, np.asarray], ids=["torch-like", "numpy"])
def test_a_hessian_quantizes_with_gptq(matmul_calls, monkeypatch, wrap):
    """``hessian=`` (X^T X of the layer's inputs, [in, in]) turns round-to-nearest into GPTQ,
    ``act_order`` with it; from_linear brings a torch hessian to the host in float64."""
    rng = np.random.default_rng(2)
    w_nk = (rng.standard_normal((128, 256)) * 0.02).astype(np.float32)
    x = rng.standard_normal((512, 16)) @ rng.standard_normal((16, 256))
    h = x.T @ x
    for act_order in (False, True):
        layer = mc.MarlinLinear.from_linear(FakeLinear(wrap(w_nk)), group_size=64,
                                            hessian=wrap(h), act_order=act_order)
        expected = mc.quantize_gptq(w_nk.T, h, group_size=64, act_order=act_order)
        assert mc.unpack(layer.weight).equals(expected)
        assert not expected.equals(mc.quantize(w_nk.T, group_size=64))
    # A float64 torch hessian stays float64 (the weights' float32 conversion would round it).
    seen = []
    gptq = importlib.import_module("marlin_cupy.gptq")
    real = gptq.quantize_gptq
    monkeypatch.setattr(gptq, "quantize_gptq", lambda w, hessian, **kw:
                        seen.append(hessian.dtype) or real(w, hessian, **kw))
    mc.MarlinLinear.from_linear(FakeLinear(wrap(w_nk)), hessian=wrap(h))
    assert seen == [np.float64]
    assert mc.unpack(mc.MarlinLinear.from_float(w_nk.T, hessian=h).weight).equals(
        mc.quantize_gptq(w_nk.T, h))
    for option in ("act_order", "static_groups"):
        with pytest.raises(ValueError, match="act_order and static_groups are GPTQ's"):
            mc.MarlinLinear.from_float(w_nk.T, **{option: True})
    # GPTQ's other options reach it.
    assert mc.unpack(mc.MarlinLinear.from_linear(
        FakeLinear(w_nk), hessian=h, act_order=True, static_groups=True, damp=0.1).weight
    ).equals(mc.quantize_gptq(w_nk.T, h, act_order=True, static_groups=True, damp=0.1))


def test_a_cupy_hessian_comes_to_the_host():
    class CupyLike:
        __cuda_array_interface__ = {}

        def get(self):
            return np.eye(3)
    assert np.array_equal(layers._host_array(CupyLike(), wide=True), np.eye(3))


@pytest.mark.parametrize("linear,match", [
    (object(), "has no weight"),
    (FakeLinear(np.zeros((4, 64, 64), np.float32)), r"weight must be 2-D \[out, in\]"),
    (FakeLinear(np.zeros((64, 64), np.int32)), "weight must hold floats"),
    (FakeLinear(np.zeros((64, 64), np.float32), bias=FakeParameter(np.full(64, 7e4))),
     "bias .*beyond float16's range"),
])
def test_from_linear_refuses(matmul_calls, linear, match):
    with pytest.raises(ValueError, match=match):
        mc.MarlinLinear.from_linear(linear)


@pytest.mark.parametrize("bias,match", [
    (np.zeros(128, np.float32), "bias must be float16; got float32"),
    ([0.0] * 128, "bias must be float16; got float64"),
    (np.zeros(64, np.float16), r"bias must have shape \[N\] = \[128\]; got \(64,\)"),
])
def test_from_float_refuses_a_bias_before_quantizing(matmul_calls, monkeypatch, bias, match):
    """The bias ``__init__`` would refuse is refused before the layer is quantized (on a large
    layer with GPTQ, minutes spent for nothing)."""
    quantize = importlib.import_module("marlin_cupy.quantize")
    monkeypatch.setattr(quantize, "quantize", lambda *a, **kw: pytest.fail("quantized first"))
    w = np.zeros((256, 128), np.float32)
    with pytest.raises(ValueError, match=match):
        mc.MarlinLinear.from_float(w, bias=bias)


class Float64Parameter(FakeParameter):
    dtype = "torch.float64"                       # str() of torch.float64


@pytest.mark.parametrize("wrap", [Float64Parameter, np.asarray], ids=["torch-like", "numpy"])
def test_from_linear_quantizes_a_float64_weight_in_float64(matmul_calls, monkeypatch, wrap):
    """A float64 weight reaches ``quantize`` as float64 (it was rounded to float32 first)."""
    seen = []
    quantize = importlib.import_module("marlin_cupy.quantize")
    real = quantize.quantize
    monkeypatch.setattr(quantize, "quantize", lambda w, **kw: seen.append(w.dtype) or real(w, **kw))
    w_nk = np.random.default_rng(3).standard_normal((128, 256)) * 0.02
    layer = mc.MarlinLinear.from_linear(FakeLinear(wrap(w_nk)), group_size=64)
    assert seen == [np.float64]
    assert mc.unpack(layer.weight).equals(mc.quantize(w_nk.T, bits=4, group_size=64))


class RequiresGradParameter(FakeParameter):
    """A CUDA torch parameter that requires grad: its ``__cuda_array_interface__`` raises
    RuntimeError (not AttributeError, which ``hasattr`` would take as "absent")."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad.")


def test_from_linear_takes_a_parameter_that_requires_grad(matmul_calls):
    """An ``nn.Linear``'s weight on the GPU requires grad; reading it failed on the H100 run of
    the README's example (records 2026-12-05_h200_7acdc66/call1)."""
    w_nk = (np.random.default_rng(4).standard_normal((128, 256)) * 0.02).astype(np.float32)
    layer = mc.MarlinLinear.from_linear(FakeLinear(RequiresGradParameter(w_nk)))
    assert mc.unpack(layer.weight).equals(mc.quantize(w_nk.T, bits=4, group_size=128))
    assert np.array_equal(layers._host_array(RequiresGradParameter(np.ones(3))), np.ones(3))
