// What kernels/delta/ leaves to a host model (KDA_HOST_EMULATION in delta_common.cuh and
// 05_chunk_state_tc.cu), on ladder_emu.h: include it after ladder_emu.h and before a delta kernel.
//  * __shared__ arrays (01-04 keep their tiles in statically sized ones) are statics: the model runs
//    the blocks of a plain launch one after another, so one array per kernel instantiation is one per
//    block, as on the GPU. (No delta kernel with such arrays runs as a cluster, whose blocks run
//    together; the attention kernels' `extern __shared__`, which cannot be a static, are not
//    included after this header.)
//  * the dynamic shared memory is the model's (emu_dynamic_smem(), NaN-poisoned per block) and its
//    size the launch's, so a kernel that checks %dynamic_smem_size against its layout does so here;
//  * 05's TF32 MMA and cp.async are the model's own (mma_m16n8k8_tf32: operands truncated to TF32
//    like the tensor core; cp.async deferred to the wait that retires it).
#pragma once
#ifndef ATTNLAB_HOST_EMULATION
#error "kda_hooks.h goes after ladder_emu.h"
#endif
#define KDA_HOST_EMULATION 1
#undef __shared__
#define __shared__ static

inline unsigned kda_dynamic_smem_size() { return (unsigned)emu_launch_smem_bytes; }
#define KDA_DYNAMIC_SHARED(name) float* name = emu_dynamic_smem()
#define __trap() (std::fprintf(stderr, "__trap() at %s:%d\n", __FILE__, __LINE__), std::abort())

inline void kda_mma_tf32(float (&d)[4], const float (&a)[4], const float (&b)[2]) {
    const unsigned ua[4] = {__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]), __float_as_uint(a[3])};
    const unsigned ub[2] = {__float_as_uint(b[0]), __float_as_uint(b[1])};
    mma_m16n8k8_tf32(d, ua, ub);
}
inline void kda_cp_async16(float* smem_dst, const float* gmem_src) { cp_async16(smem_dst, gmem_src); }
inline void kda_cp_async_commit() { cp_async_commit(); }
inline void kda_cp_async_wait_all() { cp_async_wait<0>(); }
