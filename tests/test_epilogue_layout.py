"""The staged epilogue of the swapped wgmma layouts (``MARLIN_EPI_STAGE``, cuda/marlin.cuh
``store_result_sw_staged``), on a model of its instructions: the fragments, stmatrix.trans
into the swizzled strip, and the 16-byte reads back, reproduce every element of the warp's
strip of C, and neither the stores nor the reads hit a shared-memory bank twice in one phase.

The model of ``stmatrix.sync.aligned.m8n8.x4.trans.shared.b16`` (PTX ISA): register m of lane
t holds elements (t // 4, 2 (t % 4)) and (t // 4, 2 (t % 4) + 1) of matrix m; with .trans,
row c of matrix m is written, as column c of the fragment, at the address lane 8 m + c gives.
The GPU tests compare the build's output with the direct stores bitwise
(tests/test_kernel_gpu.py::test_staged_epilogue_matches).
"""
import itertools
from pathlib import Path

import numpy as np
import pytest


def epi_chunk(r: int, q: int, cpr: int) -> int:
    """cuda/marlin.cuh epi_chunk: chunk (row r, q) of a warp's strip, XOR-swizzled per line."""
    lin = r * cpr + q
    return (lin & ~7) | ((lin ^ (lin >> 3)) & 7)


def fragment(strip, lane, j, h, i):
    """for_each_swapped: element i of acc[j][h] of `lane` is strip row 8h + 2(lane%4) + i%2,
    column 16j + lane/4 + 8(i/2)."""
    return strip[8 * h + 2 * (lane % 4) + i % 2, 16 * j + lane // 4 + 8 * (i // 2)]


# (columns per warp, swap_ab): every swapped wgmma warp (16, 32 or 64 columns; the kernel
# static_asserts it). At 128 columns per warp the swizzle would leave 2-way conflicts.
SHAPES = [(wc, sw) for wc in (16, 32, 64) for sw in (2, 4, 8, 16)]


@pytest.mark.parametrize("warp_cols, sw", SHAPES)
def test_staged_epilogue_reproduces_the_strip_without_bank_conflicts(warp_cols, sw):
    tiles, rows, cpr = warp_cols // 16, 8 * sw, warp_cols // 8
    strip = np.arange(rows * warp_cols, dtype=np.int64).reshape(rows, warp_cols)
    smem = np.full((rows * cpr, 8), -1, dtype=np.int64)          # 16-byte chunks of 8 halves
    for j, h0 in itertools.product(range(tiles), range(0, sw, 2)):
        # the x4's registers: matrix m = fragment (j, h0 + m // 2), half hi = m % 2
        mats = np.zeros((4, 8, 8), dtype=np.int64)
        for m, lane, e in itertools.product(range(4), range(32), range(2)):
            h, hi = h0 + m // 2, m % 2
            mats[m, lane // 4, 2 * (lane % 4) + e] = fragment(strip, lane, j, h, 2 * hi + e)
        addresses = {}
        for lane in range(32):
            m, c = lane // 8, lane % 8
            row, q = 8 * (h0 + m // 2) + c, 2 * j + m % 2
            addresses[lane] = epi_chunk(row, q, cpr)
            smem[addresses[lane]] = mats[m, :, c]                 # .trans: column c
        # one 8 x 8 matrix per phase: its 8 rows on 8 different 16-byte bank groups
        for m in range(4):
            groups = {addresses[8 * m + c] % 8 for c in range(8)}
            assert len(groups) == 8, (warp_cols, sw, j, h0, m)
    assert (smem >= 0).all(), "every chunk of the strip written"
    # the read-back: lane l of pass p takes chunk l + 32 p, row (l + 32 p) // cpr
    out = np.zeros_like(strip)
    for p in range(rows * cpr // 32):
        phys = []
        for lane in range(32):
            lin = lane + 32 * p
            row, q = lin // cpr, lin % cpr
            phys.append(epi_chunk(row, q, cpr))
            out[row, 8 * q:8 * q + 8] = smem[phys[-1]]
        for quarter in range(4):          # a 16-byte load is served 8 lanes at a time
            assert len({a % 8 for a in phys[8 * quarter:8 * quarter + 8]}) == 8
    np.testing.assert_array_equal(out, strip)


@pytest.mark.parametrize("cpr", (2, 4, 8))
def test_write_strip_steps_address_the_same_chunks(cpr):
    """write_strip's step `it` of lane `ln` reads strip position 32 it + (epi_chunk(0, ln) ^
    4 (it % 2)) and writes row 32 / cpr * it + ln // cpr, chunk ln % cpr: the chunk
    l = 32 it + ln of the plain formula, for every step of the largest strip (128 rows)."""
    for it in range(128 * cpr // 32):
        for ln in range(32):
            lin = 32 * it + ln
            row, q = lin // cpr, lin % cpr
            assert 32 * it + (epi_chunk(0, ln, cpr) ^ (4 * (it % 2))) == epi_chunk(row, q, cpr)
            assert (32 // cpr * it + ln // cpr, ln % cpr) == (row, q)


def _kernel_source() -> str:
    """cuda/marlin.cuh with its whitespace runs made single spaces."""
    src = (Path(__file__).resolve().parent.parent / "cuda" / "marlin.cuh").read_text()
    return " ".join(src.split())


def test_the_model_restates_the_kernels_expressions():
    """epi_chunk and write_strip's read here are those of cuda/marlin.cuh, as written there: a
    change of the kernel's must be made in the model too (or these tests check an old layout)."""
    src = _kernel_source()
    assert ("static __device__ __forceinline__ int epi_chunk(int r, int q) { "
            "const int l = r * EPI_CPR + q; return (l & ~7) | ((l ^ (l >> 3)) & 7); }") in src
    assert "const int r = ln / EPI_CPR, pos = epi_chunk(0, ln);" in src
    assert "strip[32 * it + (pos ^ (4 * (it % 2)))]" in src


def test_epi_chunk_is_a_bijection_within_each_line():
    for cpr in (2, 4, 8):
        chunks = [epi_chunk(r, q, cpr) for r in range(128) for q in range(cpr)]
        assert sorted(chunks) == list(range(128 * cpr))
        assert all(a // 8 == (r * cpr + q) // 8
                   for a, (r, q) in zip(chunks, itertools.product(range(128), range(cpr))))


def frag_elem(w, f, lane, i, sw, warp_cols):
    """cuda/marlin.cuh frag_elem (swapped): the C position (row in the slab, column in the tile)
    of component i of float4 f * 32 + lane of warp slot w in a scratch slot."""
    j, h = f // sw, f % sw
    return 8 * h + 2 * (lane % 4) + i % 2, w * warp_cols + 16 * j + lane // 4 + 8 * (i // 2)


@pytest.mark.parametrize("sw, n_warps, warp_cols, warps, waiters",
                         [(8, 8, 16, 8, 4), (16, 8, 16, 8, 6), (8, 8, 32, 8, 9), (16, 8, 32, 8, 3),
                          (8, 4, 64, 4, 2), (16, 4, 32, 4, 1)])
def test_shared_sum_units_cover_the_tile_once(sw, n_warps, warp_cols, warps, waiters):
    """coop_sum_staged: units of 16 rows x one warp slot, split among the waiters and their
    warps, write every element of the tile once, where coop_sum wrote it (frag_elem)."""
    tiles, cpr = warp_cols // 16, warp_cols // 8
    units = sw // 2 * n_warps
    seen = {}
    for rank in range(waiters):
        u_begin, u_end = units * rank // waiters, units * (rank + 1) // waiters
        for warp in range(warps):
            for u in range(u_begin + warp, u_end, warps):
                w, p = u % n_warps, u // n_warps
                # the float4s this warp sums: fragment j * sw + 2p + hh, every lane
                loaded = {}
                for j, hh, lane, i in itertools.product(range(tiles), range(2), range(32),
                                                        range(4)):
                    f = j * sw + 2 * p + hh
                    loaded[frag_elem(w, f, lane, i, sw, warp_cols)] = (w, f, lane, i)
                # the strip's 16 x warp_cols elements, written at rows 16p.., columns w * wc..
                for r, col in itertools.product(range(16), range(warp_cols)):
                    pos = (16 * p + r, w * warp_cols + col)
                    assert pos in loaded, pos          # its value was summed by this warp
                    assert pos not in seen, pos
                    seen[pos] = loaded[pos]
                assert len(loaded) == 16 * warp_cols
                assert all(16 * p <= r < 16 * p + 16 for r, _ in loaded)
    assert len(seen) == 8 * sw * n_warps * warp_cols
    # the read-back (write_strip<16>): step it of lane ln reads chunk l = 32 it + ln of the
    # 16-row strip, where stage_pair put it; whole warps of chunks, so every chunk once
    read = [32 * it + (epi_chunk(0, ln, cpr) ^ (4 * (it % 2)))
            for it in range(16 * cpr // 32) for ln in range(32)]
    assert read == [epi_chunk(lin // cpr, lin % cpr, cpr) for lin in range(16 * cpr)]


@pytest.mark.parametrize("name, staged_sites", [
    # serial chain's last CTA + a whole last column: 2 sites x 2 column tiles x 8 fragment pairs
    ("t256_m8_n16_k8_s4_g8_fp32_sw16_wg", (32, 32)),
    # a whole last column (1 tile x 4 pairs) + the shared sum (1 per unit)
    ("t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16", (5, 5)),
    # 128 registers per thread (two CTAs of 256): staged only with 2; 2 sites x 2 tiles x 4 pairs
    ("t256_m4_n16_k8_s3_g8_fp32_sw8_wg_w32_b2", (0, 16)),
    ("t512_m4_n32_k8_s4_g8_fp32_sw8_wg_w32", (0, 16)),
    # 16-row tiles (swap_ab=2): staged only with 2; serial + whole column, 1 tile x 1 pair each
    ("t128_m1_n16_k8_s4_g8_fp32_sw2_wg", (0, 4 * 2)),
])
def test_the_switch_reaches_the_code(name, staged_sites):
    """The GPU test compares the staged build with the direct one; it could not fail if the
    switch never reached the code. In the PTX, the staged builds (MARLIN_EPI_STAGE 1 and 2)
    have exactly their stmatrix stores and the direct build (0) none."""
    pytest.importorskip("cupy", reason="NVRTC comes with CuPy")
    from cupy.cuda import nvrtc
    from marlin_cupy import jit, kernels
    from marlin_cupy.config import KernelConfig
    cfg = KernelConfig.from_name(name)

    def ptx(prefix):
        prog = nvrtc.createProgram(prefix + kernels.marlin_source(cfg), "k.cu", [], [])
        try:
            nvrtc.compileProgram(prog, list(jit.BASE_OPTIONS) + [
                "-arch=compute_90a", f"-I{jit.cuda_include_dir()}",
                "--device-as-default-execution-space"])
            out = nvrtc.getPTX(prog)
            return out.decode() if isinstance(out, bytes) else out
        finally:
            nvrtc.destroyProgram(prog)

    assert ptx("#define MARLIN_EPI_STAGE 0\n").count("stmatrix") == 0
    for mode, sites in zip((1, 2), staged_sites):
        assert ptx(f"#define MARLIN_EPI_STAGE {mode}\n").count(
            "stmatrix.sync.aligned.m8n8.x4.trans") == sites, mode
