"""The fused kernel against the float64 reference (DESIGN.md s.6). Runs on a GPU only.

Judgement: relative Frobenius error of the kernel <= 2 x that of cuBLAS FP16 on the same
dequantized weights + 1e-4; NaN never passes; outputs are poisoned before every run.
"""
import contextlib
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import marlin_cupy as mc
from marlin_cupy.config import (DYN_EXAMPLES, EARLY_BOTTOM_EXAMPLES, INSTANTIATED,
                                MMA_WIDE_EXAMPLES, PARALLEL_REDUCE_EXAMPLES, PRODUCER_EXAMPLES,
                                SM90_INSTANTIATED, TOP_SUM_EXAMPLES, WGMMA_EXAMPLES, KernelConfig,
                                tuned_instances, wide_twin)

#: Every config the default dispatch can pick: the instantiated table, the compute capability
#: 9.0 heuristic's and the tuned tables' (each once).
DISPATCHABLE = tuple(dict.fromkeys(tuple(INSTANTIATED) + tuple(SM90_INSTANTIATED)
                                   + tuple(c for cs in tuned_instances().values() for c in cs)))
#: ... and the wgmma examples that no table uses (each config is tested once).
WGMMA_EXTRA = tuple(c for c in WGMMA_EXAMPLES if c not in DISPATCHABLE)
#: ... and the parallel-reduction examples, each also checked against its serial twin.
PAR_EXTRA = tuple(c for c in PARALLEL_REDUCE_EXAMPLES if c not in DISPATCHABLE)
#: ... and the 512-thread and narrow-warp mma.sync examples (NOTES.md entry 74).
WIDE_EXTRA = tuple(c for c in MMA_WIDE_EXAMPLES if c not in DISPATCHABLE)

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


def make_weight(rng, k, n, group_size, sym=True, act_order=False):
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.02
    qw = mc.quantize(w, bits=4, group_size=group_size, sym=sym)
    if act_order and group_size != -1 and k // group_size > 1:
        g_idx = (rng.permutation(k) // group_size).astype(np.int32)
        qw = mc.QuantizedWeight(qw.q, qw.scales, qw.zeros, g_idx, 4, group_size)
    return qw


def judge(x_h, qw, y):
    """Assert the kernel's error is within the bound; returns (err, err_cublas)."""
    w = qw.dequantize().astype(np.float64)                        # [K, N]
    ref = x_h.astype(np.float64) @ w                              # [M, N]
    y_h = cp.asnumpy(y).astype(np.float64)
    cublas = cp.asnumpy(cp.matmul(cp.asarray(x_h), cp.asarray(w.astype(np.float16))))
    norm = np.linalg.norm(ref)
    err = np.linalg.norm(y_h - ref) / norm
    err_cublas = np.linalg.norm(cublas.astype(np.float64) - ref) / norm
    diff = np.abs(y_h - ref)
    detail = (f"rel err {err:.3e} vs cuBLAS {err_cublas:.3e}; max|diff| {np.nanmax(diff):.3e} "
              f"mean|diff| {np.nanmean(diff):.3e}; max|ref| {np.abs(ref).max():.3e} "
              f"mean|ref| {np.abs(ref).mean():.3e}; NaNs {int(np.isnan(y_h).sum())}")
    assert np.isfinite(y_h).all(), detail
    assert err <= 2 * err_cublas + 1e-4, detail
    return err, err_cublas


def run(x_h, mw_d, config=None, max_ctas=None):
    x = cp.asarray(x_h)
    out = cp.full((x_h.shape[0], mw_d.n), np.nan, dtype=cp.float16)   # poison
    mc.matmul(x, mw_d, out=out, config=config, max_ctas=max_ctas)
    return out


def problem_for(cfg: KernelConfig, rng):
    group = -1 if cfg.group_blocks == -1 else 16 * cfg.group_blocks
    k = max(2 * cfg.tile_k, 2 * group if group > 0 else 0, 256)
    n = 2 * cfg.tile_n
    return k, n, group


def _same_bits_as_twin(cfg, twin, k_tiles, ms, grids, calls=1, workspace_zero=False,
                       pdl=False, build=None, syms=(True, False), seed=0):
    """``cfg``'s outputs bit for bit ``twin``'s on a K = k_tiles tiles x N = 3 tiles problem,
    for each weight kind in ``syms`` (True: symmetric, False: zero points), at each M and grid
    (``max_ctas``; ``calls`` calls back to back each, and as many with ``pdl=True`` if asked),
    with the workspace zero again after them if asked; then the error bound (judge).
    ``build``: cfg runs that compiled kernel (``ops.use_kernel``) instead of its own."""
    import contextlib
    from marlin_cupy import ops
    rng = np.random.default_rng(zlib.crc32(cfg.name.encode()) + seed)
    group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
    k, n = k_tiles * cfg.tile_k, 3 * cfg.tile_n
    for sym in syms:
        qw = make_weight(rng, k, n, group, sym=sym)
        mw = mc.pack(qw).to_device()
        for m in ms:
            x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
            for max_ctas in grids:
                want = mc.matmul(x, mw, config=twin, max_ctas=max_ctas)
                with ops.use_kernel(cfg, build) if build else contextlib.nullcontext():
                    assert build is None or ops.plan(m, n, k, group, config=cfg).kernel is build
                    got = [mc.matmul(x, mw, config=cfg, max_ctas=max_ctas) for _ in range(calls)]
                if pdl:
                    got += [mc.matmul(x, mw, config=cfg, max_ctas=max_ctas, pdl=True)
                            for _ in range(calls)]
                if workspace_zero:
                    cp.cuda.get_current_stream().synchronize()
                    assert int(cp.count_nonzero(ops.workspace().locks)) == 0, (m, max_ctas)
                for g in got:
                    assert cp.array_equal(g.view(cp.uint16), want.view(cp.uint16)), \
                        (sym, m, max_ctas)
            judge(cp.asnumpy(x), qw, got[0])


def _launch_bound(cfg) -> int:
    """Registers per thread that ``__launch_bounds__(launch_threads, blocks_per_sm)`` allows:
    the SM's 65536 shared by the CTAs, in steps of 8 per thread, at most 255."""
    return min(65536 // cfg.blocks_per_sm // cfg.launch_threads // 8 * 8, 255)


#: The producer examples whose launch bounds say something: those that hand registers over
#: (``producer_registers``) and those held below the hardware's 255. Left out: the ones with
#: 256 threads at launch and one CTA per SM (``producer_registers`` None, bound 255, any
#: compiled count fits).
BOUNDED_PRODUCERS = tuple(c for c in PRODUCER_EXAMPLES
                          if c.producer_registers is not None or _launch_bound(c) < 255)


def _spy_workspace_streams(monkeypatch) -> list:
    """The handle of the stream of every ``ops.workspace`` call from here on (the locks and
    scratch a launch takes are its stream's), in a list that fills as the calls come."""
    from marlin_cupy import ops
    used = []
    real_workspace = ops.workspace

    def recording(stream=None, captured=None):
        used.append(stream.ptr)
        return real_workspace(stream, captured)
    monkeypatch.setattr(ops, "workspace", recording)
    return used


def _skip_unless_runs(cfg, has_zp=False):
    """Skip, saying why, when this device cannot run the instance."""
    from marlin_cupy.ops import device_facts
    if cfg.wgmma and device_facts()["cc"] != "90":
        pytest.skip(f"{cfg.name} uses wgmma (sm_90a); this device is sm_{device_facts()['cc']}")
    limit = device_facts()["smem_optin"]
    if cfg.smem_bytes(has_zp) > limit:
        pytest.skip(f"{cfg.name} needs {cfg.smem_bytes(has_zp)} bytes of shared memory; "
                    f"this device allows {limit}")


class TestEveryInstantiatedConfig:
    @pytest.mark.parametrize("has_zp", [False, True], ids=["sym", "zp"])
    @pytest.mark.parametrize("cfg", DISPATCHABLE + WGMMA_EXTRA + PAR_EXTRA + WIDE_EXTRA,
                             ids=lambda c: c.name)
    def test_config(self, cfg, has_zp):
        _skip_unless_runs(cfg, has_zp)
        rng = np.random.default_rng(zlib.crc32(cfg.name.encode()))
        k, n, group = problem_for(cfg, rng)
        # Rows: a partial last block, and two slabs so the in-kernel slab loop runs; a swap_ab=1
        # config serves at most 8 rows: a partial and a full n8 block.
        ms = (5, 8) if cfg.max_m == 8 else (2 * cfg.tile_m - 3,)
        qw = make_weight(rng, k, n, group, sym=not has_zp)
        mw = mc.pack(qw).to_device()
        for m in ms:
            x_h = rng.standard_normal((m, k)).astype(np.float16)
            for max_ctas in (None, 3):
                judge(x_h, qw, run(x_h, mw, config=cfg, max_ctas=max_ctas))


#: The dispatchable configs that have a build with the group scale inside the unpacking, which
#: the dispatch takes for symmetric weights whose scales all lie below 2^-4 (NOTES.md entries
#: 87-88).
FMA_CONFIGS = tuple(c for c in DISPATCHABLE if c.scale_fma_preferred)


class TestScaleFma:
    @pytest.mark.parametrize("cfg", FMA_CONFIGS, ids=lambda c: c.name)
    def test_same_bits_as_the_two_step_unpacking(self, cfg):
        """The fused unpacking gives the two-step form's bits: on the tests' usual weights
        (judged against the reference) and on scales spread log-uniformly from 2^-20 (fp16
        subnormals) to just below 2^-4, each sign. Where the two-step build scales FP32 sums
        instead (``wg_defer``), against its build that scales the weights
        (``MARLIN_WG_DEFER 0``)."""
        from marlin_cupy import ops
        _skip_unless_runs(cfg)
        scaled = (ops.build_kernel(cfg, False, prefix="#define MARLIN_WG_DEFER 0\n")
                  if cfg.wg_defer else None)
        weights_scaled = (lambda: ops.use_kernel(cfg, scaled, False, False) if scaled
                          else contextlib.nullcontext())
        rng = np.random.default_rng(zlib.crc32(cfg.name.encode()) + 87)
        k, n, group = problem_for(cfg, rng)
        usual = make_weight(rng, k, n, group)
        g = k // group
        wide = np.exp2(rng.uniform(-20, -4.001, (g, n))) * rng.choice([-1, 1], (g, n))
        spread = mc.QuantizedWeight(rng.integers(0, 16, (k, n), dtype=np.uint8),
                                    wide.astype(np.float16), None, None, 4, group)
        for qw in (usual, spread):
            mw = mc.pack(qw).to_device()
            assert mw.fma_scales
            # (a swap_ab=1 config serves at most 8 rows: a partial and a full n8 block)
            ms = (5, 8) if cfg.max_m == 8 else (cfg.tile_m - 1, 2 * cfg.tile_m - 3)
            for m in ms:
                x_h = rng.standard_normal((m, k)).astype(np.float16)
                x = cp.asarray(x_h)
                for max_ctas in (None, 3):
                    assert ops.plan(m, n, k, group, config=cfg, max_ctas=max_ctas,
                                    fma_scales=True).scale_fma
                    fused = run(x_h, mw, config=cfg, max_ctas=max_ctas)
                    with weights_scaled():
                        assert not ops.plan(m, n, k, group, config=cfg,
                                            fma_scales=False).scale_fma
                        two = mc.matmul(x, mw, config=cfg, max_ctas=max_ctas, scale_fma=False)
                    assert cp.array_equal(fused.view(cp.uint16), two.view(cp.uint16)), \
                        (m, max_ctas, qw is spread)
                if qw is usual:
                    judge(x_h, qw, fused)

    def test_scales_from_two_to_the_minus_four_take_the_two_step_form(self):
        from marlin_cupy import ops
        cfg = KernelConfig.from_name("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws")
        _skip_unless_runs(cfg)
        assert cfg.scale_fma_applies
        rng = np.random.default_rng(87)
        qw = make_weight(rng, 1024, 512, 128)
        scales = qw.scales.copy()
        scales[3, 7] = np.float16(2.0 ** -4)      # one scale at the limit
        qw = mc.QuantizedWeight(qw.q, scales, None, None, 4, 128)
        mw = mc.pack(qw).to_device()
        assert not mw.fma_scales
        for m in (65, 300):
            assert not ops.plan(m, 512, 1024, 128, config=cfg,
                                fma_scales=mw.fma_scales).scale_fma
            x_h = rng.standard_normal((m, 1024)).astype(np.float16)
            judge(x_h, qw, run(x_h, mw, config=cfg))
        with pytest.raises(ValueError, match="scale_fma=True"):
            mc.matmul(cp.asarray(x_h), mw, config=cfg, scale_fma=True)


@st.composite
def problems(draw):
    group_size = draw(st.sampled_from([32, 64, 128, -1]))
    sym = draw(st.booleans())
    act_order = draw(st.booleans())
    m = draw(st.one_of(st.integers(1, 70), st.integers(1, 2048)))
    n = 64 * draw(st.integers(1, 24))
    k = 128 * draw(st.integers(1, 24))
    max_ctas = draw(st.one_of(st.none(), st.integers(1, 132)))
    seed = draw(st.integers(0, 2**31 - 1))
    return m, n, k, group_size, sym, act_order, max_ctas, seed


class TestRandomProblems:
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(problems())
    def test_default_dispatch(self, p):
        m, n, k, group_size, sym, act_order, max_ctas, seed = p
        rng = np.random.default_rng(seed)
        qw = make_weight(rng, k, n, group_size, sym, act_order)
        mw = mc.pack(qw).to_device()
        x_h = rng.standard_normal((m, k)).astype(np.float16)
        judge(x_h, qw, run(x_h, mw, max_ctas=max_ctas))


class TestOddShapes:
    @pytest.mark.parametrize("m", [1, 15, 16, 17, 33, 48, 63, 64, 65, 127, 257, 1000])
    def test_odd_m(self, m):
        rng = np.random.default_rng(m)
        qw = make_weight(rng, 1024, 512, 128)
        mw = mc.pack(qw).to_device()
        x_h = rng.standard_normal((m, 1024)).astype(np.float16)
        judge(x_h, qw, run(x_h, mw))

    def test_many_groups_more_than_group_size(self):
        # num_groups > group_size: a past Hopper kernel bug zeroed scales beyond index 128.
        rng = np.random.default_rng(7)
        qw = make_weight(rng, 32 * 160, 256, 32)
        mw = mc.pack(qw).to_device()
        x_h = rng.standard_normal((5, 32 * 160)).astype(np.float16)
        judge(x_h, qw, run(x_h, mw))

    def test_large_k_small_n(self):
        rng = np.random.default_rng(8)
        qw = make_weight(rng, 16384, 64, 128)
        mw = mc.pack(qw).to_device()
        x_h = rng.standard_normal((9, 16384)).astype(np.float16)
        judge(x_h, qw, run(x_h, mw))

    def test_leading_batch_dims(self):
        rng = np.random.default_rng(9)
        qw = make_weight(rng, 256, 128, 64)
        mw = mc.pack(qw).to_device()
        x_h = rng.standard_normal((2, 3, 256)).astype(np.float16)
        out = cp.full((2, 3, 128), np.nan, dtype=cp.float16)         # poison
        y = mc.matmul(cp.asarray(x_h), mw, out=out)
        assert y is out and y.shape == (2, 3, 128)
        judge(x_h.reshape(6, 256), qw, y.reshape(6, 128))

    def test_m_zero(self):
        rng = np.random.default_rng(10)
        mw = mc.pack(make_weight(rng, 256, 128, 128)).to_device()
        y = mc.matmul(cp.zeros((0, 256), cp.float16), mw)
        assert y.shape == (0, 128)


#: FP16 partial sums (``_fp16``): one instance of each tile shape and scale layout.
FP16_REDUCE = tuple({(c.threads, c.thread_m_blocks, c.thread_n_blocks, c.thread_k_blocks,
                      c.group_blocks == -1, c.wgmma): c
                     for c in INSTANTIATED if not c.fp32_reduce}.values())


class TestFp16Reduction:
    """FP16 partial sums are rounded at every hand-over of a split column; ops caps the grid
    so that at most FP16_REDUCE_MAX_SHARERS CTAs share one (NOTES.md entry 70: 16 sharers gave
    2.42x cuBLAS's error). Deep K, narrow N: without the cap every column would have 12-48."""

    @pytest.mark.parametrize("cfg", FP16_REDUCE, ids=lambda c: c.name)
    def test_deep_k_within_the_bound(self, cfg):
        from marlin_cupy import ops
        _skip_unless_runs(cfg)
        rng = np.random.default_rng(zlib.crc32(cfg.name.encode()))
        group = -1 if cfg.group_blocks == -1 else 16 * cfg.group_blocks
        k, n = max(48 * cfg.tile_k, 1024), 3 * cfg.tile_n
        k_tiles = k // cfg.tile_k
        for sym in (True, False):
            qw = make_weight(rng, k, n, group, sym=sym)
            mw = mc.pack(qw).to_device()
            for m in ((1, 8) if cfg.max_m == 8 else (1, 17, 2 * cfg.tile_m + 5)):
                for max_ctas in (None, 97):
                    grid = ops.plan(m, n, k, group, not sym, cfg, max_ctas).grid
                    units = k_tiles * (n // cfg.tile_n) * -(-m // cfg.tile_m)
                    iters = -(-units // grid)
                    assert -(-(k_tiles - 1) // iters) + 1 <= ops.FP16_REDUCE_MAX_SHARERS
                    x_h = rng.standard_normal((m, k)).astype(np.float16)
                    judge(x_h, qw, run(x_h, mw, config=cfg, max_ctas=max_ctas))


class TestParallelReduction:
    """The parallel reduction adds the same partials in the same order as the serial one
    (bottom CTA first), so the two agree in value (the sum starts from +0: an exact zero may
    differ in sign), whatever the arrival order."""

    @pytest.mark.parametrize("cfg", PARALLEL_REDUCE_EXAMPLES, ids=lambda c: c.name)
    def test_equals_serial_reduction(self, cfg):
        _skip_unless_runs(cfg, True)
        rng = np.random.default_rng(zlib.crc32(cfg.name.encode()))
        group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
        # Long K and two column tiles: up to 64 CTAs share a column at 132 CTAs.
        k, n = 64 * cfg.tile_k, 2 * cfg.tile_n
        serial = cfg.with_(parallel_reduce=False)
        for sym in (True, False):
            qw = make_weight(rng, k, n, group, sym=sym)
            mw = mc.pack(qw).to_device()
            for m in ((5, 8) if cfg.max_m == 8 else (cfg.tile_m - 1, 2 * cfg.tile_m + 3)):
                x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                for max_ctas in (None, 2, 5, 33, 97):
                    got = mc.matmul(x, mw, config=cfg, max_ctas=max_ctas)
                    want = mc.matmul(x, mw, config=serial, max_ctas=max_ctas)
                    assert bool(cp.all(got == want)), (m, max_ctas, sym)
                    if max_ctas is None:
                        judge(cp.asnumpy(x), qw, got)

    @pytest.mark.parametrize("cfg", EARLY_BOTTOM_EXAMPLES, ids=lambda c: c.name)
    def test_early_bottom_same_bits_as_its_twin_and_workspace_zero(self, cfg):
        """The early bottom (``early_bottom``, config suffix _eb; NOTES.md entries 68-69)
        against its twin without it: the same bits on many partitions, on the parallel
        reduction and the serial chain (the early bottom's partial goes through the locks
        workspace, bit-inverted), and the workspace is zero again after every call. The grids
        put split columns' bottoms inside stripes, and some not."""
        _skip_unless_runs(cfg, True)
        _same_bits_as_twin(cfg, cfg.with_(early_bottom=False), 40,
                           (1, 7, min(16, cfg.max_m or 16)), (3, 7, 17, 33, 97, None), calls=3,
                           workspace_zero=True)

    @pytest.mark.parametrize("early_only", (False, True), ids=("all_columns", "early_only"))
    @pytest.mark.parametrize("cfg", TOP_SUM_EXAMPLES, ids=lambda c: c.name)
    def test_top_sum_same_bits_as_its_twin_and_workspace_zero(self, cfg, early_only):
        """The column's top summing (``top_sum``, config suffix _ts; NOTES.md entry 73)
        against its twin with the last arriver's sum: the same bits on many partitions (2 to
        40 CTAs per column; bottoms inside stripes and at their ends), calls back to back
        without a sync between them, plain and with ``pdl=True``, and the workspace is zero
        again after them. ``early_only``: the build with MARLIN_TOP_SUM_EARLY_ONLY 1
        (measured slower, NOTES.md entry 74), the top's sum on the columns with an early bottom and the last arriver's
        on the others in one launch; that build is the plain symmetric one (no ``pdl=True``,
        no zero points)."""
        from marlin_cupy import ops
        _skip_unless_runs(cfg, True)
        build = (ops.build_kernel(cfg, prefix="#define MARLIN_TOP_SUM_EARLY_ONLY 1\n")
                 if early_only else None)
        _same_bits_as_twin(cfg, cfg.with_(top_sum=False), 40, (1, 7, min(16, cfg.max_m or 16)),
                           (2, 3, 7, 17, 33, 97, None), calls=3, workspace_zero=True,
                           pdl=not early_only and int(cp.cuda.Device().compute_capability) >= 90,
                           build=build, syms=(True,) if early_only else (True, False),
                           seed=early_only)

    @pytest.mark.parametrize("cfg", [c for c in MMA_WIDE_EXAMPLES if c.warp_n],
                             ids=lambda c: c.name)
    def test_narrow_warps_same_bits_as_their_wide_twin(self, cfg):
        """Narrow warps in the mma.sync loop (``warp_n``, NOTES.md entry 74) split the tile's
        columns finer and K as the twin with 64-column warps does, so every column's sums are
        the same in the same order: the same bits, sym and zero points, on several grids."""
        _skip_unless_runs(cfg, True)
        _same_bits_as_twin(cfg, wide_twin(cfg), 12, (1, min(8, cfg.max_m or 8)), (3, 17, None))

    def test_repeated_calls_bitwise_identical_and_locks_rearmed(self):
        from marlin_cupy.ops import workspace
        cfg = KernelConfig.from_name("t256_m4_n8_k16_s4_g8_fp32par")
        rng = np.random.default_rng(14)
        qw = make_weight(rng, 16384, 256, 128)
        mw = mc.pack(qw).to_device()
        x = cp.asarray(rng.standard_normal((100, 16384)).astype(np.float16))
        first = mc.matmul(x, mw, config=cfg)
        for _ in range(50):
            again = mc.matmul(x, mw, config=cfg)
            assert cp.array_equal(first.view(cp.uint16), again.view(cp.uint16))
        cp.cuda.get_current_stream().synchronize()
        assert int(cp.count_nonzero(workspace().locks)) == 0
        judge(cp.asnumpy(x), qw, first)


class TestProducer:
    """A producer warpgroup only moves the copies: the compute threads add the same products in
    the same order, so its outputs equal its twin's bit for bit, on every partition (stripes
    that start and end mid-column, CTAs of one unit, more slots than units), symmetric and
    with zero points, and over many calls (the barriers' phases carry across none)."""

    @pytest.mark.parametrize("cfg", PRODUCER_EXAMPLES, ids=lambda c: c.name)
    def test_equals_twin_without_producer(self, cfg):
        _skip_unless_runs(cfg, True)
        rng = np.random.default_rng(zlib.crc32(cfg.name.encode()) + 1)
        group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
        twin = cfg.with_(producer=False)
        for k_tiles, n_tiles in ((24, 2), (3, 5)):
            k, n = k_tiles * max(cfg.tile_k, 128), n_tiles * cfg.tile_n
            for sym in (True, False):
                qw = make_weight(rng, k, n, group, sym=sym)
                mw = mc.pack(qw).to_device()
                for m in ((5, 8) if cfg.max_m == 8 else (1, cfg.tile_m - 3, 2 * cfg.tile_m + 1)):
                    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                    for max_ctas in (None, 1, 3, 7, 40):
                        got = mc.matmul(x, mw, config=cfg, max_ctas=max_ctas)
                        want = mc.matmul(x, mw, config=twin, max_ctas=max_ctas)
                        assert cp.array_equal(got.view(cp.uint16), want.view(cp.uint16)), \
                            (k, n, m, max_ctas, sym)
                        if max_ctas is None:
                            judge(cp.asnumpy(x), qw, got)
        # Many launches in a row (a stale barrier phase would hang or corrupt one of them).
        first = mc.matmul(x, mw, config=cfg)
        for _ in range(20):
            assert cp.array_equal(first.view(cp.uint16),
                                  mc.matmul(x, mw, config=cfg).view(cp.uint16))

    @pytest.mark.parametrize("cfg", BOUNDED_PRODUCERS, ids=lambda c: c.name)
    def test_register_handover_matches_launch_bounds(self, cfg):
        """The kernel is compiled to the register count its setmaxnreg arithmetic assumes
        (``producer_registers``: the launch count, what ``__launch_bounds__(launch_threads,
        blocks_per_sm)`` allows); without a handover (mma.sync producers), to at most that
        count, so that ``blocks_per_sm`` CTAs of ``launch_threads`` fit an SM's registers."""
        from marlin_cupy.ops import kernel_resources
        _skip_unless_runs(cfg, True)
        regs = cfg.producer_registers
        for zp in (False, True):
            got = kernel_resources(cfg, zp)["registers"]
            if regs is None:
                assert got <= _launch_bound(cfg), (cfg.name, zp, got)
            else:
                assert -(-got // 8) * 8 == regs[0], (cfg.name, zp, got)


class TestDynamicHandOut:
    """Units handed out at run time (``dyn_chunk``): the chunks have fixed boundaries and each
    column's partials are summed in chunk order, so the output is the same bits whichever CTA
    drew which chunk: on every grid (one CTA drawing every chunk, a few racing for them, one
    CTA per chunk and no draw at all), equal to static stripes of the chunk's size where the
    static partition cuts the same stripes. The draw counter and the column counters are zero
    again after every launch."""

    @staticmethod
    def _units(cfg, k, n, m):
        return (k // cfg.tile_k) * (n // cfg.tile_n) * -(-m // cfg.tile_m)

    @pytest.mark.parametrize("cfg", DYN_EXAMPLES, ids=lambda c: c.name)
    def test_same_bits_on_every_grid(self, cfg):
        from marlin_cupy.ops import plan, workspace
        _skip_unless_runs(cfg, True)
        rng = np.random.default_rng(zlib.crc32(cfg.name.encode()) + 2)
        group = 16 * cfg.group_blocks if cfg.group_blocks > 0 else -1
        static = cfg.with_(dyn_chunk=0)
        q = cfg.dyn_chunk
        # Columns longer and shorter than a chunk; unit counts with and without a short last
        # chunk; at three slabs, more chunks than 132 CTAs (one per SM: the default grid draws).
        for k_tiles, n_tiles in ((3 * q + 1, 2), (q // 2 + 1, 5), (4 * q, 12)):
            k = k_tiles * cfg.tile_k
            if group > 0 and k % group:
                k = -(-k // group) * group
            n = n_tiles * cfg.tile_n
            for sym in (True, False):
                qw = make_weight(rng, k, n, group, sym=sym)
                mw = mc.pack(qw).to_device()
                for m in ((1, 8) if cfg.max_m == 8 else (1, cfg.tile_m - 3, 2 * cfg.tile_m + 1)):
                    x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                    units = self._units(cfg, k, n, m)
                    chunks = cfg.chunks(units)
                    first = mc.matmul(x, mw, config=cfg)
                    grids = {None, 1, 2, 3, max(1, chunks // 2), chunks, chunks + 5}
                    for max_ctas in sorted(grids, key=lambda v: -1 if v is None else v):
                        got = mc.matmul(x, mw, config=cfg, max_ctas=max_ctas)
                        assert cp.array_equal(got.view(cp.uint16), first.view(cp.uint16)), \
                            (k, n, m, max_ctas, sym)
                        assert plan(m, n, k, group, not sym, cfg, max_ctas).grid <= chunks
                    # Static stripes of q units: the same partials, the same order.
                    if -(-units // chunks) == q and chunks <= plan(m, n, k, group, not sym,
                                                                 static).grid:
                        want = mc.matmul(x, mw, config=static, max_ctas=chunks)
                        assert cp.array_equal(want.view(cp.uint16), first.view(cp.uint16)), \
                            (k, n, m, sym, "static")
                    judge(cp.asnumpy(x), qw, first)
        cp.cuda.get_current_stream().synchronize()
        assert int(cp.count_nonzero(workspace().locks)) == 0

    def test_repeated_calls_rearm_the_draw_counter(self):
        """Many launches in a row, with draws (a counter left armed would hand out chunks that
        do not exist, or none), also through the pdl=True build, where a launch may start
        before the previous one ends (its first draw waits for it): the same bits every time,
        the workspace zero after."""
        from marlin_cupy.ops import device_facts, workspace
        cfg = DYN_EXAMPLES[0]
        _skip_unless_runs(cfg)
        rng = np.random.default_rng(15)
        qw = make_weight(rng, 8192, 4 * cfg.tile_n, 128)
        mw = mc.pack(qw).to_device()
        x = cp.asarray(rng.standard_normal((3, 8192)).astype(np.float16))
        first = mc.matmul(x, mw, config=cfg)
        pdl = (False, True) if int(device_facts()["cc"]) >= 90 else (False,)
        for max_ctas in (None, 5, 1, None, 7) * 6:
            for p in pdl:
                again = mc.matmul(x, mw, config=cfg, max_ctas=max_ctas, pdl=p)
                assert cp.array_equal(first.view(cp.uint16), again.view(cp.uint16)), \
                    (max_ctas, p)
        cp.cuda.get_current_stream().synchronize()
        assert int(cp.count_nonzero(workspace().locks)) == 0
        judge(cp.asnumpy(x), qw, first)


class TestDeterminismAndWorkspace:
    @pytest.mark.parametrize("fp32_reduce", [True, False])
    def test_repeated_calls_bitwise_identical(self, fp32_reduce):
        rng = np.random.default_rng(11)
        qw = make_weight(rng, 4096, 512, 128)
        mw = mc.pack(qw).to_device()
        x = cp.asarray(rng.standard_normal((37, 4096)).astype(np.float16))
        cfg = mc.KernelConfig(256, 3, 16, 4, 4, 8, fp32_reduce)
        first = mc.matmul(x, mw, config=cfg, max_ctas=7)
        for _ in range(50):
            again = mc.matmul(x, mw, config=cfg, max_ctas=7)
            assert cp.array_equal(first.view(cp.uint16), again.view(cp.uint16))
        judge(cp.asnumpy(x), qw, first)

    def test_locks_are_zero_after_calls(self):
        from marlin_cupy.ops import workspace
        rng = np.random.default_rng(12)
        mw = mc.pack(make_weight(rng, 2048, 1024, 128)).to_device()
        x = cp.asarray(rng.standard_normal((100, 2048)).astype(np.float16))
        for ctas in (1, 5, 17, 132):
            mc.matmul(x, mw, max_ctas=ctas)
        cp.cuda.get_current_stream().synchronize()
        assert int(cp.count_nonzero(workspace().locks)) == 0

    def test_use_kernel_swaps_the_launched_build_and_restores_it(self):
        # Plans hold their kernel: a probe that swapped only the kernel dict timed the same
        # build twice (benchmarks/NOTES.md, entries 14 and 17).
        from marlin_cupy import ops
        cfg = KernelConfig.from_name("t128_m1_n4_k8_s4_g8_fp32")
        rng = np.random.default_rng(15)
        qw = make_weight(rng, 1024, 512, 128)
        mw = mc.pack(qw).to_device()
        x = cp.asarray(rng.standard_normal((9, 1024)).astype(np.float16))
        shipped = ops.plan(9, 512, 1024, 128, config=cfg).kernel
        # Another module of the same code (the prefix only changes the source text).
        other = ops.build_kernel(cfg, prefix="#define MARLIN_PROBE 0\n")
        assert other is not shipped
        with ops.use_kernel(cfg, other):
            assert ops.plan(9, 512, 1024, 128, config=cfg).kernel is other
            judge(cp.asnumpy(x), qw, mc.matmul(x, mw, config=cfg))
        assert ops.plan(9, 512, 1024, 128, config=cfg).kernel is shipped

    def test_stream_argument(self, monkeypatch):
        """``stream=`` is the launch's stream: ``x`` is written on ``s`` behind a 20 ms spin, so
        a kernel launched anywhere else (CuPy's current stream, which does not wait for the
        non-blocking ``s``) would read it unwritten; and the locks and scratch are ``s``'s
        (``ops.workspace``)."""
        from marlin_cupy import jit
        rng = np.random.default_rng(13)
        qw = make_weight(rng, 512, 256, 128)
        mw = mc.pack(qw).to_device()
        x_h = rng.standard_normal((8, 512)).astype(np.float16)
        x_src = cp.asarray(x_h)
        mc.matmul(x_src, mw)         # compiled and planned: the call below launches at once
        spin = jit.load_module(jit.expand_source("timing.cu")).get_function("spin_ns")
        cp.cuda.get_current_stream().synchronize()
        used = _spy_workspace_streams(monkeypatch)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            x = cp.zeros_like(x_src)
            spin((1,), (1,), (np.uint64(20_000_000),))
            x[...] = x_src
        y = mc.matmul(x, mw, stream=s)
        s.synchronize()
        assert used == [s.ptr]
        judge(x_h, qw, y)


@pytest.fixture
def heuristic_only(monkeypatch):
    """The dispatch without a tuned table: what the heuristics give a layer the table lacks
    (the shipped H200 table holds the small models' layers these tests were written on since
    NOTES.md entry 85; plans are dropped on the way in and out)."""
    from marlin_cupy import ops, tune
    monkeypatch.setattr(tune, "load_table", lambda device_name: {})
    ops._plan.cache_clear()
    yield
    ops._plan.cache_clear()


class TestColumnCtas:
    """Grids capped at whole columns (``column_ctas``; NOTES.md entries 83-84): what the sm_90
    heuristic dispatches on short columns, and explicit caps on deep ones."""

    def test_short_columns_dispatch_whole_columns(self, heuristic_only):
        """qwen2.5-0.5b's gate+up layer (896x9728, seven 128-deep units per column): the
        heuristic's dispatch on compute capability 9.0 runs the buckets entry 84 caps on one CTA
        per column; every M is within the bound, and bitwise what the same kernel gives on the
        same grid through ``max_ctas``; the locks are left at zero."""
        from marlin_cupy import ops
        facts = ops.device_facts()
        if facts["cc"] != "90":
            pytest.skip(f"the sm_90 heuristic's rule; this device is compute capability "
                        f"{facts['cc']}")
        rng = np.random.default_rng(40)
        k, n = 896, 9728
        capped_ms = set()
        for sym in (True, False):
            qw = make_weight(rng, k, n, 128, sym=sym)
            mw = mc.pack(qw).to_device()
            for m in (1, 5, 8, 16, 33, 64, 100, 256):
                p = ops.plan(m, n, k, 128, not sym)
                x_h = rng.standard_normal((m, k)).astype(np.float16)
                y = run(x_h, mw)
                judge(x_h, qw, y)
                if p.config.column_ctas:
                    capped_ms.add(m)
                    assert p.grid == p.config.column_grid(m, n) < \
                        facts["sms"] * p.config.blocks_per_sm, (m, p.config.name, p.grid)
                    same = run(x_h, mw, config=p.config.compiled, max_ctas=p.grid)
                    assert bool(cp.all(y.view(cp.uint16) == same.view(cp.uint16))), m
                cp.cuda.get_current_stream().synchronize()
                assert int(cp.count_nonzero(ops.workspace().locks)) == 0, m
        if facts["sms"] == 132:     # the H200's and H100 SXM's: the buckets entry 84 measured
            assert {1, 5, 8, 16, 33, 64, 256} <= capped_ms, sorted(capped_ms)

    @pytest.mark.parametrize("name", ["t256_m1_n8_k8_s6_g8_fp32par_sw1_eb",
                                      "t256_m1_n8_k8_s6_g8_fp32_sw1",
                                      "t128_m4_n4_k8_s4_g8_fp32par",
                                      "t256_m4_n16_k8_s4_g4_fp32_sw8_wg"])
    @pytest.mark.parametrize("ctas", [1, 2, 3])
    def test_explicit_caps(self, name, ctas):
        """Explicit caps on columns of 2..24 units, serial and parallel reductions, at every
        M the config serves: within the bound, on the grid the cap names."""
        from marlin_cupy import ops
        cfg = KernelConfig.from_name(name).with_(column_ctas=ctas)
        _skip_unless_runs(cfg.compiled)
        rng = np.random.default_rng(41 + ctas)
        group = 16 * cfg.group_blocks
        for k in (2 * cfg.tile_k, 24 * cfg.tile_k):
            n = 5 * cfg.tile_n
            qw = make_weight(rng, k, n, group, sym=ctas != 2)
            mw = mc.pack(qw).to_device()
            for m in ((1, 8) if cfg.max_m == 8 else (3, 64, 130)):
                p = ops.plan(m, n, k, group, ctas == 2, config=cfg)
                assert p.grid == min(cfg.column_grid(m, n), ops.plan(
                    m, n, k, group, ctas == 2, config=cfg.compiled).grid), (k, m)
                x_h = rng.standard_normal((m, k)).astype(np.float16)
                judge(x_h, qw, run(x_h, mw, config=cfg))


def test_narrow_layers_dispatch_within_the_bound(heuristic_only):
    """Narrow layers (N <= 3072) on compute capability 9.0 take the heuristic's 128-wide candidate
    (``config.narrow_first``, NOTES.md entry 84): within the bound at M on both sides of its
    limits (8 rows, 256 rows), symmetric and with zero points."""
    from marlin_cupy import ops
    from marlin_cupy.config import NARROW_MAX_M
    rng = np.random.default_rng(42)
    for k, n in ((1536, 1536), (2048, 3072)):
        for sym in (True, False):
            qw = make_weight(rng, k, n, 128, sym=sym)
            mw = mc.pack(qw).to_device()
            for m in (1, 8, 9, 64, 200, NARROW_MAX_M, NARROW_MAX_M + 1):
                x_h = rng.standard_normal((m, k)).astype(np.float16)
                judge(x_h, qw, run(x_h, mw))
                if ops.device_facts()["cc"] == "90" and 8 < m <= NARROW_MAX_M:
                    assert ops.plan(m, n, k, 128, not sym).config.tile_n == 128, (m, n, k)


class TestInterop:
    @pytest.mark.parametrize("given", [False, True], ids=["torch_stream", "given_stream"])
    def test_torch_in_torch_out(self, monkeypatch, given):
        """A torch input gives a torch output; with ``stream=`` another stream it is allocated
        for that stream (torch's allocator) and right once that stream is done. The launch
        takes the locks and scratch of its stream (``ops.workspace``): ``s`` if given, else
        torch's current stream."""
        torch = pytest.importorskip("torch")
        rng = np.random.default_rng(14)
        qw = make_weight(rng, 512, 256, 128)
        mw = mc.pack(qw).to_device()
        x_h = rng.standard_normal((4, 512)).astype(np.float16)
        xt = torch.from_numpy(x_h).cuda()
        torch.cuda.synchronize()
        s = cp.cuda.Stream(non_blocking=True) if given else None
        used = _spy_workspace_streams(monkeypatch)
        yt = mc.matmul(xt, mw, stream=s)
        assert used == [s.ptr if given else torch.cuda.current_stream().cuda_stream]
        assert isinstance(yt, torch.Tensor) and yt.is_cuda and yt.dtype == torch.float16
        (s.synchronize if given else torch.cuda.synchronize)()
        judge(x_h, qw, cp.from_dlpack(yt))

    def test_marlin_linear_with_bias(self):
        rng = np.random.default_rng(15)
        w = rng.standard_normal((512, 256)).astype(np.float32) * 0.02
        bias = rng.standard_normal(256).astype(np.float16)
        layer = mc.MarlinLinear.from_float(w, bias=bias, group_size=128)
        x_h = rng.standard_normal((3, 512)).astype(np.float16)
        out = cp.full((3, 256), np.nan, dtype=cp.float16)             # poison
        y = cp.asnumpy(layer(cp.asarray(x_h), out=out)).astype(np.float64)
        qw = mc.quantize(w, bits=4, group_size=128)
        w_deq = qw.dequantize().astype(np.float64)
        ref = x_h.astype(np.float64) @ w_deq + bias
        # DESIGN.md s.6's rule, cuBLAS FP16 with the same bias added in fp16 as the yardstick.
        cublas = cp.matmul(cp.asarray(x_h), cp.asarray(w_deq.astype(np.float16)))
        cublas = cp.asnumpy(cublas + cp.asarray(bias)).astype(np.float64)
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        err_cublas = np.linalg.norm(cublas - ref) / np.linalg.norm(ref)
        assert np.isfinite(y).all() and err <= 2 * err_cublas + 1e-4, (err, err_cublas)

    def test_marlin_linear_bias_follows_the_kernel_on_its_stream(self):
        """``layer(x, stream=s)`` with CuPy's current stream elsewhere: the bias must be added on
        ``s`` after the kernel (on another stream it would race with the kernel's stores)."""
        rng = np.random.default_rng(16)
        w = rng.standard_normal((4096, 8192)).astype(np.float32) * 0.02
        bias = rng.standard_normal(8192).astype(np.float16)
        layer = mc.MarlinLinear.from_float(w, bias=bias, group_size=128)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            x = cp.asarray(rng.standard_normal((64, 4096)).astype(np.float16))
            want = mc.matmul(x, layer.weight)
            want += layer.bias
        s.synchronize()
        for trial in range(5):
            y = layer(x, stream=s)
            s.synchronize()
            assert cp.array_equal(y.view(cp.uint16), want.view(cp.uint16)), trial


class TestContextSms:
    """The grid is capped by the SMs this process's context may use (``device_facts``'s
    ``sms``, from ``cuCtxGetExecAffinity``), not the device's: under MPS with an active thread
    percentage a grid of every SM would never be resident at once, and its CTAs would wait for
    each other forever."""

    def test_a_plain_context_has_every_sm(self):
        from marlin_cupy import ops, pdl
        facts = ops.device_facts()
        every = cp.cuda.Device().attributes["MultiProcessorCount"]
        assert pdl.context_sm_count() in (None, every)
        assert facts["sms"] == facts["device_sms"] == every

    def test_the_facts_are_read_under_a_global_capture(self, monkeypatch):
        """The first plan may be made under a capture (torch.cuda.graph's default mode is
        global): reading the context's SMs must neither fail nor invalidate it."""
        from marlin_cupy import ops
        every = ops.device_facts()["device_sms"]
        monkeypatch.setattr(ops, "_device_props", {})
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture(cp.cuda.runtime.streamCaptureModeGlobal)
            try:
                facts = ops.device_facts()
                assert s.is_capturing()
            finally:
                s.end_capture()                     # raises if the capture was invalidated
        assert facts["sms"] == facts["device_sms"] == every

    def test_a_context_given_part_of_the_sms_caps_the_grid(self, monkeypatch):
        # MPS cannot be started from a test: the driver's answer is stood in for, and the
        # facts and plans made with it are dropped afterwards.
        from marlin_cupy import ops, pdl
        every = ops.device_facts()["device_sms"]
        part = every // 3
        monkeypatch.setattr(pdl, "context_sm_count", lambda: part)
        monkeypatch.setattr(ops, "_device_props", {})
        ops._plan.cache_clear()
        try:
            rng = np.random.default_rng(17)
            qw = make_weight(rng, 4096, 4096, 128)
            mw = mc.pack(qw).to_device()
            assert ops.device_facts()["sms"] == part
            for m in (1, 16, 64):
                plan = ops.plan(m, 4096, 4096, 128)
                assert plan.grid <= part * plan.config.blocks_per_sm, (m, plan.config.name)
                x_h = rng.standard_normal((m, 4096)).astype(np.float16)
                judge(x_h, qw, run(x_h, mw))
        finally:
            ops._plan.cache_clear()


@pytest.fixture(scope="module")
def small_weight():
    """One 256 x 128 weight shared by the bad-input tests (packed once per module)."""
    rng = np.random.default_rng(16)
    return mc.pack(make_weight(rng, 256, 128, 128)).to_device()


class TestBadInputs:
    @pytest.fixture
    def mw(self, small_weight):
        return small_weight

    def test_wrong_dtype(self, mw):
        with pytest.raises(ValueError, match="float16"):
            mc.matmul(cp.zeros((2, 256), cp.float32), mw)

    def test_torch_bfloat16_named(self, mw):
        # From a bfloat16 model: refused (whether CuPy views the tensor or not), saying float16.
        torch = pytest.importorskip("torch")
        x = torch.zeros((2, 256), dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match=r"float16.*(\.half\(\)|torch\.float16)"):
            mc.matmul(x, mw)

    def test_wrong_k(self, mw):
        with pytest.raises(ValueError, match="K=256"):
            mc.matmul(cp.zeros((2, 128), cp.float16), mw)

    def test_non_contiguous(self, mw):
        x = cp.zeros((256, 4), cp.float16).T
        with pytest.raises(ValueError, match="C-contiguous"):
            mc.matmul(x, mw)

    def test_misaligned(self, mw):
        buf = cp.zeros(2 * 256 + 8, cp.float16)
        x = buf[1:1 + 512].reshape(2, 256)
        with pytest.raises(ValueError, match="16-byte"):
            mc.matmul(x, mw)

    def test_host_weight(self, mw):
        with pytest.raises(ValueError, match="to_device"):
            mc.matmul(cp.zeros((2, 256), cp.float16), mw.to_host())

    def test_host_input(self, mw):
        with pytest.raises(ValueError, match="host"):
            mc.matmul(np.zeros((2, 256), np.float16), mw)

    def test_out_wrong_shape(self, mw):
        with pytest.raises(ValueError, match="out must have shape"):
            mc.matmul(cp.zeros((2, 256), cp.float16), mw, out=cp.zeros((2, 64), cp.float16))

    def test_config_tile_does_not_divide(self, mw):
        cfg = mc.KernelConfig(256, 1, 16, 4, 4, 8, True)   # 256-wide tile, N=128
        with pytest.raises(ValueError, match="N=128 is not a multiple"):
            mc.matmul(cp.zeros((2, 256), cp.float16), mw, config=cfg)

    def test_config_group_mismatch(self, mw):
        cfg = mc.KernelConfig(128, 1, 8, 4, 4, 4, True)    # g64 config, g128 weight
        with pytest.raises(ValueError, match="group_blocks"):
            mc.matmul(cp.zeros((2, 256), cp.float16), mw, config=cfg)

    def test_too_many_stages_for_device(self, mw):
        cfg = mc.KernelConfig(128, 1, 8, 4, 64, 8, True)
        with pytest.raises(ValueError, match="shared memory"):
            mc.matmul(cp.zeros((2, 256), cp.float16), mw, config=cfg)
