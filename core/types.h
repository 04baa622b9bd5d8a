/* SPDX-License-Identifier: MIT */
/* The tuner's shared vocabulary: what a variant, a build, a problem, a check
 * and a timing are. Every module speaks in these types; none owns them. */
#ifndef FAT_TYPES_H
#define FAT_TYPES_H
#include <stddef.h>

/* FAT_E4M3: fp8 inputs (Q, K and V in e4m3, each with an fp32 descale
 * factor: templates/fat_abi_fp8.h), O in bf16 (fat_dtype_out), forward only.
 * FAT_FP16_E4M3KV, FAT_BF16_E4M3KV: an fp8 K/V cache (issue 24) -- Q and O
 * in the 16-bit type, K and V in e4m3 with K's and V's descale factors (the
 * same block; Q has none), forward only, on the decoding families. */
typedef enum fat_dtype {
  FAT_FP16 = 0,
  FAT_BF16 = 1,
  FAT_E4M3 = 2,
  FAT_FP16_E4M3KV = 3,
  FAT_BF16_E4M3KV = 4,
} fat_dtype;
#define FAT_N_DTYPES 5
typedef enum fat_mask { FAT_MASK_NONE = 0, FAT_MASK_CAUSAL = 1, FAT_MASK_LOCAL = 2 } fat_mask;
typedef enum fat_direction { FAT_FWD = 0, FAT_BWD = 1 } fat_direction;

/* Names as they appear in variant names, the CLI and the database. */
/* "fp16", "bf16", "e4m3", "fp16-e4m3kv", "bf16-e4m3kv" */
const char *fat_dtype_name(fat_dtype d);
const char *fat_mask_name(fat_mask m);            /* "none", "causal", "local" */
const char *fat_direction_name(fat_direction d);  /* "fwd", "bwd" */
int fat_dtype_parse(const char *s, fat_dtype *out);   /* 0 on success */
int fat_mask_parse(const char *s, fat_mask *out);
int fat_direction_parse(const char *s, fat_direction *out);
size_t fat_dtype_size(fat_dtype d);               /* bytes per element of Q: 2, e4m3 1 */
size_t fat_dtype_kv_size(fat_dtype d);            /* bytes per element of K and V: 2, e4m3 and *-e4m3kv 1 */
/* The type of O (and of dO, dQ, dK, dV): the inputs' own, bf16 for e4m3,
 * Q's for an fp8 K/V cache. */
fat_dtype fat_dtype_out(fat_dtype d);
/* K and V are e4m3 bytes with descale factors (e4m3, fp16-e4m3kv,
 * bf16-e4m3kv): 1, else 0. */
int fat_dtype_kv_fp8(fat_dtype d);
/* An fp8 K/V cache's dtype (fp16-e4m3kv, bf16-e4m3kv): Q and O 16-bit, K
 * and V e4m3 with descale factors, Q's factor none: 1, else 0. Inline: the
 * tolerance rule (tuner/measure/tolerance.h) asks it without libfatune_core. */
static inline int fat_dtype_is_kv8(fat_dtype d) { return d == FAT_FP16_E4M3KV || d == FAT_BF16_E4M3KV; }

/* How a backward variant sums dQ over the key blocks (its DQ_MODE).
 * FAT_DQ_ATOMIC: fp32 atomics into the dQ accumulator, then a conversion
 * pass; the order of the adds varies, so the bits may too. FAT_DQ_SEPARATE:
 * a second pass a query block, summing in registers (mma80's); no
 * accumulator. FAT_DQ_ORDERED: the accumulator and the conversion as
 * atomic, but the adds into a tile wait on int32 semaphores so that they
 * come in a fixed order (ws90's; bwd_launch.h places the semaphores).
 * The last two give bit-identical gradients run to run. */
typedef enum fat_dq_mode { FAT_DQ_ATOMIC = 0, FAT_DQ_SEPARATE = 1, FAT_DQ_ORDERED = 2 } fat_dq_mode;
/* Whether MODE's gradients are bit-identical run to run: what a
 * deterministic backward may be served. */
static inline int fat_dq_deterministic(fat_dq_mode mode) {
  return mode == FAT_DQ_SEPARATE || mode == FAT_DQ_ORDERED;
}
/* Whether MODE sums dQ into the fp32 accumulator (the workspace's), which
 * the conversion pass then turns into dQ. */
static inline int fat_dq_accumulates(fat_dq_mode mode) {
  return mode == FAT_DQ_ATOMIC || mode == FAT_DQ_ORDERED;
}

/* Whether PARAMS, a variant's space-separated parameter string ("BLOCK_M=64
 * BLOCK_N=128 ..."), has every space-separated word of WORDS ("DQ_MODE=ordered
 * STAGES=2") as one of its words: 1 or 0. Empty WORDS: 1; NULL PARAMS is
 * empty. The tuner's --param filter, rehash's test that a stored variant's
 * parameters are today's or a subset, the GPU tests' FATUNE_TEST_PARAM. */
int fat_params_have_all(const char *params, const char *words);

/* The parameters of a backward variant from its canonical parameter string
 * ("BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic WARPS=4"): its query tile
 * (BLOCK_M), key block (BLOCK_N) and DQ_MODE (atomic, separate or ordered):
 * 0, or -1 with err naming what is missing or malformed. */
int fat_bwd_params_parse(const char *params, int *block_m, int *block_n, fat_dq_mode *dq_mode,
                         char *err, size_t errlen);

/* The decoding schedule of a forward variant from its parameter string
 * (core/fwd_launch.h launches it): PACK_GQA (0 or 1) and SPLITS (1 ..
 * FAT_FWD_MAX_SPLITS, or 0: chosen at launch, fat_fwd_launch_splits), 0
 * and 1 when the string does not name them (the mma80 family): 0, or -1
 * with err naming the bad value. */
#define FAT_FWD_MAX_SPLITS 32  /* the combine kernel gives each split one lane */
int fat_fwd_params_parse(const char *params, int *pack_gqa, int *splits, char *err,
                         size_t errlen);

/* PERSISTENT of a forward variant that loads through tensor maps: one
 * block a query block; at most one block an SM, each taking every n-th
 * query block; or each drawing the next from a counter (masked blocks). */
enum { FAT_FWD_ONE_BLOCK_EACH = 0, FAT_FWD_RESIDENT = 1, FAT_FWD_DRAWN = 2 };

/* The schedule of a forward variant that loads through tensor maps
 * (FAT_KERNEL_FUSED_TMA): BLOCK_N of its parameter string, 1 .. 256 (a
 * copy box's rows), and PERSISTENT, 0 .. FAT_FWD_DRAWN (0 when absent): 0,
 * or -1 with err naming what is missing or bad. */
int fat_fwd_tma_parse(const char *params, int *block_n, int *persistent, int *slab, char *err, size_t errlen);

/* PERSISTENT of a backward variant that loads through tensor maps: 0 (one
 * block a key block, also when absent) or FAT_FWD_RESIDENT (at most one
 * block an SM, each taking every n-th key block): 0, or -1 with err. */
int fat_bwd_tma_parse(const char *params, int *persistent, char *err, size_t errlen);

/* One concrete kernel: a template family expanded with one set of parameters.
 * Produced by the generator (Lua); strings are heap-owned, freed by
 * fat_variant_free. */
typedef struct fat_variant {
  char *name;        /* stable and readable: fwd.mma80.bf16.d128.causal.m128n64w4s2 */
  char *family;      /* template family: "mma80" */
  char *params;      /* canonical parameter list, sorted: "BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4" */
  char *entry;       /* kernel symbol in the source (extern "C") */
  char *source;      /* self-contained CUDA C++: includes inlined, parameters substituted */
  char hash[65];     /* sha256 of source, hex: the variant's content hash */
  fat_direction direction;
  fat_dtype dtype;
  fat_mask mask;
  int head_dim;      /* the template's head dimension */
  int block_m;       /* query rows per thread block: grid.x = ceil(seqlen_q / block_m) */
  int threads;       /* threads per block */
  int smem_bytes;    /* dynamic shared memory per block */
  int is_default;    /* 1 for the family's fixed default configuration of this
                        (head dim, dtype, mask): the baseline tuning is measured against */
} fat_variant;

void fat_variant_free(fat_variant *v);

/* One NVRTC compilation of a variant for one architecture. */
typedef struct fat_build {
  char arch[16];          /* "sm_80", "sm_90a" */
  char key[65];           /* cache key: sha256(source, arch, options, NVRTC version) */
  int ok;                 /* 1 when a cubin was produced */
  unsigned char *cubin;   /* heap-owned */
  size_t cubin_size;
  int registers;          /* per thread, from ptxas */
  int smem_static;        /* bytes of static shared memory, from ptxas */
  int stack_frame;        /* bytes */
  int spill_stores;       /* bytes; anything non-zero is a warning sign */
  int spill_loads;
  double compile_ms;
  char *log;              /* NVRTC's log, heap-owned, may be empty */
  int capped;             /* ok = 0 because a compile cap (time, memory) stopped NVRTC or
                             it died: no answer about the source, never cached */
} fat_build;

void fat_build_free(fat_build *b);

/* The GPU a tuning run happens on; every timing names it. */
typedef struct fat_gpu_info {
  char name[256];
  int cc_major, cc_minor;
  int sm_count;
  int driver_version;         /* cuDriverGetVersion: 13000 */
  int nvrtc_major, nvrtc_minor;
  size_t mem_bytes;
  int smem_per_block_optin;   /* largest dynamic shared memory one block may ask for */
  int l2_bytes;
  int clock_khz;              /* max SM clock */
  int mem_clock_khz;
} fat_gpu_info;

/* A paged problem's page sizes: powers of two from the kernels' 16-key
 * group (templates/fat_abi_kv.h) to what the public API takes. */
#define FAT_PAGE_SIZE_MIN 16
#define FAT_PAGE_SIZE_MAX 65536

/* Sequences of a variable-length profile, at most. */
#define FAT_VARLEN_MAX 256
/* Characters of a profile's text ("538,2092,3976"), its terminator included. */
#define FAT_LENGTHS_TEXT_CAP (FAT_VARLEN_MAX * 8)

/* A variable-length profile (flash_attn_varlen_func's packed batch): the
 * lengths of its n sequences, queries and keys alike. n = 0: a dense batch. */
typedef struct fat_lengths {
  int n;
  int v[FAT_VARLEN_MAX];
} fat_lengths;

/* One attention problem: what a winner is chosen for. */
typedef struct fat_problem {
  fat_direction direction;
  fat_dtype dtype;
  fat_mask mask;
  int head_dim;
  int batch, heads, heads_k;
  int seqlen_q, seqlen_k;
  int window_left, window_right;  /* FAT_MASK_LOCAL's window (-1: unbounded); 0, 0 otherwise */
  /* A variable-length profile; then batch = lengths.n and seqlen_q =
   * seqlen_k = the longest (fat_lengths_apply). */
  fat_lengths lengths;
  /* A paged K/V cache's page size (a power of two from 16: tokens a page;
   * the forward reads K and V through a block table, pages in random
   * order); 0 for a contiguous cache. */
  int page_size;
} fat_problem;

/* FLOPs by the FlashAttention papers' convention: forward 4*B*H*Sq*Sk*D,
 * halved for causal when Sq == Sk; backward 2.5x forward. A local window
 * counts the (query, key) pairs it lets through. A variable-length profile
 * counts each sequence so, at its own length. */
double fat_problem_flops(const fat_problem *p);

/* P's profile as stored ("538,2092,3976"; "" for a dense batch) into OUT of
 * FAT_LENGTHS_TEXT_CAP characters. */
void fat_lengths_text(const fat_problem *p, char *out);
/* Parses TEXT (as fat_lengths_text writes it, or "" for none) into OUT:
 * 0, or -1 with ERR set (not a comma-separated list of lengths 1 ..
 * FAT_VARLEN_MAX_LENGTH, or more than FAT_VARLEN_MAX of them). */
#define FAT_VARLEN_MAX_LENGTH (1 << 20)
int fat_lengths_parse(const char *text, fat_lengths *out, char *err, size_t errlen);
/* Sets P's batch, seqlen_q and seqlen_k from its profile (no-op when dense). */
void fat_lengths_apply(fat_problem *p);
/* A profile's tokens (the sum of its lengths), and its longest length (0
 * for none). */
long long fat_lengths_tokens(const fat_lengths *l);
int fat_lengths_longest(const fat_lengths *l);

/* Outcome of checking one variant against the reference on one shape. */
typedef struct fat_check {
  int batch, heads, seqlen_q, seqlen_k;  /* the shape checked */
  double rel_l2;        /* ||out - ref|| / ||ref|| over O */
  double max_abs;       /* max |out - ref| over O */
  double lse_max_abs;   /* max |lse - lse_ref| over finite rows */
  long long nonfinite;  /* NaN or inf in O (poisoned outputs left unwritten show here) */
  int passed;
  char reason[160];     /* "ok", "rel_l2 0.03 > 0.01", "fault: illegal address", "timeout" */
} fat_check;

/* Outcome of timing one variant on one problem. */
typedef struct fat_timing {
  int reps;
  double median_ms, min_ms, max_ms, p10_ms, p90_ms;
  double tflops;        /* fat_problem_flops / median */
  int sm_clock_mhz;     /* clock seen during the run, 0 if unknown */
} fat_timing;

#endif
