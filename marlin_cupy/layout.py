"""Codes <-> the Marlin tiled layout (bit-compatible with the established Marlin format).

Facts of the format: shared/research/marlin_facts.md s.1.6 and s.3.3. In words:

* Weights. ``q [K, N]`` is cut into 16x16 tiles; each 16-row strip of K becomes one row of
  ``qweight`` holding its tiles along N, each tile row-major. Every run of four tiles (a 16x64
  block) is then reordered so that warp lane ``l`` finds, contiguously, exactly the elements it
  needs as the B operand of ``mma.m16n8k16``: for each of the 4 tiles and both 8-column halves,
  rows ``2t, 2t+1, 2t+8, 2t+9`` (``t = l % 4``) of column ``l // 4``. Each group of 8 (4-bit)
  or 4 (8-bit) values is interleaved so that the ``lop3`` dequantization yields half2 pairs in
  fragment order, and packed LSB-first into int32. One 16-byte load per lane then fetches a
  whole 16x64 block for the warp (4-bit).
* Group scales. Within each 64 columns, ``s_perm[8i + j] = s[i + 8j]``: lane ``l`` reads its 8
  scales (columns ``l//4 + 8j``) as one 16-byte load.
* Per-channel scales (group_size -1 or a single group spanning K) use a 32-column permutation
  matched to the accumulator layout instead: ``s_perm[8i + j] = s[2i + (0,1,8,9,16,17,24,25)[j]]``.
* Zero points (asymmetric). Permuted like group scales (always), interleaved like the weights,
  packed LSB-first along N: int32 ``[G, N*bits/32]``.
* Act-order. Rows are sorted by group (stable argsort of ``g_idx``); the permutation travels in
  ``MarlinWeight.perm`` and the kernel's input columns are gathered with it.
"""
from __future__ import annotations

import numpy as np

from .formats import pack_cols, unpack_cols
from .weights import MarlinWeight, QuantizedWeight, num_groups, trivial_g_idx

TILE = 16            # mma tile edge along K and N
BLOCK_N = 64         # columns covered by one warp-wide 16-byte load (4-bit)
INTERLEAVE = {4: np.array([0, 2, 4, 6, 1, 3, 5, 7]), 8: np.array([0, 2, 1, 3])}


def _pack_factor(bits: int) -> int:
    return 32 // bits


def fragment_perm(bits: int) -> np.ndarray:
    """Index permutation of one 16x64 block (1024 entries, 4 tiles of 16x16 row-major).

    ``packed_order[i] = block_entries[perm[i]]``; consecutive runs of ``32 // bits`` entries
    then form one int32, LSB first.
    """
    lane = np.arange(32)[:, None, None, None]                 # [32, 1, 1, 1]
    tile = np.arange(4)[None, :, None, None]                  # [1, 4, 1, 1]
    half = np.arange(2)[None, None, :, None]                  # [1, 1, 2, 1]  n8 half of a tile
    row_off = np.array([0, 1, 8, 9])[None, None, None, :]     # [1, 1, 1, 4]  b0 b1 b2 b3
    row = 2 * (lane % 4) + row_off                            # [32, 1, 1, 4]
    col = lane // 4 + 8 * half                                # [32, 1, 2, 1]
    perm = (256 * tile + TILE * row + col).reshape(-1)        # [1024] lane-major
    il = INTERLEAVE[bits]
    return perm.reshape(-1, il.size)[:, il].reshape(-1)       # [1024]


def scale_perm_grouped() -> np.ndarray:
    """Permutation of each 64 columns of group scales: ``out[8i + j] = in[i + 8j]``."""
    i, j = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    return (i + 8 * j).reshape(-1)                            # [64]


def scale_perm_channel() -> np.ndarray:
    """Permutation of each 32 columns of per-channel scales (accumulator order)."""
    off = np.array([0, 1, 8, 9, 16, 17, 24, 25])
    return (2 * np.arange(4)[:, None] + off[None, :]).reshape(-1)   # [32]


def is_per_channel(group_size: int, k: int) -> bool:
    """One scale per output column: group_size -1, or one group that spans all of K."""
    return group_size == -1 or group_size >= k


def _check_packable(k: int, n: int):
    if k % TILE or n % BLOCK_N:
        raise ValueError(
            f"The Marlin layout needs K a multiple of {TILE} and N a multiple of {BLOCK_N}; got "
            f"K={k} (remainder {k % TILE}), N={n} (remainder {n % BLOCK_N}). Pad the layer's "
            f"in/out features up to those multiples with zero weights.")


def act_order_perm(g_idx: np.ndarray, group_size: int) -> np.ndarray:
    """Row order that makes act-order groups contiguous; every group must hold group_size rows."""
    perm = np.argsort(g_idx, kind="stable").astype(np.int32)          # [K]
    if not np.array_equal(g_idx[perm], trivial_g_idx(g_idx.size, group_size)):
        counts = np.bincount(g_idx, minlength=num_groups(g_idx.size, group_size))   # [G]
        raise ValueError(
            f"act-order g_idx must assign exactly group_size={group_size} rows to every group; "
            f"group sizes found range {counts.min()}..{counts.max()}. Such a layer cannot be "
            f"sorted into contiguous groups.")
    return perm


# The fragment permutation is separable: with row = 8*r_hi + 2*t + r_lo and
# col = 16*tile + 8*half + g (lane = 4*g + t), lane l's entries of one 16x64 block come in the
# order (tile, then the interleaved 8 or 4 of its two n8 halves). For 4-bit the interleave puts
# nibble p = 4*r_lo + 2*half + r_hi; for 8-bit byte p = 2*r_lo + r_hi within each half. So a
# single transpose of named axes does the whole reordering, with no gather.
_BLOCK_AXES = ("kt", "r_hi", "t", "r_lo", "nt", "tile", "half", "g")   # q [K, N] reshaped
_PACKED_AXES = {
    4: ("kt", "nt", "g", "t", "tile", "r_lo", "half", "r_hi"),
    8: ("kt", "nt", "g", "t", "tile", "half", "r_lo", "r_hi"),
}


def _block_view(a: np.ndarray, k: int, n: int) -> np.ndarray:
    return a.reshape(k // TILE, 2, 4, 2, n // BLOCK_N, 4, 2, 8)   # axes _BLOCK_AXES


def pack_codes(q: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes ``[K, N]`` -> int32 Marlin ``qweight [K/16, N*16*bits/32]``.

    One transpose (a copy of the codes) and one pass that merges nibbles into bytes: about
    1.2x the fp16 size of the layer in temporaries, and no gather.
    """
    k, n = q.shape
    _check_packable(k, n)
    order = [_BLOCK_AXES.index(ax) for ax in _PACKED_AXES[bits]]
    t = np.ascontiguousarray(_block_view(q, k, n).transpose(order))   # packed order, uint8
    t = t.reshape(k // TILE, n * TILE)                                  # [K/16, 16N] codes
    if bits == 4:
        t = t[:, 0::2] | (t[:, 1::2] << 4)                              # [K/16, 8N] bytes
    return t.view(np.uint32).view(np.int32)                            # LSB-first words


def unpack_codes(qweight: np.ndarray, bits: int, k: int, n: int) -> np.ndarray:
    """Inverse of ``pack_codes``."""
    b = np.ascontiguousarray(qweight).view(np.uint8)                   # [K/16, 4 * words]
    if bits == 4:
        t = np.empty((k // TILE, n * TILE), dtype=np.uint8)
        t[:, 0::2] = b & 0xF
        t[:, 1::2] = b >> 4
    else:
        t = b
    packed = _PACKED_AXES[bits]
    shape = [dict(zip(_BLOCK_AXES, (k // TILE, 2, 4, 2, n // BLOCK_N, 4, 2, 8)))[ax]
             for ax in packed]
    t = t.reshape(shape)                                               # axes _PACKED_AXES
    order = [packed.index(ax) for ax in _BLOCK_AXES]
    return np.ascontiguousarray(t.transpose(order)).reshape(k, n)      # [K, N]


def _permute_columns(a: np.ndarray, perm: np.ndarray) -> np.ndarray:
    g, n = a.shape
    return np.ascontiguousarray(a.reshape(g, n // perm.size, perm.size)[..., perm].reshape(g, n))


def pack_scales(scales: np.ndarray, group_size: int, k: int) -> np.ndarray:
    perm = scale_perm_channel() if is_per_channel(group_size, k) else scale_perm_grouped()
    return _permute_columns(scales, perm)                               # [G, N]


def unpack_scales(scales: np.ndarray, group_size: int, k: int) -> np.ndarray:
    perm = scale_perm_channel() if is_per_channel(group_size, k) else scale_perm_grouped()
    return _permute_columns(scales, np.argsort(perm))                  # [G, N]


def pack_zeros(zeros: np.ndarray, bits: int) -> np.ndarray:
    """uint8 zero points ``[G, N]`` -> int32 ``[G, N*bits/32]`` (grouped perm, interleave, pack)."""
    z = _permute_columns(zeros, scale_perm_grouped())                  # [G, N]
    return pack_cols(z, bits, order=INTERLEAVE[bits])                  # [G, N*bits/32]


def unpack_zeros(packed: np.ndarray, bits: int) -> np.ndarray:
    z = unpack_cols(np.asarray(packed).view(np.uint32), bits, order=INTERLEAVE[bits])   # [G, N]
    return _permute_columns(z, np.argsort(scale_perm_grouped()))


def pack(qw: QuantizedWeight) -> MarlinWeight:
    """``QuantizedWeight`` -> ``MarlinWeight`` (host arrays). ``unpack`` is its exact inverse.

    ``qw`` is checked again first (``QuantizedWeight.check``): its arrays may have been changed
    in place since it was made, and a code of ``2**bits`` or more would spill into the bits of
    its neighbour in the packed word."""
    qw.check()
    k, n = qw.k, qw.n
    _check_packable(k, n)
    q = qw.q
    perm = None
    if qw.g_idx is not None:
        perm = act_order_perm(qw.g_idx, qw.group_size)                 # [K]
        q = q[perm]                                                    # [K, N] rows by group
    return MarlinWeight(
        qweight=pack_codes(q, qw.bits),
        scales=pack_scales(qw.scales, qw.group_size, k),
        zeros=None if qw.zeros is None else pack_zeros(qw.zeros, qw.bits),
        perm=perm, bits=qw.bits, group_size=qw.group_size, k=k, n=n)


def unpack(mw: MarlinWeight) -> QuantizedWeight:
    """``MarlinWeight`` -> ``QuantizedWeight``, the exact inverse of ``pack``."""
    mw = mw.to_host()
    k, n, bits = mw.k, mw.n, mw.bits
    q = unpack_codes(np.asarray(mw.qweight), bits, k, n)               # [K, N] sorted rows
    g_idx = None
    if mw.perm is not None:
        perm = np.asarray(mw.perm)
        q_orig = np.empty_like(q)
        q_orig[perm] = q                                               # undo the row sort
        q = q_orig
        g_idx = np.empty(k, dtype=np.int32)
        g_idx[perm] = trivial_g_idx(k, mw.group_size)
    return QuantizedWeight(
        q=q,
        scales=unpack_scales(np.asarray(mw.scales), mw.group_size, k),
        zeros=None if mw.zeros is None else unpack_zeros(np.asarray(mw.zeros), bits),
        g_idx=g_idx, bits=bits, group_size=mw.group_size)


__all__ = ["pack", "unpack", "fragment_perm", "scale_perm_grouped", "scale_perm_channel",
           "is_per_channel", "num_groups"]
