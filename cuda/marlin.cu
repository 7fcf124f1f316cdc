// Entry points of the fused kernel. marlin_cupy/kernels.py appends one extern "C" wrapper per
// configuration it needs, so every module holds exactly the instances it launches and each
// instance has a plain name that CuPy's on-disk cache finds on any version.
#include "marlin.cuh"
