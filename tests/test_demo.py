"""The demo (README's main command) runs end to end at a small size and says what it skipped."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from marlin_cupy import records

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_small_layer():
    out = subprocess.run([sys.executable, "-m", "marlin_cupy.demo", "--k", "256", "--n", "512",
                          "--m", "4", "--reps", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "relative error ||W - W_hat|| / ||W||" in out.stdout, out.stdout
    if records.gpu_unavailable_reason() is None:
        assert "No GPU" not in out.stdout, out.stdout
    else:
        assert "No GPU: skipped the kernel part (reason: " in out.stdout, out.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 100])
def test_demo_kernel_part_runs_on_the_gpu(m, gpu_device):
    """The test above runs the demo where CI is, without a GPU, where its kernel part only says
    it skips; the device checks run ``pytest -m gpu``, so this is what runs that part on a GPU:
    a llama2-7b-shaped layer (the demo's default K and N), every step run, the kernel's result
    within the demo's bound (DESIGN.md s.6) and both timings printed."""
    out = subprocess.run([sys.executable, "-m", "marlin_cupy.demo", "--m", str(m), "--reps", "20"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "No GPU" not in text and "unavailable in this build" not in text, text
    assert f"3. GPU {gpu_device['name']}" in text, text
    assert re.search(r"relative error against float64: marlin \S+, cuBLAS FP16 .* -> PASS", text), text
    assert re.search(r"marlin [0-9.]+ us, cupy\.matmul FP16 [0-9.]+ us -> speedup [0-9.]+x", text), text


def small_checkpoint(folder, kind="gptq", bits=4):
    """Two layers the kernel runs (K a multiple of 128, N of 64), one of them act-order (GPTQ)."""
    import numpy as np

    import marlin_cupy as mc
    rng = np.random.default_rng(3)
    layers = {}
    for name, (k, n) in {"model.layers.0.mlp.down_proj": (512, 256),
                         "model.layers.0.self_attn.o_proj": (256, 128)}.items():
        qw = mc.quantize(rng.standard_normal((k, n)).astype(np.float32) * 0.02, bits=bits,
                         group_size=128, sym=False)
        if kind == "gptq" and name.endswith("o_proj"):
            qw = mc.QuantizedWeight(qw.q, qw.scales, qw.zeros,
                                    (rng.permutation(k) // 128).astype(np.int32), bits, 128)
        layers[name] = qw
    save = mc.save_gptq_checkpoint if kind == "gptq" else mc.save_awq_checkpoint
    save(folder, layers)
    return sorted(layers)


def demo(*args, timeout=300):
    out = subprocess.run([sys.executable, "-m", "marlin_cupy.demo", *map(str, args)],
                         cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


@pytest.mark.parametrize("kind", ["gptq", "awq"])
def test_demo_on_a_checkpoint(tmp_path, kind):
    names = small_checkpoint(tmp_path, kind)
    rc, text = demo("--checkpoint", tmp_path, "--m", 4, "--reps", 3)
    assert rc == 0, text
    assert f"the layers of {kind.upper()} checkpoint {tmp_path}" in text, text
    assert "2 layers: " in text and "0 failed" in text, text
    for name in names:
        assert f"\n{name} (K=" in text, text
    if kind == "gptq":
        assert "N=128 4-bit g128 zp act-order)" in text, text
    if records.gpu_unavailable_reason() is not None:
        assert "No GPU: skipped the kernel part (reason: " in text, text
        assert text.count("packed, unpack(pack(q)) == q") == 2, text


def test_demo_on_chosen_layers_of_a_checkpoint(tmp_path):
    down, o_proj = small_checkpoint(tmp_path)
    rc, text = demo("--checkpoint", tmp_path, "--layer", o_proj, "--reps", 3)
    assert rc == 0 and "1 layer: " in text and f"\n{o_proj} (" in text, text
    assert f"\n{down} (" not in text, text
    rc, text = demo("--checkpoint", tmp_path, "--max-layers", 1, "--reps", 3)
    assert rc == 0 and "1 layer: " in text and f"\n{down} (" in text, text


@pytest.mark.parametrize("setup,match", [
    (lambda folder: None, "no quantization config"),
    (lambda folder: (folder / "quantize_config.json").write_text(
        '{"quant_method": "bitsandbytes", "bits": 4}'), "quant_method='bitsandbytes'"),
])
def test_demo_says_why_a_checkpoint_cannot_be_read(tmp_path, setup, match):
    setup(tmp_path)
    rc, text = demo("--checkpoint", tmp_path)
    assert rc == 2, text
    assert "cannot read the checkpoint: " in text and match in text, text


@pytest.mark.gpu
@pytest.mark.parametrize("kind,bits", [("gptq", 4), ("awq", 4), ("gptq", 8)])
def test_demo_runs_a_checkpoint_on_the_gpu(tmp_path, kind, bits, gpu_device):
    names = small_checkpoint(tmp_path, kind, bits)
    rc, text = demo("--checkpoint", tmp_path, "--m", 16, "--reps", 5, timeout=600)
    assert rc == 0, text
    assert "No GPU" not in text and f"GPU {gpu_device['name']}" in text, text
    for name in names:
        if bits == 4:
            assert re.search(rf"\n{re.escape(name)} \(.*\): error \S+ \(FP16 \S+\) -> PASS; "
                             r"[0-9.]+ us, FP16 [0-9.]+ us, [0-9.]+x", text), text
        else:
            assert f"\n{name} (" in text and "the kernel runs 4-bit weights only" in text, text
    assert ("2 layers: 2 passed, 0 failed, 0 not run; summed" in text if bits == 4 else
            "2 layers: 0 passed, 0 failed, 2 not run" in text), text


def test_demo_goes_past_a_layer_the_layout_refuses(tmp_path):
    # N = 32 reads fine but does not pack (N must be a multiple of 64): that layer is "not
    # packed", the next one still runs, and the checkpoint is not called unreadable.
    import numpy as np

    import marlin_cupy as mc
    rng = np.random.default_rng(4)
    mc.save_gptq_checkpoint(tmp_path, {
        name: mc.quantize(rng.standard_normal((256, n)).astype(np.float32) * 0.02,
                          group_size=128, sym=False)
        for name, n in (("a.narrow", 32), ("b.wide", 128))})
    rc, text = demo("--checkpoint", tmp_path, "--m", 4, "--reps", 3)
    assert rc == 0, text
    assert "\na.narrow (K=256 N=32 4-bit g128 zp): not packed: The Marlin layout needs" in text
    assert "\nb.wide (" in text and "2 layers: 1 passed, 0 failed, 1 not run" in text, text


def test_max_layers_stops_before_reading_the_next_layer(tmp_path):
    from safetensors.numpy import load_file, save_file
    down, o_proj = small_checkpoint(tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors[f"{o_proj}.scales"][0, 0] = float("inf")       # the second layer cannot be read
    save_file(tensors, str(tmp_path / "model.safetensors"))
    rc, text = demo("--checkpoint", tmp_path, "--max-layers", 1, "--reps", 3)
    assert rc == 0 and "1 layer: 1 passed" in text and "cannot read" not in text, text
    rc, text = demo("--checkpoint", tmp_path, "--reps", 3)
    assert rc == 2 and f"cannot read the checkpoint: {o_proj}.scales" in text, text
    rc, text = demo("--checkpoint", tmp_path, "--max-layers", 0)
    assert rc == 2 and "--max-layers: must be an integer >= 1; got 0" in text, text


@pytest.mark.parametrize("args,match", [
    (("--k", "100"), "--k 100 is not a multiple of --group-size 128"),
    (("--k", "0"), "--k: must be an integer >= 1; got 0"),
    (("--k", "-128"), "--k: must be an integer >= 1; got -128"),
    (("--n", "100"), "needs --k a multiple of 16 and --n a multiple of 64"),
    (("--m", "0"), "--m: must be an integer >= 1; got 0"),
    (("--reps", "0"), "--reps: must be an integer >= 1; got 0"),
    (("--group-size", "100"), "--group-size: invalid choice: 100"),
    (("--k", "x"), "--k: must be an integer >= 1; got 'x'"),
])
def test_bad_arguments_are_usage_errors_not_tracebacks(args, match):
    """Exit 2 with argparse's usage message (1 is for a failed accuracy check)."""
    out = subprocess.run([sys.executable, "-m", "marlin_cupy.demo", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert match in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("usage: python -m marlin_cupy.demo"), out.stderr
