// A trivial kernel that exercises the compile pipeline (include inlining, NVRTC, ptxas report).
#include "common.cuh"

extern "C" __global__ void smoke_scale(const half* x, half* y, float alpha, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half(alpha * __half2float(x[i]));
}
