"""``python -m marlin_cupy.bench`` (console script ``marlin-cupy-bench``): the benchmark command.

    python -m marlin_cupy.bench                                  # the full default sweep
    python -m marlin_cupy.bench --sets llama2-70b --batches 1,16,64
    python -m marlin_cupy.bench --shapes "4096,4096;8192,1024" --providers marlin,cublas-fp16
    python -m marlin_cupy.bench --config t256_m4_n16_k4_s4_g8_fp32   # also time an explicit config

Writes ``<out>/<name>.json`` (the record), ``<name>.md`` and two PNG plots. Exit status: 0 when
every provider passed the correctness gate, 1 when one failed (its runs have no timing row), 2 when
nothing was measured (no GPU, or bad arguments).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .._cli import at_least, positive_int
from . import harness, providers, shapes

EXIT_OK, EXIT_FAILED, EXIT_NOT_MEASURED = 0, 1, 2


def _positive_float(text):
    v = float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _non_negative_float(text):
    v = float(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return v


def _typed(parse, what):
    """An argparse type from one of the ``shapes`` parsers, keeping its message."""
    def convert(text):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = what
    return convert


def _group_size(text):
    try:
        v = int(text)
    except ValueError:
        v = None
    if v not in shapes.GROUP_SIZES:
        raise argparse.ArgumentTypeError(f"group size must be one of {shapes.GROUP_SIZES} "
                                         f"(-1: one group spanning K); got {text!r}")
    return v


def _provider_list(text):
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [n for n in names if n not in providers.ALL_PROVIDER_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown provider(s) {unknown or [text]}; choose from "
                                         f"{', '.join(providers.ALL_PROVIDER_NAMES)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    d = harness
    ap = argparse.ArgumentParser(
        prog="python -m marlin_cupy.bench",
        description="Measure Marlin against cuBLAS/torch FP16 and naive INT4 baselines on LLM layer "
                    "shapes across batch sizes; write a JSON record, a markdown table and plots.")
    what = ap.add_argument_group("what to measure")
    what.add_argument("--sets", type=_typed(shapes.parse_sets, "sets"), default=None,
                      help=f"comma-separated shape sets from {', '.join(shapes.SET_NAMES)} "
                           f"(default: all, unless --shapes is given)")
    what.add_argument("--shapes", type=_typed(shapes.parse_shapes, "shapes"), default=(),
                      help='custom K,N pairs separated by ";", e.g. "4096,4096;8192,1024", or the '
                           f'name of another model\'s block ({", ".join(shapes.OTHER_SETS)}) '
                           '(set "custom")')
    what.add_argument("--batches", type=_typed(shapes.parse_batches, "batches"),
                      default=shapes.DEFAULT_BATCHES,
                      help="comma-separated batch sizes M (default: 1,2,4,...,1024)")
    what.add_argument("--group-size", type=_group_size, default=shapes.DEFAULT_GROUP_SIZE,
                      help=f"quantization group size (default {shapes.DEFAULT_GROUP_SIZE})")
    what.add_argument("--providers", type=_provider_list, default=providers.PROVIDER_NAMES,
                      help=f"comma-separated providers (default: all available: "
                           f"{', '.join(providers.PROVIDER_NAMES)}; also "
                           f"{', '.join(providers.EXTRA_PROVIDER_NAMES)}, with --chain-len)")
    what.add_argument("--config", action="append", default=[], metavar="NAME",
                      help="also time Marlin with this explicit KernelConfig name (repeatable); "
                           "its rows are labelled marlin[NAME]")
    what.add_argument("--naive-fused-max-m", type=positive_int, default=providers.NAIVE_FUSED_MAX_M,
                      help=f"largest batch at which naive-fused is timed (default "
                           f"{providers.NAIVE_FUSED_MAX_M}; it is slow and only shows the baseline)")
    how = ap.add_argument_group("how to measure")
    how.add_argument("--time-budget-ms", type=_positive_float, default=d.DEFAULT_BUDGET_MS,
                     help=f"GPU time per measurement that sets the repetition count "
                          f"(default {d.DEFAULT_BUDGET_MS:g})")
    how.add_argument("--min-reps", type=positive_int, default=d.DEFAULT_MIN_REPS)
    how.add_argument("--max-reps", type=positive_int, default=d.DEFAULT_MAX_REPS)
    how.add_argument("--warmup", type=positive_int, default=d.DEFAULT_WARMUP,
                     help="warm-up calls before timing")
    how.add_argument("--cooldown", type=_non_negative_float, default=0.1,
                     help="seconds of rest between batch sizes (default 0.1)")
    how.add_argument("--copy-cap-gb", type=_positive_float, default=40.0,
                     help="most GB of weight copies per layer for the L2 rotation (default 40)")
    how.add_argument("--seed", type=int, default=0)
    how.add_argument("--chain-len", type=at_least(0), default=0, metavar="L",
                     help="time chains of L calls back to back, one event pair per chain, instead "
                          "of events around every call (default 0: per call). Needed for "
                          "marlin-pdl; a chain is how a model runs its GEMMs")
    out = ap.add_argument_group("output")
    out.add_argument("--out", type=Path, default=None,
                     help="output folder (default: benchmarks/results of this checkout)")
    out.add_argument("--name", default=None,
                     help="file stem (default <date>_<device>_bench, or <date>_<device>_<model>_bench "
                          "where --shapes names another model's block); 'bench' is appended when "
                          "absent so that the record matches benchmarks/results/*bench*.json")
    out.add_argument("--no-plot", action="store_true", help="skip the PNG plots")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def parse_args(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.sets is None:
        args.sets = () if args.shapes else shapes.DEFAULT_SETS
    if args.min_reps > args.max_reps:
        ap.error(f"--min-reps {args.min_reps} is larger than --max-reps {args.max_reps}")
    for k, n in args.shapes:
        try:
            shapes.check_shape(k, n, args.group_size)
        except ValueError as e:
            ap.error(f"--shapes: {e}")
    return args


def default_out_dir() -> Path:
    from ..records import REPO_ROOT
    results = REPO_ROOT / "benchmarks" / "results"
    return results if results.is_dir() else Path.cwd() / "benchmarks" / "results"


def file_stem(name, date: str, device_name: str, model: str | None = None) -> str:
    """The record's file stem: ``name`` (with ``_bench`` appended where absent), else
    ``<date>_<device>[_<model>]_bench``, ``model`` being the other model's block that
    ``--shapes`` named (so that one model's record does not overwrite another's)."""
    if name is None:
        slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "gpu"
        name = f"{date[:10]}_{slug}" + (f"_{model}" if model else "")
    return name if "bench" in name else f"{name}_bench"


def main(argv=None) -> int:
    args = parse_args(argv)
    for name in args.config:              # a typo is told before the GPU is looked for
        try:
            from ..config import KernelConfig
            KernelConfig.from_name(name)
        except Exception as e:
            print(f"marlin-cupy-bench: --config {name!r} is not a usable KernelConfig ({e}); nothing "
                  f"was measured.", file=sys.stderr)
            return EXIT_NOT_MEASURED
    reason = harness.gpu_unavailable_reason()
    if reason is not None:
        print(f"marlin-cupy-bench: no GPU is present ({reason}); nothing was measured.",
              file=sys.stderr)
        return EXIT_NOT_MEASURED

    from .. import records
    from . import report
    from .sweep import SweepOptions, run_sweep

    sms = records.device_info()["sms"]
    try:
        layers = shapes.resolve_layers(args.sets, args.shapes, sms, args.group_size)
    except ValueError as e:
        print(f"marlin-cupy-bench: {e}; nothing was measured.", file=sys.stderr)
        return EXIT_NOT_MEASURED
    provs = providers.make_providers(args.providers, args.config, args.naive_fused_max_m)
    options = SweepOptions(
        batches=args.batches, group_size=args.group_size, budget_ms=args.time_budget_ms,
        min_reps=args.min_reps, max_reps=args.max_reps, warmup=args.warmup,
        cooldown_s=args.cooldown, copy_cap_bytes=int(args.copy_cap_gb * 1e9), seed=args.seed,
        chain_len=args.chain_len, progress=not args.no_progress,
        extra={"command": " ".join(["python -m marlin_cupy.bench", *(argv if argv is not None else sys.argv[1:])])})
    rec = run_sweep(layers, provs, options)

    out_dir = args.out or default_out_dir()
    model = next((m for m, v in shapes.OTHER_SETS.items() if tuple(args.shapes) == v), None)
    stem = file_stem(args.name, rec["date"], rec["device"]["name"], model)
    json_path = out_dir / f"{stem}.json"
    if rec["rows"]:
        records.write_json(json_path, rec)
    else:   # nothing passed: keep the evidence, but it is not a valid bench record
        records.write_json(json_path, rec, validate=False)
    written = [json_path] + report.write_report(rec, json_path, plots=not args.no_plot)

    print(report.short_table(rec))
    for path in written:
        print(f"wrote {path}")
    if rec["failed"] or rec["aborted"] or not rec["rows"]:
        n = len(rec["failed"])
        print(f"marlin-cupy-bench: {n} run(s) failed the correctness gate or raised"
              + (f"; sweep aborted: {rec['aborted']}" if rec["aborted"] else "")
              + "; see 'failed' in the record.", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
