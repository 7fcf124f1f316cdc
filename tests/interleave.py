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


def sharers(column: int, k_tiles: int, iters: int) -> tuple:
    """(top, bottom) CTAs of a column."""
    first = column * k_tiles
    return first // iters, (first + k_tiles - 1) // iters


def bottom_goes_on(column: int, k_tiles: int, iters: int, units: int) -> bool:
    """Does the column's bottom CTA's stripe go on past the column (the kernel's
    ``!bottom_ends_column``)?"""
    _, bottom = sharers(column, k_tiles, iters)
    return min((bottom + 1) * iters, units) != (column + 1) * k_tiles


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
