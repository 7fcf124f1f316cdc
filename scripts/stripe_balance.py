"""How much of each launch the whole-unit stripes leave idle (no GPU needed).

    python3 scripts/stripe_balance.py [TABLE.json] [--sms 132]

A launch cuts its work into ``units`` (one k-tile of one column tile of one slab) and gives
each CTA of the persistent grid a contiguous stripe of ``iters = ceil(units / grid)`` of them
(cuda/marlin.cuh; the grid as ``ops._plan`` sizes it: ``min(units, sms x blocks_per_sm)``).
Every stripe but the last is ``iters`` long, so the launch's stream takes as long as
``iters`` units, while the work is ``units / (sms x blocks_per_sm)`` units per CTA slot. The
ratio of the two is the stripe *efficiency*. The shapes of llama2 are powers of two times 3,
5, 7, 27 or 43, and 132 = 4 x 3 x 11, so it is rarely 1: 2048 units run as 128 CTAs of 16.

For every entry of the table (default: the shipped H200 table) the script prints units,
iters, CTAs with work, efficiency, and the entry's measured time; then, per set and M bucket,
the summed time and ``(1 - efficiency) x time`` summed: what stripes cut below whole units
(k16 steps, say) could give at most if the whole launch scaled with the busiest CTA's units.
It does not: the launch's fixed part (setup, prologue, the column's end; NOTES.md entries 15,
34) does not shrink, so the real bound is that share of the stream part only.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy.bench.shapes import set_shapes  # noqa: E402
from marlin_cupy.config import KernelConfig  # noqa: E402


def stripes(cfg: KernelConfig, m: int, n: int, k: int, sms: int) -> tuple[int, int, int, float]:
    """(units, iters, CTAs with work, efficiency) of one launch, as ops._plan and the kernel
    cut it (one CTA slot per SM and ``blocks_per_sm``; the occupancy check is assumed met)."""
    units = (k // cfg.tile_k) * (n // cfg.tile_n) * -(-m // cfg.tile_m)
    slots = sms * cfg.blocks_per_sm
    grid = min(units, slots)
    iters = -(-units // grid)
    busy = -(-units // iters)
    return units, iters, busy, units / (slots * iters)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("table", nargs="?", default=str(ROOT / "marlin_cupy/tuned/NVIDIA_H200.json"))
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b")
    a = p.parse_args(argv)
    table = json.loads(Path(a.table).read_text())
    entries = {(e["k"], e["n"], e["m_bucket"]): e for e in table["entries"]}
    buckets = sorted({e["m_bucket"] for e in table["entries"]})
    print(f"# stripe_balance.py {Path(a.table).name} (table commit "
          f"{table.get('git_commit', '?')[:7]}), {a.sms} SMs")
    for set_name in a.sets.split(","):
        shapes = set_shapes(set_name)
        for b in buckets:
            total = idle = 0.0
            lines = []
            for k, n in shapes:
                e = entries.get((k, n, b))
                if e is None:
                    continue
                cfg = KernelConfig.from_name(e["config"])
                units, iters, busy, eff = stripes(cfg, e["m"], n, k, a.sms)
                total += e["median_us"]
                idle += (1 - eff) * e["median_us"]
                lines.append(f"  {k}x{n} M={e['m']} {cfg.name}: {units} units, {busy} CTAs x "
                             f"{iters}, efficiency {eff:.3f}, {e['median_us']:.1f} us")
            if not lines:
                continue
            label = "M>192" if b > 1024 else f"M<={b}"
            print(f"{set_name} {label}: summed {total:.1f} us, (1 - efficiency) x time "
                  f"{idle:.1f} us ({idle / total:.1%})")
            print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
