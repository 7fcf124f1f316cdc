"""One kernel launch per listed config on the llama2-70b 8192x57344 layer (or SHAPE=K,N), for ncu:

    ncu --clock-control none --kernel-name regex:marlin python3 scripts/profile_case.py M CONFIG [CONFIG ...]
"""
import os
import sys
import numpy as np, cupy as cp
import marlin_cupy as mc
from marlin_cupy.config import KernelConfig
rng = np.random.default_rng(0)
k, n = (int(v) for v in os.environ.get('SHAPE', '8192,57344').split(','))
m = int(sys.argv[1]) if len(sys.argv) > 1 else 1
qw = mc.QuantizedWeight(rng.integers(0, 16, (k, n), dtype=np.uint8), np.full((k // 128, n), 0.01, np.float16), None, None, 4, 128)
mw = mc.pack(qw).to_device(); x = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
for name in sys.argv[2:]:
    mc.matmul(x, mw, config=KernelConfig.from_name(name))
cp.cuda.runtime.deviceSynchronize()
