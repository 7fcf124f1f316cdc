"""The striped partition of cuda/marlin.cuh, mirrored in Python: the facts its cross-CTA
reductions rely on, over many random problem and grid sizes.

The kernel lays the units out column by column (k_tiles units each) and gives CTA b the stripe
[b * iters, (b + 1) * iters). A column is split when its first unit (the ``top`` CTA's) and its
last unit (the ``bottom`` CTA's) lie in different stripes. The parallel reduction gives each CTA
two scratch slots, 2b for a column it does not start and 2b + 1 for the one it starts
(``partial_slot``), and ``MARLIN_PAR_DEFER`` keeps one deferred column per CTA."""
from hypothesis import given, settings
from hypothesis import strategies as st


def column_ends(k_tiles: int, columns: int, grid: int):
    """Per CTA with work: the (column, top, bottom, at_stripe_end) of every column end it meets,
    in the kernel's order (a column ends at its last k tile or at the stripe's last unit)."""
    units = k_tiles * columns
    iters = -(-units // grid)
    out = {}
    for b in range(grid):
        start, end = b * iters, min(b * iters + iters, units)
        if start >= units:
            continue
        ends = []
        for u in range(start, end):
            if u % k_tiles == k_tiles - 1 or u == end - 1:
                col = u // k_tiles
                first = col * k_tiles
                ends.append((col, first // iters, (first + k_tiles - 1) // iters, u == end - 1))
        out[b] = ends
    return out


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 80), st.integers(1, 300), st.integers(1, 264))
def test_split_columns_fit_two_slots_and_one_deferred_column(k_tiles, columns, grid):
    for b, ends in column_ends(k_tiles, columns, grid).items():
        split = [(col, top, bottom, last) for col, top, bottom, last in ends if top != bottom]
        # At most two split columns per CTA: the one it does not start, the one it starts.
        assert len(split) <= 2
        assert len({top == b for _, top, _, _ in split}) == len(split)
        for col, top, bottom, last in split:
            assert top <= b <= bottom
            if not last:
                # A split column ending inside a stripe is the one this CTA closes: it is the
                # column's bottom (the MARLIN_PAR_DEFER case), and it did not start it.
                assert bottom == b and top < b
        assert sum(not last for *_, last in split) <= 1


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 80), st.integers(1, 300), st.integers(1, 264))
def test_every_split_column_has_each_of_its_ctas_arrive_once(k_tiles, columns, grid):
    arrivals = {}
    for b, ends in column_ends(k_tiles, columns, grid).items():
        for col, top, bottom, _ in ends:
            if top != bottom:
                arrivals.setdefault((col, top, bottom), []).append(b)
    for (col, top, bottom), ctas in arrivals.items():
        assert sorted(ctas) == list(range(top, bottom + 1)), col
