"""Runs modelled CTAs step by step in an order the caller picks, and what the models of a
split column's words share (the protocol tests: tests/test_dynamic_protocol.py,
tests/test_coop_early_protocol.py, tests/test_chain_early_protocol.py)."""
import numpy as np


def run(steps, choices) -> None:
    """``steps``: generators, one per CTA, each ``next()`` one step of it (one atomic, store or
    load of the kernel). ``choices(n)`` picks which of the ``n`` still running makes the next
    step; a generator that ends leaves the list."""
    running = list(steps)
    while running:
        i = choices(len(running))
        try:
            next(running[i])
        except StopIteration:
            running.pop(i)


class Memory:
    """What a model's launches share: the locks (one per CTA, at a column's top: the shared
    sum's counters, or the chain's turns), the scratch slots (by index), the word slots (one
    per column) and the output."""

    def __init__(self, columns: int, grid: int, elems: int):
        self.locks = [0] * grid
        self.scratch = {}
        self.words = np.zeros((columns, elems), np.uint32)
        self.result = np.full((columns, elems), np.nan, np.float32)


def sharers(column: int, k_tiles: int, iters: int) -> tuple:
    """(top, bottom) CTAs of a column."""
    first = column * k_tiles
    return first // iters, (first + k_tiles - 1) // iters


def bottom_goes_on(column: int, k_tiles: int, iters: int, units: int) -> bool:
    """Does the column's bottom CTA's stripe go on past the column (the kernel's
    ``!bottom_ends_column``)?"""
    _, bottom = sharers(column, k_tiles, iters)
    return min((bottom + 1) * iters, units) != (column + 1) * k_tiles


def partials(values: np.ndarray, iters: int) -> dict:
    """``{(cta, column): partial}``: what each CTA's stripe adds up for each column it holds,
    its units in order (FP32, per element), for ``values`` [columns, k_tiles, elems] and
    stripes of ``iters`` units."""
    columns, k_tiles, elems = values.shape
    out = {}
    for u in range(columns * k_tiles):
        c, k = divmod(u, k_tiles)
        key = (u // iters, c)
        out[key] = (out.get(key, np.zeros(elems, np.float32)) + values[c, k]).astype(np.float32)
    return out


def word(x: np.float32) -> np.uint32:
    """early_word: the bits inverted, a NaN first made 0x7fffffff (never 0)."""
    bits = np.float32(x).view(np.uint32) if not np.isnan(x) else np.uint32(0x7fffffff)
    return np.uint32(~bits & 0xffffffff)


def unword(w: np.uint32) -> np.float32:
    return np.uint32(~w & 0xffffffff).view(np.float32)


def last_first(seed: int, p: float = 0.9):
    """A scheduler that runs the CTA started last with probability ``p``, another at random
    otherwise (a waiter spinning there must not hold the others up forever)."""
    pick = np.random.default_rng(seed)
    return lambda n: n - 1 if pick.random() < p else int(pick.integers(n))


def first_first(seed: int, p: float = 0.9):
    """A scheduler that runs the lowest CTA still running with probability ``p``."""
    pick = np.random.default_rng(seed)
    return lambda n: 0 if pick.random() < p else int(pick.integers(n))


def values(rng, columns, k_tiles, elems):
    """FP32 values of each column's units, per element: magnitudes far apart, so that another
    order of FP32 additions changes the sum."""
    v = rng.standard_normal((columns, k_tiles, elems)) * 10.0 ** rng.integers(
        -3, 8, (columns, k_tiles, elems))
    return v.astype(np.float32)


def two_launches(launch, reference, columns, k_tiles, iters, elems, rng, choices,
                 **options) -> None:
    """A model's launch (``launch(mem, values, iters, choices, **options)`` on a ``Memory``)
    twice, new values each time, on the memory the first left: each gives
    ``reference(values, iters)``'s bits, and leaves the locks and the word slots at 0."""
    grid = -(-columns * k_tiles // iters)
    mem = Memory(columns, grid, elems)
    for _ in range(2):
        v = values(rng, columns, k_tiles, elems)
        launch(mem, v, iters, choices, **options)
        assert np.array_equal(mem.result.view(np.uint32), reference(v, iters).view(np.uint32))
        assert mem.locks == [0] * grid and not mem.words.any()


def old_words_read(launch, reference) -> bool:
    """Without the clears (``clear=False``): after a launch that left words (3 columns of 7
    units, 4 per CTA: column 0's bottom, CTA 1, goes on into column 1), does a second launch,
    CTA 0 run first, give other bits than ``reference``? (It adds the old words.)"""
    rng = np.random.default_rng(4)
    mem = Memory(2, 4, 3)
    launch(mem, values(rng, 2, 7, 3), 4, last_first(0), clear=False)
    assert mem.words.any()
    second = values(rng, 2, 7, 3)
    launch(mem, second, 4, first_first(1), clear=False)
    return not np.array_equal(mem.result.view(np.uint32), reference(second, 4).view(np.uint32))


def unwritten_word_added(launch) -> bool:
    """Without the re-reads (``spin=False``), CTA 0 run first (it sums column 0 before its
    bottom, CTA 1, has written): does a result hold a NaN, the inverted 0 taken as written?"""
    rng = np.random.default_rng(5)
    mem = Memory(2, 4, 3)
    launch(mem, values(rng, 2, 7, 3), 4, first_first(2), spin=False)
    return bool(np.isnan(mem.result).any())
