"""The shared sum of a split column with its bottom's partial as never-zero words
(``MARLIN_COOP_EARLY``, cuda/marlin.cuh ``coop_early``, ``coop_finish``, ``coop_sum``;
benchmarks/NOTES.md entry 112), modelled on the CPU: under every interleaving drawn at random
each column's result has the bits of its partials added from +0 in the order bottom..top, the
counters and the word slots are zero again after the launch, and a second launch on that
memory is as right as the first. No GPU needed.

The partition is the kernel's static one: CTA b streams units ``[b * iters, (b + 1) * iters)``
column after column (``k_tiles`` units per column). A column held by one CTA gets its result
directly. A split column's sharers are the CTAs top..bottom (top holds its first unit, bottom
its last). Its bottom reaches the column's end in the middle of its stripe when its stripe goes
on past the column (``coop_early``): then it writes its partial, element by element, as words
(0 means "not written"; a written word is never 0) into the column's slot and goes on, without
counting in. Every other sharer stores its partial into its scratch slot and counts in on the
column's counter; those whose stripe ends in the column (top, the middle ones, and the bottom
when it ends with the column) are the waiters: after their stripe, each waits until the
counter holds every count-in, then sums its own contiguous share of the elements in the order
bottom..top from +0, the bottom's words read again until written, writes those results, sets
its share of the word slot back to 0 and counts out; the waiter whose count-out completes the
column re-arms the counter to 0.

Each step below is one of the kernel's stores, atomics or loads, in the order the kernel makes
them visible (its scratch stores before its count-in: a release; the sums after the counter is
seen complete: an acquire); the words need no order, since a waiter reads each until it is
written. Interleavings are the scheduler's choices.
"""
import numpy as np
from hypothesis import given, settings, strategies as st

import interleave


def reference(values: np.ndarray, iters: int) -> np.ndarray:
    """Each column's result: each CTA's units of the column added in order (FP32, per
    element); a split column's partials then added from +0 in the order bottom..top."""
    columns, k_tiles, elems = values.shape
    parts = interleave.partials(values, iters)
    out = np.zeros((columns, elems), np.float32)
    for c in range(columns):
        top, bottom = interleave.sharers(c, k_tiles, iters)
        if top == bottom:
            out[c] = parts[top, c]
            continue
        acc = np.zeros(elems, np.float32)
        for b in range(bottom, top - 1, -1):
            acc = (acc + parts[b, c]).astype(np.float32)
        out[c] = acc
    return out


def launch(mem: interleave.Memory, values: np.ndarray, iters: int, choices,
           early: bool = True, clear: bool = True, spin: bool = True) -> None:
    columns, k_tiles, elems = values.shape
    units = columns * k_tiles
    grid = -(-units // iters)
    mem.result = np.full((columns, elems), np.nan, np.float32)
    stripes = interleave.partials(values, iters)   # each CTA's, as its stream adds them

    def slot(b, top):
        return 2 * b + (1 if b == top else 0)

    def cta(b):
        hi = min(units, (b + 1) * iters)
        parts = {c: part for (cta, c), part in stripes.items() if cta == b}
        last = (hi - 1) // k_tiles
        for c, part in parts.items():                # the columns it ends, in order
            top, bottom = interleave.sharers(c, k_tiles, iters)
            if top == bottom:
                mem.result[c] = part
                yield
                continue
            if early and b == bottom and interleave.bottom_goes_on(c, k_tiles, iters, units):
                for e in range(elems):               # relaxed word stores, any order seen
                    mem.words[c, e] = interleave.word(part[e])
                    yield
                continue                             # no count-in; on with the stripe
            mem.scratch[slot(b, top)] = part
            yield
            mem.locks[top] += 1                      # release, then count in
            yield
        # After the main loop: a waiter of its last column if that column is split.
        c = last
        top, bottom = interleave.sharers(c, k_tiles, iters)
        if top == bottom:
            return
        goes_on = interleave.bottom_goes_on(c, k_tiles, iters, units)
        skip = early and goes_on                     # the early bottom does not count in
        count = bottom - top + (0 if skip else 1)
        waiters = bottom - top + (0 if goes_on else 1)
        while mem.locks[top] < count:                # acquire: every count-in seen
            yield
        rank = b - top
        e_lo, e_hi = elems * rank // waiters, elems * (rank + 1) // waiters
        for e in range(e_lo, e_hi):
            acc = np.float32(0)
            for s in range(bottom, top - 1, -1):
                if s == bottom and skip:
                    w = mem.words[c, e]
                    while spin and w == 0:          # read again until written
                        yield
                        w = mem.words[c, e]
                    acc = np.float32(acc + interleave.unword(w))
                else:
                    p = mem.scratch.get(slot(s, top))
                    assert p is not None, f"CTA {s}'s partial read before it was stored"
                    acc = np.float32(acc + p[e])
            mem.result[c, e] = acc
            if skip and clear:
                mem.words[c, e] = 0                  # its share of the slot, 0 again
            yield
        mem.locks[top] += 1                          # count out
        if mem.locks[top] == count + waiters:
            mem.locks[top] = 0                       # the last re-arms
        yield

    interleave.run([cta(b) for b in range(grid)], choices)


@settings(max_examples=200, deadline=None)
@given(columns=st.integers(1, 4), k_tiles=st.integers(1, 9), iters=st.integers(1, 7),
       elems=st.integers(1, 5), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_any_interleaving_gives_the_bottom_to_top_sum_and_clears(columns, k_tiles, iters,
                                                                  elems, seed, data):
    choices = lambda n: data.draw(st.integers(0, n - 1))  # noqa: E731
    interleave.two_launches(launch, reference, columns, k_tiles, iters, elems,
                            np.random.default_rng(seed), choices)


def test_same_bits_as_the_bottom_counting_in():
    """The switch changes who waits, not the sum: with and without the early bottom, the
    same bits on partitions where bottoms go on past their columns."""
    rng = np.random.default_rng(3)
    values = interleave.values(rng, 3, 7, 4)
    for iters in (2, 3, 4, 5):
        assert any(interleave.bottom_goes_on(c, 7, iters, 21) and
                   len(set(interleave.sharers(c, 7, iters))) == 2 for c in range(3))
        got = {}
        for early in (False, True):
            mem = interleave.Memory(3, -(-21 // iters), 4)
            launch(mem, values, iters, interleave.last_first(iters), early=early)
            got[early] = mem.result.copy()
        assert np.array_equal(got[False].view(np.uint32), got[True].view(np.uint32))


def test_without_the_clears_a_later_launch_reads_old_words():
    """The check can fail: words left in the slot look written to the next launch's waiters,
    which then add the previous launch's partial when they run before the bottom writes."""
    assert interleave.old_words_read(launch, reference)


def test_a_waiter_that_does_not_read_again_adds_an_unwritten_word():
    """And the spin matters: a waiter that takes a word of 0 as written adds garbage (here the
    inverted 0, a NaN) when it sums before the bottom has written."""
    assert interleave.unwritten_word_added(launch)
