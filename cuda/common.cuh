// Shared definitions for every kernel source: fp16 types, no host headers (NVRTC has none).
#pragma once
#include <cuda_fp16.h>
