"""A model of MARLIN_WG_DEFER's bookkeeping in run_wgmma (cuda/marlin.cuh, NOTES.md entry 60),
checked on the CPU: no GPU needed.

With the group scale on FP32 sums, a scale group's steps accumulate into a second accumulator
set `part`; the group is folded into the column's accumulators (with its scales) either at the
next group's first step, or at the column's end. The kernel keeps no flag for "a group is
pending": at a group's first step it folds when ``sub > 0 or (unit > unit_start and kt != 0)``,
and it always folds at a column's end. This model walks every CTA's stripe as the kernel does
(units in column-major order, a column's end where kt reaches k_tiles - 1 or the stripe ends)
and checks that the positional rule folds exactly when an explicit flag says a group is
pending, and that every group lands, once, in its own column with its own scales.
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st


def fold_condition(sub: int, unit: int, unit_start: int, kt: int) -> bool:
    """The kernel's test at a group's first step (run_wgmma, `issue`)."""
    return sub > 0 or (unit > unit_start and kt != 0)


def walk_stripe(unit_start, unit_end, k_tiles, k_sub, subs_per_group, rule=fold_condition):
    """Folds of one CTA's stripe: a list of (column, group index within the column) in the
    order they reach acc, one list per column end. Raises AssertionError where the rule and an
    explicit pending flag disagree."""
    columns = []            # per column end: the groups folded into that column's sums
    folded = []             # groups of the current column folded so far
    pending = None          # the group in `part` not yet folded (explicit bookkeeping)
    for unit in range(unit_start, unit_end):
        col, kt = divmod(unit, k_tiles)
        column_end = kt == k_tiles - 1 or unit == unit_end - 1
        for sub in range(k_sub):
            if sub % subs_per_group == 0:          # a group's first step
                fold = rule(sub, unit, unit_start, kt)
                assert fold == (pending is not None), (
                    f"unit {unit} (kt {kt}) step {sub}: the rule says fold={fold}, "
                    f"pending={pending}")
                if fold:
                    assert pending[0] == col, "a group folded into another column's sums"
                    folded.append(pending)
                pending = (col, (kt * k_sub + sub) // subs_per_group)
        if column_end:
            assert pending is not None and pending[0] == col
            folded.append(pending)
            pending = None
            columns.append((col, folded))
            folded = []
    assert pending is None
    return columns


def stripes(units, grid):
    """The kernel's static partition: iters = ceil(units / grid), CTA b takes
    [b * iters, min((b + 1) * iters, units))."""
    iters = -(-units // grid)
    return [(b * iters, min((b + 1) * iters, units)) for b in range(grid) if b * iters < units]


@settings(max_examples=300, deadline=None)
@given(k_tiles=st.integers(1, 12), columns=st.integers(1, 6), grid=st.integers(1, 40),
       k_sub=st.sampled_from([4, 8, 16]), groups_per_unit=st.sampled_from([1, 2]))
def test_positional_rule_folds_every_group_once_into_its_column(k_tiles, columns, grid, k_sub,
                                                                groups_per_unit):
    spg = k_sub // groups_per_unit
    units = k_tiles * columns
    seen = {}
    for start, end in stripes(units, grid):
        for col, groups in walk_stripe(start, end, k_tiles, k_sub, spg):
            seen.setdefault(col, []).extend(groups)
    groups_per_column = k_tiles * groups_per_unit
    for col in range(columns):
        got = sorted(g for c, g in seen[col])
        assert all(c == col for c, _ in seen[col])
        # every group of the column exactly once, across the CTAs that share it
        assert got == list(range(groups_per_column))


def test_the_model_restates_the_kernels_conditions():
    """fold_condition and walk_stripe's column end are run_wgmma's, as written in
    cuda/marlin.cuh: a change of the kernel's must be made in the model too (or these tests
    check an old rule)."""
    src = (Path(__file__).resolve().parent.parent / "cuda" / "marlin.cuh").read_text()
    src = " ".join(src.split())
    assert "(sub > 0 || (unit > unit_start && compute.kt != 0))" in src
    assert "const bool column_end = compute.kt == k_tiles - 1 || unit == unit_end - 1;" in src


def test_model_catches_a_rule_without_the_column_start():
    """Folding at every unit's first step after the stripe's first (no kt != 0) would fold the
    previous column's last group a second time, into the next column: the model sees it."""
    wrong = lambda sub, unit, unit_start, kt: sub > 0 or unit > unit_start  # noqa: E731
    try:
        walk_stripe(0, 6, 3, 8, 8, rule=wrong)
    except AssertionError:
        return
    raise AssertionError("the model accepted a rule that folds a group twice")


def test_model_catches_a_rule_that_skips_mid_column_starts():
    """Not folding at a stripe's units after the first would drop groups."""
    wrong = lambda sub, unit, unit_start, kt: sub > 0  # noqa: E731
    try:
        walk_stripe(0, 6, 3, 8, 8, rule=wrong)
    except AssertionError:
        return
    raise AssertionError("the model accepted a rule that loses groups")
