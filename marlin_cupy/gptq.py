"""GPTQ: group quantization that compensates each row's rounding error (NumPy, CPU).

``quantize`` rounds every weight to its nearest grid point on its own. GPTQ (Frantar et al.,
"GPTQ: Accurate Post-Training Quantization for Generative Pre-trained Transformers",
arXiv:2210.17323, Algorithm 1) quantizes the input rows of ``W [K, N]`` one at a time and
moves the error each row makes onto the rows not yet quantized, weighted by how the layer's
inputs co-vary, so that the layer's *outputs* ``x @ W`` on calibration inputs change as
little as it can manage. What it needs from the calibration data is ``H = X^T X`` (``X`` the
calibration inputs, ``[samples, K]``); any positive multiple of it gives the same result.

What this module computes, in the orientation ``y = x @ W`` (the paper's columns are our rows):

- An input that never fires (a zero row and column of ``H``) gets the mean of the other
  inputs' ``H[i, i]`` on its diagonal (1 if none fires), and ``H`` is damped,
  ``H + damp * m * I`` with ``m`` that mean, so that every step scales with ``H``. A dead
  input's weights are quantized as they are (the reference implementation sets them to 0; we
  keep them, since the input may fire outside the calibration data), and ``act_order`` takes
  the dead inputs last.
- ``U`` is the upper Cholesky factor of ``H^-1`` (``H^-1 = U^T U``). Row ``i`` (in processing
  order) is quantized with its group's grid, its error ``e = (w_i - dequant(q_i)) / U[i, i]`` is
  recorded, and every later row ``j`` becomes ``w_j - U[i, j] * e``. Rows are processed in blocks
  of 128: inside a block the update is applied row by row, and the block's errors reach the
  rows after it in one matrix product (the paper's lazy batch updates; the same arithmetic).
- A group's scale and zero point are computed, with ``quantize``'s rules (the stored float16
  scale rounded up, symmetric zero ``2**(bits-1)``), from the group's rows as they are when its
  first row is reached, i.e. after the updates of every earlier group. Later rows of the group
  may then fall outside the grid; their codes are clamped, as in the paper.
- ``act_order=True`` processes rows in the order of decreasing ``H[i, i]`` (the inputs with the
  most energy first; "desc_act"). Groups are then consecutive in that order, so the result has
  an act-order ``g_idx``, which the kernel runs through a permutation of the activations.
  ``static_groups=True`` keeps the groups of ``quantize`` instead (consecutive rows in the
  original order, scales from the weights before any update) and only the processing order
  changes, so the result needs no ``g_idx``.
- Output columns never interact, so columns are processed in chunks of about 64 MiB of
  float64 weights. The ``[K, K]`` float64 matrices are not: this module keeps at most two at a
  time and NumPy's LAPACK calls copy them once more, so the peak, the caller's ``H`` aside, is
  about 4 * 8 * K^2 bytes (measured: 4.1 at K = 6144), 26 GB at K = 28672.

With a diagonal ``H`` (inputs that do not co-vary) no error moves, and the result is exactly
``quantize(w, ...)``'s. The cost is about ``7/3 K^3`` operations for ``U`` (a factorization and
a triangular inverse, which NumPy computes as a general one) and ``K^2 * N / 2`` multiply-adds
for the updates, in float64, plus a Python step per input row per chunk of columns: on a
2-core machine 7 s for a 4096 x 4096 layer (3 s of it for ``U``) and 32 s for 8192 x 4096 (the
time grows about linearly with N from there).
"""
from __future__ import annotations

import numpy as np

from ._arrays import on_gpu
from .quantize import _check_inputs, _scale_and_zero, quantize
from .weights import FP16_MAX, QuantizedWeight, check_int, num_groups

# Rows per lazy-update block (a multiple of every supported group size).
BLOCK_ROWS = 128

# Columns per chunk: the chunk's float64 weights stay around 64 MiB.
_CHUNK_ELEMENTS = 1 << 23

# A hessian may differ from its transpose by this much, relative to its largest entry (X^T X
# from a float32 GEMM is not always bitwise symmetric); it is then symmetrized.
_SYMMETRY_TOLERANCE = 1e-5


def quantize_gptq(w, hessian, bits: int = 4, group_size: int = 128, sym: bool = True,
                  act_order: bool = False, static_groups: bool = False,
                  damp: float = 0.01, *, _block_rows: int = BLOCK_ROWS,
                  _chunk_columns: int | None = None) -> QuantizedWeight:
    """GPTQ quantization of ``w`` (float ``[K, N]``, ``y = x @ w``) given ``hessian``.

    ``hessian``: ``X^T X`` of calibration inputs ``X [samples, K]`` (float, ``[K, K]``,
    symmetric, positive semi-definite), summed over batches if you like:
    ``H = sum(x.T.astype(np.float64) @ x for x in batches)``; scaling it changes nothing.
    Inputs that never fire (zero rows and columns) are allowed.
    ``bits``, ``group_size``, ``sym``: as for ``quantize`` (4 or 8; 32, 64, 128 or -1).
    ``act_order``: process the inputs in order of decreasing ``H[i, i]`` (AutoGPTQ's
    ``desc_act``); with groups, the result carries an act-order ``g_idx`` unless
    ``static_groups``. ``static_groups``: the groups and their scales of ``quantize`` (rows in
    their original order), whatever the processing order. ``damp``: the fraction of the mean
    diagonal added to it (AutoGPTQ's ``damp_percent``, 0.01 by default); raise it if ``H`` is
    reported as not positive definite.

    Returns a ``QuantizedWeight`` (checked, as ``quantize``'s). Raises ``ValueError`` for
    everything ``quantize`` refuses, a hessian of the wrong shape, non-finite, not symmetric,
    with a negative diagonal, a zero diagonal entry in a non-zero row, or not positive
    definite after damping, a ``damp`` outside ``[0, 1]``, and weights, updated weights or
    dequantized values beyond float16's range. See the module docstring for the algorithm.
    """
    if on_gpu(w):
        raise ValueError("quantize_gptq works on host arrays; w is on the GPU. Pass w.get() "
                         "(CuPy) or w.cpu().numpy() (PyTorch).")
    bits, group_size = check_int("bits", bits), check_int("group_size", group_size)
    w = _check_inputs(w, bits, group_size, sym, False)
    _check_weight_range(w)
    for name, flag in (("act_order", act_order), ("static_groups", static_groups)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{name} must be a bool; got {flag!r}.")
    if isinstance(damp, (bool, np.bool_)) or not isinstance(damp, (int, float, np.floating,
                                                                  np.integer)) \
            or not 0.0 <= float(damp) <= 1.0:
        raise ValueError(f"damp must be a number in [0, 1] (a fraction of the mean of H's "
                         f"diagonal; 0.01 is usual); got {damp!r}.")
    k, n = w.shape
    group_rows = k if group_size == -1 else group_size
    if group_size != -1 and _block_rows % group_size:
        raise ValueError(f"_block_rows={_block_rows} must be a multiple of group_size="
                         f"{group_size}.")
    h, dead = _prepared_hessian(hessian, k, float(damp))
    if act_order:
        # Decreasing H[i, i], dead inputs last (lexsort: the last key first; stable).
        order = np.lexsort((-np.diag(h), dead))                            # [K] processing order
        h = h[np.ix_(order, order)]
    else:
        order = np.arange(k)
    u = _inverse_cholesky(h)                                               # [K, K] upper
    del h                                                                  # now C: not needed

    g = num_groups(k, group_size)
    q = np.empty((k, n), dtype=np.uint8)
    scales = np.empty((g, n), dtype=np.float16)
    zeros = None if sym else np.empty((g, n), dtype=np.uint8)
    if static_groups:
        # The groups and grids of round-to-nearest, fixed before any update.
        fixed = quantize(w, bits=bits, group_size=group_size, sym=sym)
        scales[:] = fixed.scales
        if zeros is not None:
            zeros[:] = fixed.zeros
        row_group = (np.zeros(k, np.int64) if group_size == -1
                     else np.arange(k) // group_size)[order]               # [K] by position
    else:
        row_group = np.arange(k) // group_rows                              # [K] by position

    chunk = _chunk_columns or max(1, _CHUNK_ELEMENTS // k)
    for start in range(0, n, chunk):
        cols = slice(start, min(n, start + chunk))
        w_chunk = w[order, cols].astype(np.float64)                         # [K, n_chunk]
        q_chunk = _gptq_columns(w_chunk, u, bits, sym, group_rows, row_group, static_groups,
                                scales[:, cols], None if zeros is None else zeros[:, cols],
                                _block_rows, col0=start)
        q[order, cols] = q_chunk

    g_idx = None
    if act_order and not static_groups and group_size != -1:
        g_idx = np.empty(k, dtype=np.int32)
        g_idx[order] = row_group                                           # original row -> group
    # The constructor refuses a dequantized value beyond float16's range (a compensated row's
    # code clamped to the grid's end, or a scale rounded up near the limit).
    return QuantizedWeight(q=q, scales=scales, zeros=zeros, g_idx=g_idx, bits=bits,
                           group_size=group_size)


def _check_weight_range(w: np.ndarray) -> None:
    """Raise if a weight is beyond float16's range before any update (after updates, the
    groups' own check names the compensation as the cause)."""
    top = np.abs(w).max(axis=0)                                            # [N]
    if (top > FP16_MAX).any():
        c = int(np.argmax(top))
        r = int(np.argmax(np.abs(w[:, c])))
        raise ValueError(f"w[{r}, {c}] = {float(w[r, c]):.6g} is beyond the float16 maximum "
                         f"{FP16_MAX:.0f}; its dequantized weights would be inf in the kernels. "
                         "Rescale the weights (e.g. fold a factor into the previous layer) "
                         "before quantizing.")


def _prepared_hessian(hessian, k: int, damp: float):
    """``hessian`` checked and damped, float64 ``[K, K]`` (a fresh array), and the dead
    inputs, bool ``[K]``."""
    if on_gpu(hessian):
        raise ValueError("quantize_gptq works on host arrays; hessian is on the GPU. Pass "
                         "hessian.get() (CuPy) or hessian.cpu().numpy() (PyTorch).")
    h = np.asarray(hessian)
    if h.shape != (k, k):
        raise ValueError(f"hessian must be [K, K] = [{k}, {k}] (X^T X of the layer's "
                         f"calibration inputs X [samples, K]); got shape {h.shape}.")
    if not np.issubdtype(h.dtype, np.floating):
        raise ValueError(f"hessian must hold floats; got dtype={h.dtype}. Compute it as "
                         "x.T.astype(np.float64) @ x.")
    h = h.astype(np.float64)                                               # a copy
    if not np.isfinite(h).all():
        raise ValueError(f"hessian holds {int(np.count_nonzero(~np.isfinite(h)))} non-finite "
                         "value(s); the calibration inputs overflowed or held NaN/inf.")
    top = float(np.abs(h).max(initial=0.0))
    diff = h - h.T
    np.abs(diff, out=diff)
    asym = float(diff.max(initial=0.0))
    del diff
    if asym > _SYMMETRY_TOLERANCE * top:
        raise ValueError(f"hessian is not symmetric: |H - H^T| reaches {asym:.3g} against "
                         f"max|H| = {top:.3g}. Pass X^T X (not X^T Y or a slice of it).")
    h += h.T                                         # NumPy buffers the overlapping operand
    h *= 0.5
    diag = np.diag(h).copy()
    if (diag < 0).any():
        i = int(np.argmin(diag))
        raise ValueError(f"hessian has a negative diagonal entry H[{i}, {i}] = {diag[i]:.6g}; "
                         "X^T X has none. Pass X^T X of the calibration inputs.")
    dead = diag == 0                                                       # inputs never fired
    bad = dead & (np.abs(h).max(axis=1) > 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"hessian has H[{i}, {i}] = 0 but non-zero entries in row {i}; "
                             "X^T X has none (it is not positive semi-definite). Pass X^T X "
                             "of the calibration inputs.")
    mean = float(np.mean(diag[~dead])) if (~dead).any() else 1.0
    diag[dead] = mean
    diag += damp * mean
    h[np.diag_indices(k)] = diag
    return h, dead


def _inverse_cholesky(h: np.ndarray) -> np.ndarray:
    """Upper ``U`` with ``h^-1 = U^T U`` (float64), or ValueError if ``h`` is not positive
    definite. ``h`` must be the caller's own scratch: it is overwritten with ``C``, so that no
    third ``[K, K]`` array is needed.

    With ``J`` the reversal of the index order and ``J h J = C C^T`` (Cholesky, ``C`` lower),
    ``h = A A^T`` for the upper ``A = J C J``, so ``h^-1 = A^-T A^-1`` and ``U = A^-1 =
    J C^-1 J``: one factorization and one triangular inverse, where the textbook route
    factors ``h``, forms ``h^-1`` and factors that."""
    try:
        h[:] = np.linalg.cholesky(h[::-1, ::-1])                            # C, in h's memory
    except np.linalg.LinAlgError:
        raise ValueError("hessian is not positive definite after damping; raise damp "
                         "(e.g. 0.1), or collect more calibration samples than inputs K.") from None
    return np.linalg.inv(h)[::-1, ::-1]                                    # a view: no copy


def _gptq_columns(w, u, bits, sym, group_rows, row_group, static_groups, scales, zeros,
                  block_rows, col0):
    """Quantize one chunk of columns, ``w`` float64 ``[K, n]`` in processing order, in place.

    ``scales`` / ``zeros``: the chunk's float16 / uint8 ``[G, n]`` views, read when
    ``static_groups`` and written otherwise. Returns the codes, uint8 ``[K, n]`` in processing
    order.
    """
    k, n = w.shape
    maxq = (1 << bits) - 1
    q = np.empty((k, n), dtype=np.uint8)
    if static_groups:
        s_all = scales.astype(np.float64)                                  # [G, n]
        z_all = (np.full(s_all.shape, float(1 << (bits - 1))) if zeros is None
                 else zeros.astype(np.float64))
    s = z = None
    for b0 in range(0, k, block_rows):
        b1 = min(k, b0 + block_rows)
        err = np.empty((b1 - b0, n))                                       # [rows, n]
        for i in range(b0, b1):
            grp = int(row_group[i])
            if static_groups:
                s, z = s_all[grp], z_all[grp]
            elif i % group_rows == 0:
                s, z = _group_grid(w[i:i + group_rows], bits, sym, grp, col0, scales, zeros)
            row = w[i]
            code = np.clip(np.rint(row / s) + z, 0, maxq)                  # [n]
            q[i] = code
            e = (row - (code - z) * s) / u[i, i]                           # [n]
            err[i - b0] = e
            if i + 1 < b1:
                w[i + 1:b1] -= np.outer(u[i, i + 1:b1], e)
        if b1 < k:
            w[b1:] -= u[b0:b1, b1:].T @ err
    return q


def _group_grid(rows, bits, sym, grp, col0, scales, zeros):
    """The grid of one group from its current rows (float64 ``[S, n]``): stores the float16
    scale and the zero point in ``scales[grp]`` / ``zeros[grp]`` and returns them as float64
    ``[n]`` vectors."""
    if sym:
        lo, hi = None, np.max(np.abs(rows), axis=0)[None]                  # [1, n]
    else:
        lo = np.minimum(np.min(rows, axis=0), 0.0)[None]                   # [1, n]
        hi = np.maximum(np.max(rows, axis=0), 0.0)[None]
    top = hi[0] if sym else np.maximum(hi[0], -lo[0])                      # [n]
    if (top > FP16_MAX).any():
        c = int(np.argmax(top))
        raise ValueError(f"group {grp} of column {col0 + c} reaches max|w| = {top[c]:.6g} after "
                         f"the error compensation of the rows before it (group numbers count "
                         f"in processing order), beyond the float16 "
                         f"maximum {FP16_MAX:.0f}; the kernels would compute inf. Rescale the "
                         "weights down (e.g. fold a factor into the previous layer), or raise "
                         "damp, before quantizing.")
    scale, zero = _scale_and_zero(lo, hi, 1.0, bits, sym)                  # [1, n] each
    scales[grp] = scale[0]
    if zeros is not None:
        zeros[grp] = zero[0].astype(np.uint8)
    return scale[0].astype(np.float64), zero[0]
