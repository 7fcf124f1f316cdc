"""Byte and FLOP accounting, speedups and the per-set summary: arithmetic on recorded numbers.

Everything here is plain Python on rows that ``sweep`` measured (or that a saved JSON holds), so
the report and the CPU tests use exactly the arithmetic the benchmark used.

Minimum bytes (each input read once, each output written once; DESIGN.md s.7):
  int4 providers:  K*N/2 (int4 weights) + G*N*2 (fp16 scales) + M*K*2 (A) + M*N*2 (C)
  fp16 providers:  K*N*2 (fp16 weights)                       + M*K*2 (A) + M*N*2 (C)
``torch-int4`` is counted as an int4 provider: its extra float zero points are its own overhead.
"""
from __future__ import annotations

#: Weight format of every provider name, which decides its minimum bytes.
WEIGHT_FORMAT = {
    "marlin": "int4",
    "marlin-pdl": "int4",
    "marlin-config": "int4",
    "marlin-sparse24": "int4",
    "naive-dequant-gemm": "int4",
    "naive-fused": "int4",
    "torch-int4": "int4",
    "cublas-fp16": "fp16",
    "torch-fp16": "fp16",
}
#: The FP16 GEMMs; speedups are against the fastest of these per layer and batch size.
FP16_BASELINES = ("cublas-fp16", "torch-fp16")


def num_groups(k: int, group_size: int) -> int:
    return 1 if group_size == -1 else k // group_size


def flops(m: int, k: int, n: int) -> int:
    """Multiply-adds of ``[M, K] @ [K, N]`` counted as two operations."""
    return 2 * m * k * n


def weight_bytes(fmt: str, k: int, n: int, group_size: int) -> int:
    """Bytes of one copy of the weights (and scales) that a provider must read per call."""
    if fmt == "int4":
        return k * n // 2 + num_groups(k, group_size) * n * 2
    if fmt == "fp16":
        return 2 * k * n
    raise ValueError(f"unknown weight format {fmt!r}; expected 'int4' or 'fp16'.")


def min_bytes(fmt: str, m: int, k: int, n: int, group_size: int) -> int:
    """Fewest bytes a provider of this weight format moves: weights + scales + A + C."""
    return weight_bytes(fmt, k, n, group_size) + 2 * m * k + 2 * m * n


def provider_format(provider: str) -> str:
    try:
        return WEIGHT_FORMAT[provider]
    except KeyError:
        raise ValueError(f"unknown provider {provider!r}; known: {', '.join(WEIGHT_FORMAT)}.") from None


def ideal_speedup(group_size: int, k: int = None) -> float:
    """Memory-bound ideal of int4 over fp16 weights: 16 bits / (4 + 16/group_size) bits per weight.

    3.88x at group size 128. Per-channel scales (group_size -1) cost 16/K bits per weight, which
    vanishes for large K (4x when ``k`` is not given).
    """
    per_weight_scale_bits = 16 / group_size if group_size != -1 else (16 / k if k else 0.0)
    return 16 / (4 + per_weight_scale_bits)


def derive(row: dict, group_size: int, copy_bandwidth_GBps: float) -> dict:
    """Fill a measured row's TFLOP/s, GB/s, minimum bytes and percent of copy bandwidth."""
    m, k, n = row["m"], row["k"], row["n"]
    seconds = row["median_us"] * 1e-6
    nbytes = min_bytes(provider_format(row["provider"]), m, k, n, group_size)
    row["min_bytes"] = nbytes
    row["tflops"] = flops(m, k, n) / seconds / 1e12
    row["gbps"] = nbytes / seconds / 1e9
    row["pct_copy_bw"] = 100.0 * row["gbps"] / copy_bandwidth_GBps if copy_bandwidth_GBps else None
    return row


def _point(row):
    return (row["set"], row["layer"], row["m"])


def best_baselines(rows) -> dict:
    """Fastest FP16 median per (set, layer, m): ``{key: (median_us, provider)}``."""
    best = {}
    for row in rows:
        if row["provider"] in FP16_BASELINES:
            key = _point(row)
            if key not in best or row["median_us"] < best[key][0]:
                best[key] = (row["median_us"], row["provider"])
    return best


def add_speedups(rows) -> None:
    """Every row gets ``baseline_us``, ``baseline`` (which FP16 GEMM was fastest) and ``speedup``."""
    best = best_baselines(rows)
    for row in rows:
        base = best.get(_point(row))
        row["baseline_us"] = base[0] if base else None
        row["baseline"] = base[1] if base else None
        row["speedup"] = base[0] / row["median_us"] if base else None


def summarize_sets(rows, layers_per_set: dict, copy_bandwidth_GBps: float) -> list:
    """Per set, provider label and batch size: times summed over the set's layers.

    ``summed_speedup`` = sum of the best FP16 time / sum of the provider's time, and
    ``summed_pct_roofline`` = sum of minimum bytes / sum of time / copy bandwidth. Both are null
    unless the provider (and the baselines, for the speedup) has a row for every layer of the set.
    """
    best = best_baselines(rows)
    groups = {}
    for row in rows:
        groups.setdefault((row["set"], row.get("label", row["provider"]), row["m"]), []).append(row)
    summary = []
    for (set_name, label, m), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        expected = layers_per_set.get(set_name, len(group))
        layers = sorted({r["layer"] for r in group})
        complete = len(layers) == expected and len(group) == expected
        time_us = sum(r["median_us"] for r in group)
        nbytes = sum(r["min_bytes"] for r in group)
        bases = [best.get(_point(r)) for r in group]
        has_base = complete and all(b is not None for b in bases)
        base_us = sum(b[0] for b in bases) if has_base else None
        pct = 100.0 * nbytes / (time_us * 1e-6) / 1e9 / copy_bandwidth_GBps if (
            complete and copy_bandwidth_GBps) else None
        summary.append({
            "set": set_name, "label": label, "provider": group[0]["provider"], "m": m,
            "layers": len(layers), "layers_in_set": expected,
            "time_us": time_us, "baseline_us": base_us,
            "summed_speedup": base_us / time_us if has_base else None,
            "min_bytes": nbytes, "summed_pct_roofline": pct,
        })
    return summary

