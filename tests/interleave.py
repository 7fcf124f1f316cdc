"""Runs modelled CTAs step by step in an order the caller picks (the protocol test
tests/test_dynamic_protocol.py)."""


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
