"""Units handed out at run time (benchmarks/NOTES.md, next lever 1; not in the kernel yet),
modelled on the CPU before any kernel code: the protocol's order of sums, its counters' return
to zero and the absence of waits, under every interleaving drawn at random. No GPU needed.

The design: a launch's work is cut into chunks of consecutive k-tiles of one column (fixed
boundaries, numbered column by column). Each CTA takes the next chunk index from a global
counter (one atomic add, read a chunk ahead), streams it, and then either writes the column's
result (a chunk that covers its whole column) or stores its FP32 partial in the chunk's own slot
and counts in on the column; the chunk that brings the column's count to its number of chunks
sums the column's slots in chunk order, writes the result and zeroes the count. A CTA that
draws an index past the last chunk counts itself out; the last one out zeroes the counter and
that count, so the next launch finds them as the first did. Nothing ever waits on another CTA.

The model is sequentially consistent: each step below is one of the kernel's atomics or stores,
in the order the kernel must make visible (a release before each count-in, an acquire after the
count that completes a column). Interleavings are the scheduler's choices.
"""
import numpy as np
from hypothesis import given, settings, strategies as st


def chunks_of(columns: int, k_tiles: int, chunk: int) -> list:
    """(column, first k-tile, k-tiles) of every chunk, column by column."""
    return [(c, k0, min(chunk, k_tiles - k0)) for c in range(columns)
            for k0 in range(0, k_tiles, chunk)]


def reference(values: np.ndarray, chunk: int) -> np.ndarray:
    """Each column's result as the protocol defines it: every chunk's k-tiles summed in order
    (FP32), then the chunks' partials summed in chunk order."""
    out = np.zeros(values.shape[0], dtype=np.float32)
    for c, row in enumerate(values):
        parts = []
        for k0 in range(0, row.size, chunk):
            p = np.float32(0)
            for v in row[k0:k0 + chunk]:
                p = np.float32(p + v)
            parts.append(p)
        acc = parts[0]
        for p in parts[1:]:
            acc = np.float32(acc + p)
        out[c] = acc
    return out


class Memory:
    """What the launches share: the counter, the count of CTAs out, the column counts, the
    chunk slots, the output."""

    def __init__(self, columns: int, n_chunks: int):
        self.next, self.out_count = 0, 0
        self.count = [0] * columns
        self.slots = [None] * n_chunks
        self.result = [None] * columns


def launch(mem: Memory, values: np.ndarray, chunk: int, ctas: int, choices,
           rearm: bool = True, in_chunk_order: bool = True) -> None:
    columns, k_tiles = values.shape
    plan = chunks_of(columns, k_tiles, chunk)
    per_column = -(-k_tiles // chunk)
    mem.result = [None] * columns
    # Each CTA is a generator of steps; one `next()` is one atomic or store of the kernel.
    arrivals = {c: [] for c in range(columns)}      # for the negative test's arrival order

    def cta():
        idx = mem.next
        mem.next += 1                                # atomicAdd(next, 1): the first chunk
        yield
        while idx < len(plan):
            ahead = mem.next
            mem.next += 1                            # the next chunk's index, read a chunk ahead
            yield
            col, k0, n = plan[idx]
            part = np.float32(0)
            for v in values[col, k0:k0 + n]:         # streaming the chunk (no shared state)
                part = np.float32(part + v)
            yield
            if per_column == 1:
                mem.result[col] = part               # the whole column: its result directly
            else:
                mem.slots[idx] = part                # the partial into the chunk's own slot
                yield
                mem.count[col] += 1                  # release, then count in (atomicAdd)
                arrivals[col].append(idx)
                done = mem.count[col] == per_column
                yield
                if done:                             # acquire: every slot of the column is in
                    first = col * per_column
                    order = (range(first, first + per_column) if in_chunk_order
                             else arrivals[col])
                    acc = None
                    for j in order:
                        p = mem.slots[j]
                        assert p is not None, f"chunk {j}'s slot read before it was stored"
                        acc = p if acc is None else np.float32(acc + p)
                    mem.result[col] = acc
                    if rearm:
                        mem.count[col] = 0
                    yield
            idx = ahead
        mem.out_count += 1                           # drew past the last chunk: count out
        if mem.out_count == ctas and rearm:
            mem.next, mem.out_count = 0, 0           # the last one out re-arms the launch
        yield

    running = [cta() for _ in range(ctas)]
    while running:
        i = choices(len(running))
        try:
            next(running[i])
        except StopIteration:
            running.pop(i)


def _values(rng, columns, k_tiles):
    # Magnitudes far apart, so that a different order of FP32 additions changes the sum.
    v = rng.standard_normal((columns, k_tiles)) * 10.0 ** rng.integers(-3, 8, (columns, k_tiles))
    return v.astype(np.float32)


@settings(max_examples=150, deadline=None)
@given(columns=st.integers(1, 5), k_tiles=st.integers(1, 12), chunk=st.integers(1, 5),
       ctas=st.integers(1, 6), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_any_interleaving_gives_the_chunk_order_sum_and_rearms(columns, k_tiles, chunk, ctas,
                                                               seed, data):
    rng = np.random.default_rng(seed)
    values = _values(rng, columns, k_tiles)
    want = reference(values, chunk)
    plan = chunks_of(columns, k_tiles, chunk)
    mem = Memory(columns, len(plan))
    choices = lambda n: data.draw(st.integers(0, n - 1))
    for _ in range(2):                               # a second launch on the re-armed memory
        launch(mem, values, chunk, ctas, choices)
        got = np.array(mem.result, dtype=np.float32)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert mem.next == 0 and mem.out_count == 0 and mem.count == [0] * columns


def test_without_rearming_the_second_launch_breaks():
    """The check can fail: counts left at their final values make the next launch skip or
    never complete its columns' sums."""
    rng = np.random.default_rng(1)
    values = _values(rng, 3, 8)
    mem = Memory(3, len(chunks_of(3, 8, 3)))
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
        mem = Memory(1, len(chunks_of(1, 12, 2)))
        launch(mem, values, 2, 4, lambda n: int(pick.integers(n)), in_chunk_order=False)
        results.add(np.float32(mem.result[0]).tobytes())
    assert len(results) > 1
