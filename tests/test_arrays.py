"""Arrays on a GPU given to the host-side functions are refused with the way back, also a CUDA
torch tensor that requires grad (an ``nn.Linear``'s weight), whose ``__cuda_array_interface__``
raises RuntimeError rather than AttributeError (the H100 run of 2026-12-05_h100_7acdc66)."""
from __future__ import annotations

import numpy as np
import pytest

import marlin_cupy as mc
from marlin_cupy._arrays import on_gpu


class RequiresGrad:
    """Answers ``__cuda_array_interface__`` as a CUDA torch tensor that requires grad does."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad.")


class OnDevice:
    __cuda_array_interface__ = {}


class CpuTensor:
    """A CPU torch tensor: the attribute is absent (AttributeError)."""

    @property
    def __cuda_array_interface__(self):
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor type")


def test_on_gpu():
    assert on_gpu(OnDevice()) and on_gpu(RequiresGrad())
    assert not on_gpu(CpuTensor()) and not on_gpu(np.zeros(3))


@pytest.mark.parametrize("make", [OnDevice, RequiresGrad], ids=["on-device", "requires-grad"])
def test_host_functions_refuse_gpu_arrays_with_the_way_back(make):
    w = np.zeros((128, 64), np.float32)
    with pytest.raises(ValueError, match="quantize works on host arrays; w is on the GPU"):
        mc.quantize(make())
    with pytest.raises(ValueError, match="quantize_gptq works on host arrays; w is on the GPU"):
        mc.quantize_gptq(make(), np.eye(128))
    with pytest.raises(ValueError, match="quantize_gptq works on host arrays; hessian is on"):
        mc.quantize_gptq(w, make())
    t = mc.to_gptq(mc.quantize(w + 0.01, group_size=64))
    with pytest.raises(ValueError, match="qweight is on the GPU; pass a host array"):
        mc.from_gptq(make(), t["qzeros"], t["scales"], t["g_idx"])
