"""Session 51 (offline, no GPU): the shipped H200 table from call 1's measurements, as the
tuner of this commit merges them (NOTES.md entry 107). Call 1 ran ``python -m marlin_cupy.tune
--buckets 80,96,112,128 --merge ... --narrow 3 --keep-within 1`` twice (the llama2 sets, then
the six other models' 23 further layers) with the tuner of 30348b1, whose incumbents were the
base table's entries of the tuned bucket only (none for 65..80 and 97..112, buckets it
predates) and whose candidates left out the config the base served at 97..112 where the base
held no measurement there. Here: the two runs' measurements of the 35 layers x 4 buckets merged
once onto the base (the shipped table of aeb7d21) with the served configs as incumbents within
1 % (``tune.merge_tables``), then the pairs ``tune.suspect_pairs`` finds withdrawn to the base's
state (``tune.withdraw_pairs``).

    python3 fix_table.py BASE.json CALL1_TABLE.json[.gz] OUT.json
"""
import sys

from marlin_cupy import tune
from marlin_cupy.bench.shapes import set_shapes
from marlin_cupy.config import m_bucket
from marlin_cupy.records import read_json

BUCKETS = (80, 96, 112, 128)


def main(base_path, call1_path, out_path):
    base = read_json(base_path)
    call1 = read_json(call1_path)
    shapes = list(dict.fromkeys(set_shapes(
        "llama2-7b,llama2-13b,llama2-70b,llama3-8b,qwen2.5-7b,phi3-mini,qwen2.5-0.5b,"
        "qwen2.5-1.5b,llama3.2-1b")))
    pairs = {(n, k, b) for (k, n) in shapes for b in BUCKETS}
    rows = [r for r in call1["measurements"] if (r["n"], r["k"], m_bucket(r["m"])) in pairs]
    new = {key: call1[key] for key in ("kind", "device_name", "arch", "date", "git_commit",
                                       "git_dirty", "versions", "method") if key in call1}
    new.update(narrow=3, entries=tune.select_entries(rows, 128), measurements=rows)
    merged = tune.merge_tables(base, new, shapes, BUCKETS, keep_within=0.01)
    suspect = tune.suspect_pairs(base, merged, shapes, BUCKETS)
    out = tune.withdraw_pairs(merged, base, suspect)
    tune.write_table(out_path, out)
    print(f"{len(rows)} measurements of {len(pairs)} pairs; {len(out['entries'])} entries; "
          f"withdrawn {len(suspect)}:")
    for (n, k, b), why in sorted(suspect.items()):
        print(f"  {k}x{n} bucket {b}: {why}")


if __name__ == "__main__":
    main(*sys.argv[1:])
