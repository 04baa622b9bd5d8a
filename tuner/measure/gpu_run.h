/* SPDX-License-Identifier: MIT */
/* Everything the tuning worker does on the GPU, as plain in-process calls:
 * open a device, load the support kernels, draw random inputs, run the fp64
 * reference, check a variant against it, time variants. worker.c runs these
 * inside its child process (so a fault kills only the child); GPU tests call
 * them directly. Nothing here forks, and nothing here is used by the
 * tuner's parent process.
 *
 * Every call that can fail returns one of fat_gpu_status, and on failure
 * fills err as "CUDA_ERROR_X: text (what was being done)" or naming the bad
 * value. */
#ifndef FAT_GPU_RUN_H
#define FAT_GPU_RUN_H
#include <stddef.h>
#include <stdint.h>
#include "cuda_api.h"
#include "job.h"
#include "types.h"
#include "fat_abi.h"
#include "fat_abi_bwd.h"
#include "fwd_launch.h"

typedef enum fat_gpu_status {
  FAT_GPU_OK = 0,
  FAT_GPU_FAILED = -1,  /* this call failed; the context is still usable */
  FAT_GPU_FATAL = -2,   /* the context is unusable (a kernel faulted): report and exit */
} fat_gpu_status;

typedef struct fat_gpu fat_gpu;

/* Why a GPU could not be opened, as a code for callers to decide on (the
 * tuner goes on without a GPU for the first two, refuses a bad --gpu for
 * the third); err holds the words for people. */
typedef enum fat_gpu_open_status {
  FAT_GPU_OPENED = 0,
  FAT_GPU_NO_DRIVER = 1,    /* "no CUDA driver: could not load ..." (or an entry point missing) */
  FAT_GPU_NO_DEVICE = 2,    /* "no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE: ..." */
  FAT_GPU_BAD_INDEX = 3,    /* "GPU index 3 out of range: 1 device found" */
  FAT_GPU_OPEN_FAILED = 4,  /* anything else: a driver call, host memory, a worker that
                               would not start (fat_worker_start) */
} fat_gpu_open_status;

/* 1 for the codes that mean "there is no GPU here" (no driver, no device). */
static inline int fat_gpu_absent(int status) {
  return status == FAT_GPU_NO_DRIVER || status == FAT_GPU_NO_DEVICE;
}

/* Loads the driver, initialises device INDEX and makes its primary context
 * current, and describes the device in INFO (nvrtc_* left 0: NVRTC is the
 * parent's). Returns FAT_GPU_OPENED (0) or the reason's code, with err. */
int fat_gpu_open(int index, fat_gpu **out, fat_gpu_info *info, char *err, size_t errlen);
void fat_gpu_close(fat_gpu *g);
/* Adds the seconds G spent in each phase (job.h's fat_phase) since the
 * last call into OUT, and starts counting again from 0. */
void fat_gpu_take_phases(fat_gpu *g, double out[FAT_PHASE_COUNT]);
const fat_cuda *fat_gpu_driver(const fat_gpu *g);
/* How many devices the driver reports on this machine (--gpu all's). */
int fat_gpu_device_count(const fat_gpu *g);
/* The device's cache of fp64 references (ref_cache.h): its counters, or a
 * budget of one's own (fat_ref_cache_init; 0 bytes would mean the default,
 * 1 keeps nothing). */
struct fat_ref_cache *fat_gpu_refs(fat_gpu *g);
/* Takes the fingerprints of kept entry E's device arrays (ref_cache.h's
 * dev_sum) as they are now: what check.c does when it makes an entry, and
 * what a test does after altering one on purpose. */
struct fat_ref_entry;
int fat_gpu_ref_fingerprint(fat_gpu *g, struct fat_ref_entry *e, char *err, size_t errlen);
/* For tests: HOOK(CTX) is called after every check's run of a variant,
 * before its outputs are compared -- a stand-in for a variant that writes
 * outside its outputs. NULL removes it. */
void fat_gpu_set_run_hook(fat_gpu *g, void (*hook)(void *ctx), void *ctx);

/* Sources of the support kernels for NVRTC: templates/fat_util.cu, and
 * templates/reference_fwd.cu with templates/fat_abi.h prepended, from the
 * files embedded in the binary. Heap strings; NULL with err when missing. */
char *fat_gpu_util_source(char *err, size_t errlen);
char *fat_gpu_reference_source(char *err, size_t errlen);

/* Compiles both support kernels for ARCH into UTIL and REF (fat_compile_one;
 * needs NVRTC, not a GPU). Returns 0, or -1 with err (NVRTC's log included
 * when a source fails to compile). */
int fat_gpu_compile_support(const char *arch, fat_build *util, fat_build *ref, char *err,
                            size_t errlen);

/* The ceilings microbenchmarks (templates/ceilings.cu) as NVRTC source, and
 * compiled for ARCH into B (needs NVRTC, not a GPU). Like the support
 * kernels they are compiled by the parent and sent to the worker. */
char *fat_gpu_ceilings_source(char *err, size_t errlen);
int fat_gpu_compile_ceilings(const char *arch, fat_build *b, char *err, size_t errlen);

/* The wgmma ceilings (templates/ceilings_wgmma90.cu) of DTYPE as NVRTC
 * source -- the template with FAT_CEILING_BF16 defined first and its
 * includes of other templates inlined -- and compiled into B for ARCH,
 * which must have wgmma (fat_arch_has_wgmma: -1 with err otherwise). One
 * cubin per dtype: wgmma's products name the element type in their text. */
char *fat_gpu_wgmma_ceilings_source(fat_dtype dtype, char *err, size_t errlen);
int fat_gpu_compile_wgmma_ceilings(const char *arch, fat_dtype dtype, fat_build *b, char *err,
                                   size_t errlen);

/* Measures the GPU's ceilings with the ceilings cubin: copy bandwidth
 * (read + write bytes of a 16-byte-vector copy between two buffers of
 * FAT_CEILING_L2_FACTOR x the L2, at least FAT_CEILING_MIN_COPY_BYTES each,
 * over the median of REPS event-timed runs after WARMUP untimed ones) and
 * the mma.sync m16n8k16 fp16 and bf16 rates (FLOPs counted by the kernel,
 * median time); with WGMMA_CUBIN[dtype] (fat_gpu_compile_wgmma_ceilings's,
 * NULL: none) the wgmma m64n256k16 rates of that dtype the same way, SS
 * and RS. FAILED when the buffers do not fit or a launch is refused. */
int fat_gpu_measure_ceilings(fat_gpu *g, const void *cubin, const void *const wgmma_cubin[2],
                             int reps, int warmup, fat_ceilings *out, char *err, size_t errlen);

/* Loads the support cubins (fat_gpu_compile_support's output). */
int fat_gpu_load_support(fat_gpu *g, const void *util_cubin, const void *ref_cubin, char *err,
                         size_t errlen);

#define FAT_FP8_TENSORS 3  /* q, k, v: the descale factors of fat_fwd_fp8_params */

/* Device tensors of one forward problem; PARAMS points at them in the
 * contiguous (batch, seqlen, heads, head_dim) layout. Q, K and V are of
 * DTYPE (one byte for e4m3; an fp8 K/V cache's Q 16-bit, its K and V one
 * byte), O of fat_dtype_out(DTYPE) (bf16 for e4m3, Q's for a K/V cache). */
typedef struct fat_gpu_tensors {
  fat_fwd_params params;
  fat_dtype dtype;
  int head_dim;
  size_t n_q, n_kv, n_rows;  /* elements of Q (and O), of K (and V), rows of lse */
  CUdeviceptr q, k, v, o, lse;
  CUdeviceptr ref_o, ref_lse; /* double; 0 unless allocated with the reference */
  CUdeviceptr workspace;      /* fp32 scores of a materialize variant, or the partials of a
                                 split-KV one; 0 until one needs it */
  CUdeviceptr seqinfo;        /* variable-length shapes: cu_seqlens_q, cu_seqlens_k, seqused_k;
                                 paged ones: seqused_k */
  size_t workspace_bytes;
  fat_fwd_call call;          /* the packed rows of q and k of a variable-length shape, the SMs;
                                 a paged shape's table, its row length and page size */
  /* A paged shape (fat_check_shape's page_size): K and V also in pools of
   * num_pages pages, (num_pages, page_size, heads_k, head_dim), which the
   * paged variants read through block_table (batch rows of
   * call.block_table_stride entries); params (the reference's) keeps the
   * contiguous K and V. fat_gpu_fill_random lays the pages out anew from
   * its seed: a sequence's pages in random places of the pool, every row
   * no sequence uses NaN, and a table's entries past a sequence's pages
   * naming a page of NaN. 0 for a contiguous shape. */
  CUdeviceptr k_pages, v_pages, block_table;
  int num_pages;
  /* fp8 K and V (fat_dtype_kv_fp8; fat_check_shape's descale_per_head):
   * the descale factors of q, k and v, descale_groups floats each (1, or
   * batch x heads_k), then as many of scratch for the fill's amax; call.fp8
   * points at them, at K's and V's alone for an fp8 K/V cache (Q's NULL).
   * 0 for the 16-bit dtypes. */
  CUdeviceptr descale;
  int descale_groups;
  int *used_keys;             /* host: each sequence's keys (seqused_k), batch entries */
  int batch, seqlen_k, heads_k;
} fat_gpu_tensors;

int fat_gpu_tensors_alloc(fat_gpu *g, const fat_check_shape *s, int head_dim, fat_dtype dtype,
                          int with_reference, fat_gpu_tensors *t, char *err, size_t errlen);
void fat_gpu_tensors_free(fat_gpu *g, fat_gpu_tensors *t);

/* Q, K and V drawn from N(0, 1) on the GPU and rounded to the dtype; the
 * tensors are a function of SEED alone (a paged shape's pages and table
 * too: fat_gpu_tensors). e4m3: each descale group's values (a tensor's, or
 * a (batch, key head)'s) drawn times a spread of its own (0.5 to 2), then
 * quantised as an fp8 user does, descale = amax / 448 (templates/fat_util.cu);
 * an fp8 K/V cache's K and V so, its Q as the 16-bit dtypes' is. */
int fat_gpu_fill_random(fat_gpu *g, fat_gpu_tensors *t, uint64_t seed, char *err, size_t errlen);

/* The parameter block a variant reads T with: T's own, or for a paged
 * variant (PAGED) on a paged shape, K and V in their pools, the batch
 * strides a page's. */
fat_fwd_params fat_gpu_variant_params(const fat_gpu_tensors *t, int paged);

/* Runs the fp64 reference into ref_o / ref_lse and waits for it. */
int fat_gpu_reference(fat_gpu *g, fat_gpu_tensors *t, fat_mask mask, char *err, size_t errlen);

/* Copies BYTES from device SRC to host DST (synchronous). */
int fat_gpu_download(fat_gpu *g, void *dst, CUdeviceptr src, size_t bytes, char *err,
                     size_t errlen);

/* A variant loaded from its cubin. */
typedef struct fat_gpu_kernel {
  fat_kernel_desc desc;  /* cubin pointer not kept valid after loading */
  CUmodule module;
  CUfunction fn;         /* FAT_KERNEL_MATERIALIZE: the scores kernel */
  CUfunction softmax_fn, pv_fn;  /* FAT_KERNEL_MATERIALIZE only */
  CUfunction combine_fn;         /* split-KV forward variants only (desc.splits > 1) */
  /* Backward variants (desc.direction FAT_BWD): fn is the key-block kernel. */
  CUfunction bwd_pre_fn, bwd_dq_fn, bwd_convert_fn;
} fat_gpu_kernel;

/* FAILED (not FATAL) for a cubin the GPU cannot run or a missing entry:
 * those are facts about the variant. A materialize variant (desc.kind)
 * loads its three kernels, entry + FAT_MATERIALIZE_*_SUFFIX. */
int fat_gpu_kernel_load(fat_gpu *g, const fat_kernel_desc *d, fat_gpu_kernel *k, char *err,
                        size_t errlen);
void fat_gpu_kernel_unload(fat_gpu *g, fat_gpu_kernel *k);

/* Allocates T's workspace when K needs one: the scores of a materialize
 * variant, the partials of a split-KV variant (nothing otherwise). FAILED with err "does not fit: needs N bytes, M free (...)"
 * when the device has not that much free memory. */
int fat_gpu_ensure_workspace(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_tensors *t, char *err,
                             size_t errlen);

/* Checks K on one shape: inputs drawn from SEED, O and lse poisoned with
 * NaN, launch, compare (fwd_compare.h) with the fp64 reference of (K's
 * direction, dtype, mask and head dim, S, SEED) -- computed before the
 * launch the first time and kept on the GPU for the next variant checked
 * on the same shape and seed (ref_cache.h), where O is compared with it. Returns OK with OUT filled
 * (passed or not: a launch the driver refuses is a failed check whose reason
 * starts "launch: ", a workspace that does not fit one starting "does not
 * fit: "), FAILED when the check could not be run (out of memory), FATAL
 * when the context died. A backward kernel (desc.direction FAT_BWD) is
 * checked by fat_gpu_check_bwd. */
int fat_gpu_check(fat_gpu *g, const fat_gpu_kernel *k, const fat_check_shape *s, uint64_t seed,
                  fat_check *out, char *err, size_t errlen);

/* Times N kernels on problem P round-robin (A B C A B C ...), so that drift
 * of clocks or temperature falls on all of them alike; inputs random once
 * from SEED. OUT[i] gets kernel i's statistics and the SM clock seen right
 * after the repetitions; a materialize variant's three kernels are timed
 * together between one pair of events. With O->cutoff_ms (one kernel
 * only), a first repetition slower than it ends the timing there: OUT
 * gets 1 repetition. FAILED (err naming the variant) when a launch is
 * refused, or "does not fit: ..." when a materialize variant's workspace
 * does not. */
int fat_gpu_time(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                 const fat_time_opts *o, uint64_t seed, fat_timing *out, char *err,
                 size_t errlen);

/* The SM clock in MHz, measured by fat_clock_probe (about 2 ms). */
int fat_gpu_clock_mhz(fat_gpu *g, int *mhz, char *err, size_t errlen);

/* A seed for stream INDEX derived from SEED (splitmix64): the parent hands
 * one seed per job, each check and tensor gets its own. */
uint64_t fat_seed_derive(uint64_t seed, uint64_t index);

/* ---- backward ----------------------------------------------------------
 * The backward check: fresh random Q, K, V and dO; O and lse from the fp64
 * forward reference, rounded to the dtype and to fp32 as a forward kernel
 * would return them; the variant's gradients (poisoned with NaN first)
 * against the fp64 reference gradients (templates/reference_bwd.cu, in the
 * reference module). fat_gpu_check and fat_gpu_time dispatch here for a
 * kernel whose desc.direction is FAT_BWD. */

/* Device tensors of one backward problem, contiguous like the forward's. */
typedef struct fat_gpu_bwd_tensors {
  fat_gpu_tensors fwd;        /* Q, K, V, O, lse (and the forward reference) */
  fat_bwd_params params;      /* points at everything below and at fwd's tensors */
  CUdeviceptr dout, dq, dk, dv, delta, dq_accum;
  size_t n_accum;             /* 4-byte words of dq_accum: the rows of
                                 FAT_BWD_ACCUM_WIDTH(head_dim) floats, then an ordered
                                 variant's int32 semaphores (fat_bwd_semaphores_bound) */
  CUdeviceptr ref_dq, ref_dk, ref_dv, ref_delta;  /* double; 0 without the reference */
} fat_gpu_bwd_tensors;

int fat_gpu_bwd_tensors_alloc(fat_gpu *g, const fat_check_shape *s, int head_dim, fat_dtype dtype,
                              int with_reference, fat_gpu_bwd_tensors *t, char *err, size_t errlen);
void fat_gpu_bwd_tensors_free(fat_gpu *g, fat_gpu_bwd_tensors *t);

/* Launches K's kernels in order (kernel.h) on T; asynchronous. A launch
 * the driver refuses comes back as its CUresult. */
CUresult fat_gpu_bwd_launch(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_bwd_tensors *t);

/* Checks backward kernel K on one shape, like fat_gpu_check; BC (may be
 * NULL) gets the per-gradient figures. A variant of a deterministic dQ mode
 * (separate or ordered: fat_dq_deterministic) is run twice on the same
 * inputs and must give the same bits ("not deterministic: dQ differs
 * between two runs" otherwise). */
int fat_gpu_check_bwd(fat_gpu *g, const fat_gpu_kernel *k, const fat_check_shape *s, uint64_t seed,
                      fat_bwd_check *bc, fat_check *out, char *err, size_t errlen);
#endif
