"""Kernel configurations: what the template parameters mean, which combinations are valid,
which ones we instantiate, and the default choice per problem.

``KernelConfig.validate`` mirrors the ``static_assert``s of ``cuda/marlin.cuh`` (struct
``Marlin``) and adds the one check the compiler cannot make: shared memory on the device.
``smem_bytes`` is the same formula as ``Marlin::SMEM_INT4``; the kernel traps if the launch
gives it less, so a drift between the two cannot corrupt memory silently.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

# Tile shapes (threads, thread_n_blocks, thread_k_blocks): CTA tiles of 16*m x 16*n x 16*k.
TILE_SHAPES = (
    (256, 16, 4),   # 256 columns x 64 of K per stage: wide N, the large-batch workhorse
    (256, 16, 8),   # 256 x 128: twice the bytes per stage, half the barriers per byte
    (256, 8, 8),    # 128 x 128
    (128, 8, 4),    # 128 x 64, 4 warps: small N
    (128, 4, 8),    # 64 x 128, 4 warps: the smallest N the layout allows (N % 64)
)
GROUP_BLOCKS = (-1, 2, 4, 8)      # per-channel, g32, g64, g128
DEFAULT_STAGES = 4               # fits every sm_80+ device for every tile shape
MAX_M_BLOCKS = 4                 # 64 rows per mma.sync tile (wgmma: TALL_SWAPS); M beyond a
#                                 tile runs as slabs of its rows inside the kernel
WGMMA_SWAPS = (1, 2, 4, 6, 8, 10, 12, 14, 16)   # 8-row blocks per wgmma; 16: 128-row slabs
#: wgmma swaps whose tiles are taller than MAX_M_BLOCKS blocks of 16 rows: 80- to 128-row slabs.
TALL_SWAPS = (10, 12, 14, 16)
PRODUCER_THREADS = 128           # the producer warpgroup (the kernel's COPY_T with a producer)
PRODUCER_REGS = 56               # the producer warpgroup's setmaxnreg (MARLIN_WS_PRODUCER_REGS)
#: The group scale inside the unpacking (the kernel's FMA; benchmarks/NOTES.md entry 87) takes
#: s * 2^20 in fp16: every |scale| must be below 2^-4 (65504 / 2^20 is the largest that fits).
FMA_SCALE_LIMIT = 2.0 ** -4


def group_blocks_for(group_size: int, k: int) -> int:
    """Template value for a weight's group size (-1: one scale per column)."""
    if group_size == -1 or group_size >= k:
        return -1
    if group_size % 16:
        raise ValueError(f"group_size={group_size} is not a multiple of 16.")
    return group_size // 16


@dataclass(frozen=True)
class KernelConfig:
    """Template parameters of one kernel instance (see cuda/marlin.cuh for their meaning)."""

    threads: int = 256
    thread_m_blocks: int = 1
    thread_n_blocks: int = 16
    thread_k_blocks: int = 4
    stages: int = DEFAULT_STAGES
    group_blocks: int = 8
    fp32_reduce: bool = True
    blocks_per_sm: int = 1       # CTAs resident per SM (more warps to hide latency when small)
    #: 0: weights are the MMA's B operand. 1 or 2: weights are its A operand and the rows of x
    #: its B operand, in 1 or 2 blocks of 8 (needs thread_m_blocks=1; 1 serves M <= 8 only):
    #: half the MMAs at M <= 8 and the group scale applied once per stage, in FP32.
    swap_ab: int = 0
    #: (sm_90a only) swapped operands through wgmma: a warpgroup multiplies 64 columns x
    #: 8*swap_ab rows per instruction; swap_ab in {1, 2, 4, 6, 8, 10, 12, 14, 16}, thread_m_blocks =
    #: max(1, swap_ab // 2), thread_k_blocks a multiple of 4, thread_n_blocks a multiple of 16.
    #: swap_ab=16 (m64n128k16, 128-row slabs) gives each warp 32 columns instead of 64, so
    #: thread_n_blocks a multiple of 8: the weights are dequantized once per 128 rows.
    #: swap_ab=6 and 12 (48- and 96-row slabs, NOTES.md entry 104) fill the steps between:
    #: M = 33..48 and 65..96 need not pay for 64 and 128 rows of tensor work; 10 and 14 (80
    #: and 112 rows, m64n80k16 and m64n112k16, entry 106) the steps of 16 rows above 64.
    wgmma: bool = False
    #: (fp32_reduce only) the CTAs sharing a column leave their partial sums side by side and
    #: the same sums are added in the same order once all are in: by the last to arrive on
    #: tiles of 16 rows, by every CTA whose stripe ends in the column, a share each, on
    #: tiles of 32 rows or more; instead of one CTA after another (name: fp32par).
    parallel_reduce: bool = False
    #: (wgmma, or the swapped mma.sync loop) columns per warp, 16, 32 or 64; 0 for the
    #: default (64, or 32 with swap_ab=16). Narrower warps hold fewer accumulators (columns /
    #: 16 x 4 x swap_ab floats per thread, at most 128), so more warps fit an SM: 512 threads,
    #: or two CTAs of 256 (name: _w16, _w32, _w64). In the mma.sync loop at M <= 16 (NOTES.md
    #: entry 74, prepared): 512 threads with the 256-thread config's split of K.
    warp_n: int = 0
    #: (compute capability 9.0+) warp specialization: one more warpgroup of 128 threads,
    #: launched after the ``threads`` that compute, issues every copy of the ring (each slot's
    #: fill completes on an mbarrier; the compute warps release a slot on another), so the
    #: compute warps never touch a global address and never wait at a CTA-wide barrier in the
    #: loop. With wgmma, where the launch bounds leave the compute threads short, the producer
    #: gives up registers to them (setmaxnreg: 56 for itself, and 224 for 256 compute threads,
    #: 104 for 512, 200 for 128 with two CTAs per SM; ``producer_registers``). Name: _ws.
    producer: bool = False
    #: (parallel_reduce, tiles of up to 32 rows, mma.sync without a producer) units handed out
    #: at run time: the stripes become chunks of ``dyn_chunk`` units, more of them than CTAs;
    #: each CTA takes its first chunk by its index and draws the next ones from a counter in
    #: the workspace, so SMs that stream faster take more (0: one static stripe per CTA). The
    #: column sums are the parallel reduction's, in chunk order: reproducible bits. At least
    #: ``stages`` (the prologue stays in the first chunk). Name: _q<dyn_chunk>.
    dyn_chunk: int = 0
    #: (fp32_reduce, tiles below 32 rows, no producer or run-time hand-out) the early bottom
    #: (MARLIN_PAR_EARLY_BOTTOM for this instance; benchmarks/NOTES.md entries 68-69): the CTA
    #: holding the bottom of a split column that ends inside its stripe writes its partial
    #: into the column's slot of the workspace without a count-in or a fence, and goes on
    #: streaming; the column's summing CTA (parallel reduction) or the chain's second CTA
    #: (serial) reads it from there. The same sums, the same bits. Name: _eb.
    early_bottom: bool = False
    #: (parallel_reduce, tiles below 32 rows, no producer or run-time hand-out) the column's top
    #: sums (NOTES.md entry 73): every CTA of a split column but its top writes its partial as
    #: the early bottom does (never-zero words into a slot of its own in the workspace, no
    #: count-in, no fence) and goes on or exits; the top, which reaches the column at its
    #: stripe's end, adds the others' words and its own partial in the last arriver's order and
    #: writes C. The same sums, the same bits. Includes the early bottom. Name: _ts.
    top_sum: bool = False
    #: (host side only: the same compiled kernel as with 0) the grid is capped at
    #: ``column_ctas`` x the tile columns x the row slabs, so that no column has more than
    #: ``column_ctas`` sharers where the persistent grid allows that many CTAs; 1 gives every CTA
    #: whole columns (no partial sums, no count-in). It pays on short columns, where the
    #: cross-CTA sums cost more than the longer stripes (896x9728, seven 128-deep units per
    #: column: -15..-36 %, benchmarks/NOTES.md entries 83 and 84). 0: one CTA per resident
    #: slot. Name: _c<n>.
    column_ctas: int = 0

    # ---- derived quantities, the same constexprs as in the kernel
    @property
    def warp_cols(self) -> int:
        """Columns per warp (WARP_COLS in the kernel): ``warp_n`` if set, else 64, or 32 for
        wgmma with swap_ab=16."""
        if self.warp_n:
            return self.warp_n
        return 32 if self.wgmma and self.swap_ab == 16 else 64

    @property
    def n_warps(self) -> int:
        return self.thread_n_blocks * 16 // self.warp_cols

    @property
    def m_warps(self) -> int:
        """Warps sharing a 64-row tile by rows (keeps accumulators within the register file)."""
        along_m_and_k = (self.threads // 32) // max(self.n_warps, 1)
        return 2 if self.swap_ab == 0 and self.thread_m_blocks == 4 and along_m_and_k >= 2 \
            else 1

    @property
    def k_warps(self) -> int:
        return (self.threads // 32) // (max(self.n_warps, 1) * self.m_warps)

    @property
    def wg_defer(self) -> bool:
        """Whether the wgmma loop scales FP32 sums once per group instead of the weights (the
        kernel's WG_DEFER under the build's MARLIN_WG_DEFER, default 1), in the two-step build:
        the build with the group scale inside the unpacking (``scale_fma_applies``) always
        scales the weights."""
        if not self.wgmma:
            return False
        from .kernels import defines
        mode = defines().get("MARLIN_WG_DEFER", 1)
        kw = self.k_warps
        spg = self.group_blocks // kw if self.group_blocks > 0 and self.group_blocks % kw == 0 \
            else 0
        k_sub = self.thread_k_blocks // kw
        if spg < 2 or k_sub % spg:
            return False
        # Registers per compute thread (the kernel's COMPUTE_REGS): what a producer leaves
        # them, else the launch bounds' share.
        split = self.producer_registers
        compute = split[2] if split else min(
            65536 // self.blocks_per_sm // self.launch_threads // 8 * 8, 255)
        return mode == 2 or (mode == 1 and spg == k_sub and compute >= 200 and
                             (self.swap_ab in (2, 4) or
                              (self.swap_ab == 8 and self.warp_cols // 16 <= 2)))

    @property
    def scale_fma_applies(self) -> bool:
        """Whether this instance has a build with the group scale inside the unpacking (the
        kernel's FMA: symmetric weights whose scales are all below ``FMA_SCALE_LIMIT``): the
        wgmma loop and units of one scale group. That build scales the weights, also where the
        two-step build scales FP32 sums (``wg_defer``). The kernel's static_assert holds the
        same condition."""
        return self.wgmma and self.group_blocks > 0 and self.group_blocks >= self.thread_k_blocks

    @property
    def scale_fma_preferred(self) -> bool:
        """Whether the dispatch takes that build for weights that allow it (``ops.use_scale_fma``):
        wherever the instance has one, except where its two-step build scales FP32 sums
        (``wg_defer``) on tiles of 16 or 32 rows. Per weight word a compute thread dequantizes
        in a unit of one group, the fold costs swap_ab / 2 FFMAs (one per accumulator) and the
        fused unpacking 2 instructions more than the unscaled one: the fold costs more on tiles
        of 64 rows (swap_ab = 8), as much on 32 (4), less on 16 (2). Measured (NOTES.md entry
        88, all nine sets summed): -2.8..-3.0 % on the swap_ab = 8 instances at M = 48, 64 and
        192; +0.7 % on swap_ab = 4 at M = 32, +1.5 % on swap_ab = 2 at M = 16."""
        return self.scale_fma_applies and (not self.wg_defer or self.swap_ab >= 8)

    @property
    def early_bottom_fits(self) -> bool:
        """Whether this instance's reduction can take the early bottom (the kernel's EARLY_ANY
        without the switch): FP32 partials, tiles below 32 rows, no producer, static stripes.
        ops sizes the early slots of the workspace for these."""
        return (self.fp32_reduce and self.tile_m < 32 and not self.producer
                and not self.dyn_chunk)

    def chunks(self, units: int) -> int:
        """(dyn_chunk) Chunks of a launch with ``units`` units; each has a column counter and
        two partial slots in the workspace, and the grid never exceeds their count."""
        if self.dyn_chunk <= 0:
            raise ValueError(f"{self.name} hands out no chunks (dyn_chunk={self.dyn_chunk})")
        return -(-units // self.dyn_chunk)

    @property
    def launch_threads(self) -> int:
        """Threads per CTA at launch: ``threads``, plus the producer warpgroup's 128."""
        return self.threads + (PRODUCER_THREADS if self.producer else 0)

    @property
    def compiled(self) -> "KernelConfig":
        """The instance that is compiled for this config: the same without ``column_ctas``
        (a cap on the grid, decided on the host)."""
        return self.with_(column_ctas=0) if self.column_ctas else self

    def column_grid(self, m: int, n: int) -> int | None:
        """(``column_ctas``) The grid's cap for an M x N problem: ``column_ctas`` x the tile
        columns x the row slabs; None without ``column_ctas``."""
        if not self.column_ctas:
            return None
        return self.column_ctas * (n // self.tile_n) * max(1, -(-m // self.tile_m))

    @property
    def producer_registers(self) -> tuple | None:
        """(producer) Registers per thread (at launch, of the producer warpgroup, of the compute
        threads) where the producer gives some of its share to the compute threads
        (``setmaxnreg``; the same constexprs as ``marlin_kernel``), else None. The launch
        count is what ``__launch_bounds__`` allows; a kernel compiled to fewer would leave
        the compute threads waiting for registers forever, so ``ops`` checks it."""
        if not self.producer or not self.wgmma:
            return None
        pool = 65536 // self.blocks_per_sm // self.launch_threads // 8 * 8
        if pool >= 248:
            return None
        from .kernels import defines    # the build's switches ($MARLIN_CUPY_DEFINES)
        producer = defines().get("MARLIN_WS_PRODUCER_REGS", PRODUCER_REGS)
        more = (pool * self.launch_threads - producer * PRODUCER_THREADS) // self.threads // 8 * 8
        return pool, producer, min(more, 256)

    @property
    def tile_m(self) -> int:
        return 16 * self.thread_m_blocks

    @property
    def tile_n(self) -> int:
        return 16 * self.thread_n_blocks

    @property
    def tile_k(self) -> int:
        return 16 * self.thread_k_blocks

    @property
    def arch_suffix(self) -> str:
        """"a" when the instance needs an arch-specific target (sm_90a for wgmma), else ""."""
        return "a" if self.wgmma else ""

    @property
    def max_m(self) -> int | None:
        """Largest M this instance can run (None: any M, as slabs of ``tile_m`` rows: 16 to 64 with
        mma.sync, 16 to 128 with wgmma)."""
        return 8 if self.swap_ab == 1 else None

    @property
    def name(self) -> str:
        g = "c" if self.group_blocks == -1 else str(self.group_blocks)
        red = ("fp32par" if self.parallel_reduce else "fp32") if self.fp32_reduce else "fp16"
        occ = f"_b{self.blocks_per_sm}" if self.blocks_per_sm != 1 else ""
        swap = f"_sw{self.swap_ab}" if self.swap_ab else ""
        wg = "_wg" if self.wgmma else ""
        wn = f"_w{self.warp_n}" if self.warp_n else ""
        ws = "_ws" if self.producer else ""
        dq = f"_q{self.dyn_chunk}" if self.dyn_chunk else ""
        eb = "_eb" if self.early_bottom else ""
        ts = "_ts" if self.top_sum else ""
        cc = f"_c{self.column_ctas}" if self.column_ctas else ""
        return (f"t{self.threads}_m{self.thread_m_blocks}_n{self.thread_n_blocks}"
                f"_k{self.thread_k_blocks}_s{self.stages}_g{g}_{red}{swap}{wg}{wn}{ws}{dq}{eb}{ts}"
                f"{cc}{occ}")

    _NAME = re.compile(r"^t(\d+)_m(\d+)_n(\d+)_k(\d+)_s(\d+)_g(c|\d+)_(fp32par|fp32|fp16)"
                       r"(?:_sw(\d+))?(_wg)?(?:_w(\d+))?(_ws)?(?:_q(\d+))?(_eb)?(_ts)?(?:_c(\d+))?(?:_b(\d+))?$")

    @classmethod
    def from_name(cls, name: str) -> "KernelConfig":
        m = cls._NAME.match(name)
        if not m:
            raise ValueError(f"{name!r} is not a config name; expected the form "
                             f"'t256_m1_n16_k4_s4_g8_fp32' (g: 2/4/8 blocks of 16 rows, or c for "
                             f"per-channel scales; then fp32, fp32par (parallel) or fp16 global "
                             f"reduction; optional "
                             f"_sw1/_sw2 for swapped MMA operands, _wg for wgmma (sm_90a), _w32 "
                             f"for its columns per warp, _ws for a producer warpgroup, _q8 for units "
                             f"handed out at run time in chunks of 8, _eb for the early bottom, _ts "
                             f"for the column's top summing, _c1 for at most one CTA per column, "
                             f"then _b2 for two CTAs per SM).")
        t, mb, nb, kb, st, g, red, swap, wg, wn, ws, dq, eb, ts, cc, occ = m.groups()
        return cls(int(t), int(mb), int(nb), int(kb), int(st), -1 if g == "c" else int(g),
                   red != "fp16", int(occ) if occ else 1, int(swap) if swap else 0, bool(wg),
                   red == "fp32par", int(wn) if wn else 0, bool(ws), int(dq) if dq else 0,
                   bool(eb), bool(ts), int(cc) if cc else 0)

    def with_(self, **changes) -> "KernelConfig":
        return replace(self, **changes)

    def smem_bytes(self, has_zp: bool) -> int:
        """Dynamic shared memory of the instance: ``Marlin::SMEM_INT4 * 16``."""
        per_channel = self.group_blocks < 0
        kb, nb = self.thread_k_blocks, self.thread_n_blocks
        groups = 1 if per_channel or self.group_blocks >= kb else kb // self.group_blocks
        a = self.tile_m * 2 * kb
        b = kb * 8 * nb
        s = 0 if per_channel else groups * 2 * nb
        z = groups * (nb // 2) if has_zp else 0
        if self.warp_cols < 64:
            frags = self.warp_cols // 16 * self.swap_ab
        else:
            frags = max((self.thread_m_blocks // self.m_warps) * 8, 4 * max(self.swap_ab, 1))
        red = (self.k_warps // 2) * self.n_warps * self.m_warps * frags * 32
        # One 8-byte mbarrier per stage (MARLIN_BULK); two with a producer (full and empty).
        bars = self.stages if self.producer else (self.stages + 1) // 2
        ring = 1 if self.dyn_chunk else 0   # dyn_chunk: the ring of drawn chunks (4 ints)
        return 16 * (self.stages * (a + b + s + z) + red + bars + ring)

    def problems(self) -> list:
        """Every violated constraint, as sentences (empty when the config is valid)."""
        errs = []
        if self.threads not in (128, 256, 512):
            errs.append(f"threads={self.threads} must be 128, 256 or 512")
        if not (1 <= self.thread_m_blocks <= MAX_M_BLOCKS or
                (self.wgmma and self.swap_ab in TALL_SWAPS and
                 self.thread_m_blocks == self.swap_ab // 2)):
            errs.append(f"thread_m_blocks={self.thread_m_blocks} must be 1..{MAX_M_BLOCKS} (5 "
                        f"to 8 only with wgmma and swap_ab=2 * thread_m_blocks)")
        warps = self.threads // 32
        if self.thread_n_blocks % 4 or self.thread_n_blocks == 0 or \
                warps % max(self.n_warps, 1) or self.n_warps > warps:
            errs.append(f"thread_n_blocks={self.thread_n_blocks} must be a multiple of 4 with its "
                        f"{self.n_warps} warps along N (one per {self.warp_cols} columns) dividing "
                        f"the {warps} warps")
        else:
            kw = self.k_warps
            if kw & (kw - 1):
                errs.append(f"warps along K ({kw}) must be a power of two")
            if self.thread_k_blocks < 4 or self.thread_k_blocks % kw:
                errs.append(f"thread_k_blocks={self.thread_k_blocks} must be >= 4 and a multiple "
                            f"of the {kw} warps along K")
        if self.stages < 2:
            errs.append(f"stages={self.stages} must be at least 2")
        if self.blocks_per_sm not in (1, 2, 3, 4) or self.blocks_per_sm * self.threads > 1024:
            errs.append(f"blocks_per_sm={self.blocks_per_sm} must be 1..4 with at most 1024 "
                        f"threads per SM")
        if self.wgmma:
            if self.stages < 3:
                errs.append(f"stages={self.stages}: the wgmma loop needs at least 3 (it keeps "
                            f"stages - 2 units in flight at its waits)")
            if self.swap_ab not in WGMMA_SWAPS or \
                    self.thread_m_blocks != max(1, self.swap_ab // 2) or \
                    self.thread_k_blocks % 4 or self.n_warps % 4:
                errs.append(f"wgmma needs swap_ab in 1, 2, 4, 6, 8, 10, 12, 14, 16 with thread_m_blocks = "
                            f"max(1, swap_ab // 2), thread_k_blocks a multiple of 4 and thread_n_blocks a "
                            f"multiple of 16 (of 8 with swap_ab=16: whole warpgroups along N) "
                            f"(got swap_ab={self.swap_ab}, m={self.thread_m_blocks}, "
                            f"k={self.thread_k_blocks}, n={self.thread_n_blocks})")
        elif self.swap_ab not in (0, 1, 2) or (self.swap_ab and self.thread_m_blocks != 1):
            errs.append(f"swap_ab={self.swap_ab} must be 0, or 1 or 2 with thread_m_blocks=1")
        if self.warp_n and (not (self.wgmma or self.swap_ab) or self.warp_n not in (16, 32, 64)):
            errs.append(f"warp_n={self.warp_n} (columns per warp) must be 16, 32 or 64, and "
                        f"only with wgmma or swapped operands (swap_ab >= 1)")
        elif self.warp_n and self.warp_n == self.with_(warp_n=0).warp_cols:
            # One name per kernel: the same instance under two names would be tuned twice.
            errs.append(f"warp_n={self.warp_n} is the default width for swap_ab={self.swap_ab}; "
                        f"leave warp_n=0")
        elif self.wgmma and self.swap_ab in WGMMA_SWAPS and \
                self.warp_cols // 16 * self.swap_ab > 32:
            errs.append(f"{self.warp_cols} columns per warp x {8 * self.swap_ab} rows need "
                        f"{self.warp_cols // 16 * self.swap_ab * 4} accumulators per thread; at "
                        f"most 128 (use warp_n=32 or fewer columns)")
        if self.producer and (self.threads, self.blocks_per_sm) not in \
                ((256, 1), (128, 1), (128, 2)) + (((512, 1),) if self.wgmma else ()):
            errs.append(f"producer (a warpgroup issuing the copies) needs 256 compute threads "
                        f"and one CTA per SM, 128 and one or two, or (wgmma) 512 and one (got "
                        f"threads={self.threads}, blocks_per_sm={self.blocks_per_sm}, "
                        f"wgmma={self.wgmma})")
        if self.parallel_reduce and not self.fp32_reduce:
            errs.append("parallel_reduce sums FP32 partials: it needs fp32_reduce")
        if self.dyn_chunk and (not self.parallel_reduce or self.tile_m >= 48 or self.wgmma or
                               self.producer or self.dyn_chunk < self.stages):
            errs.append(f"dyn_chunk={self.dyn_chunk} (units handed out at run time) needs "
                        f"parallel_reduce with tiles of up to 32 rows (the last arriver's sum), "
                        f"the mma.sync loop without wgmma or a producer, and at least "
                        f"stages={self.stages} units per chunk")
        if self.top_sum and not (self.parallel_reduce and self.early_bottom_fits
                                 and not self.early_bottom):
            errs.append(f"top_sum needs the parallel reduction (fp32par), tiles below 32 rows "
                        f"(tile_m={self.tile_m}), no producer warpgroup and no run-time hand-out, "
                        f"and not early_bottom (it includes the early bottom): it replaces the "
                        f"last arriver's sum")
        if self.early_bottom and not self.early_bottom_fits:
            errs.append(f"early_bottom needs FP32 partials (fp32 or fp32par), tiles below 32 "
                        f"rows (tile_m={self.tile_m}), no producer warpgroup and no run-time "
                        f"hand-out: the other reductions never publish a partial mid-stripe "
                        f"with a fence")
        if self.column_ctas < 0 or (self.column_ctas and self.dyn_chunk):
            errs.append(f"column_ctas={self.column_ctas} (a cap of that many CTAs per column) "
                        f"must be 0 or more, and 0 with dyn_chunk (its chunks are its stripes)")
        g, kb = self.group_blocks, self.thread_k_blocks
        if g != -1 and (g <= 0 or (g % kb and kb % g)):
            errs.append(f"group_blocks={g} and thread_k_blocks={kb} must divide one another "
                        f"(or group_blocks=-1 for per-channel scales)")
        return errs

    def validate(self, smem_limit: int | None = None, has_zp: bool = False) -> "KernelConfig":
        """Raise ``ValueError`` naming every violated constraint; returns self when valid."""
        errs = self.problems()
        if smem_limit is not None and not errs:
            need = self.smem_bytes(has_zp)
            if self.blocks_per_sm > 1 and self.blocks_per_sm * (need + 1024) > smem_limit + 1024:
                errs.append(f"{self.blocks_per_sm} CTAs per SM need {self.blocks_per_sm} x {need} "
                            f"bytes of shared memory (plus 1 KiB each reserved), more than the "
                            f"{smem_limit + 1024} an SM has; use fewer stages or blocks_per_sm=1")
            if need > smem_limit:
                errs.append(f"needs {need} bytes of shared memory, the device allows {smem_limit} "
                            f"per block; use fewer stages (each costs "
                            f"{(need - self.with_(stages=1).smem_bytes(has_zp))} bytes)")
        if errs:
            raise ValueError(f"invalid KernelConfig {self.name}: " + "; ".join(errs) + ".")
        return self


# Pipeline depth of the heuristic: on the H200 the measured optimum was 4-6 stages for every
# tile (benchmarks/NOTES.md); deeper rings buy nothing once the copies are in flight.
HEURISTIC_STAGES = 6


def _instantiated() -> tuple:
    cfgs = []
    for threads, nb, kb in TILE_SHAPES:
        for mb in HEURISTIC_M_BLOCKS:
            for g in GROUP_BLOCKS:
                cfgs.append(KernelConfig(threads, mb, nb, kb, HEURISTIC_STAGES, g, True))
                # The FP16 in-place reduction (never the default) keeps 64-bit output addresses
                # live and spills at 64 rows on sm_80; it is offered for up to 32 rows.
                if mb <= 2:
                    cfgs.append(KernelConfig(threads, mb, nb, kb, HEURISTIC_STAGES, g, False))
        # Swapped operands (weights as the MMA's A operand) for up to 8 and 16 rows.
        for g in GROUP_BLOCKS:
            for swap in (1, 2):
                cfgs.append(KernelConfig(threads, 1, nb, kb, HEURISTIC_STAGES, g, True,
                                         swap_ab=swap))
    assert len(set(cfgs)) == len(cfgs), "INSTANTIATED lists a config twice"
    return tuple(c.validate() for c in cfgs)


#: m-block counts the heuristic uses. Three m-blocks (48 rows) keep 96 accumulators per thread
#: and spill on sm_80, so the heuristic runs 33..48 rows with four (two warps share the rows);
#: tuned tables may still pick three on devices where it compiles without spilling.
HEURISTIC_M_BLOCKS = (1, 2, 4)

# The configurations we instantiate, test and dispatch to when no tuned table applies, at the
# heuristic's depth (it uses fewer stages only where a device's shared memory is short). Every
# one is compiled for sm_80 and sm_90 in CI and must not spill.
INSTANTIATED = _instantiated()


#: sm_90a wgmma configs, one per structural case, compiled by CI for sm_90a and run by the GPU
#: tests. The generic heuristic never picks wgmma; the tuner measures it at every M bucket
#: (compute capability 9.0), the shipped H200 table uses it where it won (NOTES.md entries 10,
#: 11), and the sm_90 heuristic (``SM90_HEURISTIC``) where the table has no entry (entry 81).
WGMMA_EXAMPLES = tuple(KernelConfig.from_name(n) for n in (
    "t256_m4_n16_k8_s3_g8_fp32_sw8_wg", "t256_m4_n16_k8_s3_gc_fp32_sw8_wg",
    "t256_m4_n16_k8_s4_g2_fp16_sw8_wg", "t256_m4_n16_k8_s4_g4_fp32_sw8_wg",
    "t128_m1_n16_k4_s4_g8_fp32_sw1_wg", "t128_m1_n16_k4_s4_g8_fp32_sw2_wg",
    "t128_m2_n16_k4_s4_g8_fp32_sw4_wg", "t256_m1_n16_k4_s4_g8_fp32_sw2_wg",
    "t256_m2_n32_k4_s4_g8_fp32_sw4_wg", "t128_m1_n16_k4_s4_gc_fp32_sw2_wg",
    "t128_m1_n16_k4_s4_g2_fp16_sw2_wg", "t256_m2_n16_k4_s4_g4_fp32_sw4_wg",
    "t128_m1_n16_k8_s4_g8_fp32_sw2_wg", "t256_m2_n32_k8_s4_g4_fp32_sw4_wg",
    "t256_m1_n16_k8_s3_gc_fp32_sw1_wg", "t256_m2_n16_k8_s6_g8_fp32_sw4_wg",
    "t128_m4_n16_k8_s3_g8_fp32_sw8_wg_b2",
    # swap_ab=16: 32-column warps, 128-row slabs; K split across warps (t256_n8), per-channel,
    # FP16 reduction, two CTAs per SM
    "t256_m8_n16_k8_s4_g8_fp32_sw16_wg", "t256_m8_n8_k8_s3_gc_fp32_sw16_wg",
    "t256_m8_n16_k4_s4_g2_fp16_sw16_wg", "t128_m8_n8_k4_s4_g8_fp32_sw16_wg_b2",
    # narrower warps (warp_n): 32 or 16 columns, 512 threads or two CTAs of 256 per SM
    "t256_m4_n16_k8_s3_g8_fp32_sw8_wg_w32_b2", "t256_m4_n16_k8_s3_gc_fp32_sw8_wg_w32",
    "t512_m8_n16_k8_s3_g8_fp32_sw16_wg_w16", "t256_m8_n8_k4_s4_g2_fp16_sw16_wg_w16_b2",
    "t256_m2_n16_k8_s4_g8_fp32_sw4_wg_w32_b2",
    # a producer warpgroup (warp specialization): 256 or 512 compute threads (registers moved
    # to them with setmaxnreg), 128 (none moved), per-channel scales, swap_ab = 2, 4, 8, 16
    "t256_m4_n16_k8_s3_g8_fp32_sw8_wg_ws", "t128_m1_n16_k4_s4_g8_fp32_sw2_wg_ws",
    "t256_m2_n16_k8_s6_g8_fp32_sw4_wg_w32_ws", "t256_m8_n8_k8_s4_gc_fp32_sw16_wg_ws",
    # 512 compute threads (96 registers at launch; 56 for the producer, 104 for them)
    "t512_m4_n32_k8_s3_g8_fp32_sw8_wg_w32_ws",
    # 80- and 112-row slabs (swap_ab 10 and 14, NOTES.md entry 106): the twins of the H200
    # table's 96- and 128-row entries (two CTAs of 128, K split across warps, both
    # reductions), per-channel and g64 scales
    "t256_m5_n16_k8_s4_g8_fp32par_sw10_wg_w32_ws", "t128_m5_n8_k8_s4_g8_fp32par_sw10_wg_w32_ws",
    "t256_m5_n8_k4_s6_gc_fp32par_sw10_wg_w16_ws", "t256_m7_n16_k8_s4_g8_fp32_sw14_wg_w32_ws",
    "t256_m7_n8_k4_s8_g8_fp32par_sw14_wg_w16_ws", "t256_m7_n16_k4_s8_g4_fp32par_sw14_wg_w32_ws"))

#: Instances with the parallel cross-CTA reduction (``parallel_reduce``), one per path through
#: the epilogue: row-major and swapped accumulators, per-channel and grouped scales, wgmma
#: (sm_90a) and two CTAs per SM, the last-arriver and the shared sum. Compiled by CI, run by
#: the GPU tests against the serial reduction (NOTES.md entries 12 and 20); the H200 table
#: dispatches others of the kind.
PARALLEL_REDUCE_EXAMPLES = tuple(KernelConfig.from_name(n) for n in (
    "t128_m4_n4_k8_s4_g8_fp32par", "t256_m2_n8_k16_s4_g8_fp32par", "t256_m4_n8_k16_s4_g8_fp32par",
    "t256_m1_n16_k8_s4_g8_fp32par_sw1_b2", "t256_m1_n16_k16_s4_g8_fp32par_sw2",
    "t128_m1_n4_k8_s4_gc_fp32par_sw1", "t256_m1_n8_k8_s4_g2_fp32par",
    "t256_m2_n16_k8_s4_g8_fp32par_sw4_wg", "t256_m4_n16_k8_s4_g8_fp32par_sw8_wg",
    "t128_m4_n16_k8_s3_g8_fp32par_sw8_wg_b2", "t256_m4_n16_k8_s4_gc_fp32par_sw8_wg",
    "t256_m8_n16_k8_s4_g8_fp32par_sw16_wg", "t512_m4_n16_k8_s4_g8_fp32par_sw8_wg_w16",
    "t256_m4_n16_k4_s4_g8_fp32par_sw8_wg_w32_b2",
    # with the producer warpgroup: the shared sum, and two CTAs per SM (200 registers each)
    "t256_m4_n16_k8_s4_g8_fp32par_sw8_wg_w32_ws", "t128_m1_n16_k8_s4_g8_fp32par_sw2_wg_ws_b2"))

#: The producer warpgroup in the ``mma.sync`` loop (sm_90 only: CI compiles these for sm_90):
#: swapped operands at one and two 8-row blocks, the last arriver's sum, per-channel scales,
#: two CTAs per SM.
MMA_PRODUCER_EXAMPLES = tuple(KernelConfig.from_name(n) for n in (
    "t256_m1_n16_k16_s4_g8_fp32par_sw1_ws", "t256_m1_n16_k8_s4_g8_fp32_sw2_ws",
    "t256_m1_n8_k16_s4_gc_fp32par_ws", "t128_m1_n16_k8_s4_g8_fp32par_sw1_ws_b2"))

#: Units handed out at run time (``dyn_chunk``), one per path: swapped operands at one and two
#: 8-row blocks, two CTAs per SM, an eight-stage ring, unswapped tiles of 16 and 32 rows,
#: per-channel scales. CI compiles them; the GPU tests compare each bitwise with its twin of
#: static stripes of the chunk's size, on every grid (NOTES.md entry 53).
DYN_EXAMPLES = tuple(KernelConfig.from_name(n) for n in (
    "t256_m1_n16_k8_s4_g8_fp32par_sw1_q8_b2", "t256_m1_n8_k8_s8_g8_fp32par_sw1_q8",
    "t256_m1_n16_k16_s4_g8_fp32par_sw2_q4", "t256_m1_n8_k16_s6_g8_fp32par_q6",
    "t256_m2_n8_k16_s4_gc_fp32par_q4", "t128_m1_n4_k8_s4_g4_fp32par_q5_b2"))

#: The early bottom (``early_bottom``, NOTES.md entries 68-69), one per path: the parallel
#: reduction's last arriver with swapped and row-major tiles, wgmma without a producer, two
#: CTAs per SM; the serial chain with swapped and row-major tiles, per-channel scales. CI
#: compiles them; the GPU tests compare each bitwise with its twin without it, on many grids.
EARLY_BOTTOM_EXAMPLES = tuple(KernelConfig.from_name(n) for n in (
    "t256_m1_n16_k8_s4_g8_fp32par_sw1_eb", "t256_m1_n8_k16_s3_g8_fp32par_eb",
    "t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_eb_b2", "t256_m1_n16_k8_s3_g8_fp32par_sw1_eb_b2",
    "t256_m1_n16_k16_s4_g8_fp32_sw1_eb", "t256_m1_n8_k16_s3_g8_fp32_eb",
    "t256_m1_n8_k16_s4_gc_fp32_sw2_eb"))

#: The column's top summing (``top_sum``, NOTES.md entry 73), one per path of the last
#: arriver's sum it replaces: swapped tiles of one and two 8-row blocks, row-major tiles of 16
#: rows, wgmma without a producer, two CTAs per SM, per-channel scales. CI compiles them; the
#: GPU tests compare each bitwise with its twin without it, on many grids.
TOP_SUM_EXAMPLES = tuple(KernelConfig.from_name(n) for n in (
    "t256_m1_n16_k8_s4_g8_fp32par_sw1_ts", "t256_m1_n8_k16_s3_g8_fp32par_ts",
    "t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ts_b2", "t256_m1_n16_k8_s6_g8_fp32par_sw1_ts",
    "t256_m1_n16_k16_s4_g8_fp32par_sw2_ts", "t256_m1_n8_k16_s4_gc_fp32par_sw1_ts_b2"))

#: More warps in the swapped mma.sync loop (NOTES.md entry 74, prepared: at M <= 8 one CTA of
#: 256 threads per SM is bound by its math): 512 threads that split K twice as often, and
#: narrower warps (``warp_n`` 32 or 16) that keep the 256-thread config's split of K, with the
#: parallel reduction, the column's top summing, the early bottom, the serial chain, two CTAs
#: per SM, swap_ab = 2 and per-channel scales. CI compiles them; the GPU tests run each against
#: the reference, and each narrow-warp one bitwise against its twin with 64-column warps
#: (``wide_twin``: the same sums in the same order).
MMA_WIDE_EXAMPLES = tuple(KernelConfig.from_name(n) for n in (
    "t512_m1_n16_k16_s4_g8_fp32par_sw1", "t512_m1_n16_k16_s4_g8_fp32par_sw1_w32",
    "t512_m1_n8_k16_s6_g8_fp32par_sw1_w32", "t512_m1_n16_k16_s3_g8_fp32par_sw1_w32_ts",
    "t512_m1_n16_k8_s6_g8_fp32par_sw1_w32_eb", "t512_m1_n16_k8_s4_g8_fp32_sw1_w32",
    "t256_m1_n16_k8_s4_g8_fp32_sw1_w32_b2", "t512_m1_n16_k8_s4_g8_fp32par_sw2_w32",
    "t512_m1_n16_k16_s4_g8_fp32par_sw1_w16", "t512_m1_n16_k8_s4_gc_fp32par_sw1_w32"))


def wide_twin(cfg: KernelConfig) -> KernelConfig:
    """The twin of a narrow-warp mma.sync config with the default 64-column warps and as many
    warps along K: fewer threads in the same proportion (``t512 ... _w32`` -> ``t256``)."""
    if not cfg.warp_n or cfg.wgmma:
        raise ValueError(f"{cfg.name}: not a narrow-warp mma.sync config")
    twin = cfg.with_(threads=cfg.threads * cfg.warp_n // 64, warp_n=0)
    if twin.k_warps != cfg.k_warps or twin.problems():
        raise ValueError(f"{cfg.name}: no 64-column twin with the same split of K")
    return twin


#: Every example with a producer warpgroup; the GPU tests compare each bitwise with its twin
#: without one (the same sums in the same order, only the copies move).
PRODUCER_EXAMPLES = tuple(c for c in WGMMA_EXAMPLES + PARALLEL_REDUCE_EXAMPLES if c.producer) \
    + MMA_PRODUCER_EXAMPLES


def tuned_instances() -> dict:
    """Configs reachable through the shipped tuned tables, by architecture. CI compiles them for
    their table's architecture; the GPU tests run them all."""
    import json
    from pathlib import Path
    out = {}
    for path in sorted((Path(__file__).resolve().parent / "tuned").glob("*.json")):
        table = json.loads(path.read_text())
        arch = table.get("arch", "sm_90")
        for e in table.get("entries", []):
            out.setdefault(arch, set()).add(KernelConfig.from_name(e["config"]))
    return {arch: tuple(sorted(cfgs, key=lambda c: c.name)) for arch, cfgs in out.items()}


#: M buckets of the tuned tables: a problem uses the entry of the smallest bucket >= M that
#: the table has. M <= 8 has its own bucket because swap_ab=1 configs serve it alone. M > 64
#: runs as 64-row slabs, or 80-, 96-, 112- or 128-row ones with swap_ab=10, 12, 14 or 16: a
#: bucket for each of M = 65..80, 81..96, 97..112 and 113..128, one slab of that height or two of
#: 64 (a 96-row slab was 12-18 % faster than a 128-row one at 65..96, NOTES.md entry 104, and 80
#: and 112 rows 5-8 % faster again than 96 and 128 at 65..80 and 97..112, entry 106), one for
#: 129..192, where two 128-row slabs (half of the second
#: one empty at M = 129) compete with three of 64 (NOTES.md entry 28; both cost the same at
#: every M of the bucket), then 193..256, 257..512 and one open-ended bucket beyond: on most
#: layers of nine models' blocks the fastest config at 256 rows (128-wide tiles, capped grids)
#: and the fastest at 1024 (256-wide tiles) cross between 256 and 768 rows, each 5-30 % slower
#: than the other on the far side, which one entry for every M above 192 could not serve
#: (NOTES.md entry 86).
M_BUCKETS = (8, 16, 32, 48, 64, 80, 96, 112, 128, 192, 256, 512, 1 << 30)


def m_bucket(m: int) -> int:
    for b in M_BUCKETS:
        if m <= b:
            return b
    return M_BUCKETS[-1]


def _heuristic_shape(n: int, k: int):
    """Tile shape when no tuned entry exists: deep K stages (fewer barriers per byte), 256-wide
    only when N is large enough that 128-wide tiles would not balance better across SMs."""
    order = ((256, 16, 8), (256, 8, 8), (128, 8, 4), (128, 4, 8)) if n >= 16384 else \
            ((256, 8, 8), (256, 16, 8), (128, 8, 4), (128, 4, 8))
    for threads, nb, kb in order:
        if n % (16 * nb) == 0 and k % (16 * kb) == 0:
            return threads, nb, kb
    return None


#: The heuristic on compute capability 9.0 (H100, H200: wgmma and the producer warpgroup), for
#: problems the device's tuned table does not hold (other layer shapes, other group sizes,
#: other devices of the family). Per M bucket, the configs to try in order: first the one whose
#: time, over the twelve llama2 layers the shipped H200 table's tuner measured, has the smallest
#: geometric mean of slowdowns against each layer's best (within 2-5 % of the best at every
#: bucket; the generic heuristic below is 23 % slower there at M = 9..16 and 59-117 % from
#: M = 64 on; benchmarks/NOTES.md entry 81), then the same bucket's best 64-deep tile (K not a
#: multiple of 128), then its best 128-wide one at most 128 deep with the parallel reduction
#: (N not a multiple of 256: small models' layers, whose columns have many sharers): what
#: ``tune.heuristic_rule`` finds in the shipped measurements (a test holds the two equal).
#: M = 33..48 and 65..96 take the 48- and 96-row wgmma slabs (the first config's summed time
#: over those twelve layers 8.5 % and 14.6 % below the 64- and 128-row one's at M = 48 and 96;
#: NOTES.md entry 105), 65..80 and 97..112 the 80- and 112-row ones (entry 107).
#: Written with g8 (group size 128): ``sm90_choice`` puts the problem's group in. Where none
#: fits, the generic heuristic decides. Every config these lists can produce is compiled by CI
#: for sm_90 (sm_90a for wgmma) without spills and run by the GPU tests (``SM90_INSTANTIATED``).
SM90_HEURISTIC = {
    8: ("t256_m1_n16_k8_s6_g8_fp32par_sw1_eb", "t128_m1_n16_k4_s4_g8_fp32par_sw1_wg_ws_b2",
        "t256_m1_n8_k8_s6_g8_fp32par_sw1_eb"),
    16: ("t128_m1_n16_k8_s3_g8_fp32par_sw2_wg_ws_b2", "t128_m1_n16_k4_s4_g8_fp32par_sw2_wg_ws_b2",
         "t256_m1_n8_k8_s8_g8_fp32par_sw2_eb"),
    32: ("t128_m2_n16_k8_s3_g8_fp32par_sw4_wg_ws_b2", "t128_m2_n16_k4_s6_g8_fp32par_sw4_wg_ws_b2",
         "t256_m2_n8_k8_s8_g8_fp32par_sw4_wg_w16_ws"),
    48: ("t256_m3_n16_k8_s6_g8_fp32par_sw6_wg_w32_ws", "t256_m3_n16_k4_s6_g8_fp32par_sw6_wg_w32_ws",
         "t256_m3_n8_k8_s8_g8_fp32par_sw6_wg_w16_ws"),
    64: ("t256_m4_n16_k8_s6_g8_fp32par_sw8_wg_w32_ws", "t256_m4_n16_k4_s6_g8_fp32par_sw8_wg_w32_ws",
         "t256_m4_n8_k8_s8_g8_fp32par_sw8_wg_w16_ws"),
    80: ("t256_m5_n16_k8_s4_g8_fp32par_sw10_wg_w32_ws", "t256_m5_n16_k4_s8_g8_fp32par_sw10_wg_w32_ws",
         "t128_m5_n8_k4_s4_g8_fp32par_sw10_wg_w32_ws_b2"),
    96: ("t256_m6_n16_k8_s4_g8_fp32par_sw12_wg_w32_ws", "t256_m6_n16_k4_s8_g8_fp32par_sw12_wg_w32_ws",
         "t128_m6_n8_k4_s4_g8_fp32par_sw12_wg_w32_ws_b2"),
    112: ("t256_m7_n16_k8_s4_g8_fp32par_sw14_wg_w32_ws", "t256_m7_n16_k4_s8_g8_fp32par_sw14_wg_w32_ws",
          "t128_m7_n8_k4_s4_g8_fp32par_sw14_wg_w32_ws_b2"),
    128: ("t256_m8_n16_k8_s4_g8_fp32par_sw16_wg_ws", "t256_m8_n16_k4_s8_g8_fp32par_sw16_wg_ws",
          "t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2"),
    192: ("t256_m4_n16_k8_s4_g8_fp32_sw8_wg_w32_ws", "t128_m4_n16_k4_s4_g8_fp32par_sw8_wg_ws_b2",
          "t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2"),
    256: ("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws", "t256_m8_n16_k4_s6_g8_fp32_sw16_wg_ws",
          "t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2"),
    512: ("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws", "t256_m8_n16_k4_s6_g8_fp32_sw16_wg_ws",
          "t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2"),
    1 << 30: ("t256_m8_n16_k8_s4_g8_fp32_sw16_wg_ws", "t256_m8_n16_k4_s6_g8_fp32_sw16_wg_ws",
              "t128_m8_n8_k4_s4_g8_fp32par_sw16_wg_ws_b2"),
}


def _fit_stages(cfg: KernelConfig, has_zp: bool, smem_limit: int) -> KernelConfig | None:
    """``cfg`` at its stages or as many fewer as shared memory needs (not below what its loop
    allows), or None where no depth makes it valid."""
    for s in range(cfg.stages, 1, -1):
        c = cfg.with_(stages=s)
        if not c.problems() and c.smem_bytes(has_zp) <= smem_limit:
            return c
    return None


def sm90_candidates(m: int, n: int, k: int, group_size: int, has_zp: bool = False,
                    smem_limit: int = 232448) -> list:
    """The configs of ``SM90_HEURISTIC``'s bucket for M, in its order, each with the problem's
    group size and fitted to N, K, M and shared memory; those that do not fit left out."""
    gb = group_blocks_for(group_size, k)
    out = []
    for name in SM90_HEURISTIC[m_bucket(m)]:
        cfg = _fit_stages(KernelConfig.from_name(name).with_(group_blocks=gb), has_zp, smem_limit)
        cfg = fit_tuned(cfg, m, n, k, has_zp, smem_limit)    # N, K and M as for a table entry
        if cfg is not None:
            out.append(cfg)
    return out


#: Short columns (at most this many tile depths of K) whose whole columns fill at least half
#: the persistent grid take one CTA per column (``column_ctas=1``): on qwen2.5-0.5b's 896x9728
#: (seven 128-deep units per column, 76 columns of 128 on 132 SMs) whole columns were 14-36 %
#: faster than the full grid at M = 1..256, while columns of 24 or more units lost wherever
#: the capped grid was under half the full one, and small ones (7-18 columns) lost at M = 64..128
#: (benchmarks/NOTES.md entries 83 and 84).
SHORT_COLUMN_UNITS = 8


def whole_columns(cfgs, m: int, n: int, k: int, sms: int) -> KernelConfig | None:
    """The first of ``cfgs`` (fitted to the problem) whose columns are short (K / tile depth at
    most ``SHORT_COLUMN_UNITS``) and whose whole columns (tile columns x row slabs) fill at least
    half of the persistent grid (``sms`` x CTAs per SM) but not all of it, with
    ``column_ctas=1``; None where none is."""
    for cfg in cfgs:
        capped = cfg.with_(column_ctas=1)
        full, whole = sms * cfg.blocks_per_sm, capped.column_grid(m, n)
        if k // cfg.tile_k <= SHORT_COLUMN_UNITS and full <= 2 * whole < 2 * full \
                and not capped.problems():
            return capped
    return None


#: Narrow layers (N at most this, from 9 to ``NARROW_MAX_M`` rows; at most ``NARROW_N_DECODE``
#: up to 8 rows) take the bucket's 128-wide candidate before its 256-wide ones: with a dozen or
#: fewer 256-wide columns on 132 SMs every column has many sharers. Measured on the grids of
#: ``scripts/grid_probe.py`` on layers of four small models with N = 1536..3072 (NOTES.md entry
#: 84): faster at M = 16..256 on all but a few layer-buckets (the largest gains where the
#: 256-wide candidate is the serial chain, M = 192..256), at M <= 8 faster where N <= 2048 and
#: 2-4 % slower at N = 3072, and mostly slower at M = 1024. The llama2 layers (N >= 4096) keep
#: the order they were fitted with.
NARROW_N = 3072
NARROW_N_DECODE = 2048
NARROW_MAX_M = 256


def narrow_first(cfgs, m: int, n: int) -> list:
    """``cfgs`` (``sm90_candidates``) with the 128-wide ones first where the layer is narrow
    (``NARROW_N``, ``NARROW_N_DECODE``, ``NARROW_MAX_M``), else as they are."""
    if m > NARROW_MAX_M or n > (NARROW_N if m > 8 else NARROW_N_DECODE):
        return list(cfgs)
    return [c for c in cfgs if c.tile_n < 256] + [c for c in cfgs if c.tile_n >= 256]


def sm90_choice(m: int, n: int, k: int, group_size: int, has_zp: bool = False,
                smem_limit: int = 232448, sms: int | None = None) -> KernelConfig | None:
    """The compute capability 9.0 heuristic's config, or None where none of its bucket's
    configs fits N, K and shared memory. With the device's SM count ``sms`` (what the dispatch
    passes): ``sm90_candidates`` reordered by ``narrow_first``, then the first that
    ``whole_columns`` takes with one CTA per column, else the first of them. Without ``sms``:
    the first of ``sm90_candidates``, the order fitted on the llama2 layers alone (the dispatch
    before NOTES.md entry 84; ``scripts/ab_probe.py --table-a uncapped`` times it)."""
    fits = sm90_candidates(m, n, k, group_size, has_zp, smem_limit)
    if fits and sms:
        fits = narrow_first(fits, m, n)
        capped = whole_columns(fits, m, n, k, sms)
        if capped is not None:
            return capped
    return fits[0] if fits else None


def _sm90_instantiated() -> tuple:
    cfgs = set()
    for names in SM90_HEURISTIC.values():
        for name in names:
            for g in GROUP_BLOCKS:
                for zp in (False, True):
                    c = _fit_stages(KernelConfig.from_name(name).with_(group_blocks=g), zp,
                                    232448)
                    if c is not None:
                        cfgs.add(c)
    return tuple(sorted(cfgs, key=lambda c: c.name))


#: Every config the compute capability 9.0 heuristic can return on a device with the H200's
#: shared memory, for every group size, symmetric or with zero points (CI compiles them for
#: sm_90a; the GPU tests run them).
SM90_INSTANTIATED = _sm90_instantiated()


def fit_tuned(tuned: KernelConfig | None, m: int, n: int, k: int, has_zp: bool = False,
              smem_limit: int = 232448) -> KernelConfig | None:
    """A tuned table's entry as the dispatch runs it for this problem, or None where it does
    not fit (then the heuristic decides): an unswapped tile takes as many 16-row blocks as M
    needs; a swapped one (wgmma included) has its row blocks fixed by the swap and serves any
    M up to max_m."""
    if tuned is None:
        return None
    if tuned.swap_ab == 0:
        tuned = tuned.with_(thread_m_blocks=min(MAX_M_BLOCKS, max(1, -(-m // 16))))
    if not tuned.problems() and n % tuned.tile_n == 0 and k % tuned.tile_k == 0 \
            and tuned.smem_bytes(has_zp) <= smem_limit \
            and (tuned.max_m is None or m <= tuned.max_m):
        return tuned
    return None


def choose_config(m: int, n: int, k: int, group_size: int, has_zp: bool = False,
                  smem_limit: int = 232448, device_name: str | None = None,
                  cc: str | None = None, sms: int | None = None) -> KernelConfig:
    """The default configuration for a problem (the dispatch of ``mc.matmul``).

    The device's tuned table (``marlin_cupy.tune``) when it has this (N, K, M bucket); else, on
    compute capability ``cc`` "90", the sm_90 heuristic (``sm90_choice``, which, given the
    device's SM count ``sms``, puts 128-wide tiles first on narrow layers and caps the grid at
    whole columns on short ones); else the generic
    heuristic: the tile shape of ``_heuristic_shape``, as many 16-row blocks as M needs (64-row
    slabs beyond 64), swapped MMA operands up to 8 rows, and ``HEURISTIC_STAGES`` stages, fewer
    if shared memory is short.
    """
    mb = min(MAX_M_BLOCKS, max(1, -(-m // 16)))
    if device_name:
        from .tune import lookup
        tuned = fit_tuned(lookup(device_name, m, n, k, group_size), m, n, k, has_zp, smem_limit)
        if tuned is not None:
            return tuned
    if cc == "90":
        cfg = sm90_choice(m, n, k, group_size, has_zp, smem_limit, sms)
        if cfg is not None:
            return cfg
    shape = _heuristic_shape(n, k)
    if shape is None:
        raise ValueError(
            f"no kernel tile fits N={n}, K={k}: N must be a multiple of 64 and K of 128 (or of 64 "
            f"with N a multiple of 128); pad the layer's features up to those multiples.")
    threads, nb, kb = shape
    mb = next(b for b in HEURISTIC_M_BLOCKS if b >= mb)
    # Up to 8 rows, weights as the MMA's A operand: half the MMAs (on the H200, 8-18 % faster
    # than the same tile unswapped on every llama2 layer; benchmarks/NOTES.md).
    swap = 1 if m <= 8 else 0
    cfg = KernelConfig(threads, mb, nb, kb, HEURISTIC_STAGES, group_blocks_for(group_size, k),
                       True, swap_ab=swap)
    return (_fit_stages(cfg, has_zp, smem_limit) or cfg.with_(stages=2)).validate(smem_limit,
                                                                                  has_zp)
