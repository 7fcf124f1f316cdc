"""Which launches of the H200 table could sum their split columns inside a cluster (no GPU).

    python3 scripts/cluster_fit.py [TABLE.json] [--sms 132] [--max-m 64] [--md OUT.md]

``scripts/cluster_probe.py`` (NOTES.md entry 72) measured the end of a split column through a
cluster's distributed shared memory at about half the cost of today's path through global
memory. A cluster can only sum what its own CTAs hold, so the partition must give each
cluster whole columns, split along K between its CTAs. On the H200 with one CTA of about
200 KB per SM, clusters of 2 keep all 132 SMs (66 pairs), clusters of 3 and 4 only 117 and 120
(the probe's residency rows), so pairs are the candidate.

For every table entry up to ``--max-m`` (the entry's own tile; tiles of other widths would be
other configs, which the tuner would have to measure) this prints:

- today: units, columns, the stripe length ``iters``, CTAs per column (the most), and the
  stripe efficiency (busy units over CTA slots x ``iters``, as ``stripe_balance.py``);
- pairs: ``pairs = slots / 2`` clusters, each CTA of a pair half of each column's K units
  (the larger half when they are odd), columns dealt to pairs in rounds; its efficiency is the
  work over ``slots x`` the busiest CTA's units. ``fits`` when it is within 3 points of
  today's (the probe's saving at M = 1 is about 0.5-1 µs of a 10-70 µs launch);
- the same for the entry's config at each narrower width its family allows (``narrower``):
  more columns, so more of them fit the pairs, but each such twin is a config the tuner
  would have to measure (the wgmma tiles are 256 columns wide at M = 16..64, so only the
  ``mma.sync`` tiles of M <= 8 have twins). Next to it, what the tuner measured for that
  width: its fastest config of that tile width on the layer at the entry's M (the table's
  ``measurements``), against the entry's time. A pair can save at most what the probe's push
  form saves per launch; a twin that is slower by more cannot gain.

Per set and M bucket the summed time of the entries that fit is given next to the set's.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "scripts"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from marlin_cupy.bench.shapes import set_shapes  # noqa: E402
from marlin_cupy.config import KernelConfig  # noqa: E402
import stripe_balance  # noqa: E402

DEFAULT_TABLE = ROOT / "marlin_cupy" / "tuned" / "NVIDIA_H200.json"


def today(cfg: KernelConfig, m: int, n: int, k: int, sms: int) -> dict:
    """The launch as the kernel cuts it (``stripe_balance.stripes``), with its columns."""
    units, iters, busy, eff = stripe_balance.stripes(cfg, m, n, k, sms)
    ku = k // cfg.tile_k
    # the most CTAs one column meets: ceil((ku - 1) / iters) + 1 where a stripe can start
    # inside it, capped by the CTAs there are
    sharers = min(busy, -(-(ku - 1) // iters) + 1) if ku > 1 else 1
    return {"units": units, "cols": units // ku, "k_units": ku, "iters": iters, "ctas": busy,
            "sharers": sharers, "eff": eff}


def pairs(cfg: KernelConfig, m: int, n: int, k: int, sms: int) -> dict:
    t = today(cfg, m, n, k, sms)
    slots = sms * cfg.blocks_per_sm
    p = slots // 2
    rounds = -(-t["cols"] // p)
    half = -(-t["k_units"] // 2)
    busiest = rounds * half
    return {"pairs": p, "rounds": rounds, "half": half, "eff": t["units"] / (slots * busiest)}


def narrower(cfg: KernelConfig, n: int) -> list:
    """The entry's config at every narrower width its family allows (``KernelConfig.problems``
    empty) that divides N: candidates the tuner would have to measure."""
    out = []
    nb = cfg.thread_n_blocks // 2
    while nb >= 4:
        c = cfg.with_(thread_n_blocks=nb)
        if not c.problems() and n % c.tile_n == 0:
            out.append(c)
        nb //= 2
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("table", nargs="?", default=str(DEFAULT_TABLE))
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--max-m", type=int, default=64)
    ap.add_argument("--md", help="also write the table as markdown here")
    a = ap.parse_args(argv)
    table = json.loads(Path(a.table).read_text())
    entries = {(e["n"], e["k"], e["m_bucket"]): e for e in table["entries"]}
    # the tuner's fastest measured config of each tile width, per layer and M
    best_w: dict = {}
    for r in table.get("measurements", []):
        key = (r["n"], r["k"], r["m"], KernelConfig.from_name(r["config"]).tile_n)
        if key not in best_w or r["median_us"] < best_w[key]:
            best_w[key] = r["median_us"]
    buckets = sorted({e["m_bucket"] for e in table["entries"] if e["m_bucket"] <= a.max_m})
    lines = [f"Table {Path(a.table).name} (git {table.get('git_commit', '?')[:7]}), "
             f"{a.sms} SMs, clusters of 2.", "",
             "| set | K x N | M bucket | config | µs | cols | K units | iters | CTAs/col | "
             "eff today | pair rounds | eff pairs | fits | narrower twin, pairs | twin width's best "
             "measured µs vs entry |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| --- | --- | ---: |"]
    sums = []
    for set_name in ("llama2-7b", "llama2-13b", "llama2-70b"):
        for mb in buckets:
            total = fit_us = alt_us = 0.0
            fit_layers, alt_layers = [], []
            for k, n in set_shapes(set_name):
                e = entries.get((n, k, mb))
                if e is None:
                    continue
                cfg = KernelConfig.from_name(e["config"])
                m = e["m"]
                t, pr = today(cfg, m, n, k, a.sms), pairs(cfg, m, n, k, a.sms)
                # the best narrower twin, for pairs
                alt = max(((pairs(c, m, n, k, a.sms)["eff"], c) for c in narrower(cfg, n)),
                          default=None, key=lambda x: x[0])
                fits = pr["eff"] >= t["eff"] - 0.03
                alt_fits = alt is not None and alt[0] >= t["eff"] - 0.03
                alt_cost = None
                if alt is not None:
                    w = best_w.get((n, k, m, alt[1].tile_n))
                    alt_cost = None if w is None else w - e["median_us"]
                if alt_fits and not fits:
                    alt_us += e["median_us"]
                    cost = "not measured" if alt_cost is None else f"{alt_cost:+.2f} µs"
                    alt_layers.append(f"{k}x{n} ({alt[1].tile_n} wide, tuner's best at that "
                                      f"width {cost})")
                total += e["median_us"]
                if fits:
                    fit_us += e["median_us"]
                    fit_layers.append(f"{k}x{n}")
                lines.append(
                    f"| {set_name} | {k}x{n} | {mb} | `{cfg.name}` | {e['median_us']:.1f} | "
                    f"{t['cols']} | {t['k_units']} | {t['iters']} | {t['sharers']} | "
                    f"{t['eff']:.2f} | {pr['rounds']} | {pr['eff']:.2f} | "
                    f"{'yes' if fits else 'no'} | "
                    f"{f'{alt[1].tile_n} wide: {alt[0]:.2f}' if alt else '-'} | "
                    f"{'-' if alt_cost is None else f'{alt_cost:+.2f}'} |")
            sums.append(f"- {set_name}, bucket {mb}: {len(fit_layers)} of the set's layers fit "
                        f"({', '.join(fit_layers) or 'none'}): {fit_us:.1f} of {total:.1f} µs "
                        "in the table; with a narrower twin also "
                        f"{', '.join(alt_layers) or 'none'} ({alt_us:.1f} µs)")
    text = "\n".join(lines + [""] + sums) + "\n"
    print(text)
    if a.md:
        Path(a.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
