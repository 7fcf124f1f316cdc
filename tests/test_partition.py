"""The striped partition of cuda/marlin.cuh, mirrored in Python: the facts its cross-CTA
reductions rely on, over many random problem and grid sizes.

The kernel lays the units out column by column (k_tiles units each) and gives CTA b the stripe
[b * iters, (b + 1) * iters). A column is split when its first unit (the ``top`` CTA's) and its
last unit (the ``bottom`` CTA's) lie in different stripes. The parallel reduction gives each CTA
two scratch slots, 2b for a column it does not start and 2b + 1 for the one it starts
(``partial_slot``). With ``MARLIN_PAR_COOP`` the CTAs that meet a split column at the end of
their stripe (its *waiters*) wait for every partial and each sums a share of it: ``coop_finish``
finds that column again from the stripe's last unit and counts the waiters with a formula."""
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
                # column's bottom, and it did not start it (it never waits for it).
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


def coop_waiters(k_tiles: int, columns: int, grid: int, col: int):
    """The kernel's ``coop_finish`` count: (top, bottom, waiters) of split column ``col``."""
    units = k_tiles * columns
    iters = -(-units // grid)
    first = col * k_tiles
    top, bottom = first // iters, (first + k_tiles - 1) // iters
    bottom_waits = min((bottom + 1) * iters, units) == first + k_tiles
    return top, bottom, bottom - top + int(bottom_waits)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 80), st.integers(1, 300), st.integers(1, 264))
def test_coop_waiters_are_the_ctas_meeting_the_column_at_their_stripe_end(k_tiles, columns, grid):
    units = k_tiles * columns
    iters = -(-units // grid)
    waiting = {}   # split column -> CTAs whose stripe ends in it
    for b, ends in column_ends(k_tiles, columns, grid).items():
        col, top, bottom, last = ends[-1]
        assert last
        # coop_finish finds the column from the stripe's last unit alone.
        end = min(b * iters + iters, units)
        assert col == (end - 1) // k_tiles
        if top != bottom:
            waiting.setdefault(col, []).append(b)
        # A CTA waits at most once: only its stripe's last column end is a wait.
        assert all(not last for *_, last in ends[:-1])
    for col, ctas in waiting.items():
        top, bottom, waiters = coop_waiters(k_tiles, columns, grid, col)
        assert len(ctas) == waiters
        # The ranks (blockIdx - top) are 0..waiters - 1: the shares cover the tile once.
        assert sorted(b - top for b in ctas) == list(range(waiters))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 80), st.integers(1, 300), st.integers(1, 264))
def test_coop_protocol_never_deadlocks_and_rearms_every_counter(k_tiles, columns, grid):
    """Every CTA runs its stripe: an arrival (+1) at each split column end, then at its stripe's
    end, if that column is split, a wait for ``count`` arrivals, its share, and a second +1; the
    waiter that brings the counter to count + waiters - 1 (before its add) re-arms it to 0. Run
    with the CTAs stepped in a scrambled order: all finish and every counter is back at 0."""
    ends = column_ends(k_tiles, columns, grid)
    programs = {}
    for b, es in ends.items():
        prog = [("arrive", col, top, bottom) for col, top, bottom, _ in es if top != bottom]
        col, top, bottom, _ = es[-1]
        if top != bottom:
            prog.append(("wait", col, top, bottom))
            prog.append(("done", col, top, bottom))
        programs[b] = prog
    counters, pc = {}, {b: 0 for b in programs}
    order = sorted(programs, key=lambda b: (b * 7919) % 263)
    progress = True
    while progress:
        progress = False
        for b in order:
            while pc[b] < len(programs[b]):
                op, col, top, bottom = programs[b][pc[b]]
                count = bottom - top + 1
                if op == "arrive":
                    counters[top] = counters.get(top, 0) + 1
                elif op == "wait":
                    if counters.get(top, 0) < count:
                        break
                else:
                    _, _, waiters = coop_waiters(k_tiles, columns, grid, col)
                    before = counters[top]
                    counters[top] = before + 1
                    if before == count + waiters - 1:
                        counters[top] = 0
                pc[b] += 1
                progress = True
    assert all(pc[b] == len(programs[b]) for b in programs)
    assert all(v == 0 for v in counters.values())
