"""``MarlinLinear``: a quantized linear layer ``y = x @ W (+ bias)`` on the GPU."""
from __future__ import annotations

import numpy as np

from .config import KernelConfig
from .weights import MarlinWeight, QuantizedWeight


class MarlinLinear:
    """Holds a device-resident ``MarlinWeight`` and an optional fp16 bias.

    ``MarlinLinear.from_float(w [K, N], bias=None, group_size=128)`` quantizes (symmetric
    4-bit, round-to-nearest) and packs; ``MarlinLinear(qw_or_mw, bias)`` wraps existing weights.
    ``pdl=True`` launches with programmatic dependent launch (see ``matmul``'s contract).
    """

    def __init__(self, weight, bias=None, config: KernelConfig | None = None, pdl: bool = False):
        from . import layout
        if isinstance(weight, QuantizedWeight):
            weight = layout.pack(weight)
        if not isinstance(weight, MarlinWeight):
            raise ValueError(f"weight must be a QuantizedWeight or MarlinWeight; got "
                             f"{type(weight).__name__}.")
        if weight.bits != 4:
            raise ValueError(f"MarlinLinear runs 4-bit weights; this weight has bits="
                             f"{weight.bits}. 8-bit weights can be packed and unpacked but the "
                             "kernel does not run them yet.")
        self.weight = weight if weight.on_device else weight.to_device()
        self.config = config
        self.pdl = pdl
        self.bias = None
        if bias is not None:
            import cupy as cp
            b = cp.asarray(bias)
            if b.shape != (weight.n,):
                raise ValueError(f"bias must have shape [N] = [{weight.n}]; got {tuple(b.shape)}.")
            if b.dtype != cp.float16:
                raise ValueError(f"bias must be float16; got {b.dtype}. Cast it explicitly "
                                 f"(bias.astype(numpy.float16)) if that is what you want.")
            self.bias = cp.ascontiguousarray(b)

    @classmethod
    def from_float(cls, w: np.ndarray, bias=None, group_size: int = 128, sym: bool = True,
                   config: KernelConfig | None = None, pdl: bool = False) -> "MarlinLinear":
        from .quantize import quantize
        return cls(quantize(w, bits=4, group_size=group_size, sym=sym), bias, config, pdl)

    @property
    def in_features(self) -> int:
        return self.weight.k

    @property
    def out_features(self) -> int:
        return self.weight.n

    def __call__(self, x, out=None, stream=None):
        """``x @ W (+ bias)``; the bias is added on the stream the matmul ran on (``stream``,
        else torch's current one for torch tensors, else CuPy's), so it is ordered after the
        kernel and is captured with it into a CUDA graph."""
        from .ops import _as_cupy, launch_stream_for, matmul
        # The caller's stream as given: with None, matmul picks the same stream itself, and
        # torch calls take its fast path (which an explicit stream= excludes for torch).
        y = matmul(x, self.weight, out=out, config=self.config, stream=stream, pdl=self.pdl)
        if self.bias is not None:
            import cupy as cp
            with launch_stream_for(x, stream):
                y_cp = _as_cupy(y, "y")
                cp.add(y_cp, self.bias, out=y_cp)
        return y
