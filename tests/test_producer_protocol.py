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


class Ring:
    """The ring's slots and the producer's side: it fills units in order (waiting on `empty`
    from its second round), its copies landing in issue order and arriving on `full`."""

    def __init__(self, units: int, stages: int):
        self.units, self.stages = units, stages
        self.full = [Barrier(1) for _ in range(stages)]
        self.empty = [Barrier(1) for _ in range(stages)]
        self.slot_holds = [None] * stages   # unit whose bytes the slot holds (landed)
        self.in_flight = []                 # issued copies not yet landed: (slot, unit)
        self.reading = set()                # slots the compute side may still read
        self.produced = 0

    def producer_actors(self) -> list:
        actors = []
        if self.produced < self.units:
            slot, rnd = self.produced % self.stages, self.produced // self.stages
            if rnd == 0 or self.empty[slot].passes((rnd - 1) & 1):
                actors.append("issue")
        if self.in_flight:
            actors.append("land")
        return actors

    def produce(self, actor: str) -> None:
        if actor == "issue":
            slot = self.produced % self.stages
            assert slot not in self.reading, \
                f"unit {self.produced} overwrites a slot still being read"
            self.in_flight.append((slot, self.produced))
            self.produced += 1
        else:
            slot, unit = self.in_flight.pop(0)
            self.slot_holds[slot] = unit
            self.full[slot].arrive()

    def pick(self, waiting_for, full_parity: int, choices, consumed: int) -> str:
        """The next actor among the enabled ones: the producer's (done here), the compute side's
        wait for unit ``waiting_for`` once its fill's phase has completed, or (``waiting_for``
        None) its next step."""
        actors = self.producer_actors()
        if waiting_for is None:
            actors.append("step")
        elif self.full[waiting_for % self.stages].passes(full_parity):
            actors.append("wait")
        assert actors, f"deadlock: produced {self.produced}, consumed {consumed}"
        actor = actors[choices(len(actors))]
        if actor in ("issue", "land"):
            self.produce(actor)
        return actor

    def awaited(self, unit: int, full_parity: int, flip: bool = True) -> int:
        """The compute side's wait for ``unit`` passed: its slot must hold it. Returns the
        parity of the next wait (``bulk_wait``'s walk; ``flip=False`` breaks it)."""
        slot = unit % self.stages
        assert self.slot_holds[slot] == unit, \
            f"unit {unit} read slot {slot} holding {self.slot_holds[slot]}"
        self.reading.add(slot)
        return full_parity ^ 1 if slot == self.stages - 1 and flip else full_parity

    def release(self, unit: int) -> None:
        self.reading.discard(unit % self.stages)
        self.empty[unit % self.stages].arrive()

    def done(self) -> None:
        assert self.produced == self.units and not self.in_flight


def run_ring(units: int, stages: int, release_step: int, steps: int, choices,
             flip: bool = True) -> None:
    """One launch's ring (``Ring``'s producer); the compute side waits on `full` with the parity
    walk of ``bulk_wait`` and releases unit u - 1's slot at step ``release_step`` of unit u.
    ``choices`` picks which enabled actor moves next. ``flip=False`` breaks the parity walk
    (for the negative test)."""
    ring = Ring(units, stages)
    consumed, step = 0, 0
    full_parity, waiting_full = 0, True
    while consumed < units:
        actor = ring.pick(consumed if waiting_full else None, full_parity, choices, consumed)
        if actor == "wait":
            full_parity = ring.awaited(consumed, full_parity, flip)
            waiting_full, step = False, 0
        elif actor == "step":
            if step == release_step and consumed > 0:
                ring.release(consumed - 1)
            step += 1
            if step == steps:
                consumed += 1
                waiting_full = True
    ring.done()


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
    have no barrier operation. The producer is ``Ring``'s. ``late=True`` releases them a unit
    later, at units 3, 5, .. (for the negative test)."""
    ring = Ring(units, stages)
    consumed, step = 0, 0
    full_parity, pending = 0, [0]          # start_stream awaits unit 0
    while consumed < units:
        actor = ring.pick(pending[0] if pending else None, full_parity, choices, consumed)
        if actor == "wait":
            full_parity = ring.awaited(pending.pop(0), full_parity)
        elif actor == "step":
            assert ring.slot_holds[consumed % stages] == consumed and \
                consumed % stages in ring.reading, f"unit {consumed} computed before its wait"
            first = consumed - (1 if late else 0)
            if step == release_step and first >= 2 and first % 2 == 0:
                ring.release(first - 2)
                ring.release(first - 1)
            step += 1
            if step == steps:
                if consumed % 2 == 0:
                    pending += [q for q in (consumed + 1, consumed + 2) if q < units]
                consumed += 1
                step = 0
    ring.done()


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


def run_ring_flags(units: int, stages: int, steps: int, warps: int, choices,
                   lag: int | None = None, apart: bool = False,
                   unlanded: bool = False) -> None:
    """``MARLIN_WS_FLAGS`` (NOTES.md entry 98), with no mbarrier on the compute side. The
    producer's copies of a fill are two parts: thread 0's (the publisher's) and the other
    threads', each issued in unit order once the slot's counter shows ``warps`` releases per
    earlier round; a fill lands when both parts have. Before issuing its part of fill i >= lag
    (``STAGES - 1`` in the kernel), thread 0 waits until fill i - lag has landed and publishes
    the count i - lag + 1; after its last fill it publishes the rest. Each of ``warps`` compute
    warps moves on its own: it waits until the count shows the unit it needs (unit 0 first,
    then unit u + 1 at the end of unit u), and adds one to the counter of unit u - 1's slot at
    step 1 of unit u. ``lag=stages`` publishes a fill later (for the negative test).
    ``apart=True`` is ``MARLIN_WS_FLAGS 3``: the publisher issues no copies (another thread
    issues its part, gated only by the counter) and publishes each fill once it has landed.
    ``unlanded=True`` publishes without waiting for the fill (for the negative test)."""
    lag = stages - 1 if lag is None else lag
    holds = [None] * stages            # unit whose bytes the slot holds, once both parts landed
    parts = [[0] * stages for _ in range(2)]   # per part: the round (fill index) landed per slot
    issued = [0, 0]                    # fills issued by part 0 (thread 0) and part 1 (the rest)
    landed_parts = [0, 0]              # fills landed per part (copies land in issue order)
    counter = [0] * stages
    published = 0
    pos = [[0, 0, True] for _ in range(warps)]   # per warp: unit, step, waiting
    reading = [set() for _ in range(warps)]

    def landed(i):                     # fill i complete: both parts landed
        return landed_parts[0] > i and landed_parts[1] > i

    def may_issue(p):
        i = issued[p]
        if i >= units:
            return False
        if p == 0 and not apart and i >= lag and published < i - lag + 1:
            return False               # thread 0 publishes first
        rnd = i // stages
        return counter[i % stages] >= rnd * warps

    while any(w[0] < units for w in pos):
        actors = []
        for p in (0, 1):
            if may_issue(p):
                actors.append(("issue", p))
            if landed_parts[p] < issued[p]:
                actors.append(("land", p))
        # thread 0's publication: before its part of fill i >= lag, or after its last fill
        target = issued[0] - lag + 1 if issued[0] < units and not apart else units
        if published < target and (unlanded or landed(published)):
            actors.append(("publish", None))
        for w, (unit, step, waiting) in enumerate(pos):
            if unit >= units:
                continue
            if not waiting or published > unit:
                actors.append(("warp", w))
        assert actors, f"deadlock: issued {issued}, published {published}, warps {pos}"
        kind, who = actors[choices(len(actors))]
        if kind == "issue":
            i = issued[who]
            slot = i % stages
            assert all(slot not in r for r in reading), \
                f"fill {i} overwrites slot {slot} while a warp reads it"
            issued[who] += 1
        elif kind == "land":
            i = landed_parts[who]
            landed_parts[who] += 1
            if landed(i):
                holds[i % stages] = i
        elif kind == "publish":
            published += 1
        else:
            unit, step, waiting = pos[who]
            if waiting:
                assert holds[unit % stages] == unit, \
                    f"warp {who} read unit {unit} from a slot holding {holds[unit % stages]}"
                reading[who].add(unit % stages)
                pos[who] = [unit, 0, False]
                continue
            if step == 1 and unit > 0:
                reading[who].discard((unit - 1) % stages)
                counter[(unit - 1) % stages] += 1
            step += 1
            if step == steps:
                pos[who] = [unit + 1, 0, True]
            else:
                pos[who] = [unit, step, False]
    assert published == units


@settings(max_examples=300, deadline=None)
@given(units=st.integers(1, 40), stages=st.integers(3, 8), seed=st.integers(0, 2**31 - 1),
       steps=st.sampled_from([2, 4, 8]), warps=st.integers(1, 3), apart=st.booleans())
def test_flag_handoff_never_reads_stale_nor_overwrites_live_slots(units, stages, seed, steps,
                                                                  warps, apart):
    import random
    rng = random.Random(seed)
    run_ring_flags(units, stages, steps, warps, lambda n: rng.randrange(n), apart=apart)


def test_flag_handoff_publishes_in_time():
    """The model is not vacuous: a publisher one fill later than the kernel's (it would publish
    fill i - STAGES before issuing fill i) deadlocks: the compute warps need unit i - STAGES + 1
    to release the slot that fill i waits for."""
    import random
    import pytest
    rng = random.Random(0)
    with pytest.raises(AssertionError, match="deadlock"):
        run_ring_flags(12, 3, 4, 2, lambda n: rng.randrange(n), lag=3)


def test_flag_handoff_publishing_unlanded_fills_would_be_caught():
    """The model is not vacuous: a publisher that does not wait on `full` lets a warp read a
    slot before its fill has landed."""
    import random
    import pytest
    rng = random.Random(0)
    with pytest.raises(AssertionError, match="read unit"):
        for _ in range(50):
            run_ring_flags(12, 3, 4, 2, lambda n: rng.randrange(n), apart=True, unlanded=True)
