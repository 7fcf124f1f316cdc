"""The producer warpgroup's ring protocol (cuda/marlin.cuh, run_producer and the compute loops),
modelled on the CPU: two mbarriers per slot, waits by parity, every interleaving that the
hardware could produce drawn at random. No GPU needed.

mbarrier model (PTX ISA, mbarrier): a barrier counts pending arrivals of its current phase;
the last one completes the phase and starts the next. ``try_wait.parity p`` passes once the
phase of parity p has completed, which is all it can see: a waiter whose parity is stale by two
phases would pass at once. The protocol must therefore never let a waiter fall two phases
behind, and the model checks the data it then reads rather than trusting the waits.
"""
from hypothesis import given, settings, strategies as st


class Barrier:
    def __init__(self, count: int):
        self.count, self.pending, self.phase = count, count, 0

    def arrive(self):
        self.pending -= 1
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def passes(self, parity: int) -> bool:
        """``try_wait.parity``: the phase of this parity has completed."""
        return (self.phase & 1) != parity


def run_ring(units: int, stages: int, release_step: int, steps: int, choices,
             flip: bool = True) -> None:
    """One launch's ring: the producer fills units in order (waiting on `empty` from its second
    round, its copies landing in issue order and arriving on `full`), the compute side waits on
    `full` with the parity walk of ``bulk_wait`` and releases unit u - 1's slot at step
    ``release_step`` of unit u. ``choices`` picks which enabled actor moves next. ``flip=False``
    breaks the parity walk (for the negative test)."""
    full = [Barrier(1) for _ in range(stages)]
    empty = [Barrier(1) for _ in range(stages)]
    slot_holds = [None] * stages      # unit whose bytes the slot holds (landed)
    in_flight = []                    # issued copies not yet landed: (slot, unit)
    reading = set()                   # slots the compute side may still read
    produced, consumed, step = 0, 0, 0
    full_parity, waiting_full = 0, True
    while consumed < units:
        actors = []
        if produced < units:
            slot, rnd = produced % stages, produced // stages
            if rnd == 0 or empty[slot].passes((rnd - 1) & 1):
                actors.append("issue")
        if in_flight:
            actors.append("land")
        if waiting_full:
            if full[consumed % stages].passes(full_parity):
                actors.append("wait")
        else:
            actors.append("step")
        assert actors, f"deadlock: produced {produced}, consumed {consumed}"
        actor = actors[choices(len(actors))]
        if actor == "issue":
            slot = produced % stages
            assert slot not in reading, f"unit {produced} overwrites a slot still being read"
            in_flight.append((slot, produced))
            produced += 1
        elif actor == "land":
            slot, unit = in_flight.pop(0)
            slot_holds[slot] = unit
            full[slot].arrive()
        elif actor == "wait":
            slot = consumed % stages
            assert slot_holds[slot] == consumed, \
                f"unit {consumed} read slot {slot} holding {slot_holds[slot]}"
            if slot == stages - 1 and flip:
                full_parity ^= 1
            reading.add(slot)
            waiting_full, step = False, 0
        else:
            if step == release_step and consumed > 0:
                prev = (consumed - 1) % stages
                reading.discard(prev)
                empty[prev].arrive()
            step += 1
            if step == steps:
                consumed += 1
                waiting_full = True
    assert produced == units and not in_flight


@settings(max_examples=300, deadline=None)
@given(units=st.integers(1, 40), stages=st.integers(3, 8), seed=st.integers(0, 2**31 - 1),
       steps=st.sampled_from([2, 4, 8]), early=st.booleans())
def test_ring_protocol_never_reads_stale_nor_overwrites_live_slots(units, stages, seed, steps,
                                                                  early):
    import random
    rng = random.Random(seed)
    # The wgmma loop releases after step 1 (MARLIN_WS_RELEASE 1) or in the last step (0); the
    # mma.sync loop at step 0.
    release_step = rng.choice([0, 1 if early else steps - 1])
    run_ring(units, stages, release_step, steps, lambda n: rng.randrange(n))


def test_a_stale_parity_would_be_caught():
    """The model is not vacuous: a compute side that never flips its parity passes its wait on
    an old phase and reads a slot before its refill has landed (or waits forever)."""
    import random
    import pytest
    rng = random.Random(1)
    with pytest.raises(AssertionError):
        for _ in range(50):
            run_ring(12, 3, 1, 4, lambda n: rng.randrange(n), flip=False)


def run_ring_pairs(units: int, stages: int, release_step: int, steps: int, choices,
                   late: bool = False) -> None:
    """``MARLIN_WS_PAIRS`` (NOTES.md entry 97): the compute side waits at the end of units 0, 2,
    4, .. of the stripe for the next two units' fills (in order, with the same parity walk) and
    releases the two units before at step ``release_step`` of units 2, 4, ..; the units between
    have no barrier operation. The producer is that of ``run_ring``. ``late=True`` releases
    them a unit later, at units 3, 5, .. (for the negative test)."""
    full = [Barrier(1) for _ in range(stages)]
    empty = [Barrier(1) for _ in range(stages)]
    slot_holds = [None] * stages
    in_flight, reading = [], set()
    produced, consumed, step = 0, 0, 0
    full_parity, pending = 0, [0]          # start_stream awaits unit 0
    while consumed < units:
        actors = []
        if produced < units:
            slot, rnd = produced % stages, produced // stages
            if rnd == 0 or empty[slot].passes((rnd - 1) & 1):
                actors.append("issue")
        if in_flight:
            actors.append("land")
        if pending:
            if full[pending[0] % stages].passes(full_parity):
                actors.append("wait")
        else:
            actors.append("step")
        assert actors, f"deadlock: produced {produced}, consumed {consumed}"
        actor = actors[choices(len(actors))]
        if actor == "issue":
            slot = produced % stages
            assert slot not in reading, f"unit {produced} overwrites a slot still being read"
            in_flight.append((slot, produced))
            produced += 1
        elif actor == "land":
            slot, unit = in_flight.pop(0)
            slot_holds[slot] = unit
            full[slot].arrive()
        elif actor == "wait":
            unit = pending.pop(0)
            slot = unit % stages
            assert slot_holds[slot] == unit, f"unit {unit} read slot {slot} holding {slot_holds[slot]}"
            if slot == stages - 1:
                full_parity ^= 1
            reading.add(slot)
        else:
            assert slot_holds[consumed % stages] == consumed and consumed % stages in reading, \
                f"unit {consumed} computed before its fill was awaited"
            first = consumed - (1 if late else 0)
            if step == release_step and first >= 2 and first % 2 == 0:
                for q in (first - 2, first - 1):
                    reading.discard(q % stages)
                    empty[q % stages].arrive()
            step += 1
            if step == steps:
                if consumed % 2 == 0:
                    pending += [q for q in (consumed + 1, consumed + 2) if q < units]
                consumed += 1
                step = 0
    assert produced == units and not in_flight


@settings(max_examples=300, deadline=None)
@given(units=st.integers(1, 40), stages=st.integers(3, 8), seed=st.integers(0, 2**31 - 1),
       steps=st.sampled_from([2, 4, 8]), release_step=st.sampled_from([0, 1]))
def test_paired_handoff_never_reads_stale_nor_overwrites_live_slots(units, stages, seed, steps,
                                                                    release_step):
    import random
    rng = random.Random(seed)
    run_ring_pairs(units, stages, release_step, steps, lambda n: rng.randrange(n))


def test_paired_handoff_releases_before_it_waits():
    """The model is not vacuous: with the two releases a unit later than the kernel makes them,
    three stages deadlock (the wait for unit p + 2 at the end of unit p needs unit p - 1's slot,
    released only at unit p + 1)."""
    import random
    import pytest
    rng = random.Random(0)
    with pytest.raises(AssertionError, match="deadlock"):
        run_ring_pairs(12, 3, 1, 4, lambda n: rng.randrange(n), late=True)
