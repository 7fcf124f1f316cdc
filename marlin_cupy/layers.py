"""``MarlinLinear``: a quantized linear layer ``y = x @ W (+ bias)`` on the GPU."""
from __future__ import annotations

import numpy as np

from .config import KernelConfig
from .weights import MarlinWeight, QuantizedWeight


class MarlinLinear:
    """Holds a device-resident ``MarlinWeight`` and an optional fp16 bias.

    ``MarlinLinear.from_float(w [K, N], bias=None, group_size=128)`` quantizes (4-bit,
    symmetric unless ``sym=False``; round-to-nearest, or GPTQ given ``hessian=``) and packs;
    ``MarlinLinear.from_linear(torch_linear)`` does so with a torch ``nn.Linear``'s transposed
    weight and its bias; ``MarlinLinear(qw_or_mw, bias)`` wraps existing weights.
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
            device = self.weight.qweight.data.device_id
            if isinstance(bias, cp.ndarray) and bias.data.device_id != device:
                raise ValueError(f"bias lives on GPU {bias.data.device_id} but the weight on GPU "
                                 f"{device}; pass it on the weight's GPU, or as a host array.")
            with cp.cuda.Device(device):                 # host biases go to the weight's GPU
                b = cp.asarray(bias)
            _check_bias(b.dtype, b.shape, weight.n)
            self.bias = cp.ascontiguousarray(b)

    @classmethod
    def from_float(cls, w: np.ndarray, bias=None, group_size: int = 128, sym: bool = True,
                   config: KernelConfig | None = None, pdl: bool = False, hessian=None,
                   act_order: bool = False, static_groups: bool = False,
                   damp: float = 0.01) -> "MarlinLinear":
        """Quantizes ``w [K, N]`` to 4 bits: round-to-nearest (``quantize``), or GPTQ
        (``quantize_gptq``) when ``hessian``, ``X^T X`` of the layer's calibration inputs
        ``[K, K]``, is given; ``act_order``, ``static_groups`` and ``damp`` are GPTQ's.
        ``bias`` (``[N]``) must be float16, the output's type: checked before quantizing."""
        _check_bias_early(bias, np.shape(w)[1] if np.ndim(w) == 2 else None)
        if hessian is None:
            if act_order or static_groups:
                raise ValueError("act_order and static_groups are GPTQ's and need the "
                                 "calibration inputs' hessian=X^T X; round-to-nearest has none.")
            from .quantize import quantize
            qw = quantize(w, bits=4, group_size=group_size, sym=sym)
        else:
            from .gptq import quantize_gptq
            qw = quantize_gptq(w, hessian, bits=4, group_size=group_size, sym=sym,
                               act_order=act_order, static_groups=static_groups, damp=damp)
        return cls(qw, bias, config, pdl)

    @classmethod
    def from_linear(cls, linear, group_size: int = 128, sym: bool = True,
                    config: KernelConfig | None = None, pdl: bool = False, hessian=None,
                    act_order: bool = False, static_groups: bool = False,
                    damp: float = 0.01) -> "MarlinLinear":
        """From a torch ``nn.Linear`` (or anything with ``weight`` ``[out, in]`` and ``bias``):
        quantizes ``linear.weight.T``, since torch keeps ``[N, K]`` where this layer's ``W`` is
        ``[K, N]`` (``from_float(linear.weight)`` would be the wrong product, unnoticed on a
        square layer), and keeps the bias as float16, the output's type (a bias beyond
        float16's range is an error). The weight is quantized in its own precision (a torch
        float16 or bfloat16 weight as float32, which holds it exactly). ``hessian`` (``X^T X``
        of the inputs the layer sees, ``[in, in]``; torch, CuPy or NumPy) and the other GPTQ
        options: as in ``from_float``."""
        weight = getattr(linear, "weight", None)
        if weight is None:
            raise ValueError(f"{type(linear).__name__} has no weight; from_linear takes a "
                             f"torch nn.Linear (weight [out_features, in_features]).")
        w = _host_array(weight)
        if w.ndim != 2:
            raise ValueError(f"linear.weight must be 2-D [out, in]; got shape {w.shape}.")
        if not np.issubdtype(w.dtype, np.floating):
            raise ValueError(f"linear.weight must hold floats; got {w.dtype}.")
        bias = getattr(linear, "bias", None)
        if bias is not None:
            b = _host_array(bias)
            if np.issubdtype(b.dtype, np.floating) and np.abs(b).max(initial=0) > 65504:
                raise ValueError(f"linear.bias has values up to {float(np.abs(b).max()):.6g}, "
                                 f"beyond float16's range (65504).")
            bias = b.astype(np.float16)                    # copied to the GPU by __init__
        w_kn = np.ascontiguousarray(w.T)                                        # [K, N]
        return cls.from_float(w_kn, bias, group_size=group_size, sym=sym, config=config,
                              pdl=pdl, hessian=None if hessian is None
                              else _host_array(hessian, wide=True), act_order=act_order,
                              static_groups=static_groups, damp=damp)

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
        import contextlib

        from . import graphs
        from .ops import _as_cupy, launch_stream_for, matmul
        # The caller's stream as given: with None, matmul picks the same stream itself, and
        # torch calls take its fast path (which an explicit stream= excludes for torch).
        y = matmul(x, self.weight, out=out, config=self.config, stream=stream, pdl=self.pdl)
        if self.bias is not None:
            import cupy as cp
            launch_stream = launch_stream_for(x, stream)
            # Under a capture in torch's default (global) mode, loading the add's kernel the
            # first time is forbidden unless this thread relaxes its mode, as matmul does.
            with (graphs.relaxed_capture_mode() if graphs.is_capturing(launch_stream)
                  else contextlib.nullcontext()), launch_stream:
                y_cp = _as_cupy(y, "y")
                cp.add(y_cp, self.bias, out=y_cp)
        return y


def _host_array(t, wide: bool = False) -> np.ndarray:
    """A torch tensor (detached, on the host; floating ones as float32, or float64 if they are
    float64 or ``wide``), a CuPy array (copied to the host), or anything NumPy reads."""
    # torch first: a CUDA tensor that requires grad raises RuntimeError, not AttributeError,
    # from __cuda_array_interface__, which hasattr would let through (an nn.Linear's weight).
    if hasattr(t, "detach"):
        t = t.detach()
        if getattr(t, "is_floating_point", lambda: True)():
            t = t.double() if wide or str(getattr(t, "dtype", "")) == "torch.float64" else t.float()
        return np.asarray(t.cpu().numpy())
    if hasattr(t, "__cuda_array_interface__") and hasattr(t, "get"):
        return t.get()                                                     # CuPy
    return np.asarray(t)


def _check_bias(dtype, shape, n: int) -> None:
    """A bias is ``[N]`` and float16, the output's type (nothing is cast silently)."""
    if tuple(shape) != (n,):
        raise ValueError(f"bias must have shape [N] = [{n}]; got {tuple(shape)}.")
    if dtype != np.float16:
        raise ValueError(f"bias must be float16; got {dtype}. Cast it explicitly "
                         f"(bias.astype(numpy.float16)) if that is what you want.")


def _check_bias_early(bias, n):
    """``__init__``'s bias check, made before ``from_float`` spends the quantization on a layer
    whose bias would be refused (a torch bias is left to ``__init__``: its dtype is not a NumPy
    one; a ``w`` that is not 2-D, ``n`` None, to ``quantize``)."""
    if bias is None or n is None:
        return
    dtype = getattr(bias, "dtype", None)
    try:
        dtype = np.asarray(bias).dtype if dtype is None else np.dtype(dtype)
    except TypeError:
        return
    _check_bias(dtype, np.shape(bias), n)
