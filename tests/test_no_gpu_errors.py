"""What a caller sees when a call needs the GPU and none is usable: a RuntimeError that names the
call and the reason (``records.gpu_unavailable_reason``), not CuPy's bare CUDA error; and where a
GPU is usable, the original error unchanged. Runs on any machine: the CUDA failure and the
reason are stood in for."""
import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy import ops, records


class FakeCudaError(Exception):
    """Stands in for ``cupy.cuda.runtime.CUDARuntimeError``."""


def _host_weight():
    w = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    return mc.pack(mc.quantize(w, bits=4, group_size=128))


def _fail_stream(*args, **kwargs):
    raise FakeCudaError("cudaErrorInsufficientDriver")


def test_matmul_without_a_gpu_names_the_call_and_the_reason(monkeypatch):
    pytest.importorskip("cupy")
    monkeypatch.setattr(ops, "launch_stream_for", _fail_stream)
    monkeypatch.setattr(records, "gpu_unavailable_reason", lambda: "CUDA reports 0 devices")
    with pytest.raises(RuntimeError, match=r"marlin_cupy\.matmul needs a usable CUDA GPU.*"
                                           r"CUDA reports 0 devices") as info:
        ops._matmul_checked(np.zeros((1, 128), np.float16), _host_weight(), None, None, None,
                            None, False, None)
    assert isinstance(info.value.__cause__, FakeCudaError)


def test_matmul_with_a_gpu_keeps_the_cuda_error(monkeypatch):
    pytest.importorskip("cupy")
    monkeypatch.setattr(ops, "launch_stream_for", _fail_stream)
    monkeypatch.setattr(records, "gpu_unavailable_reason", lambda: None)
    with pytest.raises(FakeCudaError):
        ops._matmul_checked(np.zeros((1, 128), np.float16), _host_weight(), None, None, None,
                            None, False, None)


def test_a_wrong_weight_type_is_reported_before_any_cuda_call(monkeypatch):
    pytest.importorskip("cupy")
    monkeypatch.setattr(ops, "launch_stream_for", _fail_stream)
    with pytest.raises(ValueError, match="mw must be a MarlinWeight"):
        ops._matmul_checked(np.zeros((1, 128), np.float16), object(), None, None, None, None,
                            False, None)


def test_to_device_without_a_gpu_names_the_call_and_the_reason(monkeypatch):
    cp = pytest.importorskip("cupy")
    monkeypatch.setattr(cp, "asarray", _fail_stream)
    monkeypatch.setattr(records, "gpu_unavailable_reason", lambda: "CUDA reports 0 devices")
    with pytest.raises(RuntimeError, match=r"MarlinWeight\.to_device needs a usable CUDA GPU"):
        _host_weight().to_device()
    monkeypatch.setattr(records, "gpu_unavailable_reason", lambda: None)
    with pytest.raises(FakeCudaError):
        _host_weight().to_device()


def test_raise_if_no_gpu_returns_when_a_gpu_is_usable(monkeypatch):
    monkeypatch.setattr(records, "gpu_unavailable_reason", lambda: None)
    assert records.raise_if_no_gpu("x", ValueError("y")) is None


class NoView:
    """A tensor CuPy cannot view; ``error`` is what CuPy 14.2 raises: TypeError for a CPU
    torch tensor, NotImplementedError for a bfloat16 one (without ml_dtypes)."""
    dtype, device = "torch.bfloat16", "cuda:0"

    def __init__(self, error):
        self.error = error

    def __dlpack__(self, *args, **kwargs):
        raise self.error


@pytest.mark.parametrize("error", [TypeError("CPU tensor"),
                                   NotImplementedError("CuPy does not support bfloat16")])
def test_a_tensor_cupy_cannot_view_is_named_with_what_to_pass(monkeypatch, error):
    cp = pytest.importorskip("cupy")
    monkeypatch.setattr(cp, "from_dlpack", lambda x: x.__dlpack__())
    with pytest.raises(ValueError, match=r"x \(NoView, dtype torch\.bfloat16, device cuda:0\) "
                                         rf"has no CuPy view \({type(error).__name__}: .*\)\. "
                                         r"The kernel takes float16 arrays on the GPU: "
                                         r"x\.astype\(cupy\.float16\) for CuPy, "
                                         r"x\.to\('cuda', torch\.float16\) for torch"):
        ops._as_cupy(NoView(error), "x")
    with pytest.raises(ValueError, match=r"allocate out as a C-contiguous float16 GPU array"):
        ops._as_cupy(NoView(error), "out")


def test_a_cuda_error_is_not_taken_for_a_bad_tensor(monkeypatch):
    cp = pytest.importorskip("cupy")
    monkeypatch.setattr(cp, "from_dlpack", lambda x: x.__dlpack__())
    with pytest.raises(FakeCudaError):
        ops._as_cupy(NoView(FakeCudaError("cudaErrorInsufficientDriver")), "x")


@pytest.mark.parametrize("driver_loaded", [False, True])
def test_no_driver_at_all_is_named(monkeypatch, driver_loaded):
    """With no NVIDIA driver, the CUDA runtime reports an "insufficient" one, which reads as
    an old driver: the reason says what is true."""
    import os
    import sys
    import types

    from marlin_cupy import records

    def count():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient "
                           "for CUDA runtime version")
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=count)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(os.path, "exists", lambda p: driver_loaded and p == "/proc/driver/nvidia")
    reason = records.gpu_unavailable_reason()
    assert reason.startswith("CUDA reports no usable device (RuntimeError: cudaErrorInsufficient")
    assert reason.endswith("no NVIDIA driver is loaded on this machine") != driver_loaded
