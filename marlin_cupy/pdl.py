"""Kernel launches with programmatic dependent launch (PDL, compute capability 9.0).

CuPy launches through ``cuLaunchKernel``, which takes no launch attributes; this module calls the
driver's ``cuLaunchKernelEx`` through ctypes with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_
SERIALIZATION`` set, so that a kernel built with ``MARLIN_PDL`` (cuda/marlin.cuh) may start
while the previous kernel in the stream is still running. ``ops.matmul(..., pdl=True)`` and
``scripts/pdl_probe.py`` launch through it (benchmarks/NOTES.md entry 30).

The structures follow the layout documented in the CUDA driver API's ``cuda.h`` (CUDA 12.0+):
``CUlaunchAttribute`` is a 4-byte id, 4 bytes of padding and a 64-byte union (8-byte aligned);
``CUlaunchConfig`` is seven ``unsigned int`` (grid, block, dynamic shared memory), the stream,
the attribute pointer and their count. ``tests/test_pdl.py`` checks sizes and offsets.
"""
from __future__ import annotations

import ctypes
import functools
import sys

import numpy as np

CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64),
                ("programmatic_stream_serialization_allowed", ctypes.c_int),
                ("_align", ctypes.c_uint64)]


class LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int),
                ("pad", ctypes.c_char * 4),
                ("value", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


DRIVER_LIBRARIES = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")


@functools.lru_cache(maxsize=None)
def driver_function(name: str, argtypes: tuple):
    """The CUDA driver's entry point ``name`` (returning a CUresult), with ``argtypes``, or
    RuntimeError saying what is missing (``graphs`` uses it for the capture mode)."""
    errors = []
    for lib_name in DRIVER_LIBRARIES:
        try:
            lib = ctypes.CDLL(lib_name)
        except OSError as e:
            errors.append(f"{lib_name}: {e}")
            continue
        fn = getattr(lib, name, None)
        if fn is None:
            raise RuntimeError(f"the CUDA driver library {lib_name} has no {name}")
        fn.restype = ctypes.c_int
        fn.argtypes = list(argtypes)
        return fn
    raise RuntimeError("the CUDA driver library could not be loaded (" + "; ".join(errors) + ")")


class ExecAffinityParam(ctypes.Structure):
    """``CUexecAffinityParam``: the affinity type (an enum, 4 bytes) and a union whose only
    member is ``CUexecAffinitySmCount`` (one ``unsigned int``)."""
    _fields_ = [("type", ctypes.c_int), ("sm_count", ctypes.c_uint)]


CU_EXEC_AFFINITY_TYPE_SM_COUNT = 0


def context_sm_count() -> int | None:
    """The SMs the current context may use (``cuCtxGetExecAffinity``, CUDA 11.4+), or None
    where the driver cannot say: no such entry point, no current context, or an error. A
    context limited to part of the GPU (MPS's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, a context
    made with an SM count) reports fewer SMs than the device has."""
    try:
        fn = driver_function("cuCtxGetExecAffinity", (ctypes.POINTER(ExecAffinityParam),
                                                      ctypes.c_int))
    except RuntimeError:
        return None
    param = ExecAffinityParam()
    if fn(ctypes.byref(param), CU_EXEC_AFFINITY_TYPE_SM_COUNT) != 0:
        return None
    return int(param.sm_count) or None


@functools.lru_cache(maxsize=None)
def _driver():
    """``cuLaunchKernelEx`` from the CUDA driver library, or RuntimeError saying what is missing
    (the library, or the entry point: drivers before CUDA 12.0 lack it)."""
    try:
        return driver_function("cuLaunchKernelEx", (
            ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_void_p)))
    except RuntimeError as e:
        need = " (it needs a driver for CUDA 12.0 or newer)" if "has no" in str(e) else ""
        raise RuntimeError(f"pdl=True launches through the CUDA driver: {e}{need}; use "
                           f"pdl=False") from None


def _arg(value):
    """A ctypes holder for one kernel argument: device arrays as their pointer, NumPy scalars
    as their own type. Anything else is refused (a wrong width would shift every argument)."""
    if hasattr(value, "data") and hasattr(value.data, "ptr"):          # cupy.ndarray
        return ctypes.c_void_p(value.data.ptr)
    if isinstance(value, np.int32):
        return ctypes.c_int32(int(value))
    if isinstance(value, np.uint64):
        return ctypes.c_uint64(int(value))
    raise TypeError(f"unsupported kernel argument type {type(value).__name__}: pass CuPy "
                    f"arrays or NumPy int32/uint64 scalars")


class PreparedLaunch:
    """A ``cuLaunchKernelEx`` launch set up once, to be sent any number of times: the arguments
    as ctypes holders (``holders[i].value`` may be rewritten between sends), the parameter
    array pointing at them, and the launch configuration with its attribute (the
    programmatic-serialization one when ``pdl``), all kept alive together.
    ``function_ptr`` is the kernel's ``CUfunction`` (``RawKernel.kernel.ptr``)."""

    def __init__(self, function_ptr: int, grid: int, block: int, args, shared_mem: int,
                 stream_ptr: int, pdl: bool = True):
        self.function = ctypes.c_void_p(function_ptr)
        self.holders = [_arg(a) for a in args]
        self.params = (ctypes.c_void_p * len(self.holders))(
            *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in self.holders])
        self.attr = LaunchAttribute()
        self.attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        self.attr.value.programmatic_stream_serialization_allowed = 1
        self.config = LaunchConfig(grid, 1, 1, block, 1, 1, shared_mem,
                                   ctypes.c_void_p(stream_ptr),
                                   ctypes.pointer(self.attr) if pdl else None, 1 if pdl else 0)

    def send(self):
        """Enqueue the launch (``RuntimeError`` with the driver's error code if it fails)."""
        err = _driver()(ctypes.byref(self.config), self.function, self.params, None)
        if err != 0:
            raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {err}")


def launch(kernel, grid: int, block: int, args, shared_mem: int, stream, pdl: bool = True):
    """Launch ``kernel`` (a ``cupy.RawKernel`` from ``RawModule.get_function``) on ``stream``
    through ``cuLaunchKernelEx``, with the programmatic-serialization attribute when ``pdl``.

    The kernel's dynamic shared memory limit must already be set (``ops.build_kernel`` does).
    Raises ``RuntimeError`` with the driver's error code if the launch fails.
    """
    PreparedLaunch(kernel.kernel.ptr, grid, block, args, shared_mem, stream.ptr, pdl).send()
