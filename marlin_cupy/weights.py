"""The two weight containers every other module passes around.

``QuantizedWeight`` holds integer codes in natural ``[K, N]`` order and is the single
reference for what a quantized layer means (``dequantize``). ``MarlinWeight`` holds the same
information rearranged into the Marlin tiled layout that the kernel reads; ``layout.pack`` and
``layout.unpack`` convert between the two exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

SUPPORTED_BITS = (4, 8)
SUPPORTED_GROUP_SIZES = (32, 64, 128, -1)
FP16_MAX = 65504.0            # the largest finite float16


def check_int(name: str, value) -> int:
    """``value`` as a Python int if it is a Python or NumPy integer (not a bool), else ValueError:
    ``128.0`` or ``True`` compare equal to supported values but would reach the kernel sources
    and the shape arithmetic as floats or bools."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer (a Python or NumPy int, not a bool); got "
                         f"{value!r} ({type(value).__name__}). Pass {name}=int(...) if the "
                         "value is integral.")
    return int(value)


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
    ``bits``, ``group_size``: Python or NumPy integers (stored as int; floats and bools refused).
    Dequantized value: ``(q - zero) * scale`` of row ``k``'s group.

    Scales must be finite (NaN and inf are refused, as ``from_gptq``/``from_awq`` refuse them);
    zero and negative scales are accepted, as the importers accept them: a zero scale (a pruned
    group) dequantizes its group to 0. ``check()`` runs every check; the constructor runs it,
    and so do ``layout.pack``, ``to_gptq`` and ``to_awq``, since the arrays can be changed in
    place after construction (a code of ``2**bits`` or more would spill into its neighbour's
    bits when packed).
    """

    q: np.ndarray
    scales: np.ndarray
    zeros: Optional[np.ndarray]
    g_idx: Optional[np.ndarray]
    bits: int
    group_size: int

    def __post_init__(self):
        self.bits = check_int("bits", self.bits)
        self.group_size = check_int("group_size", self.group_size)
        self._check_fields()
        if self.g_idx is not None:
            g_idx = self._checked_g_idx().astype(np.int32)
            trivial = np.array_equal(g_idx, trivial_g_idx(self.k, self.group_size))
            self.g_idx = None if trivial else g_idx
        self._check_dequantized_range()

    def __repr__(self) -> str:
        # A summary: the dataclass's own repr printed every array.
        return (f"QuantizedWeight(K={self.k}, N={self.n}, bits={self.bits}, "
                f"group_size={self.group_size}, sym={self.sym}, "
                f"act_order={self.g_idx is not None})")

    def check(self) -> None:
        """Raise ValueError if any field is inconsistent: types, shapes, code and zero ranges,
        finite scales, dequantized values within float16's range (``g_idx`` is normalised by
        the constructor, and its range checked again here)."""
        self._check_fields()
        if self.g_idx is not None:
            self._checked_g_idx()
        self._check_dequantized_range()

    def _checked_g_idx(self) -> np.ndarray:
        """``g_idx`` as an array, or ValueError unless it is an integer ``[K]`` in 0..G-1."""
        k, g = self.k, self.num_groups
        g_idx = np.asarray(self.g_idx)
        if g_idx.shape != (k,) or not np.issubdtype(g_idx.dtype, np.integer):
            raise ValueError(f"g_idx must be an integer array of shape [K] = [{k}]; got "
                             f"dtype={g_idx.dtype}, shape={g_idx.shape}.")
        if k and (g_idx.min() < 0 or g_idx.max() >= g):
            raise ValueError(f"g_idx values must lie in 0..{g - 1} (G={g} groups); got "
                             f"{int(g_idx.min())}..{int(g_idx.max())}.")
        return g_idx

    def _check_dequantized_range(self) -> None:
        """Raise if a dequantized value ``(q - zero) * scale`` is beyond float16's range: the
        kernels compute it in float16 (inf there). Imported scales are not bounded by anything
        else (``quantize`` refuses such weights itself). Exact per group where the group's
        widest possible code distance times its scale could pass the limit."""
        maxq = (1 << self.bits) - 1
        zero = self.zero_points().astype(np.float64)                        # [G, N]
        scale = np.abs(self.scales.astype(np.float64))                      # [G, N]
        if not (np.maximum(zero, maxq - zero) * scale > FP16_MAX).any():
            return                                                          # cannot overflow
        groups = self.row_groups()                                          # [K]
        step = max(1, (1 << 22) // max(1, self.n))
        for start in range(0, self.k, step):
            rows = slice(start, min(self.k, start + step))
            dev = np.abs(self.q[rows].astype(np.float64) - zero[groups[rows]])
            deq = dev * scale[groups[rows]]                                 # [rows, N]
            if (deq > FP16_MAX).any():
                r, c = np.unravel_index(int(np.argmax(deq)), deq.shape)
                grp = int(groups[start + r])
                raise ValueError(
                    f"row {start + r}, column {c} dequantizes to {deq[r, c]:.6g} (code "
                    f"{int(self.q[start + r, c])}, zero point {int(zero[grp, c])}, scale "
                    f"{float(self.scales[grp, c]):.6g} of group {grp}), beyond the float16 "
                    f"maximum {FP16_MAX:.0f}: the kernels would compute inf there. The scales "
                    "are too large for float16 weights (rescale the layer, e.g. fold a factor "
                    "into the previous one).")

    def _check_fields(self) -> None:
        bits = check_int("bits", self.bits)
        group_size = check_int("group_size", self.group_size)
        if bits not in SUPPORTED_BITS:
            raise ValueError(f"bits={bits} is not supported; use one of {SUPPORTED_BITS}.")
        if group_size not in SUPPORTED_GROUP_SIZES:
            raise ValueError(f"group_size={group_size} is not supported; use one of "
                             f"{SUPPORTED_GROUP_SIZES} (-1 means one scale per output channel).")
        for name in ("q", "scales", "zeros"):
            value = getattr(self, name)
            if not isinstance(value, np.ndarray) and not (name == "zeros" and value is None):
                raise ValueError(f"{name} must be a NumPy array; got {type(value).__name__}. "
                                 f"Convert it with numpy.asarray(..., dtype=...) first.")
        q = self.q
        if q.ndim != 2 or q.dtype != np.uint8:
            raise ValueError(f"q must be a uint8 array of shape [K, N]; got dtype={q.dtype}, "
                             f"shape={q.shape}.")
        k, n = q.shape
        if group_size != -1 and k % group_size:
            raise ValueError(f"K={k} is not a multiple of group_size={group_size}.")
        limit = 1 << bits
        if q.size and int(q.max()) >= limit:
            bad = q >= limit
            r, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
            raise ValueError(f"q holds code {int(q[r, c])} at row {r}, column {c} "
                             f"({int(bad.sum())} code(s) >= {limit}), which does not fit in "
                             f"bits={bits} (codes 0..{limit - 1}). Codes changed in place after "
                             "the QuantizedWeight was made are checked again here.")
        g = num_groups(k, group_size)
        if self.scales.shape != (g, n) or self.scales.dtype != np.float16:
            raise ValueError(f"scales must be float16 of shape [G, N] = [{g}, {n}]; got dtype="
                             f"{self.scales.dtype}, shape={self.scales.shape}.")
        bad = ~np.isfinite(self.scales)
        if bad.any():
            r, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
            raise ValueError(f"scales holds {int(bad.sum())} non-finite scale(s); the first is "
                             f"scales[{r}, {c}] = {self.scales[r, c]}. Scales must be finite "
                             "(zero is allowed: it dequantizes its group to 0).")
        if self.zeros is not None:
            if self.zeros.shape != (g, n) or self.zeros.dtype != np.uint8:
                raise ValueError(f"zeros must be uint8 of shape [G, N] = [{g}, {n}] or None; got "
                                 f"dtype={self.zeros.dtype}, shape={self.zeros.shape}.")
            if self.zeros.size and int(self.zeros.max()) >= limit:
                raise ValueError(f"zeros holds {int(self.zeros.max())}, which does not fit in "
                                 f"bits={bits}.")

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


_MARLIN_FIELDS = ("qweight", "scales", "zeros", "perm", "bits", "group_size", "k", "n")


@dataclass(eq=False)
class MarlinWeight:
    """A quantized weight in the Marlin tiled layout (see ``layout.py`` for the exact format).

    ``qweight``: int32 ``[K/16, 2N]`` (4-bit) or ``[K/16, 4N]`` (8-bit).
    ``scales``: float16 ``[G, N]``, columns permuted for the kernel's fragment layout.
    ``zeros``: int32 ``[G, N*bits/32]`` packed, permuted zero points, or ``None`` (symmetric).
    ``perm``: int32 ``[K]`` act-order permutation of the input rows (the kernel computes
    ``x[:, perm] @ W[perm]``), or ``None``.
    ``bits``, ``group_size``, ``k``, ``n``: integers (K a multiple of 16, N of 64).
    Arrays are NumPy on the host, or CuPy (C-contiguous) after ``to_device()``; all of one kind.

    Every field is checked when a ``MarlinWeight`` is made and again when one is assigned
    (``ValueError``, and the assignment does not happen), since ``matmul`` reads the arrays as
    raw memory: float32 scales or a swapped K/N would be misread, not refused. Device arrays are
    recognised by duck typing (``shape``, ``dtype``, ``flags``; ``get()`` for the ``perm``
    check), so host weights never import CuPy. Changing an array *in place* is not checked:
    make a new ``MarlinWeight`` (``dataclasses.replace``) instead.

    ``fma_scales`` (read-only, not an argument): whether every scale is finite and below
    ``config.FMA_SCALE_LIMIT`` (2^-4) in magnitude, which lets the wgmma kernels apply the group
    scale inside the unpacking (the same bits, fewer instructions; benchmarks/NOTES.md entry
    87). Computed from ``scales`` when a ``MarlinWeight`` is made and whenever ``scales`` is
    assigned (one reduction, a device sync for CuPy arrays), so it always describes the
    current scale array: a scale past the limit would make those kernels return inf or NaN
    (s 2^20 overflows fp16). ``matmul(..., scale_fma=False)`` never takes the fused form.
    """

    qweight: object
    scales: object
    zeros: object
    perm: object
    bits: int
    group_size: int
    k: int
    n: int

    def __post_init__(self):
        for name in ("bits", "group_size", "k", "n"):
            object.__setattr__(self, name, check_int(name, getattr(self, name)))
        self._check()
        object.__setattr__(self, "_fma_scales", scales_fit_fma(self.scales))

    def __setattr__(self, name, value):
        if name not in _MARLIN_FIELDS or "_fma_scales" not in self.__dict__:
            object.__setattr__(self, name, value)         # the constructor's own assignments
            return
        if name in ("bits", "group_size", "k", "n"):
            value = check_int(name, value)
        before = getattr(self, name)
        object.__setattr__(self, name, value)
        try:
            self._check()
        except ValueError:
            object.__setattr__(self, name, before)
            raise
        if name == "scales":
            object.__setattr__(self, "_fma_scales", scales_fit_fma(value))

    @property
    def fma_scales(self) -> bool:
        return self._fma_scales

    def _check(self) -> None:
        """Raise ValueError unless the fields describe one Marlin-layout weight."""
        bits, group_size, k, n = self.bits, self.group_size, self.k, self.n
        if bits not in SUPPORTED_BITS:
            raise ValueError(f"bits={bits} is not supported; use one of {SUPPORTED_BITS}.")
        if group_size not in SUPPORTED_GROUP_SIZES:
            raise ValueError(f"group_size={group_size} is not supported; use one of "
                             f"{SUPPORTED_GROUP_SIZES} (-1 means one scale per output channel).")
        if k < 0 or n < 0 or k % 16 or n % 64:
            raise ValueError(f"K={k} and N={n} must be non-negative, K a multiple of 16 and N "
                             "a multiple of 64 (the Marlin layout's tiles).")
        if group_size != -1 and k % group_size:
            raise ValueError(f"K={k} is not a multiple of group_size={group_size}.")
        g = num_groups(k, group_size)
        words = n * bits // 32
        host = isinstance(self.qweight, np.ndarray)
        expected = {
            "qweight": ("int32", (k // 16, n * 16 * bits // 32), f"[K/16, {bits // 2}N]",
                        f" (K={k}, N={n}, bits={bits})"),
            "scales": ("float16", (g, n), "[G, N]",
                       " (one group spanning K)" if group_size == -1
                       else f" (G = K / group_size = {k} / {group_size})"),
            "zeros": ("int32", (g, words), "[G, N*bits/32]", f" (bits={bits})"),
            "perm": ("int32", (k,), "[K]", ""),
        }
        for name, (dtype, shape, meaning, why) in expected.items():
            a = getattr(self, name)
            optional = " or None" if name in ("zeros", "perm") else ""
            if a is None and optional:
                continue
            if not (hasattr(a, "shape") and hasattr(a, "dtype")):
                raise ValueError(f"{name} must be an array (NumPy, or CuPy on the device)"
                                 f"{optional}; got {type(a).__name__}.")
            if isinstance(a, np.ndarray) != host:
                kinds = ("a device array", "a NumPy array")
                raise ValueError(f"qweight is {kinds[host]} but {name} is {kinds[not host]}; "
                                 "all arrays of a MarlinWeight must be on the host or all on the "
                                 "device (use to_device() or to_host()).")
            if a.dtype != np.dtype(dtype) or tuple(a.shape) != shape:
                raise ValueError(f"{name} must be {dtype} of shape {meaning} = {list(shape)}{why}"
                                 f"{optional}; got dtype={a.dtype}, shape={list(a.shape)}.")
            if not host and not a.flags.c_contiguous:
                raise ValueError(f"{name} must be C-contiguous on the device (the kernel reads "
                                 "it as raw memory); pass cupy.ascontiguousarray(...).")
            if not host and a.size:
                # The kernel reads qweight, scales and zeros as 16-byte vectors, all on one GPU.
                # (An empty array holds no memory to check: N = 0 or K = 0 launches nothing.)
                device, home = a.data.device_id, self.qweight.data.device_id
                if device != home:
                    raise ValueError(f"{name} lives on GPU {device} but qweight on GPU {home}; "
                                     "all arrays of a MarlinWeight must be on one device.")
                if name != "perm" and a.data.ptr % 16:
                    raise ValueError(f"{name} must start on a 16-byte boundary (the kernel "
                                     f"reads it as 16-byte vectors); its address is "
                                     f"{a.data.ptr:#x}. Copy it into a fresh array "
                                     "(cupy.ascontiguousarray(a.copy())).")
        if self.perm is not None and k:
            perm = np.asarray(self.perm if host else self.perm.get())       # [K]
            lo, hi = int(perm.min()), int(perm.max())
            if lo < 0 or hi >= k:
                raise ValueError(f"perm must be a permutation of 0..{k - 1}; got values "
                                 f"{lo}..{hi}.")
            counts = np.bincount(perm, minlength=k)                          # [K]
            if counts.max() > 1:
                row = int(np.argmax(counts))
                raise ValueError(f"perm must be a permutation of 0..{k - 1}; row {row} appears "
                                 f"{int(counts[row])} times (so another row is missing).")

    def __repr__(self) -> str:
        # A summary: the dataclass's own repr printed every array. "GPU n" for CuPy arrays.
        where = "host"
        if self.on_device:
            device = getattr(getattr(self.qweight, "device", None), "id", None)
            where = "device" if device is None else f"GPU {device}"
        return (f"MarlinWeight(K={self.k}, N={self.n}, bits={self.bits}, "
                f"group_size={self.group_size}, sym={self.sym}, "
                f"act_order={self.perm is not None}, fma_scales={self.fma_scales}, "
                f"on={where!r})")

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
