"""Tensor maps (``CUtensorMap``) for the tensor memory accelerator's copies (compute capability
9.0), built through the CUDA driver's ``cuTensorMapEncodeTiled`` with ctypes (CuPy does not
wrap it).

A map is 128 opaque bytes that describe a tiled view of a global array: its address, sizes and
strides, the box a copy moves and the swizzle it applies in shared memory. A kernel reads it
from global memory (``cp.async.bulk.tensor``, PTX ISA). ``encode_tiled`` returns the bytes;
where they go is the caller's (``ops`` writes the activations' map of a ``MARLIN_WS_TMA_A``
build into its module's ``marlin_tmap_a``, benchmarks/NOTES.md entry 101;
``scripts/tma_probe.py`` keeps a layer's packed weights' map in an array).
"""
from __future__ import annotations

import ctypes
import functools

# CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion (cuda.h)
UINT64, FLOAT16 = 4, 6
ELEMENT_BYTES = {UINT64: 8, FLOAT16: 2}
SWIZZLE_NONE, SWIZZLE_128B = 0, 3
L2_PROMOTION_128B = 2
MAP_BYTES = 128


@functools.lru_cache(maxsize=None)
def _encode():
    from . import pdl
    vp, u32 = ctypes.c_void_p, ctypes.c_uint32
    return pdl.driver_function("cuTensorMapEncodeTiled", (
        vp, ctypes.c_int, u32, vp, ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(u32), ctypes.POINTER(u32),
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int))


def check_tiled(address: int, dtype: int, dims: tuple, strides: tuple, box: tuple,
                swizzle: int = SWIZZLE_NONE) -> None:
    """ValueError for what ``cuTensorMapEncodeTiled`` would refuse, said in our terms:
    ``dims`` and ``box`` are innermost first (elements), ``strides`` the bytes between
    consecutive indices of dimensions 1.. (one fewer than ``dims``)."""
    if dtype not in ELEMENT_BYTES:
        raise ValueError(f"unknown tensor map data type {dtype}")
    if not 1 <= len(dims) <= 5 or len(box) != len(dims) or len(strides) != len(dims) - 1:
        raise ValueError(f"a tiled map of rank 1..5 needs as many box sizes as dimensions and "
                         f"one stride fewer; got dims {dims}, strides {strides}, box {box}")
    if address % 16:
        raise ValueError(f"the array's address must be 16-byte aligned; got {address:#x}")
    if any(s % 16 or s <= 0 for s in strides):
        raise ValueError(f"strides must be positive multiples of 16 bytes; got {strides}")
    if any(not 1 <= b <= 256 for b in box) or any(d < 1 for d in dims):
        raise ValueError(f"box sizes must be 1..256 and dimensions at least 1; got box {box}, "
                         f"dims {dims}")
    inner = box[0] * ELEMENT_BYTES[dtype]
    if inner % 16:
        raise ValueError(f"the box's inner size must be a multiple of 16 bytes; got {inner}")
    if swizzle == SWIZZLE_128B and inner > 128:
        raise ValueError(f"with the 128-byte swizzle the box's inner size is at most 128 bytes; "
                         f"got {inner}")


def encode_tiled(address: int, dtype: int, dims: tuple, strides: tuple, box: tuple,
                 swizzle: int = SWIZZLE_NONE, l2_promotion: int = L2_PROMOTION_128B) -> bytes:
    """The 128 bytes of the tiled map of the array at device address ``address`` (elements of
    ``dtype``, ``dims`` innermost first, ``strides`` in bytes for dimensions 1..), copies of
    ``box`` elements, element strides 1, no interleave, out-of-bounds elements read as zeros.
    ValueError for arguments the driver would refuse (``check_tiled``), RuntimeError with the
    driver's status for any other refusal, or if the driver cannot be loaded."""
    check_tiled(address, dtype, dims, strides, box, swizzle)
    rank = len(dims)
    raw = (ctypes.c_uint8 * (MAP_BYTES + 64))()
    at = (ctypes.addressof(raw) + 63) // 64 * 64          # CUtensorMap is 64-byte aligned
    c_dims = (ctypes.c_uint64 * rank)(*dims)
    c_strides = (ctypes.c_uint64 * max(rank - 1, 1))(*(strides or (0,)))
    c_box = (ctypes.c_uint32 * rank)(*box)
    c_elem = (ctypes.c_uint32 * rank)(*([1] * rank))
    status = _encode()(at, dtype, rank, address, c_dims, c_strides, c_box, c_elem,
                       0, swizzle, l2_promotion, 0)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled returned CUresult {status} for dims {dims}, "
                           f"strides {strides}, box {box}, swizzle {swizzle}")
    return ctypes.string_at(at, MAP_BYTES)


def activation_map(address: int, m: int, k: int, tile_m: int) -> bytes:
    """The map of ``MARLIN_WS_TMA_A`` builds (cuda/marlin.cuh): ``x`` as ``[m, k]`` row-major
    fp16 at ``address``, boxes of 64 halves (one 128-byte column region of a tile) x ``tile_m``
    rows, with the 128-byte swizzle that the kernel's activations' layout uses (chunk c of
    row r at c ^ (r % 8)); rows past ``m`` read as zeros."""
    return encode_tiled(address, FLOAT16, (k, m), (2 * k,), (64, tile_m), SWIZZLE_128B)
