"""quantize_gptq(): against an independent reference, against round-to-nearest where the two
must agree, its invariances, its gain on correlated inputs, and bad inputs.

The reference below is the algorithm as the GPTQ paper derives it (arXiv:2210.17323, s.3),
written independently of the module: one row at a time, the inverse Hessian of the rows not
yet quantized kept explicitly and shrunk by a Schur complement after each row, no Cholesky
factor and no blocks. The module's blocked, Cholesky form is the same arithmetic reordered, so
codes, scales and zero points must agree exactly (the rounding inputs differ by ~1e-13
relative; random data never lands that close to a rounding boundary).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import marlin_cupy as mc
from marlin_cupy.gptq import quantize_gptq
from marlin_cupy.quantize import _scale_and_zero, quantize

SETTINGS = settings(max_examples=30, deadline=None)


def correlated_inputs(rng, k, samples, rank=None):
    """Calibration inputs ``[samples, K]`` whose features co-vary strongly (a few shared
    factors plus a little independent noise, per-feature magnitudes spread over 10x), as a
    transformer layer's inputs do."""
    rank = rank or max(1, k // 8)
    x = rng.standard_normal((samples, rank)) @ rng.standard_normal((rank, k))
    x += 0.1 * rng.standard_normal((samples, k))
    return x * 10.0 ** rng.uniform(-0.5, 0.5, size=k)


def draw_layer(draw):
    """bits, group size, K (a multiple of the group size up to 256), N (up to 48), a NumPy
    random generator."""
    bits = draw(st.sampled_from([4, 8]))
    group_size = draw(st.sampled_from([32, 64, 128, -1]))
    step = 16 if group_size == -1 else group_size
    k = step * draw(st.integers(1, 256 // step))
    n = draw(st.integers(1, 48))
    return bits, group_size, k, n, np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


@st.composite
def problems(draw):
    """(w, hessian, bits, group_size, sym): hessians of correlated inputs, sometimes with
    inputs that never fire."""
    bits, group_size, k, n, rng = draw_layer(draw)
    w = rng.standard_normal((k, n)) * 10.0 ** rng.uniform(-3, 1)
    x = correlated_inputs(rng, k, samples=draw(st.sampled_from([k // 2 + 1, 2 * k])))
    if draw(st.booleans()):
        x[:, rng.random(k) < 0.1] = 0.0                   # dead inputs
    return w, x.T @ x, bits, group_size, draw(st.booleans())


def damped(h, damp):
    """The module's documented damping, written out: a dead input's diagonal becomes the mean
    of the live ones (1 if none), then every diagonal entry gets damp times that mean. Returns
    the damped hessian and the processing order of act_order (decreasing diagonal, dead
    inputs last)."""
    h = (h + h.T) / 2
    d = np.diag(h).copy()
    dead = d == 0
    mean = d[~dead].mean() if (~dead).any() else 1.0
    d[dead] = mean
    d += damp * mean
    h[np.diag_indices_from(h)] = d
    live = [i for i in sorted(range(len(d)), key=lambda i: -d[i]) if not dead[i]]
    return h, np.array(live + [i for i in range(len(d)) if dead[i]], dtype=np.int64)


def reference_gptq(w, h, bits, group_size, sym, act_order=False, damp=0.01,
                   static_groups=False):
    """Codes [K, N], scales [G, N], zeros [G, N] (float) and the order, by the paper's row
    by row elimination with an explicit inverse (see the module docstring of this file).
    ``static_groups``: the grids of round-to-nearest on the original weights, by original
    row."""
    k, n = w.shape
    h, by_diag = damped(h.astype(np.float64), damp)
    order = by_diag if act_order else np.arange(k)
    h = h[np.ix_(order, order)]
    h_inv = np.linalg.inv(h)
    rtn = quantize(w, bits=bits, group_size=group_size, sym=sym)
    w = w[order].astype(np.float64)
    rows = k if group_size == -1 else group_size
    maxq = (1 << bits) - 1
    codes = np.zeros((k, n))
    scales, zeros = [], []
    for i in range(k):
        if static_groups:
            grp = rtn.row_groups()[order[i]]
            s = rtn.scales[grp].astype(np.float64)
            z = rtn.zero_points()[grp].astype(np.float64)
        elif i % rows == 0:
            grp = w[i:i + rows]
            if sym:
                lo, hi = None, np.abs(grp).max(axis=0)[None]
            else:
                lo = np.minimum(grp.min(axis=0), 0)[None]
                hi = np.maximum(grp.max(axis=0), 0)[None]
            s16, z = _scale_and_zero(lo, hi, 1.0, bits, sym)
            scales.append(s16[0])
            zeros.append(z[0])
            s, z = s16[0].astype(np.float64), z[0]
        codes[i] = np.clip(np.rint(w[i] / s) + z, 0, maxq)
        err = w[i] - (codes[i] - z) * s
        d = h_inv[i, i]
        w[i + 1:] -= np.outer(h_inv[i + 1:, i] / d, err)
        h_inv[i + 1:, i + 1:] -= np.outer(h_inv[i + 1:, i], h_inv[i, i + 1:]) / d
    out = np.empty_like(codes)
    out[order] = codes
    if static_groups:
        return out, rtn.scales, rtn.zero_points(), order
    return out, np.array(scales), np.array(zeros), order


def output_error(x, w, qw):
    """||x @ w - x @ dequant||_F: what GPTQ minimises on its calibration inputs."""
    return float(np.linalg.norm(x @ (w - qw.dequantize().astype(np.float64))))


@SETTINGS
@given(problems(), st.booleans(), st.booleans())
def test_matches_the_row_by_row_reference(problem, act_order, static):
    w, h, bits, group_size, sym = problem
    qw = quantize_gptq(w, h, bits=bits, group_size=group_size, sym=sym, act_order=act_order,
                       static_groups=static)
    codes, scales, zeros, order = reference_gptq(w, h, bits, group_size, sym, act_order,
                                                 static_groups=static)
    assert np.array_equal(qw.q, codes.astype(np.uint8))
    assert np.array_equal(qw.scales.view(np.uint16), scales.view(np.uint16))
    assert np.array_equal(qw.zero_points(), zeros.astype(np.uint8))
    if static:
        assert qw.g_idx is None
    elif act_order and group_size != -1:
        # Groups are consecutive in processing order; each holds group_size rows.
        expected = np.empty(w.shape[0], np.int32)
        expected[order] = np.arange(w.shape[0]) // group_size
        assert np.array_equal(qw.row_groups(), expected)
        assert np.all(np.bincount(qw.row_groups()) == group_size)


@SETTINGS
@given(problems(), st.booleans(), st.booleans(), st.sampled_from([1, 3, 17]))
def test_blocks_and_column_chunks_change_nothing(problem, act_order, static, chunk):
    w, h, bits, group_size, sym = problem
    args = dict(bits=bits, group_size=group_size, sym=sym, act_order=act_order,
                static_groups=static)
    base = quantize_gptq(w, h, **args)
    # Blocks of 256 rows, and of 32 or 64 where the group size allows (the default is 128).
    for rows in (32, 64, 256):
        if group_size == -1 or rows % group_size == 0:
            assert quantize_gptq(w, h, _block_rows=rows, **args).equals(base)
    assert quantize_gptq(w, h, _chunk_columns=chunk, **args).equals(base)
    # Any positive multiple of X^T X gives the same result, dead inputs included (powers of
    # two: exact in floating point; 2^-40 makes a live diagonal far smaller than 1).
    for factor in (4.0, 2.0 ** -40):
        assert quantize_gptq(w, factor * h, **args).equals(base)


@st.composite
def diagonal_problems(draw):
    bits, group_size, k, n, rng = draw_layer(draw)
    w = (rng.standard_normal((k, n)) * 10.0 ** rng.uniform(-3, 2)).astype(
        draw(st.sampled_from([np.float16, np.float32, np.float64])))
    d = 10.0 ** rng.uniform(-3, 3, size=k)
    d[rng.random(k) < 0.1] = 0.0
    return w, np.diag(d), bits, group_size, draw(st.booleans())


@SETTINGS
@given(diagonal_problems(), st.booleans())
def test_inputs_that_do_not_covary_give_round_to_nearest(problem, act_order):
    """With a diagonal H no error moves: the codes and grids of quantize(), exactly; with
    act_order the order changes the groups only, unless static_groups keeps them."""
    w, h, bits, group_size, sym = problem
    rtn = quantize(w, bits=bits, group_size=group_size, sym=sym)
    assert quantize_gptq(w, h, bits=bits, group_size=group_size, sym=sym).equals(rtn)
    assert quantize_gptq(w, h, bits=bits, group_size=group_size, sym=sym, act_order=True,
                         static_groups=True).equals(rtn)
    qw = quantize_gptq(w, h, bits=bits, group_size=group_size, sym=sym, act_order=True)
    # Decreasing diagonal, dead inputs last (the damping adds the same to every entry).
    order = np.argsort(-np.diag(h), kind="stable")         # dead inputs (0) sort last
    permuted = quantize(w[order], bits=bits, group_size=group_size, sym=sym)
    assert np.array_equal(qw.q[order], permuted.q)
    assert np.array_equal(qw.scales.view(np.uint16), permuted.scales.view(np.uint16))
    assert np.array_equal(qw.zero_points(), permuted.zero_points())
    assert np.array_equal(qw.row_groups()[order], permuted.row_groups())


def test_no_calibration_at_all_is_round_to_nearest():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((256, 64))
    rtn = quantize(w, group_size=64, sym=False)
    zero = np.zeros((256, 256))
    assert quantize_gptq(w, zero, group_size=64, sym=False).equals(rtn)
    assert quantize_gptq(w, zero, group_size=64, sym=False, act_order=True).equals(rtn)


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("act_order", [False, True])
def test_smaller_output_error_than_round_to_nearest(sym, group_size, act_order):
    """On correlated inputs GPTQ's whole point: the layer's outputs move much less. Held out
    inputs from the same distribution too, not only the calibration ones. (Fixed seeds; the
    errors measured were 4.5-4.7x smaller, 15.5-16.3x with act_order; asserted at 2x.)"""
    rng = np.random.default_rng(1234)
    k, n = 512, 96
    w = rng.standard_normal((k, n)) * 0.02
    x = correlated_inputs(rng, k, samples=2048, rank=48)
    cal, held = x[:1536], x[1536:]
    rtn = quantize(w, group_size=group_size, sym=sym)
    gptq = quantize_gptq(w, cal.T @ cal, group_size=group_size, sym=sym, act_order=act_order)
    for inputs in (cal, held):
        assert output_error(inputs, w, gptq) * 2 < output_error(inputs, w, rtn)


def test_static_groups_keep_round_to_nearest_grids_and_no_g_idx():
    rng = np.random.default_rng(7)
    k, n = 256, 64
    w = rng.standard_normal((k, n))
    x = correlated_inputs(rng, k, samples=1024)
    qw = quantize_gptq(w, x.T @ x, group_size=64, act_order=True, static_groups=True)
    rtn = quantize(w, group_size=64)
    assert qw.g_idx is None
    assert np.array_equal(qw.scales.view(np.uint16), rtn.scales.view(np.uint16))
    assert not np.array_equal(qw.q, rtn.q)                 # the errors did move
    assert output_error(x, w, qw) < output_error(x, w, rtn)


def test_result_packs_and_is_exported():
    rng = np.random.default_rng(3)
    k, n = 256, 128
    w = rng.standard_normal((k, n))
    x = correlated_inputs(rng, k, samples=512)
    qw = mc.quantize_gptq(w, x.T @ x, group_size=64, sym=False, act_order=True)
    assert qw.g_idx is not None
    assert mc.unpack(mc.pack(qw)).equals(qw)


def test_a_nearly_symmetric_hessian_is_symmetrized_and_a_skewed_one_refused():
    """X^T X from a float32 GEMM need not be bitwise symmetric (blocked sums): differences up
    to 1e-5 of max|H| are taken as rounding and H symmetrized; more is refused as not X^T X."""
    rng = np.random.default_rng(5)
    x = correlated_inputs(rng, 128, samples=300)
    h = x.T @ x
    w = rng.standard_normal((128, 64))
    skew = np.triu(rng.standard_normal((128, 128)), 1)
    skew = (skew - skew.T) * np.abs(h).max()               # antisymmetric, ~max|H|
    base = quantize_gptq(w, h, group_size=32)
    rounding = h + 1e-7 * skew
    assert not np.array_equal(rounding, rounding.T)
    assert quantize_gptq(w, rounding, group_size=32).equals(
        quantize_gptq(w, (rounding + rounding.T) / 2, group_size=32))
    assert quantize_gptq(w, rounding, group_size=32).q.shape == base.q.shape
    with pytest.raises(ValueError, match="hessian is not symmetric"):
        quantize_gptq(w, h + 1e-4 * skew, group_size=32)


class TestBadInputs:
    w = np.random.default_rng(0).standard_normal((128, 64))
    h = np.eye(128)

    @pytest.mark.parametrize("h, match", [
        (np.eye(64), r"\[K, K\] = \[128, 128\]"),
        (np.eye(128, dtype=np.int64), "floats"),
        (np.where(np.eye(128) > 0, np.nan, 0.0), "non-finite"),
        (np.eye(128) + np.triu(np.ones((128, 128)), 1), "not symmetric"),
        (-np.eye(128), "negative diagonal"),
    ])
    def test_hessian(self, h, match):
        with pytest.raises(ValueError, match=match):
            quantize_gptq(self.w, h)

    def test_not_positive_definite(self):
        # A positive diagonal, but rows 0 and 1 form [[1, 2], [2, 1]] (eigenvalues 3 and -1).
        h = np.eye(128)
        h[0, 1] = h[1, 0] = 2.0
        with pytest.raises(ValueError, match="not positive definite after damping; raise damp"):
            quantize_gptq(self.w, h, damp=0.0)
        quantize_gptq(self.w, h, damp=1.0)     # lifted by the damping: fine

    def test_zero_diagonal_in_a_live_row(self):
        h = np.eye(128)
        h[5, 5] = 0.0
        h[5, 9] = h[9, 5] = 0.5
        with pytest.raises(ValueError, match=r"H\[5, 5\] = 0 but non-zero entries in row 5"):
            quantize_gptq(self.w, h)

    def test_weight_beyond_float16_named_before_any_update(self):
        w = np.zeros((128, 4))
        w[0, 2] = 7e4
        with pytest.raises(ValueError, match=r"w\[0, 2\] = 70000 is beyond the float16"):
            quantize_gptq(w, np.eye(128))

    def test_on_the_gpu_is_refused_with_the_way_back(self):
        class OnDevice:
            __cuda_array_interface__ = {}
        with pytest.raises(ValueError, match="quantize_gptq works on host arrays; w is on"):
            quantize_gptq(OnDevice(), self.h)
        with pytest.raises(ValueError, match="quantize_gptq works on host arrays; hessian is"):
            quantize_gptq(self.w, OnDevice())

    @pytest.mark.parametrize("damp", [-0.1, 1.5, float("nan"), True, "0.01"])
    def test_damp(self, damp):
        with pytest.raises(ValueError, match="damp must be a number in"):
            quantize_gptq(self.w, self.h, damp=damp)

    @pytest.mark.parametrize("name", ["act_order", "static_groups"])
    def test_flags(self, name):
        with pytest.raises(ValueError, match=f"{name} must be a bool"):
            quantize_gptq(self.w, self.h, **{name: 1})

    def test_what_quantize_refuses(self):
        with pytest.raises(ValueError, match="not a multiple of group_size"):
            quantize_gptq(self.w[:96], np.eye(96), group_size=64)
        with pytest.raises(ValueError, match="bits=3 is not supported"):
            quantize_gptq(self.w, self.h, bits=3)

    @staticmethod
    def _pushed(k, first, second):
        """Inputs where input ``second`` is half of input ``first``: GPTQ moves twice row
        ``first``'s rounding error onto row ``second``."""
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4096, k))
        x[:, second] = x[:, first] / 2 + 1e-3 * rng.standard_normal(4096)
        return x.T @ x

    def test_clamped_code_beyond_float16(self):
        # Row 1 rounds with an error of -3544; row 2 becomes -67088 and is clamped to code 0,
        # which dequantizes to -8 * 8576 = -68608, although no weight is near that.
        w = np.zeros((32, 1))
        w[0, 0], w[1, 0], w[2, 0] = 6e4, -5.5e4, -6e4
        with pytest.raises(ValueError, match="row 2, column 0 dequantizes to 68608"):
            quantize_gptq(w, self._pushed(32, 1, 2), group_size=32, damp=0.0)

    def test_updated_group_beyond_float16(self):
        # Row 31 (group 0) rounds with an error of +3544; row 32, the first of group 1, becomes
        # 6.2e4 + 7088 before its group's grid is computed.
        w = np.zeros((64, 1))
        w[0, 0], w[31, 0], w[32, 0] = 6e4, 5.5e4, 6.2e4
        with pytest.raises(ValueError, match="group 1 of column 0 reaches max.w. = 6"):
            quantize_gptq(w, self._pushed(64, 31, 32), group_size=32, damp=0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_weights_through_the_kernel(gpu_device, act_order):
    """GPTQ's weights (act-order g_idx included) run through the kernel within the GPU tests'
    bound (at most twice cuBLAS FP16's relative error on the same dequantized weights, plus
    1e-4), and the kernel's outputs on held-out inputs stay closer to the float layer's than
    those of round-to-nearest weights."""
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(11)
    k, n = 1024, 512
    w = rng.standard_normal((k, n)) * 0.02
    x = correlated_inputs(rng, k, samples=2048 + 64, rank=64)
    cal, held = x[:2048], x[2048:].astype(np.float16)
    exact = held.astype(np.float64) @ w
    errors = {}
    for name, qw in (("rtn", quantize(w, group_size=128)),
                     ("gptq", quantize_gptq(w, cal.T @ cal, group_size=128,
                                            act_order=act_order))):
        deq = qw.dequantize().astype(np.float64)
        ref = held.astype(np.float64) @ deq
        out = cp.full((held.shape[0], n), np.nan, dtype=cp.float16)   # poison
        mc.matmul(cp.asarray(held), mc.pack(qw).to_device(), out=out)
        y = cp.asnumpy(out).astype(np.float64)
        cublas = cp.asnumpy(cp.matmul(cp.asarray(held), cp.asarray(deq.astype(np.float16))))
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        err_cublas = np.linalg.norm(cublas.astype(np.float64) - ref) / np.linalg.norm(ref)
        assert np.isfinite(y).all() and err <= 2 * err_cublas + 1e-4, (name, err, err_cublas)
        errors[name] = np.linalg.norm(y - exact)
    assert errors["gptq"] * 2 < errors["rtn"], errors
