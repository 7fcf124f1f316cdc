"""README.md's counts of the shipped H200 table are the table's own (no GPU needed).

The README says which kinds of config the tuned table runs on how many layers; a re-tune that
changes them must change the README too (session 47 found seven of these counts two re-tunes
stale)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from marlin_cupy.bench.shapes import SHAPE_SETS
from marlin_cupy.config import KernelConfig

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TABLE = ROOT / "marlin_cupy" / "tuned" / "NVIDIA_H200.json"
LLAMA2 = {shape for shapes in SHAPE_SETS.values() for shape in shapes}   # the 12 llama2 layers


@pytest.fixture(scope="module")
def counts():
    entries = json.loads(TABLE.read_text())["entries"]
    rows = [(e, KernelConfig.from_name(e["config"])) for e in entries]
    llama = [(e, c) for e, c in rows if (e["k"], e["n"]) in LLAMA2]
    other = [(e, c) for e, c in rows if (e["k"], e["n"]) not in LLAMA2]
    eb = lambda c: c.early_bottom and not c.top_sum   # noqa: E731  (_ts includes the early bottom)
    return {
        "total": len(rows), "llama": len(llama), "other": len(other),
        "wgmma16": sum(c.wgmma for e, c in llama if e["m_bucket"] == 16),
        "producer": sum(c.producer for _, c in llama),
        "wgmma": sum(c.wgmma for _, c in llama),
        "par": sum(c.parallel_reduce for _, c in llama),
        "par_all": sum(c.parallel_reduce for _, c in rows),
        "eb": sum(eb(c) for _, c in llama), "eb_other": sum(eb(c) for _, c in other),
        "ts": sum(c.top_sum for _, c in llama), "ts_other": sum(c.top_sum for _, c in other),
    }


def text():
    return re.sub(r"\s+", " ", README.read_text())


def test_the_table_is_what_the_readme_describes(counts):
    assert counts["llama"] == 156 and counts["total"] == 455 and counts["other"] == 299


def test_wgmma_and_producer_counts(counts):
    t = text()
    assert f"Of the 12 llama2 layers, that is {counts['wgmma16']} at M = 16" in t
    assert f"with 16-row swapped tiles, on {counts['wgmma16']} of the 12 layers" in t
    assert f"A producer warpgroup runs in {counts['producer']} of the table's {counts['llama']} llama2 entries" in t
    spare = counts["wgmma"] - counts["producer"]
    assert f"every wgmma entry but {'one' if spare == 1 else spare}" in t


def test_reduction_counts(counts):
    t = text()
    assert (f"uses it in {counts['par']} of its {counts['llama']} llama2 entries "
            f"({counts['par_all']} of all {counts['total']})") in t
    assert f"On {counts['par']} of the table's {counts['llama']} llama2 entries" in t


def test_early_bottom_and_top_sum_counts(counts):
    t = text()
    llama_eb = "none" if counts["eb"] == 0 else str(counts["eb"])
    assert f"uses it in {llama_eb} of its {counts['llama']} llama2 entries" in t
    assert f"in {counts['eb_other']} of the other models' {counts['other']} (M <= 16)" in t
    assert (f"uses it in {counts['ts']} of its {counts['llama']} llama2 entries (M <= 16) and "
            f"{counts['ts_other']} of the other models' {counts['other']}") in t
