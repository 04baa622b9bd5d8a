// A forward "kernel" that fails on purpose ({{VARIANT_NAME}}), for the
// fault-isolation test: MODE 1 writes far out of bounds, MODE 2 traps,
// MODE 3 spins on a flag nobody sets. Same ABI as the real kernels, so the
// tuner launches it exactly as it launches them.
#include "fat_abi.h"

constexpr int kMode = {{MODE}};
constexpr long long kFarAway = 1ll << 40;  // bytes past any allocation: an illegal address

// Nobody ever sets it; volatile, so the spin below re-reads it every time.
__device__ volatile int fat_never_set = 0;

extern "C" __global__ void fat_fwd_faulty(const fat_fwd_params p) {
  if (kMode == 1) {
    reinterpret_cast<volatile char *>(p.o)[kFarAway + threadIdx.x] = 1;
  } else if (kMode == 2) {
    __trap();
  } else {
    while (!fat_never_set) {
    }
  }
}
