"""quantize(): the error bound, code ranges, clip search, degenerate groups and bad inputs.

The bound asserted everywhere is ``|w - dequant| <= scale / 2`` against the *stored* float16
scale, for symmetric and asymmetric types alike (derivation in ``marlin_cupy/quantize.py``:
the stored scale is never below the ideal one, so the code grid covers the group's range with
half a step to spare, and the asymmetric zero point is an integer, so rounding it only shifts
the grid). ``dequantize`` is exact in float32 (a code difference of at most 255 times an
11-bit float16 mantissa fits in 24 bits), and the difference is taken in float64, so the only
slack needed, ``REL_SLACK``, covers float64 rounding of ``w / scale`` and of the range
arithmetic; a wrong rounding direction or a wrong group would exceed it by a large fraction
of a scale.
"""
import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from marlin_cupy.quantize import CLIP_FACTORS, ZERO_GROUP_SCALE, quantize

# The module, not the function: the package exports the function under the module's name.
quantize_module = importlib.import_module("marlin_cupy.quantize")

SETTINGS = settings(max_examples=40, deadline=None)
REL_SLACK = 1e-9


@st.composite
def weights(draw, dtypes=(np.float16, np.float32, np.float64)):
    """(w, bits, group_size): K a multiple of the group size up to 512, N a multiple of 8 up
    to 256, magnitudes from 1e-4 to 1e3, Gaussian or heavy-tailed, centred or shifted away
    from 0 (one-signed groups), with or without exact zeros (values kept inside the float16
    range so that every dtype holds them)."""
    bits = draw(st.sampled_from([4, 8]))
    group_size = draw(st.sampled_from([32, 64, 128, -1]))
    step = 16 if group_size == -1 else group_size
    k = step * draw(st.integers(1, 512 // step))
    n = 8 * draw(st.integers(1, 32))
    dtype = draw(st.sampled_from(dtypes))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    magnitude = 10.0 ** rng.uniform(-4, 3)
    if draw(st.booleans()):
        w = rng.standard_normal((k, n))
    else:
        w = rng.standard_t(2, size=(k, n))
    w = w + draw(st.sampled_from([0.0, 0.0, 20.0, -20.0]))
    w = np.clip(w * magnitude, -6e4, 6e4)
    if draw(st.booleans()):
        w[rng.random((k, n)) < 0.05] = 0.0
    return w.astype(dtype), bits, group_size


def element_scales(qw):
    """float64 [K, N]: the stored scale that applies to every element."""
    return qw.scales.astype(np.float64)[qw.row_groups()]


def abs_error(w, qw):
    return np.abs(w.astype(np.float64) - qw.dequantize().astype(np.float64))


def group_sq_error(w, qw):
    """float64 [G, N]: squared error summed over each group's rows."""
    err = np.square(w.astype(np.float64) - qw.dequantize().astype(np.float64))
    return err.reshape(qw.num_groups, -1, qw.n).sum(axis=1)


def report(diff, ref):
    return (f"max|diff|={np.max(diff):.3g} mean|diff|={np.mean(diff):.3g} "
            f"max|ref|={np.max(np.abs(ref)):.3g} mean|ref|={np.mean(np.abs(ref)):.3g}")


class TestErrorBound:
    @SETTINGS
    @given(weights(), st.booleans())
    def test_error_at_most_half_a_stored_scale(self, case, sym):
        w, bits, group_size = case
        qw = quantize(w, bits, group_size, sym)
        err, half = abs_error(w, qw), element_scales(qw) / 2
        excess = err - half * (1 + REL_SLACK)
        assert np.all(excess <= 0), report(err / half, w)

    @SETTINGS
    @given(weights(), st.booleans())
    def test_stored_scale_is_not_below_the_ideal_scale(self, case, sym):
        # The convention the bound rests on: rounding the scale *up* to float16.
        w, bits, group_size = case
        qw = quantize(w, bits, group_size, sym)
        groups = w.astype(np.float64).reshape(qw.num_groups, -1, qw.n)     # [G, S, N]
        if sym:
            ideal = np.abs(groups).max(axis=1) / (2 ** (bits - 1) - 1)
        else:
            lo = np.minimum(groups.min(axis=1), 0)
            hi = np.maximum(groups.max(axis=1), 0)
            ideal = (hi - lo) / (2 ** bits - 1)
        stored = qw.scales.astype(np.float64)
        assert np.all(stored >= ideal * (1 - REL_SLACK))
        # ... and is the *smallest* such float16: the next one down is below the ideal.
        nonzero = ideal > 0
        below = np.nextafter(qw.scales, np.float16(0)).astype(np.float64)
        assert np.all(below[nonzero] < ideal[nonzero] * (1 + REL_SLACK))

    def test_matches_a_per_group_loop_reference(self):
        # Grouping must run along K within each column; a loop over (group, column) is the
        # plainest statement of that.
        rng = np.random.default_rng(7)
        w = rng.standard_normal((96, 8)).astype(np.float32)
        for sym in (True, False):
            qw = quantize(w, bits=4, group_size=32, sym=sym)
            for g in range(3):
                for n in range(8):
                    col = w[32 * g: 32 * (g + 1), n].astype(np.float64)
                    if sym:
                        lo, hi, steps = -np.abs(col).max(), np.abs(col).max(), 14
                    else:
                        lo, hi, steps = min(col.min(), 0), max(col.max(), 0), 15
                    scale = np.float16((hi - lo) / steps)
                    if float(scale) < (hi - lo) / steps:
                        scale = np.nextafter(scale, np.float16(np.inf))
                    zero = 8 if sym else int(np.rint(-lo / float(scale)))
                    codes = np.rint(col / float(scale)) + zero
                    assert qw.scales[g, n] == scale
                    assert np.array_equal(qw.q[32 * g: 32 * (g + 1), n], codes.astype(np.uint8))
                    if not sym:
                        assert qw.zeros[g, n] == zero


class TestCodeRange:
    @SETTINGS
    @given(weights(), st.booleans(), st.booleans())
    def test_fields_types_and_ranges(self, case, sym, clip):
        w, bits, group_size = case
        qw = quantize(w, bits, group_size, sym, clip_search=clip)
        k, n = w.shape
        g = 1 if group_size == -1 else k // group_size
        assert qw.q.dtype == np.uint8 and qw.q.shape == (k, n)
        assert int(qw.q.max()) < 2 ** bits
        assert qw.scales.dtype == np.float16 and qw.scales.shape == (g, n)
        assert np.all(np.isfinite(qw.scales)) and np.all(qw.scales > 0)
        assert (qw.bits, qw.group_size, qw.g_idx) == (bits, group_size, None)
        if sym:
            assert qw.zeros is None
        else:
            assert qw.zeros.dtype == np.uint8 and qw.zeros.shape == (g, n)
            assert int(qw.zeros.max()) < 2 ** bits

    @SETTINGS
    @given(weights())
    def test_symmetric_codes_avoid_code_zero_without_clipping(self, case):
        # scale = max|w| / (2**(bits-1) - 1) puts every value within +-(2**(bits-1) - 1) steps.
        w, bits, group_size = case
        qw = quantize(w, bits, group_size, sym=True)
        assert int(qw.q.min()) >= 1

    @SETTINGS
    @given(weights(dtypes=(np.float16,)))
    def test_input_dtype_does_not_change_the_result(self, case):
        w16, bits, group_size = case
        ref = quantize(w16, bits, group_size, sym=False)
        for dtype in (np.float32, np.float64):
            assert quantize(w16.astype(dtype), bits, group_size, sym=False).equals(ref)


class TestDegenerateGroups:
    def test_all_zero_group_gets_scale_one_and_dequantizes_to_zero(self):
        w = np.zeros((64, 8), dtype=np.float32)
        w[32:, :] = np.linspace(-1, 1, 32 * 8).reshape(32, 8)
        for sym in (True, False):
            qw = quantize(w, bits=4, group_size=32, sym=sym)
            assert np.all(qw.scales[0] == ZERO_GROUP_SCALE)
            assert np.all(qw.dequantize()[:32] == 0)

    def test_tiny_group_gets_a_positive_scale_and_keeps_the_bound(self):
        w = np.full((32, 8), 1e-9, dtype=np.float64)
        w[::2] = -3e-10
        for sym in (True, False):
            qw = quantize(w, bits=4, group_size=32, sym=sym)
            assert np.all(qw.scales > 0)
            assert np.all(abs_error(w, qw) <= element_scales(qw) / 2 * (1 + REL_SLACK))

    @pytest.mark.parametrize("sign", [1.0, -1.0])
    def test_one_signed_group_widens_the_asymmetric_range_to_zero(self, sign):
        # All values of one sign: the range [lo, hi] is widened to contain 0, so the zero point
        # is an end code (0 or 15), 0.0 is representable and the bound still holds.
        rng = np.random.default_rng(3)
        w = sign * rng.uniform(1.0, 2.0, size=(32, 8)).astype(np.float32)
        qw = quantize(w, bits=4, group_size=32, sym=False)
        assert np.all(qw.zeros == (0 if sign > 0 else 15))
        assert np.all(abs_error(w, qw) <= element_scales(qw) / 2 * (1 + REL_SLACK))

    def test_largest_weights_whose_dequantized_values_fit_float16(self):
        # 65464 = 7 * 9352 (a float16): dequantizes exactly. 65465 needs the next scale up,
        # 9360, and 7 * 9360 = 65520 rounds to inf in float16.
        qw = quantize(np.full((32, 8), 65464.0), bits=4, group_size=32, sym=True)
        assert np.all(qw.scales == np.float16(9352.0))
        assert np.all(qw.dequantize() == 65464.0)
        with pytest.raises(ValueError, match=r"dequantized value 65520 .* float16 maximum 65504"):
            quantize(np.full((32, 8), 65465.0), bits=4, group_size=32, sym=True)


def big_weights():
    """(w, bits, group_size, sym, clip) with max|w| from 1e4 to 3e5: near and past the float16
    range, where a scale may fit float16 but (q - zero) * scale not."""
    return st.tuples(st.sampled_from([4, 8]), st.sampled_from([32, -1]), st.booleans(),
                     st.booleans(), st.floats(4.0, 5.5), st.integers(0, 2**32 - 1))


class TestFloat16Range:
    """The kernels dequantize to float16: every (q - zero) * scale must be finite there."""

    @SETTINGS
    @given(big_weights())
    def test_dequantized_values_fit_float16_or_quantize_refuses(self, case):
        bits, group_size, sym, clip, exponent, seed = case
        rng = np.random.default_rng(seed)
        w = rng.uniform(-1, 1, size=(64, 16)) * 10.0 ** exponent
        try:
            qw = quantize(w, bits, group_size, sym, clip_search=clip)
        except ValueError as e:
            assert "float16 maximum 65504" in str(e)
            return
        deq = qw.dequantize()
        assert np.all(np.abs(deq) <= 65504), report(np.abs(deq), w)
        assert np.max(np.abs(w)) <= 65504

    @pytest.mark.parametrize("sym", [True, False])
    def test_scale_fits_but_dequantized_value_does_not(self, sym):
        # w = 1e5: the scale (1e5 / 7 or 1e5 / 15) is a float16, but the largest weight is not.
        with pytest.raises(ValueError, match=r"group 0 of column 0 has max\|w\| = 100000, "
                                             r"beyond the float16 maximum 65504"):
            quantize(np.full((128, 8), 1e5), sym=sym)


class TestClipSearch:
    @SETTINGS
    @given(weights(), st.booleans())
    def test_never_worse_than_no_clipping_per_group(self, case, sym):
        w, bits, group_size = case
        plain = group_sq_error(w, quantize(w, bits, group_size, sym))
        clipped = group_sq_error(w, quantize(w, bits, group_size, sym, clip_search=True))
        # 1e-12 relative: only the float64 summation order differs between the two sums.
        assert np.all(clipped <= plain * (1 + 1e-12)), report(clipped - plain, plain)

    @pytest.mark.parametrize("sym", [True, False])
    def test_strictly_better_on_heavy_tails(self, sym):
        w = np.random.default_rng(11).standard_t(3, size=(512, 128)).astype(np.float32)
        plain = group_sq_error(w, quantize(w, 4, 128, sym)).sum()
        clipped = group_sq_error(w, quantize(w, 4, 128, sym, clip_search=True)).sum()
        assert clipped < 0.95 * plain, (clipped, plain)

    def test_factors_start_with_no_clipping(self):
        assert CLIP_FACTORS[0] == 1.0 and len(CLIP_FACTORS) == len(set(CLIP_FACTORS))
        assert all(0 < f <= 1 for f in CLIP_FACTORS)


class TestColumnBlocks:
    """Large layers are processed in column blocks; the blocks must not change anything."""

    @pytest.mark.parametrize("sym,clip", [(True, False), (False, True)])
    def test_blocked_equals_unblocked(self, monkeypatch, sym, clip):
        w = np.random.default_rng(5).standard_normal((128, 40)).astype(np.float32)
        whole = quantize(w, 4, 64, sym, clip_search=clip)
        monkeypatch.setattr(quantize_module, "_BLOCK_ELEMENTS", 128 * 3)   # 3 columns a block
        assert quantize(w, 4, 64, sym, clip_search=clip).equals(whole)

    def test_non_finite_report_spans_blocks(self, monkeypatch):
        monkeypatch.setattr(quantize_module, "_BLOCK_ELEMENTS", 16 * 2)     # 2 rows a block
        w = np.ones((64, 16), dtype=np.float32)
        w[9, 3], w[40, 0], w[41, 15] = np.nan, np.inf, -np.inf
        with pytest.raises(ValueError, match=r"3 non-finite .* w\[9, 3\]"):
            quantize(w, group_size=32)


class TestBadInputs:
    @pytest.mark.parametrize("w,kwargs,match", [
        (np.ones((128, 8), dtype=np.int32), {}, "dtype=int32"),
        (np.ones((128, 8), dtype=np.int8), {}, "not cast implicitly"),
        (np.ones((128, 8), dtype=bool), {}, "dtype=bool"),
        (np.ones((128, 8), dtype=np.complex64), {}, "dtype=complex64"),
        (np.ones(128, dtype=np.float32), {}, "2-D"),
        (np.ones((2, 128, 8), dtype=np.float32), {}, "2-D"),
        (np.ones((0, 8), dtype=np.float32), {"group_size": -1}, "at least 1"),
        (np.ones((96, 8), dtype=np.float32), {"group_size": 64},
         "K=96 is not a multiple of group_size=64"),
        (np.ones((128, 8), dtype=np.float32), {"bits": 3}, "bits=3"),
        (np.ones((128, 8), dtype=np.float32), {"bits": 2}, "bits=2"),
        (np.ones((128, 8), dtype=np.float32), {"group_size": 16}, "group_size=16"),
        (np.ones((128, 8), dtype=np.float32), {"group_size": 0}, "group_size=0"),
        (np.ones((128, 8), dtype=np.float32), {"sym": "yes"}, "must be bools"),
        (np.ones((128, 8), dtype=np.float32), {"group_size": 128.0},
         r"group_size must be an integer .*got 128\.0 \(float\)"),
        (np.ones((128, 8), dtype=np.float32), {"group_size": np.float32(64)},
         "group_size must be an integer"),
        (np.ones((128, 8), dtype=np.float32), {"bits": 4.0},
         r"bits must be an integer .*got 4\.0 \(float\)"),
        (np.ones((128, 8), dtype=np.float32), {"bits": True}, "bits must be an integer"),
        (np.ones((128, 8), dtype=np.float32), {"group_size": True},
         "group_size must be an integer"),
        (np.full((128, 8), 1e6), {}, "float16 maximum"),
        (np.full((128, 8), -1e6), {"sym": False}, "float16 maximum"),
        (np.full((128, 8), 1e300), {"clip_search": True}, "float16 maximum"),
    ])
    def test_rejected_with_a_reason(self, w, kwargs, match):
        with pytest.raises(ValueError, match=match):
            quantize(w, **kwargs)

    def test_nan_reports_count_and_first_position(self):
        w = np.ones((128, 8), dtype=np.float16)
        w[7, 2] = np.nan
        w[100, 1] = np.inf
        with pytest.raises(ValueError, match=r"2 non-finite value\(s\).*w\[7, 2\] = nan"):
            quantize(w)

    def test_float16_overflow_names_the_group_and_column(self):
        w = np.ones((128, 8), dtype=np.float64)
        w[70, 5] = 1e6
        with pytest.raises(ValueError, match="group 1 of column 5"):
            quantize(w, group_size=64)

    def test_numpy_integers_accepted_as_python_ints(self):
        w = np.random.default_rng(2).standard_normal((128, 8))
        qw = quantize(w, bits=np.int64(4), group_size=np.int32(64))
        assert type(qw.bits) is int and type(qw.group_size) is int
        assert qw.equals(quantize(w, bits=4, group_size=64))

    def test_input_is_not_modified(self):
        w = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)
        before = w.copy()
        quantize(w, group_size=32, sym=False, clip_search=True)
        assert np.array_equal(w, before)
