"""The GEMMs the benchmark measures side by side, all computing ``y = x @ W`` for one layer.

Each provider takes a ``workload.QuantizedLayer``, makes its rotation copies of the weights in its
own format (``prepare``), and binds a batch of activations (``bind``) to a ``Bound`` whose
``call(i)`` launches one product on weight copy ``i`` on the current stream and whose ``output()``
returns the last product for the correctness gate. ``Skip`` means "cannot run this shape or batch"
(recorded with the reason); any other exception is a failure.

=====================  ======  ==============================================================
name                   format  what runs
=====================  ======  ==============================================================
marlin                 int4    ``marlin_cupy.matmul``, its default dispatch
marlin-config          int4    ``marlin_cupy.matmul(..., config=NAME)`` (``--config NAME``),
                               labelled ``marlin[NAME]``
cublas-fp16            fp16    ``cupy.matmul`` on the fp16 dequantized weights
torch-fp16             fp16    ``torch.matmul`` on the same fp16 weights (shared via DLPack)
naive-dequant-gemm     int4    ``baselines.dequant_matmul``: dequantize kernel, then cuBLAS
naive-fused            int4    ``baselines.fused_matmul``: CUDA-core fused kernel, no pipeline
torch-int4             int4    ``torch.ops.aten._weight_int4pack_mm`` (tinygemm), bf16
marlin-pdl             int4    ``marlin_cupy.matmul(..., pdl=True)``: programmatic dependent
                               launch (cc 9.0+); timed only in chains (``--chain-len``), not
                               in the default list
=====================  ======  ==============================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from . import harness, metrics

#: Default order of the providers (the report's column order).
PROVIDER_NAMES = ("marlin", "cublas-fp16", "torch-fp16", "naive-dequant-gemm", "naive-fused",
                  "torch-int4")
#: Providers that exist but are not in the default list.
EXTRA_PROVIDER_NAMES = ("marlin-pdl",)
ALL_PROVIDER_NAMES = PROVIDER_NAMES + EXTRA_PROVIDER_NAMES
#: The provider name of ``--config NAME`` rows (label ``marlin[NAME]``): ``marlin`` is the
#: default dispatch's alone (DESIGN.md s.8). Records written before it named them ``marlin``.
EXPLICIT_CONFIG_PROVIDER = "marlin-config"
#: naive-fused re-reads the weights for every 16 rows of A; above this batch it only burns budget.
NAIVE_FUSED_MAX_M = 64


class Skip(Exception):
    """The provider cannot run this shape or batch; the message says why."""


@dataclass
class Bound:
    """One provider bound to one batch of activations."""
    call: Callable[[int], None]               # launch one product on weight copy i
    output: Callable[[], object]              # the last product, as a cupy array
    poison: Callable[[], None] = lambda: None  # fill the output with NaN before the gate's call


class Provider:
    name: str = ""
    copies_key: str = ""              # providers with the same key share rotation copies
    precision: str = "fp16"           # of activations and output: decides the gate's tolerance
    max_m: Optional[int] = None
    uses_torch: bool = False
    chains_only: bool = False         # timed only with Timer(chain_len > 0) (see MarlinPDL)

    @property
    def label(self) -> str:
        """Column name in tables and plots (differs from ``name`` for explicit Marlin configs)."""
        return self.name

    @property
    def weight_format(self) -> str:
        return metrics.WEIGHT_FORMAT[self.name]

    @property
    def tolerance(self) -> float:
        return harness.BF16_TOLERANCE if self.precision == "bf16" else harness.FP16_TOLERANCE

    def unavailable_reason(self) -> Optional[str]:
        """``None`` when the provider can run in this process, else why not."""
        return None

    def prepare(self, layer, copies: int) -> None:
        raise NotImplementedError

    def bind(self, x) -> Bound:
        raise NotImplementedError

    def describe(self, m: int) -> dict:
        """Config name, registers and spill bytes of what runs at batch ``m`` (null where n/a)."""
        return {"config": None, "registers": None, "spill_bytes": None}

    def release(self) -> None:
        self.weights = None


def _out_bound(call, out):
    """A ``Bound`` for providers that write into a preallocated fp16 ``out``."""
    import cupy as cp
    return Bound(call=call, output=lambda: out, poison=lambda: out.fill(cp.nan))


def _kernel_resources(function) -> dict:
    return {"registers": int(function.num_regs), "spill_bytes": int(function.local_size_bytes)}


# ---------------------------------------------------------------------------------------------
# Marlin
# ---------------------------------------------------------------------------------------------

class Marlin(Provider):
    """``matmul``'s default dispatch (``marlin``, the only rows DESIGN.md s.8 gives that name),
    or, with ``config``, that explicit config (``marlin-config``, labelled ``marlin[NAME]``)."""
    name = "marlin"
    copies_key = "marlin"

    pdl = False

    def __init__(self, config: Optional[str] = None):
        self.config_name = config
        self.layer = None
        if config is not None:
            self.name = EXPLICIT_CONFIG_PROVIDER

    @property
    def label(self) -> str:
        return self.name if self.config_name is None else f"marlin[{self.config_name}]"

    def unavailable_reason(self):
        try:
            from .. import ops  # noqa: F401
            from ..config import KernelConfig, choose_config  # noqa: F401
        except Exception as e:
            return f"marlin_cupy.ops/config not importable ({type(e).__name__}: {e})"
        return None

    def _config(self):
        if self.config_name is None:
            return None
        from ..config import KernelConfig
        return KernelConfig.from_name(self.config_name)

    def prepare(self, layer, copies):
        self.layer = layer
        try:
            self.weights = layer.copies("marlin", copies, layer.marlin)
        except ValueError as e:      # the Marlin layout cannot hold this shape
            raise Skip(str(e)) from e

    def bind(self, x):
        import cupy as cp
        from .. import ops
        out = cp.empty((x.shape[0], self.layer.n), dtype=cp.float16)
        config = self._config()
        weights = self.weights

        pdl = self.pdl

        def call(i):
            ops.matmul(x, weights[i], out=out, config=config, pdl=pdl)

        try:
            call(0)                  # shape and config checks raise here, before the gate
        except ValueError as e:
            raise Skip(str(e)) from e
        return _out_bound(call, out)

    def describe(self, m):
        from ..ops import kernel_resources, plan
        layer = self.layer
        # The config matmul actually launches (tuned table or heuristic), never a re-derivation:
        # an earlier version asked the heuristic here and recorded a config that had not run.
        p = plan(m, layer.n, layer.k, layer.group_size, False, self._config(), pdl=self.pdl,
                 fma_scales=bool(self.weights[0].fma_scales))
        config = p.config
        # scale_fma: the build with the group scale inside the unpacking ran (NOTES.md entry 87).
        info = {"config": config.name, "scale_fma": p.scale_fma, "registers": None,
                "spill_bytes": None}
        try:
            res = kernel_resources(config, pdl=self.pdl, fma=p.scale_fma)
            info.update(registers=int(res["registers"]), spill_bytes=int(res["spill_bytes"]))
        except Exception:            # resources are a courtesy; the timing stands without them
            pass
        return info


class MarlinPDL(Marlin):
    """``matmul(..., pdl=True)``: each launch may start while the one before is still running
    (NOTES.md entry 30). Its gain only shows in chains of launches, so the sweep times it only
    with ``--chain-len``; it shares the Marlin provider's weight copies."""
    name = "marlin-pdl"
    pdl = True
    chains_only = True

    def unavailable_reason(self):
        reason = super().unavailable_reason()
        if reason is not None:
            return reason
        from ..ops import device_facts
        cc = device_facts()["cc"]
        if int(cc) < 90:
            return f"programmatic dependent launch needs compute capability 9.0+; this is sm_{cc}"
        return None


# ---------------------------------------------------------------------------------------------
# FP16 baselines
# ---------------------------------------------------------------------------------------------

class CublasFP16(Provider):
    name = "cublas-fp16"
    copies_key = "fp16"

    def prepare(self, layer, copies):
        self.layer = layer
        self.weights = layer.copies("fp16", copies, layer.dequantized)

    def bind(self, x):
        import cupy as cp
        out = cp.empty((x.shape[0], self.layer.n), dtype=cp.float16)
        weights = self.weights
        return _out_bound(lambda i: cp.matmul(x, weights[i], out=out), out)


def _torch():
    import torch
    return torch


def _torch_reason():
    try:
        torch = _torch()
    except Exception as e:
        return f"torch is not importable ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


class TorchFP16(Provider):
    """``torch.matmul`` exactly as users call it (no ``out=``): torch picks its own GEMM."""
    name = "torch-fp16"
    copies_key = "fp16"
    uses_torch = True

    def unavailable_reason(self):
        return _torch_reason()

    def prepare(self, layer, copies):
        torch = _torch()
        self.layer = layer
        self.weights = [torch.from_dlpack(w) for w in layer.copies("fp16", copies, layer.dequantized)]

    def bind(self, x):
        import cupy as cp
        torch = _torch()
        xt = torch.from_dlpack(x)
        weights, last = self.weights, {}

        def call(i):
            last["y"] = torch.matmul(xt, weights[i])

        return Bound(call=call, output=lambda: cp.from_dlpack(last["y"]))


# ---------------------------------------------------------------------------------------------
# Naive baselines (marlin_cupy.baselines, cuda/naive.cu)
# ---------------------------------------------------------------------------------------------

def _gptq_copies(layer, copies):
    return layer.copies("gptq", copies, lambda: (layer.gptq(), layer.scales.copy()))


class NaiveDequantGemm(Provider):
    name = "naive-dequant-gemm"
    copies_key = "gptq"

    def prepare(self, layer, copies):
        import cupy as cp
        self.layer = layer
        self.weights = _gptq_copies(layer, copies)
        # One scratch matrix: it is written and then read within each call, as in real use.
        self.scratch = cp.empty((layer.k, layer.n), dtype=cp.float16)

    def bind(self, x):
        import cupy as cp
        from .. import baselines
        out = cp.empty((x.shape[0], self.layer.n), dtype=cp.float16)
        weights, scratch, gs = self.weights, self.scratch, self.layer.group_size

        def call(i):
            q, s = weights[i]
            baselines.dequant_matmul(x, q, s, gs, scratch=scratch, out=out)

        return _out_bound(call, out)

    def describe(self, m):
        from .. import baselines
        info = super().describe(m)
        info.update(_kernel_resources(baselines._module().get_function("naive_dequantize")))
        return info

    def release(self):
        self.weights = self.scratch = None


class NaiveFused(Provider):
    name = "naive-fused"
    copies_key = "gptq"

    def __init__(self, max_m: Optional[int] = NAIVE_FUSED_MAX_M):
        self.max_m = max_m

    def prepare(self, layer, copies):
        self.layer = layer
        self.weights = _gptq_copies(layer, copies)

    def bind(self, x):
        import cupy as cp
        from .. import baselines
        out = cp.empty((x.shape[0], self.layer.n), dtype=cp.float16)
        weights, gs = self.weights, self.layer.group_size

        def call(i):
            q, s = weights[i]
            baselines.fused_matmul(x, q, s, gs, out=out)

        return _out_bound(call, out)

    def describe(self, m):
        from .. import baselines
        info = super().describe(m)
        info.update(_kernel_resources(baselines._module().get_function("naive_fused")))
        return info


# ---------------------------------------------------------------------------------------------
# PyTorch's int4 tinygemm
# ---------------------------------------------------------------------------------------------

TORCH_INT4_GROUP_SIZES = (32, 64, 128, 256)
TORCH_INT4_INNER_K_TILES = 8
#: Ways torch versions have taken the weights and zero points, tried in order on a small problem:
#: (how codes are packed, which float zero turns tinygemm's dequantization into (q - 8) * scale).
TORCH_INT4_CONVENTIONS = tuple((packing, zero) for packing in ("uint8_hi_first", "uint8_lo_first", "int32")
                               for zero in ("zero", "minus_8_scale"))


def _torch_int4_weight(torch, codes_t, packing: str):
    """Codes ``[N, K]`` (uint8 tensor) in the input format of ``_convert_weight_to_int4pack``."""
    if packing == "int32":
        return codes_t.to(torch.int32)
    even, odd = codes_t[:, 0::2], codes_t[:, 1::2]
    pairs = (even << 4) | odd if packing == "uint8_hi_first" else even | (odd << 4)
    return pairs.to(torch.uint8).contiguous()


def _torch_int4_scales_zeros(torch, scales_t, zero: str):
    """``[G, N, 2]`` bf16 (scale, float zero) from fp16 scales ``[G, N]``."""
    s = scales_t.to(torch.bfloat16)
    z = torch.zeros_like(s) if zero == "zero" else -8 * s
    return torch.stack([s, z], dim=-1).contiguous()


class TorchInt4(Provider):
    name = "torch-int4"
    copies_key = "torch-int4"
    precision = "bf16"
    uses_torch = True

    def __init__(self):
        self._conventions = {}       # group size -> convention, or the Skip that the check raised

    def unavailable_reason(self):
        reason = _torch_reason()
        if reason:
            return reason
        aten = _torch().ops.aten
        for op in ("_weight_int4pack_mm", "_convert_weight_to_int4pack"):
            if not hasattr(aten, op):
                return f"torch.ops.aten.{op} does not exist in torch {_torch().__version__}"
        return None

    def _pack(self, codes_kn, scales_gn, convention):
        """``(packed weight, scales_and_zeros)`` for cupy codes ``[K, N]`` and fp16 scales ``[G, N]``."""
        torch = _torch()
        packing, zero = convention
        codes_t = torch.from_dlpack(codes_kn).t().contiguous()                       # [N, K]
        w = torch.ops.aten._convert_weight_to_int4pack(_torch_int4_weight(torch, codes_t, packing),
                                                        TORCH_INT4_INNER_K_TILES)
        return w, _torch_int4_scales_zeros(torch, torch.from_dlpack(scales_gn), zero)

    def convention(self, group_size: int):
        """The (packing, zero) convention under which tinygemm computes ``x @ W`` on a small
        random problem (checked once per group size); ``Skip`` listing every attempt when none does."""
        if group_size not in self._conventions:
            try:
                self._conventions[group_size] = self._find_convention(group_size)
            except Skip as e:
                self._conventions[group_size] = e
        found = self._conventions[group_size]
        if isinstance(found, Skip):
            raise found
        return found

    def _find_convention(self, group_size):
        import cupy as cp
        from .workload import QuantizedLayer
        torch = _torch()
        layer = QuantizedLayer(512, 256, group_size, seed=7)
        x = cp.random.RandomState(7).standard_normal((16, 512), dtype=cp.float32).astype(cp.float16)
        ref = layer.reference(x)
        xb = torch.from_dlpack(x).to(torch.bfloat16)
        tried = []
        for convention in TORCH_INT4_CONVENTIONS:
            try:
                w, sz = self._pack(layer.full_codes(), layer.scales, convention)
                y = torch.ops.aten._weight_int4pack_mm(xb, w, group_size, sz)
                err = harness.relative_error(cp.from_dlpack(y.float()), ref)
            except Exception as e:
                tried.append(f"{convention}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                continue
            if harness.gate_passes(err, self.tolerance):
                return convention
            tried.append(f"{convention}: relative error {err:.3g}")
        raise Skip("no weight packing convention of torch-int4 reproduced x @ W on a 16x512x256 "
                   "check: " + "; ".join(tried))

    def prepare(self, layer, copies):
        if layer.group_size not in TORCH_INT4_GROUP_SIZES:
            raise Skip(f"tinygemm supports group sizes {TORCH_INT4_GROUP_SIZES}, not {layer.group_size}")
        packing, zero = self.convention(layer.group_size)
        torch = _torch()
        self.layer = layer
        codes_t = torch.from_dlpack(layer.codes).t().contiguous()                          # [P, K]
        # Row n of the [N, K] input is code column n % P: repeat the packed tile along N.
        w_in = _torch_int4_weight(torch, codes_t, packing).repeat(layer.n // layer.period, 1)
        try:
            w = torch.ops.aten._convert_weight_to_int4pack(w_in, TORCH_INT4_INNER_K_TILES)
        except RuntimeError as e:    # torch's shape checks (K % 128, N % 8, ...) raise RuntimeError
            raise Skip(f"_convert_weight_to_int4pack refused K={layer.k}, N={layer.n}: "
                       f"{str(e).splitlines()[0]}") from e
        del w_in
        sz = _torch_int4_scales_zeros(torch, torch.from_dlpack(layer.scales), zero)
        self.weights = [(w, sz)] + [(w.clone(), sz.clone()) for _ in range(copies - 1)]

    def describe(self, m):
        info = super().describe(m)
        info["packing"] = "+".join(self.convention(self.layer.group_size))
        return info

    def bind(self, x):
        import cupy as cp
        torch = _torch()
        xb = torch.from_dlpack(x).to(torch.bfloat16)
        weights, gs, last = self.weights, self.layer.group_size, {}

        def call(i):
            w, sz = weights[i]
            last["y"] = torch.ops.aten._weight_int4pack_mm(xb, w, gs, sz)

        return Bound(call=call, output=lambda: cp.from_dlpack(last["y"].float()))


def make_providers(names, configs=(), naive_fused_max_m: Optional[int] = NAIVE_FUSED_MAX_M) -> list:
    """Provider objects for ``names`` (in that order), plus one Marlin per explicit config."""
    classes = {"marlin": Marlin, "cublas-fp16": CublasFP16, "torch-fp16": TorchFP16,
               "naive-dequant-gemm": NaiveDequantGemm, "naive-fused": NaiveFused,
               "torch-int4": TorchInt4, "marlin-pdl": MarlinPDL}
    unknown = [n for n in names if n not in classes]
    if unknown:
        raise ValueError(f"unknown provider(s) {unknown}; choose from "
                         f"{', '.join(ALL_PROVIDER_NAMES)}.")
    out = []
    for n in names:
        out.append(NaiveFused(naive_fused_max_m) if n == "naive-fused" else classes[n]())
        if n == "marlin":
            out += [Marlin(c) for c in configs]
    if configs and "marlin" not in names:
        out = [Marlin(c) for c in configs] + out
    return out
