"""scripts/ncu_source_summary.py on a small made-up source page (no GPU, no ncu)."""
import csv
import gzip
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import ncu_source_summary as nss  # noqa: E402

# address, instruction, executed, samples (all barrier, or long_sb)
CODE = [
    (0x00, "LDC R1, c[0x0][0x28]", 8, 1),
    (0x10, "MOV R2, RZ", 8, 0),
    (0x20, "HGMMA.64x32x16.F32 R72, R104, gdesc[UR20], R72", 80, 5),   # loop head
    (0x30, "HGMMA.64x32x16.F32 R72, R100, gdesc[UR20], R72", 80, 7),
    (0x40, "@!P0 BRA 0x20", 80, 2),                                     # back branch
    (0x50, "@!P1 BRA 0x90", 8, 3),                                       # forward: not the loop
    (0x60, "BAR.SYNC.DEFER_BLOCKING 0x1, 0x80", 8, 11),
    (0x70, "EXIT", 8, 13),
    (0x80, "LDG.E.128.STRONG.GPU R4, desc[UR4][R2.64]", 30, 17),         # out of line
    (0x90, "@P0 BRA 0x80", 30, 19),
]


def page(path):
    cols = ["Address", "Source", "Instructions Executed", "Warp Stall Sampling (All Samples)",
            "stall_barrier", "stall_long_sb"]
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    buf.write('"Kernel Name","marlin_test"\n')
    w.writerow(cols)
    for a, src, ex, s in CODE:
        bar = s if "BAR" in src or src == "EXIT" else 0
        w.writerow([hex(a), src, ex, s, bar, s - bar])
    with gzip.open(path, "wt") as f:
        f.write(buf.getvalue())


def test_regions_split_at_the_loop_and_the_first_exit(tmp_path):
    page(tmp_path / "p.csv.gz")
    kernel, rows = nss.read_rows(str(tmp_path / "p.csv.gz"))
    assert kernel == "marlin_test"
    got = [(name, [rows[i]["Address"] for i in range(lo, hi)]) for name, lo, hi in nss.regions(rows)]
    assert got == [("prologue", ["0x0", "0x10"]), ("main loop", ["0x20", "0x30", "0x40"]),
                   ("after the loop", ["0x50", "0x60", "0x70"]), ("rest", ["0x80", "0x90"])]


def test_region_table_sums_every_sample_once(tmp_path, capsys):
    page(tmp_path / "p.csv.gz")
    nss.main([str(tmp_path / "p.csv.gz"), "--regions", "--top", "3"])
    out = capsys.readouterr().out
    lines = {ln.split("|")[1].strip(): ln.split("|") for ln in out.splitlines() if ln.startswith("| ")}
    samples = {k: int(lines[k][4]) for k in ("prologue", "main loop", "after the loop", "rest")}
    assert samples == {"prologue": 1, "main loop": 14, "after the loop": 27, "rest": 36}
    assert sum(samples.values()) == sum(c[3] for c in CODE)
    assert "barrier 89 %" in lines["after the loop"][6]
