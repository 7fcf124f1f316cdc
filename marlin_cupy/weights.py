"""The two weight containers every other module passes around.

``QuantizedWeight`` holds integer codes in natural ``[K, N]`` order and is the single
reference for what a quantized layer means (``dequantize``). ``MarlinWeight`` holds the same
information rearranged into the Marlin tiled layout that the kernel reads; ``layout.pack`` and
``layout.unpack`` convert between the two exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

SUPPORTED_BITS = (4, 8)
SUPPORTED_GROUP_SIZES = (32, 64, 128, -1)


def default_zero(bits: int) -> int:
    """Zero point of the symmetric types: 8 for 4-bit ("uint4b8"), 128 for 8-bit ("uint8b128")."""
    return 1 << (bits - 1)


def num_groups(k: int, group_size: int) -> int:
    return 1 if group_size == -1 else k // group_size


def trivial_g_idx(k: int, group_size: int) -> np.ndarray:
    """The group index of every input row when rows are not reordered (no act-order)."""
    if group_size == -1:
        return np.zeros(k, dtype=np.int32)
    return (np.arange(k, dtype=np.int32) // group_size).astype(np.int32)


@dataclass(eq=False)
class QuantizedWeight:
    """Group-quantized weight of a linear layer ``y = x @ W`` with ``W`` of shape ``[K, N]``.

    ``q``: unsigned codes ``0 .. 2**bits - 1``, uint8 ``[K, N]``.
    ``scales``: float16 ``[G, N]`` with ``G = K // group_size`` (``1`` for ``group_size == -1``).
    ``zeros``: uint8 ``[G, N]`` zero points, or ``None`` for the symmetric types whose zero
    point is fixed at ``2**(bits-1)``.
    ``g_idx``: int32 ``[K]`` group of every input row (act-order), or ``None`` for the default
    ``k // group_size``. A ``g_idx`` equal to the default is stored as ``None``.
    Dequantized value: ``(q - zero) * scale`` of row ``k``'s group.
    """

    q: np.ndarray
    scales: np.ndarray
    zeros: Optional[np.ndarray]
    g_idx: Optional[np.ndarray]
    bits: int
    group_size: int

    def __post_init__(self):
        if self.bits not in SUPPORTED_BITS:
            raise ValueError(f"bits={self.bits} is not supported; use one of {SUPPORTED_BITS}.")
        if self.group_size not in SUPPORTED_GROUP_SIZES:
            raise ValueError(f"group_size={self.group_size} is not supported; use one of "
                             f"{SUPPORTED_GROUP_SIZES} (-1 means one scale per output channel).")
        q = np.asarray(self.q)
        if q.ndim != 2 or q.dtype != np.uint8:
            raise ValueError(f"q must be a uint8 array of shape [K, N]; got dtype={q.dtype}, "
                             f"shape={q.shape}.")
        k, n = q.shape
        if self.group_size != -1 and k % self.group_size:
            raise ValueError(f"K={k} is not a multiple of group_size={self.group_size}.")
        if q.size and int(q.max()) >= (1 << self.bits):
            raise ValueError(f"q holds code {int(q.max())}, which does not fit in bits={self.bits}.")
        g = num_groups(k, self.group_size)
        if self.scales.shape != (g, n) or self.scales.dtype != np.float16:
            raise ValueError(f"scales must be float16 of shape [G, N] = [{g}, {n}]; got dtype="
                             f"{self.scales.dtype}, shape={self.scales.shape}.")
        if self.zeros is not None:
            if self.zeros.shape != (g, n) or self.zeros.dtype != np.uint8:
                raise ValueError(f"zeros must be uint8 of shape [G, N] = [{g}, {n}] or None; got "
                                 f"dtype={self.zeros.dtype}, shape={self.zeros.shape}.")
            if self.zeros.size and int(self.zeros.max()) >= (1 << self.bits):
                raise ValueError(f"zeros holds {int(self.zeros.max())}, which does not fit in "
                                 f"bits={self.bits}.")
        if self.g_idx is not None:
            g_idx = np.asarray(self.g_idx)
            if g_idx.shape != (k,) or not np.issubdtype(g_idx.dtype, np.integer):
                raise ValueError(f"g_idx must be an integer array of shape [K] = [{k}]; got "
                                 f"dtype={g_idx.dtype}, shape={g_idx.shape}.")
            if k and (g_idx.min() < 0 or g_idx.max() >= g):
                raise ValueError(f"g_idx values must lie in 0..{g - 1} (G={g} groups); got "
                                 f"{int(g_idx.min())}..{int(g_idx.max())}.")
            g_idx = g_idx.astype(np.int32)
            self.g_idx = None if np.array_equal(g_idx, trivial_g_idx(k, self.group_size)) else g_idx

    @property
    def k(self) -> int:
        return self.q.shape[0]

    @property
    def n(self) -> int:
        return self.q.shape[1]

    @property
    def sym(self) -> bool:
        return self.zeros is None

    @property
    def num_groups(self) -> int:
        return num_groups(self.k, self.group_size)

    def row_groups(self) -> np.ndarray:
        """Group index of every input row, int32 ``[K]`` (``g_idx`` or the default)."""
        return self.g_idx if self.g_idx is not None else trivial_g_idx(self.k, self.group_size)

    def zero_points(self) -> np.ndarray:
        """Zero points as uint8 ``[G, N]`` (the fixed symmetric one broadcast if ``zeros`` is None)."""
        if self.zeros is not None:
            return self.zeros
        return np.full(self.scales.shape, default_zero(self.bits), dtype=np.uint8)

    def dequantize(self) -> np.ndarray:
        """float32 ``[K, N]``: ``(q - zero) * scale``, the reference every kernel is judged against."""
        groups = self.row_groups()                                        # [K]
        zero = self.zero_points().astype(np.float32)[groups]               # [K, N]
        scale = self.scales.astype(np.float32)[groups]                     # [K, N]
        return (self.q.astype(np.float32) - zero) * scale                  # [K, N]

    def equals(self, other: "QuantizedWeight") -> bool:
        """Exact equality of every field (codes, scales bit for bit, zeros, g_idx)."""
        def same(a, b):
            if a is None or b is None:
                return a is None and b is None
            return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
                a.view(np.uint16) if a.dtype == np.float16 else a,
                b.view(np.uint16) if b.dtype == np.float16 else b)
        return (self.bits == other.bits and self.group_size == other.group_size
                and same(self.q, other.q) and same(self.scales, other.scales)
                and same(self.zeros, other.zeros) and same(self.g_idx, other.g_idx))


def scales_fit_fma(scales) -> bool:
    """Whether every scale (NumPy or CuPy fp16) is finite and below ``config.FMA_SCALE_LIMIT``
    in magnitude: the kernels' group scale inside the unpacking computes s * 2^20 in fp16."""
    from .config import FMA_SCALE_LIMIT
    if scales is None or getattr(scales, "size", 0) == 0:
        return False
    a = abs(scales.astype("float32"))
    return bool((a < FMA_SCALE_LIMIT).all())    # False for NaN and inf too


@dataclass(eq=False)
class MarlinWeight:
    """A quantized weight in the Marlin tiled layout (see ``layout.py`` for the exact format).

    ``qweight``: int32 ``[K/16, 2N]`` (4-bit) or ``[K/16, 4N]`` (8-bit).
    ``scales``: float16 ``[G, N]``, columns permuted for the kernel's fragment layout.
    ``zeros``: int32 ``[G, N*bits/32]`` packed, permuted zero points, or ``None`` (symmetric).
    ``perm``: int32 ``[K]`` act-order permutation of the input rows (the kernel computes
    ``x[:, perm] @ W[perm]``), or ``None``.
    Arrays are NumPy on the host, or CuPy after ``to_device()``.
    ``fma_scales`` (not an argument): whether every scale is finite and below
    ``config.FMA_SCALE_LIMIT`` (2^-4) in magnitude, which lets the wgmma kernels apply the group
    scale inside the unpacking (the same bits, fewer instructions; benchmarks/NOTES.md entry
    87). Computed from ``scales`` whenever a ``MarlinWeight`` is made (``dataclasses.replace``
    included; one reduction, a device sync for CuPy arrays). The arrays are not to be changed
    in place afterwards (make a new ``MarlinWeight`` instead): a scale raised past the limit
    would make those kernels return inf or NaN (s 2^20 overflows fp16).
    ``matmul(..., scale_fma=False)`` never takes the fused form.
    """

    qweight: object
    scales: object
    zeros: object
    perm: object
    bits: int
    group_size: int
    k: int
    n: int
    fma_scales: bool = field(init=False, default=False)

    def __post_init__(self):
        self.fma_scales = scales_fit_fma(self.scales)

    @property
    def on_device(self) -> bool:
        return not isinstance(self.qweight, np.ndarray)

    @property
    def sym(self) -> bool:
        return self.zeros is None

    def to_device(self) -> "MarlinWeight":
        """The same weight with every array copied to the current CuPy device."""
        import cupy as cp
        move = (lambda a: None if a is None else cp.ascontiguousarray(cp.asarray(a)))
        try:
            qweight = move(self.qweight)
        except Exception as e:
            from .records import raise_if_no_gpu
            raise_if_no_gpu("MarlinWeight.to_device", e)
            raise
        return MarlinWeight(qweight, move(self.scales), move(self.zeros),
                            move(self.perm), self.bits, self.group_size, self.k, self.n)

    def to_host(self) -> "MarlinWeight":
        """The same weight with every array on the host (NumPy)."""
        get = (lambda a: None if a is None else (a if isinstance(a, np.ndarray) else a.get()))
        return MarlinWeight(get(self.qweight), get(self.scales), get(self.zeros), get(self.perm),
                            self.bits, self.group_size, self.k, self.n)
