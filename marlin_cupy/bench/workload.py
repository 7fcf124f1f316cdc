"""Random quantized layers for the benchmark, in every provider's format, and their reference.

A layer's full ``[K, N]`` code matrix can be huge (the ``ideal`` shape on an H200 holds 4.6e9
weights), far too large to quantize or repack in NumPy inside a short GPU lease. So a layer is
built from a random code *tile* ``[K, P]`` repeated along N (``P``, the period, divides N), with
fully random fp16 scales ``[G, N]``:

    W[k, n] = (tile[k, n % P] - 8) * scales[k // group_size, n]

The scales make W non-periodic, so an output column computed from the wrong scales fails the
correctness gate, and a column read from the wrong code tile fails it unless the offset is a
multiple of ``P`` (at least 256 columns). Timing does not depend on the values: every byte is
still read, and the data is random rather than zeros (which can run faster than real data).

Only the tile goes through ``marlin_cupy.pack`` on the host. The Marlin layout is local to blocks
of 64 columns, so packing the tile and repeating it gives the layout of the whole matrix; a small
probe checks that (and finds where ``pack`` moves each scale) every time, and the layer is packed
whole, slowly, if the probe fails.
"""
from __future__ import annotations

import functools

import numpy as np

PERIODS = (1024, 512, 256)          # tile widths tried, widest first
MAX_TILE_CODES = 1 << 25            # a wider tile is used only while K*P stays below this
REFERENCE_CHUNK_BYTES = 1 << 30     # fp32 weight rows dequantized at a time for the reference
ZERO = 8                            # symmetric 4-bit zero point ("uint4b8")


def choose_period(k: int, n: int) -> int:
    """Tile width P: the widest of 1024/512/256 that divides N with K*P <= 2**25 codes, else the
    narrowest that divides N, else N itself (the whole layer is then packed as it is)."""
    dividing = [p for p in PERIODS if n % p == 0]
    if not dividing:
        return n
    fitting = [p for p in dividing if k * p <= MAX_TILE_CODES]
    return fitting[0] if fitting else dividing[-1]


def scale_magnitude(k: int) -> float:
    """Scale that keeps outputs near 1: codes minus 8 have a mean square of 21.5, x is N(0, 1)."""
    return 1.0 / np.sqrt(21.5 * k)


class LayoutProbeError(RuntimeError):
    """``marlin_cupy.pack`` does not repeat with the tile, so the layer must be packed whole."""


@functools.lru_cache(maxsize=None)
def marlin_scale_perm(period: int, group_size: int, per_channel: bool) -> np.ndarray:
    """Check that Marlin packing repeats with period ``period`` along N, and return where it moves
    scales within one period: ``packed_scales[:, j] = scales[:, perm[j]]`` for ``j < period``.

    Raises ``LayoutProbeError`` when packing two periods differs from repeating one.
    """
    from .. import QuantizedWeight, pack
    gs = -1 if per_channel else group_size
    k = 16 if per_channel else 2 * max(group_size, 16)           # two groups: grouped, not per-channel
    g = 1 if gs == -1 else k // gs
    rng = np.random.default_rng(1234)
    q1 = rng.integers(0, 16, size=(k, period), dtype=np.uint8)                 # [k, P]
    ones = np.ones((g, period), dtype=np.float16)                               # [G, P]
    # Column index + 1 as the scale (exact in fp16 up to 2048) reveals where pack moves it.
    col = np.broadcast_to(np.arange(1, 2 * period + 1, dtype=np.float16), (g, 2 * period))
    one = pack(QuantizedWeight(q1, ones, None, None, 4, gs))
    two = pack(QuantizedWeight(np.tile(q1, (1, 2)), np.ascontiguousarray(col), None, None, 4, gs))
    if not np.array_equal(two.qweight, np.tile(one.qweight, (1, 2))):
        raise LayoutProbeError(f"packing 2 x {period} columns is not the packing of {period} columns repeated")
    perm = two.scales.astype(np.int64) - 1                                      # [G, 2P]
    if not (np.all(perm == perm[:1]) and np.array_equal(perm[0, period:], perm[0, :period] + period)
            and np.array_equal(np.sort(perm[0, :period]), np.arange(period))):
        raise LayoutProbeError(f"scale packing does not repeat every {period} columns")
    return perm[0, :period]


def repeat_packed(tile_qweight, scales, perm, period: int):
    """The Marlin ``(qweight, scales)`` of codes that repeat every ``period`` columns.

    ``tile_qweight``: the packed ``[K/16, 2P]`` of one period; ``scales``: fp16 ``[G, N]`` in natural
    order; ``perm`` from ``marlin_scale_perm``. NumPy or CuPy arrays (all of one kind).
    """
    xp = np if isinstance(scales, np.ndarray) else __import__("cupy")
    g, n = scales.shape
    reps = n // period
    qweight = xp.tile(tile_qweight, (1, reps))                                  # [K/16, 2N]
    moved = scales.reshape(g, reps, period)[:, :, perm]                         # [G, N/P, P]
    return qweight, xp.ascontiguousarray(moved.reshape(g, n))                   # [G, N]


class QuantizedLayer:
    """One random symmetric 4-bit layer on the device, and what each provider needs of it.

    ``codes``: cupy uint8 ``[K, P]`` code tile. ``scales``: cupy fp16 ``[G, N]``. Derived formats
    (fp16 weights, GPTQ-style words, Marlin layout) are built on request; ``copies`` keeps the
    rotation copies that several providers share until ``release``.
    """

    def __init__(self, k: int, n: int, group_size: int, seed: int = 0):
        import cupy as cp
        self.cp = cp
        self.k, self.n, self.group_size = k, n, group_size
        self.groups = 1 if group_size == -1 else k // group_size
        self.period = choose_period(k, n)
        rng = np.random.default_rng(seed)
        self.codes_host = rng.integers(0, 16, size=(k, self.period), dtype=np.uint8)     # [K, P]
        self.codes = cp.asarray(self.codes_host)                                           # [K, P]
        scales = rng.uniform(0.5, 1.5, size=(self.groups, n)) * scale_magnitude(k)
        self.scales = cp.asarray(scales.astype(np.float16))                                # [G, N]
        self.packed_whole = False
        self._copies = {}

    # -- formats ---------------------------------------------------------------------------------

    def _tile_cols(self, a):
        """Repeat a ``[rows, P]`` array along N to ``[rows, N]``."""
        return self.cp.tile(a, (1, self.n // self.period))

    def full_codes(self):
        """cupy uint8 ``[K, N]``."""
        return self._tile_cols(self.codes)

    def dequantized(self, start: int = 0, stop: int = None, dtype=None):
        """``(codes - 8) * scale`` for rows ``start:stop`` (group-aligned), cupy ``[rows, N]``.

        fp16 by default: the exact product rounded once, the weights every fp16 provider reads.
        """
        cp = self.cp
        dtype = cp.float16 if dtype is None else dtype
        stop = self.k if stop is None else stop
        rows, reps, p = stop - start, self.n // self.period, self.period
        if self.group_size == -1:
            codes = self.codes[start:stop].reshape(rows, 1, 1, p)                          # [rows, 1, 1, P]
            scales = self.scales.reshape(1, 1, reps, p)                                    # [1, 1, N/P, P]
        else:
            gs = self.group_size
            if start % gs or stop % gs:
                raise ValueError(f"rows {start}:{stop} are not aligned to group_size={gs}.")
            codes = self.codes[start:stop].reshape(rows // gs, gs, 1, p)                   # [g, gs, 1, P]
            scales = self.scales[start // gs:stop // gs].reshape(rows // gs, 1, reps, p)   # [g, 1, N/P, P]
        return ((codes.astype(dtype) - ZERO) * scales.astype(dtype)).reshape(rows, self.n)  # [rows, N]

    def gptq(self):
        """GPTQ-style int32 ``[K/8, N]`` words (``marlin_cupy.baselines`` layout)."""
        from ..baselines import pack_gptq_codes
        return self._tile_cols(pack_gptq_codes(self.codes))

    def marlin(self):
        """A device ``MarlinWeight``: the packed tile repeated, scales moved as ``pack`` moves them."""
        from .. import MarlinWeight, QuantizedWeight, pack
        from ..layout import is_per_channel
        cp = self.cp
        try:
            perm = marlin_scale_perm(self.period, self.group_size, is_per_channel(self.group_size, self.k))
        except LayoutProbeError:
            # Correct but slow: pack the whole code matrix on the host.
            self.packed_whole = True
            q = np.tile(self.codes_host, (1, self.n // self.period))
            mw = pack(QuantizedWeight(q, self.scales.get(), None, None, 4, self.group_size))
            return mw.to_device()
        ones = np.ones((self.groups, self.period), dtype=np.float16)
        tile = pack(QuantizedWeight(self.codes_host, ones, None, None, 4, self.group_size))
        qweight, scales = repeat_packed(cp.asarray(tile.qweight), self.scales, cp.asarray(perm), self.period)
        return MarlinWeight(qweight, scales, None, None, 4, self.group_size, self.k, self.n)

    # -- the reference ---------------------------------------------------------------------------

    def reference(self, x):
        """float32 ``x @ W`` for cupy fp16 ``x [M, K]``, dequantizing W in fp32 a slab at a time.

        fp32 products of fp16 inputs are exact and K-long fp32 sums err near 1e-6 relative, far
        below the gate's bounds. (CuPy computes fp32 matmul in full fp32 unless CUPY_TF32=1.)
        """
        cp = self.cp
        align = 1 if self.group_size == -1 else self.group_size
        rows = max(align, (REFERENCE_CHUNK_BYTES // (4 * self.n)) // align * align)
        out = cp.zeros((x.shape[0], self.n), dtype=cp.float32)                               # [M, N]
        for start in range(0, self.k, rows):
            stop = min(self.k, start + rows)
            w = self.dequantized(start, stop, dtype=cp.float32)                              # [rows, N]
            out += x[:, start:stop].astype(cp.float32) @ w                                   # [M, N]
        return out

    # -- rotation copies shared between providers -----------------------------------------------

    def copies(self, key: str, count: int, make):
        """``count`` independent copies of ``make()`` (cached under ``key`` with at least
        ``count`` entries): providers that read the same format share one rotation."""
        have = self._copies.setdefault(key, [])
        if not have:
            have.append(make())
        while len(have) < count:
            have.append(_copy(have[0]))
        return have[:count]

    def release(self):
        self._copies.clear()
        self.codes = self.scales = None


def _copy(obj):
    """A deep device copy of an array, a tuple of arrays, or a MarlinWeight."""
    if isinstance(obj, tuple):
        return tuple(_copy(o) for o in obj)
    if hasattr(obj, "qweight"):
        from .. import MarlinWeight
        return MarlinWeight(*(None if a is None else a.copy() for a in (obj.qweight, obj.scales, obj.zeros, obj.perm)),
                            obj.bits, obj.group_size, obj.k, obj.n)
    return obj.copy()
