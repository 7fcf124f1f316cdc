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


# ---- MARLIN_PAR_EARLY_BOTTOM (benchmarks/NOTES.md entry 69): the bottom CTA of a split column
# that ends inside its stripe writes its partial bit-inverted into the column's slot (zero
# between calls) and neither counts in nor fences; the other CTAs count in, and the last of
# them (old value bottom - top - 1) sums: the bottom's words first, read until they are not 0,
# then the other partials bottom - 1 .. top, and writes the slot back to 0.

def early_bottom(k_tiles: int, columns: int, grid: int, col: int) -> bool:
    """The kernel's test (``!bottom_ends_column(first, bottom)``) for split column ``col``."""
    units = k_tiles * columns
    iters = -(-units // grid)
    first = col * k_tiles
    bottom = (first + k_tiles - 1) // iters
    return min((bottom + 1) * iters, units) != first + k_tiles


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 80), st.integers(1, 300), st.integers(1, 264))
def test_early_bottom_is_the_split_column_ending_inside_a_stripe(k_tiles, columns, grid):
    for b, ends in column_ends(k_tiles, columns, grid).items():
        for col, top, bottom, last in ends:
            if top == bottom:
                continue
            # Every CTA of the column takes the same decision, from the column alone; it holds
            # exactly when the column's bottom meets it before its stripe's end.
            if b == bottom:
                assert early_bottom(k_tiles, columns, grid, col) == (not last)
            else:
                assert last   # the others meet it at their stripe's end


def _f32(x):
    import numpy as np
    return np.float32(x)


def _word(x) -> int:
    """The kernel's early_word: the FP32 bits inverted, a NaN first made 0x7fffffff."""
    import numpy as np
    bits = 0x7FFFFFFF if np.isnan(x) else int(np.float32(x).view(np.uint32))
    return ~bits & 0xFFFFFFFF


def _unword(w: int):
    import numpy as np
    return np.uint32(~w & 0xFFFFFFFF).view(np.float32)


def split_arrivals(k_tiles, columns, grid, order_key):
    """(partial, arrivals, split) of a launch: an FP32 partial per (column, CTA) of every split
    column (values spread over 5 decades, so the order of the adds shows in the bits), the
    CTAs' arrivals at those columns sorted by ``order_key(b, col)`` as (b, col, top, bottom),
    and {col: (top, bottom)}."""
    import numpy as np
    partial, arrivals = {}, []
    for b, es in column_ends(k_tiles, columns, grid).items():
        for col, top, bottom, _ in es:
            if top != bottom:
                partial[(col, b)] = _f32(np.sin(1.0 + 7 * col + 0.37 * b) * 10 ** (b % 5))
                arrivals.append((order_key(b, col), b, col, top, bottom))
    split = {col: (top, bottom) for _, _, col, top, bottom in arrivals}
    return partial, [a[1:] for a in sorted(arrivals)], split


def assert_same_bits_and_zero(sums, want, split, *workspaces):
    """Every split column summed once, each with the bits of ``want(col, top, bottom)``, and
    every counter and slot of the workspace back at 0."""
    assert set(sums) == set(split)
    for col, (top, bottom) in split.items():
        assert sums[col].tobytes() == want(col, top, bottom).tobytes(), col
    for ws in workspaces:
        assert all(v == 0 for v in ws.values())


def _last_arriver_sum(partial):
    def shipped(col, top, bottom):   # the last arriver's order: from +0, bottom .. top
        acc = _f32(0.0)
        for cta in range(bottom, top - 1, -1):
            acc = _f32(acc + partial[(col, cta)])
        return acc
    return shipped


def run_early_protocol(k_tiles, columns, grid, order_key, target_offset=1):
    """Every split column's CTAs in a scrambled order: an early bottom writes its slot, the
    others count in, the last of them (old value == bottom - top - target_offset when the
    column has an early bottom) sums once the slot is written. Returns (sums, counters, slots,
    partial, split): the summed value per column, what is left in the workspace, and the
    inputs."""
    partial, arrivals, split = split_arrivals(k_tiles, columns, grid, order_key)
    counters, slots, sums, pending = {}, {}, {}, []
    for b, col, top, bottom in arrivals:
        early = early_bottom(k_tiles, columns, grid, col)
        if early and b == bottom:
            slots[col] = _word(partial[(col, b)])
        else:
            old = counters.get(top, 0)
            counters[top] = old + 1
            if old == bottom - top - (target_offset if early else 0):
                pending.append((col, top, bottom, early))
        # The summer reads the slot until it is written: here, whenever it is.
        for p in list(pending):
            col_, top_, bottom_, early_ = p
            if early_ and slots.get(col_, 0) == 0:
                continue
            acc = _f32(0.0)
            for cta in range(bottom_, top_ - 1, -1):
                v = _unword(slots[col_]) if early_ and cta == bottom_ else partial[(col_, cta)]
                acc = _f32(acc + v)
            assert col_ not in sums, "a column summed twice"
            sums[col_] = acc
            if early_:
                slots[col_] = 0
            counters[top_] = 0
            pending.remove(p)
    return sums, counters, slots, partial, split


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 60), st.integers(2, 140), st.integers(0, 10 ** 6))
def test_early_bottom_protocol_same_bits_and_zero_workspace(k_tiles, columns, grid, seed):
    sums, counters, slots, partial, split = run_early_protocol(
        k_tiles, columns, grid, lambda b, col: ((b * 7919 + col * 104729 + seed) % 1009, b))
    assert_same_bits_and_zero(sums, _last_arriver_sum(partial), split, counters, slots)


def test_early_bottom_protocol_needs_the_smaller_count():
    """With the count-in's target left at bottom - top while the early bottom does not count
    in, no CTA ever sums a column that has an early bottom: the model catches it."""
    k_tiles, columns, grid = 4, 3, 4   # CTAs 1 and 2 hold the bottoms of columns 0 and 1
    assert early_bottom(k_tiles, columns, grid, 0)
    sums, *_ = run_early_protocol(k_tiles, columns, grid, lambda b, col: (b, col),
                                  target_offset=0)
    assert 0 not in sums and 1 not in sums


# ---- TOP_SUM (config suffix _ts, NOTES.md entry 73): every CTA of a split column but its top
# writes its partial as never-zero words into a slot of its own (indexed by the CTA, zero
# between calls) and goes on, with no counter at all; the top, which meets the column at its
# stripe's end, waits until every other sharer's slot is written, adds them bottom .. top + 1
# from +0, then its own partial, and writes the slots back to 0.

def run_top_sum_protocol(k_tiles, columns, grid, order_key, own_first=False, early_only=False):
    """The CTAs' arrivals at split columns in a scrambled order; the top sums as soon as every
    slot it reads is written. ``own_first`` (a mutation): the top starts from its own partial.
    ``early_only`` (MARLIN_TOP_SUM_EARLY_ONLY 1): only the columns with an early bottom take
    the top's sum, the others the last arriver's (every sharer counts in, the last sums them
    bottom .. top), both kinds in one launch. Returns (sums, slots, counters, partial, split)."""
    partial, arrivals, split = split_arrivals(k_tiles, columns, grid, order_key)
    ends = column_ends(k_tiles, columns, grid)
    slots, counters, sums, pending = {}, {}, {}, []
    for b, col, top, bottom in arrivals:
        if early_only and not early_bottom(k_tiles, columns, grid, col):
            old = counters.get(top, 0)
            counters[top] = old + 1
            if old == bottom - top:   # the last arriver
                assert col not in sums, "a column summed twice"
                sums[col] = _last_arriver_sum(partial)(col, top, bottom)
                counters[top] = 0
        elif b != top:
            # A CTA is a non-top sharer of one column at most (the one its stripe starts in):
            # its slot is empty when it writes.
            assert slots.get(b, 0) == 0, f"CTA {b} writes its slot twice"
            slots[b] = _word(partial[(col, b)])
        else:
            # The top meets its column at the end of its stripe, so its wait blocks nothing
            # that another CTA waits for.
            assert (col, top, bottom, True) in ends[b]
            pending.append((col, top, bottom))
        for p in list(pending):
            col_, top_, bottom_ = p
            if any(slots.get(cta, 0) == 0 for cta in range(bottom_, top_, -1)):
                continue   # the top's pass found a word still 0: it reads again
            acc = partial[(col_, top_)] if own_first else _f32(0.0)
            for cta in range(bottom_, top_, -1):
                acc = _f32(acc + _unword(slots[cta]))
            if not own_first:
                acc = _f32(acc + partial[(col_, top_)])
            assert col_ not in sums, "a column summed twice"
            sums[col_] = acc
            for cta in range(bottom_, top_, -1):
                slots[cta] = 0
            pending.remove(p)
    assert not pending, "a top never summed"
    return sums, slots, counters, partial, split


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 60), st.integers(2, 140), st.integers(0, 10 ** 6))
def test_top_sum_protocol_same_bits_and_zero_workspace(k_tiles, columns, grid, seed):
    sums, slots, counters, partial, split = run_top_sum_protocol(
        k_tiles, columns, grid, lambda b, col: ((b * 7919 + col * 104729 + seed) % 1009, b))
    assert not counters   # no column counts in
    assert_same_bits_and_zero(sums, _last_arriver_sum(partial), split, slots)


def test_top_sum_protocol_needs_the_top_last():
    """A top that starts from its own partial adds in another order: the model sees other bits
    on a column shared by three CTAs whose partials differ by decades."""
    k_tiles, columns, grid = 7, 2, 5   # column 1: CTAs 2 (top), 3 and 4
    sums, _, _, partial, split = run_top_sum_protocol(k_tiles, columns, grid,
                                                      lambda b, col: (b, col), own_first=True)
    assert split[1] == (2, 4)
    want = _last_arriver_sum(partial)(1, 2, 4)
    assert sums[1].tobytes() != want.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 60), st.integers(2, 140), st.integers(0, 10 ** 6))
def test_top_sum_early_only_same_bits_and_zero_workspace(k_tiles, columns, grid, seed):
    sums, slots, counters, partial, split = run_top_sum_protocol(
        k_tiles, columns, grid, lambda b, col: ((b * 6151 + col * 3571 + seed) % 997, b),
        early_only=True)
    assert_same_bits_and_zero(sums, _last_arriver_sum(partial), split, slots, counters)


def test_early_word_is_never_zero_and_round_trips():
    import numpy as np
    for x in (0.0, -0.0, 1.5, -3.25e-30, np.inf, -np.inf, 3.4e38):
        w = _word(_f32(x))
        assert w != 0 and _unword(w).tobytes() == _f32(x).tobytes()
    # Every NaN, the all-ones one included, becomes the canonical 0x7fffffff: never 0.
    for bits in (0xFFFFFFFF, 0x7FC00000, 0xFFC00001):
        nan = np.uint32(bits).view(np.float32)
        assert _word(nan) == 0x80000000


def run_early_serial_chain(k_tiles, columns, grid, order_key):
    """The serial chain with MARLIN_PAR_EARLY_BOTTOM: a split column's CTAs add one after
    another from its bottom (idx 0) up to its top, each taking its turn when the column's lock
    holds it and handing on by writing the next turn (the last writes 0). With an early
    bottom (its stripe goes on past the column), the bottom writes its slot and leaves; CTA
    idx 1 takes turn 0, adds the bottom's words to its own partial and clears the slot, and
    every later CTA's turn is idx - 1. CTAs arrive in a scrambled order and wait for their
    turn. Returns (sums, locks, slots, partial, split)."""
    partial, arrivals, split = split_arrivals(k_tiles, columns, grid, order_key)
    locks, slots, carried, sums = {}, {}, {}, {}
    arrived = []
    for b, col, top, bottom in arrivals:
        arrived.append((b, col, top, bottom))
        progress = True
        while progress:   # every arrived CTA whose turn has come goes
            progress = False
            for entry in list(arrived):
                b_, col_, top_, bottom_ = entry
                idx = bottom_ - b_
                early = early_bottom(k_tiles, columns, grid, col_)
                if early and idx == 0:
                    slots[col_] = _word(partial[(col_, b_)])
                    arrived.remove(entry)
                    progress = True
                    continue
                turn = idx - (1 if early else 0)
                if locks.get(top_, 0) != turn:
                    continue
                acc = partial[(col_, b_)]
                if early and idx == 1:
                    if slots.get(col_, 0) == 0:
                        continue   # its spin: the bottom has not written yet
                    acc = _f32(acc + _unword(slots[col_]))
                    slots[col_] = 0
                elif idx > 0:
                    acc = _f32(acc + carried[col_])
                if idx == bottom_ - top_:
                    sums[col_] = acc
                    locks[top_] = 0
                else:
                    carried[col_] = acc
                    locks[top_] = turn + 1
                arrived.remove(entry)
                progress = True
    assert not arrived, "a CTA never got its turn"
    return sums, locks, slots, partial, split


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 60), st.integers(2, 140), st.integers(0, 10 ** 6))
def test_early_bottom_serial_chain_same_bits_and_zero_workspace(k_tiles, columns, grid, seed):
    sums, locks, slots, partial, split = run_early_serial_chain(
        k_tiles, columns, grid, lambda b, col: ((b * 6151 + col * 3571 + seed) % 997, b))

    def shipped(col, top, bottom):   # the chain: the bottom's partial, then each CTA up adds
        acc = partial[(col, bottom)]
        for cta in range(bottom - 1, top - 1, -1):
            acc = _f32(partial[(col, cta)] + acc)
        return acc
    assert_same_bits_and_zero(sums, shipped, split, locks, slots)


# ---- FP16 partial sums (fp32_reduce=False): ops caps the grid so that no column is shared by
# more than FP16_REDUCE_MAX_SHARERS CTAs (each hand-over rounds the running sum to FP16;
# benchmarks/NOTES.md entry 70).

@settings(max_examples=600, deadline=None)
@given(st.integers(1, 160), st.integers(1, 300), st.integers(1, 264), st.integers(2, 8))
def test_fp16_reduce_grid_keeps_the_sharers_and_is_the_largest(k_tiles, columns, cap, sharers):
    from marlin_cupy.ops import fp16_reduce_grid

    def most_sharers(grid):
        iters = -(-k_tiles * columns // grid)
        return max((c * k_tiles + k_tiles - 1) // iters - (c * k_tiles) // iters + 1
                   for c in range(columns))
    units = k_tiles * columns
    cap = min(cap, units)
    grid = fp16_reduce_grid(units, k_tiles, cap, sharers)
    assert 1 <= grid <= cap
    assert most_sharers(grid) <= sharers or grid == 1
    # and the partition model agrees with the count above
    for ends in column_ends(k_tiles, columns, grid).values():
        for col, top, bottom, _ in ends:
            assert bottom - top + 1 <= sharers or grid == 1
    # the largest grid whose stripes are long enough for the bound above
    if k_tiles > sharers:
        need = -(-(k_tiles - 1) // (sharers - 1))
        assert -(-units // grid) >= need or grid == 1
        if grid < cap:
            assert -(-units // (grid + 1)) < need
    else:
        assert grid == cap


def test_fp16_reduce_grid_on_the_case_that_broke_the_bound():
    """sanitize_case at 92ed3c7: t128_m2_n8_k4_s6_gc_fp16, M=17 K=1024 N=768 had 16 CTAs on
    every column (96 units, 96 CTAs) and 2.42x cuBLAS's error; now a grid of 23 (stripes of 5
    units: 20 CTAs with work), at most 4 on one column."""
    from marlin_cupy.ops import fp16_reduce_grid
    assert fp16_reduce_grid(96, 16, 96) == 23
    assert fp16_reduce_grid(96 * 50, 16, 132) == 132      # long stripes already: no change
