"""The naive baselines the benchmark measures Marlin against (kernels in ``cuda/naive.cu``).

Both read the weights in a simple layout, GPTQ-style: int32 ``[K/8, N]``, packed along K, least
significant nibble first, with fp16 scales ``[G, N]`` in natural order and one fixed zero point
(8, symmetric 4-bit). ``pack_gptq_codes`` builds that layout from ``QuantizedWeight.q``.

- ``dequant_matmul``: a kernel expands the weights into an fp16 ``[K, N]`` scratch matrix, then
  ``cupy.matmul`` multiplies: the "GPTQ without Marlin" path.
- ``fused_matmul``: one kernel, dequantization fused into a CUDA-core GEMM with no tensor cores and
  no pipeline: what a first attempt would write.

Wrappers check, allocate and launch, nothing else.
"""
from __future__ import annotations

import functools

import numpy as np

from .weights import QuantizedWeight, default_zero

PACK = 8                      # 4-bit codes per int32
DEQUANT_THREADS = 256         # threads per block of naive_dequantize
FUSED_THREADS = 64            # NAIVE_THREADS in naive.cu
FUSED_TILE_M = 16             # NAIVE_TILE_M in naive.cu
MAX_GRID_Y = 65535


def pack_gptq_codes(q):
    """uint8 codes ``[K, N]`` (NumPy or CuPy) -> int32 ``[K/8, N]``, LSB first along K.

    Bits ``4i .. 4i+3`` of ``out[r, n]`` hold ``q[8r + i, n]``. The result lives where ``q`` lives.
    """
    xp = _array_module(q)
    k, n = q.shape
    if k % PACK:
        raise ValueError(f"K={k} is not a multiple of {PACK}; the GPTQ layout packs 8 rows per int32.")
    codes = q.reshape(k // PACK, PACK, n).astype(xp.uint32)           # [K/8, 8, N]
    packed = xp.zeros((k // PACK, n), dtype=xp.uint32)                # [K/8, N]
    for i in range(PACK):
        packed |= codes[:, i, :] << np.uint32(4 * i)                  # [K/8, N]
    return packed.view(xp.int32)                                      # [K/8, N]


def unpack_gptq_codes(qweight):
    """Inverse of ``pack_gptq_codes``: int32 ``[K/8, N]`` -> uint8 ``[K, N]``."""
    xp = _array_module(qweight)
    words = qweight.view(xp.uint32)                                   # [K/8, N]
    shifts = (4 * xp.arange(PACK, dtype=xp.uint32))[None, :, None]    # [1, 8, 1]
    codes = (words[:, None, :] >> shifts) & xp.uint32(0xF)            # [K/8, 8, N]
    return codes.reshape(-1, words.shape[1]).astype(xp.uint8)         # [K, N]


def from_quantized(qw: QuantizedWeight):
    """``(qweight int32 [K/8, N], scales fp16 [G, N])`` on the host for a symmetric 4-bit weight."""
    if qw.bits != 4 or not qw.sym or qw.g_idx is not None:
        raise ValueError(
            f"the naive baselines read symmetric 4-bit weights without act-order; got bits={qw.bits}, "
            f"sym={qw.sym}, act-order={qw.g_idx is not None}. Quantize with bits=4, sym=True.")
    return pack_gptq_codes(qw.q), qw.scales


def _array_module(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


@functools.lru_cache(maxsize=None)
def _source() -> str:
    # Read once per process: re-reading the file on every call would add ~0.2 ms of host time.
    from . import jit
    return jit.expand_source("naive.cu")


def _module():
    from . import jit
    return jit.load_module(_source())


def _check_weights(qweight, scales, group_size):
    """Dtype, contiguity and shape checks of the GPTQ-style weights; returns ``(K, N)``."""
    import cupy as cp
    for name, a, dtype in (("qweight", qweight, cp.int32), ("scales", scales, cp.float16)):
        if not isinstance(a, cp.ndarray) or a.dtype != dtype or a.ndim != 2 or not a.flags.c_contiguous:
            raise ValueError(f"{name} must be a 2-D C-contiguous cupy {np.dtype(dtype).name} array; "
                             f"got {type(a).__name__} dtype={getattr(a, 'dtype', None)}.")
    k, n = qweight.shape[0] * PACK, qweight.shape[1]
    if group_size != -1 and (group_size <= 0 or k % group_size):
        raise ValueError(f"K={k} is not a multiple of group_size={group_size}; use a group size "
                         f"that divides K, or -1 for one group spanning K.")
    groups = 1 if group_size == -1 else k // group_size
    if scales.shape != (groups, n):
        raise ValueError(f"scales must have shape [G, N] = [{groups}, {n}]; got {scales.shape}.")
    return k, n


def _output(out, shape, dims: str):
    """``out`` checked as a C-contiguous fp16 array of ``shape``, or a fresh one."""
    import cupy as cp
    if out is None:
        return cp.empty(shape, dtype=cp.float16)
    if out.shape != shape or out.dtype != cp.float16 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float16 {dims} = {list(shape)} array; got "
                         f"dtype={out.dtype}, shape={out.shape}.")
    return out


def dequantize(qweight, scales, group_size: int, out=None, zero: int = default_zero(4)):
    """fp16 ``[K, N]`` weights from the GPTQ-style layout, on the current CuPy stream."""
    k, n = _check_weights(qweight, scales, group_size)
    out = _output(out, (k, n), "[K, N]")
    grid = ((n + DEQUANT_THREADS - 1) // DEQUANT_THREADS, min(k // PACK, MAX_GRID_Y))
    _module().get_function("naive_dequantize")(
        grid, (DEQUANT_THREADS,),
        (qweight, scales, out, np.int32(k), np.int32(n), np.int32(group_size), np.int32(zero)))
    return out


def dequant_matmul(x, qweight, scales, group_size: int, scratch=None, out=None,
                   zero: int = default_zero(4)):
    """``x @ W``: dequantize W into ``scratch`` (fp16 ``[K, N]``), then ``cupy.matmul``."""
    import cupy as cp
    _check_x(x, qweight)
    w = dequantize(qweight, scales, group_size, out=scratch, zero=zero)
    return cp.matmul(x, w, out=out)


def fused_matmul(x, qweight, scales, group_size: int, out=None, zero: int = default_zero(4)):
    """``x @ W`` with the naive fused kernel (fp32 accumulation, fp16 output)."""
    m, k = _check_x(x, qweight)
    _, n = _check_weights(qweight, scales, group_size)
    out = _output(out, (m, n), "[M, N]")
    grid = ((n + FUSED_THREADS - 1) // FUSED_THREADS, (m + FUSED_TILE_M - 1) // FUSED_TILE_M)
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"M={m} needs {grid[1]} row blocks, more than the grid allows ({MAX_GRID_Y}).")
    _module().get_function("naive_fused")(
        grid, (FUSED_THREADS,),
        (x, qweight, scales, out, np.int32(m), np.int32(k), np.int32(n), np.int32(group_size),
         np.int32(zero)))
    return out


def _check_x(x, qweight):
    import cupy as cp
    if not isinstance(x, cp.ndarray) or x.dtype != cp.float16 or x.ndim != 2 or not x.flags.c_contiguous:
        raise ValueError(f"x must be a C-contiguous cupy float16 [M, K] array; got {type(x).__name__} "
                         f"dtype={getattr(x, 'dtype', None)}, shape={getattr(x, 'shape', None)}.")
    m, k = x.shape
    if k != qweight.shape[0] * PACK:
        raise ValueError(f"x has K={k} columns but qweight holds {qweight.shape[0] * PACK} rows of W.")
    return m, k
