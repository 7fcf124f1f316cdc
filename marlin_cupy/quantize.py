"""Float weights -> integer codes: round-to-nearest group quantization (NumPy, CPU).

``quantize(w)`` turns a float ``[K, N]`` weight into a ``QuantizedWeight``: one float16 scale
(and, for the asymmetric types, one zero point) per group of ``group_size`` consecutive input
rows and per output column, and one unsigned code per weight. Dequantization is
``(q - zero) * scale`` (``QuantizedWeight.dequantize``).

Conventions, chosen so that the error bound below holds against what is *stored*:

- **The stored scale is rounded up to float16.** The ideal scale ``x`` (see below) is rounded
  to the nearest float16 and, when that is below ``x``, moved to the next float16 up. Codes are
  computed against this stored scale, so the codes address the grid ``(q - zero) * scale`` of
  the scale the kernel reads, and because the stored scale is never smaller than the ideal
  one, no value of the group falls outside the grid: codes are never clamped when
  ``clip_search`` is off. (Kernels that scale the unpacked weights in float16, rather than
  their float32 sums, round each product ``(q - zero) * scale`` to float16 as well: up to
  half a float16 ulp of it, 2^-11 relative, on top of the bound below.)
- **Symmetric** (``sym=True``, types "uint4b8" / "uint8b128"): the zero point is fixed at
  ``2**(bits-1)`` (8 or 128), ``x = max|w| / (2**(bits-1) - 1)`` (``/7`` or ``/127``), so codes
  span ``1 .. 2**bits - 1`` and the most negative code 0 is left unused: this project's choice,
  which keeps ``+max|w|`` on the grid (other quantizers use all codes and clamp one end).
- **Asymmetric** (``sym=False``): the range ``[lo, hi]`` is the group's ``[min, max]`` widened to
  contain 0 (as GPTQ does), ``x = (hi - lo) / (2**bits - 1)`` and ``zero = round(-lo / scale)``.
  Because the range contains 0, the zero point always lies in ``0 .. 2**bits - 1`` and 0.0 is
  represented exactly.
- **All-zero groups** (``x == 0``) get scale 1.0: any positive scale dequantizes them exactly,
  and 1.0 avoids storing a subnormal. A tiny but non-zero group gets the smallest float16 that
  is not below ``x`` (possibly subnormal), never 0, so no scale is ever 0 or NaN.

**Error bound without clipping:** ``|w - dequant| <= scale / 2`` for every element, for both
types. Symmetric: ``|w / scale| <= 2**(bits-1) - 1``, so rounding never leaves the code range.
Asymmetric: with ``z = round(-lo/scale)``, the grid ``(q - z) * scale, q = 0 .. 2**bits - 1``
runs from ``lo - (z + lo/scale) * scale >= lo - scale/2`` to a point ``>= hi - scale/2``, so
every value of ``[lo, hi]`` is within half a step of a grid point: the rounding of the zero
point shifts the grid but never pushes a value off it.

**Clip search** (``clip_search=True``) shrinks the range by each factor of ``CLIP_FACTORS``
(1.0 first) and keeps, per group and column, the scale and zero with the least squared error
of the dequantized group; clamping of codes is then intended (outliers are traded for a finer
grid). Ties keep the earlier, larger factor, so the result is never worse than no clipping.
"""
from __future__ import annotations

import numpy as np

from ._arrays import on_gpu
from .weights import (FP16_MAX, SUPPORTED_BITS, SUPPORTED_GROUP_SIZES, QuantizedWeight,
                      check_int, default_zero, num_groups)

# Range shrink factors tried by clip_search; 1.0 (no clipping) must come first so that ties
# keep the unclipped result.
CLIP_FACTORS = tuple(round(1.0 - 0.05 * i, 2) for i in range(11))   # 1.0, 0.95, ..., 0.5

# Scale stored for a group whose values are all zero (any positive scale is exact there).
ZERO_GROUP_SCALE = 1.0

# Column blocks are sized so that one block's float64 temporaries stay around 32 MiB, which
# keeps quantizing a 8192 x 57344 layer from needing many GiB of scratch memory.
_BLOCK_ELEMENTS = 1 << 22


def quantize(w, bits: int = 4, group_size: int = 128, sym: bool = True,
             clip_search: bool = False) -> QuantizedWeight:
    """Round-to-nearest group quantization of ``w`` (float ``[K, N]``, ``y = x @ w``).

    ``bits``: 4 or 8. ``group_size``: 32, 64, 128, or -1 for one group spanning all of K (one
    scale per output channel); groups run along K, separately for every output column.
    ``sym``: fixed zero point ``2**(bits-1)`` (``zeros=None`` in the result) or per-group zero
    points. ``clip_search``: search range shrink factors per group for least squared error.
    See the module docstring for the exact conventions and the error bound they guarantee.

    Raises ``ValueError`` for non-float or non-2-D input, non-finite values, ``bits`` or
    ``group_size`` that are not supported integers (``128.0`` and ``True`` are refused), K not
    a multiple of ``group_size``, and weights beyond float16's range: ``max|w| > 65504``, or a
    dequantized value ``(q - zero) * scale`` past 65504 (the kernels dequantize to float16;
    with the scale rounded up, ``w = 65504`` itself dequantizes to 65520, which is inf there).
    Nothing is cast or clipped silently.
    """
    bits, group_size = check_int("bits", bits), check_int("group_size", group_size)
    w = _check_inputs(w, bits, group_size, sym, clip_search)
    k, n = w.shape
    g = num_groups(k, group_size)
    q = np.empty((k, n), dtype=np.uint8)
    scales = np.empty((g, n), dtype=np.float16)
    zeros = None if sym else np.empty((g, n), dtype=np.uint8)

    block = max(1, _BLOCK_ELEMENTS // k)
    for start in range(0, n, block):
        cols = slice(start, min(n, start + block))
        w_blk = w[:, cols].astype(np.float64).reshape(g, k // g, -1)      # [G, S, n_blk]
        q_blk, s_blk, z_blk = _quantize_groups(w_blk, bits, sym, clip_search, col0=start)
        q[:, cols] = q_blk.reshape(k, -1)                                 # [K, n_blk]
        scales[:, cols] = s_blk                                           # [G, n_blk]
        if zeros is not None:
            zeros[:, cols] = z_blk                                        # [G, n_blk]
    return QuantizedWeight(q=q, scales=scales, zeros=zeros, g_idx=None, bits=bits,
                           group_size=group_size)


def _check_inputs(w, bits, group_size, sym, clip_search) -> np.ndarray:
    """Validate every argument; return ``w`` as a NumPy array in its own float dtype."""
    if on_gpu(w):
        raise ValueError("quantize works on host arrays; w is on the GPU. Pass w.get() "
                         "(CuPy) or w.cpu().numpy() (PyTorch).")
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits={bits!r} is not supported; use one of {SUPPORTED_BITS}.")
    if group_size not in SUPPORTED_GROUP_SIZES:
        raise ValueError(f"group_size={group_size!r} is not supported; use one of "
                         f"{SUPPORTED_GROUP_SIZES} (-1 means one scale per output channel).")
    if not isinstance(sym, (bool, np.bool_)) or not isinstance(clip_search, (bool, np.bool_)):
        raise ValueError(f"sym and clip_search must be bools; got sym={sym!r}, "
                         f"clip_search={clip_search!r}.")
    w = np.asarray(w)
    if w.dtype not in (np.float16, np.float32, np.float64):
        raise ValueError(f"w must be float16, float32 or float64; got dtype={w.dtype}. "
                         "Integer or other weights are not cast implicitly: convert them "
                         "yourself (e.g. w.astype(np.float32)) if that is what you mean.")
    if w.ndim != 2:
        raise ValueError(f"w must be 2-D [K, N] (K = in_features, N = out_features); got "
                         f"shape={w.shape}.")
    k, n = w.shape
    if k == 0 or n == 0:
        raise ValueError(f"w has shape {w.shape}; K and N must both be at least 1.")
    if group_size != -1 and k % group_size:
        raise ValueError(f"K={k} is not a multiple of group_size={group_size}; pad the input "
                         "dimension or choose a group size that divides K (or -1).")
    _check_finite(w)
    return w


def _check_finite(w: np.ndarray) -> None:
    """Raise if ``w`` holds NaN or inf, saying how many and where the first one (row-major) is."""
    k, n = w.shape
    block = max(1, _BLOCK_ELEMENTS // n)
    count, first = 0, None
    for start in range(0, k, block):
        bad = ~np.isfinite(w[start:start + block])                        # [rows, N]
        c = int(np.count_nonzero(bad))
        if c:
            if first is None:
                r, col = np.unravel_index(int(np.argmax(bad)), bad.shape)
                first = (start + int(r), int(col))
            count += c
    if count:
        raise ValueError(f"w holds {count} non-finite value(s) (NaN or inf); the first is "
                         f"w[{first[0]}, {first[1]}] = {w[first]}. Quantization needs finite "
                         "weights: fix or mask them before quantizing.")


def _round_up_fp16(x: np.ndarray) -> np.ndarray:
    """The smallest float16 >= ``x`` (elementwise, ``x >= 0``); ``inf`` past the float16 range."""
    with np.errstate(over="ignore"):
        s = x.astype(np.float16)
    below = s.astype(np.float64) < x
    s[below] = np.nextafter(s[below], np.float16(np.inf))
    return s


def _scale_and_zero(lo, hi, factor, bits, sym):
    """Stored scale (float16 ``[G, n]``) and zero point (float64 ``[G, n]``) of a range.

    Symmetric: ``hi`` is max|w| and the zero is the fixed ``2**(bits-1)``. Asymmetric:
    ``[lo, hi]`` contains 0. ``factor`` shrinks the range (clip search; 1.0 = none).
    """
    if sym:
        ideal = factor * hi / (default_zero(bits) - 1)                   # [G, n]
    else:
        ideal = (factor * hi - factor * lo) / ((1 << bits) - 1)          # [G, n]
    scale = _round_up_fp16(ideal)
    scale[ideal == 0] = ZERO_GROUP_SCALE
    if sym:
        zero = np.full(scale.shape, float(default_zero(bits)))
    else:
        # -lo <= hi - lo <= maxq * scale, so the clip below only guards float rounding.
        zero = np.clip(np.rint(-factor * lo / scale.astype(np.float64)), 0, (1 << bits) - 1)
    return scale, zero


def _codes(w_blk, scale, zero, bits):
    """Codes ``clip(round(w / scale) + zero)`` (float64 ``[G, S, n]``) and their squared error."""
    s = scale.astype(np.float64)[:, None, :]                               # [G, 1, n]
    z = zero[:, None, :]                                                   # [G, 1, n]
    q = np.clip(np.rint(w_blk / s) + z, 0, (1 << bits) - 1)               # [G, S, n]
    err = np.sum(np.square(w_blk - (q - z) * s), axis=1)                   # [G, n]
    return q, err


def _quantize_groups(w_blk, bits, sym, clip_search, col0):
    """Quantize one block of columns, ``w_blk`` float64 ``[G, S, n]`` (groups, rows, columns).

    Returns codes uint8 ``[G, S, n]``, scales float16 ``[G, n]``, zeros uint8 ``[G, n]``.
    """
    if sym:
        lo, hi = None, np.max(np.abs(w_blk), axis=1)                       # [G, n]
    else:
        lo = np.minimum(np.min(w_blk, axis=1), 0.0)                        # [G, n]
        hi = np.maximum(np.max(w_blk, axis=1), 0.0)                        # [G, n]
    _check_scale_range(lo, hi, sym, col0)
    scale, zero = _scale_and_zero(lo, hi, 1.0, bits, sym)
    q, err = _codes(w_blk, scale, zero, bits)
    if clip_search:
        for factor in CLIP_FACTORS[1:]:
            s_f, z_f = _scale_and_zero(lo, hi, factor, bits, sym)
            q_f, err_f = _codes(w_blk, s_f, z_f, bits)
            better = err_f < err                                           # [G, n]
            scale = np.where(better, s_f, scale)
            zero = np.where(better, z_f, zero)
            q = np.where(better[:, None, :], q_f, q)
            err = np.minimum(err, err_f)
    _check_dequantized_range(q, scale, zero, lo, hi, sym, col0)
    return q.astype(np.uint8), scale, zero.astype(np.uint8)


def _largest_weight(lo, hi, sym):
    """max|w| of every group, float64 ``[G, n]`` (``hi`` is max|w| for the symmetric types)."""
    return hi if sym else np.maximum(hi, -lo)


def _check_scale_range(lo, hi, sym, col0):
    """Raise if a group holds a weight beyond the float16 maximum 65504 (the kernels' float16
    weights could not hold it, and its scale or dequantized values would overflow)."""
    top = _largest_weight(lo, hi, sym)                                     # [G, n]
    bad = top > FP16_MAX
    if not bad.any():
        return
    g, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
    raise ValueError(f"group {g} of column {col0 + c} has max|w| = {top[g, c]:.6g}, beyond the "
                     f"float16 maximum {FP16_MAX:.0f} ({int(bad.sum())} such group(s) among "
                     f"columns {col0}..{col0 + bad.shape[1] - 1}); its dequantized weights "
                     "would be inf in the kernels. Rescale the weights (e.g. fold a factor into "
                     "the previous layer) before quantizing.")


def _check_dequantized_range(q, scale, zero, lo, hi, sym, col0):
    """Raise if a dequantized value ``(q - zero) * scale`` is beyond the float16 maximum: the
    scale is rounded up and the grid may reach past max|w|, e.g. ``w = 65504`` (symmetric
    4-bit: scale 9360, 7 * 9360 = 65520, inf in float16)."""
    s = scale.astype(np.float64)[:, None, :]                               # [G, 1, n]
    deq = np.max(np.abs((q - zero[:, None, :]) * s), axis=1)               # [G, n]
    bad = deq > FP16_MAX
    if not bad.any():
        return
    g, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
    top = _largest_weight(lo, hi, sym)
    raise ValueError(f"group {g} of column {col0 + c} has max|w| = {top[g, c]:.6g}, but with "
                     f"its scale {float(scale[g, c]):.6g} (rounded up to float16) a dequantized "
                     f"value {deq[g, c]:.6g} is beyond the float16 maximum {FP16_MAX:.0f} "
                     f"({int(bad.sum())} such group(s) among columns {col0}.."
                     f"{col0 + bad.shape[1] - 1}): the kernels would compute inf. Rescale the "
                     "weights slightly down (e.g. fold a factor into the previous layer) before "
                     "quantizing.")
