"""How long the default configurations take to compile cold, and to start warm.

    python scripts/compile_times.py OUT.json [DEVICE_NAME]

DEVICE_NAME picks whose default dispatch (tuned table) to compile when there is no GPU here,
e.g. "NVIDIA H200"; on a GPU the current device's is used.

Cold: NVRTC compile of each default-dispatch configuration for the llama2 shape sets (sym),
one after another in this process, with no cache (``jit.compile_offline``; works without a GPU).
On a GPU, also: a fresh ``CUPY_CACHE_DIR`` and a child process that builds every module through
``cupy.RawModule`` (cold, compile + load), then a second child that does the same from the
now-filled disk cache (warm start: what a user pays on every later process start).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from marlin_cupy import jit, kernels, records  # noqa: E402
from marlin_cupy.bench.shapes import DEFAULT_BATCHES, SHAPE_SETS  # noqa: E402
from marlin_cupy.config import choose_config  # noqa: E402

_CHILD = r"""
import sys, time, json
sys.path.insert(0, {root!r})
from marlin_cupy import jit, kernels
from marlin_cupy.config import KernelConfig
t0 = time.perf_counter()
for name in {names!r}:
    cfg = KernelConfig.from_name(name)
    jit.load_module(kernels.marlin_source(cfg), arch_suffix=cfg.arch_suffix).get_function(
        kernels.marlin_entry(cfg))
print(json.dumps({{"seconds": time.perf_counter() - t0}}))
"""


def default_configs(device_name=None, smem=232448):
    names = []
    for layers in SHAPE_SETS.values():
        for k, n in layers:
            for m in DEFAULT_BATCHES:
                names.append(choose_config(m, n, k, 128, False, smem, device_name).name)
    return sorted(set(names))


def child_seconds(names, cache_dir):
    # Both caches: CuPy's, and ours for the sm_90a (wgmma) cubins CuPy cannot build.
    env = dict(os.environ, CUPY_CACHE_DIR=cache_dir, MARLIN_CUPY_CACHE=cache_dir)
    out = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT), names=names)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main(out_path, device_name=None):
    env = records.environment()
    gpu = env.get("gpu_unavailable") is None and env.get("device")
    device_name = env["device"]["name"] if gpu else device_name
    names = default_configs(device_name)
    rec = {"kind": "compile_times", "date": env["date"], "git_commit": env["git_commit"],
           "device": env.get("device"), "versions": env.get("versions"),
           "dispatch_of": device_name or "heuristic", "configs": names,
           "nvrtc_cold_offline": {}}
    arch = f"sm_{env['device']['cc'].replace('.', '')}" if gpu else "sm_90"
    total = 0.0
    for name in names:
        from marlin_cupy.config import KernelConfig
        cfg = KernelConfig.from_name(name)
        src = kernels.marlin_source(cfg)
        t0 = time.perf_counter()
        jit.compile_offline(src, arch + cfg.arch_suffix)
        dt = time.perf_counter() - t0
        rec["nvrtc_cold_offline"][name] = dt
        total += dt
    rec["nvrtc_cold_offline_total_s"] = total
    rec["nvrtc_arch"] = arch + (" (sm_90a for the wgmma configs)" if any("_wg" in n for n in names) else "")
    if gpu:
        with tempfile.TemporaryDirectory() as cache:
            rec["cupy_cold_total_s"] = child_seconds(names, cache)
            rec["cupy_warm_total_s"] = child_seconds(names, cache)
    else:
        rec["cupy_cold_total_s"] = rec["cupy_warm_total_s"] = None
        rec["note"] = f"no GPU ({env.get('gpu_unavailable')}): RawModule load times not measured"
    Path(out_path).write_text(json.dumps(rec, indent=1))
    print(f"{len(names)} default configs; NVRTC cold total {total:.1f} s for {arch}; "
          f"CuPy cold {rec['cupy_cold_total_s']}, warm {rec['cupy_warm_total_s']}")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="Cold compile and warm start times of the "
                                     "default configurations.")
    parser.add_argument("out", help="output JSON")
    parser.add_argument("device_name", nargs="?", default=None,
                        help='whose dispatch to compile without a GPU, e.g. "NVIDIA H200"')
    args = parser.parse_args()
    main(args.out, args.device_name)
