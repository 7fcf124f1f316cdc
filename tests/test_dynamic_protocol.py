"""Units handed out at run time (``dyn_chunk``, cuda/marlin.cuh ``DynState``; benchmarks/NOTES.md
entries 51 and 53), modelled on the CPU: the protocol's order of sums, its counters' return to
zero and the absence of waits, under every interleaving drawn at random. No GPU needed.

The design generalises the parallel reduction's last-arriver path (cuda/marlin.cuh,
``finish_split_column`` and ``sum_column``): the launch's units (k-tiles of columns, column by
column) are cut into chunks of ``q`` consecutive units, stripes as today but more of them than
CTAs. CTA b (of a grid of at most as many CTAs as chunks) streams chunk b first; while it
streams a chunk it has drawn the next one from a global counter (one atomic add per chunk,
drawn a chunk ahead: chunk = grid + the counter's old value) and goes on with it. A column that lies wholly in one chunk gets its result directly; a
column split over chunks ``top..bottom`` (``top = first // q``, ``bottom = last // q``) gets one
partial from each, stored in that chunk's slot for the column (two per chunk: the column it
ends in, and the one it starts in), and each chunk counts in on the column's count; the one
that brings it to ``bottom - top + 1`` sums the slots from +0 in the order bottom..top (as
``sum_column`` does), writes the result and zeroes the count. A CTA stops at its first draw
past the last chunk, so the launch makes exactly one draw per chunk (grid first chunks by
index, each later chunk by a draw, and one failed draw per CTA): the draw that returns
``chunks - 1`` is the last, and that CTA zeroes the counter, so the next launch finds it as the
first did. With as many CTAs as chunks nobody draws. Nothing ever waits on another CTA.

The model is sequentially consistent: each step below is one of the kernel's atomics or stores,
in the order the kernel must make visible (a release before each count-in, an acquire after the
count that completes a column). Interleavings are the scheduler's choices.
"""
import numpy as np
from hypothesis import given, settings, strategies as st

import interleave


def split(columns: int, k_tiles: int, q: int) -> dict:
    """Per column: (top, bottom) chunk indices of its first and last unit."""
    return {c: (c * k_tiles // q, (c * k_tiles + k_tiles - 1) // q) for c in range(columns)}


def slot(chunk: int, top: int) -> int:
    """The chunk's slot for a column: the column it starts in (chunk == top) or ends in."""
    return 2 * chunk + (1 if chunk == top else 0)


def reference(values: np.ndarray, q: int) -> np.ndarray:
    """Each column's result as the protocol defines it: each chunk's units of the column
    summed in order (FP32); a split column's partials then added from +0 in chunk order
    bottom..top."""
    columns, k_tiles = values.shape
    out = np.zeros(columns, dtype=np.float32)
    for c, (top, bottom) in split(columns, k_tiles, q).items():
        parts = {}
        for k in range(k_tiles):
            ch = (c * k_tiles + k) // q
            parts[ch] = np.float32(parts.get(ch, np.float32(0)) + values[c, k])
        if top == bottom:
            out[c] = parts[top]
            continue
        acc = np.float32(0)
        for ch in range(bottom, top - 1, -1):
            acc = np.float32(acc + parts[ch])
        out[c] = acc
    return out


class Memory:
    """What the launches share: the draw counter, the column counts, the chunk slots, the
    output."""

    def __init__(self, columns: int, n_chunks: int):
        self.next = 0
        self.count = [0] * columns
        self.slots = [None] * (2 * n_chunks)
        self.result = [None] * columns


def launch(mem: Memory, values: np.ndarray, q: int, ctas: int, choices,
           rearm: bool = True, in_chunk_order: bool = True) -> None:
    columns, k_tiles = values.shape
    units = columns * k_tiles
    n_chunks = -(-units // q)
    cols = split(columns, k_tiles, q)
    mem.result = [None] * columns
    arrivals = {c: [] for c in range(columns)}      # for the negative test's arrival order

    grid = min(ctas, n_chunks)                       # ops: never more CTAs than chunks
    draws = grid < n_chunks

    def cta(idx):
        # Each CTA is a generator of steps; one `next()` is one atomic or store of the kernel.
        while True:
            if draws:
                v = mem.next
                mem.next += 1                        # atomicAdd: the next chunk, a chunk ahead
                yield
            lo, hi = idx * q, min(units, (idx + 1) * q)
            parts = {}
            for u in range(lo, hi):                  # streaming the chunk (no shared state)
                c, k = divmod(u, k_tiles)
                parts[c] = np.float32(parts.get(c, np.float32(0)) + values[c, k])
            ahead = grid + v if draws else n_chunks  # the draw, published to the CTA
            if draws and v == n_chunks - 1 and rearm:
                mem.next = 0                         # the launch's last draw re-arms the counter
            yield
            for c, part in parts.items():            # the columns it ends, in order
                top, bottom = cols[c]
                if top == bottom:
                    mem.result[c] = part             # the whole column: its result directly
                    yield
                    continue
                mem.slots[slot(idx, top)] = part     # the partial into the chunk's own slot
                yield
                mem.count[c] += 1                    # release, then count in (atomicAdd)
                arrivals[c].append(idx)
                done = mem.count[c] == bottom - top + 1
                yield
                if done:                             # acquire: every slot of the column is in
                    order = range(bottom, top - 1, -1) if in_chunk_order else arrivals[c]
                    acc = np.float32(0)
                    for j in order:
                        p = mem.slots[slot(j, top)]
                        assert p is not None, f"chunk {j}'s slot read before it was stored"
                        acc = np.float32(acc + p)
                    mem.result[c] = acc
                    if rearm:
                        mem.count[c] = 0
                    yield
            if ahead >= n_chunks:                    # drew past the last chunk: done
                return
            idx = ahead

    interleave.run([cta(b) for b in range(grid)], choices)


def _values(rng, columns, k_tiles):
    # Magnitudes far apart, so that a different order of FP32 additions changes the sum.
    v = rng.standard_normal((columns, k_tiles)) * 10.0 ** rng.integers(-3, 8, (columns, k_tiles))
    return v.astype(np.float32)


@settings(max_examples=150, deadline=None)
@given(columns=st.integers(1, 5), k_tiles=st.integers(1, 12), chunk=st.integers(1, 7),
       ctas=st.integers(1, 6), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_any_interleaving_gives_the_chunk_order_sum_and_rearms(columns, k_tiles, chunk, ctas,
                                                               seed, data):
    rng = np.random.default_rng(seed)
    values = _values(rng, columns, k_tiles)
    want = reference(values, chunk)
    mem = Memory(columns, -(-columns * k_tiles // chunk))
    choices = lambda n: data.draw(st.integers(0, n - 1))  # noqa: E731
    for _ in range(2):                               # a second launch on the re-armed memory
        launch(mem, values, chunk, ctas, choices)
        got = np.array(mem.result, dtype=np.float32)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert mem.next == 0 and mem.count == [0] * columns


def test_without_rearming_the_second_launch_breaks():
    """The check can fail: a counter left at its final value hands the next launch's CTAs no
    chunk after their first, and column counts left armed complete sums early or never."""
    rng = np.random.default_rng(1)
    values = _values(rng, 3, 8)
    mem = Memory(3, 8)
    launch(mem, values, 3, 4, lambda n: 0, rearm=False)
    assert np.array_equal(np.array(mem.result, np.float32), reference(values, 3))
    launch(mem, values, 3, 4, lambda n: 0, rearm=False)
    assert any(r is None for r in mem.result)


def test_summing_in_arrival_order_is_not_reproducible():
    """Why the slots are summed in chunk order: in arrival order, two interleavings of the same
    launch give different bits."""
    rng = np.random.default_rng(2)
    values = _values(rng, 1, 12)
    results = set()
    for seed in range(40):
        pick = np.random.default_rng(seed)
        mem = Memory(1, 6)
        launch(mem, values, 2, 4, lambda n: int(pick.integers(n)), in_chunk_order=False)
        results.add(np.float32(mem.result[0]).tobytes())
    assert len(results) > 1
