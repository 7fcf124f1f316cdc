"""The ctypes mirror of cuLaunchKernelEx's structures (marlin_cupy/pdl.py) has cuda.h's layout.

No GPU needed. The layout is compared with the header itself, compiled by the host C compiler,
when both are found; the expected numbers below are the same layout written out.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from marlin_cupy import pdl

PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include <cuda.h>
int main(void) {
  printf("%zu %zu %zu %zu %zu %zu %zu %d\n", sizeof(CUlaunchAttribute),
         offsetof(CUlaunchAttribute, value), sizeof(CUlaunchConfig),
         offsetof(CUlaunchConfig, sharedMemBytes), offsetof(CUlaunchConfig, hStream),
         offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs),
         (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  return 0;
}
"""


def ours():
    return (ctypes.sizeof(pdl.LaunchAttribute), pdl.LaunchAttribute.value.offset,
            ctypes.sizeof(pdl.LaunchConfig), pdl.LaunchConfig.sharedMemBytes.offset,
            pdl.LaunchConfig.hStream.offset, pdl.LaunchConfig.attrs.offset,
            pdl.LaunchConfig.numAttrs.offset,
            pdl.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)


def test_layout_is_cuda_h_written_out():
    assert ours() == (72, 8, 56, 24, 32, 40, 48, 6)


def test_layout_matches_the_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no host C compiler")
    try:
        from marlin_cupy import jit
        include = Path(jit.cuda_include_dir())
    except Exception as e:  # noqa: BLE001 - no CUDA headers on this machine
        pytest.skip(f"no CUDA include directory: {e}")
    if not (include / "cuda.h").exists():
        pytest.skip(f"no cuda.h in {include}")
    src = tmp_path / "probe.c"
    src.write_text(PROBE)
    exe = tmp_path / "probe"
    subprocess.run([cc, "-I", str(include), "-o", str(exe), str(src)], check=True)
    header = tuple(int(v) for v in subprocess.run([str(exe)], capture_output=True, text=True,
                                                  check=True).stdout.split())
    assert header == ours()


def test_arguments_keep_their_width():
    assert isinstance(pdl._arg(np.int32(7)), ctypes.c_int32)
    assert isinstance(pdl._arg(np.uint64(7)), ctypes.c_uint64)
    for bad in (7, 7.0, np.int64(7), None):
        with pytest.raises(TypeError, match="unsupported kernel argument"):
            pdl._arg(bad)


def test_check_pdl():
    from marlin_cupy.ops import check_pdl
    check_pdl(False, "80")
    check_pdl(True, "90")
    check_pdl(True, "100")
    check_pdl(True, None)                    # device not known yet: the plan checks it
    with pytest.raises(ValueError, match=r"compute capability 9.0 or newer; this device is 8.6"):
        check_pdl(True, "86")
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="pdl must be True or False"):
            check_pdl(bad, "90")


def test_pdl_padded_smem_leaves_no_room_for_one_more_cta():
    """Padding keeps exactly per_sm CTAs resident (by shared memory) and never shrinks smem."""
    from marlin_cupy.ops import pdl_padded_smem
    per_sm_bytes, reserved, optin = 233472, 1024, 232448        # H200
    for smem in (1024, 40960, 62976, 75000, 110000, 160000, 232448):
        for per_sm in (1, 2, 3):
            if per_sm * (smem + reserved) > per_sm_bytes:
                continue                                           # this many never fit
            padded = pdl_padded_smem(smem, per_sm, per_sm_bytes, reserved, optin)
            assert smem <= padded <= optin
            fits = per_sm_bytes // (padded + reserved)
            assert fits == per_sm, (smem, per_sm, padded)
    # 28672x8192 at M = 16: 62976 bytes, two CTAs per SM; unpadded a third fits
    assert per_sm_bytes // (62976 + reserved) == 3
    assert pdl_padded_smem(62976, 2, per_sm_bytes, reserved, optin) == 115712
    with pytest.raises(ValueError, match="per_sm=0"):
        pdl_padded_smem(1024, 0, per_sm_bytes, reserved, optin)


@pytest.fixture
def driver_libraries(monkeypatch):
    """Point ``pdl._driver`` at other libraries; its cached lookup is dropped before and after."""
    def use(*names):
        monkeypatch.setattr(pdl, "DRIVER_LIBRARIES", names)
        pdl._driver.cache_clear()
        pdl.driver_function.cache_clear()
    yield use
    pdl._driver.cache_clear()
    pdl.driver_function.cache_clear()


def test_missing_driver_library_is_a_clear_error(driver_libraries):
    driver_libraries("libdoes-not-exist.so.1")
    with pytest.raises(RuntimeError, match="could not be loaded.*use pdl=False"):
        pdl._driver()


def test_driver_without_the_entry_point_is_a_clear_error(driver_libraries):
    # libc stands in for a driver library that lacks cuLaunchKernelEx.
    import ctypes.util
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no C library to stand in for the driver")
    driver_libraries(libc)
    with pytest.raises(RuntimeError, match="no cuLaunchKernelEx"):
        pdl._driver()



def test_driver_function_names_what_is_missing(driver_libraries):
    import ctypes.util
    args = (ctypes.POINTER(ctypes.c_int),)
    driver_libraries("libdoes-not-exist.so.1")
    with pytest.raises(RuntimeError, match="could not be loaded.*libdoes-not-exist"):
        pdl.driver_function("cuThreadExchangeStreamCaptureMode", args)
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no C library to stand in for the driver")
    driver_libraries(libc)
    with pytest.raises(RuntimeError, match="has no cuThreadExchangeStreamCaptureMode"):
        pdl.driver_function("cuThreadExchangeStreamCaptureMode", args)
