// A timing helper for the benchmark harness (marlin_cupy/bench/harness.py), not a GEMM.
//
// The harness times every call with a pair of CUDA events. If the GPU is idle when a start event is
// recorded, the event fires at once and the elapsed time then includes the host's Python launch
// overhead until the kernel arrives. Enqueuing this one-thread spin first keeps the GPU busy while
// the host queues a whole burst of (event, call, event) triples behind it, so each pair of events
// brackets GPU execution alone, back to back, as in a serving loop replayed from a CUDA graph.
#include "common.cuh"

extern "C" __global__ void spin_ns(unsigned long long ns) {
  unsigned long long t0, t;
  // %globaltimer is a nanosecond wall clock shared by the whole GPU; unlike clock64() it does not
  // depend on the SM clock, which may change while we wait.
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
