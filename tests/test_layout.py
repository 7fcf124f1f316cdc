"""Marlin tiled layout: exact inverse, bijections, and the fragment semantics the kernel relies on."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from marlin_cupy import layout
from marlin_cupy.weights import QuantizedWeight

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def quantized(draw, act_order=None):
    bits = draw(st.sampled_from([4, 8]))
    group_size = draw(st.sampled_from([32, 64, 128, -1]))
    step = 128 if group_size == -1 else max(group_size, 16)
    k = step * draw(st.integers(1, 4))
    n = 64 * draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    g = 1 if group_size == -1 else k // group_size
    q = rng.integers(0, 1 << bits, size=(k, n), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.1, size=(g, n)).astype(np.float16)
    sym = draw(st.booleans())
    zeros = None if sym else rng.integers(0, 1 << bits, size=(g, n), dtype=np.uint8)
    use_act = draw(st.booleans()) if act_order is None else act_order
    g_idx = None
    if use_act and group_size != -1 and g > 1:
        g_idx = (rng.permutation(k) // group_size).astype(np.int32)
    return QuantizedWeight(q, scales, zeros, g_idx, bits, group_size)


class TestRoundTrip:
    @SETTINGS
    @given(quantized())
    def test_unpack_inverts_pack(self, qw):
        back = layout.unpack(layout.pack(qw))
        assert back.equals(qw)

    @SETTINGS
    @given(quantized())
    def test_packed_shapes_and_dtypes(self, qw):
        mw = layout.pack(qw)
        assert mw.qweight.dtype == np.int32
        assert mw.qweight.shape == (qw.k // 16, qw.n * 16 * qw.bits // 32)
        assert mw.scales.shape == qw.scales.shape and mw.scales.dtype == np.float16
        if qw.zeros is None:
            assert mw.zeros is None
        else:
            assert mw.zeros.shape == (qw.num_groups, qw.n * qw.bits // 32)
        assert (mw.perm is None) == (qw.g_idx is None)

    @SETTINGS
    @given(quantized(act_order=True))
    def test_act_order_rows_sorted_by_group(self, qw):
        assume(qw.g_idx is not None)  # a single group makes act-order meaningless (stored as None)
        mw = layout.pack(qw)
        groups = qw.g_idx[mw.perm]
        assert np.all(np.diff(groups) >= 0)


class TestPermutationsAreBijections:
    @pytest.mark.parametrize("bits", [4, 8])
    def test_fragment_perm(self, bits):
        p = layout.fragment_perm(bits)
        assert sorted(p.tolist()) == list(range(1024))

    def test_scale_perms(self):
        assert sorted(layout.scale_perm_grouped().tolist()) == list(range(64))
        assert sorted(layout.scale_perm_channel().tolist()) == list(range(32))


def _nibble(word, i):
    return (int(word) >> (4 * i)) & 0xF


class TestFragmentSemantics:
    """What the kernel assumes of each lane's 16-byte load, checked element by element.

    PTX ISA, mma.m16n8k16 (f16): the B fragment of lane l holds b0,b1 at rows 2t, 2t+1 and
    b2,b3 at rows 2t+8, 2t+9 of column g, with t = l % 4, g = l // 4. The kernel dequantizes
    int32 word j of lane l (tile j of the 16x64 block) with lop3: nibbles (0,4) -> b0,b1 of the
    first n8 half, (1,5) -> b2,b3, and after >> 8 nibbles (2,6), (3,7) -> the second n8 half.
    """

    def test_4bit_lane_words(self):
        rng = np.random.default_rng(0)
        k, n = 32, 128
        q = rng.integers(0, 16, size=(k, n), dtype=np.uint8)
        qweight = layout.pack_codes(q, 4)                    # [K/16, 2N]
        where = {0: (0, 0), 4: (1, 0), 1: (8, 0), 5: (9, 0),  # nibble -> (row offset, n8 half)
                 2: (0, 1), 6: (1, 1), 3: (8, 1), 7: (9, 1)}
        for kt in range(k // 16):
            for blk in range(n // 64):
                for lane in range(32):
                    t, g = lane % 4, lane // 4
                    for j in range(4):
                        word = qweight[kt, blk * 128 + lane * 4 + j]
                        for nib, (roff, half) in where.items():
                            row = 16 * kt + 2 * t + roff
                            col = 64 * blk + 16 * j + 8 * half + g
                            assert _nibble(word, nib) == q[row, col], (kt, blk, lane, j, nib)

    def test_grouped_scales_one_load_per_lane(self):
        # Lane l reads 8 consecutive scales at 8*(l//4) in each 64 columns: columns l//4 + 8j.
        s = np.arange(128, dtype=np.float16)[None, :]
        sp = layout.pack_scales(s, 128, 1024)
        for blk in range(2):
            for g in range(8):
                got = sp[0, 64 * blk + 8 * g: 64 * blk + 8 * g + 8]
                assert np.array_equal(got, s[0, 64 * blk + g + 8 * np.arange(8)])

    def test_channel_scales_match_accumulator_columns(self):
        # Accumulator c0,c1 of lane l sit at columns 2t, 2t+1 of each n8 block (t = l % 4).
        s = np.arange(64, dtype=np.float16)[None, :]
        sp = layout.pack_scales(s, -1, 128)
        for blk in range(2):
            for t in range(4):
                got = sp[0, 32 * blk + 8 * t: 32 * blk + 8 * t + 8]
                cols = 32 * blk + 2 * t + np.array([0, 1, 8, 9, 16, 17, 24, 25])
                assert np.array_equal(got, s[0, cols])

    def test_zero_points_one_word_per_lane(self):
        rng = np.random.default_rng(1)
        z = rng.integers(0, 16, size=(2, 128), dtype=np.uint8)
        zp = layout.pack_zeros(z, 4)                          # [2, 16]
        order = [0, 2, 4, 6, 1, 3, 5, 7]                       # nibble p holds column g + 8*order[p]
        for grp in range(2):
            for blk in range(2):
                for g in range(8):
                    word = zp[grp, 8 * blk + g]
                    for p in range(8):
                        assert _nibble(word, p) == z[grp, 64 * blk + g + 8 * order[p]]


class TestBadInputs:
    def test_k_not_multiple_of_16(self):
        qw = QuantizedWeight(np.zeros((40, 64), np.uint8), np.ones((1, 64), np.float16), None,
                             None, 4, -1)
        with pytest.raises(ValueError, match="K=40"):
            layout.pack(qw)

    def test_n_not_multiple_of_64(self):
        qw = QuantizedWeight(np.zeros((128, 96), np.uint8), np.ones((1, 96), np.float16), None,
                             None, 4, 128)
        with pytest.raises(ValueError, match="N=96"):
            layout.pack(qw)

    def test_uneven_act_order_groups(self):
        g_idx = np.zeros(128, np.int32)
        g_idx[:10] = 1  # group 0 has 118 rows, group 1 has 10
        qw = QuantizedWeight(np.zeros((128, 64), np.uint8), np.ones((2, 64), np.float16), None,
                             g_idx, 4, 64)
        with pytest.raises(ValueError, match="exactly group_size=64"):
            layout.pack(qw)

    def test_act_order_group_without_rows_reported(self):
        g_idx = (np.arange(256) // 64).astype(np.int32)
        g_idx[g_idx == 3] = 0            # group 3 gets no rows, group 0 gets 128
        qw = QuantizedWeight(np.zeros((256, 64), np.uint8), np.ones((4, 64), np.float16), None,
                             g_idx, 4, 64)
        with pytest.raises(ValueError, match=r"range 0\.\.128"):
            layout.pack(qw)

    @SETTINGS
    @given(quantized(), st.data())
    def test_code_changed_in_place_past_the_bit_width_refused(self, qw, data):
        # pack packs 32 // bits codes per int32: a code of 2**bits or more would spill into
        # its neighbour's bits, so pack checks the codes again rather than trust construction.
        assume(qw.bits == 4)          # every uint8 is an 8-bit code
        row = data.draw(st.integers(0, qw.k - 1))
        col = data.draw(st.integers(0, qw.n - 1))
        code = data.draw(st.integers(1 << qw.bits, 255))
        qw.q[row, col] = code
        with pytest.raises(ValueError, match=rf"code {code} at row {row}, column {col}"):
            layout.pack(qw)

    def test_codes_replaced_by_another_dtype_refused(self):
        qw = QuantizedWeight(np.zeros((128, 64), np.uint8), np.ones((1, 64), np.float16), None,
                             None, 4, -1)
        qw.q = qw.q.astype(np.int64)
        with pytest.raises(ValueError, match="q must be a uint8 array.*dtype=int64"):
            layout.pack(qw)

    def test_scale_changed_in_place_to_nan_refused(self):
        qw = QuantizedWeight(np.zeros((128, 64), np.uint8), np.ones((1, 64), np.float16), None,
                             None, 4, -1)
        qw.scales[0, 9] = np.nan
        with pytest.raises(ValueError, match=r"scales\[0, 9\] = nan"):
            layout.pack(qw)


def _pack_codes_by_gather(q, bits):
    """The format written the slow, literal way: tiles, the 1024-entry permutation, LSB packing."""
    k, n = q.shape
    t = q.reshape(k // 16, 16, n // 16, 16).transpose(0, 2, 1, 3)       # [K/16, N/16, 16, 16]
    t = t.reshape(k // 16, n // 64, 1024)[..., layout.fragment_perm(bits)]
    t = t.reshape(k // 16, -1, 32 // bits).astype(np.uint32)             # [K/16, words, f]
    shifts = bits * np.arange(32 // bits, dtype=np.uint32)
    return np.bitwise_or.reduce(t << shifts, axis=-1).view(np.int32)


class TestFastPackMatchesLiteralFormat:
    @SETTINGS
    @given(quantized(act_order=False))
    def test_transpose_pack_equals_gather_pack(self, qw):
        assert np.array_equal(layout.pack_codes(qw.q, qw.bits), _pack_codes_by_gather(qw.q, qw.bits))


class TestFmaScales:
    """``MarlinWeight.fma_scales`` (NOTES.md entry 87): whether every scale lies below 2^-4 in
    magnitude, so that the kernels may take the group scale inside the unpacking."""

    @SETTINGS
    @given(quantized(), st.floats(1e-3, 0.2), st.booleans())
    def test_pack_decides_from_the_largest_scale(self, qw, top, negative):
        scales = qw.scales.copy()
        scales.flat[0] = np.float16(-top if negative else top)
        qw = QuantizedWeight(qw.q, scales, qw.zeros, qw.g_idx, qw.bits, qw.group_size)
        mw = layout.pack(qw)
        want = bool(np.abs(scales.astype(np.float32)).max() < 2.0 ** -4)
        assert mw.fma_scales is want
        assert mw.to_host().fma_scales is want
        assert layout.pack(layout.unpack(mw)).fma_scales is want

    def test_the_limit_and_non_finite_scales(self):
        from marlin_cupy.weights import scales_fit_fma
        below = np.array([0x2BFF], dtype=np.uint16).view(np.float16)     # 65504 / 2^20
        assert scales_fit_fma(below) and scales_fit_fma(-below)
        assert not scales_fit_fma(np.array([2.0 ** -4], dtype=np.float16))
        for bad in (np.inf, -np.inf, np.nan):
            assert not scales_fit_fma(np.array([1e-3, bad], dtype=np.float16))
        assert scales_fit_fma(np.array([0.0, 6e-8], dtype=np.float16))   # zero, subnormal
        assert not scales_fit_fma(np.zeros((0, 4), dtype=np.float16))

    def test_a_replaced_scale_array_is_checked_again(self):
        import dataclasses
        qw = QuantizedWeight(np.zeros((128, 64), np.uint8), np.full((1, 64), 0.01, np.float16),
                             None, None, 4, 128)
        mw = layout.pack(qw)
        assert mw.fma_scales is True
        big = mw.scales.copy()
        big[0, 5] = np.float16(0.1)
        assert dataclasses.replace(mw, scales=big).fma_scales is False
        with pytest.raises(TypeError):
            type(mw)(mw.qweight, mw.scales, mw.zeros, mw.perm, mw.bits, mw.group_size, mw.k,
                     mw.n, True)     # not an argument: always computed from the scales

    @pytest.mark.parametrize("first,then", [(0.01, 0.5), (0.5, 0.01)])
    def test_an_assigned_scale_array_is_checked_again(self, first, then):
        qw = QuantizedWeight(np.zeros((128, 64), np.uint8), np.full((1, 64), first, np.float16),
                             None, None, 4, 128)
        mw = layout.pack(qw)
        assert mw.fma_scales is (first < 2.0 ** -4)
        mw.scales = np.full((1, 64), then, np.float16)
        assert mw.fma_scales is (then < 2.0 ** -4)

    def test_not_writable(self):
        mw = layout.pack(QuantizedWeight(np.zeros((128, 64), np.uint8),
                                         np.full((1, 64), 0.5, np.float16), None, None, 4, 128))
        with pytest.raises(AttributeError):
            mw.fma_scales = True
        assert mw.fma_scales is False
