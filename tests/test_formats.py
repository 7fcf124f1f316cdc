"""GPTQ / AWQ tensors and checkpoints: exact round trips, the bit layouts written out by hand,
and every way a tensor or a checkpoint folder can be wrong.

The layout tests do not trust ``to_gptq``/``to_awq``: they decode packed words with explicit
shifts and masks, straight from the format's definition, and compare with ``dequantize``.
"""
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from safetensors.numpy import save_file

from marlin_cupy.formats import (from_awq, from_gptq, iter_awq_checkpoint, iter_gptq_checkpoint,
                                 load_awq_checkpoint, load_gptq_checkpoint, save_awq_checkpoint,
                                 save_gptq_checkpoint, to_awq, to_gptq)
from marlin_cupy.quantize import quantize
from marlin_cupy.weights import QuantizedWeight

SETTINGS = settings(max_examples=30, deadline=None)
FORMATS = ["gptq", "gptq_v2"]
# The smallest zero point each format can write. v1 stores zero - 1 and other readers (vLLM's
# gptq and exllama kernels) add the 1 back without wrapping, so a zero of 0 (stored 2**bits - 1)
# would read as 2**bits there: to_gptq refuses it, and "gptq_v2" stores it as it is.
LOWEST_ZERO = {"gptq": 1, "gptq_v2": 0}
# AWQ's interleave, written out from the format's definition (not imported from the package):
# nibble p (LSB first) of a word holds column 8c + AWQ_COLUMN_OF_NIBBLE[p].
AWQ_COLUMN_OF_NIBBLE = [0, 2, 4, 6, 1, 3, 5, 7]


@st.composite
def quantized(draw, bits=None, sym=None, act_order=None, lowest_zero=0):
    """A random QuantizedWeight: every code and every zero value from ``lowest_zero`` up
    reachable, K up to 512, N up to 256."""
    bits = draw(st.sampled_from([4, 8])) if bits is None else bits
    group_size = draw(st.sampled_from([32, 64, 128, -1]))
    step = 32 if group_size == -1 else group_size
    k = step * draw(st.integers(1, 512 // step))
    n = 8 * draw(st.integers(1, 32))
    g = 1 if group_size == -1 else k // group_size
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = rng.integers(0, 1 << bits, size=(k, n), dtype=np.uint8)
    scales = (rng.uniform(1e-3, 1.0, size=(g, n)) * rng.choice([-1, 1], size=(g, n)))
    sym = draw(st.booleans()) if sym is None else sym
    zeros = None if sym else rng.integers(lowest_zero, 1 << bits, size=(g, n), dtype=np.uint8)
    use_act = draw(st.booleans()) if act_order is None else act_order
    g_idx = None
    if use_act and g > 1:
        g_idx = (rng.permutation(k) // group_size).astype(np.int32)
    return QuantizedWeight(q, scales.astype(np.float16), zeros, g_idx, bits, group_size)


def as_imported(qw):
    """``qw`` as the importers return it: a single group (K == group_size) becomes -1."""
    if qw.num_groups > 1 or qw.group_size == -1:
        return qw
    return QuantizedWeight(qw.q, qw.scales, qw.zeros, qw.g_idx, qw.bits, -1)


def gptq_reference(qweight, qzeros, scales, g_idx, bits, checkpoint_format, wrap=True):
    """W[k, n] from GPTQ tensors, element by element with explicit shifts (the format's text).

    v1 stores zero - 1, so the true zero is stored + 1: modulo 2**bits as ``from_gptq`` reads
    it (``wrap=True``), or plain stored + 1 as vLLM's gptq/exllama kernels read it.
    """
    pf, mask = 32 // bits, (1 << bits) - 1
    k, n = qweight.shape[0] * pf, qweight.shape[1]
    kk, nn = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")     # [K, N]
    words = qweight.view(np.uint32).astype(np.int64)
    zwords = qzeros.view(np.uint32).astype(np.int64)
    g = g_idx.astype(np.int64)[kk]                                        # [K, N]
    code = (words[kk // pf, nn] >> (bits * (kk % pf))) & mask
    stored = (zwords[g, nn // pf] >> (bits * (nn % pf))) & mask
    if checkpoint_format == "gptq":
        zero = (stored + 1) % (1 << bits) if wrap else stored + 1
    else:
        zero = stored
    return (code - zero) * scales.astype(np.float64)[g, nn]


def awq_reference(qweight, qzeros, scales, group_size):
    """W[k, n] from AWQ tensors: column n sits in nibble p of word n // 8, where
    AWQ_COLUMN_OF_NIBBLE[p] == n % 8."""
    k, n = qweight.shape[0], qweight.shape[1] * 8
    nibble_of = [AWQ_COLUMN_OF_NIBBLE.index(j) for j in range(8)]        # [0, 4, 1, 5, 2, 6, 3, 7]
    kk, nn = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")     # [K, N]
    shift = 4 * np.array(nibble_of)[nn % 8]
    g = kk // (k if group_size == -1 else group_size)
    code = (qweight.view(np.uint32).astype(np.int64)[kk, nn // 8] >> shift) & 15
    zero = (qzeros.view(np.uint32).astype(np.int64)[g, nn // 8] >> shift) & 15
    return (code - zero) * scales.astype(np.float64)[g, nn]


def random_words(rng, shape):
    """int32 words with every bit pattern equally likely."""
    return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.int32)


def random_gptq_tensors(rng, bits, k, n, g):
    """Arbitrary packed words (every bit pattern), not produced by to_gptq."""
    pf = 32 // bits
    return dict(qweight=random_words(rng, (k // pf, n)), qzeros=random_words(rng, (g, n // pf)),
                scales=rng.uniform(0.01, 1, size=(g, n)).astype(np.float16))


# ---------------------------------------------------------------------------------------------
# GPTQ tensors
# ---------------------------------------------------------------------------------------------

class TestGptqRoundTrip:
    @pytest.mark.parametrize("fmt", FORMATS)
    @SETTINGS
    @given(st.data(), st.booleans())
    def test_from_gptq_inverts_to_gptq(self, fmt, data, pass_group_size):
        qw = data.draw(quantized(lowest_zero=LOWEST_ZERO[fmt]))
        tensors = to_gptq(qw, fmt)
        group_size = qw.group_size if pass_group_size else None
        back = from_gptq(**tensors, bits=qw.bits, sym=qw.sym, group_size=group_size,
                         checkpoint_format=fmt)
        assert back.equals(as_imported(qw))

    @pytest.mark.parametrize("fmt", FORMATS)
    @SETTINGS
    @given(st.data())
    def test_tensor_shapes_and_dtypes(self, fmt, data):
        qw = data.draw(quantized(lowest_zero=LOWEST_ZERO[fmt]))
        t = to_gptq(qw, fmt)
        pf = 32 // qw.bits
        assert set(t) == {"qweight", "qzeros", "scales", "g_idx"}
        assert t["qweight"].dtype == np.int32 and t["qweight"].shape == (qw.k // pf, qw.n)
        assert t["qzeros"].dtype == np.int32 and t["qzeros"].shape == (qw.num_groups, qw.n // pf)
        assert t["scales"].dtype == np.float16 and t["scales"].shape == (qw.num_groups, qw.n)
        assert t["g_idx"].dtype == np.int32 and np.array_equal(t["g_idx"], qw.row_groups())

    def test_group_spanning_k_imports_as_per_channel(self):
        # K == group_size gives one group; it comes back as -1, with identical values.
        rng = np.random.default_rng(0)
        qw = QuantizedWeight(rng.integers(0, 16, (128, 16), dtype=np.uint8),
                             np.ones((1, 16), np.float16), None, None, 4, 128)
        back = from_gptq(**to_gptq(qw), group_size=128)
        assert back.group_size == -1
        assert np.array_equal(back.dequantize(), qw.dequantize())


class TestGptqLayout:
    @pytest.mark.parametrize("fmt", FORMATS)
    @SETTINGS
    @given(st.data())
    def test_export_matches_the_bit_level_formula(self, fmt, data):
        # Read the way other tools read it: v1 zero = stored + 1, with no wrap-around.
        qw = data.draw(quantized(lowest_zero=LOWEST_ZERO[fmt]))
        t = to_gptq(qw, fmt)
        ref = gptq_reference(t["qweight"], t["qzeros"], t["scales"], t["g_idx"], qw.bits, fmt,
                             wrap=False)
        assert np.array_equal(qw.dequantize().astype(np.float64), ref)

    @pytest.mark.parametrize("bits", [4, 8])
    @pytest.mark.parametrize("fmt", FORMATS)
    def test_import_of_arbitrary_words_matches_the_formula(self, bits, fmt):
        rng = np.random.default_rng(bits)
        k, n, g = 256, 64, 4
        t = random_gptq_tensors(rng, bits, k, n, g)
        g_idx = (rng.permutation(k) // 64).astype(np.int32)
        qw = from_gptq(**t, g_idx=g_idx, bits=bits, sym=False, checkpoint_format=fmt)
        ref = gptq_reference(t["qweight"], t["qzeros"], t["scales"], g_idx, bits, fmt)
        assert np.array_equal(qw.dequantize().astype(np.float64), ref)

    def test_qweight_is_packed_along_k_lsb_first(self):
        qweight = np.zeros((1, 8), np.uint32)                             # K = 8, N = 8
        qweight[0, :2] = [0x76543210, 0x01234567]
        qzeros = np.array([[0x77777777]], dtype=np.uint32)
        qw = from_gptq(qweight.view(np.int32), qzeros.view(np.int32), np.ones((1, 8), np.float16))
        assert list(qw.q[:, 0]) == [0, 1, 2, 3, 4, 5, 6, 7]
        assert list(qw.q[:, 1]) == [7, 6, 5, 4, 3, 2, 1, 0]

    @pytest.mark.parametrize("bits,fmt,word", [
        (4, "gptq", 0x77777777), (4, "gptq_v2", 0x88888888),
        (8, "gptq", 0x7F7F7F7F), (8, "gptq_v2", 0x80808080)])
    def test_symmetric_qzeros_word(self, bits, fmt, word):
        qw = QuantizedWeight(np.zeros((64, 8), np.uint8), np.ones((2, 8), np.float16), None,
                             None, bits, 32)
        assert np.all(to_gptq(qw, fmt)["qzeros"].view(np.uint32) == word)

    def test_v1_import_reads_stored_15_as_zero_0(self):
        # The importer undoes "zero - 1" modulo 16: stored 15 is read as 0 (and 4 as 5), where
        # the fields above it show that no unmasked -1 overwrote them (the next test).
        qzeros = np.array([[0xF4FF4FFF]], dtype=np.uint32).view(np.int32)
        qw = from_gptq(np.zeros((4, 8), np.int32), qzeros, np.ones((1, 8), np.float16),
                       sym=False)
        assert qw.zeros.tolist() == [[0, 0, 0, 5, 0, 0, 5, 0]]

    def test_v1_zeros_overwritten_by_an_unmasked_minus_one_are_refused(self):
        """A v1 writer that stores zero - 1 = -1 as an unsigned word and ORs it in without a
        mask (AutoGPTQ's packing) sets every field above it: columns 3..7's zero points are
        lost and would all read as 0, silently, up to 9 steps off."""
        zeros = np.array([[8, 7, 0, 6, 9, 8, 9, 9]], np.int64)
        word = np.uint32(0)
        for j, z in enumerate(zeros[0] - 1):
            word |= np.uint32(np.int64(z) & 0xFFFFFFFF) << np.uint32(4 * j)
        qzeros = np.array([[word]], np.uint32).view(np.int32)
        with pytest.raises(ValueError, match=r"qzeros word \[0, 0\] stores 15 .* column 2 and "
                                             r"for every column above it in the word \(3\.\.7; "
                                             r"1 such word\(s\)\).*'gptq_v2'"):
            from_gptq(np.zeros((4, 8), np.int32), qzeros, np.ones((1, 8), np.float16),
                      sym=False)
        # The same zeros written with the true zero (v2) read back exactly.
        v2 = np.array([[sum(int(z) << (4 * j) for j, z in enumerate(zeros[0]))]],
                      np.uint32).view(np.int32)
        qw = from_gptq(np.zeros((4, 8), np.int32), v2, np.ones((1, 8), np.float16), sym=False,
                       checkpoint_format="gptq_v2")
        assert qw.zeros.tolist() == zeros.tolist()

    def test_uint32_words_are_the_same_bits(self):
        qw = QuantizedWeight(np.full((32, 8), 9, np.uint8), np.ones((1, 8), np.float16), None,
                             None, 4, -1)
        t = to_gptq(qw)
        t_unsigned = {**t, "qweight": t["qweight"].view(np.uint32),
                      "qzeros": t["qzeros"].view(np.uint32)}
        assert from_gptq(**t_unsigned).equals(qw)


class TestGptqSymmetry:
    @pytest.mark.parametrize("fmt", FORMATS)
    def test_asymmetric_zeros_refused_as_symmetric(self, fmt):
        zeros = np.full((2, 8), 8, np.uint8)
        zeros[1, 6] = 3
        qw = QuantizedWeight(np.zeros((64, 8), np.uint8), np.ones((2, 8), np.float16), zeros,
                             None, 4, 32)
        with pytest.raises(ValueError, match=r"group 1, column 6.*pass sym=False"):
            from_gptq(**to_gptq(qw, fmt), sym=True, checkpoint_format=fmt)

    @pytest.mark.parametrize("bits", [4, 8])
    def test_v2_zeros_read_as_v1_point_at_gptq_v2(self, bits):
        # Stored 2**(bits-1) everywhere is the true symmetric zero, i.e. a v2 checkpoint
        # labelled v1 (GPTQModel can write those). sym=False would read zero 2**(bits-1) + 1
        # and shift every weight by one step, so the advice is the format, not sym.
        qw = QuantizedWeight(np.zeros((64, 8), np.uint8), np.ones((2, 8), np.float16), None,
                             None, bits, 32)
        with pytest.raises(ValueError, match=rf"stores {2 ** (bits - 1) - 1} everywhere.*"
                                             r"checkpoint_format='gptq_v2'") as info:
            from_gptq(**to_gptq(qw, "gptq_v2"), bits=bits, checkpoint_format="gptq")
        assert "sym=False" not in str(info.value)

    def test_v1_zeros_read_as_v2_point_at_gptq(self):
        qw = QuantizedWeight(np.zeros((64, 8), np.uint8), np.ones((2, 8), np.float16), None,
                             None, 4, 32)
        with pytest.raises(ValueError, match=r"checkpoint_format='gptq'") as info:
            from_gptq(**to_gptq(qw, "gptq"), checkpoint_format="gptq_v2")
        assert "sym=False" not in str(info.value)

    def test_symmetric_zeros_read_as_asymmetric_stay_explicit(self):
        qw = QuantizedWeight(np.zeros((64, 8), np.uint8), np.ones((2, 8), np.float16), None,
                             None, 4, 32)
        back = from_gptq(**to_gptq(qw), sym=False)
        assert back.zeros is not None and np.all(back.zeros == 8)


class TestGptqV1ZeroPointZero:
    """Format "gptq" (v1) stores zero - 1, and vLLM's gptq/exllama kernels read stored + 1 with
    no wrap-around: a zero point of 0, stored as 2**bits - 1, would come back as 2**bits there,
    every weight of the group off by 2**bits * scale. ``quantize(sym=False)`` gives zero 0 to
    every group whose weights are all >= 0. Export refuses it and points at "gptq_v2"."""

    @SETTINGS
    @given(st.data())
    def test_v1_export_refuses_zero_0_and_names_the_group(self, data):
        qw = data.draw(quantized(sym=False, lowest_zero=1))
        group = data.draw(st.integers(0, qw.num_groups - 1))
        column = data.draw(st.integers(0, qw.n - 1))
        zeros = qw.zeros.copy()
        zeros[group, column] = 0
        qw = QuantizedWeight(qw.q, qw.scales, zeros, qw.g_idx, qw.bits, qw.group_size)
        with pytest.raises(ValueError, match=rf"group {group}, column {column}.*"
                                             r"checkpoint_format='gptq_v2'"):
            to_gptq(qw, "gptq")
        back = from_gptq(**to_gptq(qw, "gptq_v2"), bits=qw.bits, sym=False,
                         checkpoint_format="gptq_v2")
        assert back.equals(as_imported(qw))

    def test_quantized_non_negative_layer_saves_as_v2_only(self, tmp_path):
        w = np.abs(np.random.default_rng(8).standard_normal((128, 64))).astype(np.float32)
        qw = quantize(w, bits=4, group_size=128, sym=False)
        assert np.all(qw.zeros == 0)
        with pytest.raises(ValueError, match=r"layer 'up': .*64 zero point\(s\) of 0.*"
                                             r"checkpoint_format='gptq_v2'"):
            save_gptq_checkpoint(tmp_path, {"up": qw})
        assert not (tmp_path / "model.safetensors").exists()
        save_gptq_checkpoint(tmp_path, {"up": qw}, checkpoint_format="gptq_v2")
        assert load_gptq_checkpoint(tmp_path)["up"].equals(as_imported(qw))


class TestActOrderAndGroups:
    def test_act_order_g_idx_is_kept_and_trivial_g_idx_dropped(self):
        rng = np.random.default_rng(2)
        t = random_gptq_tensors(rng, 4, 128, 8, 4)
        g_idx = (rng.permutation(128) // 32).astype(np.int32)
        assert np.array_equal(from_gptq(**t, g_idx=g_idx, sym=False).g_idx, g_idx)
        trivial = (np.arange(128) // 32).astype(np.int32)
        assert from_gptq(**t, g_idx=trivial, sym=False).g_idx is None

    @pytest.mark.parametrize("k,g,group_size,expected", [
        (256, 8, None, 32), (256, 4, None, 64), (256, 2, 128, 128),
        (256, 1, None, -1), (256, 1, -1, -1), (256, 1, 256, -1),
        (64, 1, 128, -1)])      # K < group_size: G = ceil(K / group_size) = 1 in GPTQ tools
    def test_group_size_inferred_or_checked(self, k, g, group_size, expected):
        t = random_gptq_tensors(np.random.default_rng(0), 4, k, 8, g)
        assert from_gptq(**t, sym=False, group_size=group_size).group_size == expected

    @pytest.mark.parametrize("k,g,group_size,match", [
        (256, 4, 32, "group_size=32 does not split K=256 into the G=4"),
        (256, 1, 128, "one group spans K=256"),
        (256, 2, -1, "group_size=-1 does not split"),
        (48, 3, None, "group_size=16 .* is not supported"),
        (256, 3, None, "cannot be split into G=3"),
        # AutoGPTQ rounds the group count up: G = ceil(1000 / 128) = 8, the last group partial.
        (1000, 8, None, r"K=1000 is not a multiple of group_size=128.*G=8 = ceil\(1000 / 128\)"),
        (1000, 8, 128, r"K=1000 is not a multiple of group_size=128.*G=8 = ceil\(1000 / 128\)"),
        (96, 2, None, r"K=96 is not a multiple of group_size=64.*group_size=48"),
    ])
    def test_inconsistent_group_size(self, k, g, group_size, match):
        t = random_gptq_tensors(np.random.default_rng(0), 4, k, 8, g)
        with pytest.raises(ValueError, match=match):
            from_gptq(**t, sym=False, group_size=group_size)


class TestGptqBadTensors:
    def good(self, bits=4):
        return random_gptq_tensors(np.random.default_rng(1), bits, 128, 16, 4)

    @pytest.mark.parametrize("change,match", [
        (dict(qweight=np.zeros((16, 16), np.int64)), "qweight must be int32.*dtype=int64"),
        (dict(qweight=np.zeros((16, 16), np.float32)), "qweight must be int32"),
        (dict(qzeros=np.zeros((4, 2), np.int16)), "qzeros must be int32"),
        (dict(qweight=np.zeros((16,), np.int32)), "qweight must be 2-D"),
        (dict(qweight=np.zeros((16, 24), np.int32)),
         r"qweight must have shape .* = \[16, 16\]; got \[16, 24\]"),
        (dict(qzeros=np.zeros((4, 3), np.int32)),
         r"qzeros must have shape .* = \[4, 2\]; got \[4, 3\]"),
        (dict(qzeros=np.zeros((3, 2), np.int32)),
         r"qzeros must have shape .* = \[4, 2\]; got \[3, 2\]"),
        (dict(scales=np.ones((0, 16), np.float16)), "at least one group"),
        (dict(scales=np.ones((4, 16), np.int32)), "scales must be float16"),
        (dict(scales=np.ones((4, 16, 1), np.float16)), "scales must be 2-D"),
        (dict(scales=np.full((4, 16), 0.1, np.float32)), "not exactly representable in float16"),
        (dict(scales=np.full((4, 16), np.nan, np.float16)),
         r"64 non-finite value\(s\).*scales\[0, 0\]"),
        (dict(g_idx=np.zeros(64, np.int32)),
         r"g_idx has 64 entries but qweight has 16 rows, i.e. K = 16 \* 8 = 128"),
        (dict(g_idx=np.full(128, 4, np.int32)), r"g_idx values must lie in 0..3"),
        (dict(g_idx=np.zeros(128, np.float32)), "g_idx must be a 1-D integer array"),
        (dict(bits=3), "bits=3 is not supported"),
        (dict(bits=2), "bits=2 is not supported"),
        (dict(checkpoint_format="marlin"), "checkpoint_format='marlin' is not a GPTQ format"),
        (dict(sym=None), "sym must be a bool"),
        (dict(group_size="128"), "group_size must be an int"),
    ])
    def test_rejected_with_the_tensor_named(self, change, match):
        kwargs = {**self.good(), "sym": False, **change}
        with pytest.raises(ValueError, match=match):
            from_gptq(**kwargs)

    def test_exactly_representable_float32_scales_accepted(self):
        t = self.good()
        scales32 = t["scales"].astype(np.float32)
        assert from_gptq(**{**t, "scales": scales32}, sym=False).equals(from_gptq(**t, sym=False))

    def test_bits_mismatch_shows_up_as_a_k_mismatch(self):
        t = self.good(bits=4)
        g_idx = (np.arange(128) // 32).astype(np.int32)
        with pytest.raises(ValueError, match=r"K = 16 \* 4 = 64 for bits=8"):
            from_gptq(**t, g_idx=g_idx, bits=8, sym=False)

    def test_unpackable_shape_refused_on_export(self):
        qw = QuantizedWeight(np.zeros((20, 8), np.uint8), np.ones((1, 8), np.float16), None,
                             None, 4, -1)
        with pytest.raises(ValueError, match="K=20 and N=8 must both be multiples of 8"):
            to_gptq(qw)

    def test_not_a_quantized_weight(self):
        with pytest.raises(ValueError, match="needs a QuantizedWeight"):
            to_gptq({"q": 1})

    @pytest.mark.parametrize("export", [to_gptq, to_awq])
    def test_code_changed_in_place_past_the_bit_width_refused(self, export):
        # 17 = 0x11 would spill into the neighbouring field of the packed word.
        qw = QuantizedWeight(np.zeros((32, 8), np.uint8), np.ones((1, 8), np.float16),
                             np.ones((1, 8), np.uint8), None, 4, -1)
        qw.q[3, 5] = 17
        with pytest.raises(ValueError, match=r"code 17 at row 3, column 5.*bits=4"):
            export(qw)


# ---------------------------------------------------------------------------------------------
# AWQ tensors
# ---------------------------------------------------------------------------------------------

class TestAwq:
    @SETTINGS
    @given(quantized(bits=4, sym=False, act_order=False))
    def test_from_awq_inverts_to_awq(self, qw):
        assert from_awq(**to_awq(qw), group_size=qw.group_size).equals(as_imported(qw))
        assert from_awq(**to_awq(qw), group_size=None).equals(as_imported(qw))

    @SETTINGS
    @given(quantized(bits=4, act_order=False))
    def test_export_matches_the_interleaved_formula(self, qw):
        t = to_awq(qw)
        assert t["qweight"].dtype == np.int32 and t["qweight"].shape == (qw.k, qw.n // 8)
        assert t["qzeros"].dtype == np.int32 and t["qzeros"].shape == (qw.num_groups, qw.n // 8)
        ref = awq_reference(t["qweight"], t["qzeros"], t["scales"], qw.group_size)
        assert np.array_equal(qw.dequantize().astype(np.float64), ref)

    def test_import_of_arbitrary_words_matches_the_formula(self):
        rng = np.random.default_rng(4)
        qweight, qzeros = random_words(rng, (256, 8)), random_words(rng, (2, 8))
        scales = rng.uniform(0.01, 1, size=(2, 64)).astype(np.float16)
        qw = from_awq(qweight, qzeros, scales, group_size=128)
        ref = awq_reference(qweight, qzeros, scales, 128)
        assert np.array_equal(qw.dequantize().astype(np.float64), ref)

    def test_nibble_interleave_literal(self):
        # Columns 0..7 holding codes 0..7: nibble p holds column AWQ_COLUMN_OF_NIBBLE[p],
        # so reading nibbles 7..0 gives 7 5 3 1 6 4 2 0.
        q = np.tile(np.arange(8, dtype=np.uint8), (32, 1))
        qw = QuantizedWeight(q, np.ones((1, 8), np.float16), np.zeros((1, 8), np.uint8), None,
                             4, 32)
        assert int(to_awq(qw)["qweight"].view(np.uint32)[0, 0]) == 0x75316420

    def test_symmetric_weight_exports_zero_eight_and_imports_explicit(self):
        rng = np.random.default_rng(6)
        qw = QuantizedWeight(rng.integers(0, 16, (64, 16), dtype=np.uint8),
                             np.ones((2, 16), np.float16), None, None, 4, 32)
        t = to_awq(qw)
        assert np.all(t["qzeros"].view(np.uint32) == 0x88888888)
        back = from_awq(**t, group_size=32)
        assert back.zeros is not None and np.all(back.zeros == 8)
        assert np.array_equal(back.dequantize(), qw.dequantize())

    @pytest.mark.parametrize("qw,match", [
        (QuantizedWeight(np.zeros((64, 8), np.uint8), np.ones((2, 8), np.float16), None,
                         None, 8, 32), "4-bit weights only; this weight has bits=8"),
        (QuantizedWeight(np.zeros((64, 8), np.uint8), np.ones((2, 8), np.float16), None,
                         np.array([1] * 32 + [0] * 32, np.int32), 4, 32), "act-order"),
        (QuantizedWeight(np.zeros((64, 12), np.uint8), np.ones((2, 12), np.float16), None,
                         None, 4, 32), "N=12 is not a multiple of 8"),
    ])
    def test_unexpressible_weights_refused(self, qw, match):
        with pytest.raises(ValueError, match=match):
            to_awq(qw)

    @pytest.mark.parametrize("change,match", [
        (dict(qweight=np.zeros((64, 8), np.int32)), r"qweight must have shape .* = \[64, 2\]"),
        (dict(qzeros=np.zeros((2, 2), np.int32)), r"qzeros must have shape .* = \[1, 2\]"),
        (dict(qweight=np.zeros((64, 2), np.int64)), "qweight must be int32"),
        (dict(scales=np.ones((1, 12), np.float16)), "N=12 .* must be a positive multiple of 8"),
        (dict(group_size=32), "one group spans K=64, which does not match group_size=32"),
    ])
    def test_bad_tensors_rejected(self, change, match):
        kwargs = dict(qweight=np.zeros((64, 2), np.int32), qzeros=np.zeros((1, 2), np.int32),
                      scales=np.ones((1, 16), np.float16), group_size=-1)
        with pytest.raises(ValueError, match=match):
            from_awq(**{**kwargs, **change})


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------

def layers_for(bits=4, sym=True, act_order=False, group_size=64, seed=0, lowest_zero=1):
    """Two layers; asymmetric zeros from ``lowest_zero`` up (1: writable as v1 "gptq")."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (k, n) in {"model.layers.0.mlp.up_proj": (128, 32),
                         "model.layers.0.self_attn.q_proj": (256, 16)}.items():
        g = 1 if group_size == -1 else k // group_size
        zeros = None if sym else rng.integers(lowest_zero, 1 << bits, (g, n), dtype=np.uint8)
        g_idx = (rng.permutation(k) // group_size).astype(np.int32) if act_order else None
        out[name] = QuantizedWeight(rng.integers(0, 1 << bits, (k, n), dtype=np.uint8),
                                    rng.uniform(0.01, 1, (g, n)).astype(np.float16), zeros,
                                    g_idx, bits, group_size)
    return out


def assert_same_layers(loaded, layers):
    assert set(loaded) == set(layers)
    for name in layers:
        assert loaded[name].equals(layers[name]), name


def rewrite(tmp_path, drop=(), replace=None):
    """Rewrite model.safetensors without the tensors in ``drop`` and with ``replace`` applied."""
    from safetensors.numpy import load_file
    tensors = load_file(str(tmp_path / "model.safetensors"))
    for key in drop:
        del tensors[key]
    tensors.update(replace or {})
    save_file(tensors, str(tmp_path / "model.safetensors"))


def shard_checkpoint(tmp_path, stem="model"):
    """Split model.safetensors over two shards named as ``stem``'s save names them, with
    ``<stem>.safetensors.index.json``."""
    from safetensors.numpy import load_file
    tensors = load_file(str(tmp_path / "model.safetensors"))
    (tmp_path / "model.safetensors").unlink()
    shards = {f"{stem}-00001-of-00002.safetensors": {}, f"{stem}-00002-of-00002.safetensors": {}}
    weight_map = {}
    for i, (key, value) in enumerate(sorted(tensors.items())):
        shard = sorted(shards)[i % 2]
        shards[shard][key] = value
        weight_map[key] = shard
    for shard, content in shards.items():
        save_file(content, str(tmp_path / shard))
    (tmp_path / f"{stem}.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def edit_config(tmp_path, **changes):
    path = tmp_path / "quantize_config.json"
    cfg = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    path.write_text(json.dumps(cfg))


Q = "model.layers.0.self_attn.q_proj"
FIRST = "model.layers.0.mlp.up_proj"      # layers are loaded in sorted order; this one is first


class TestGptqCheckpointRoundTrip:
    @pytest.mark.parametrize("bits", [4, 8])
    @pytest.mark.parametrize("sym", [True, False])
    @pytest.mark.parametrize("fmt", FORMATS)
    @pytest.mark.parametrize("act_order", [False, True])
    def test_save_then_load(self, tmp_path, bits, sym, fmt, act_order):
        layers = layers_for(bits, sym, act_order, lowest_zero=LOWEST_ZERO[fmt])
        save_gptq_checkpoint(tmp_path, layers, checkpoint_format=fmt)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)
        cfg = json.loads((tmp_path / "quantize_config.json").read_text())
        assert cfg == {"bits": bits, "group_size": 64, "desc_act": act_order, "sym": sym,
                       "checkpoint_format": fmt, "quant_method": "gptq",
                       "static_groups": False, "true_sequential": True, "damp_percent": 0.01}
        assert not list(tmp_path.glob("*.tmp"))

    def test_per_channel(self, tmp_path):
        layers = layers_for(group_size=-1)
        save_gptq_checkpoint(tmp_path, layers)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    def test_synonyms_and_defaults(self, tmp_path):
        layers = layers_for(sym=True)
        save_gptq_checkpoint(tmp_path, layers)
        edit_config(tmp_path, bits=None, w_bit=4, group_size=None, q_group_size=64, sym=None,
                    checkpoint_format=None, quant_method=None, desc_act=None)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    def test_config_json_quantization_config(self, tmp_path):
        layers = layers_for(sym=False)
        save_gptq_checkpoint(tmp_path, layers)
        cfg = json.loads((tmp_path / "quantize_config.json").read_text())
        (tmp_path / "quantize_config.json").unlink()
        (tmp_path / "config.json").write_text(json.dumps({"quantization_config": cfg}))
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    def test_sharded_index(self, tmp_path):
        layers = layers_for(sym=False)
        save_gptq_checkpoint(tmp_path, layers)
        shard_checkpoint(tmp_path)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    @pytest.mark.parametrize("base", ["gptq_model-4bit-64g", "gptq_model-4bit-64g.safetensors"])
    def test_file_named_by_model_file_base_name(self, tmp_path, base):
        # AutoGPTQ names the file "<model_file_base_name>.safetensors" (gptq_model-4bit-128g,
        # say); the config's name wins over a model.safetensors beside it.
        layers = layers_for(sym=False)
        save_gptq_checkpoint(tmp_path, layers)
        (tmp_path / "model.safetensors").rename(tmp_path / "gptq_model-4bit-64g.safetensors")
        save_gptq_checkpoint(tmp_path / "other", layers_for(sym=False, seed=5))
        (tmp_path / "other" / "model.safetensors").rename(tmp_path / "model.safetensors")
        edit_config(tmp_path, model_file_base_name=base)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    @pytest.mark.parametrize("base,stem", [
        (None, "model"),                                  # Hugging Face's sharded save
        ("model", "model"),                               # ... with the common "model" base name
        ("gptq_model-4bit-64g", "gptq_model-4bit-64g"),   # AutoGPTQ's sharded save
        ("gptq_model-4bit-64g", "model"),                 # the base name's file renamed
    ])
    def test_shards_and_base_names(self, tmp_path, base, stem):
        layers = layers_for(sym=False)
        save_gptq_checkpoint(tmp_path, layers)
        shard_checkpoint(tmp_path, stem)
        if base is not None:
            edit_config(tmp_path, model_file_base_name=base)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    def test_renamed_single_file_with_a_stale_base_name(self, tmp_path):
        layers = layers_for(sym=False)
        save_gptq_checkpoint(tmp_path, layers)
        edit_config(tmp_path, model_file_base_name="gptq_model-4bit-64g")
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)    # model.safetensors

    def test_the_only_safetensors_file_of_another_name(self, tmp_path):
        layers = layers_for(sym=False)
        save_gptq_checkpoint(tmp_path, layers)
        (tmp_path / "model.safetensors").rename(tmp_path / "gptq_model-4bit-64g.safetensors")
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    def test_unquantized_tensors_are_ignored(self, tmp_path):
        layers = layers_for()
        save_gptq_checkpoint(tmp_path, layers)
        rewrite(tmp_path, replace={"model.embed_tokens.weight": np.ones((4, 4), np.float16),
                                   "model.norm.weight": np.ones(4, np.float32)})
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)


class TestBrokenGptqCheckpoint:
    @pytest.fixture
    def saved(self, tmp_path):
        save_gptq_checkpoint(tmp_path, layers_for(sym=False, act_order=True))
        return tmp_path

    @pytest.mark.parametrize("cut", [10, 1000, None])
    def test_truncated_file(self, saved, cut):
        path = saved / "model.safetensors"
        data = path.read_bytes()
        path.write_bytes(data[:5] if cut is None else data[:-cut])
        with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors"):
            load_gptq_checkpoint(saved)

    def test_garbage_header(self, saved):
        (saved / "model.safetensors").write_bytes(struct.pack("<Q", 20) + b"{not json at all!!!}")
        with pytest.raises(ValueError, match="model.safetensors"):
            load_gptq_checkpoint(saved)

    @pytest.mark.parametrize("role", ["qzeros", "scales", "g_idx"])
    def test_missing_tensor(self, saved, role):
        rewrite(saved, drop=[f"{Q}.{role}"])
        with pytest.raises(ValueError, match=rf"{Q}\.{role}"):
            load_gptq_checkpoint(saved)

    def test_missing_qweight_leaves_orphans(self, saved):
        rewrite(saved, drop=[f"{Q}.qweight"])
        with pytest.raises(ValueError, match=rf"{Q}\.(qzeros|g_idx) .* has no {Q}\.qweight"):
            load_gptq_checkpoint(saved)

    @pytest.mark.parametrize("role,array,match", [
        ("qweight", np.zeros((32, 24), np.int32), r"qweight .*must have shape"),
        ("qzeros", np.zeros((4, 3), np.int32), r"qzeros .*must have shape"),
        ("scales", np.ones((4, 16), np.float32) * 0.1, r"scales .*float16"),
        ("g_idx", np.zeros(128, np.int32), r"g_idx .*has 128 entries but .*qweight"),
        ("qweight", np.zeros((32, 16), np.float16), r"qweight .*has dtype F16, which this "
                                                    r"loader does not read as qweight"),
    ])
    def test_wrong_tensor(self, saved, role, array, match):
        rewrite(saved, replace={f"{Q}.{role}": array})
        with pytest.raises(ValueError, match=rf"{Q}\.{match}"):
            load_gptq_checkpoint(saved)

    @pytest.mark.parametrize("changes,match", [
        (dict(bits=8), rf"{FIRST}\.g_idx .*bits=8"),
        (dict(group_size=32), rf"quantize_config.json says group_size=32, but {FIRST}\.scales "
                              r".*has G=2 rows for K=128: the checkpoint and its config disagree "
                              r"\(the shapes alone give 64\)"),
        (dict(sym=True), rf"{FIRST}\.qzeros .*pass sym=False"),
        (dict(desc_act=False), rf"{FIRST}\.g_idx .*desc_act=false"),
        (dict(bits=3), "bits=3"),
        (dict(sym="yes"), "sym must be true or false"),
        (dict(checkpoint_format="gptq_v3"), "checkpoint_format='gptq_v3'"),
        (dict(checkpoint_format="marlin"), "sym=false for a Marlin-format checkpoint"),
        (dict(is_marlin_format=True), "sym=false for a Marlin-format checkpoint"),
        (dict(checkpoint_format="marlin", sym=True, desc_act=False),
         r"no '<layer>\.B' tensors"),
        (dict(quant_method="awq"), "use load_awq_checkpoint"),
        (dict(quant_method="bitsandbytes"), "quant_method='bitsandbytes'"),
        (dict(bits=None), "how many bits"),
        (dict(bits=4, w_bit=8), "bits=4 but w_bit=8"),
    ])
    def test_mismatched_config(self, saved, changes, match):
        edit_config(saved, **changes)
        with pytest.raises(ValueError, match=match):
            load_gptq_checkpoint(saved)

    def test_desc_act_without_g_idx(self, saved):
        rewrite(saved, drop=[f"{Q}.g_idx"])
        with pytest.raises(ValueError, match=rf"{Q}\.g_idx .*is missing.*desc_act=true"):
            load_gptq_checkpoint(saved)

    def test_missing_or_unreadable_config(self, saved):
        (saved / "quantize_config.json").write_text("{bits: 4")
        with pytest.raises(ValueError, match="quantize_config.json is not readable JSON"):
            load_gptq_checkpoint(saved)
        (saved / "quantize_config.json").unlink()
        with pytest.raises(ValueError, match="no quantization config"):
            load_gptq_checkpoint(saved)

    def test_missing_safetensors(self, saved):
        (saved / "model.safetensors").unlink()
        with pytest.raises(ValueError, match=r"no model\.safetensors"):
            load_gptq_checkpoint(saved)

    def test_file_the_config_names_is_missing(self, saved):
        edit_config(saved, model_file_base_name="gptq_model-4bit-128g")
        (saved / "model.safetensors").rename(saved / "a.safetensors")
        with pytest.raises(ValueError, match=r"model_file_base_name='gptq_model-4bit-128g', but "
                                             r".* has neither gptq_model-4bit-128g\.safetensors "
                                             r"nor gptq_model-4bit-128g\.safetensors\.index\.json "
                                             r".*its \.safetensors files: a\.safetensors"):
            load_gptq_checkpoint(saved)

    @pytest.mark.parametrize("base", ["", "../model", 4])
    def test_model_file_base_name_not_a_file_name(self, saved, base):
        edit_config(saved, model_file_base_name=base)
        with pytest.raises(ValueError, match="model_file_base_name must be a file name"):
            load_gptq_checkpoint(saved)

    def test_several_safetensors_files_and_nothing_to_choose(self, saved):
        (saved / "model.safetensors").rename(saved / "a.safetensors")
        (saved / "b.safetensors").write_bytes((saved / "a.safetensors").read_bytes())
        with pytest.raises(ValueError, match=r"no model\.safetensors .*2 other \.safetensors "
                                             r"files \(a\.safetensors, b\.safetensors\)\. A "
                                             r"checkpoint sharded over several files needs its "
                                             r"index"):
            load_gptq_checkpoint(saved)

    def test_not_a_folder(self, tmp_path):
        with pytest.raises(ValueError, match="is not a directory"):
            load_gptq_checkpoint(tmp_path / "nowhere")

    @pytest.mark.parametrize("loader,saver,fmt", [
        (load_gptq_checkpoint, save_gptq_checkpoint, None),
        (load_awq_checkpoint, save_awq_checkpoint, None),
        (load_gptq_checkpoint, save_gptq_checkpoint, "marlin")])
    def test_bfloat16_scales_are_read_where_float16_holds_them(self, tmp_path, loader, saver,
                                                               fmt):
        """The scales of a bfloat16 model's checkpoint are BF16 (they follow the model's dtype),
        which safetensors' NumPy reader refuses: they are read from the file, and taken as
        float16 where that is exact (a bfloat16 value in float16's normal range always is)."""
        rng = np.random.default_rng(4)
        if fmt == "marlin":
            layers = marlin_layers(128)
        else:
            layers = layers_for(sym=loader is load_gptq_checkpoint, group_size=64)
            if loader is load_awq_checkpoint:
                layers = layers_for(sym=False, group_size=64)
        for name, qw in layers.items():       # scales bfloat16 can hold: 8 significant bits
            bf = (rng.integers(1, 256, qw.scales.shape) / 2.0 ** rng.integers(8, 14, qw.scales.shape))
            layers[name] = QuantizedWeight(qw.q, bf.astype(np.float16), qw.zeros, qw.g_idx,
                                           qw.bits, qw.group_size)
        saver(tmp_path, layers, **({"checkpoint_format": fmt} if fmt else {}))
        from safetensors.numpy import load_file
        tensors = load_file(str(tmp_path / "model.safetensors"))
        role = "s" if fmt == "marlin" else "scales"
        raw = {}
        for key, value in tensors.items():
            if key.endswith("." + role):      # as bfloat16: float32's top 16 bits
                bits = (value.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
                raw[key] = ("BF16", list(value.shape), bits.tobytes())
            else:
                raw[key] = ({np.dtype(np.int32): "I32", np.dtype(np.float16): "F16"}[value.dtype],
                            list(value.shape), np.ascontiguousarray(value).tobytes())
        write_raw_safetensors(tmp_path / "model.safetensors", raw)
        assert_same_layers(loader(tmp_path), layers)
        # One that float16 cannot hold exactly (2^-30: below its subnormals) is refused.
        key = next(k for k in raw if k.endswith("." + role))
        bits = np.frombuffer(raw[key][2], "<u2").copy()
        bits[0] = 0x3080                       # bfloat16 2^-30
        raw[key] = ("BF16", raw[key][1], bits.tobytes())
        write_raw_safetensors(tmp_path / "model.safetensors", raw)
        with pytest.raises(ValueError, match=r"not exactly representable in float16"):
            loader(tmp_path)


def write_raw_safetensors(path, tensors):
    """A safetensors file from ``{name: (dtype, shape, bytes)}``, written in its layout (an
    8-byte header length, the JSON header, the data), for dtypes NumPy lacks (BF16)."""
    header, data, offset = {}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header).encode()
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + data)


class TestSaveRefusals:
    def test_mixed_layers(self, tmp_path):
        layers = {**layers_for(bits=4), "other": layers_for(bits=8)[Q]}
        with pytest.raises(ValueError, match="layer 'other' has bits=8"):
            save_gptq_checkpoint(tmp_path, layers)

    def test_mixed_symmetry(self, tmp_path):
        layers = {**layers_for(sym=True), "other": layers_for(sym=False)[Q]}
        with pytest.raises(ValueError, match="layer 'other' has sym=False"):
            save_gptq_checkpoint(tmp_path, layers)

    @pytest.mark.parametrize("layers,match", [
        ({}, "non-empty dict"), ({"a": 1}, "is a int, not a QuantizedWeight"),
        ({"": None}, "non-empty strings")])
    def test_bad_layers(self, tmp_path, layers, match):
        with pytest.raises(ValueError, match=match):
            save_gptq_checkpoint(tmp_path, layers)
        assert not (tmp_path / "model.safetensors").exists()


class TestMislabelledCheckpoint:
    def test_v2_checkpoint_labelled_v1_points_at_the_config_key(self, tmp_path):
        layers = layers_for(sym=True)
        save_gptq_checkpoint(tmp_path, layers, checkpoint_format="gptq_v2")
        edit_config(tmp_path, checkpoint_format="gptq")
        with pytest.raises(ValueError, match=rf"{FIRST}\.qzeros .*stores 7 everywhere.*"
                                             r'"checkpoint_format": "gptq_v2"') as info:
            load_gptq_checkpoint(tmp_path)
        assert "sym=False" not in str(info.value)
        edit_config(tmp_path, checkpoint_format="gptq_v2")
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)


def one_group_and_grouped(order=("small", "big")):
    """A layer whose K fits one group of 128 beside one with two groups of 128."""
    rng = np.random.default_rng(12)
    made = {"small": quantize(rng.standard_normal((128, 64)), group_size=128),
            "big": quantize(rng.standard_normal((256, 64)), group_size=128)}
    return {name: made[name] for name in order}


class TestOneGroupLayers:
    """A layer with K <= group_size has a single group (GPTQ tools count ceil(K / group_size)
    groups). It imports as group_size=-1, and beside grouped layers it matches any group size
    >= its K, so it is written with theirs and a loaded checkpoint saves again."""

    @pytest.mark.parametrize("order", [("small", "big"), ("big", "small")])
    def test_loaded_checkpoint_saves_again(self, tmp_path, order):
        save_gptq_checkpoint(tmp_path / "a", one_group_and_grouped(order))
        loaded = load_gptq_checkpoint(tmp_path / "a")
        assert (loaded["small"].group_size, loaded["big"].group_size) == (-1, 128)
        save_gptq_checkpoint(tmp_path / "b", loaded)
        assert json.loads((tmp_path / "b" / "quantize_config.json").read_text())["group_size"] == 128
        assert_same_layers(load_gptq_checkpoint(tmp_path / "b"), loaded)

    def test_per_channel_layer_narrower_than_the_group(self, tmp_path):
        rng = np.random.default_rng(13)
        layers = {"narrow": quantize(rng.standard_normal((64, 64)), group_size=-1),
                  "big": quantize(rng.standard_normal((256, 64)), group_size=128)}
        save_gptq_checkpoint(tmp_path, layers)
        assert json.loads((tmp_path / "quantize_config.json").read_text())["group_size"] == 128
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    def test_single_groups_only(self, tmp_path):
        rng = np.random.default_rng(14)
        layers = {"a": quantize(rng.standard_normal((128, 64)), group_size=-1),
                  "b": quantize(rng.standard_normal((128, 64)), group_size=128)}
        save_gptq_checkpoint(tmp_path, layers)
        loaded = load_gptq_checkpoint(tmp_path)
        assert all(loaded[name].equals(as_imported(layers[name])) for name in layers)

    def test_single_group_wider_than_the_group_size_refused(self, tmp_path):
        rng = np.random.default_rng(15)
        layers = {"wide": quantize(rng.standard_normal((256, 64)), group_size=-1),
                  "big": quantize(rng.standard_normal((256, 64)), group_size=128)}
        with pytest.raises(ValueError, match=r"layer 'wide' has one group spanning K=256.*"
                                             r"group_size=128"):
            save_gptq_checkpoint(tmp_path, layers)

    def test_awq_loaded_checkpoint_saves_again(self, tmp_path):
        rng = np.random.default_rng(16)
        layers = {"small": quantize(rng.standard_normal((128, 64)), group_size=128, sym=False),
                  "big": quantize(rng.standard_normal((256, 64)), group_size=128, sym=False)}
        save_awq_checkpoint(tmp_path / "a", layers)
        loaded = load_awq_checkpoint(tmp_path / "a")
        save_awq_checkpoint(tmp_path / "b", loaded)
        assert_same_layers(load_awq_checkpoint(tmp_path / "b"), loaded)


class TestAwqCheckpoint:
    @pytest.mark.parametrize("group_size", [32, 64, -1])
    def test_save_then_load(self, tmp_path, group_size):
        layers = layers_for(bits=4, sym=False, group_size=group_size)
        save_awq_checkpoint(tmp_path, layers)
        assert_same_layers(load_awq_checkpoint(tmp_path), layers)
        cfg = json.loads((tmp_path / "quantize_config.json").read_text())
        assert cfg == {"quant_method": "awq", "bits": 4, "group_size": group_size,
                       "zero_point": True, "version": "gemm"}

    def test_autoawq_legacy_config_name_and_synonyms(self, tmp_path):
        layers = layers_for(bits=4, sym=False)
        save_awq_checkpoint(tmp_path, layers)
        (tmp_path / "quantize_config.json").unlink()
        (tmp_path / "quant_config.json").write_text(json.dumps(
            {"zero_point": True, "q_group_size": 64, "w_bit": 4, "version": "GEMM"}))
        assert_same_layers(load_awq_checkpoint(tmp_path), layers)

    @pytest.mark.parametrize("changes,match", [
        (dict(version="gemv"), "version='gemv'"),
        (dict(zero_point=False), "zero_point=False"),
        (dict(bits=8), "AWQ checkpoints are 4-bit"),
        (dict(quant_method="gptq"), "quant_method='gptq'"),
        (dict(group_size=128), rf"says group_size=128, but {FIRST}\.scales .*the checkpoint and "
                               r"its config disagree"),
    ])
    def test_mismatched_config(self, tmp_path, changes, match):
        save_awq_checkpoint(tmp_path, layers_for(bits=4, sym=False))
        edit_config(tmp_path, **changes)
        with pytest.raises(ValueError, match=match):
            load_awq_checkpoint(tmp_path)

    def test_missing_tensor_and_truncation(self, tmp_path):
        save_awq_checkpoint(tmp_path, layers_for(bits=4, sym=False))
        rewrite(tmp_path, drop=[f"{Q}.qzeros"])
        with pytest.raises(ValueError, match=rf"{Q}\.qzeros is missing"):
            load_awq_checkpoint(tmp_path)
        path = tmp_path / "model.safetensors"
        path.write_bytes(path.read_bytes()[:-7])
        with pytest.raises(ValueError, match="not a readable safetensors"):
            load_awq_checkpoint(tmp_path)

    def test_act_order_layer_refused(self, tmp_path):
        with pytest.raises(ValueError, match=f"layer '{FIRST}': .*act-order"):
            save_awq_checkpoint(tmp_path, layers_for(bits=4, sym=False, act_order=True))
        assert not (tmp_path / "model.safetensors").exists()


# ---------------------------------------------------------------------------------------------
# Layer by layer: iter_*_checkpoint, and names= (a 70B model's codes are 70 GB as uint8)
# ---------------------------------------------------------------------------------------------

KINDS = {"gptq": (save_gptq_checkpoint, load_gptq_checkpoint, iter_gptq_checkpoint),
         "awq": (save_awq_checkpoint, load_awq_checkpoint, iter_awq_checkpoint)}


@pytest.fixture(params=sorted(KINDS))
def kind(request, tmp_path):
    save, load, iterate = KINDS[request.param]
    layers = layers_for(bits=4, sym=False)
    save(tmp_path, layers)
    return tmp_path, layers, load, iterate


class TestLayerByLayer:
    def test_iter_gives_every_layer_once_in_sorted_order(self, kind):
        folder, layers, _, iterate = kind
        got = list(iterate(folder))
        assert [name for name, _ in got] == sorted(layers) == [FIRST, Q]
        assert_same_layers(dict(got), layers)

    def test_names_selects_layers(self, kind):
        folder, layers, load, iterate = kind
        assert_same_layers(load(folder, names=[Q]), {Q: layers[Q]})
        assert [name for name, _ in iterate(folder, names=(Q,))] == [Q]
        assert load(folder, names=[]) == {}

    @pytest.mark.parametrize("role,dtype,match", [
        ("qweight", np.int64, r"qweight .*has dtype I64, which this loader does not read as "
                              r"qweight \(packed codes are I32"),
        ("qweight", np.float16, "has dtype F16, which this loader does not read as qweight"),
        ("qzeros", np.float32, "has dtype F32, which this loader does not read as qzeros"),
        ("scales", np.int32, r"has dtype I32, which this loader does not read as scales "
                             r"\(scales are F16"),
    ])
    def test_a_tensor_of_the_wrong_dtype_is_refused_at_the_call(self, kind, role, dtype, match):
        """Each tensor's dtype is checked against its role from the headers, when the iterator
        is made (it used to take any dtype of any role there, and fail at the layer)."""
        folder, layers, _, iterate = kind
        from safetensors.numpy import load_file
        key = f"{FIRST}.{role}"
        value = load_file(str(folder / "model.safetensors"))[key]
        rewrite(folder, replace={key: value.astype(dtype)})
        with pytest.raises(ValueError, match=match):
            iterate(folder)

    def test_a_scales_tensor_outside_the_layers_is_not_checked(self, kind):
        """``.scales`` is a common name outside quantized layers: any dtype there is left alone."""
        folder, layers, load, iterate = kind
        rewrite(folder, replace={"model.norm.scales": np.zeros(8, np.int8)})
        assert_same_layers(dict(iterate(folder)), layers)

    def test_unknown_names_are_refused_before_any_layer_is_read(self, kind):
        folder, _, load, iterate = kind
        with pytest.raises(ValueError, match=rf"no layer 'nope' .*has 2: \['{FIRST}', '{Q}'\]"):
            load(folder, names=[Q, "nope"])
        with pytest.raises(ValueError, match="no layer 'nope'"):
            iterate(folder, names=["nope"])           # at the call, not at the first next()

    @pytest.mark.parametrize("names", [Q, [Q, 3], 5])
    def test_names_must_be_a_collection_of_strings(self, kind, names):
        folder, _, load, _ = kind
        with pytest.raises(ValueError, match="names must be"):
            load(folder, names=names)

    def test_iter_reads_one_layer_at_a_time(self, kind, monkeypatch):
        folder, layers, _, iterate = kind
        import safetensors
        read = []
        real_open = safetensors.safe_open

        class Spy:
            def __init__(self, *args, **kwargs):
                self._handle = real_open(*args, **kwargs)

            def __enter__(self):
                self._inner = self._handle.__enter__()
                return self

            def __exit__(self, *exc):
                return self._handle.__exit__(*exc)

            def get_tensor(self, key):
                read.append(key)
                return self._inner.get_tensor(key)

            def __getattr__(self, name):
                return getattr(self._inner, name)

        monkeypatch.setattr(safetensors, "safe_open", Spy)
        layer_by_layer = iterate(folder)
        assert read == []                             # the call reads headers only
        name, qw = next(layer_by_layer)
        assert name == FIRST and qw.equals(layers[FIRST])
        assert read and all(key.startswith(FIRST + ".") for key in read)
        assert [name for name, _ in layer_by_layer] == [Q]
        assert any(key.startswith(Q + ".") for key in read)

    def test_structural_problems_are_found_at_the_call(self, kind):
        folder, _, _, iterate = kind
        rewrite(folder, drop=[f"{Q}.qzeros"])         # Q is the second layer
        with pytest.raises(ValueError, match=rf"{Q}\.qzeros is missing"):
            iterate(folder)

    def test_a_bad_tensor_is_reported_when_its_layer_is_reached(self, kind):
        folder, layers, load, iterate = kind
        rewrite(folder, replace={f"{Q}.scales": np.ones((4, 16), np.float32) * 0.1})
        layer_by_layer = iterate(folder)
        assert next(layer_by_layer)[1].equals(layers[FIRST])
        with pytest.raises(ValueError, match=rf"{Q}\.scales"):
            next(layer_by_layer)
        with pytest.raises(ValueError, match=rf"{Q}\.scales"):
            load(folder)                              # the whole load: nothing returned


# ---------------------------------------------------------------------------------------------
# Marlin-format checkpoints
# ---------------------------------------------------------------------------------------------

def marlin_tensors_by_the_facts(q, scales, group_size):
    """``B`` and ``s`` of the established Marlin format, written step by step from its
    description (shared/research/marlin_facts.md s.1.6, "Offline weight layout"), not from
    ``layout.py``: 16x16 tiles laid along N per 16-row strip; in every run of 1024 entries,
    lane ``i`` takes, for each of the 4 tiles (+256) and each n8 half (+8 columns), rows 2(i%4),
    2(i%4)+1, 2(i%4+4), 2(i%4+4)+1 of column i//4; each 8 interleaved as [0,2,4,6,1,3,5,7];
    packed LSB first. Scales: grouped ``i + 8j`` per 64 columns, per channel
    ``2i + (0,1,8,9,16,17,24,25)`` per 32."""
    k, n = q.shape
    strips = q.reshape(k // 16, 16, n // 16, 16).transpose(0, 2, 1, 3).reshape(k // 16, 16 * n)
    perm = []
    for lane in range(32):
        t, col = lane % 4, lane // 4
        pattern = [16 * row + col + 8 * half for half in (0, 1)
                   for row in (2 * t, 2 * t + 1, 2 * (t + 4), 2 * (t + 4) + 1)]
        for tile in range(4):
            perm += [p + 256 * tile for p in pattern]
    entries = strips.reshape(-1, 1024)[:, perm].reshape(-1, 8)[:, [0, 2, 4, 6, 1, 3, 5, 7]]
    words = np.zeros(entries.shape[0], dtype=np.uint32)
    for i in range(8):
        words |= entries[:, i].astype(np.uint32) << np.uint32(4 * i)
    b = words.reshape(k // 16, 2 * n).view(np.int32)
    if group_size == -1:
        s_perm = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]
    else:
        s_perm = [i + 8 * j for i in range(8) for j in range(8)]
    s = scales.reshape(-1, len(s_perm))[:, s_perm].reshape(scales.shape)
    # Contiguous: fancy indexing may return another memory order, and safetensors' save_file
    # writes an array's buffer as it lies.
    return np.ascontiguousarray(b), np.ascontiguousarray(s)


def marlin_layers(group_size=128, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, (k, n) in {"model.layers.0.mlp.up_proj": (256, 128),
                         "model.layers.0.self_attn.q_proj": (512, 64)}.items():
        g = 1 if group_size == -1 else k // group_size
        out[name] = QuantizedWeight(rng.integers(0, 16, (k, n), dtype=np.uint8),
                                    rng.uniform(0.01, 1, (g, n)).astype(np.float16), None, None,
                                    4, group_size)
    return out


def write_marlin_by_the_facts(folder, layers, group_size, **config):
    tensors = {}
    for name, qw in layers.items():
        tensors[f"{name}.B"], tensors[f"{name}.s"] = marlin_tensors_by_the_facts(
            qw.q, qw.scales, group_size)
    save_file(tensors, str(folder / "model.safetensors"))
    cfg = {"bits": 4, "group_size": group_size, "desc_act": False, "sym": True,
           "quant_method": "gptq", **config}
    (folder / "quantize_config.json").write_text(json.dumps(cfg))


class TestMarlinCheckpoint:
    @pytest.mark.parametrize("group_size", [128, -1])
    @pytest.mark.parametrize("flag", [dict(checkpoint_format="marlin"),
                                      dict(is_marlin_format=True),
                                      dict(checkpoint_format="marlin", is_marlin_format=True)],
                             ids=["checkpoint_format", "is_marlin_format", "both"])
    def test_a_checkpoint_written_from_the_format_description_loads(self, tmp_path, group_size,
                                                                    flag):
        layers = marlin_layers(group_size)
        write_marlin_by_the_facts(tmp_path, layers, group_size, **flag)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    @pytest.mark.parametrize("group_size", [128, -1])
    def test_save_writes_the_format_and_loads_back(self, tmp_path, group_size):
        layers = marlin_layers(group_size, seed=1)
        save_gptq_checkpoint(tmp_path, layers, checkpoint_format="marlin")
        from safetensors.numpy import load_file
        saved = load_file(str(tmp_path / "model.safetensors"))
        assert set(saved) == {f"{name}.{r}" for name in layers for r in ("B", "s")}
        for name, qw in layers.items():
            b, s = marlin_tensors_by_the_facts(qw.q, qw.scales, group_size)
            assert np.array_equal(saved[f"{name}.B"], b)
            assert np.array_equal(saved[f"{name}.s"].view(np.uint16), s.view(np.uint16))
        cfg = json.loads((tmp_path / "quantize_config.json").read_text())
        assert cfg["checkpoint_format"] == "marlin" and cfg["is_marlin_format"] is True
        assert (cfg["bits"], cfg["group_size"], cfg["sym"], cfg["desc_act"]) == (
            4, group_size, True, False)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    def test_group_size_inferred_and_names_and_iteration(self, tmp_path):
        layers = marlin_layers(128)
        write_marlin_by_the_facts(tmp_path, layers, 128, checkpoint_format="marlin")
        edit_config(tmp_path, group_size=None)
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)
        assert [name for name, _ in iter_gptq_checkpoint(tmp_path)] == sorted(layers)
        only = load_gptq_checkpoint(tmp_path, names=[FIRST])
        assert list(only) == [FIRST] and only[FIRST].equals(layers[FIRST])

    def test_a_workspace_tensor_is_not_read(self, tmp_path):
        layers = marlin_layers(128)
        write_marlin_by_the_facts(tmp_path, layers, 128, checkpoint_format="marlin")
        rewrite(tmp_path, replace={f"{FIRST}.workspace": np.zeros(32, np.int32)})
        assert_same_layers(load_gptq_checkpoint(tmp_path), layers)

    @pytest.mark.parametrize("change,match", [
        (dict(bits=8), "Marlin-format checkpoint with bits=8"),
        (dict(sym=False), "sym=false for a Marlin-format checkpoint"),
        (dict(desc_act=True), "desc_act=true for a Marlin-format checkpoint"),
        (dict(is_marlin_format="yes"), "is_marlin_format must be true or false"),
        (dict(is_marlin_format=True, checkpoint_format="gptq_v2"),
         "is_marlin_format=true but checkpoint_format='gptq_v2'"),
        (dict(checkpoint_format="marlin_24"), "2:4 sparse Marlin checkpoint"),
        (dict(group_size=64), r"says group_size=64, but .*\.s .*has G=2 rows for K=256: the "
                              r"checkpoint and its config disagree"),
    ])
    def test_inconsistent_config(self, tmp_path, change, match):
        write_marlin_by_the_facts(tmp_path, marlin_layers(128), 128, checkpoint_format="marlin")
        edit_config(tmp_path, **change)
        with pytest.raises(ValueError, match=match):
            load_gptq_checkpoint(tmp_path)

    @pytest.mark.parametrize("drop,replace,match", [
        ([f"{FIRST}.s"], None, rf"{FIRST}\.s is missing"),
        ([f"{FIRST}.B"], None, rf"{FIRST}\.s .* has no {FIRST}\.B beside it"),
        ([], {f"{FIRST}.B": np.zeros((16, 200), np.int32)}, rf"{FIRST}\.B .*must have shape "
                                                            r"\[K/16, 2N\]"),
        ([], {f"{FIRST}.B": np.zeros((16, 256), np.float32)}, rf"{FIRST}\.B .*has dtype F32, which "
                                                                 r"this loader does not read as B"),
        ([], {f"{FIRST}.B": np.zeros((16, 192), np.int32),
              f"{FIRST}.s": np.ones((2, 96), np.float16)}, r"N=96 .*multiple of 64"),
    ])
    def test_broken_tensors(self, tmp_path, drop, replace, match):
        write_marlin_by_the_facts(tmp_path, marlin_layers(128), 128, checkpoint_format="marlin")
        rewrite(tmp_path, drop=drop, replace=replace)
        with pytest.raises(ValueError, match=match):
            load_gptq_checkpoint(tmp_path)

    @pytest.mark.parametrize("layers,match", [
        (layers_for(bits=4, sym=False, group_size=128), "cannot hold zero points"),
        (layers_for(bits=8, sym=True, group_size=128), "cannot hold bits=8"),
        ({"a": QuantizedWeight(np.zeros((256, 64), np.uint8), np.ones((2, 64), np.float16), None,
                               (np.arange(256) % 2).astype(np.int32), 4, 128)},
         "cannot hold act-order"),
        ({"a": marlin_layers(64)[FIRST]}, r"group sizes \(128, -1\); these layers have "
                                          r"group_size=64"),
    ])
    def test_save_refuses_what_the_format_cannot_hold(self, tmp_path, layers, match):
        with pytest.raises(ValueError, match=match):
            save_gptq_checkpoint(tmp_path, layers, checkpoint_format="marlin")
        assert not (tmp_path / "model.safetensors").exists()


class TestSecondReview:
    """What a review of the data path found (session 60), each a test."""

    def test_imported_scales_that_overflow_float16_when_dequantized_are_refused(self):
        # sym 4-bit: code 0 dequantizes to -8 * 10000 = -80000, inf in the kernels' float16.
        qw = QuantizedWeight(np.full((64, 8), 8, np.uint8), np.full((1, 8), 1e4, np.float16),
                             None, None, 4, 64)
        t = to_gptq(qw)
        q = np.zeros((64, 8), np.uint8)
        q[5, 3] = 1                                  # (1 - 8) * 10000 = -70000
        t["qweight"] = to_gptq(QuantizedWeight(q, np.ones((1, 8), np.float16), None, None, 4,
                                               64))["qweight"]
        with pytest.raises(ValueError, match=r"row 0, column 0 dequantizes to 80000 .*beyond "
                                             r"the float16 maximum"):
            from_gptq(**t)
        # A scale up to 65504 / 8 cannot overflow whatever the codes.
        ok = QuantizedWeight(q, np.full((1, 8), 8188, np.float16), None, None, 4, 64)
        assert ok.dequantize().min() == -8 * 8188.0

    @pytest.mark.parametrize("zero,code", [(0, 15), (15, 0)])
    def test_asymmetric_weights_past_float16_are_refused(self, zero, code):
        """Zero point 0 and code 15 (or 15 and 0) at scale 5000: 75000, inf in float16."""
        q = np.full((64, 8), zero, np.uint8)
        q[7, 5] = code
        zeros = np.full((1, 8), zero, np.uint8)
        with pytest.raises(ValueError, match=r"row 7, column 5 dequantizes to 75000"):
            QuantizedWeight(q, np.full((1, 8), 5000, np.float16), zeros, None, 4, 64)

    def test_the_overflow_check_reaches_the_last_rows(self):
        """The exact check goes through the rows in chunks of about 4M values: a group past
        float16 at the very end of a tall layer is found."""
        k, n = 131072, 64                                     # two chunks of 65536 rows
        q = np.full((k, n), 8, np.uint8)
        q[k - 1, 3] = 0                                       # (0 - 8) * 10000 = -80000
        scales = np.full((k // 128, n), 0.01, np.float16)
        scales[-1] = 10000
        with pytest.raises(ValueError, match=rf"row {k - 1}, column 3 dequantizes to 80000"):
            QuantizedWeight(q, scales, None, None, 4, 128)

    def test_the_v1_wrap_check_at_8_bits(self):
        # 8-bit zeros, 4 per word: zero 0 in column 1 written as an unmasked -1 sets columns
        # 1..3 to 0xFF.
        zeros = [9, 0, 200, 17]
        word = np.uint32(0)
        for j, z in enumerate(zeros):
            word |= np.uint32(np.int64(z - 1) & 0xFFFFFFFF) << np.uint32(8 * j)
        qzeros = np.array([[word]], np.uint32).view(np.int32)
        with pytest.raises(ValueError, match=r"stores 255 .* column 1 and for every column "
                                             r"above it in the word \(2\.\.3"):
            from_gptq(np.zeros((4, 4), np.int32), qzeros, np.ones((1, 4), np.float16), bits=8,
                      sym=False)

    def test_bits_must_be_an_integer(self):
        t = to_gptq(layers_for()[Q])
        with pytest.raises(ValueError, match=r"bits must be an integer \(4 or 8\); got 4\.0"):
            from_gptq(**t, bits=4.0)

    def test_imported_scales_are_a_copy(self):
        t = to_gptq(layers_for()[Q])
        qw = from_gptq(**t)
        assert not np.shares_memory(qw.scales, t["scales"])

    @pytest.fixture
    def saved(self, tmp_path):
        save_gptq_checkpoint(tmp_path, layers_for(sym=True))
        return tmp_path

    def test_per_module_overrides_are_refused_and_exclusions_allowed(self, saved):
        edit_config(saved, dynamic={"-:.*lm_head": {}})
        assert_same_layers(load_gptq_checkpoint(saved), layers_for(sym=True))
        edit_config(saved, dynamic={"+:.*down_proj": {"bits": 8}, "-:.*lm_head": {}})
        with pytest.raises(ValueError, match=r"per-module overrides in 'dynamic' "
                                             r"\(\['\+:\.\*down_proj'\]\)"):
            load_gptq_checkpoint(saved)

    def test_config_words_are_case_insensitive_and_nulls_named(self, saved):
        edit_config(saved, checkpoint_format="GPTQ", quant_method="GPTQ")
        assert_same_layers(load_gptq_checkpoint(saved), layers_for(sym=True))
        cfg = json.loads((saved / "quantize_config.json").read_text())
        cfg["sym"] = None
        (saved / "quantize_config.json").write_text(json.dumps(cfg))
        with pytest.raises(ValueError, match=r"quantize_config.json: sym is null"):
            load_gptq_checkpoint(saved)
        cfg["sym"], cfg["quant_method"] = True, None
        (saved / "quantize_config.json").write_text(json.dumps(cfg))
        with pytest.raises(ValueError, match=r"quantize_config.json: quant_method must be a "
                                             r"string; got None"):
            load_gptq_checkpoint(saved)

    def test_the_awq_loader_names_a_gptq_config(self, saved):
        edit_config(saved, quant_method=None, checkpoint_format=None)
        with pytest.raises(ValueError, match=r"names no quant_method and has GPTQ's keys .*use "
                                             r"load_gptq_checkpoint"):
            load_awq_checkpoint(saved)

    def test_marlin_save_needs_k_a_multiple_of_128(self, tmp_path):
        rng = np.random.default_rng(0)
        qw = QuantizedWeight(rng.integers(0, 16, (64, 64), dtype=np.uint8),
                             np.ones((1, 64), np.float16), None, None, 4, -1)
        with pytest.raises(ValueError, match=r"K=64, not a multiple of 128"):
            save_gptq_checkpoint(tmp_path, {"a": qw}, checkpoint_format="marlin")

    def test_big_endian_scales_are_read(self):
        t = to_gptq(layers_for()[Q])
        qw = from_gptq(**{**t, "scales": t["scales"].astype(">f2")})
        assert qw.equals(from_gptq(**t))
