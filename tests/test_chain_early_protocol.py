"""The serial chain of a split column with its bottom's partial as never-zero words
(``MARLIN_CHAIN_EARLY``, cuda/marlin.cuh ``finish_column``, ``chain_tail``;
benchmarks/NOTES.md entry 113), modelled on the CPU: under every interleaving drawn at random
each column's result has the bits of the shipped chain (the bottom's partial, then each CTA's
own added to the sum so far, up to the top), the locks and the word slots are zero again after
the launch, and a second launch on that memory is as right as the first. No GPU needed.

The partition is the kernel's static one (tests/interleave.py): CTA b streams units
``[b * iters, (b + 1) * iters)`` column after column. A column held by one CTA gets its result
directly. A split column's sharers top..bottom take turns on the lock at its top, the bottom
first (``idx = bottom - b``): each waits until the lock holds its turn (an acquire), adds the
sum so far from the column's scratch slot to its own partial, stores the new sum there (the
top: the result) and releases the next turn (the top: 0, re-armed). With the switch, a bottom
whose stripe goes on past the column writes its partial as words (0: not written) into the
column's slot and goes on with no turn; the second CTA (``idx`` 1) then has turn 0, adds the
words in place of the scratch, each read again until written, and sets them back to 0 after
its release. Its stripe always ends inside the column, and the wgmma loop takes that turn
after the stripe (``chain_tail``; ``tail`` here), the ``mma.sync`` loop in place.

Each step is one of the kernel's stores, atomics or loads, in the order the kernel makes them
visible (the scratch store before the release); the words need no order.
"""
import numpy as np
from hypothesis import given, settings, strategies as st

import interleave


def chain_reference(values: np.ndarray, iters: int) -> np.ndarray:
    """Each column's result as the shipped chain adds it: each CTA's units of the column added
    in order (FP32), then CTA bottom's partial, plus CTA bottom - 1's, ..., plus the top's, each
    CTA adding the sum so far to its own partial."""
    columns, k_tiles, elems = values.shape
    parts = interleave.partials(values, iters)
    out = np.zeros((columns, elems), np.float32)
    for c in range(columns):
        top, bottom = interleave.sharers(c, k_tiles, iters)
        acc = parts[bottom, c]
        for b in range(bottom - 1, top - 1, -1):
            acc = (parts[b, c] + acc).astype(np.float32)
        out[c] = acc
    return out


def launch(mem: interleave.Memory, values: np.ndarray, iters: int, choices,
           early: bool = True, tail: bool = True, clear: bool = True, spin: bool = True) -> None:
    columns, k_tiles, elems = values.shape
    units = columns * k_tiles
    grid = -(-units // iters)
    mem.result = np.full((columns, elems), np.nan, np.float32)
    stripes = interleave.partials(values, iters)   # each CTA's, as its stream adds them

    def turn(c, part, idx, words):
        """CTA `idx`'s turn in column `c`'s chain (finish_column; chain_tail for the second
        CTA after the loop). `words`: the column's bottom left its partial as words."""
        top, bottom = interleave.sharers(c, k_tiles, iters)
        count = bottom - top + 1
        t = idx - (1 if words else 0)
        while mem.locks[top] != t:                    # acquire: its turn
            yield
        acc = part.copy()
        if words and idx == 1:
            for e in range(elems):
                w = mem.words[c, e]
                while spin and w == 0:               # read again until written
                    yield
                    w = mem.words[c, e]
                acc[e] = np.float32(acc[e] + interleave.unword(w))
        elif idx > 0:
            so_far = mem.scratch.get(top)
            assert so_far is not None, f"column {c}'s sum read before it was stored"
            acc = (acc + so_far).astype(np.float32)
        if idx == count - 1:
            mem.result[c] = acc
        else:
            mem.scratch[top] = acc
        yield
        mem.locks[top] = 0 if idx == count - 1 else t + 1   # release
        yield
        if words and idx == 1 and clear:
            for e in range(elems):
                mem.words[c, e] = 0                  # 0 again for the next launch
                yield

    def cta(b):
        hi = min(units, (b + 1) * iters)
        parts = {c: part for (cta, c), part in stripes.items() if cta == b}
        last = (hi - 1) // k_tiles
        deferred = None
        for c, part in parts.items():                # the columns it ends, in order
            top, bottom = interleave.sharers(c, k_tiles, iters)
            if top == bottom:
                mem.result[c] = part
                yield
                continue
            idx = bottom - b
            words = early and interleave.bottom_goes_on(c, k_tiles, iters, units)
            if words and idx == 0:
                for e in range(elems):               # relaxed word stores, any order seen
                    mem.words[c, e] = interleave.word(part[e])
                    yield
                continue                             # no turn; on with the stripe
            if words and idx == 1 and tail:
                assert c == last, "the chain's second CTA ends its stripe in the column"
                deferred = (c, part)                 # chain_tail, after the loop
                continue
            yield from turn(c, part, idx, words)
        if deferred is not None:
            yield from turn(*deferred, 1, True)

    interleave.run([cta(b) for b in range(grid)], choices)


@settings(max_examples=200, deadline=None)
@given(columns=st.integers(1, 4), k_tiles=st.integers(1, 9), iters=st.integers(1, 7),
       elems=st.integers(1, 4), tail=st.booleans(), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_any_interleaving_gives_the_chains_sum_and_clears(columns, k_tiles, iters, elems, tail,
                                                         seed, data):
    choices = lambda n: data.draw(st.integers(0, n - 1))  # noqa: E731
    interleave.two_launches(launch, chain_reference, columns, k_tiles, iters, elems,
                            np.random.default_rng(seed), choices, tail=tail)


def test_same_bits_as_the_shipped_chain():
    """The switch changes who waits, not the sum: with and without it, in place and after the
    loop, the same bits on partitions where bottoms go on past their columns."""
    rng = np.random.default_rng(3)
    values = interleave.values(rng, 3, 7, 4)
    for iters in (2, 3, 4, 5):
        assert any(interleave.bottom_goes_on(c, 7, iters, 21) and
                   len(set(interleave.sharers(c, 7, iters))) == 2 for c in range(3))
        got = []
        for early, tail in ((False, False), (True, False), (True, True)):
            mem = interleave.Memory(3, -(-21 // iters), 4)
            launch(mem, values, iters, interleave.last_first(iters), early=early, tail=tail)
            got.append(mem.result.view(np.uint32).copy())
        assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])


def test_without_the_clears_a_later_launch_reads_old_words():
    """The check can fail: words left in the slot look written to the next launch's second
    CTA, which then adds the previous launch's partial when it runs before the bottom writes."""
    assert interleave.old_words_read(launch, chain_reference)


def test_a_second_cta_that_does_not_read_again_adds_an_unwritten_word():
    """And the spin matters: taking a word of 0 as written adds garbage (the inverted 0, a
    NaN) when the second CTA runs before the bottom has written."""
    assert interleave.unwritten_word_added(launch)
