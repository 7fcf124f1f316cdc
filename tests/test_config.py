"""KernelConfig: validation mirrors the kernel's static_asserts, names round-trip, dispatch."""
import pytest

from marlin_cupy import jit, kernels
from marlin_cupy.config import (INSTANTIATED, KernelConfig, choose_config, m_bucket,
                                tuned_instances)

# Each violates exactly one constraint of struct Marlin in cuda/marlin.cuh.
INVALID = {
    "threads": KernelConfig(threads=192),
    "m_blocks": KernelConfig(thread_m_blocks=5),
    "n_blocks": KernelConfig(thread_n_blocks=6),
    "k_blocks": KernelConfig(threads=256, thread_n_blocks=4, thread_k_blocks=4),  # 8 k-warps
    "stages": KernelConfig(stages=1),
    "groups": KernelConfig(thread_k_blocks=8, group_blocks=3),
    "swap_m_blocks": KernelConfig(thread_m_blocks=2, swap_ab=1),
    "swap_value": KernelConfig(swap_ab=3),
    "wgmma_k_blocks": KernelConfig(thread_k_blocks=6, swap_ab=2, wgmma=True),
    "wgmma_m_blocks": KernelConfig(thread_m_blocks=1, thread_k_blocks=4, swap_ab=4, wgmma=True),
    "parallel_fp16": KernelConfig(fp32_reduce=False, parallel_reduce=True),
    "wgmma16_m_blocks": KernelConfig(thread_m_blocks=4, thread_k_blocks=8, swap_ab=16, wgmma=True),
    # 32-column warps: 64 columns are 2 warps, not a warpgroup
    "wgmma16_n_blocks": KernelConfig(threads=128, thread_m_blocks=8, thread_n_blocks=4,
                                     thread_k_blocks=8, swap_ab=16, wgmma=True),
    # run-time hand-out: the serial reduction, chunks shorter than the ring, the shared sum
    # (48-row tiles: run-time hand-out takes 16 and 32), wgmma, a producer
    "dyn_serial": KernelConfig(dyn_chunk=8),
    "dyn_short_chunk": KernelConfig(parallel_reduce=True, stages=6, dyn_chunk=5),
    "dyn_coop": KernelConfig(thread_m_blocks=4, parallel_reduce=True, dyn_chunk=8),
    "dyn_wgmma": KernelConfig(thread_m_blocks=2, thread_k_blocks=8, swap_ab=4, wgmma=True,
                              parallel_reduce=True, dyn_chunk=8),
    "dyn_producer": KernelConfig(swap_ab=1, parallel_reduce=True, producer=True, dyn_chunk=8),
    # the early bottom: FP16 partials in C, 32-row tiles, a producer, run-time hand-out
    "early_fp16": KernelConfig(fp32_reduce=False, early_bottom=True),
    "early_32_rows": KernelConfig(thread_m_blocks=2, early_bottom=True),
    "early_producer": KernelConfig(swap_ab=1, producer=True, early_bottom=True),
    "early_dyn": KernelConfig(parallel_reduce=True, dyn_chunk=8, early_bottom=True),
    # the column's top summing: the serial chain, 32-row tiles (the shared sum), a producer,
    # run-time hand-out, and with the early bottom (which it includes)
    "top_serial": KernelConfig(swap_ab=1, top_sum=True),
    "top_32_rows": KernelConfig(thread_m_blocks=2, parallel_reduce=True, top_sum=True),
    "top_producer": KernelConfig(swap_ab=1, parallel_reduce=True, producer=True, top_sum=True),
    "top_dyn": KernelConfig(parallel_reduce=True, dyn_chunk=8, top_sum=True),
    "top_and_early": KernelConfig(parallel_reduce=True, early_bottom=True, top_sum=True),
    # narrower warps in the mma.sync loop: only with swapped operands (the unswapped loop
    # holds 64 columns per warp)
    "warp_n_unswapped": KernelConfig(threads=512, warp_n=32),
}


class TestValidationMirrorsStaticAsserts:
    @pytest.mark.parametrize("what", sorted(INVALID))
    def test_python_rejects(self, what):
        with pytest.raises(ValueError, match="invalid KernelConfig"):
            INVALID[what].validate()

    @pytest.mark.parametrize("what", sorted(INVALID))
    def test_kernel_rejects_the_same(self, what):
        src = kernels.marlin_source(INVALID[what], check=False)
        with pytest.raises(RuntimeError, match="static assertion failed"):
            jit.compile_offline(src, "sm_90")

    def test_producer_needs_sm90(self):
        """The producer's barriers wait with mbarrier.try_wait (sm_90): an sm_80 build of a
        producer config stops at a static_assert instead of compiling without its waits."""
        cfg = KernelConfig(producer=True).validate()
        jit.compile_offline(kernels.marlin_source(cfg), "sm_90")
        with pytest.raises(RuntimeError, match="static assertion failed"):
            jit.compile_offline(kernels.marlin_source(cfg), "sm_80")

    def test_wide_twins(self):
        """A narrow-warp mma.sync example's twin has 64-column warps and the same warps along
        K (the same sums in the same order; NOTES.md entry 74)."""
        from marlin_cupy.config import MMA_WIDE_EXAMPLES, wide_twin
        narrow = [c for c in MMA_WIDE_EXAMPLES if c.warp_n]
        assert narrow and all(not c.problems() for c in MMA_WIDE_EXAMPLES)
        for c in narrow:
            t = wide_twin(c)
            assert t.warp_n == 0 and t.k_warps == c.k_warps and t.warp_cols == 64
            assert t.with_(threads=c.threads, warp_n=c.warp_n) == c
        assert wide_twin(KernelConfig.from_name("t512_m1_n16_k16_s4_g8_fp32par_sw1_w32")).name \
            == "t256_m1_n16_k16_s4_g8_fp32par_sw1"
        with pytest.raises(ValueError, match="not a narrow-warp"):
            wide_twin(KernelConfig.from_name("t512_m1_n16_k16_s4_g8_fp32par_sw1"))

    def test_a_valid_config_compiles(self):
        jit.compile_offline(kernels.marlin_source(KernelConfig()), "sm_90")

    def test_python_geometry_is_the_kernels(self):
        """smem_bytes, the warps along N and K and the columns per warp, checked against the
        kernel's own constexprs by static_asserts that NVRTC evaluates (no GPU): every example,
        every tuned config and a spread of the instantiated ones, sym and zero-point."""
        from marlin_cupy.config import (DYN_EXAMPLES, EARLY_BOTTOM_EXAMPLES,
                                        MMA_WIDE_EXAMPLES, PARALLEL_REDUCE_EXAMPLES,
                                        PRODUCER_EXAMPLES, TOP_SUM_EXAMPLES, WGMMA_EXAMPLES)
        cfgs = set(WGMMA_EXAMPLES) | set(PARALLEL_REDUCE_EXAMPLES) | set(INSTANTIATED[::5])
        cfgs |= set(PRODUCER_EXAMPLES) | set(DYN_EXAMPLES) | set(EARLY_BOTTOM_EXAMPLES)
        cfgs |= set(TOP_SUM_EXAMPLES) | set(MMA_WIDE_EXAMPLES)
        cfgs |= {c for cs in tuned_instances().values() for c in cs}
        lines = [kernels._base_source(), "\n"]
        for cfg in sorted(cfgs, key=lambda c: c.name):
            for zp in (False, True):
                k = f"mc::Marlin<{kernels.template_args(cfg, zp)}>"
                lines.append(
                    f"static_assert({k}::SMEM_INT4 * 16 == {cfg.smem_bytes(zp)} && "
                    f"{k}::N_WARPS == {cfg.n_warps} && {k}::K_WARPS == {cfg.k_warps} && "
                    f"{k}::WARP_COLS == {cfg.warp_cols}, \"{cfg.name} zp={zp}\");\n")
        jit.compile_offline("".join(lines), "sm_90")

    def test_shared_memory_limit_names_both_sizes(self):
        cfg = KernelConfig(stages=40)
        with pytest.raises(ValueError, match=r"needs \d+ bytes of shared memory, the device allows"):
            cfg.validate(smem_limit=232448)


class TestNames:
    @pytest.mark.parametrize("cfg", list(INSTANTIATED[:10]) + [
        KernelConfig(blocks_per_sm=2), KernelConfig(group_blocks=-1, fp32_reduce=False),
        KernelConfig(swap_ab=1), KernelConfig(swap_ab=2, blocks_per_sm=2),
        KernelConfig(thread_m_blocks=4, thread_k_blocks=4, swap_ab=8, wgmma=True, blocks_per_sm=2),
        KernelConfig(parallel_reduce=True),
        KernelConfig(thread_m_blocks=2, thread_k_blocks=8, swap_ab=4, wgmma=True,
                     parallel_reduce=True),
        KernelConfig(threads=128, thread_m_blocks=8, thread_n_blocks=8, thread_k_blocks=4,
                     swap_ab=16, wgmma=True, blocks_per_sm=2),
        KernelConfig(thread_m_blocks=4, thread_k_blocks=8, swap_ab=8, wgmma=True,
                     parallel_reduce=True, warp_n=32, producer=True),
        KernelConfig(threads=128, thread_k_blocks=8, swap_ab=2, wgmma=True, producer=True,
                     blocks_per_sm=2),
        KernelConfig(swap_ab=1, parallel_reduce=True, dyn_chunk=8, blocks_per_sm=2),
        KernelConfig(thread_m_blocks=2, parallel_reduce=True, dyn_chunk=12),
        KernelConfig(swap_ab=1, parallel_reduce=True, top_sum=True, blocks_per_sm=2),
        KernelConfig(swap_ab=1, early_bottom=True, blocks_per_sm=2),
        KernelConfig(swap_ab=1, parallel_reduce=True, early_bottom=True, column_ctas=1),
        KernelConfig(threads=128, thread_m_blocks=8, thread_n_blocks=8, thread_k_blocks=4,
                     swap_ab=16, wgmma=True, producer=True, column_ctas=12, blocks_per_sm=2)],
        ids=lambda c: c.name)
    def test_round_trip(self, cfg):
        assert KernelConfig.from_name(cfg.name) == cfg

    def test_producer_geometry(self):
        """The producer warpgroup adds 128 launched threads and an `empty` mbarrier per slot,
        and is refused where the kernel has no register plan for it."""
        base = KernelConfig(thread_m_blocks=4, thread_k_blocks=8, swap_ab=8, wgmma=True)
        ws = base.with_(producer=True)
        assert ws.name == base.name + "_ws" and ws.launch_threads == 384
        assert base.launch_threads == 256
        assert ws.smem_bytes(False) - base.smem_bytes(False) == 16 * (4 - 2)
        assert ws.producer_registers == (168, 56, 224)
        assert ws.with_(threads=128, blocks_per_sm=2).producer_registers == (128, 56, 200)
        assert ws.with_(threads=128).producer_registers is None
        t512 = ws.with_(threads=512, thread_n_blocks=32, warp_n=32)
        assert t512.validate().launch_threads == 640
        assert t512.producer_registers == (96, 56, 104)
        for bad in (ws.with_(blocks_per_sm=2), t512.with_(blocks_per_sm=2),
                    KernelConfig(threads=512, thread_n_blocks=16, thread_k_blocks=8, swap_ab=1,
                                 producer=True)):
            with pytest.raises(ValueError, match="producer"):
                bad.validate()

    def test_dyn_chunk_geometry(self):
        """Run-time hand-out adds the ring of drawn chunks (one int4) to shared memory and
        counts the chunks of a launch, the last one short."""
        base = KernelConfig(swap_ab=1, parallel_reduce=True)
        dyn = base.with_(dyn_chunk=8)
        assert dyn.name == base.name + "_q8"
        assert dyn.smem_bytes(False) - base.smem_bytes(False) == 16
        assert [dyn.chunks(u) for u in (1, 8, 9, 16, 17)] == [1, 1, 2, 2, 3]
        assert dyn.with_(dyn_chunk=4).validate() and dyn.with_(dyn_chunk=3).problems()
        with pytest.raises(ValueError, match="no chunks"):
            base.chunks(16)

    def test_column_ctas_is_a_cap_on_the_host(self):
        """``column_ctas`` names a grid's cap (``_c<n>`` before ``_b``), compiles to the same
        kernel as the config without it, and caps at n x the tile columns x the row slabs."""
        from marlin_cupy import kernels
        base = KernelConfig.from_name("t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16_ws")
        capped = base.with_(column_ctas=1)
        assert capped.name == base.name + "_c1"
        assert KernelConfig.from_name(base.name + "_c2_b2") == base.with_(column_ctas=2,
                                                                          blocks_per_sm=2)
        assert capped.compiled == base and base.compiled is base
        for zp in (False, True):
            assert kernels.marlin_source(capped, zp) == kernels.marlin_source(base, zp)
            assert kernels.marlin_entry(capped, zp) == kernels.marlin_entry(base, zp)
        assert base.column_grid(64, 9728) is None
        assert capped.column_grid(64, 9728) == 76                  # 9728 / 128 columns, 1 slab
        assert capped.column_grid(65, 9728) == 152                 # two 64-row slabs
        assert base.with_(column_ctas=3).column_grid(1, 1024) == 24
        assert not capped.problems()
        for bad in (base.with_(column_ctas=-1),
                    KernelConfig(swap_ab=1, parallel_reduce=True, dyn_chunk=8, column_ctas=1)):
            with pytest.raises(ValueError, match="column_ctas"):
                bad.validate()

    def test_bad_name_says_the_form(self):
        with pytest.raises(ValueError, match="t256_m1_n16_k4_s4_g8_fp32"):
            KernelConfig.from_name("fast")


class TestDispatch:
    @pytest.mark.parametrize("m", [1, 16, 17, 33, 48, 64, 65, 1000])
    def test_heuristic_covers_m(self, m):
        cfg = choose_config(m, 8192, 8192, 128)
        assert cfg.tile_m >= min(m, 64) and not cfg.problems()
        assert cfg.thread_m_blocks != 3        # spills on sm_80; see HEURISTIC_M_BLOCKS

    def test_heuristic_swaps_operands_up_to_8_rows(self):
        assert [choose_config(m, 8192, 8192, 128).swap_ab for m in (1, 8, 9, 16)] == [1, 1, 0, 0]

    def test_tuned_table_is_used_for_its_device(self):
        tuned = choose_config(16, 57344, 8192, 128, device_name="NVIDIA H200")
        assert tuned.name in {c.name for c in tuned_instances()["sm_90"]}

    def test_other_devices_use_the_heuristic(self):
        assert choose_config(16, 57344, 8192, 128, device_name="Some GPU") == \
            choose_config(16, 57344, 8192, 128)

    def test_zero_points_never_get_a_config_that_does_not_fit(self):
        for m in (1, 16, 32, 48, 64, 256):
            for k, n in [(8192, 8192), (4096, 12288), (5120, 5120)]:
                cfg = choose_config(m, n, k, 128, has_zp=True, device_name="NVIDIA H200")
                assert cfg.smem_bytes(True) <= 232448

    def test_swap_ab_1_refuses_more_than_8_rows(self):
        from marlin_cupy.ops import check_problem
        cfg = KernelConfig(thread_n_blocks=16, thread_k_blocks=8, swap_ab=1)
        check_problem(cfg, 8, 8192, 8192, 128, False, 232448)
        with pytest.raises(ValueError, match="M=9 is more than the 8 rows"):
            check_problem(cfg, 9, 8192, 8192, 128, False, 232448)
        check_problem(cfg.with_(swap_ab=2), 1000, 8192, 8192, 128, False, 232448)

    def test_wgmma_configs_need_compute_capability_9_0(self):
        from marlin_cupy.ops import check_problem
        cfg = KernelConfig.from_name("t128_m1_n16_k4_s4_g8_fp32_sw2_wg")
        check_problem(cfg, 16, 8192, 8192, 128, False, 232448, "90")
        with pytest.raises(ValueError, match="sm_90a"):
            check_problem(cfg, 16, 8192, 8192, 128, False, 232448, "80")

    def test_tuned_swap_1_entry_is_not_used_beyond_8_rows(self, monkeypatch):
        from marlin_cupy import tune
        monkeypatch.setattr(tune, "lookup", lambda *a: KernelConfig(256, 1, 16, 8, 4, 8,
                                                                    swap_ab=1))
        assert choose_config(8, 8192, 8192, 128, device_name="X").swap_ab == 1
        assert choose_config(9, 8192, 8192, 128, device_name="X").max_m is None

    def test_tuned_swap_16_entry_keeps_its_128_row_slabs(self, monkeypatch):
        from marlin_cupy import tune
        cfg = KernelConfig.from_name("t256_m8_n16_k8_s4_g8_fp32_sw16_wg")
        monkeypatch.setattr(tune, "lookup", lambda *a: cfg)
        for m in (65, 128, 129, 1000):
            assert choose_config(m, 8192, 8192, 128, device_name="X") == cfg

    def test_unsupported_shape_says_what_to_pad(self):
        with pytest.raises(ValueError, match="pad"):
            choose_config(1, 96, 4096, 128)

    def test_buckets(self):
        assert [m_bucket(m) for m in (1, 8, 9, 16, 17, 48, 49, 64, 65, 80, 81, 96, 97, 112,
                                      113, 128, 129, 192, 193, 256, 257, 512, 513, 4096)] == \
            [8, 8, 16, 16, 32, 48, 64, 64, 80, 80, 96, 96, 112, 112, 128, 128, 192, 192, 256,
             256, 512, 512, 1 << 30, 1 << 30]


class TestSm90Heuristic:
    """The compute capability 9.0 heuristic (NOTES.md entry 81): what the dispatch gives a
    problem the tuned table lacks on H100/H200."""

    ALL_M = (1, 8, 9, 16, 17, 32, 33, 48, 64, 65, 128, 129, 192, 193, 256, 257, 512, 513,
             1024)

    def test_the_table_is_the_rule_on_the_shipped_measurements(self):
        """SM90_HEURISTIC is what tune.heuristic_rule finds in the shipped H200 table's own
        measurements of the llama2 layers (a full run's; other models' layers were tuned on
        a few ranked candidates): a re-tune that moves the winners moves this test, not the
        dispatch."""
        import json

        from marlin_cupy import tune
        from marlin_cupy.bench.shapes import set_shapes
        from marlin_cupy.config import SM90_HEURISTIC
        measured = json.loads(tune.shipped_path("NVIDIA H200").read_text())["measurements"]
        llama2 = set(set_shapes("llama2-7b,llama2-13b,llama2-70b"))
        assert tune.heuristic_rule(measured, layers=llama2) == SM90_HEURISTIC

    def test_the_rule_scores_by_geometric_mean_and_coverage(self):
        """On made-up measurements: the config with the smaller geometric mean of slowdowns
        wins within a tile class, a config measured on fewer layers loses to one measured on
        all, and excluded names are passed over."""
        from marlin_cupy import tune
        a, b, c = ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws",
                   "t256_m4_n16_k8_s4_g8_fp32par_sw8_wg_w32_ws",
                   "t256_m4_n16_k8_s3_g8_fp32par_sw8_wg_w32_ws")
        rows = [dict(m=64, n=n, k=4096, config=cfg, median_us=us)
                for n, times in ((4096, (10, 11, 5)), (8192, (20, 19, None)))
                for cfg, us in zip((a, b, c), times) if us is not None]
        # a: slowdowns 1/1 and 20/19; b: 11/10 and 1 -> a's geometric mean is smaller
        assert tune.heuristic_rule(rows, exclude={})[64] == (a,)
        assert tune.heuristic_rule(rows, exclude={a: "test"})[64] == (b,)
        # c is the fastest on its one layer but is measured on one of two
        assert c not in tune.heuristic_rule(rows, exclude={})[64]
        # the 128-wide class takes the parallel reduction only, however fast a serial one is
        serial, par = "t256_m4_n8_k8_s8_g8_fp32_sw8_wg_w16_ws", "t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16_ws"
        rows += [dict(m=64, n=4096, k=4096, config=serial, median_us=1),
                 dict(m=64, n=4096, k=4096, config=par, median_us=50)]
        assert tune.heuristic_rule(rows, exclude={})[64][-1] == par

    def test_register_capped_mma_tiles_are_passed_over(self):
        """Two CTAs of 256 mma.sync threads per SM (128 registers) spill at some group size:
        the rule never takes them, however fast at g128; wgmma ones with two CTAs it may."""
        from marlin_cupy import tune
        from marlin_cupy.config import SM90_INSTANTIATED
        passed = tune.heuristic_passes_over
        assert passed(KernelConfig.from_name("t256_m1_n8_k8_s4_g8_fp32par_sw1_b2"))
        assert passed(KernelConfig.from_name("t256_m1_n8_k16_s3_g8_fp32par_sw1_eb_b2"))
        assert not passed(KernelConfig.from_name("t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2"))
        assert not passed(KernelConfig.from_name("t256_m1_n16_k8_s6_g8_fp32par_sw1_eb"))
        assert not any(passed(c) for c in SM90_INSTANTIATED)
        fast = "t256_m1_n8_k8_s4_g8_fp32par_sw1_b2"
        rows = [dict(m=8, n=896, k=896, config=fast, median_us=1.0),
                dict(m=8, n=896, k=896, config="t256_m1_n8_k8_s6_g8_fp32par_sw1_eb",
                     median_us=2.0)]
        assert tune.heuristic_rule(rows)[8] == ("t256_m1_n8_k8_s6_g8_fp32par_sw1_eb",)

    @pytest.mark.parametrize("group_size", [32, 64, 128, -1])
    @pytest.mark.parametrize("has_zp", [False, True])
    def test_every_choice_is_instantiated_valid_and_fits(self, group_size, has_zp):
        from marlin_cupy.config import SM90_INSTANTIATED, group_blocks_for
        from marlin_cupy.ops import check_problem
        shapes = [(4096, 6144), (4096, 28672), (14336, 4096), (3584, 4608), (896, 1152),
                  (896, 896), (4864, 896), (3072, 9216), (192, 640), (640, 192), (192, 128),
                  (896, 9728), (1024, 16384)]
        for k, n in shapes:
            if group_size != -1 and k % group_size:
                continue
            for m in self.ALL_M:
                for sms in (None, 132, 114, 78):
                    cfg = choose_config(m, n, k, group_size, has_zp, cc="90", sms=sms)
                    check_problem(cfg, m, n, k, group_size, has_zp, 232448, "90")
                    assert cfg.group_blocks == group_blocks_for(group_size, k)
                    if cfg != choose_config(m, n, k, group_size, has_zp):
                        assert cfg.compiled in SM90_INSTANTIATED, (m, n, k, cfg.name)

    def test_wgmma_from_9_rows_on_256_wide_tiles(self):
        """N a multiple of 256, K of 128: wgmma with a producer from 9 rows on. (At 9..16 rows
        the 128-wide fallback is an mma.sync tile: no 128-wide wgmma tile was measured there.)"""
        for k, n in [(4096, 6144), (3584, 37888), (18944, 3584), (896, 9728), (3072, 3072)]:
            for m in self.ALL_M:
                cfg = choose_config(m, n, k, 128, cc="90")
                assert cfg.wgmma == (m > 8), (m, n, k, cfg.name)
                assert cfg.producer == (m > 8)

    def test_fallbacks_by_tile(self):
        from marlin_cupy.config import SM90_HEURISTIC, KernelConfig
        first, deep64, wide128 = (KernelConfig.from_name(n).with_(group_blocks=8)
                                  for n in SM90_HEURISTIC[64])
        assert choose_config(64, 4096, 4096, 128, cc="90") == first
        assert choose_config(64, 4096, 4096 + 64, 64, cc="90").with_(group_blocks=8) == deep64
        assert choose_config(64, 896, 896, 128, cc="90") == wide128
        # N a multiple of 64 only: no sm_90 tile, the generic heuristic's
        assert choose_config(64, 64 * 9, 4096, 128, cc="90") == choose_config(64, 64 * 9, 4096, 128)

    def test_candidates_are_the_bucket_in_order_and_the_choice_is_the_first(self):
        from marlin_cupy.config import SM90_HEURISTIC, m_bucket, sm90_candidates
        for k, n in [(4096, 4096), (896, 896), (896, 9728), (4096 + 64, 4096)]:
            for m in self.ALL_M:
                fits = sm90_candidates(m, n, k, 128)
                order = [c.with_(stages=0, thread_m_blocks=0).name for c in fits]
                bucket = [KernelConfig.from_name(x).with_(stages=0, thread_m_blocks=0).name
                          for x in SM90_HEURISTIC[m_bucket(m)]]
                assert order == [x for x in bucket if x in order], (m, n, k)
                assert fits and choose_config(m, n, k, 128, cc="90") == fits[0], (m, n, k)
                assert all(n % c.tile_n == 0 and k % c.tile_k == 0 for c in fits)

    def test_short_columns_take_whole_columns(self):
        """Given the SM count, the first candidate whose columns are at most eight units deep
        and whose whole columns fill half the grid or more runs with one CTA per column: on
        qwen2.5-0.5b's 896x9728 the configs entry 83 measured fastest there."""
        from marlin_cupy.config import SHORT_COLUMN_UNITS, sm90_candidates, whole_columns
        want = {1: "t256_m1_n8_k8_s6_g8_fp32par_sw1_eb_c1",
                8: "t256_m1_n8_k8_s6_g8_fp32par_sw1_eb_c1",
                16: "t256_m1_n8_k8_s8_g8_fp32par_sw2_eb_c1",
                64: "t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16_ws_c1",
                256: "t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws_c1"}
        for m, name in want.items():
            assert choose_config(m, 9728, 896, 128, cc="90", sms=132).name == name, m
            # without the SM count, or past the table: the first candidate, uncapped
            assert choose_config(m, 9728, 896, 128, cc="90") == sm90_candidates(m, 9728, 896, 128)[0]
        # M = 128: the 128-wide candidate is 64 deep (14 units), the others' 38 columns fill
        # under half of 132: no cap
        assert not choose_config(128, 9728, 896, 128, cc="90", sms=132).column_ctas
        # M = 1024: 8 row slabs x 38 columns exceed the grid; nothing to cap
        assert not choose_config(1024, 9728, 896, 128, cc="90", sms=132).column_ctas
        # on a GPU with fewer SMs the same columns fill the grid: the first candidate, whole
        assert choose_config(1, 9728, 896, 128, cc="90", sms=66).name == \
            "t256_m1_n16_k8_s6_g8_fp32par_sw1_eb_c1"
        # deep columns (32 units of 128) are never capped, whatever the grid
        for m in self.ALL_M:
            for sms in (16, 40, 132):
                assert not choose_config(m, 4096, 4096, 128, cc="90", sms=sms).column_ctas
        # the rule itself: the bounds of the share and of the depth
        cfg = KernelConfig.from_name("t256_m1_n8_k8_s6_g8_fp32par_sw1_eb")
        assert whole_columns([cfg], 1, 128 * 66, 896, 132) == cfg.with_(column_ctas=1)
        assert whole_columns([cfg], 1, 128 * 65, 896, 132) is None          # under half
        assert whole_columns([cfg], 1, 128 * 132, 896, 132) is None         # the whole grid
        assert whole_columns([cfg], 1, 128 * 76, 128 * SHORT_COLUMN_UNITS, 132) is not None
        assert whole_columns([cfg], 1, 128 * 76, 128 * (SHORT_COLUMN_UNITS + 1), 132) is None

    def test_narrow_layers_take_the_128_wide_candidate_first(self):
        """Given the SM count, layers of N <= 3072 (<= 2048 up to 8 rows) take the bucket's
        128-wide candidate up to M = 256; wider ones, larger M, and the fitted order without
        the SM count keep the 256-wide first."""
        from marlin_cupy.config import (NARROW_MAX_M, NARROW_N, NARROW_N_DECODE,
                                        narrow_first, sm90_candidates)
        assert (NARROW_N, NARROW_N_DECODE, NARROW_MAX_M) == (3072, 2048, 256)
        for k, n in [(1536, 1536), (8960, 1536), (2048, 2048), (8192, 2048), (3072, 3072),
                     (2048, 3072), (4096, 4096), (3584, 3584), (2048, 16384)]:
            for m in self.ALL_M:
                fits = sm90_candidates(m, n, k, 128)
                cfg = choose_config(m, n, k, 128, cc="90", sms=132)
                narrow = m <= NARROW_MAX_M and n <= (NARROW_N if m > 8 else NARROW_N_DECODE)
                want = next(c for c in fits if c.tile_n == 128) if narrow else fits[0]
                assert cfg == want, (m, n, k, cfg.name)
                assert choose_config(m, n, k, 128, cc="90") == fits[0]
                order = narrow_first(fits, m, n)
                assert sorted(order, key=lambda c: c.name) == sorted(fits, key=lambda c: c.name)
        # the llama2 table's layers are dispatched from the table whatever the rule
        for m in self.ALL_M:
            assert choose_config(m, 4096, 4096, 128, device_name="NVIDIA H200", cc="90",
                                 sms=132) == choose_config(m, 4096, 4096, 128,
                                                           device_name="NVIDIA H200")

    @pytest.mark.parametrize("cc", [None, "80", "86", "89", "100", "120"])
    def test_other_devices_keep_the_generic_heuristic(self, cc):
        for m in self.ALL_M:
            cfg = choose_config(m, 6144, 4096, 128, cc=cc)
            assert not cfg.wgmma and not cfg.producer and cfg == choose_config(m, 6144, 4096, 128)

    def test_the_tuned_table_comes_first(self):
        for m in self.ALL_M:
            assert choose_config(m, 57344, 8192, 128, device_name="NVIDIA H200", cc="90") == \
                choose_config(m, 57344, 8192, 128, device_name="NVIDIA H200")

    def test_shared_memory_short_takes_fewer_stages(self):
        cfg = choose_config(64, 4096, 4096, 128, cc="90")
        small = choose_config(64, 4096, 4096, 128, cc="90",
                              smem_limit=cfg.with_(stages=4).smem_bytes(False))
        assert small == cfg.with_(stages=4)
