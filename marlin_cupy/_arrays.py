"""What the host-side functions ask of an array they are given."""
from __future__ import annotations


def on_gpu(x) -> bool:
    """Whether ``x`` lives on a GPU (exposes ``__cuda_array_interface__``: CuPy, a CUDA torch
    tensor, Numba). A CUDA torch tensor that requires grad answers that attribute with
    RuntimeError, not AttributeError, which ``hasattr`` lets through: it is on a GPU too."""
    try:
        return hasattr(x, "__cuda_array_interface__")
    except RuntimeError:
        return True
