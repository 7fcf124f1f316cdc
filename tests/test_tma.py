"""``marlin_cupy.tma``: the tensor maps' arguments, checked before the driver sees them, and what
``activation_map`` asks of the driver (through a stand-in with ``cuTensorMapEncodeTiled``'s
signature: no GPU or driver needed). The map's effect on the GPU: tests/test_tma_gpu.py."""
import ctypes

import pytest

from marlin_cupy import tma


@pytest.mark.parametrize("kw,match", [
    (dict(address=0x1008), "16-byte aligned"),
    (dict(strides=(100,)), "multiples of 16"),
    (dict(box=(64, 300)), "1..256"),
    (dict(box=(4, 8)), "multiple of 16 bytes"),
    (dict(box=(128, 8), swizzle=tma.SWIZZLE_128B), "at most 128 bytes"),
    (dict(strides=()), "one stride fewer"),
    (dict(dtype=99), "data type"),
])
def test_arguments_the_driver_would_refuse_are_refused_in_our_terms(kw, match):
    args = dict(address=0x10000, dtype=tma.FLOAT16, dims=(4096, 64), strides=(8192,),
                box=(64, 64), swizzle=tma.SWIZZLE_128B)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        tma.check_tiled(**args)


def test_the_activation_map_asks_for_the_kernels_layout(monkeypatch):
    seen = {}

    def fake(at, dtype, rank, address, dims, strides, box, elem, interleave, swizzle, l2, oob):
        seen.update(dtype=dtype, rank=rank, address=address, dims=list(dims[:rank]),
                    strides=list(strides[:rank - 1]), box=list(box[:rank]),
                    elem=list(elem[:rank]), interleave=interleave, swizzle=swizzle, oob=oob)
        assert at % 64 == 0                               # CUtensorMap's alignment
        ctypes.memset(at, 0xAB, tma.MAP_BYTES)
        return 0
    monkeypatch.setattr(tma, "_encode", lambda: fake)
    raw = tma.activation_map(0x7F0000001000, 37, 5120, 64)
    assert raw == b"\xab" * 128
    # x as [m, k] fp16: k innermost, rows 2k bytes apart; boxes of one 128-byte column region
    # (64 halves) x tile_m rows, swizzled by 128 bytes; rows past m read as zeros (oob 0)
    assert seen == dict(dtype=tma.FLOAT16, rank=2, address=0x7F0000001000, dims=[5120, 37],
                        strides=[10240], box=[64, 64], elem=[1, 1], interleave=0,
                        swizzle=tma.SWIZZLE_128B, oob=0)


def test_a_refusal_by_the_driver_says_what_was_asked(monkeypatch):
    monkeypatch.setattr(tma, "_encode", lambda: (lambda *a: 1))
    with pytest.raises(RuntimeError, match="CUresult 1 .*box \\(64, 128\\)"):
        tma.activation_map(0x10000, 8, 1024, 128)
