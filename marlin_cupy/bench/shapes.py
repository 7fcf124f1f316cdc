"""What the benchmark measures: the layer shapes of DESIGN.md s.7 and the batch sizes.

Shapes are ``(K, N)`` per linear layer of one transformer block, ``y = x @ W`` with ``W [K, N]``
(K = in_features, N = out_features). Nothing here touches the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Linear layers of one transformer block: (K, N) for qkv, o, gate+up, down.
SHAPE_SETS = {
    "llama2-7b": ((4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096)),
    "llama2-13b": ((5120, 15360), (5120, 5120), (5120, 27648), (13824, 5120)),
    "llama2-70b": ((8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192)),
}
#: Blocks of other models. Their layers were first the ones the shipped H200 table did not hold
#: (it was tuned on the llama2 sets), to measure the dispatch's heuristics (NOTES.md entries 81
#: and 84); since entry 85 the table holds them too (``tune --prior``), and
#: ``scripts/ab_probe.py --table-a`` with an older table still times the heuristics on them.
#: The probe scripts take them as sets (``set_shapes``); the benchmark as custom shapes
#: (``--shapes llama3-8b``: its records name only DESIGN.md s.8's sets). llama3-8b: GQA qkv, o (llama2-7b's
#: 4096x4096, in the table), gate+up, down; qwen2.5-7b and -0.5b: GQA qkv with biases
#: dropped, o, gate+up, down (0.5b's 896 and 1152 are no multiples of 256); phi3-mini; and two
#: small models whose short columns (K = 1536, 2048) the whole-column rule was checked on
#: (NOTES.md entry 84): qwen2.5-1.5b (hidden 1536, 2 KV heads of 128, intermediate 8960) and
#: llama3.2-1b (hidden 2048, 8 KV heads of 64, intermediate 8192).
OTHER_SETS = {
    "llama3-8b": ((4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)),
    "qwen2.5-7b": ((3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584)),
    "phi3-mini": ((3072, 9216), (3072, 3072), (3072, 16384), (8192, 3072)),
    "qwen2.5-0.5b": ((896, 1152), (896, 896), (896, 9728), (4864, 896)),
    "qwen2.5-1.5b": ((1536, 2048), (1536, 1536), (1536, 17920), (8960, 1536)),
    "llama3.2-1b": ((2048, 3072), (2048, 2048), (2048, 16384), (8192, 2048)),
}
#: Every fixed set by name (the probe scripts' ``--sets``).
ALL_SETS = {**SHAPE_SETS, **OTHER_SETS}
IDEAL = "ideal"
CUSTOM = "custom"
#: Sets the benchmark selects by name, in the order the report lists them.
SET_NAMES = (*SHAPE_SETS, IDEAL)
DEFAULT_SETS = SET_NAMES
DEFAULT_BATCHES = tuple(2 ** i for i in range(11))      # 1, 2, 4, ..., 1024
DEFAULT_GROUP_SIZE = 128
GROUP_SIZES = (32, 64, 128, -1)                          # weights.SUPPORTED_GROUP_SIZES


def ideal_shape(sms: int) -> tuple:
    """The shape that gives every SM equal work in Marlin's original benchmark: (4*256*SMs, 256*SMs)."""
    if sms <= 0:
        raise ValueError(f"the SM count must be positive; got {sms}.")
    return (4 * 256 * sms, 256 * sms)


@dataclass(frozen=True)
class Layer:
    """One linear layer to measure: which set it belongs to, its index there, and its shape."""
    set: str
    index: int
    k: int
    n: int

    @property
    def name(self) -> str:
        return f"{self.set}[{self.index}] {self.k}x{self.n}"


def parse_batches(text: str) -> tuple:
    """``"1,2,4"`` -> ``(1, 2, 4)``: positive ints, comma separated, duplicates removed, order kept."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ValueError(f"expected comma-separated positive batch sizes such as 1,2,4,8; got {text!r}.")
    out = []
    for t in items:
        try:
            v = int(t)
        except ValueError:
            raise ValueError(f"batch size {t!r} is not an integer (in {text!r}); write e.g. 1,2,4,8.") from None
        if v <= 0:
            raise ValueError(f"batch size {v} is not positive (in {text!r}).")
        if v not in out:
            out.append(v)
    return tuple(out)


def parse_shapes(text: str) -> tuple:
    """``"4096,4096;8192,1024"`` -> ``((4096, 4096), (8192, 1024))``: ``K,N`` pairs separated by ``;``,
    or the name of one of ``OTHER_SETS`` for its layers."""
    if str(text).strip() in OTHER_SETS:
        return OTHER_SETS[str(text).strip()]
    pairs = [p.strip() for p in str(text).split(";") if p.strip()]
    if not pairs:
        raise ValueError(f"expected K,N pairs separated by ';' (e.g. \"4096,4096;8192,1024\"), "
                         f"got {text!r}.")
    shapes = []
    for p in pairs:
        parts = [t.strip() for t in p.split(",")]
        if len(parts) != 2:
            raise ValueError(f"{p!r} is not a K,N pair (it has {len(parts)} fields); write "
                             f"pairs like \"4096,4096\" and separate pairs with ';'.")
        try:
            k, n = int(parts[0]), int(parts[1])
        except ValueError:
            raise ValueError(f"{p!r} holds a non-integer; K and N must be positive integers.") from None
        if k <= 0 or n <= 0:
            raise ValueError(f"{p!r} has a non-positive size; K and N must be positive.")
        shapes.append((k, n))
    return tuple(shapes)


def parse_sets(text: str) -> tuple:
    """``"llama2-7b,ideal"`` -> ``("llama2-7b", "ideal")``, each a known set name."""
    names = [t.strip() for t in str(text).split(",") if t.strip()]
    unknown = [s for s in names if s not in SET_NAMES]
    if unknown or not names:
        raise ValueError(f"unknown shape set(s) {unknown or [text]}; choose from {', '.join(SET_NAMES)} "
                         f"(or give custom shapes with --shapes).")
    return tuple(dict.fromkeys(names))


def set_shapes(text: str) -> list:
    """The distinct (K, N) layers of the named fixed sets, in order (``"llama2-7b,llama2-70b"``),
    for the probe scripts and the tuner."""
    names = [t.strip() for t in str(text).split(",") if t.strip()]
    unknown = [s for s in names if s not in ALL_SETS]
    if unknown or not names:
        raise ValueError(f"unknown shape set(s) {unknown or [text]}; choose from "
                         f"{', '.join(ALL_SETS)}")
    return list(dict.fromkeys(tuple(s) for name in names for s in ALL_SETS[name]))


def check_shape(k: int, n: int, group_size: int) -> None:
    """The harness's own needs: K a multiple of 16 (Marlin tiles, GPTQ words) and of the group size.

    Providers add their own limits (Marlin needs N a multiple of 64, for example) and skip a shape
    they cannot run, with the reason recorded.
    """
    if k % 16:
        raise ValueError(f"K={k} is not a multiple of 16; every provider here packs weights in "
                         f"16-row tiles or 8-row words. Pad K up to a multiple of 16.")
    if group_size != -1 and k % group_size:
        raise ValueError(f"K={k} is not a multiple of group_size={group_size}; choose a group size "
                         f"that divides K, or -1 for one group spanning K.")


def resolve_layers(sets, custom, sms: int, group_size: int) -> list:
    """The layers of the named sets (``ideal`` from the SM count) followed by the custom shapes."""
    layers = []
    for name in sets:
        shapes = (ideal_shape(sms),) if name == IDEAL else SHAPE_SETS[name]
        layers += [Layer(name, i, k, n) for i, (k, n) in enumerate(shapes)]
    layers += [Layer(CUSTOM, i, k, n) for i, (k, n) in enumerate(custom or ())]
    for layer in layers:
        check_shape(layer.k, layer.n, group_size)
    return layers
