// Hopper's tensor copy engine (TMA) and the barriers that pace a
// warp-specialised kernel (sm_90a), as fwd_ws90.cu uses them: mbarriers
// with transaction counts, bulk tensor loads described by CUtensorMap
// descriptors, named barriers between warpgroups and register
// reallocation between them. The including template includes
// fat_device.cuh first (u32); generator/expand.lua inlines this file into
// each variant's source.
//
// An mbarrier counts arrivals and, for the copy engine, bytes: a phase
// completes when its expected arrivals have arrived and every expected
// byte has landed, and its parity then flips. A waiter names the parity of
// the phase it waits for; a freshly initialised barrier is in phase 0, so
// waiting for parity 1 returns at once (the phase "before" it counts as
// complete): a ring's producer waits on its empty barriers with the
// consumer's parity flipped, and its first round passes.
#pragma once

typedef unsigned long long u64;

// A CUtensorMap as a kernel takes it (a __grid_constant__ parameter): 128
// opaque bytes the host encodes with cuTensorMapEncodeTiled
// (tuner/fwd_launch.c), aligned as cuda.h aligns it.
struct __align__(128) TensorMap {
  u64 opaque[16];
};

__device__ __forceinline__ void mbar_init(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes the initialisation of the block's mbarriers visible to the copy
// engine; a __syncthreads after it, to the other threads.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects BYTES more to land in this phase.
__device__ __forceinline__ void mbar_arrive_expect(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Returns once the phase of parity PARITY has completed (try_wait
// suspends the thread for a while in hardware before it answers no).
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// L2 policies of the copies (CUTLASS's CacheHintSm90 encodings): K and V
// are read by every query block of their head, Q by one.
enum : u64 {
  kEvictFirst = 0x12F0000000000000ull,
  kEvictLast = 0x14F0000000000000ull,
};

__device__ __forceinline__ void tma_prefetch(const TensorMap &map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(&map)) : "memory");
}

// Copies one box of MAP at coordinates (c0, c1, c2, c3) -- innermost
// first -- into shared memory at DST and counts its bytes on BAR. A box
// past the tensor's bounds is filled with zeros (and counted whole).
__device__ __forceinline__ void tma_load_4d(u32 dst, const TensorMap &map, u32 bar, int c0, int c1,
                                            int c2, int c3, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(&map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(u32 dst, const TensorMap &map, u32 bar, int c0, int c1,
                                            int c2, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(&map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "l"(policy)
      : "memory");
}

// Named barriers (0 is __syncthreads'): THREADS, a multiple of 32, take
// part; sync waits for them all, arrive counts this warp and goes on.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Register reallocation of a whole warpgroup (every thread executes it).
template <int kRegs>
__device__ __forceinline__ void regs_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Shared memory written by ordinary stores and read next by the tensor
// cores or the copy engine (the asynchronous proxy): fence in each writing
// thread, then meet.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
