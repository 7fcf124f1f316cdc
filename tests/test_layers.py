"""``MarlinLinear`` hands its options (``pdl``, ``config``) and the call's (``out``, ``stream``)
to ``matmul``. No GPU needed: ``matmul`` is replaced by a recorder and the weight stays on the
host. (The GPU tests compare the layer's outputs, which are the same bits with and without
PDL: only this check sees a dropped ``pdl=``.)"""
from __future__ import annotations

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy import ops
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
