#pragma once

// Thin wrappers over the sm_90 PTX the FP8 GEMM uses: mbarriers, bulk tensor copies (TMA) and the
// wgmma fence / commit / wait and shared-memory matrix descriptors. Device-only.

#include <cuda.h>

#include <cstdint>

namespace di::fp8_sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Shared-memory loads by 32-bit shared address (explicit ld.shared: a generic load of a pointer
// whose address space the compiler lost goes through the slower generic path).
__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ float2 lds_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ float4 lds_f32x4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ void sts_f32x4(uint32_t addr, float4 v) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy accesses
// (the copy engine, wgmma operands read from shared memory).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Makes the initialised barriers visible to the async proxy (the copy engine).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  fence_proxy_async_smem();
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Spins until the phase with parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// The stage ring of the FP8 GEMM kernels in dynamic shared memory: kStages stages of operand A
// (kStageA bytes each), then of operand B, then the full and empty barriers; `tail` is the first
// byte after them (kernel-specific tables). The base is rounded up to 1024 bytes (the 128-byte
// swizzle's alignment; the launch adds that slack).
struct StageRing {
  uint8_t* a;
  uint8_t* b;
  uint64_t* full;
  uint64_t* empty;
  uint8_t* tail;
};

template <int kStages, int kStageA, int kStageB>
__device__ __forceinline__ StageRing carve_stage_ring(uint8_t* smem_raw) {
  StageRing r;
  r.a = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                   ~static_cast<uintptr_t>(1023));
  r.b = r.a + kStages * kStageA;
  r.full = reinterpret_cast<uint64_t*>(r.b + kStages * kStageB);
  r.empty = r.full + kStages;
  r.tail = reinterpret_cast<uint8_t*>(r.empty + kStages);
  return r;
}

// One thread: the ring's barriers (full: `full_arrivals` — the producer's expect_tx arrival and
// any others — + the copies' bytes; empty: `consumer_arrivals`), made visible to the copy engine,
// and the two tensor maps prefetched.
template <int kStages>
__device__ __forceinline__ void init_stage_ring(const StageRing& r, uint32_t consumer_arrivals,
                                                const CUtensorMap* map_a, const CUtensorMap* map_b,
                                                uint32_t full_arrivals = 1);

// 2-D bulk tensor copy global -> shared, completing `bar`'s transaction count. c0 is the inner
// (contiguous) coordinate.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// One arrival on `bar` once all of this thread's earlier cp.async copies have landed (counted in
// the barrier's expected arrivals: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar))
               : "memory");
}

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

template <int kStages>
__device__ __forceinline__ void init_stage_ring(const StageRing& r, uint32_t consumer_arrivals,
                                                const CUtensorMap* map_a, const CUtensorMap* map_b,
                                                uint32_t full_arrivals) {
  for (int s = 0; s < kStages; ++s) {
    mbar_init(&r.full[s], full_arrivals);
    mbar_init(&r.empty[s], consumer_arrivals);
  }
  mbar_init_fence();
  tma_prefetch_descriptor(map_a);
  tma_prefetch_descriptor(map_b);
}

// Programmatic dependent launch: wait until the preceding grid in the stream completed and its
// memory is visible (a no-op when the kernel was launched without the PDL attribute), and let
// the next grid launch early (it still waits for this one with grid_dependency_wait).
__device__ __forceinline__ void grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void grid_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across a wgmma wait.
__device__ __forceinline__ void fence_regs(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}

// Descriptor of a K-major tile whose rows are 128 bytes (128 e4m3 values), stored with the
// 128-byte swizzle the bulk copy applies: 8-row core groups 1024 bytes apart (stride byte
// offset), leading byte offset unused for swizzled K-major layouts. The tile must be 1024-byte
// aligned; advancing the start address by 32 bytes selects the next k32 slice.
__device__ __forceinline__ uint64_t smem_desc_k128_sw128(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFFull) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

}  // namespace di::fp8_sm90
