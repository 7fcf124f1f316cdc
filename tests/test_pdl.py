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
  printf("%zu %zu %zu %zu %zu %zu %zu %d %zu %zu %d\n", sizeof(CUlaunchAttribute),
         offsetof(CUlaunchAttribute, value), sizeof(CUlaunchConfig),
         offsetof(CUlaunchConfig, sharedMemBytes), offsetof(CUlaunchConfig, hStream),
         offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs),
         (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
         sizeof(CUexecAffinityParam), offsetof(CUexecAffinityParam, param.smCount.val),
         (int)CU_EXEC_AFFINITY_TYPE_SM_COUNT);
  return 0;
}
"""


def ours():
    return (ctypes.sizeof(pdl.LaunchAttribute), pdl.LaunchAttribute.value.offset,
            ctypes.sizeof(pdl.LaunchConfig), pdl.LaunchConfig.sharedMemBytes.offset,
            pdl.LaunchConfig.hStream.offset, pdl.LaunchConfig.attrs.offset,
            pdl.LaunchConfig.numAttrs.offset,
            pdl.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            ctypes.sizeof(pdl.ExecAffinityParam), pdl.ExecAffinityParam.sm_count.offset,
            pdl.CU_EXEC_AFFINITY_TYPE_SM_COUNT)


def test_layout_is_cuda_h_written_out():
    assert ours() == (72, 8, 56, 24, 32, 40, 48, 6, 8, 4, 0)


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


def test_prepared_launch_points_at_its_holders():
    """``pdl.PreparedLaunch`` (pdl.launch, the fast path, pdl_race_probe.py): each parameter
    points at its holder, so a value rewritten between sends is the one sent; the
    configuration carries the attribute only with ``pdl``."""
    args = (np.int32(3), np.uint64(5), np.int32(-1))
    prep = pdl.PreparedLaunch(0x1234, 264, 128, args, 115712, 0x99)
    for param, holder in zip(prep.params, prep.holders):
        assert param == ctypes.addressof(holder)
    prep.holders[0].value = 11
    assert ctypes.cast(prep.params[0], ctypes.POINTER(ctypes.c_int32)).contents.value == 11
    c = prep.config
    assert (c.gridDimX, c.blockDimX, c.sharedMemBytes, c.hStream, c.numAttrs) == \
        (264, 128, 115712, 0x99, 1)
    assert c.attrs.contents.id == pdl.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert c.attrs.contents.value.programmatic_stream_serialization_allowed == 1
    assert prep.function.value == 0x1234
    plain = pdl.PreparedLaunch(0x1234, 1, 32, args, 0, 0, pdl=False)
    assert plain.config.numAttrs == 0 and not plain.config.attrs


def test_prepared_launch_sends_what_it_holds(monkeypatch):
    """``send`` through a stand-in for ``cuLaunchKernelEx`` with the driver's signature (a real
    foreign call): the configuration, the function and the current argument values arrive."""
    seen = {}
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(pdl.LaunchConfig), ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p))

    def driver(config, function, params, extra):
        c = config.contents
        seen["call"] = (c.gridDimX, c.blockDimX, c.sharedMemBytes, c.hStream, c.numAttrs,
                        function, ctypes.cast(params[1], ctypes.POINTER(ctypes.c_int32))
                        .contents.value, bool(extra))
        return seen.get("err", 0)
    fake = proto(driver)
    monkeypatch.setattr(pdl, "_driver", lambda: fake)
    prep = pdl.PreparedLaunch(0x4321, 132, 256, (np.uint64(1), np.int32(7)), 2048, 0x77)
    prep.holders[1].value = 8
    prep.send()
    assert seen["call"] == (132, 256, 2048, 0x77, 1, 0x4321, 8, False)
    seen["err"] = 719
    with pytest.raises(RuntimeError, match="CUresult 719"):
        prep.send()


def test_context_sm_count_reads_the_driver(monkeypatch):
    """``context_sm_count`` through a stand-in for ``cuCtxGetExecAffinity`` with the driver's
    signature: the SM count it writes for the SM-count type, None on an error or a zero."""
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(pdl.ExecAffinityParam), ctypes.c_int)
    answer = {"err": 0, "sms": 66}
    asked = []

    def driver(param, kind):
        asked.append(kind)
        param.contents.type = kind
        param.contents.sm_count = answer["sms"]
        return answer["err"]
    fake = proto(driver)
    monkeypatch.setattr(pdl, "driver_function", lambda name, argtypes:
                        fake if name == "cuCtxGetExecAffinity" else pytest.fail(name))
    assert pdl.context_sm_count() == 66
    assert asked == [pdl.CU_EXEC_AFFINITY_TYPE_SM_COUNT]
    answer["err"] = 201                                    # CUDA_ERROR_INVALID_CONTEXT
    assert pdl.context_sm_count() is None
    answer.update(err=0, sms=0)
    assert pdl.context_sm_count() is None

    def missing(name, argtypes):
        raise RuntimeError("the CUDA driver library could not be loaded")
    monkeypatch.setattr(pdl, "driver_function", missing)
    assert pdl.context_sm_count() is None


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
