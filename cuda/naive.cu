// The two naive baselines of the benchmark: what a first attempt at an INT4 x FP16 GEMM looks like.
//
// Weights are in the simple GPTQ-style layout that `marlin_cupy/baselines.py` builds:
//   qweight int32 [K/8, N]: bits 4i..4i+3 of qweight[r][n] hold the code of W[8r + i][n];
//   scales  half  [G, N]:  group g covers rows g*group_size .. (g+1)*group_size - 1
//                          (group_size <= 0 means one group spanning all of K);
//   one fixed zero point (8 for symmetric 4-bit): W[k][n] = (code - zero) * scales[k / group_size][n].
// Neither kernel uses tensor cores, cp.async or a pipeline. They only have to be right; the benchmark
// measures them to show what Marlin's design buys.
#include "common.cuh"

// ---------------------------------------------------------------------------------------------
// naive-dequant-gemm, step 1: expand the int4 weights into an fp16 [K, N] scratch matrix, which
// cuBLAS then multiplies. One thread per packed int32 (8 rows of one column): adjacent threads take
// adjacent columns, so both the int32 reads and the fp16 writes of a warp are coalesced.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void naive_dequantize(const int* __restrict__ qweight,
                                            const half* __restrict__ scales,
                                            half* __restrict__ w,
                                            int k, int n, int group_size, int zero) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  // Rows of packed words are strided over gridDim.y so that any K fits the grid's y limit.
  for (int row8 = blockIdx.y; row8 < k / 8; row8 += gridDim.y) {
    const unsigned int packed = static_cast<unsigned int>(qweight[(size_t)row8 * n + col]);
    const int group = group_size > 0 ? (row8 * 8) / group_size : 0;
    const float scale = __half2float(scales[(size_t)group * n + col]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int code = (packed >> (4 * i)) & 0xF;
      // (code - zero) * scale is exact in fp32 (4-bit integer times an 11-bit mantissa), so the
      // one rounding to fp16 below gives the same fp16 weight as multiplying in fp16.
      w[(size_t)(row8 * 8 + i) * n + col] = __float2half(static_cast<float>(code - zero) * scale);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// naive-fused: C = A @ dequant(W) in one kernel, fp32 accumulation on CUDA cores.
// A block owns NAIVE_THREADS output columns (one per thread) and NAIVE_TILE_M rows of A. For each
// K-chunk it stages those rows of A in shared memory as fp32, then every thread streams its own
// column of packed weights from global memory, dequantizes in registers and accumulates all its
// rows. Loads are synchronous and unpipelined, so the memory latency is exposed.
// ---------------------------------------------------------------------------------------------
constexpr int NAIVE_THREADS = 64;   // output columns per block: enough blocks for every SM
constexpr int NAIVE_TILE_M = 16;    // rows of A (and C) per block
constexpr int NAIVE_TILE_K = 128;   // rows of K staged in shared memory per step (multiple of 8)
static_assert(NAIVE_TILE_K % 8 == 0, "a K-chunk must hold whole packed int32 words");

extern "C" __global__ void __launch_bounds__(NAIVE_THREADS)
naive_fused(const half* __restrict__ a, const int* __restrict__ qweight,
            const half* __restrict__ scales, half* __restrict__ c,
            int m, int k, int n, int group_size, int zero) {
  __shared__ float a_sh[NAIVE_TILE_M][NAIVE_TILE_K];
  const int col = blockIdx.x * NAIVE_THREADS + threadIdx.x;
  const int row0 = blockIdx.y * NAIVE_TILE_M;
  const int rows = min(NAIVE_TILE_M, m - row0);

  float acc[NAIVE_TILE_M];
#pragma unroll
  for (int r = 0; r < NAIVE_TILE_M; ++r) acc[r] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += NAIVE_TILE_K) {
    const int kc = min(NAIVE_TILE_K, k - k0);  // K % 8 == 0 is checked in Python
    __syncthreads();  // every thread is done reading the previous chunk
    for (int i = threadIdx.x; i < NAIVE_TILE_M * NAIVE_TILE_K; i += NAIVE_THREADS) {
      const int r = i / NAIVE_TILE_K, kk = i % NAIVE_TILE_K;
      // Rows past M and columns past the chunk are zero, so they add nothing to acc.
      a_sh[r][kk] = (r < rows && kk < kc) ? __half2float(a[(size_t)(row0 + r) * k + k0 + kk]) : 0.0f;
    }
    __syncthreads();
    if (col < n) {
      for (int kk = 0; kk < kc; kk += 8) {
        const unsigned int packed = static_cast<unsigned int>(qweight[(size_t)((k0 + kk) / 8) * n + col]);
        const int group = group_size > 0 ? (k0 + kk) / group_size : 0;
        const float scale = __half2float(scales[(size_t)group * n + col]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float w = static_cast<float>(static_cast<int>((packed >> (4 * i)) & 0xF) - zero) * scale;
          // Every thread of the block reads the same a_sh word: a broadcast, no bank conflict.
          // `r < rows` is the same for the whole block, so a small batch costs only its rows.
#pragma unroll
          for (int r = 0; r < NAIVE_TILE_M; ++r)
            if (r < rows) acc[r] += a_sh[r][kk + i] * w;
        }
      }
    }
  }
  if (col < n) {
#pragma unroll
    for (int r = 0; r < NAIVE_TILE_M; ++r)
      if (r < rows) c[(size_t)(row0 + r) * n + col] = __float2half(acc[r]);
  }
}
