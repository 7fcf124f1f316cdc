"""GPTQ and AWQ tensors and checkpoints <-> ``QuantizedWeight`` (NumPy, CPU).

Every format below describes a linear layer ``y = x @ W``, ``W`` of shape ``[K, N]``
(K = in_features, N = out_features), with ``G`` groups along K. "Packed LSB first" means
bit-field ``j`` (bits ``[bits*j, bits*(j+1))``) of an int32 word holds the ``j``-th value.

**GPTQ** (AutoGPTQ / GPTQModel), bits 4 or 8, ``pf = 32 // bits`` values per word:

- ``qweight`` int32 ``[K/pf, N]``, packed along K: field ``j`` of ``qweight[r, n]`` is
  ``q[r*pf + j, n]``.
- ``qzeros`` int32 ``[G, N/pf]``, packed along N: field ``j`` of ``qzeros[g, c]`` is the stored
  zero of column ``c*pf + j``. Format ``"gptq"`` (v1) stores ``zero - 1`` (the historical
  quirk, so symmetric 4-bit stores ``0x77777777``); ``"gptq_v2"`` stores the zero. Other v1
  readers (vLLM's gptq and exllama kernels) add the 1 back without wrapping, so a zero of 0
  cannot be written as v1 (``to_gptq`` refuses it; save as ``"gptq_v2"``); ``from_gptq`` reads
  a stored ``2**bits - 1`` as zero 0 (modulo ``2**bits``).
- ``scales`` float16 ``[G, N]``; ``g_idx`` int32 ``[K]``, the group of every input row
  (``k // group_size`` unless the checkpoint was quantized with act-order).
- Dequantized: ``W[k, n] = (q[k, n] - zero[g, n]) * scales[g, n]`` with ``g = g_idx[k]``.

**AWQ** (llm-awq / AutoAWQ "gemm" version), 4-bit with zero points:

- ``qweight`` int32 ``[K, N/8]`` packed along N with the interleave ``AWQ_ORDER``: nibble ``p``
  (LSB first) of ``qweight[k, c]`` is ``q[k, 8c + AWQ_ORDER[p]]``.
- ``qzeros`` int32 ``[G, N/8]`` packed the same way, storing the true zero (no minus one).
- ``scales`` float16 ``[G, N]``. No act-order.

**Marlin** (``checkpoint_format`` ``"marlin"``, or the older ``is_marlin_format: true``; the
original Marlin's and AutoGPTQ's Marlin export): 4-bit, symmetric (zero point 8), no act-order.

- ``B`` int32 ``[K/16, 2N]``: the codes in the Marlin tiled layout, which ``layout.pack``
  writes bit for bit (``layout.py`` gives the format; shared/research/marlin_facts.md s.1.6).
- ``s`` float16 ``[G, N]``: the scales, columns permuted as ``layout.pack`` permutes them.
- A ``workspace`` tensor, if a checkpoint has one, is not read (the kernels keep their own).
- A layer with one group (``G == 1``) is read as per channel (group size -1), its ``s`` with
  the per-channel permutation, as ``layout.pack`` writes every one-group layer.

**Checkpoints**: a folder with ``model.safetensors`` (or shards listed in
``model.safetensors.index.json``) holding ``<layer>.qweight``, ``<layer>.qzeros``,
``<layer>.scales`` (and ``<layer>.g_idx`` for GPTQ; ``<layer>.B`` and ``<layer>.s`` for
Marlin), plus ``quantize_config.json``. Loaders read
everything (or the layers named), validate everything, and only then return; the iterators
(``iter_gptq_checkpoint``, ``iter_awq_checkpoint``) check the config and the files' headers at
once and then read and check one layer at a time. Any problem is a ``ValueError`` that names
the file and the tensor.

Group size: when a weight has a single group (``G == 1``) it is imported as ``group_size=-1``
(one group spanning K), also when the caller or config says ``group_size >= K`` (GPTQ tools
count ``ceil(K / group_size)`` groups): these all mean the same thing, and -1 is the form the
kernels treat as per-channel. Saving, such a one-group layer matches any group size >= its K,
so it is written with the group size of the other layers and a loaded checkpoint saves again.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np

from ._arrays import on_gpu
from .weights import SUPPORTED_BITS, SUPPORTED_GROUP_SIZES, QuantizedWeight, default_zero

GPTQ_FORMATS = ("gptq", "gptq_v2")
MARLIN_FORMAT = "marlin"
# The group sizes the established Marlin checkpoint format has (the original kernel's and its
# first readers'); save_gptq_checkpoint(..., "marlin") writes no other. Loading takes any group
# size this project supports.
MARLIN_GROUP_SIZES = (128, -1)

# AWQ's nibble order within an int32: nibble p (LSB first) holds column 8c + AWQ_ORDER[p].
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)

CHECKPOINT_FILE = "model.safetensors"
CHECKPOINT_INDEX = "model.safetensors.index.json"
CONFIG_FILE = "quantize_config.json"

_GPTQ_TENSORS = ("qweight", "qzeros", "scales", "g_idx")
_AWQ_TENSORS = ("qweight", "qzeros", "scales")
_MARLIN_TENSORS = ("B", "s")


# ---------------------------------------------------------------------------------------------
# Bit packing (int32 words, LSB first)
# ---------------------------------------------------------------------------------------------

def _shifts(bits: int) -> np.ndarray:
    return np.arange(32 // bits, dtype=np.uint32) * np.uint32(bits)     # [pf]


def _pack_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 ``[R*pf, C]`` -> int32 ``[R, C]``: field j of ``[r, c]`` is ``codes[r*pf + j, c]``."""
    pf = 32 // bits
    fields = codes.astype(np.uint32).reshape(-1, pf, codes.shape[1])    # [R, pf, C]
    words = np.bitwise_or.reduce(fields << _shifts(bits)[None, :, None], axis=1)   # [R, C]
    return np.ascontiguousarray(words).view(np.int32)


def _unpack_rows(words: np.ndarray, bits: int) -> np.ndarray:
    """uint32 ``[R, C]`` -> uint8 ``[R*pf, C]``, the inverse of ``_pack_rows``."""
    mask = np.uint32((1 << bits) - 1)
    fields = (words[:, None, :] >> _shifts(bits)[None, :, None]) & mask   # [R, pf, C]
    return fields.reshape(-1, words.shape[1]).astype(np.uint8)           # [R*pf, C]


def pack_cols(codes: np.ndarray, bits: int, order=None) -> np.ndarray:
    """uint8 ``[R, C*pf]`` -> int32 ``[R, C]``: field p of word ``[r, c]`` is
    ``codes[r, c*pf + order[p]]`` (``order`` defaults to the identity)."""
    pf = 32 // bits
    fields = codes.astype(np.uint32).reshape(codes.shape[0], -1, pf)    # [R, C, pf]
    if order is not None:
        fields = fields[:, :, list(order)]                               # [R, C, pf], nibble order
    words = np.bitwise_or.reduce(fields << _shifts(bits)[None, None, :], axis=2)   # [R, C]
    return np.ascontiguousarray(words).view(np.int32)


def unpack_cols(words: np.ndarray, bits: int, order=None) -> np.ndarray:
    """uint32 ``[R, C]`` -> uint8 ``[R, C*pf]``: the inverse of ``pack_cols`` (same ``order``)."""
    mask = np.uint32((1 << bits) - 1)
    fields = (words[:, :, None] >> _shifts(bits)[None, None, :]) & mask   # [R, C, pf], nibble order
    if order is not None:
        fields = fields[:, :, list(np.argsort(order))]                    # [R, C, pf], column order
    return fields.reshape(words.shape[0], -1).astype(np.uint8)            # [R, C*pf]


# ---------------------------------------------------------------------------------------------
# Argument checks shared by the GPTQ and AWQ importers
# ---------------------------------------------------------------------------------------------

def _host(x, name: str) -> np.ndarray:
    if on_gpu(x):
        raise ValueError(f"{name} is on the GPU; pass a host array (x.get() for CuPy, "
                         "x.cpu().numpy() for PyTorch).")
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} could not be read as a NumPy array ({e}).") from e


def _words(x, name: str, ndim: int = 2) -> np.ndarray:
    """A packed tensor as uint32 (int32 bits reinterpreted; uint32 accepted as the same bits)."""
    x = _host(x, name)
    if x.dtype not in (np.int32, np.uint32):
        raise ValueError(f"{name} must be int32 (packed codes; uint32 with the same bits is also "
                         f"accepted); got dtype={x.dtype}. Other integer types are not cast.")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D; got shape={x.shape}.")
    return np.ascontiguousarray(x).view(np.uint32)


def _scales(x, name: str) -> np.ndarray:
    """Scales as float16 ``[G, N]``. float32/float64 are accepted only when they convert exactly."""
    x = _host(x, name)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [G, N]; got shape={x.shape}.")
    if x.dtype.kind != "f" or x.dtype.itemsize not in (2, 4, 8):
        raise ValueError(f"{name} must be float16 (or float32/float64 values that float16 "
                         f"holds exactly); got dtype={x.dtype}.")
    x = x.astype(x.dtype.newbyteorder("="), copy=False)     # big-endian input: native order
    if 0 in x.shape:
        raise ValueError(f"{name} has shape {list(x.shape)}; it needs at least one group (row) "
                         "and one column.")
    bad = ~np.isfinite(x)
    if bad.any():
        g, n = np.unravel_index(int(np.argmax(bad)), bad.shape)
        raise ValueError(f"{name} holds {int(bad.sum())} non-finite value(s); the first is "
                         f"{name}[{g}, {n}] = {x[g, n]}.")
    if x.dtype == np.float16:
        return np.array(x, copy=True, order="C")        # the caller's buffer stays the caller's
    with np.errstate(over="ignore"):
        half = x.astype(np.float16)
    lossy = half.astype(x.dtype) != x
    if lossy.any():
        g, n = np.unravel_index(int(np.argmax(lossy)), lossy.shape)
        raise ValueError(f"{name} is {x.dtype} and {int(lossy.sum())} value(s) are not exactly "
                         f"representable in float16 (first: {name}[{g}, {n}] = {x[g, n]!r}); "
                         "convert the scales to float16 yourself if that rounding is acceptable.")
    return half


def _check_shape(x: np.ndarray, expected: tuple, name: str, meaning: str) -> None:
    if x.shape != expected:
        raise ValueError(f"{name} must have shape {meaning} = {list(expected)}; got "
                         f"{list(x.shape)}.")


def _resolve_group_size(k: int, g: int, group_size, scales_name: str, config=None) -> int:
    """Group size of a weight with K rows and G groups; ``group_size`` is the caller's or None,
    or, with ``config`` (its path), the checkpoint config's, which a disagreement then blames."""
    def mismatch(advice: str) -> ValueError:
        if config is None:
            return ValueError(advice)
        return ValueError(f"{config} says group_size={group_size!r}, but {scales_name} has G={g} "
                          f"rows for K={k}: the checkpoint and its config disagree (the shapes "
                          f"alone give "
                          f"{-1 if g == 1 else k // g if k % g == 0 else 'no group size'}).")

    if group_size is not None and (isinstance(group_size, bool)
                                   or not isinstance(group_size, (int, np.integer))):
        raise ValueError(f"group_size must be an int or None; got {group_size!r}.")
    if g == 1:
        if group_size is None or group_size == -1 or group_size >= k:
            return -1
        raise mismatch(f"{scales_name} has G=1 row, so one group spans K={k}, which does not "
                       f"match group_size={group_size}. Pass group_size=-1 (or None to infer "
                       "it from the shapes).")
    partial = _partial_group_size(k, g, group_size)
    if partial is not None:
        exact = (f" (read as {g} equal groups, group_size={k // g} is not supported either)"
                 if group_size is None and k % g == 0 else "")
        raise ValueError(f"K={k} is not a multiple of group_size={partial}: {scales_name} has "
                         f"G={g} = ceil({k} / {partial}) rows, so its last group holds only "
                         f"{k - (g - 1) * partial} rows (AutoGPTQ rounds the group count up)"
                         f"{exact}. The kernels need whole groups: pad in_features to "
                         f"{g * partial} with zero weights before quantizing.")
    if group_size is None:
        if k % g:
            raise ValueError(f"K={k} rows cannot be split into G={g} equal groups ({scales_name} "
                             f"has {g} rows); the tensors are inconsistent.")
        group_size = k // g
    elif group_size <= 0 or k % group_size or k // group_size != g:
        raise mismatch(f"group_size={group_size} does not split K={k} into the G={g} groups "
                       f"that {scales_name} has rows for. Pass the checkpoint's group size, or "
                       "None to infer it from the shapes.")
    if group_size not in SUPPORTED_GROUP_SIZES:
        raise ValueError(f"group_size={group_size} (K={k}, G={g}) is not supported; supported: "
                         f"{SUPPORTED_GROUP_SIZES}.")
    return int(group_size)


def _partial_group_size(k: int, g: int, group_size):
    """The group size (the caller's, else a supported one) with which K rows make
    ``G = ceil(K / group_size)`` groups, the last one partial; None if there is none."""
    sizes = [group_size] if group_size is not None else SUPPORTED_GROUP_SIZES
    for size in sizes:
        if size > 0 and k % size and -(-k // size) == g:
            return size
    return None


def _check_bits(bits) -> None:
    if isinstance(bits, (bool, np.bool_)) or not isinstance(bits, (int, np.integer)):
        raise ValueError(f"bits must be an integer (4 or 8); got {bits!r} "
                         f"({type(bits).__name__}).")
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits={bits!r} is not supported; this project handles GPTQ with bits in "
                         f"{SUPPORTED_BITS} (2- and 3-bit GPTQ are not supported).")


def _check_checkpoint_format(checkpoint_format) -> None:
    if checkpoint_format not in GPTQ_FORMATS:
        raise ValueError(f"checkpoint_format={checkpoint_format!r} is not a GPTQ format; use one "
                         f"of {GPTQ_FORMATS} ('gptq' stores zero - 1, 'gptq_v2' the true zero).")


def _names(roles) -> dict:
    """Tensor names used in error messages, for direct calls (the loaders add layer and file)."""
    return {r: r for r in roles}


# ---------------------------------------------------------------------------------------------
# GPTQ tensors
# ---------------------------------------------------------------------------------------------

def from_gptq(qweight, qzeros, scales, g_idx=None, bits: int = 4, sym: bool = True,
              group_size=None, checkpoint_format: str = "gptq") -> QuantizedWeight:
    """A ``QuantizedWeight`` from AutoGPTQ tensors (layout in the module docstring).

    ``bits``: 4 or 8. ``sym=True``: the zero point is the fixed ``2**(bits-1)``; ``qzeros`` is
    only checked to hold exactly that (stored as ``2**(bits-1) - 1`` in format ``"gptq"``), and
    the result has ``zeros=None``. ``sym=False``: per-group zeros are read from ``qzeros``.
    ``group_size``: inferred as ``K // G`` when None; a single group is ``-1``.
    ``g_idx``: None means ``k // group_size``; an act-order ``g_idx`` is kept.
    ``checkpoint_format``: ``"gptq"`` (v1, zero - 1 stored) or ``"gptq_v2"`` (true zero).
    """
    return _from_gptq(qweight, qzeros, scales, g_idx, bits, sym, group_size, checkpoint_format,
                      _names(_GPTQ_TENSORS))


def _from_gptq(qweight, qzeros, scales, g_idx, bits, sym, group_size, checkpoint_format, names):
    _check_bits(bits)
    _check_checkpoint_format(checkpoint_format)
    if not isinstance(sym, (bool, np.bool_)):
        raise ValueError(f"sym must be a bool; got {sym!r}.")
    pf = 32 // bits
    scales = _scales(scales, names["scales"])
    g, n = scales.shape
    words = _words(qweight, names["qweight"])
    k = words.shape[0] * pf
    _check_shape(words, (words.shape[0], n), names["qweight"],
                 "[K*bits/32, N] (N: columns of scales)")
    if k == 0 or n == 0:
        raise ValueError(f"{names['qweight']} has shape {list(words.shape)}; K and N must be at "
                         "least 1.")
    if g_idx is not None:
        g_idx = _g_idx(g_idx, k, g, names, bits)
    if n % pf:
        raise ValueError(f"N={n} (from {names['scales']}) is not a multiple of {pf}, so "
                         f"{names['qzeros']} cannot hold {pf} {bits}-bit zeros per int32.")
    zero_words = _words(qzeros, names["qzeros"])
    _check_shape(zero_words, (g, n // pf), names["qzeros"],
                 f"[G, N*bits/32] for bits={bits} (G, N: shape of scales)")
    group_size = _resolve_group_size(k, g, group_size, names["scales"], names.get("config"))

    q = _unpack_rows(words, bits)                                        # [K, N]
    stored = unpack_cols(zero_words, bits)                              # [G, N]
    if sym:
        expected = default_zero(bits) - (checkpoint_format == "gptq")
        bad = stored != expected
        if bad.any():
            gg, nn = np.unravel_index(int(np.argmax(bad)), bad.shape)
            head = (f"{names['qzeros']} holds stored zero {int(stored[gg, nn])} for group {gg}, "
                    f"column {nn} ({int(bad.sum())} such entries), but a symmetric {bits}-bit "
                    f"'{checkpoint_format}' checkpoint stores {expected} everywhere.")
            other = "gptq_v2" if checkpoint_format == "gptq" else "gptq"
            other_expected = default_zero(bits) - (other == "gptq")
            if np.all(stored == other_expected):
                # Mislabelled (GPTQModel can write v2 zeros under a v1 label): sym=False would
                # read zero 2**(bits-1) +- 1 and shift every weight by one step.
                raise ValueError(
                    f"{head} Every entry is {other_expected}, the symmetric zero point as "
                    f"format '{other}' stores it: the checkpoint is '{other}' labelled "
                    f"'{checkpoint_format}'. Read it as checkpoint_format='{other}' "
                    f"(\"checkpoint_format\": \"{other}\" in quantize_config.json); reading "
                    "it as asymmetric would shift every weight by one step.")
            raise ValueError(
                f"{head} If the checkpoint has per-group zero points, read it as asymmetric: "
                "pass sym=False to from_gptq, or set \"sym\": false in quantize_config.json "
                "(and check checkpoint_format).")
        zeros = None
    elif checkpoint_format == "gptq":
        _check_v1_wrap(stored, bits, names["qzeros"])
        zeros = ((stored.astype(np.int32) + 1) % (1 << bits)).astype(np.uint8)   # undo zero - 1
    else:
        zeros = stored
    return QuantizedWeight(q=q, scales=scales, zeros=zeros, g_idx=g_idx, bits=bits,
                           group_size=group_size)


def _check_v1_wrap(stored: np.ndarray, bits: int, name: str) -> None:
    """Refuse v1 zeros that a writer's wrap-around corrupted. v1 stores ``zero - 1``; a zero of 0
    becomes -1, and a writer that ORs it into the word without masking (AutoGPTQ's own packing
    does) sets that field and every field above it to all ones: the zeros of the word's later
    columns are then lost, and would read as 0 (modulo ``2**bits``). A field of all ones below
    the word's top is read as that only when some field above it is not all ones."""
    pf, maxq = 32 // bits, (1 << bits) - 1
    fields = stored.reshape(stored.shape[0], -1, pf) == maxq              # [G, N/pf, pf]
    above_all = np.flip(np.cumprod(np.flip(fields, -1), -1), -1).astype(bool)   # j..top all ones
    wrapped = fields[..., :-1] & above_all[..., 1:]                       # [G, N/pf, pf-1]
    if wrapped.any():
        g, c, j = (int(v) for v in np.argwhere(wrapped)[0])
        first, last = c * pf + j, c * pf + pf - 1
        raise ValueError(
            f"{name} word [{g}, {c}] stores {maxq} (zero 0 in format 'gptq', zero - 1 wrapped) "
            f"for column {first} and for every column above it in the word ({first + 1}.."
            f"{last}; {int(wrapped.any(-1).sum())} such word(s)): a v1 writer that did not mask "
            f"the -1 overwrote their zero points, which are lost (or all of them are 0, which "
            f"v1 cannot tell apart). Export the checkpoint again as 'gptq_v2' (the true zero) "
            f"or from the float weights.")


def _g_idx(g_idx, k: int, g: int, names: dict, bits: int) -> np.ndarray:
    g_idx = _host(g_idx, names["g_idx"])
    if not np.issubdtype(g_idx.dtype, np.integer) or g_idx.ndim != 1:
        raise ValueError(f"{names['g_idx']} must be a 1-D integer array (int32) of length K; got "
                         f"dtype={g_idx.dtype}, shape={list(g_idx.shape)}.")
    if g_idx.shape[0] != k:
        raise ValueError(f"{names['g_idx']} has {g_idx.shape[0]} entries but {names['qweight']} "
                         f"has {k // (32 // bits)} rows, i.e. K = {k // (32 // bits)} * "
                         f"{32 // bits} = {k} for bits={bits}. They must describe the same K "
                         "(is bits right?).")
    if k and (int(g_idx.min()) < 0 or int(g_idx.max()) >= g):
        raise ValueError(f"{names['g_idx']} values must lie in 0..{g - 1} ({names['scales']} has "
                         f"G={g} rows); got {int(g_idx.min())}..{int(g_idx.max())}.")
    return g_idx.astype(np.int32)


def to_gptq(qw: QuantizedWeight, checkpoint_format: str = "gptq") -> dict:
    """AutoGPTQ tensors of ``qw``: ``{"qweight", "qzeros", "scales", "g_idx"}`` (always all four).

    ``checkpoint_format="gptq"`` stores ``zero - 1`` in ``qzeros``, the historical layout
    every GPTQ reader expects; ``"gptq_v2"`` stores the true zero. Symmetric weights write
    their fixed zero point. A zero point of 0 (``quantize(sym=False)`` gives it to groups whose
    weights are all >= 0) cannot be written as "gptq": stored as ``2**bits - 1``, readers that
    add the 1 back (vLLM's gptq/exllama kernels) would read ``2**bits``, every weight of the
    group off by ``2**bits * scale``; that is a ValueError pointing to "gptq_v2". ``from_gptq(**to_gptq(qw, f), bits=qw.bits,
    sym=qw.sym, checkpoint_format=f)`` gives ``qw`` back (a single group spanning K comes
    back as ``group_size=-1``).
    """
    if not isinstance(qw, QuantizedWeight):
        raise ValueError(f"to_gptq needs a QuantizedWeight; got {type(qw).__name__}.")
    _check_checkpoint_format(checkpoint_format)
    qw.check()                        # codes changed in place would spill into their neighbours
    pf = 32 // qw.bits
    if qw.k % pf or qw.n % pf:
        raise ValueError(f"GPTQ packs {pf} {qw.bits}-bit values per int32 along K (qweight) and N "
                         f"(qzeros); K={qw.k} and N={qw.n} must both be multiples of {pf}.")
    zeros = qw.zero_points().astype(np.int32)                            # [G, N]
    if checkpoint_format == "gptq":
        _check_v1_zeros(zeros, qw.bits)
        zeros = zeros - 1                                                # the "zero - 1" quirk
    return {
        "qweight": _pack_rows(qw.q, qw.bits),                            # [K/pf, N]
        "qzeros": pack_cols(zeros.astype(np.uint8), qw.bits),           # [G, N/pf]
        "scales": qw.scales.copy(),                                      # [G, N]
        "g_idx": np.array(qw.row_groups(), dtype=np.int32),              # [K]
    }


def _check_v1_zeros(zeros: np.ndarray, bits: int) -> None:
    """Raise if a zero point is 0, which format "gptq" (zero - 1 stored) cannot express."""
    bad = zeros == 0                                                     # [G, N]
    if bad.any():
        g, n = np.unravel_index(int(np.argmax(bad)), bad.shape)
        raise ValueError(
            f"{int(bad.sum())} zero point(s) of 0 (first: group {g}, column {n}) cannot be "
            f"written as checkpoint_format='gptq': v1 stores zero - 1, i.e. {(1 << bits) - 1}, "
            f"and other readers (vLLM's gptq/exllama kernels) add 1 back to get {1 << bits}, "
            f"putting every weight of those groups off by {1 << bits} * scale. "
            "quantize(sym=False) gives zero 0 to groups whose weights are all >= 0. Save with "
            "checkpoint_format='gptq_v2', which stores the zero point itself.")


# ---------------------------------------------------------------------------------------------
# AWQ tensors
# ---------------------------------------------------------------------------------------------

def from_awq(qweight, qzeros, scales, group_size=128) -> QuantizedWeight:
    """A ``QuantizedWeight`` (4-bit, explicit zeros) from AWQ "gemm" tensors (module docstring).

    ``group_size``: the checkpoint's group size, checked against the shapes; None infers it
    (a single group is -1). AWQ zero points are kept as explicit ``zeros`` even when they are
    all 8: the result is never silently turned into a symmetric weight.
    """
    return _from_awq(qweight, qzeros, scales, group_size, _names(_AWQ_TENSORS))


def _from_awq(qweight, qzeros, scales, group_size, names):
    scales = _scales(scales, names["scales"])
    g, n = scales.shape
    if n == 0 or n % 8:
        raise ValueError(f"N={n} (from {names['scales']}) must be a positive multiple of 8: AWQ "
                         "packs 8 columns per int32.")
    words = _words(qweight, names["qweight"])
    k = words.shape[0]
    _check_shape(words, (k, n // 8), names["qweight"], "[K, N/8] (N: columns of scales)")
    if k == 0:
        raise ValueError(f"{names['qweight']} has shape {list(words.shape)}; K must be at least 1.")
    zero_words = _words(qzeros, names["qzeros"])
    _check_shape(zero_words, (g, n // 8), names["qzeros"], "[G, N/8] (G, N: shape of scales)")
    group_size = _resolve_group_size(k, g, group_size, names["scales"], names.get("config"))
    q = unpack_cols(words, 4, AWQ_ORDER)                                # [K, N]
    zeros = unpack_cols(zero_words, 4, AWQ_ORDER)                       # [G, N]
    return QuantizedWeight(q=q, scales=scales, zeros=zeros, g_idx=None, bits=4,
                           group_size=group_size)


def to_awq(qw: QuantizedWeight) -> dict:
    """AWQ "gemm" tensors of ``qw``: ``{"qweight", "qzeros", "scales"}``.

    Needs 4-bit, no act-order (AWQ has no ``g_idx``) and N a multiple of 8. Symmetric weights
    are written with their zero point 8 in every group.
    """
    if not isinstance(qw, QuantizedWeight):
        raise ValueError(f"to_awq needs a QuantizedWeight; got {type(qw).__name__}.")
    qw.check()                        # codes changed in place would spill into their neighbours
    if qw.bits != 4:
        raise ValueError(f"AWQ stores 4-bit weights only; this weight has bits={qw.bits}. Use "
                         "to_gptq for 8-bit.")
    if qw.g_idx is not None:
        raise ValueError("this weight uses act-order (a non-default g_idx), which the AWQ format "
                         "cannot express; use to_gptq, or quantize without act-order.")
    if qw.n % 8:
        raise ValueError(f"AWQ packs 8 columns per int32; N={qw.n} is not a multiple of 8.")
    return {
        "qweight": pack_cols(qw.q, 4, AWQ_ORDER),                       # [K, N/8]
        "qzeros": pack_cols(qw.zero_points(), 4, AWQ_ORDER),            # [G, N/8]
        "scales": qw.scales.copy(),                                      # [G, N]
    }


# ---------------------------------------------------------------------------------------------
# Checkpoints: safetensors + quantize_config.json
# ---------------------------------------------------------------------------------------------

def save_gptq_checkpoint(path_dir, layers: dict, checkpoint_format: str = "gptq") -> None:
    """Write ``layers`` (name -> QuantizedWeight) as a GPTQ checkpoint folder.

    Files: ``model.safetensors`` with ``<name>.qweight``, ``<name>.qzeros``, ``<name>.scales``,
    ``<name>.g_idx`` for every layer, and ``quantize_config.json``. The config is global, so all
    layers must share bits, symmetry and group size. ``desc_act`` is true when any layer has an
    act-order ``g_idx``. Files are written to temporary names and renamed into place.

    ``checkpoint_format``: ``"gptq"`` (zero minus one stored), ``"gptq_v2"`` (the true zero),
    or ``"marlin"``: ``<name>.B`` and ``<name>.s`` in the Marlin layout (the module docstring),
    which takes 4-bit symmetric layers without act-order, group size 128 or -1.
    """
    if checkpoint_format == MARLIN_FORMAT:
        _save_marlin_checkpoint(path_dir, layers)
        return
    _check_checkpoint_format(checkpoint_format)
    bits, sym, group_size = _common_config(layers, "save_gptq_checkpoint")
    tensors = {}
    for name, qw in layers.items():
        for role, array in _for_layer(name, to_gptq, qw, checkpoint_format).items():
            tensors[f"{name}.{role}"] = array
    config = {
        "bits": int(bits),
        "group_size": int(group_size),
        "desc_act": any(qw.g_idx is not None for qw in layers.values()),
        "sym": sym,
        "checkpoint_format": checkpoint_format,
        "quant_method": "gptq",
        "static_groups": False,
        "true_sequential": True,
        "damp_percent": 0.01,
    }
    _write_checkpoint(path_dir, tensors, config)


def _save_marlin_checkpoint(path_dir, layers: dict) -> None:
    bits, sym, group_size = _common_config(layers, "save_gptq_checkpoint")
    short = [name for name, qw in layers.items() if qw.k % 128]
    if short:
        raise ValueError(f"save_gptq_checkpoint: layer {short[0]!r} has K={layers[short[0]].k}, "
                         "not a multiple of 128, which the Marlin format's readers need (the "
                         "original kernel's smallest K tile). Save it as checkpoint_format "
                         "'gptq'.")
    if group_size not in MARLIN_GROUP_SIZES:
        raise ValueError(f"save_gptq_checkpoint: the Marlin checkpoint format has group sizes "
                         f"{MARLIN_GROUP_SIZES}; these layers have group_size={group_size}. "
                         "Save them as checkpoint_format 'gptq' (which this project also packs "
                         "into the Marlin layout when it loads them).")
    tensors = {}
    for name, qw in layers.items():
        for role, array in _for_layer(name, _to_marlin, qw).items():
            tensors[f"{name}.{role}"] = array
    config = {
        "bits": int(bits),
        "group_size": int(group_size),
        "desc_act": False,
        "sym": True,
        "checkpoint_format": MARLIN_FORMAT,
        "is_marlin_format": True,            # what readers older than checkpoint_format look for
        "quant_method": "gptq",
    }
    _write_checkpoint(path_dir, tensors, config)


def _to_marlin(qw: QuantizedWeight) -> dict:
    """``{"B", "s"}`` of a 4-bit symmetric weight without act-order, in the Marlin layout."""
    from . import layout
    if not isinstance(qw, QuantizedWeight):
        raise ValueError(f"the Marlin format needs a QuantizedWeight; got {type(qw).__name__}.")
    problems = [why for bad, why in (
        (qw.bits != 4, f"bits={qw.bits} (it stores 4-bit codes)"),
        (not qw.sym, "zero points (it has none: symmetric, zero point 8)"),
        (qw.g_idx is not None, "act-order (it has no g_idx)"),
    ) if bad]
    if problems:
        raise ValueError(f"the Marlin checkpoint format cannot hold {'; '.join(problems)}. Save "
                         "as checkpoint_format 'gptq' or 'gptq_v2' instead.")
    mw = layout.pack(qw)
    return {"B": mw.qweight, "s": mw.scales}


def _from_marlin(b, s, group_size, names) -> QuantizedWeight:
    """A Marlin-format layer's ``B`` and ``s`` -> ``QuantizedWeight`` (``layout.unpack``)."""
    from . import layout
    from .weights import MarlinWeight
    scales = _scales(s, names["s"])
    g, n = scales.shape
    words = _words(b, names["B"])
    rows = words.shape[0]
    if rows == 0:
        raise ValueError(f"{names['B']} has shape {list(words.shape)}; K must be at least 16.")
    _check_shape(words, (rows, 2 * n), names["B"], "[K/16, 2N] (N: columns of s)")
    if n % 64:
        raise ValueError(f"N={n} (from {names['s']}) must be a multiple of 64, as every "
                         "Marlin-layout weight is; the tensors are inconsistent.")
    k = 16 * rows
    group_size = _resolve_group_size(k, g, group_size, names["s"], names.get("config"))
    mw = MarlinWeight(qweight=words.view(np.int32), scales=scales, zeros=None, perm=None,
                      bits=4, group_size=group_size, k=k, n=n)
    return layout.unpack(mw)


def load_gptq_checkpoint(path_dir, names=None) -> dict:
    """Read a GPTQ checkpoint folder into ``{layer name: QuantizedWeight}``.

    The config comes from ``quantize_config.json`` (or ``config.json``'s
    ``quantization_config``): ``bits`` (or ``w_bit``), ``group_size`` (or ``q_group_size``;
    inferred from shapes when absent), ``sym`` (default true, as in AutoGPTQ),
    ``checkpoint_format`` ``"gptq"`` or ``"gptq_v2"`` (default ``"gptq"``) and ``desc_act``
    (when false, a non-default ``g_idx`` is an error). A layer is every ``<name>.qweight``; its
    other tensors must be present (``g_idx`` may be absent unless ``desc_act`` is true).
    Marlin-format checkpoints (``checkpoint_format`` ``"marlin"`` or ``is_marlin_format``:
    4-bit, symmetric) are read too: a layer is every ``<name>.B``, with its ``<name>.s``
    (the module docstring); 2:4 sparse ones (``"marlin_24"``) are refused. The tensors are
    read from the file the config's
    ``model_file_base_name`` names (AutoGPTQ's ``gptq_model-4bit-128g.safetensors``, say) or
    the shards of its ``.safetensors.index.json``, else ``model.safetensors`` or the shards of
    ``model.safetensors.index.json``, else (when the config names no file) the folder's only
    ``.safetensors`` file.

    ``names``: only these layers (a collection of layer names; one the checkpoint lacks is an
    error). Everything asked for is read and checked before anything is returned. The codes
    take a byte per weight in host memory (a 70B model's 70 GB); ``iter_gptq_checkpoint``
    reads one layer at a time instead.
    """
    return dict(iter_gptq_checkpoint(path_dir, names))


def iter_gptq_checkpoint(path_dir, names=None):
    """``(layer name, QuantizedWeight)`` for each layer of a GPTQ checkpoint folder, in sorted
    order, reading one layer's tensors at a time (the folder and config as in
    ``load_gptq_checkpoint``; ``names`` selects layers). The config, the files' headers, and
    which tensors exist, with their dtypes, are checked when it is called; a layer's shapes
    and values when it is reached (a ``ValueError`` then, after the layers before it)::

        for name, qw in mc.iter_gptq_checkpoint(folder):
            weights[name] = mc.pack(qw).to_device()
    """
    config_path, cfg = _read_config(path_dir)
    method = _config_word(cfg, "quant_method", "gptq", config_path)
    fmt = _config_word(cfg, "checkpoint_format", "gptq", config_path)
    _refuse_dynamic(cfg, config_path)
    legacy = _config_flag(cfg, "is_marlin_format", config_path)
    if fmt == "marlin_24":
        raise ValueError(f"{config_path} describes a 2:4 sparse Marlin checkpoint "
                         "(checkpoint_format='marlin_24'); this project has no sparse kernel "
                         "yet and does not read it.")
    if legacy and fmt not in ("gptq", MARLIN_FORMAT):
        raise ValueError(f"{config_path} says is_marlin_format=true but checkpoint_format="
                         f"{fmt!r}; the config is inconsistent.")
    if method == "gptq" and (legacy or fmt == MARLIN_FORMAT):
        return _iter_marlin_checkpoint(path_dir, names, config_path, cfg)
    if method == "awq":
        raise ValueError(f"{config_path} has quant_method='awq'; use load_awq_checkpoint.")
    if method != "gptq":
        raise ValueError(f"{config_path} has quant_method={method!r}; load_gptq_checkpoint "
                         "reads 'gptq' checkpoints only.")
    if fmt not in GPTQ_FORMATS:
        raise ValueError(f"{config_path} has checkpoint_format={fmt!r}; supported: {GPTQ_FORMATS}.")
    bits, group_size = _config_bits_group(cfg, config_path)
    _check_bits_in_config(bits, config_path)
    sym, desc_act = cfg.get("sym", True), _config_flag(cfg, "desc_act", config_path)
    if sym is None:
        raise ValueError(f"{config_path}: sym is null; set it to true or false (AutoGPTQ's "
                         "default, when the key is absent, is true).")
    _config_flag(cfg, "sym", config_path)
    where = _index_tensors(path_dir, _GPTQ_TENSORS, optional=("g_idx",),
                           base_name=cfg.get("model_file_base_name"))

    def build(t, labels):
        if "g_idx" not in t and desc_act:
            raise ValueError(f"{labels['g_idx']} is missing, but {config_path} says "
                             "desc_act=true (act-order needs g_idx).")
        qw = _from_gptq(t["qweight"], t["qzeros"], t["scales"], t.get("g_idx"), bits, sym,
                        group_size, fmt, labels)
        if qw.g_idx is not None and desc_act is False:
            raise ValueError(f"{labels['g_idx']} is not the default k // group_size, but "
                             f"{config_path} says desc_act=false. The checkpoint is "
                             "inconsistent.")
        return qw
    return _layers(where, _chosen_layers(where, names, path_dir), _GPTQ_TENSORS, config_path,
                   build)


def _iter_marlin_checkpoint(path_dir, names, config_path, cfg):
    """``iter_gptq_checkpoint`` for a Marlin-format folder (the config already read)."""
    bits, group_size = _config_bits_group(cfg, config_path)
    if bits != 4:
        raise ValueError(f"{config_path} describes a Marlin-format checkpoint with bits={bits}; "
                         "the Marlin format holds 4-bit codes.")
    for key, bad, why in (("sym", False, "symmetric weights (zero point 8)"),
                          ("desc_act", True, "no act-order (no g_idx)")):
        value = _config_flag(cfg, key, config_path)
        if value is bad:
            raise ValueError(f"{config_path} says {key}={str(value).lower()} for a "
                             f"Marlin-format checkpoint, which holds {why}; the config is "
                             "inconsistent.")
    where = _index_tensors(path_dir, _MARLIN_TENSORS, base_name=cfg.get("model_file_base_name"),
                           key_role="B")
    return _layers(where, _chosen_layers(where, names, path_dir), _MARLIN_TENSORS, config_path,
                   lambda t, labels: _from_marlin(t["B"], t["s"], group_size, labels))


def save_awq_checkpoint(path_dir, layers: dict) -> None:
    """Write ``layers`` (name -> 4-bit QuantizedWeight without act-order) as an AWQ "gemm" folder.

    Files: ``model.safetensors`` with ``<name>.qweight``, ``<name>.qzeros``, ``<name>.scales``,
    and ``quantize_config.json`` (quant_method "awq", zero_point true, version "gemm").
    """
    bits, _, group_size = _common_config(layers, "save_awq_checkpoint", need_same_sym=False)
    tensors = {}
    for name, qw in layers.items():
        for role, array in _for_layer(name, to_awq, qw).items():
            tensors[f"{name}.{role}"] = array
    config = {"quant_method": "awq", "bits": int(bits), "group_size": int(group_size),
              "zero_point": True, "version": "gemm"}
    _write_checkpoint(path_dir, tensors, config)


def load_awq_checkpoint(path_dir, names=None) -> dict:
    """Read an AWQ "gemm" checkpoint folder into ``{layer name: QuantizedWeight}``.

    Config from ``quantize_config.json``, ``quant_config.json`` (AutoAWQ) or ``config.json``'s
    ``quantization_config``; ``bits``/``w_bit`` must be 4, ``zero_point`` true, ``version``
    "gemm" (the GEMV layout is not supported). Tensor files, ``names`` and the checks as in
    ``load_gptq_checkpoint``; ``iter_awq_checkpoint`` reads one layer at a time.
    """
    return dict(iter_awq_checkpoint(path_dir, names))


def iter_awq_checkpoint(path_dir, names=None):
    """``(layer name, QuantizedWeight)`` for each layer of an AWQ checkpoint folder, one
    layer's tensors read at a time, as ``iter_gptq_checkpoint`` does for GPTQ."""
    config_path, cfg = _read_config(path_dir, extra=("quant_config.json",))
    method = _config_word(cfg, "quant_method", "awq", config_path)
    if method != "awq":
        raise ValueError(f"{config_path} has quant_method={method!r}; load_awq_checkpoint reads "
                         "'awq' checkpoints (use load_gptq_checkpoint for 'gptq').")
    if "quant_method" not in cfg and {"desc_act", "damp_percent", "sym"} & set(cfg):
        raise ValueError(f"{config_path} names no quant_method and has GPTQ's keys "
                         f"({sorted({'desc_act', 'damp_percent', 'sym'} & set(cfg))}), not "
                         "AWQ's: use load_gptq_checkpoint (or add \"quant_method\": \"awq\").")
    version = _config_word(cfg, "version", "gemm", config_path)
    if version != "gemm":
        raise ValueError(f"{config_path} has version={cfg.get('version')!r}; only the 'gemm' AWQ "
                         "layout is supported.")
    if cfg.get("zero_point", True) is not True:
        raise ValueError(f"{config_path} has zero_point={cfg.get('zero_point')!r}; only AWQ with "
                         "zero points (zero_point: true) is supported.")
    bits, group_size = _config_bits_group(cfg, config_path, default_bits=4)
    if bits != 4:
        raise ValueError(f"{config_path} has bits={bits!r}; AWQ checkpoints are 4-bit.")
    where = _index_tensors(path_dir, _AWQ_TENSORS, base_name=cfg.get("model_file_base_name"))
    return _layers(where, _chosen_layers(where, names, path_dir), _AWQ_TENSORS, config_path,
                   lambda t, labels: _from_awq(t["qweight"], t["qzeros"], t["scales"],
                                               group_size, labels))


def _layers(where, chosen, roles, config_path, build):
    """``(name, build(tensors, labels))`` for each chosen layer, its tensors read as it is
    reached; ``labels`` name each tensor with its file (an absent optional one: the file of the
    layer's first role), and the config (errors say where)."""
    for name in chosen:
        home = where[f"{name}.{roles[0]}"]
        labels = {r: f"{name}.{r} (in {where.get(f'{name}.{r}', home)})" for r in roles}
        labels["config"] = config_path
        yield name, build(_read_layer(where, name, roles), labels)


def _for_layer(name, export, *args):
    """``export(*args)``, with the layer's name added to any ValueError."""
    try:
        return export(*args)
    except ValueError as e:
        raise ValueError(f"layer {name!r}: {e}") from e


def _common_config(layers, caller: str, need_same_sym: bool = True):
    """(bits, sym, group_size) shared by every layer; ValueError naming the first that differs.

    A one-group layer (``group_size == -1``, or K == group_size) matches any group size >= its
    K: GPTQ tools count ``ceil(K / group_size)`` groups and the loaders import it as -1. The
    group size is that of the layers with several groups; if every layer has one group, the
    largest group size given (when it covers every K), else -1.
    """
    if not isinstance(layers, dict) or not layers:
        raise ValueError(f"{caller} needs a non-empty dict of layer name -> QuantizedWeight.")
    first_name, first = None, None
    for name, qw in layers.items():
        if not isinstance(name, str) or not name or name.endswith("."):
            raise ValueError(f"{caller}: layer names must be non-empty strings; got {name!r}.")
        if not isinstance(qw, QuantizedWeight):
            raise ValueError(f"{caller}: layer {name!r} is a {type(qw).__name__}, not a "
                             "QuantizedWeight.")
        if first is None:
            first_name, first = name, qw
            continue
        for attr in ("bits",) + (("sym",) if need_same_sym else ()):
            if getattr(qw, attr) != getattr(first, attr):
                raise ValueError(f"{caller}: layer {name!r} has {attr}={getattr(qw, attr)} but "
                                 f"layer {first_name!r} has {attr}={getattr(first, attr)}; "
                                 "quantize_config.json holds one value for all layers. Save "
                                 "them to separate folders.")
    grouped = {name: qw for name, qw in layers.items() if qw.num_groups > 1}
    if grouped:
        ref_name, ref = next(iter(grouped.items()))
        for name, qw in grouped.items():
            if qw.group_size != ref.group_size:
                raise ValueError(f"{caller}: layer {name!r} has group_size={qw.group_size} but "
                                 f"layer {ref_name!r} has group_size={ref.group_size}; "
                                 "quantize_config.json holds one value for all layers. Save "
                                 "them to separate folders.")
        group_size = ref.group_size
        for name, qw in layers.items():
            if qw.num_groups == 1 and qw.k > group_size:
                raise ValueError(f"{caller}: layer {name!r} has one group spanning K={qw.k}, "
                                 f"but layer {ref_name!r} has group_size={group_size}: a reader "
                                 f"would expect ceil({qw.k} / {group_size}) = "
                                 f"{-(-qw.k // group_size)} groups. Save them to separate "
                                 "folders.")
    else:
        given = [qw.group_size for qw in layers.values() if qw.group_size != -1]
        widest = max(qw.k for qw in layers.values())
        group_size = max(given) if given and max(given) >= widest else -1
    return first.bits, first.sym, group_size


def _write_checkpoint(path_dir, tensors: dict, config: dict) -> None:
    from safetensors.numpy import save_file
    folder = Path(path_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tmp_model = folder / (CHECKPOINT_FILE + ".tmp")
    tmp_config = folder / (CONFIG_FILE + ".tmp")
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp_model),
              metadata={"format": "pt"})
    tmp_config.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp_model, folder / CHECKPOINT_FILE)
    os.replace(tmp_config, folder / CONFIG_FILE)


def _read_config(path_dir, extra=()):
    """(path, dict) of the quantization config in ``path_dir``."""
    folder = Path(path_dir)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a directory; pass the checkpoint folder.")
    for filename in (CONFIG_FILE, *extra):
        path = folder / filename
        if path.is_file():
            cfg = _read_json(path)
            if not isinstance(cfg, dict):
                raise ValueError(f"{path} must hold a JSON object; got {type(cfg).__name__}.")
            return path, cfg
    path = folder / "config.json"
    if path.is_file():
        cfg = _read_json(path)
        if isinstance(cfg, dict) and isinstance(cfg.get("quantization_config"), dict):
            return path, cfg["quantization_config"]
    raise ValueError(f"no quantization config in {folder}: expected {CONFIG_FILE}"
                     f"{''.join(', ' + e for e in extra)} or config.json with "
                     "'quantization_config'.")


def _config_word(cfg: dict, key: str, default: str, path) -> str:
    """A config's string setting, lower-cased (``"GPTQ"`` is ``"gptq"``); absent: ``default``."""
    value = cfg.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{path}: {key} must be a string; got {value!r}.")
    return value.lower()


def _config_flag(cfg: dict, key: str, path):
    """A config's true/false setting, or None when absent (or null)."""
    value = cfg.get(key)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{path}: {key} must be true or false; got {value!r}.")
    return value


def _refuse_dynamic(cfg: dict, path) -> None:
    """GPTQModel's per-module overrides (``dynamic``: ``"+:regex"`` keys with other bits,
    group sizes...) are not read: their layers would be decoded with the global config.
    ``"-:regex"`` keys (modules left unquantized) change nothing here and are allowed."""
    dynamic = cfg.get("dynamic") or {}
    if not isinstance(dynamic, dict):
        raise ValueError(f"{path}: dynamic must be an object; got {dynamic!r}.")
    overrides = [k for k in dynamic if not str(k).startswith("-:")]
    if overrides:
        raise ValueError(f"{path} has per-module overrides in 'dynamic' ({overrides[:3]}"
                         f"{' ...' if len(overrides) > 3 else ''}), which this loader does not "
                         "apply: those layers would be read with the global bits and group "
                         "size. Save such layers to separate checkpoints.")


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not readable JSON ({e}).") from e


def _config_bits_group(cfg: dict, path, default_bits=None):
    """``bits`` and ``group_size`` from a config, accepting the synonyms w_bit / q_group_size."""
    def pick(key, synonym, default):
        if key in cfg and synonym in cfg and cfg[key] != cfg[synonym]:
            raise ValueError(f"{path} has {key}={cfg[key]!r} but {synonym}={cfg[synonym]!r}.")
        value = cfg.get(key, cfg.get(synonym, default))
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{path}: {key} must be an integer; got {value!r}.")
        return value
    bits = pick("bits", "w_bit", default_bits)
    if bits is None:
        raise ValueError(f"{path} does not say how many bits the weights have ('bits' or "
                         "'w_bit').")
    return bits, pick("group_size", "q_group_size", None)


def _check_bits_in_config(bits, path) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"{path} has bits={bits}; this project reads GPTQ checkpoints with bits "
                         f"in {SUPPORTED_BITS} (2- and 3-bit are not supported).")


def _tensor_files(folder: Path, base_name=None) -> list:
    """The safetensors files of a checkpoint, the first of these that exists: the file the
    config's ``model_file_base_name`` names (AutoGPTQ appends ``.safetensors``:
    ``gptq_model-4bit-128g``, say) or the shards of its index
    (``<base>.safetensors.index.json``, AutoGPTQ's sharded save); ``model.safetensors`` or the
    shards of ``model.safetensors.index.json``; and, when the config names no file, the
    folder's only ``.safetensors`` file."""
    stems = ["model"]
    if base_name is not None:
        if (not isinstance(base_name, str) or not base_name
                or Path(base_name).name != base_name):
            raise ValueError(f"model_file_base_name must be a file name without a folder; got "
                             f"{base_name!r}.")
        base = base_name[:-len(".safetensors")] if base_name.endswith(".safetensors") else base_name
        stems = list(dict.fromkeys([base, "model"]))
    for stem in stems:
        single = folder / f"{stem}.safetensors"
        if single.is_file():
            return [single]
        index = folder / f"{stem}.safetensors.index.json"
        if index.is_file():
            return _shards(index)
    found = sorted(folder.glob("*.safetensors"))
    if base_name is None and len(found) == 1:
        return found
    listed = ", ".join(f.name for f in found) or "none"
    if base_name is not None:
        raise ValueError(f"the config names model_file_base_name={base_name!r}, but {folder} has "
                         f"neither {stems[0]}.safetensors nor {stems[0]}.safetensors.index.json "
                         f"(nor {CHECKPOINT_FILE} or {CHECKPOINT_INDEX}); its .safetensors "
                         f"files: {listed}.")
    if found:
        raise ValueError(f"no {CHECKPOINT_FILE} or {CHECKPOINT_INDEX} in {folder}, but "
                         f"{len(found)} other .safetensors files ({listed}). A checkpoint "
                         f"sharded over several files needs its index (a .safetensors.index.json "
                         f"whose weight_map names them); if one file alone holds the weights, "
                         f"name it in the config's model_file_base_name (without .safetensors).")
    raise ValueError(f"no {CHECKPOINT_FILE} (or {CHECKPOINT_INDEX}) in {folder}.")


def _shards(index: Path) -> list:
    """The files a safetensors index's ``weight_map`` names, which must all exist."""
    weight_map = _read_json(index)
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str)
                                                   for v in weight_map.values()):
        raise ValueError(f"{index} has no valid 'weight_map' (tensor name -> file name).")
    files = [index.parent / f for f in sorted(set(weight_map.values()))]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"{index} lists shard(s) that do not exist: {missing}.")
    return files


#: The safetensors dtypes each tensor role may have, and how to say so (the readers'
#: own checks: ``_words``, ``_scales``, ``_g_idx``).
_PACKED = (("I32", "U32"), "packed codes are I32, or U32 with the same bits")
_SCALE = (("F16", "BF16", "F32", "F64"), "scales are F16, or BF16/F32/F64 values that float16 "
                                         "holds exactly")
_ROLE_DTYPES = {"qweight": _PACKED, "qzeros": _PACKED, "B": _PACKED, "scales": _SCALE,
                "s": _SCALE, "g_idx": (("I32", "U32", "I64"), "g_idx is I32 or I64")}


def _index_tensors(path_dir, roles, optional=(), base_name=None, key_role="qweight") -> dict:
    """``{key: file}`` of every ``<layer>.<role>`` tensor, from the files' headers alone.

    A layer is a prefix with a ``.<key_role>`` (``qweight``; ``B`` for the Marlin format); its
    non-optional roles must exist. Any other role tensor without one beside it (bar
    ``.scales``, a common name outside quantized layers) means the checkpoint is truncated or
    inconsistent. Dtypes are checked here too.
    """
    folder = Path(path_dir)
    where, dtypes = {}, {}
    for file in _tensor_files(folder, base_name):
        with _opened(file) as handle:
            for key in handle.keys():
                if key.rsplit(".", 1)[-1] not in roles:
                    continue
                if key in where:
                    raise ValueError(f"tensor {key} appears in both {where[key]} and {file}.")
                dtypes[key] = handle.get_slice(key).get_dtype()
                where[key] = file

    suffix = "." + key_role
    layers = {key[:-len(suffix)] for key in where if key.endswith(suffix)}
    if not layers:
        raise ValueError(f"no '<layer>{suffix}' tensors in the safetensors files of {folder}.")
    for key in where:
        prefix, role = key.rsplit(".", 1)
        if prefix not in layers and role != "scales":
            raise ValueError(f"tensor {key} in {where[key]} has no {prefix}{suffix} beside it; "
                             "the checkpoint is truncated or inconsistent.")
        if prefix in layers and dtypes[key] not in _ROLE_DTYPES[role][0]:
            raise ValueError(f"tensor {key} in {where[key]} has dtype {dtypes[key]}, which this "
                             f"loader does not read as {role} ({_ROLE_DTYPES[role][1]}).")
    for layer in sorted(layers):
        for role in roles:
            key = f"{layer}.{role}"
            if role not in optional and key not in where:
                raise ValueError(f"tensor {key} is missing (layer {layer} has "
                                 f"{layer}{suffix} in {where[layer + suffix]}); the checkpoint "
                                 "is truncated or inconsistent.")
    return {k: f for k, f in where.items() if k.rsplit(".", 1)[0] in layers}


def _chosen_layers(where: dict, names, path_dir) -> list:
    """The layers to read, sorted: every layer of ``where``, or ``names`` (checked)."""
    present = sorted({key.rsplit(".", 1)[0] for key in where})
    if names is None:
        return present
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise ValueError(f"names must be a collection of layer names (a list, say); got "
                         f"{names!r}.")
    names = list(names)
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"names must be a collection of layer names (strings); got {names!r}.")
    missing = sorted(set(names) - set(present))
    if missing:
        shown = present if len(present) <= 8 else present[:8] + ["..."]
        raise ValueError(f"no layer {missing[0]!r} in {path_dir}"
                         f"{f' (nor {missing[1:]})' if len(missing) > 1 else ''}; it has "
                         f"{len(present)}: {shown}.")
    return sorted(set(names))


def _read_layer(where: dict, layer: str, roles) -> dict:
    """``{role: array}`` of one layer's tensors (those ``where`` has), read from their files."""
    by_file = {}
    for role in roles:
        key = f"{layer}.{role}"
        if key in where:
            by_file.setdefault(where[key], []).append((role, key))
    out = {}
    for file, keys in by_file.items():
        with _opened(file) as handle:
            for role, key in keys:
                if handle.get_slice(key).get_dtype() == "BF16":
                    out[role] = _read_bf16(file, key)      # NumPy has no bfloat16
                else:
                    out[role] = handle.get_tensor(key)
    return out


def _read_bf16(file: Path, key: str) -> np.ndarray:
    """A BF16 tensor of a safetensors file as float32 (exact: bfloat16 is float32's top half),
    read from the file's own header (an 8-byte length, JSON, then the data), since safetensors'
    NumPy reader refuses the dtype. Scales of bfloat16 models are stored so (the scales follow
    the model's dtype); ``_scales`` then takes them as float16 where that is exact."""
    try:
        with open(file, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            info = json.loads(f.read(size))[key]
            begin, end = info["data_offsets"]
            f.seek(8 + size + begin)
            raw = np.frombuffer(f.read(end - begin), dtype="<u2")
        half = raw.astype(np.uint32) << np.uint32(16)
        return half.view(np.float32).reshape(info["shape"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"tensor {key} (BF16) in {file} could not be read ({e}); the file may "
                         "be truncated or corrupt.") from e


@contextlib.contextmanager
def _opened(file: Path):
    """``safe_open(file)`` (NumPy), its read errors as a ValueError that names the file."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(file), framework="np") as handle:
            yield handle
    except (SafetensorError, OSError, TypeError) as e:
        raise ValueError(f"{file} is not a readable safetensors file ({e}); it may be "
                         "truncated or corrupt.") from e
