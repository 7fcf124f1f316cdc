"""marlin-cupy: a hackable Marlin INT4 x FP16 GEMM, JIT-compiled through cupy.RawModule.

Importing the package never touches the GPU: CuPy is imported lazily by the modules that
launch kernels, so quantization, packing and format conversion work on any machine.
"""
from .quantize import quantize
from .weights import MarlinWeight, QuantizedWeight

__version__ = "0.1.0"

# Submodules that need CuPy or that are large are resolved on first attribute access.
_LAZY = {
    "pack": ("layout", "pack"),
    "unpack": ("layout", "unpack"),
    "quantize_gptq": ("gptq", "quantize_gptq"),
    "from_gptq": ("formats", "from_gptq"),
    "to_gptq": ("formats", "to_gptq"),
    "from_awq": ("formats", "from_awq"),
    "to_awq": ("formats", "to_awq"),
    "load_gptq_checkpoint": ("formats", "load_gptq_checkpoint"),
    "save_gptq_checkpoint": ("formats", "save_gptq_checkpoint"),
    "load_awq_checkpoint": ("formats", "load_awq_checkpoint"),
    "iter_gptq_checkpoint": ("formats", "iter_gptq_checkpoint"),
    "iter_awq_checkpoint": ("formats", "iter_awq_checkpoint"),
    "save_awq_checkpoint": ("formats", "save_awq_checkpoint"),
    "KernelConfig": ("config", "KernelConfig"),
    "matmul": ("ops", "matmul"),
    "MarlinLinear": ("layers", "MarlinLinear"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'marlin_cupy' has no attribute {name!r}")


__all__ = ["quantize", "QuantizedWeight", "MarlinWeight", *_LAZY]
