"""The benchmark: Marlin against FP16 GEMMs and naive INT4 baselines on LLM layer shapes.

One module per step:
  ``shapes``    which layers and batch sizes (DESIGN.md s.7)
  ``workload``  random quantized layers in every provider's format, and their reference
  ``providers`` the GEMMs measured side by side
  ``harness``   how one call is timed (CUDA events, L2 rotation, statistics, copy bandwidth)
  ``sweep``     gate, then time, every provider on every layer and batch size -> the record
  ``metrics``   bytes, FLOPs, speedups and per-set sums from recorded rows
  ``report``    record -> markdown tables and PNG plots (no GPU needed)
Run it with ``python -m marlin_cupy.bench`` (``--help`` lists the options). Importing this package
imports neither CuPy nor torch.
"""
from .metrics import FP16_BASELINES, ideal_speedup
from .shapes import DEFAULT_BATCHES, DEFAULT_GROUP_SIZE, SET_NAMES, SHAPE_SETS, Layer, ideal_shape

__all__ = ["SHAPE_SETS", "SET_NAMES", "DEFAULT_BATCHES", "DEFAULT_GROUP_SIZE", "Layer",
           "ideal_shape", "ideal_speedup", "FP16_BASELINES"]
