"""Argument types shared by the command-line tools (demo, bench, tune, scripts)."""
from __future__ import annotations

import argparse


def at_least(low: int):
    """An argparse type: an integer >= ``low``, or a usage error that says so."""
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}; got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}; got {value}")
        return value
    return convert


positive_int = at_least(1)
