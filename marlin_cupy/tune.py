"""Autotuner: measure candidate kernel configs per (device, N, K, M bucket) and keep the winners.

The default dispatch (``config.choose_config``) looks a problem up in the tuned table of the
current device before falling back to its heuristic. Tables live in two places:

* shipped with the package, ``marlin_cupy/tuned/<device>.json`` (written by this module from a
  real run; the H200 table is in the repository, with the versions it was measured with), and
* the user's cache, ``$MARLIN_CUPY_CACHE`` or ``~/.cache/marlin_cupy``, as
  ``tuned/<device>__cupy<version>_nvrtc<version>.json``: ``python -m marlin_cupy.tune`` fills it
  on the user's own GPU; it wins over the shipped table, and only for the same CuPy and NVRTC
  (a different NVRTC can allocate registers differently and change the winner).

Entries are keyed by N, K, group size and M bucket within a device's table. ``--buckets 8,16``
tunes only those M buckets; with ``--merge TABLE`` the result is TABLE with just those buckets'
measurements and entries replaced (for the tuned layers), e.g. to try new candidates at small M
without a full run. A merged table should be ``--reselect``-ed again before it ships.
``--tested TABLE`` (on a tune or with ``--reselect``) chooses every entry among the kernels whose
GPU tests ran with TABLE shipped (``restrict_to_tested``), so a re-tune needs no new GPU test run.
``--prior N`` tunes a new model's layers (those the device's shipped table and user cache, or
TABLE with ``--merge TABLE``, have not measured) on the candidates those measurements rank best
per bucket, in a fraction of a full run's time.

Timing follows the benchmark harness (``bench.harness.Timer``): CUDA events with the host kept
ahead by a spin kernel, weights rotated past the L2, median of the samples.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import warnings
from pathlib import Path

from .config import (KernelConfig, MAX_M_BLOCKS, WGMMA_SWAPS, group_blocks_for, m_bucket,
                     M_BUCKETS)

#: Tile shapes (threads, n_blocks, k_blocks) the tuner tries, and the pipeline depths.
TUNE_SHAPES = ((256, 16, 8), (256, 8, 8), (256, 16, 4), (128, 8, 4), (256, 16, 16),
               (256, 8, 16), (256, 32, 8), (128, 4, 8))
TUNE_STAGES = (3, 4, 6, 8)
#: Two CTAs per SM (twice the warps to hide latency) are tried for small M at shallow depths.
#: Three and four were measured at M <= 16 (NOTES.md entry 42: 0.4-9 % slower than the best of
#: these on 22 of 24 layer-buckets, within 0.6 % on two) and are not candidates.
TUNE_BLOCKS_PER_SM = ((1, TUNE_STAGES), (2, (3, 4)))
#: wgmma candidates (sm_90a devices): (threads, n_blocks, k_blocks), and the
#: swap_ab (8-row blocks per wgmma) tried per bucket.
TUNE_WGMMA_SHAPES = ((128, 16, 4), (128, 16, 8), (256, 16, 4), (256, 16, 8), (256, 32, 4),
                     (256, 32, 8),
                     # only valid with swap_ab=16 (32-column warps): 128 columns per CTA
                     (128, 8, 4), (128, 8, 8), (256, 8, 8))
#: Narrower warps for wgmma (threads, n_blocks, k_blocks, warp_n), from M = 17 on: 32 or 16
#: columns per warp hold half or a quarter of the accumulators, so 512 threads, or two CTAs of
#: 256, fit an SM (twice the warps of the 64-column instances to hide latency; entry 25).
TUNE_WGMMA_NARROW = ((256, 16, 4, 32), (256, 16, 8, 32), (512, 32, 4, 32), (512, 32, 8, 32),
                     (256, 8, 4, 16), (256, 8, 8, 16), (512, 16, 4, 16), (512, 16, 8, 16))
#: CTAs per SM tried for wgmma: with 128 threads, two CTAs (each its own ring and barriers) fit
#: the register file (255 registers each) and, at shallow depths, shared memory.
TUNE_WGMMA_BLOCKS_PER_SM = {128: ((1, TUNE_STAGES), (2, (3, 4, 6))), 256: ((1, TUNE_STAGES),)}
#: ... and for the narrow-warp ones (256 threads: two CTAs fit the registers at 128 each).
TUNE_NARROW_BLOCKS_PER_SM = {256: ((1, TUNE_STAGES), (2, (3, 4))), 512: ((1, TUNE_STAGES),)}
#: Each wgmma candidate is also tried with a producer warpgroup (``producer``, NOTES.md entries
#: 45 and 52) where ``KernelConfig.problems`` allows it (128, 256 or 512 compute threads and one
#: CTA per SM, or 128 and two); spilling ones are skipped like any other.
TUNE_PRODUCER = True
#: Grid caps the tuner tries for every candidate (``column_ctas``: at most one, or two, CTAs
#: per column), where the capped grid is at least ``TUNE_COLUMN_MIN_SHARE`` of the persistent
#: one and smaller than it (NOTES.md entries 83-84: whole columns win on short columns at half
#: the grid and more, on deep ones only near the full grid; below a quarter none won).
TUNE_COLUMN_CTAS = (1, 2)
TUNE_COLUMN_MIN_SHARE = 0.25
#: N = 8 * swap_ab rows per instruction; at M <= 16 (N = 8, 16) wgmma lost to mma.sync by 13-25 %
#: before entry 11 of NOTES.md made the wgmma loop 20-45 % faster, so the tuner measures it there too.
#: From M = 65 on, swap_ab=16 (128-row slabs, m64n128k16) as well: the weights are dequantized
#: once per 128 rows instead of once per 64-row slab (NOTES.md entry 24).
#: 48- and 96-row slabs (swap_ab 6 and 12, m64n48k16 and m64n96k16) serve M = 33..48 and
#: 65..96 with less tensor work than 64 and 128 rows (NOTES.md entry 104), and 80- and 112-row
#: ones (swap_ab 10 and 14, m64n80k16 and m64n112k16) M = 65..80 and 97..112 (entry 106).
TUNE_WGMMA_SWAPS = {8: (1,), 16: (2,), 32: (4,), 48: (6, 8), 64: (8,), 80: (8, 10, 16),
                    96: (8, 12, 16), 112: (8, 14, 16), 128: (8, 16),
                    192: (8, 16), 256: (8, 16), 512: (8, 16),
                    1 << 30: (8, 16)}
#: The M at which each bucket is measured (the bucket's upper end; 1024 for "more than 512").
BUCKET_M = {8: 8, 16: 16, 32: 32, 48: 48, 64: 64, 80: 80, 96: 96, 112: 112, 128: 128, 192: 192,
            256: 256, 512: 512, 1 << 30: 1024}
#: Further M at which a bucket is measured; a config's score there is its times summed over
#: all of the bucket's M. The M <= 8 bucket serves decode from one row up, and some configs
#: are 1-1.4 % faster at M = 1 while equal at M = 8 (NOTES.md entry 71), which a run at M = 8
#: alone cannot see. Above 256 rows a bucket is measured at its lower rows as well: winners
#: at 512 or 1024 rows alone included grids capped at one or two CTAs per column (``_c1``,
#: ``_c2``), which at fewer row slabs leave SMs idle (8-11 % slower at 384 rows, 16-26 % at
#: 640), and the open bucket's lost 8 % at 2048 (NOTES.md entry 86). The buckets 65..128 and
#: 129..192 were measured at 96 and 160 as well: two winners at 128 rows alone ran 0.5-1.8 %
#: slower at 96 than the entries they replaced (NOTES.md entry 91). Entry 104 split 65..96 off
#: (96-row slabs, measured at 80 and 96; 97..128 at 112 and 128), and entry 107 each of those
#: in two of 16 rows (80-, 96-, 112- and 128-row slabs): a bucket of 16 rows is one slab of its
#: height, or two of 64, at every M in it, the same work but for the activations' rows and the
#: outputs', so each is measured at its upper end alone; the measurements at 80 and 112 rows
#: taken before then now score the 65..80 and 97..112 buckets. (Tables tuned before
#: hold fewer M there, their open bucket, then M > 192, measured at 256 rows;
#: ``select_entries`` scores what was measured.)
BUCKET_EXTRA_M = {8: (1,), 192: (160,), 512: (384,), 1 << 30: (640, 2048)}


def bucket_ms(bucket: int) -> tuple:
    """Every M at which the tuner measures ``bucket``, ascending."""
    return tuple(sorted({*BUCKET_EXTRA_M.get(bucket, ()), BUCKET_M[bucket]}))


def device_slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def shipped_path(device_name: str) -> Path:
    return Path(__file__).resolve().parent / "tuned" / f"{device_slug(device_name)}.json"


def toolchain_tag() -> str:
    """CuPy and NVRTC versions: a user's tuned cache is only trusted with the toolchain that
    measured it (another NVRTC can allocate registers differently and change the winner)."""
    import cupy
    from cupy.cuda import nvrtc
    major, minor = nvrtc.getVersion()
    return f"cupy{cupy.__version__}_nvrtc{major}.{minor}"


def cache_path(device_name: str, tag: str | None = None) -> Path:
    """``$MARLIN_CUPY_CACHE`` (default ``~/.cache/marlin_cupy``) ``/tuned/<device>__<toolchain>.json``."""
    root = os.environ.get("MARLIN_CUPY_CACHE") or Path.home() / ".cache" / "marlin_cupy"
    tag = toolchain_tag() if tag is None else tag
    return Path(root) / "tuned" / f"{device_slug(device_name)}__{device_slug(tag)}.json"


def _key(n: int, k: int, group_size: int, bucket: int) -> str:
    return f"{n}x{k}_g{group_size}_m{bucket}"


def table_entries(path: Path) -> dict:
    """The entries of one tuned table file: ``{key: config name}``."""
    try:
        return entry_map(json.loads(Path(path).read_text()))
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"tuned table {path} is not valid ({err}); delete it or re-run "
                         f"python -m marlin_cupy.tune.") from None


def _current_defines() -> dict:
    """``$MARLIN_CUPY_DEFINES`` of this process as a tuned table stores it (JSON keys)."""
    from .kernels import defines
    return json.loads(json.dumps(defines()))


def _table_refusal(table: dict, defines: dict):
    """Why the dispatch of a build with ``defines`` (``_current_defines``) must not read a tuned
    table (dict), or None: a table tuned on an experimental build (its ``kernel_defines``,
    ``$MARLIN_CUPY_DEFINES`` when it was tuned) is only read by a build with the same
    switches; a table of the shipped build (none) by any."""
    tuned_under = table.get("kernel_defines") or {}
    if tuned_under and tuned_under != defines:
        return (f"it was tuned under MARLIN_CUPY_DEFINES {tuned_under}, and this build has "
                f"{defines or 'none (the shipped build)'}")
    return None


def _unusable_entries(entries: dict) -> dict:
    """``{key: why}`` of the ``entries`` ({key: config name}) whose name does not parse or
    names an invalid config (a cache written by an older version of the package)."""
    out = {}
    for key, name in entries.items():
        try:
            problems = KernelConfig.from_name(name).problems()
        except (ValueError, TypeError) as err:
            problems = [str(err)]
        if problems:
            out[key] = "; ".join(problems)
    return out


def _usable_entries(path: Path, entries: dict) -> dict:
    """``entries`` but the ``_unusable_entries``, each named in one warning, so that a stale
    cache costs its stale entries (the heuristic serves them), not the dispatch."""
    bad = _unusable_entries(entries)
    for key, why in bad.items():
        warnings.warn(f"tuned table {path}: entry {key} names config {entries[key]!r}, which "
                      f"this version cannot run ({why}); the entry is skipped (re-run python -m "
                      f"marlin_cupy.tune to replace it)", stacklevel=3)
    return {key: name for key, name in entries.items() if key not in bad}


def loaded_tables(device_name: str, defines: dict | None = None) -> list:
    """The tuned table files the dispatch reads for a device, in the order ``load_table``
    applies them (the shipped table, then the user's cache, which wins): ``[(source, path,
    table dict, sha256 of the file's bytes), ...]``, ``source`` being ``"shipped"`` or
    ``"user_cache"``. A table tuned under other ``$MARLIN_CUPY_DEFINES`` than ``defines``
    (default: this process's) is left out, with a warning naming it and its defines."""
    import hashlib
    defines = _current_defines() if defines is None else defines
    out = []
    for source, path in (("shipped", shipped_path(device_name)),
                         ("user_cache", cache_path(device_name))):
        if not path.is_file():
            continue
        data = Path(path).read_bytes()
        try:
            table = json.loads(data)
            entry_map(table)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"tuned table {path} is not valid ({err}); delete it or re-run "
                             f"python -m marlin_cupy.tune.") from None
        why = _table_refusal(table, defines)
        if why is not None:
            warnings.warn(f"tuned table {path} is not used: {why}", stacklevel=3)
            continue
        out.append((source, path, table, hashlib.sha256(data).hexdigest()))
    return out


#: ``table_provenance`` of each (device, defines) as ``load_table`` last loaded it.
_PROVENANCE: dict = {}


def load_table(device_name: str) -> dict:
    """Tuned entries for a device: ``{key: config name}``, the user's cache over the shipped one
    (``loaded_tables``: a table tuned under other ``$MARLIN_CUPY_DEFINES`` is skipped; so is an
    entry whose config no longer parses or validates, ``_usable_entries``, each with a warning).
    Loaded once per device and ``$MARLIN_CUPY_DEFINES`` (``load_table.cache_clear()`` reloads)."""
    return _load_table(device_name, json.dumps(_current_defines(), sort_keys=True))


@functools.lru_cache(maxsize=None)
def _load_table(device_name: str, defines: str) -> dict:
    table, provenance = {}, []
    for source, path, loaded, sha256 in loaded_tables(device_name, json.loads(defines)):
        usable = _usable_entries(path, entry_map(loaded))
        table.update(usable)
        provenance.append({"source": source, "path": str(path), "sha256": sha256,
                           "entries": len(usable)})
    _PROVENANCE[(device_name, defines)] = provenance
    return table


load_table.cache_clear = _load_table.cache_clear


def table_provenance(device_name: str) -> list:
    """The tuned tables the default dispatch serves ``device_name`` from, as ``load_table``
    loaded them (a benchmark record names them beside its ``marlin`` rows): ``[{"source":
    "shipped" or "user_cache", "path", "sha256" of the file, "entries": those it uses}, ...]``,
    shipped first; empty where the dispatch has no table (the heuristic serves)."""
    load_table(device_name)
    key = (device_name, json.dumps(_current_defines(), sort_keys=True))
    return [dict(p) for p in _PROVENANCE.get(key, [])]


def lookup(device_name: str, m: int, n: int, k: int, group_size: int):
    """The tuned config for a problem, or None (then the heuristic decides): the entry of the
    smallest bucket >= M that the table has (tables written before the M <= 8 bucket existed
    still serve M <= 8 from their 16-row entry).

    Only an entry measured at this group size is used: a tile tuned for g128 can spill or lose
    its edge at g32, so other group sizes are not guessed from it. The fallback to a taller
    bucket also serves a layer tuned at some buckets only (``--buckets``) at the smaller ones,
    and pairs a re-tune withdrew (``withdraw_pairs``) as their base served them: the shipped
    tables hold every layer at every bucket.
    """
    return lookup_in(load_table(device_name), m, n, k, group_size)


def lookup_in(table: dict, m: int, n: int, k: int, group_size: int):
    """``lookup`` in the entries ``table`` (``load_table`` or ``table_entries``)."""
    for b in M_BUCKETS[M_BUCKETS.index(m_bucket(m)):]:
        name = table.get(_key(n, k, group_size, b))
        if name is not None:
            return KernelConfig.from_name(name)
    return None


def entry_map(table: dict) -> dict:
    """A tuned table's (dict's) entries as ``lookup_in`` takes them: ``{key: config name}``."""
    return {_key(e["n"], e["k"], e["group_size"], e["m_bucket"]): e["config"]
            for e in table.get("entries", [])}


def served(table: dict, n: int, k: int, bucket: int, group_size: int):
    """The config that ``table``'s entries serve at ``bucket``'s M (``lookup_in``: the entry of
    the smallest bucket >= it that the table holds; for a bucket the table predates, a taller
    bucket's), or None."""
    return lookup_in(entry_map(table), BUCKET_M[bucket], n, k, group_size)


@functools.lru_cache(maxsize=None)
def _shipped_measurements(device_name: str) -> tuple:
    path = shipped_path(device_name)
    return tuple(json.loads(path.read_text())["measurements"]) if path.is_file() else ()


def measured_configs(device_name: str, m: int, n: int, k: int, top: int) -> list:
    """The ``top`` fastest configs, fastest first, that the shipped table's tuner run measured
    for (N, K) at M's bucket (probe scripts time them next to the dispatched config)."""
    rows = [r for r in _shipped_measurements(device_name)
            if r["k"] == k and r["n"] == n and m_bucket(r["m"]) == m_bucket(m)]
    top_m = max((r["m"] for r in rows), default=None)    # the bucket's upper M: one row each
    rows = sorted((r for r in rows if r["m"] == top_m), key=lambda r: r["median_us"])
    return [KernelConfig.from_name(r["config"]) for r in rows[:top]]


def probe_configs(device_name: str, m: int, n: int, k: int, group_size: int, top: int) -> list:
    """The config ``matmul`` dispatches for (M, N, K), then the ``top`` fastest that the
    shipped table measured there (``measured_configs``), without repeats, each one that fits
    the layer and M: what the probe scripts time."""
    from .ops import plan
    cfgs = dict.fromkeys([plan(m, n, k, group_size).config]
                         + measured_configs(device_name, m, n, k, top))
    return [c for c in cfgs if not (n % c.tile_n or k % c.tile_k)
            and (c.max_m is None or m <= c.max_m)]


def spills(cfg: KernelConfig, arch: str | None = None) -> bool:
    """Whether the instance spills registers: on the current GPU, or compiled offline for ``arch``.

    Spilling configs are never chosen, however they time: spill traffic makes them fragile
    (another compiler version, another input size) and CI rejects them.
    """
    if arch is None:
        from .ops import device_facts, kernel_resources
        limit = device_facts()["smem_optin"]
        return any(kernel_resources(cfg, zp)["spill_bytes"] > 0 for zp in (False, True)
                   if cfg.smem_bytes(zp) <= limit)
    from . import jit, kernels
    return any(max(r.spill_store_bytes, r.spill_load_bytes) > 0 for zp in (False, True)
               for r in jit.compile_offline(kernels.marlin_source(cfg, zp), arch + cfg.arch_suffix)[1])


def column_variants(cfg: KernelConfig, m: int, n: int, k: int, full: int) -> list:
    """``cfg`` with each cap of ``TUNE_COLUMN_CTAS`` whose grid at M (``column_grid``) is at
    least ``TUNE_COLUMN_MIN_SHARE`` of ``full`` (the persistent grid: SMs x resident CTAs per SM)
    and below it and below the layer's units (else the cap changes nothing)."""
    if cfg.column_ctas:
        return []
    out = []
    for ctas in TUNE_COLUMN_CTAS:
        capped = cfg.with_(column_ctas=ctas)
        grid = capped.column_grid(m, n)
        units = grid // ctas * (k // cfg.tile_k)        # whole columns x units per column
        if full * TUNE_COLUMN_MIN_SHARE <= grid < min(full, units) and not capped.problems():
            out.append(capped)
    return out


def heuristic_passes_over(cfg: KernelConfig) -> bool:
    """Whether the sm_90 heuristic's rule (``heuristic_rule``) leaves ``cfg`` out whatever it
    measured: ``mma.sync`` tiles of 256 threads with two CTAs per SM, held to 128 registers,
    spill at some group size or with zero points (sm_90, NVRTC 13: ten such tiles that the
    tuner measured at g128 spill 16-168 bytes at g32, g64 or per-channel; NOTES.md entry 81),
    which CI refuses for anything the dispatch can pick."""
    return not cfg.wgmma and cfg.blocks_per_sm == 2 and cfg.launch_threads >= 256

#: The tile classes of the sm_90 heuristic, in the order it tries them: (tile_n, the tile_k it
#: allows, only the parallel reduction). A problem whose K is no multiple of 128 takes the
#: second, one whose N is no multiple of 256 the third. That N is in practice a small model's
#: (896, 1152: every column shared by many CTAs), where the serial chain took 2-4x the time
#: of the parallel reduction (NOTES.md entry 81, ``n128_candidates``), so the third class
#: takes only ``fp32par`` configs; and its K too is often no multiple of 256 (896), so its
#: tiles are at most 128 deep.
HEURISTIC_TILES = ((256, (128,), False), (256, (64,), False), (128, (64, 128), True))


def _uncapped_times(measurements, keep) -> dict:
    """{(M, N, K): {config: fastest median_us}} of the ``measurements`` that ``keep`` accepts,
    those on capped grids (``column_ctas``) left out: what ``heuristic_rule`` and
    ``prior_scores`` compare configs by."""
    times = {}
    for r in measurements:
        if not keep(r) or KernelConfig.from_name(r["config"]).column_ctas:
            continue
        t = times.setdefault((r["m"], r["n"], r["k"]), {})
        t[r["config"]] = min(t.get(r["config"], r["median_us"]), r["median_us"])
    return times


def heuristic_rule(measurements, exclude=(), layers=None) -> dict:
    """The compute capability 9.0 heuristic (``config.SM90_HEURISTIC``) from a tuner run's
    ``measurements`` (the shipped H200 table's): for every M bucket, at the largest of its M
    (``bucket_ms``) that the measurements hold (a table tuned before the open bucket was
    measured at 640 and 2048 holds 1024 alone there), and for every tile class of
    ``HEURISTIC_TILES`` (its tile, and the parallel reduction where the class asks for it),
    the config with the smallest geometric mean of its slowdowns against each layer's fastest config, among those
    measured on the most layers (every layer where any is), but those named in ``exclude`` and
    those ``heuristic_passes_over``. Names are the g128 ones; a class with no candidate is left
    out. Measurements on capped grids (``column_ctas``) are left out: whether to cap is
    ``config.whole_columns``' rule. ``layers``: only these (K, N) (the shipped rule is fitted
    on the twelve llama2 layers, which a full run measured; other models' layers were tuned on
    a ranked few candidates, ``--prior``). Returns {bucket: (name, ...)}."""
    import math
    times = _uncapped_times(measurements, lambda r: layers is None or (r["k"], r["n"]) in layers)
    measured_ms = {key[0] for key in times}
    rule = {}
    for bucket in BUCKET_M:
        held = [m for m in bucket_ms(bucket) if m in measured_ms]
        if not held:
            continue
        pairs = {key: t for key, t in times.items() if key[0] == held[-1]}
        best = {key: min(t.values()) for key, t in pairs.items()}
        names = []
        for tile_n, tile_ks, par_only in HEURISTIC_TILES:
            scored = {}
            for key, t in pairs.items():
                for name, us in t.items():
                    cfg = KernelConfig.from_name(name)
                    if name in exclude or cfg.tile_n != tile_n or cfg.tile_k not in tile_ks \
                            or (par_only and not cfg.parallel_reduce) \
                            or heuristic_passes_over(cfg):
                        continue
                    scored.setdefault(name, []).append(math.log(us / best[key]))
            if scored:
                most = max(len(v) for v in scored.values())
                names.append(min((sum(v) / len(v), name) for name, v in scored.items()
                                 if len(v) == most)[1])
        rule[bucket] = tuple(names)
    return rule


def parse_buckets(text: str) -> tuple:
    """``"8,16"`` -> ``(8, 16)``; ``"rest"`` names the open bucket; empty: every bucket."""
    if not text.strip():
        return M_BUCKETS
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        b = M_BUCKETS[-1] if item == "rest" else int(item) if item.isdigit() else None
        if b not in M_BUCKETS:
            raise ValueError(f"unknown M bucket {item!r}: the buckets are "
                             f"{', '.join(str(x) for x in M_BUCKETS[:-1])} and 'rest'")
        out.append(b)
    return tuple(dict.fromkeys(out))


#: Why a tuned pair that the run measured nothing for is withdrawn (``merge_tables``).
UNMEASURED = "no config was measured there (every candidate was filtered out or could not run)"


def merge_tables(base: dict, new: dict, shapes, buckets, keep_within: float = 0.0) -> dict:
    """``base`` with the (layer, bucket) pairs that ``new`` tuned replaced by ``new``'s
    measurements and entries; everything else, and ``base``'s other keys, kept. The result
    carries ``new``'s provenance (commit, date, versions) and names the merged pairs, with
    ``base``'s own merge record under ``earlier``. With ``keep_within`` (a fraction) a pair
    keeps the config ``base`` served there (``served``) where ``new`` measured it at most that
    much slower than its winner; the incumbents are stored with the rule (``base``'s stored ones too, for the pairs
    this merge leaves alone), so that ``--reselect`` applies it again. A tuned pair that
    ``new`` measured nothing for (``--narrow`` with ``--no-wgmma`` can filter out every
    candidate) is withdrawn (``withdraw_pairs``, reason ``UNMEASURED``): kept as ``base``
    held it, never emptied."""
    tuned = {(n, k, b) for (k, n) in shapes for b in buckets}

    def key_m(r):
        return (r["n"], r["k"], m_bucket(r["m"]))

    def key_e(e):
        return (e["n"], e["k"], e["m_bucket"])

    out = dict(base)
    for field in ("date", "git_commit", "git_dirty", "versions", "kernel_defines", "method",
                  "served_unmeasurable"):
        if field in new:
            out[field] = new[field]
        else:
            out.pop(field, None)
    out["measurements"] = [r for r in base["measurements"] if key_m(r) not in tuned] + \
        new["measurements"]
    new_entries = new["entries"]
    # The incumbent of a tuned pair is what base served there: its entry of that bucket, or,
    # for a bucket base predates, of the next taller one it holds (entry 107: the 97..112
    # bucket's winners were compared with neither, and two ran 3-5 % slower than the 97..128
    # entry that served those M before).
    group_size = new_entries[0]["group_size"] if new_entries else None
    incumbents = {}
    if group_size is not None:
        for (n, k, b) in sorted(tuned):
            cfg = served(base, n, k, b, group_size)
            if cfg is not None:
                incumbents[(n, k, b)] = cfg.name
    if keep_within > 0 and new_entries:
        new_entries = select_entries(new["measurements"], group_size,
                                     incumbents=incumbents, keep_within=keep_within)
    out["entries"] = [e for e in base["entries"] if key_e(e) not in tuned] + new_entries
    out.pop("reselected", None)
    out["merged"] = {"base_git_commit": base.get("git_commit"), "base_date": base.get("date"),
                     "buckets": list(buckets), "layers": sorted({(k, n) for (k, n) in shapes})}
    if new.get("narrow"):
        # A narrow re-tune: the pairs' measurements are now those few configs' alone.
        out["merged"]["narrow"] = new["narrow"]
    if new.get("prior"):
        # New layers measured on the candidates base's measurements rank (prior_candidates).
        out["merged"]["prior"] = new["prior"]
    # Incumbents of earlier merges whose pairs this one leaves alone keep their rule.
    prev, prev_keep = stored_incumbents(base)
    kept = [{"n": n, "k": k, "m_bucket": b, "config": name,
             "keep_within": prev_keep[(n, k, b)]}
            for (n, k, b), name in (prev or {}).items() if (n, k, b) not in tuned]
    if keep_within > 0:
        kept += [{"n": n, "k": k, "m_bucket": b, "config": name, "keep_within": keep_within}
                 for (n, k, b), name in incumbents.items()]
    if kept:
        out["merged"]["incumbents"] = kept
    if keep_within > 0:
        out["merged"]["keep_within"] = keep_within
    if base.get("merged"):
        out["merged"]["earlier"] = base["merged"]
    unmeasured = tuned - {key_m(r) for r in new["measurements"]}
    if unmeasured:
        out = withdraw_pairs(out, base, dict.fromkeys(sorted(unmeasured), UNMEASURED))
    return out


def into_cache(table: dict, path: Path, shapes, buckets) -> tuple:
    """``(what to write over the user cache at path, a line saying what became of it)``: a
    table tuned without ``--out`` joins what the cache already holds for the same device and
    group size (its other layers and buckets kept, the tuned ones replaced: ``merge_tables``),
    so that tuning one model after another keeps both; a cache of another device or group size,
    or one that cannot be read, is replaced (a cache holds one group size)."""
    if not path.is_file():
        return table, "a new cache"
    try:
        old = json.loads(path.read_text())
        old_gs = {e["group_size"] for e in old["entries"]}
        old["measurements"]
    except (ValueError, KeyError, TypeError):
        return table, "replaced a cache that could not be read"
    new_gs = {e["group_size"] for e in table["entries"]}
    if old.get("device_name") != table.get("device_name") or old_gs != new_gs:
        return table, (f"replaced the cache's table for {old.get('device_name')!r} at group "
                       f"size(s) {sorted(old_gs)} (a cache holds one device and group size; "
                       f"tune with --out to keep another)")
    old_defines, new_defines = old.get("kernel_defines") or {}, table.get("kernel_defines") or {}
    if old_defines != new_defines:
        # Merged, the old build's entries would carry the new build's label and be served to
        # it (merge_tables takes new's kernel_defines).
        return table, (f"replaced the cache's table, tuned under MARLIN_CUPY_DEFINES "
                       f"{old_defines or 'none (the shipped build)'}, since this run's build has "
                       f"{new_defines or 'none (the shipped build)'} (a cache holds one build; "
                       f"tune with --out to keep another)")
    merged = merge_tables(old, table, shapes, buckets)
    kept = len(merged["entries"]) - len(table["entries"])
    return merged, f"kept the cache's {kept} other entries"


def stored_incumbents(table: dict):
    """``(incumbents, keep_within)`` of a table merged with ``--keep-within`` (else None, {}):
    {(N, K, bucket): config} and {(N, K, bucket): fraction}. Each incumbent names its own
    fraction; those of tables merged before it did, the merge's ``keep_within``."""
    merged = table.get("merged") or {}
    default = float(merged.get("keep_within") or 0.0)
    inc, keep = {}, {}
    for e in merged.get("incumbents", []):
        frac = float(e.get("keep_within", default))
        if frac > 0:
            key = (e["n"], e["k"], e["m_bucket"])
            inc[key], keep[key] = e["config"], frac
    return (inc, keep) if inc else (None, {})


#: A measurement more than this many times the same config's at the same M in the table a
#: re-tune starts from is a stall of the run, not the config (entry 107: three of 4.6-5.2x,
#: 65-69 µs against 13-14, in one narrow re-tune of 5503 timings; the others within 0.94-1.2x).
GLITCH_RATIO = 3.0


def suspect_pairs(base: dict, new: dict, shapes, buckets, glitch: float = GLITCH_RATIO) -> dict:
    """``{(N, K, bucket): why}``: the pairs a re-tune tuned (``new``, merged onto ``base`` or
    not) whose outcome is not to be trusted: it measured nothing there (``UNMEASURED``: no
    rows in ``new``, or a merge withdrew the pair for it); the config ``base`` served there
    (``served``) was not measured at the bucket's M, so the winner never met it (unless the
    run found it unmeasurable: ``served_unmeasurable``, a spill or CTAs that do not fit); or a
    config took more than ``glitch`` times its time in ``base`` at the same M (a stall during
    the run)."""
    old = {(r["n"], r["k"], r["m"], r["config"]): r["median_us"] for r in base["measurements"]}
    times = {}
    for r in new["measurements"]:
        times.setdefault((r["n"], r["k"], m_bucket(r["m"])), []).append(r)
    group_size = new["entries"][0]["group_size"] if new.get("entries") else None
    # served configs the run could not measure (they spill with this toolchain, or their CTAs
    # do not fit the SM: ``tune``), whose pairs may take the winner
    unmeasurable = {(e["n"], e["k"], e["m_bucket"]) for e in new.get("served_unmeasurable", [])}
    # pairs the run measured nothing for: no rows in ``new``, or, merged, withdrawn by the merge
    withdrawn = {(w["n"], w["k"], w["m_bucket"]): w["why"]
                 for w in (new.get("merged") or {}).get("withdrawn", [])}
    out = {}
    for (k, n) in shapes:
        for b in buckets:
            rows = times.get((n, k, b), [])
            if withdrawn.get((n, k, b)) == UNMEASURED or not rows:
                out[(n, k, b)] = UNMEASURED
                continue
            now = served(base, n, k, b, group_size) if group_size else None
            at_m = {r["config"] for r in rows if r["m"] == BUCKET_M[b]}
            slow = [r for r in rows if (r["n"], r["k"], r["m"], r["config"]) in old
                    and r["median_us"] > glitch * old[(r["n"], r["k"], r["m"], r["config"])]]
            if now is not None and now.name not in at_m and (n, k, b) not in unmeasurable:
                out[(n, k, b)] = f"the config served before, {now.name}, was not measured"
            elif slow:
                r = slow[0]
                was = old[(r["n"], r["k"], r["m"], r["config"])]
                out[(n, k, b)] = (f"{r['config']} took {r['median_us']:.1f} us at M = {r['m']} "
                                  f"against {was:.1f} before (a stall)")
    return out


def withdraw_pairs(table: dict, base: dict, pairs: dict) -> dict:
    """``table`` (a merge onto ``base``) with ``pairs`` ({(N, K, bucket): why}, ``suspect_pairs``)
    as ``base`` held them: its measurements, entry and stored incumbent there (none where base
    predates the bucket: the dispatch then serves those M from the next bucket, as before), the
    pairs listed with their reasons under ``merged.withdrawn``, so that a later re-tune takes
    them up again."""
    def key(r):
        return (r["n"], r["k"], r["m_bucket"] if "m_bucket" in r else m_bucket(r["m"]))

    out = dict(table)
    out["measurements"] = [r for r in table["measurements"] if key(r) not in pairs] + \
        [r for r in base["measurements"] if key(r) in pairs]
    out["entries"] = [e for e in table["entries"] if key(e) not in pairs] + \
        [e for e in base["entries"] if key(e) in pairs]
    merged = dict(out.get("merged") or {})
    base_inc, base_keep = stored_incumbents(base)
    merged["incumbents"] = [e for e in merged.get("incumbents", []) if key(e) not in pairs] + \
        [{"n": n, "k": k, "m_bucket": b, "config": name, "keep_within": base_keep[(n, k, b)]}
         for (n, k, b), name in (base_inc or {}).items() if (n, k, b) in pairs]
    # a pair already withdrawn (by ``merge_tables``, for want of rows) is listed once
    listed = {key(w) for w in merged.get("withdrawn", [])}
    merged["withdrawn"] = merged.get("withdrawn", []) + \
        [{"n": n, "k": k, "m_bucket": b, "why": why} for (n, k, b), why in sorted(pairs.items())
         if (n, k, b) not in listed]
    out["merged"] = merged
    return out


def select_entries(measurements, group_size: int, allowed=lambda cfg: True,
                   incumbents=None, keep_within=0.0) -> list:
    """The fastest allowed config per (N, K, M bucket) among stored measurements; or, with
    ``incumbents`` ({(N, K, bucket): config name}, the entries of the table a re-tune
    started from), the incumbent where it is allowed and was measured at most ``keep_within``
    (a fraction, or {(N, K, bucket): fraction} as ``stored_incumbents`` gives) slower than the
    fastest in the same run: a winner by less than the run's noise does not replace it
    (NOTES.md entry 70).

    Where a bucket was measured at more than one M (``BUCKET_EXTRA_M``), a config is scored by
    its times summed over every M measured there, and only configs measured at all of them
    compete. The entry then names those M (``ms``) and the sum (``summed_us``); its ``m`` and
    ``median_us`` are the largest M measured there and the time at it."""
    times = {}                                  # (n, k, bucket) -> config -> {m: median_us}
    for r in measurements:
        key = (r["n"], r["k"], m_bucket(r["m"]))
        times.setdefault(key, {}).setdefault(r["config"], {})[r["m"]] = r["median_us"]
    out = []
    for (n, k, b), by_cfg in times.items():
        ms = sorted({m for per_m in by_cfg.values() for m in per_m})
        scored = {name: sum(per_m[m] for m in ms) for name, per_m in by_cfg.items()
                  if len(per_m) == len(ms)}
        # fastest first; ``allowed`` (an offline compile for --reselect) asked only until
        # one passes
        best = next((name for name in sorted(scored, key=scored.get)
                     if allowed(KernelConfig.from_name(name))), None)
        if best is None:
            continue
        inc = (incumbents or {}).get((n, k, b))
        frac = keep_within.get((n, k, b), 0.0) if isinstance(keep_within, dict) else keep_within
        if frac > 0 and inc in scored and scored[inc] <= scored[best] * (1 + frac) \
                and allowed(KernelConfig.from_name(inc)):
            best = inc
        entry = {"n": n, "k": k, "group_size": group_size, "m_bucket": b, "m": ms[-1],
                 "config": best, "median_us": by_cfg[best][ms[-1]]}
        if len(ms) > 1:
            entry.update(ms=ms, summed_us=scored[best])
        out.append(entry)
    return out


def tested_kernels(table: dict) -> set:
    """The kernels whose GPU tests ran at the commit that shipped ``table``: its entries', the
    instantiated table's and the compute capability 9.0 heuristic's (``tests/test_kernel_gpu.py``
    runs every one of them, ``DISPATCHABLE``), each as ``KernelConfig.compiled``, the build
    without host-side launch fields. A grid cap (``_c1``, ``_c2``) is such a field: the same
    kernel on fewer CTAs, whose caps the GPU tests check on their own (``TestColumnCtas``)."""
    from .config import INSTANTIATED, SM90_INSTANTIATED
    return ({KernelConfig.from_name(e["config"]).compiled for e in table.get("entries", [])}
            | {c.compiled for c in (*INSTANTIATED, *SM90_INSTANTIATED)})


def restrict_to_tested(table: dict, tested_table: dict, allowed=lambda cfg: True) -> list:
    """Choose ``table``'s entries again from its stored measurements, only among the kernels
    ``tested_kernels(tested_table)`` names (and ``allowed``; the stored keep-within incumbents
    kept as ``select_entries`` keeps them): a re-tune that ships no kernel the GPU tests have not
    run (NOTES.md entries 86 and 91). The table records it under ``restricted_to_tested``.
    Returns the pairs whose entry differs from the choice without that restriction, as
    ``(n, k, bucket, fastest untested config, chosen config)``. Raises ``ValueError`` where a
    pair's measurements hold no tested kernel (its entry would be lost)."""
    tested = tested_kernels(tested_table)
    if not table.get("entries"):
        raise ValueError("the table holds no entries to restrict")
    group_size = table["entries"][0]["group_size"]
    inc, keep = stored_incumbents(table)

    def key(e):
        return (e["n"], e["k"], e["m_bucket"])

    free = {key(e): e for e in select_entries(table["measurements"], group_size, allowed,
                                              inc, keep)}
    kept = {key(e): e for e in select_entries(table["measurements"], group_size,
                                              lambda c: c.compiled in tested and allowed(c),
                                              inc, keep)}
    lost = sorted(set(free) - set(kept))
    if lost:
        raise ValueError(f"no tested kernel was measured for (N, K, bucket) {lost}: re-tune "
                         f"them with the incumbents measured, or test the new kernels")
    changed = [(*k, free[k]["config"], kept[k]["config"]) for k in sorted(kept)
               if free[k]["config"] != kept[k]["config"]]
    table["entries"] = list(kept.values())
    table["restricted_to_tested"] = {"tested_table_commit": tested_table.get("git_commit"),
                                     "passed_over": [list(c) for c in changed]}
    return changed


def write_table(path: Path, table: dict) -> None:
    """Write a tuned table as JSON with one entry and one measurement per line (the shipped
    H200 table holds about 50,000 measurements: a fifth smaller than indented JSON, and a
    re-tune's diff names the rows it changed)."""
    members = []
    for key, value in table.items():
        if key in ("entries", "measurements") and value:
            lines = ",\n".join("  " + json.dumps(r, separators=(", ", ": ")) for r in value)
            members.append(f" {json.dumps(key)}: [\n{lines}\n ]")
        else:
            nested = json.dumps(value, indent=1).replace("\n", "\n ")
            members.append(f" {json.dumps(key)}: {nested}")
    Path(path).write_text("{\n" + ",\n".join(members) + "\n}\n")


def device_measurements(device_name: str, group_size: int) -> dict:
    """``{"measurements": [...]}``: what this device's tables measured at ``group_size``, the
    shipped table's and the user cache's (``--prior`` without ``--merge`` ranks by them); a
    table of another group size, or one that cannot be read, adds nothing."""
    rows = []
    for path in (shipped_path(device_name), cache_path(device_name)):
        if not path.is_file():
            continue
        try:
            table = json.loads(path.read_text())
            sizes = {e["group_size"] for e in table["entries"]}
            if table.get("device_name") == device_name and sizes == {group_size}:
                rows += table["measurements"]
        except (ValueError, KeyError, TypeError):
            continue
    return {"measurements": rows}


def _fits(cfg: KernelConfig, n: int, k: int, smem_limit: int) -> bool:
    """Valid, tiles divide the layer, and fits the device's shared memory."""
    if cfg.problems() or n % cfg.tile_n or k % cfg.tile_k:
        return False
    try:
        cfg.validate(smem_limit)
    except ValueError:
        return False
    return True


def candidates(m: int, n: int, k: int, group_size: int, smem_limit: int, wgmma: bool = False,
               parallel_reduce: bool = False, early_bottom: bool = False,
               top_sum: bool = False):
    mb = min(MAX_M_BLOCKS, max(1, -(-m // 16)))
    g = group_blocks_for(group_size, k)
    # Swapped operands serve up to 8 (swap_ab=1) or 16 rows per slab (swap_ab=2).
    swaps = (0, 1, 2) if m <= 8 else (0, 2) if m <= 16 else (0,)
    out = []
    for threads, nb, kb in TUNE_SHAPES:
        for blocks, stages in TUNE_BLOCKS_PER_SM:
            if blocks > 1 and mb > 2:
                continue
            for st in stages:
                for swap in swaps:
                    cfg = KernelConfig(threads, mb, nb, kb, st, g, True, blocks, swap)
                    if _fits(cfg, n, k, smem_limit):
                        out.append(cfg)
    if wgmma:
        shapes = [(t, nb, kb, 0, TUNE_WGMMA_BLOCKS_PER_SM[t]) for t, nb, kb in TUNE_WGMMA_SHAPES]
        if m > 16:
            shapes += [(t, nb, kb, wn, TUNE_NARROW_BLOCKS_PER_SM[t])
                       for t, nb, kb, wn in TUNE_WGMMA_NARROW]
        for threads, nb, kb, wn, per_sm in shapes:
            for swap in TUNE_WGMMA_SWAPS.get(m_bucket(m), ()):
                for blocks, stages in per_sm:
                    for st in stages:
                        cfg = KernelConfig(threads, max(1, swap // 2), nb, kb, st, g, True,
                                           blocks, swap, wgmma=True, warp_n=wn)
                        if _fits(cfg, n, k, smem_limit):
                            out.append(cfg)
                        ws = cfg.with_(producer=True)
                        if TUNE_PRODUCER and not ws.problems() and _fits(ws, n, k, smem_limit):
                            out.append(ws)
    if parallel_reduce:
        # Each candidate again with the parallel cross-CTA reduction: it wins where many CTAs
        # share a column (deep K, narrow N) and loses a little where two do (NOTES.md entry 12).
        out += [c.with_(parallel_reduce=True) for c in out if c.fp32_reduce]
    if early_bottom:
        # Each candidate that can take it again with the early bottom (NOTES.md entry 69): its
        # builds schedule the main loop differently, so which is faster is the layer's.
        out += [e for e in (c.with_(early_bottom=True) for c in out) if not e.problems()]
    if top_sum:
        # Each parallel-reduction candidate that can take it again with the column's top
        # summing (NOTES.md entry 73; it includes the early bottom, so not of the _eb twins).
        out += [t for t in (c.with_(top_sum=True) for c in out if not c.early_bottom)
                if not t.problems()]
    return out


#: The tall wgmma slabs a bucket's narrow re-tune adds to its candidates: the 48-, 80-, 96- and
#: 112-row twins of the configs of other heights measured before those slabs existed.
TALL_TWIN_OF = {48: (6, (4, 8)), 80: (10, (8, 12, 16)), 96: (12, (8, 16)),
                112: (14, (8, 12, 16))}
SM90_SMEM_OPTIN = 232448   # shared memory a block may opt into on H100 / H200 (227 KiB)


def tall_twins(cfg: KernelConfig, bucket: int) -> list:
    """``cfg``'s twin with the bucket's tall wgmma slab (``TALL_TWIN_OF``): the same tile,
    depth, reduction and producer, 8 * swap rows per wgmma, its warps at most 64 columns wide
    for 48 rows and 32 for 80 to 112 (the accumulators), and as many fewer stages as shared
    memory needs (``slab_twin``); empty where none is valid or ``cfg`` is not a wgmma config of
    one of the heights the bucket's twins come from."""
    swap, sources = TALL_TWIN_OF.get(bucket, (None, ()))
    if not cfg.wgmma or cfg.swap_ab not in sources:
        return []
    twin = slab_twin(cfg, swap)
    return [twin] if twin is not None else []


def slab_twin(cfg: KernelConfig, swap: int) -> KernelConfig | None:
    """``cfg`` (a wgmma config) with slabs of 8 * ``swap`` rows: the same tile, depth,
    reduction and producer, its warps as wide as the accumulators allow (columns / 16 x swap
    at most 32) and no wider than cfg's, and as many fewer stages as shared memory needs (for
    zero points too); None where none is valid or cfg is not a wgmma config."""
    if not cfg.wgmma or swap not in WGMMA_SWAPS or swap < 2:
        return None
    # The widest warps within the accumulator bound (KernelConfig.problems: columns / 16 x
    # swap <= 32), no wider than cfg's; warp_n=0 where that width is the swap's default.
    cols = max(c for c in (16, 32, 64) if c <= cfg.warp_cols and c // 16 * swap <= 32)
    twin = cfg.with_(swap_ab=swap, thread_m_blocks=swap // 2, warp_n=cols)
    if twin.with_(warp_n=0).warp_cols == cols:
        twin = twin.with_(warp_n=0)
    for stages in sorted({twin.stages, *(s for s in TUNE_STAGES if s < twin.stages)},
                         reverse=True):
        t = twin.with_(stages=stages)
        if not t.problems() and t.smem_bytes(True) <= SM90_SMEM_OPTIN:
            return t
    return None


def narrow_candidates(table: dict, n: int, k: int, bucket: int, top: int,
                      early_bottom: bool = False, top_sum: bool = False,
                      wide: bool = False) -> list:
    """A narrow re-tune's candidates for one (layer, bucket): the ``top`` configs that
    ``table``'s stored measurements score fastest there (summed over the bucket's M, as
    ``select_entries`` scores), each also without its early bottom and column's top summing,
    and with them where ``early_bottom`` / ``top_sum`` ask and the config can take them (a
    serial chain's config takes the top summing with the parallel reduction). ``wide`` adds
    the 512-thread twins of each of those that runs one CTA of 256 threads per SM in the
    ``mma.sync`` loop (NOTES.md entry 74: that loop is bound by its math at M <= 8): with the
    default warps (K split twice as often) and with 32-column warps (the same split).
    Empty where the table measured nothing for that pair."""
    by_cfg = {}
    for r in table.get("measurements", []):
        if r["n"] == n and r["k"] == k and m_bucket(r["m"]) == bucket:
            by_cfg.setdefault(r["config"], {})[r["m"]] = r["median_us"]
    ms = {m for per_m in by_cfg.values() for m in per_m}
    scored = {name: sum(per_m.values()) for name, per_m in by_cfg.items() if len(per_m) == len(ms)}
    best = [KernelConfig.from_name(name) for name in sorted(scored, key=scored.get)[:top]]
    best += [t for c in best for t in tall_twins(c, bucket)]
    out = []
    for c in best:
        plain = c.with_(early_bottom=False, top_sum=False)
        twins = [plain, c]
        if early_bottom:
            twins.append(plain.with_(early_bottom=True))
        if top_sum:
            # The serial chain's config has no top summing of its own: its twin is the
            # parallel reduction's form with it (the one layer at M <= 8 still on the chain,
            # 8192x57344, had never measured one; NOTES.md entry 74).
            twins.append(plain.with_(top_sum=True, parallel_reduce=True))
        twins = [t for t in twins if not t.problems()]
        if wide:   # 512 threads: K split twice as often, or (warp_n=32) as before
            one_cta = [t for t in twins if t.threads == 256 and t.blocks_per_sm == 1
                       and not t.wgmma and not t.producer and not t.warp_n]
            twins += [w for t in one_cta for w in (t.with_(threads=512),
                                                    t.with_(threads=512, warp_n=32))
                      if not w.problems()]
        out += twins
    return list(dict.fromkeys(out))


#: ``--prior``'s classes: a candidate's tile (columns, depth), reduction and loop. Each class
#: keeps its best-scored configs, so that a small layer, which the prior's large layers' best
#: tiles do not fit (N = 896 takes no 256-wide tile, K = 896 none 256 deep), still gets the
#: best of the tiles that do.
def prior_class(cfg: KernelConfig) -> tuple:
    return (cfg.tile_n, cfg.tile_k, cfg.parallel_reduce, cfg.wgmma)


def prior_scores(measurements, bucket: int) -> dict:
    """{config name: score} for M ``bucket`` from a table's stored ``measurements``: the mean,
    over the bucket's (layer, M) pairs that a full run measured (at least half as many configs
    as the most measured pair: narrow re-tunes' pairs hold a few winners only), of the log of
    the config's time over that pair's fastest; configs measured on fewer than three quarters
    of those pairs, and capped grids (``column_ctas``), are left out. Lower is better; 0 would
    be the fastest everywhere. What ``prior_candidates`` ranks with."""
    import math
    times = _uncapped_times(measurements, lambda r: m_bucket(r["m"]) == bucket)
    if not times:
        return {}
    widest = max(len(t) for t in times.values())
    pairs = [t for t in times.values() if 2 * len(t) >= widest]
    logs = {}
    for t in pairs:
        best = min(t.values())
        for name, us in t.items():
            logs.setdefault(name, []).append(math.log(us / best))
    return {name: sum(v) / len(v) for name, v in logs.items() if 4 * len(v) >= 3 * len(pairs)}


def prior_candidates(scores: dict, m: int, n: int, k: int, group_size: int, smem_limit: int,
                     per_class: int, top: int, sms: int | None = None,
                     cc: str | None = "90") -> list:
    """A layer's candidates ranked by another table's measurements (``prior_scores`` of the
    bucket), for a layer that table never measured: of every candidate that fits (wgmma, both
    reductions, the early-bottom and top-sum twins), the ``top`` best scored, the
    ``per_class`` best of each ``prior_class``, and what the compute capability 9.0 heuristic
    would run without a table (``heuristic_candidates``), so that the tuned entry is never
    one the heuristic beats in the same run. Candidates the prior never measured are left out
    (every tile it ranks was measured on its layers). The prior is a table of the same group
    size (``--merge`` checks it)."""
    every = {c.name: c for c in candidates(m, n, k, group_size, smem_limit, wgmma=True,
                                          parallel_reduce=True, early_bottom=True,
                                          top_sum=True)}
    ranked = sorted((c for c in every.values() if c.name in scores), key=lambda c: scores[c.name])
    out = ranked[:top]
    seen = {}
    for c in ranked:
        cls = prior_class(c)
        if seen.get(cls, 0) < per_class:
            seen[cls] = seen.get(cls, 0) + 1
            out.append(c)
    out += heuristic_candidates(m, n, k, group_size, smem_limit, sms, cc)
    return [c for c in dict.fromkeys(out) if _fits(c, n, k, smem_limit)]


def heuristic_candidates(m: int, n: int, k: int, group_size: int, smem_limit: int,
                         sms: int | None = None, cc: str | None = "90") -> list:
    """What the dispatch would run without a table, uncapped (the tuner adds the caps): the
    compute capability 9.0 heuristic's configs for the bucket (``config.sm90_candidates``) and
    the dispatch's pick for compute capability ``cc`` with ``sms``. ``--prior`` and ``--narrow``
    measure them too, so that a tuned entry is never one the heuristic beats in the same run."""
    from . import config as _config
    heur = _config.sm90_candidates(m, n, k, group_size, smem_limit=smem_limit)
    pick = _config.choose_config(m, n, k, group_size, smem_limit=smem_limit, cc=cc, sms=sms)
    return list(dict.fromkeys(c.with_(column_ctas=0) for c in heur + [pick]))


def narrow_job_candidates(table: dict, n: int, k: int, bucket: int, top: int, group_size: int,
                          smem_limit: int, sms: int | None = None, cc: str | None = "90",
                          early_bottom: bool = False, top_sum: bool = False,
                          wide: bool = False) -> list:
    """What a narrow re-tune measures for one (layer, bucket): ``narrow_candidates``, then
    ``heuristic_candidates`` and their tall twins (``tall_twins``); ``tune`` adds
    ``served_candidates``. The twins of the
    heuristic's configs are measured on every layer, so that ``heuristic_rule`` can choose a
    tall slab for the bucket (it ranks the configs measured on the most layers; the top few's
    twins differ from layer to layer)."""
    picked = narrow_candidates(table, n, k, bucket, top, early_bottom, top_sum, wide)
    heur = heuristic_candidates(BUCKET_M[bucket], n, k, group_size, smem_limit, sms, cc)
    picked += heur + [t for c in heur for t in tall_twins(c, bucket)]
    return list(dict.fromkeys(picked))


def served_candidates(table: dict, n: int, k: int, bucket: int, group_size: int,
                      smem_limit: int) -> list:
    """What every ``--merge`` run measures on a pair besides its own candidates: the config
    ``table`` serves there (``served``, the incumbent ``merge_tables`` keeps within
    ``--keep-within``) and its tall twin, those that fit. The served config is measured even
    where the table's stored measurements of the bucket hold none (a bucket split off a taller
    one: entry 107, where 26 of 35 pairs of 97..112 never measured it)."""
    now = served(table, n, k, bucket, group_size)
    return [] if now is None else [c for c in [now] + tall_twins(now, bucket)
                                   if _fits(c, n, k, smem_limit)]


def tune(shapes, group_size: int = 128, buckets=M_BUCKETS, progress: bool = True,
         wgmma: bool = True, parallel_reduce: bool = True, early_bottom: bool = False,
         top_sum: bool = False, narrow: tuple | None = None, wide: bool = False,
         column_ctas: bool = True, prior: tuple | None = None,
         served_from: dict | None = None) -> dict:
    """Measure every candidate for every (shape, bucket); returns the table as a dict.
    ``wgmma`` adds the sm_90a wgmma candidates (compute capability 9.0 only; on the H200 they
    win on most layers from M = 32 or 48 on: NOTES.md entries 10 and 11). ``parallel_reduce``
    measures every candidate with both cross-CTA reductions (NOTES.md entry 12).
    ``early_bottom`` adds the early-bottom twin of every candidate that can take it (tiles
    below 32 rows: the buckets up to 16; NOTES.md entry 69); ``top_sum`` the twin with the
    column's top summing of every parallel-reduction candidate that can take it (entry 73).
    ``narrow`` = (TABLE, N): measure only ``narrow_job_candidates`` (TABLE's N fastest per
    (layer, bucket) with their variants, ``heuristic_candidates`` and the tall twins),
    instead of every candidate (a re-tune of a few variants, in minutes);
    ``wide`` adds their 512-thread twins there (``narrow_candidates``). ``column_ctas`` also
    measures each candidate on the grid caps of ``column_variants`` (NOTES.md entry 84).
    ``prior`` = (TABLE, PER_CLASS, TOP): on layers TABLE never measured, only
    ``prior_candidates`` ranked by TABLE's measurements (a new model's layers in a fraction
    of a full run's time; NOTES.md entry 85). ``served_from`` (the table a ``--merge`` starts
    from) adds ``served_candidates`` to every pair's, so that a winner is always measured
    against what that table served (entry 107); a served config the run cannot measure is
    named under ``served_unmeasurable``."""
    import cupy as cp
    import numpy as np

    from . import kernels, ops
    from .bench.harness import Timer, bench_stream, random_weight_rotation
    from .records import environment

    facts = ops.device_facts()
    name = facts["name"]
    rng = np.random.default_rng(0)
    wg = bool(wgmma) and facts["cc"] == "90"
    jobs = [(k, n, b) for (k, n) in shapes for b in buckets]
    scores = {b: prior_scores(prior[0]["measurements"], b) for b in buckets} if prior else {}

    now = {(k, n, b): served(served_from, n, k, b, group_size) if served_from else None
           for (k, n, b) in jobs}

    def cands(k, n, b):
        extra = served_candidates(served_from, n, k, b, group_size, facts["smem_optin"]) \
            if served_from else []
        return list(dict.fromkeys(_cands(k, n, b) + [c for c in extra if wg or not c.wgmma]))

    def _cands(k, n, b):
        if prior is not None:
            return [c for c in prior_candidates(scores[b], BUCKET_M[b], n, k, group_size,
                                                facts["smem_optin"], prior[1], prior[2],
                                                facts["sms"], facts["cc"])
                    if wg or not c.wgmma]
        if narrow is not None:
            picked = narrow_job_candidates(narrow[0], n, k, b, narrow[1], group_size,
                                           facts["smem_optin"], facts["sms"], facts["cc"],
                                           early_bottom, top_sum, wide)
            return [c for c in picked
                    if _fits(c, n, k, facts["smem_optin"]) and (wg or not c.wgmma)]
        return candidates(BUCKET_M[b], n, k, group_size, facts["smem_optin"], wg,
                          parallel_reduce, early_bottom, top_sum)

    job_cands = {(k, n, b): cands(k, n, b) for (k, n, b) in jobs}
    kernels.warm_instantiated(os.cpu_count() or 4, {c for cs in job_cands.values() for c in cs})
    entries, rows, unmeasurable = [], [], []
    try:
        from tqdm import tqdm
        bar = tqdm(total=len(jobs), disable=not progress, desc="tuning")
    except ImportError:  # pragma: no cover
        bar = None
    with bench_stream() as stream:
        timer = Timer(stream, budget_ms=15.0, min_reps=10, max_reps=60)
        for (k, n) in shapes:
            mws = random_weight_rotation(k, n, group_size, rng)
            copies = len(mws)
            for b in buckets:
                xs = {m: cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
                      for m in bucket_ms(b)}
                measured = []
                for cfg in job_cands[(k, n, b)]:
                    if spills(cfg) or ops.resident_ctas(cfg) < cfg.blocks_per_sm:
                        if cfg == now[(k, n, b)]:    # suspect_pairs does not wait for it
                            unmeasurable.append({"n": n, "k": k, "m_bucket": b,
                                                 "config": cfg.name})
                        continue
                    measured.append(cfg)
                    if column_ctas:     # the bucket's upper M has the most row slabs
                        measured += column_variants(cfg, BUCKET_M[b], n, k,
                                                    facts["sms"] * cfg.blocks_per_sm)
                for cfg in dict.fromkeys(measured):
                    for m, x in xs.items():      # each M of the bucket; scored summed
                        meas = timer.measure(
                            lambda i: ops.matmul(x, mws[i], config=cfg), copies)
                        rows.append({"n": n, "k": k, "m": m, "config": cfg.name,
                                     "median_us": meas.stats.median_us})
                if bar is not None:
                    bar.update(1)
            del mws
            cp.get_default_memory_pool().free_all_blocks()
    if bar is not None:
        bar.close()
    entries = select_entries(rows, group_size)
    env = environment()
    return {"kind": "tuned_table", "device_name": name, "arch": f"sm_{facts['cc']}", "date": env.get("date"),
            "git_commit": env.get("git_commit"), "git_dirty": env.get("git_dirty"),
            "versions": env.get("versions"),
            **({"kernel_defines": env["kernel_defines"]} if "kernel_defines" in env else {}),
            "method": "CUDA-event median, host ahead via spin kernel, weights rotated past 2x L2",
            **({"narrow": narrow[1]} if narrow is not None else {}),
            **({"prior": {"per_class": prior[1], "top": prior[2]}} if prior is not None else {}),
            **({"served_unmeasurable": unmeasurable} if unmeasurable else {}),
            "entries": entries, "measurements": rows}


def main(argv=None) -> int:
    from .bench.shapes import ALL_SETS, set_shapes
    p = argparse.ArgumentParser(prog="python -m marlin_cupy.tune", description=__doc__.split("\n")[0])
    p.add_argument("--sets", default="llama2-7b,llama2-13b,llama2-70b",
                   help=f"comma-separated shape sets to tune, from {', '.join(ALL_SETS)} "
                        f"(default: the three llama2 sets)")
    p.add_argument("--shapes", default="", help='extra "K,N;K,N" layers')
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--out", help="write the table here (default: the user cache, joined to "
                                 "what it holds for this device and group size)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--wgmma", action=argparse.BooleanOptionalAction, default=True,
                   help="also measure the sm_90a wgmma configs (cc 9.0 only; "
                        "default on)")
    p.add_argument("--parallel-reduce", action=argparse.BooleanOptionalAction, default=True,
                   help="also measure every candidate with the parallel cross-CTA reduction "
                        "(default on; doubles the tuning time)")
    p.add_argument("--early-bottom", action=argparse.BooleanOptionalAction, default=False,
                   help="also measure the early-bottom twin (config suffix _eb) of every "
                        "candidate with tiles below 32 rows (default off; NOTES.md entry 69)")
    p.add_argument("--top-sum", action=argparse.BooleanOptionalAction, default=False,
                   help="also measure the twin with the column's top summing (config suffix "
                        "_ts) of every parallel-reduction candidate with tiles below 32 rows "
                        "(default off; NOTES.md entry 73)")
    p.add_argument("--column-ctas", action=argparse.BooleanOptionalAction, default=True,
                   help="also measure every candidate on grids capped at one or two CTAs per "
                        "column (config suffix _c1, _c2) where that keeps at least a quarter of "
                        "the SMs' CTAs (default on; NOTES.md entry 84)")
    p.add_argument("--reselect", metavar="TABLE",
                   help="re-derive TABLE's entries from its stored measurements, dropping configs "
                        "that spill when compiled offline for --arch (no GPU needed)")
    p.add_argument("--arch", default="sm_90", help="architecture for --reselect")
    p.add_argument("--buckets", default="",
                   help="comma-separated M buckets to tune, by their upper end "
                        f"({', '.join(str(b) for b in M_BUCKETS[:-1])}, or 'rest' for M > "
                        f"{M_BUCKETS[-2]}); default: all. A layer the tables hold at none of M's "
                        "bucket and the smaller ones is served there from the next taller bucket "
                        "it has (a 64-row tile at M = 1, say): tune a new layer at every bucket")
    p.add_argument("--merge", metavar="TABLE",
                   help="with --buckets: start from TABLE and replace only the tuned buckets' "
                        "measurements and entries of the tuned layers (same device and group "
                        "size); a pair where the config TABLE served went unmeasured, or a "
                        "timing stalled, is kept as TABLE held it, and named")
    p.add_argument("--narrow", type=int, default=0, metavar="N",
                   help="with --merge: measure only the N configs that TABLE's stored "
                        "measurements score fastest per tuned pair, with their variants "
                        "(--early-bottom, --top-sum), and the heuristic's configs, instead of "
                        "every candidate")
    p.add_argument("--wide", action="store_true",
                   help="with --narrow: also each candidate's 512-thread twins (64- and "
                        "32-column warps) where it runs one CTA of 256 threads per SM in the "
                        "mma.sync loop (NOTES.md entry 74)")
    p.add_argument("--prior", type=int, default=0, metavar="PER_CLASS",
                   help="tune only the layers that TABLE (--merge), else this device's shipped "
                        "table and user cache, have not measured, each on the candidates their "
                        "measurements rank best in the same bucket (the PER_CLASS best of each "
                        "tile, reduction and loop, the --prior-top best overall, and the "
                        "heuristic's), not every candidate; with --merge --buckets defaults to "
                        "all (NOTES.md entry 85)")
    p.add_argument("--prior-top", type=int, default=12, metavar="TOP",
                   help="with --prior: how many of the best-ranked configs overall (default 12)")
    p.add_argument("--tested", metavar="TABLE",
                   help="choose every entry only among the kernels whose GPU tests ran with "
                        "TABLE shipped: its entries', the instantiated table's and the sm_90 "
                        "heuristic's (a re-tune that needs no new GPU test run; with --reselect "
                        "too; NOTES.md entry 91)")
    p.add_argument("--keep-within", type=float, default=0.0, metavar="PCT",
                   help="with --merge: keep the config TABLE served for a tuned pair (its "
                        "entry there, or a taller bucket's; always measured) where this run "
                        "measured it at most PCT percent slower than the winner (default 0: "
                        "the fastest wins)")
    a = p.parse_args(argv)
    try:
        buckets = parse_buckets(a.buckets)
    except ValueError as e:
        p.error(str(e))
    if a.merge and not a.buckets and not a.prior:
        p.error("--merge needs --buckets (without it the new table replaces TABLE whole)")
    if a.prior and a.narrow:
        p.error("--prior tunes layers TABLE lacks, --narrow re-tunes those it holds: one or the "
                "other")
    if a.prior < 0 or a.prior_top < 0:
        p.error("--prior and --prior-top are counts, at least 0")
    if a.narrow and not a.merge:
        p.error("--narrow needs --merge (the configs come from TABLE's measurements)")
    if a.wide and not a.narrow:
        p.error("--wide needs --narrow (it adds twins to the narrow re-tune's candidates)")
    if a.keep_within and not a.merge:
        p.error("--keep-within needs --merge (the incumbents are TABLE's entries)")
    if a.keep_within < 0:
        p.error("--keep-within is a percentage, at least 0")
    def read_table(option, path):
        """A tuned table file given on the command line, or the parser's error (exit 2)."""
        try:
            table = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            p.error(f"{option}: cannot read {path}: {e}")
        if not isinstance(table, dict) or not table.get("entries") or "measurements" not in table:
            p.error(f"{option}: {path} is not a tuned table (no entries or measurements)")
        return table
    tested_table = read_table("--tested", a.tested) if a.tested else None

    def restricted(table, allowed=lambda cfg: True) -> bool:
        """``restrict_to_tested`` on ``table`` in place, reported; False where it cannot."""
        try:
            changed = restrict_to_tested(table, tested_table, allowed)
        except ValueError as e:
            print(f"marlin_cupy.tune: --tested: {e}", file=sys.stderr)
            return False
        print(f"--tested: {len(changed)} entr(y/ies) took a tested kernel over a faster "
              f"untested one: {changed}")
        return True
    if a.reselect:
        path = Path(a.reselect)
        table = read_table("--reselect", path)
        verdict = {}

        def allowed(cfg):
            if cfg.name not in verdict:
                verdict[cfg.name] = not spills(cfg, a.arch)
            return verdict[cfg.name]

        if tested_table is not None:
            if not restricted(table, allowed):
                return 1
        else:
            incumbents, keep_within = stored_incumbents(table)
            table["entries"] = select_entries(table["measurements"],
                                              table["entries"][0]["group_size"],
                                              allowed, incumbents, keep_within)
        table["reselected"] = {"arch": a.arch, "dropped_spilling": sorted(
            n for n, ok in verdict.items() if not ok)}
        write_table(path, table)
        print(f"{len(table['entries'])} entries; dropped spilling configs: "
              f"{table['reselected']['dropped_spilling']}")
        return 0
    from .records import gpu_unavailable_reason
    reason = gpu_unavailable_reason()
    if reason:
        print(f"marlin_cupy.tune: no GPU ({reason}); nothing was tuned.", file=sys.stderr)
        return 2
    try:
        shapes = set_shapes(a.sets) if a.sets.strip() else []
    except ValueError as e:
        p.error(str(e))
    for item in filter(None, a.shapes.split(";")):
        try:
            k, n = (int(v) for v in item.split(","))
        except ValueError:
            p.error(f"--shapes: {item!r} is not K,N (integers; layers separated by ';')")
        shapes.append((k, n))
    shapes = list(dict.fromkeys(shapes))
    base = None
    if a.merge:
        base = read_table("--merge", a.merge)
        base_gs = {e["group_size"] for e in base["entries"]}
        if base_gs != {a.group_size}:
            p.error(f"--merge: {a.merge} holds group sizes {sorted(base_gs)}, not {a.group_size}")
        from .ops import device_facts
        device = device_facts()["name"]
        if base.get("device_name") != device:   # before minutes of tuning, not after
            p.error(f"--merge: {a.merge} is for {base.get('device_name')!r}, this device is "
                    f"{device!r}")
    prior_table, prior_name = base, a.merge
    if a.prior and base is None:
        # The device's own tables rank the candidates: the shipped one and the user's cache.
        from .ops import device_facts
        device = device_facts()["name"]
        prior_table, prior_name = device_measurements(device, a.group_size), "this device's tables"
        if not prior_table["measurements"]:
            p.error(f"--prior: no tuned table for {device!r} at group size {a.group_size} to "
                    f"rank candidates by (the shipped tables are group size 128); tune without "
                    f"--prior, or give --merge TABLE")
    if a.prior:
        held = {(r["k"], r["n"]) for r in prior_table["measurements"]}
        kept = [s for s in shapes if s in held]
        shapes = [s for s in shapes if s not in held]
        if kept:
            print(f"--prior: {len(kept)} layer(s) {prior_name} already hold(s) keep their "
                  f"entries: {kept}")
        if not shapes:
            p.error(f"--prior: {prior_name} already hold(s) every layer asked for")
    table = tune(shapes, a.group_size, buckets=buckets, progress=not a.no_progress,
                 wgmma=a.wgmma, parallel_reduce=a.parallel_reduce,
                 early_bottom=a.early_bottom, top_sum=a.top_sum,
                 narrow=(base, a.narrow) if a.narrow else None, wide=a.wide,
                 column_ctas=a.column_ctas,
                 prior=(prior_table, a.prior, a.prior_top) if a.prior else None,
                 served_from=base)
    if base is not None:
        table = merge_tables(base, table, shapes, buckets, a.keep_within / 100)
        suspect = suspect_pairs(base, table, shapes, buckets)
        if suspect:
            table = withdraw_pairs(table, base, suspect)
            print(f"withdrew {len(suspect)} (N, K, bucket) pair(s), kept as {a.merge} held "
                  f"them (re-tune them):")
            for (n, k, b), why in sorted(suspect.items()):
                print(f"  {k}x{n} bucket {b}: {why}")
    if tested_table is not None and not restricted(table):
        return 1
    out = Path(a.out) if a.out else cache_path(table["device_name"])
    note = ""
    if not a.out and base is None:
        table, note = into_cache(table, out, shapes, buckets)
        note = f" ({note})"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_table(out, table)
    load_table.cache_clear()
    from . import ops
    ops._plan.cache_clear()     # plans hold their config: a tune in this process applies at once
    print(f"wrote {len(table['entries'])} tuned entries to {out}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
