"""Issue 5's targets against what the chip allows, per set and M (no GPU needed).

    python3 scripts/ceiling_table.py READ_CEILING.json WGMMA_RATE.json BENCH.json [--out T.md]

A lower bound on any kernel's time for one layer is the larger of two measured floors:
- the read floor: the fastest plain read-only kernel over the layer's packed 4-bit weights and
  group scales (``scripts/read_ceiling.py``; its launch and ramp included);
- the tensor floor: the layer's 2 M K N FLOP at the best rate of the wgmma form alone on this
  chip (``scripts/wgmma_rate.py``, no memory, no dequantization).
Summed over a set's layers, the FP16 GEMM's time of the read-ceiling run divided by the summed
floors is the largest summed speedup that set can show at that M (its ``ceiling``). A target
needs ``target / ceiling`` of that bound; the benchmark record's own speedup (its FP16 times,
another run) reaches ``ours / ceiling`` of it. Where the target is above the ceiling, no kernel
that reads the weights can meet it.

The activations and the output (M x K and M x N halves) are left out of the read floor; they
add at most a few per cent at M = 128 on the narrow layers, so the floors are a little low there
and the ceilings a little high, never the other way round.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from marlin_cupy.bench import report  # noqa: E402
from marlin_cupy.records import read_json  # noqa: E402

#: Issue 5's targets (summed speedup over the fastest FP16 GEMM); M = 1..16 share one.
TARGETS = {
    "llama2-70b": {16: 3.5, 32: 3.0, 64: 2.0, 128: 1.2},
    "llama2-13b": {16: 3.2, 32: 2.7, 64: 1.8, 128: 1.1},
    "llama2-7b": {16: 3.0, 32: 2.5, 64: 1.6, 128: 1.0},
}


def target(set_name: str, m: int):
    """The issue's target for ``set_name`` at batch ``m``, or None where it sets none."""
    ts = TARGETS.get(set_name)
    if ts is None:
        return None
    for bound in sorted(ts):
        if m <= bound:
            return ts[bound]
    return None


def peak_tflops(rate: dict) -> float:
    """The best TFLOP/s of any variant in a ``wgmma_rate`` record."""
    rows = rate.get("rows") or []
    if not rows:
        raise ValueError("the wgmma_rate record has no rows")
    return max(float(r["tflops"]) for r in rows)


def ceilings(read: dict, tflops: float) -> dict:
    """{(set, m): (fp16_us, read_us, tensor_us, floor_us)} summed over each set's layers, for
    every M the read-ceiling run timed the FP16 GEMM at."""
    out = {}
    for row in read["rows"]:
        k, n = int(row["k"]), int(row["n"])
        for key, fp16 in row.items():
            if not key.startswith("fp16_us_m"):
                continue
            m = int(key[len("fp16_us_m"):])
            tensor = 2.0 * m * k * n / (tflops * 1e6)
            s = out.setdefault((row["set"], m), [0.0, 0.0, 0.0, 0.0])
            s[0] += float(fp16)
            s[1] += float(row["read_us"])
            s[2] += tensor
            s[3] += max(float(row["read_us"]), tensor)
    return {key: tuple(v) for key, v in out.items()}


def ours(bench: dict, label: str = "marlin") -> dict:
    """{(set, m): summed speedup} of a benchmark record for ``label``, from the record's own
    summary (``bench.report``'s, recomputed when the record has none); sets that are not
    complete at that M are left out."""
    return {(s, m): e["summed_speedup"] for (s, lab, m), e in report._summary(bench).items()
            if lab == label and report._complete(e) and e.get("summed_speedup")}


def table(read: dict, rate: dict, bench: dict) -> str:
    tflops = peak_tflops(rate)
    ceil = ceilings(read, tflops)
    mine = ours(bench)
    lines = [
        "| set | M | FP16 (µs) | read floor (µs) | tensor floor (µs) | ceiling | target | "
        "target / ceiling | ours | ours / ceiling |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (set_name, m), (fp16, rd, tensor, floor) in sorted(ceil.items()):
        c = fp16 / floor
        t = target(set_name, m)
        o = mine.get((set_name, m))
        lines.append(
            f"| {set_name} | {m} | {fp16:.1f} | {rd:.1f} | {tensor:.1f} | {c:.2f}x | "
            + (f"{t:.1f}x | {100 * t / c:.0f} % | " if t else "- | - | ")
            + (f"{o:.2f}x | {100 * o / c:.0f} % |" if o else "- | - |"))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("read", help="scripts/read_ceiling.py's JSON")
    p.add_argument("rate", help="scripts/wgmma_rate.py's JSON")
    p.add_argument("bench", help="a benchmark record (python -m marlin_cupy.bench)")
    p.add_argument("--out", help="also write the markdown here")
    a = p.parse_args(argv)
    read, rate, bench = read_json(a.read), read_json(a.rate), read_json(a.bench)
    env = read.get("environment", {})
    dev = env.get("device", "?")
    dev = dev.get("name", "?") if isinstance(dev, dict) else dev
    head = [
        f"# Targets against the chip's ceilings: `{a.read}`",
        "",
        f"Read floors and FP16 times: {dev}, kernel "
        f"{str(env.get('git_commit', '?'))[:12]}, {env.get('date', '?')}. Tensor floor: "
        f"{peak_tflops(rate):.0f} TFLOP/s, the best wgmma form of `{a.rate}`. Ours: "
        f"`{a.bench}` (kernel {str(bench.get('git_commit', '?'))[:12]}, {bench.get('date', '?')}"
        "; its own FP16 times). Made by scripts/ceiling_table.py.",
        "",
        "",
    ]
    text = "\n".join(head) + table(read, rate, bench) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
