"""One kernel launch per listed config on the llama2-70b 8192x57344 layer (or SHAPE=K,N), for ncu:

    ncu --clock-control none --kernel-name regex:marlin python3 scripts/profile_case.py M CONFIG [CONFIG ...]
"""
import argparse
import os

import cupy as cp
import numpy as np

import marlin_cupy as mc
from marlin_cupy.config import KernelConfig


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("m", type=int, nargs="?", default=1, help="batch size M (default 1)")
    p.add_argument("configs", nargs="*", help="config names, one launch each")
    a = p.parse_args(argv)
    rng = np.random.default_rng(0)
    k, n = (int(v) for v in os.environ.get('SHAPE', '8192,57344').split(','))
    qw = mc.QuantizedWeight(rng.integers(0, 16, (k, n), dtype=np.uint8),
                            np.full((k // 128, n), 0.01, np.float16), None, None, 4, 128)
    mw = mc.pack(qw).to_device()
    x = cp.asarray(rng.standard_normal((a.m, k)).astype(np.float16))
    for name in a.configs:
        mc.matmul(x, mw, config=KernelConfig.from_name(name))
    cp.cuda.runtime.deviceSynchronize()


if __name__ == "__main__":
    main()
