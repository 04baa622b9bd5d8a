/* SPDX-License-Identifier: MIT */
/* libfatune: the public C API of fatune's runtime. A program opens a context
 * for one GPU, describes an attention problem by its tensors, and launches
 * the variant the tuner found fastest for that problem on that GPU -- from the
 * user's own tuning database, else from the tables shipped with the release,
 * else from a built-in default known to pass for every supported shape --
 * without tuning, and without compiling when a cubin for the GPU is stored.
 *
 * Nothing here prints or exits: every call returns a fat_status, and the
 * context keeps the message of its last failure (fat_context_error). Set
 * FATUNE_LOG=1 to have the library log its choices on stderr.
 *
 * Threads: several host threads may launch through one context at once.
 * Kernels run in the device's primary context (the CUDA runtime's, and
 * hence PyTorch's): the calls that load, launch or unload
 * (fat_attention_fwd, fat_attention_fwd_workspace, fat_attention_bwd,
 * fat_context_close) make it current on the calling thread while they run
 * and put the thread's own current context back before they return, on
 * success and on failure alike.
 *
 * Link with -lfatune (or pkg-config --libs fatune, or find_package(fatune)).
 * The library loads libcuda and NVRTC at run time (dlopen): it links against
 * neither, and needs NVRTC only when no stored cubin fits the GPU. */
#ifndef FATUNE_H
#define FATUNE_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FAT_API __attribute__((visibility("default")))
#else
#define FAT_API
#endif

/* The version of this header. Before 1.0 a minor version may change the
 * ABI; the soname (libfatune.so.N) changes whenever it does, and every
 * public struct starts with its struct_size (below), so that a program
 * built against another release's header is refused by name rather than
 * misread. fat_version_number() is the library's own, to compare with
 * FATUNE_VERSION_NUMBER at run time (as zstd's ZSTD_versionNumber and
 * SQLite's sqlite3_libversion_number). */
#define FATUNE_VERSION_MAJOR 0
#define FATUNE_VERSION_MINOR 6
#define FATUNE_VERSION_PATCH 0
#define FATUNE_VERSION_NUMBER \
  (FATUNE_VERSION_MAJOR * 10000 + FATUNE_VERSION_MINOR * 100 + FATUNE_VERSION_PATCH)
#define FATUNE_STRINGIFY_(x) #x
#define FATUNE_STRINGIFY(x) FATUNE_STRINGIFY_(x)
#define FATUNE_VERSION_STRING                                                       \
  FATUNE_STRINGIFY(FATUNE_VERSION_MAJOR) "." FATUNE_STRINGIFY(FATUNE_VERSION_MINOR) "." \
      FATUNE_STRINGIFY(FATUNE_VERSION_PATCH)

/* The library's FATUNE_VERSION_NUMBER (400 for 0.4.0) and
 * FATUNE_VERSION_STRING ("0.4.0"), which may differ from the header's a
 * program was built with. */
FAT_API unsigned fat_version_number(void);
FAT_API const char *fat_version_string(void);

/* Struct sizes. Each public struct's first field is struct_size, which the
 * caller sets to sizeof the struct as its header declares it -- the _INIT
 * macros below do, zeroing the rest:
 *     fat_attn_args a = FAT_ATTN_ARGS_INIT;
 * Every call that reads or writes a struct first compares its struct_size
 * with the library's own sizeof and refuses another size with
 * FAT_ERR_INVALID_ARGUMENT ("fat_attn_args.struct_size 0: ..."), writing
 * nothing into it: a struct of another release's layout is never misread.
 * (C++ before C++20 has no designated initialisers: there the macros list
 * struct_size alone, which -Wmissing-field-initializers remarks on.) */
#ifdef __cplusplus
#define FAT_STRUCT_INIT_(type) {sizeof(type)}
#else
#define FAT_STRUCT_INIT_(type) {.struct_size = sizeof(type)}
#endif

/* Result codes of every call. fat_strerror names them; the context's
 * fat_context_error says what exactly went wrong. */
typedef enum fat_status {
  FAT_OK = 0,                /* success */
  FAT_ERR_INVALID_ARGUMENT,  /* a NULL pointer, a bad shape, stride, alignment or scale */
  FAT_ERR_UNSUPPORTED,       /* no kernel serves this problem (head dim, dtype, mask, GPU) */
  FAT_ERR_NO_DRIVER,         /* libcuda could not be loaded, or has no such device */
  FAT_ERR_CUDA,              /* a CUDA driver call failed (module load, launch) */
  FAT_ERR_NO_NVRTC,          /* a kernel must be compiled and NVRTC could not be loaded */
  FAT_ERR_COMPILE,           /* NVRTC refused a stored kernel source */
  FAT_ERR_DATABASE,          /* a table or the user database could not be read or written */
  FAT_ERR_OUT_OF_MEMORY,     /* a host allocation failed */
  FAT_ERR_INTEGRITY,         /* a stored cubin's bytes, or a stored source, do not hash to
                                their recorded sha256 */
} fat_status;

/* "invalid argument", "unsupported problem", ... for S; never NULL. */
FAT_API const char *fat_strerror(fat_status s);

/* Element types; values match the tuner's. FAT_ATTN_E4M3: q, k and v in
 * fp8 (FP8 E4M3FN, one byte each, with descale factors: fat_attn_args),
 * o in bf16; forward only, on Hopper (sm_90a). FAT_ATTN_FP16_E4M3KV and
 * FAT_ATTN_BF16_E4M3KV: an fp8 K/V cache for decoding -- q and o in the
 * 16-bit type, k and v in e4m3 with k_descale and v_descale (q_descale
 * NULL, its strides 0); forward only, compute capability 8.9 or newer,
 * served by the decoding families (splitkv for a contiguous cache, paged
 * for a block table). */
typedef enum fat_attn_dtype {
  FAT_ATTN_FP16 = 0,
  FAT_ATTN_BF16 = 1,
  FAT_ATTN_E4M3 = 2,
  FAT_ATTN_FP16_E4M3KV = 3,
  FAT_ATTN_BF16_E4M3KV = 4,
} fat_attn_dtype;
/* Masks, bottom-right aligned (FlashAttention's convention): query i of a
 * sequence sits at key position i + seqlen_k - seqlen_q. Causal: it sees the
 * keys up to that position -- with one query (seqlen_q 1: a decoding step,
 * dense, packed or paged) every key, so such a forward is looked up and
 * launched as no mask (no mask's tuned winners first, then causal's, and
 * no mask's default; the choice's note says so). Local (sliding window): the keys from position
 * - window_left to position + window_right, a bound of -1 dropped; key tiles
 * outside every row's window are skipped, so time falls with the window. */
typedef enum fat_attn_mask {
  FAT_ATTN_MASK_NONE = 0,
  FAT_ATTN_MASK_CAUSAL = 1,
  FAT_ATTN_MASK_LOCAL = 2,
} fat_attn_mask;

/* One forward attention problem. Tensors are in the (batch, seqlen, heads,
 * head_dim) layout of FlashAttention and PyTorch; strides are in elements,
 * the last dimension must be contiguous, pointers 16-byte aligned and
 * strides multiples of 8 elements (the kernels load 16 bytes at a time). */
typedef struct fat_attn_args {
  size_t struct_size;  /* sizeof(fat_attn_args): FAT_ATTN_ARGS_INIT */
  const void *q;  /* (batch, seqlen_q, heads, head_dim) */
  const void *k;  /* (batch, seqlen_k, heads_k, head_dim) */
  const void *v;  /* (batch, seqlen_k, heads_k, head_dim) */
  void *o;        /* (batch, seqlen_q, heads, head_dim), written */
  float *lse;     /* (batch, heads, seqlen_q) contiguous fp32, written: natural-log
                     log-sum-exp of the scaled scores, -inf for a row that sees no key */
  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  int batch;
  int heads;      /* query heads */
  int heads_k;    /* key/value heads; must divide heads (grouped-query attention) */
  int seqlen_q, seqlen_k;
  int head_dim;   /* a template's (fat_supported_head_dims), or any multiple of 8 up to
                     256, which runs on the next template up without a padded copy */
  fat_attn_dtype dtype;
  fat_attn_mask mask;
  float softmax_scale;  /* multiplies Q·Kᵀ; 0 means 1/sqrt(head_dim) */
  /* FAT_ATTN_MASK_LOCAL's window: keys position - window_left .. position +
   * window_right are visible, -1 for no bound on that side; both >= -1.
   * Read only for the local mask; (-1, -1) and (-1, 0) give the answers of
   * no mask and causal (the local kernels run them: ask for those masks to
   * get their tuned kernels). */
  int window_left, window_right;
  /* > 0: scores are soft-capped, cap · tanh(score / cap) with score the
   * scaled Q·Kᵀ (Gemma 2), and lse is that of the capped scores; 0: no cap.
   * The backward takes it too (on the mma80f family's variants). */
  float softcap;
  /* Variable-length batches (flash_attn_varlen_func): when cu_seqlens_q is
   * set, sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1
   * of q and o (device int32, batch + 1 entries, starting at 0, ascending),
   * seqlen_q is the longest sequence, the batch strides of q and o are
   * ignored and lse is (heads, total_q), total_q = cu_seqlens_q[batch].
   * cu_seqlens_k does the same for k and v (seqlen_k the longest). They go
   * together: both set or neither. seqused_k (device int32, batch entries,
   * may be set without them) limits sequence b to its first seqused_k[b]
   * keys: a K/V cache padded per sequence. The device arrays are read by the
   * kernels only; their values are the caller's promise, and total_q and
   * total_k (the packed tensors' rows, cu_seqlens_*[batch]) are what the
   * checks size q, o, lse and k, v by. */
  const int *cu_seqlens_q;
  const int *cu_seqlens_k;
  const int *seqused_k;
  int total_q, total_k;
  /* Device scratch for variants that split the keys over several blocks
   * (decoding with few queries: partial outputs) and for those whose resident
   * blocks draw query blocks from a counter (masked forwards on Hopper: 256
   * bytes, zeroed on the stream before each launch):
   * fat_attention_fwd_workspace() bytes, 16-byte aligned, not overlapping
   * any tensor, not used by two launches in flight at once. With less (or
   * none), the runtime launches a variant that needs none instead and says
   * so in the choice's note. */
  void *workspace;
  size_t workspace_bytes;
  /* A paged K/V cache (flash_attn_with_kvcache's block_table; vLLM's and
   * FlashInfer's pages): with block_table set, k and v are pools of
   * num_pages pages of page_size tokens each, (num_pages, page_size,
   * heads_k, head_dim) -- their batch strides step from page to page, their
   * row strides from token to token -- and key j of sequence b is row
   * j % page_size of page block_table[b * block_table_stride + j /
   * page_size]. block_table: device int32, batch rows of block_table_stride
   * >= ceil(seqlen_k / page_size) entries; page_size a power of two from 16
   * to 65536 (a key's page is found by a shift, and each 16 keys of a key
   * tile lie in one page, whose entry one lane reads); seqlen_k the longest
   * sequence's keys, seqused_k (FlashAttention's cache_seqlens) each
   * sequence's own. A sequence's pages may lie anywhere in the pool, in any
   * order. The entries for a sequence's keys must name pages of the pool,
   * the rest are never read: device data, the caller's promise as
   * cu_seqlens are. Queries dense (cu_seqlens NULL), forward only; served by
   * the paged family's variants, which serve nothing else. NULL: k and v
   * are contiguous, and block_table_stride, page_size and num_pages are 0. */
  const int *block_table;
  int block_table_stride;
  int page_size;
  int num_pages;
  /* fp8 inputs (dtype FAT_ATTN_E4M3): q, k and v hold e4m3 values, each
   * standing for value x its tensor's descale factor (FlashAttention-3's
   * q_descale, k_descale, v_descale): device fp32, indexed by batch and key
   * head, descale[b * batch_stride + head_k * head_stride] -- strides 0 and
   * 0 for one factor per tensor, heads_k and 1 for a (batch, heads_k)
   * tensor; NULL for 1. q's factor too is a key head's: the query heads of
   * a group share it. o is bf16 (its strides in its own elements); q's, k's
   * and v's strides are in their one-byte elements, multiples of 16. An
   * fp8 K/V cache (FAT_ATTN_FP16_E4M3KV, FAT_ATTN_BF16_E4M3KV): k and v
   * alone are e4m3, with k_descale and v_descale as above; q and o are
   * 16-bit (strides multiples of 8), q_descale NULL and its strides 0. For
   * the 16-bit dtypes the pointers must be NULL and the strides 0. */
  const float *q_descale, *k_descale, *v_descale;
  int q_descale_batch_stride, q_descale_head_stride;
  int k_descale_batch_stride, k_descale_head_stride;
  int v_descale_batch_stride, v_descale_head_stride;
} fat_attn_args;

#define FAT_ATTN_ARGS_INIT FAT_STRUCT_INIT_(fat_attn_args)

/* Fills the strides of ARGS for contiguous (batch, seqlen, heads, head_dim)
 * tensors, from its shape fields (set those first). A stride that would
 * overflow is set to -1, which fat_attention_check refuses by name. ARGS of
 * another struct_size is left as it is (the next call refuses it). */
FAT_API void fat_attn_args_contiguous(fat_attn_args *args);

/* Where the chosen variant came from. The built-in defaults (origin
 * FAT_ORIGIN_BUILTIN) are fixed variants that pass on every supported
 * shape: for a paged call the paged family's, its key splits chosen at
 * launch; for an fp8 K/V cache's contiguous call the splitkv family's; for
 * a contiguous fp16 or bf16 forward, the splitkv family's where the call is
 * decoding-shaped -- dense, seqlen_q <= 128, head dim <= 128, and a grid
 * that the launch would split to fill the GPU (fewer blocks than 80 % of
 * two per SM, and keys for two splits of 256 or more; on an H100, one
 * query of 32/8 heads up to batch 26 at seqlen_k > 256) -- and mma80's
 * otherwise (one block per query block and head). The choice's note says
 * when the decoding default serves and why. */
typedef enum fat_origin {
  FAT_ORIGIN_USER_DB = 0,  /* the user's own tuning database */
  FAT_ORIGIN_TABLES = 1,   /* a table shipped with the release (or named in the options) */
  FAT_ORIGIN_BUILTIN = 2,  /* the built-in default variant, untuned */
  FAT_ORIGIN_SAME_ARCH = 3, /* nothing tuned on this GPU for the problem's (direction, dtype,
                               mask, head dim): a winner of another GPU of its compute
                               capability and an SM count within 1.25x of its own (an H100
                               served by the H200's table); note names that GPU, db_path
                               its database */
} fat_origin;

/* Why it was chosen. */
typedef enum fat_match {
  FAT_MATCH_EXACT = 0,    /* a winner tuned for exactly these seqlen_q, seqlen_k and group */
  FAT_MATCH_NEAREST = 1,  /* the winner of the nearest tuned bucket in any database (the
                             earlier database on a tie): the sum of |log| of the seqlen_q and
                             seqlen_k ratios and half that of the group sizes; decoding
                             (splitkv) winners serve seqlen_q <= 128 only */
  FAT_MATCH_DEFAULT = 2,  /* nothing tuned for this GPU and problem: the default */
} fat_match;

/* How the kernel's module got onto the GPU in this context. */
typedef enum fat_load {
  FAT_LOAD_STORED_CUBIN = 0,  /* a cubin for this architecture from a database: no NVRTC */
  FAT_LOAD_COMPILED = 1,      /* compiled from the stored source with NVRTC (then stored) */
} fat_load;

/* The variant that serves (or served) a problem, and why. */
typedef struct fat_choice {
  size_t struct_size;     /* sizeof(fat_choice), set by the caller: FAT_CHOICE_INIT */
  char variant[128];      /* "fwd.mma80.bf16.d128.causal.m128n64w4s2" */
  char source_hash[65];   /* sha256 of its source, hex */
  fat_origin origin;
  fat_match match;
  int bucket_seqlen;      /* the tuned bucket used (its seqlen_q); 0 for the default */
  int bucket_seqlen_k;    /* ... its seqlen_k; 0 for the default */
  int bucket_group;       /* ... its query heads per K/V head; 0 for the default */
  int bucket_window_left; /* ... its local window (-1: unbounded); 0 for other masks and */
  int bucket_window_right; /*    the default: a local call may be served by a nearby window */
  int bucket_page_size;   /* ... its K/V page size (a paged call's: the nearest tuned one);
                             0 for a contiguous cache and the default */
  double tuned_ms;        /* the winner's median on its bucket; 0 for the default */
  int loaded;             /* 1 once the module is loaded in this context (then `load` is set) */
  fat_load load;
  char db_path[512];      /* the database it came from; "" for the built-in default */
  char note[256];         /* why no stored cubin serves (one was refused, or none is
                             stored for this GPU's architecture), and why a nearer
                             stored winner was passed over (its source does not hash
                             to its source_hash); "" when a cubin serves as tuned */
} fat_choice;

#define FAT_CHOICE_INIT FAT_STRUCT_INIT_(fat_choice)

typedef struct fat_context fat_context;

/* What a context reads. FAT_CONTEXT_OPTIONS_INIT, then set what differs. */
typedef struct fat_context_options {
  size_t struct_size;         /* sizeof(fat_context_options): FAT_CONTEXT_OPTIONS_INIT */
  int device;                 /* CUDA device ordinal */
  const char *user_db;        /* NULL: $FATUNE_DB, else $XDG_CACHE_HOME/fatune/fatune.db,
                                 else ~/.cache/fatune/fatune.db; "": no user database
                                 (and compiled cubins are not stored) */
  const char *const *tables;  /* read-only table databases, searched in order after the
                                 user's; NULL: $FATUNE_TABLES (':'-separated) if set, else
                                 the installed fatune_tables.db, found alike from a shared
                                 and a static link: beside the library (or the program
                                 linked with libfatune.a), then <datadir>/fatune of that
                                 folder's install tree, then the install prefix's, compiled
                                 in. None found: FATUNE_LOG says so, and only the user's
                                 database and the built-in defaults serve */
  int n_tables;
  int no_builtin;             /* 1: refuse rather than fall back to the untuned default */
  /* Offline: when gpu_name is set, no driver is loaded and the context only
   * answers fat_attention_select for the GPU described here (what would run
   * on an H200?); fat_attention_fwd is refused. */
  const char *gpu_name;       /* as cuDeviceGetName gives it: "NVIDIA H200" */
  int gpu_cc_major, gpu_cc_minor, gpu_sm_count;  /* major 1-99, minor 0-9, SMs >= 1 */
} fat_context_options;

#define FAT_CONTEXT_OPTIONS_INIT FAT_STRUCT_INIT_(fat_context_options)

/* Opens a context on OPTS->device (OPTS may be NULL: device 0, defaults).
 * Loads the driver and retains the device's primary context; databases are
 * opened read-only and lazily: each database's winners of a (direction,
 * dtype, mask, head dim) are read on the first call of that key and kept
 * for the context's life, so that a call of a new shape (a decoding step
 * one key longer) reads no database, and a winner tuned after that first
 * call is served by a context opened after it. On failure *CTX is still a
 * context when the failure has a message to read (fat_context_error), to
 * be closed; it is NULL only when out of memory. */
FAT_API fat_status fat_context_open(fat_context **ctx, const fat_context_options *opts);
/* Unloads every module and releases the device. NULL is allowed. */
FAT_API void fat_context_close(fat_context *ctx);
/* The message of the context's last failure ("" if none), naming the bad
 * value: "window (-2, 0): each bound must be >= -1 (-1: unbounded)".
 * Valid until the next call on the context from any thread. */
FAT_API const char *fat_context_error(const fat_context *ctx);

/* Which variant would serve ARGS (only the shape, dtype, mask and head dim
 * are read; a variant that needs workspace may be named, which
 * fat_attention_fwd replaces by one that needs none when ARGS brings too
 * little) --
 * the same selection fat_attention_fwd makes -- without loading or launching
 * anything: the "is it supported?" query. FAT_OK with *OUT filled, or
 * FAT_ERR_UNSUPPORTED / FAT_ERR_INVALID_ARGUMENT with the reason. OUT->load
 * says how a launch would get the module (a stored cubin that passes
 * fat_verify_cubin for this GPU, else compiling), OUT->note why not a stored
 * cubin; OUT->loaded is 0. Once this context has loaded the module of the
 * variant that serves the problem (a launch served it, or another problem
 * of that variant), OUT is the choice the next launch reports (OUT->loaded
 * 1), answered from the context's memory without reading a database. */
FAT_API fat_status fat_attention_select(fat_context *ctx, const fat_attn_args *args,
                                        fat_choice *out);

/* Everything fat_attention_fwd checks about ARGS before it selects or
 * launches, without a GPU (an offline context answers it too) -- with a
 * block table (a paged cache), its page_size, num_pages, block_table_stride
 * and the table itself, each by name, and k and v as pools of pages:
 *   FAT_ERR_INVALID_ARGUMENT: ARGS NULL; dtype or mask out of range; batch,
 *     heads, heads_k, seqlen_q or seqlen_k < 1 (each by name); heads_k not
 *     dividing heads; q, k, v, o or lse NULL or not 16-byte aligned; a stride
 *     negative or not a multiple of 8; strides that do not fit the shape (a
 *     dimension of more than one element whose stride is smaller than the
 *     elements its inner dimensions span, so the tensor would overlap
 *     itself: "q_row_stride 64: smaller than the 128 elements inside it
 *     (heads x head_dim); q would overlap itself"); o or lse overlapping
 *     another tensor; a tensor spanning more bytes than the address space;
 *     softmax_scale negative or not finite; mask local with a window bound
 *     below -1; softcap negative or not finite; only one of cu_seqlens_q
 *     and cu_seqlens_k set, or either without total_q and total_k >= 1;
 *     cu_seqlens_q, cu_seqlens_k or seqused_k not 4-byte aligned, past the
 *     end of the address space or inside o or lse; a workspace past the end
 *     of the address space (workspace_bytes = SIZE_MAX)
 *     (a variable-length batch is checked as one sequence of total rows:
 *     its batch strides, 0 say, are not read); a paged call's page_size
 *     not a power of two in 16 .. 65536, num_pages < 1, block_table_stride
 *     below ceil(seqlen_k / page_size), block_table not 4-byte aligned,
 *     past the end of the address space or inside o or lse, cu_seqlens
 *     with it, or page_size, num_pages or block_table_stride set without
 *     it (k and v are then checked as (num_pages, page_size, heads_k,
 *     head_dim) pools, their batch strides the page stride); a descale
 *     pointer or stride set with fp16 or bf16, or q_descale's with an fp8
 *     K/V cache; for e4m3, a q, k or v stride not a multiple of 16 (their
 *     one-byte elements), for an fp8 K/V cache a k or v stride; a descale
 *     stride negative, set without its pointer or reaching an index past
 *     INT_MAX, a descale pointer not 4-byte aligned, past the end of the
 *     address space or inside o or lse.
 *   FAT_ERR_UNSUPPORTED: head_dim not a multiple of 8 or above the largest
 *     template; e4m3 with a block_table, or at a head dim or mask no e4m3
 *     kernel serves (and, from fat_attention_select and the launch, on a
 *     GPU other than compute capability 9.0); an fp8 K/V cache at a head
 *     dim, mask or cache layout no kernel of its dtype serves, or at a head
 *     dim narrower than its template and not a multiple of 16 (and, from
 *     fat_attention_select and the launch, below compute capability 8.9).
 * Each failure leaves a message naming the bad value in fat_context_error.
 * What needs the driver -- a pointer on another device, a stream of another
 * context -- is checked by fat_attention_fwd itself (cuPointerGetAttribute,
 * cuStreamGetCtx) before the launch. */
FAT_API fat_status fat_attention_check(fat_context *ctx, const fat_attn_args *args);

/* The integrity check every stored cubin passes before the runtime loads it:
 * LEN bytes at CUBIN (1 .. 64 MiB) must hash (sha256, lowercase hex) to
 * EXPECTED_SHA256, recorded when it was compiled, and BUILD_ARCH must be
 * DEVICE_ARCH ("sm_90a"). FAT_OK, else FAT_ERR_INTEGRITY (no hash recorded,
 * empty or oversized cubin, hash mismatch) or FAT_ERR_UNSUPPORTED (another
 * architecture) with the reason in ERR (ERRLEN bytes; may be NULL). A pure
 * function: no context, no driver. */
FAT_API fat_status fat_verify_cubin(const void *cubin, size_t len, const char *expected_sha256,
                                    const char *build_arch, const char *device_arch, char *err,
                                    size_t errlen);

/* The workspace bytes the variant fat_attention_fwd would launch for ARGS
 * needs (0 for many: split-KV decoding variants and drawing ones need some);
 * FAT_ERR_INVALID_ARGUMENT when that is more than a size_t holds. */
FAT_API fat_status fat_attention_fwd_workspace(fat_context *ctx, const fat_attn_args *args,
                                               size_t *bytes);

/* Launches the forward pass on STREAM (a CUstream; NULL: the legacy default
 * stream) and returns without waiting. The first call for a problem key may
 * load (or compile) a module; later calls only launch. RAN (may be NULL)
 * gets the variant that was launched. ARGS pass fat_attention_check first;
 * then, with the driver, every tensor must be memory of this context's
 * device ("q 0x... is memory of device 1; this context is on device 0", or
 * "... is not memory CUDA knows") and STREAM a stream of the device's
 * primary context ("stream 0x... belongs to another CUDA context"): each
 * refused with FAT_ERR_INVALID_ARGUMENT, nothing launched. */
FAT_API fat_status fat_attention_fwd(fat_context *ctx, const fat_attn_args *args, void *stream,
                                     fat_choice *ran);

/* One backward problem: the forward's problem and tensors (Q, K, V and the
 * O and lse that fat_attention_fwd wrote for them), the incoming gradient dO
 * and the gradients written. dQ and dO have the shape of Q and O, dK and dV
 * that of K and V; each has strides of its own, under the forward's rules.
 * With grouped-query attention, dK and dV of a K/V head are the sums over
 * the query heads that share it. P is recomputed from Q, K and lse
 * (FlashAttention-2): memory is O(seqlen), never O(seqlen^2). The masks,
 * windows and padded head dims of the forward are supported, and so are the
 * soft-cap and variable-length batches (cu_seqlens, seqused_k: dout and dq
 * packed as q, dk and dv as k, the batch strides unused; D and the dQ
 * accumulator in the workspace then heads x total_q rows), served by the
 * mma80f family (mma80's kernels built with those features; the Hopper
 * families do not have them yet); fwd.workspace is not read (the backward
 * has a workspace of its own below). A loss that reads lse passes its
 * gradient in dlse. */
typedef struct fat_attn_bwd_args {
  size_t struct_size; /* sizeof(fat_attn_bwd_args): FAT_ATTN_BWD_ARGS_INIT (fwd has its own) */
  fat_attn_args fwd;  /* q, k, v, o and lse read (not written); shape, dtype, mask, scale */
  const void *dout;   /* (batch, seqlen_q, heads, head_dim) */
  void *dq;           /* (batch, seqlen_q, heads, head_dim), written */
  void *dk;           /* (batch, seqlen_k, heads_k, head_dim), written */
  void *dv;           /* (batch, seqlen_k, heads_k, head_dim), written */
  long long do_batch_stride, do_row_stride, do_head_stride;
  long long dq_batch_stride, dq_row_stride, dq_head_stride;
  long long dk_batch_stride, dk_row_stride, dk_head_stride;
  long long dv_batch_stride, dv_row_stride, dv_head_stride;
  /* 1: only variants whose gradients are bit-identical from run to run
   * (dQ in a pass of its own, or summed into fp32 in a fixed order); 0: the
   * fastest variant, which may sum dQ with fp32 atomics in any order. */
  int deterministic;
  /* Device scratch of at least fat_attention_bwd_workspace() bytes, 16-byte
   * aligned, not overlapping any tensor; its contents need not be
   * initialised and are garbage afterwards. */
  void *workspace;
  size_t workspace_bytes;
  /* The gradient of the loss with respect to the forward's lse, for a loss
   * that reads lse: device fp32 in lse's layout ((batch, heads, seqlen_q)
   * contiguous; a packed batch's (heads, total_q)), 4-byte aligned, read
   * (not written); NULL for none. The backward then forms D = rowsum(dO ∘ O)
   * − dlse, so that dS = P ∘ (dP − D) carries lse's gradient too (a kernel
   * of the runtime's own between D's and the variant's). */
  const float *dlse;
} fat_attn_bwd_args;

#ifdef __cplusplus
#define FAT_ATTN_BWD_ARGS_INIT {sizeof(fat_attn_bwd_args), FAT_ATTN_ARGS_INIT}
#else
#define FAT_ATTN_BWD_ARGS_INIT \
  {.struct_size = sizeof(fat_attn_bwd_args), .fwd = FAT_ATTN_ARGS_INIT}
#endif

/* Fills the forward strides (fat_attn_args_contiguous) and those of dO, dQ,
 * dK and dV for contiguous tensors, from ARGS->fwd's shape fields; nothing
 * when ARGS or ARGS->fwd has another struct_size. */
FAT_API void fat_attn_bwd_args_contiguous(fat_attn_bwd_args *args);

/* The workspace bytes fat_attention_bwd needs for ARGS (only the shape is
 * read; `deterministic` does not change them, since a variant that sums dQ
 * in a fixed order may serve either kind of call): D = rowsum(dO * O) in
 * fp32, rounded up to a multiple of 256 bytes, then the fp32 dQ
 * accumulator, then int32 semaphores that order its adds. With R = batch *
 * heads * seqlen_q rows (heads * total_q for a variable-length batch) and W
 * = head_dim rounded up to a multiple of 64: bytes = roundup(4 * R, 256) +
 * 4 * R * W + 4 * S, S = batch * heads * ceil(seqlen_q / 64) (heads *
 * (total_q / 64 + batch) for a variable-length batch). A pure function of
 * the shape; FAT_ERR_INVALID_ARGUMENT (never a wrapped size) when the sum is
 * more than a size_t holds. */
FAT_API fat_status fat_attention_bwd_workspace(fat_context *ctx, const fat_attn_bwd_args *args,
                                               size_t *bytes);

/* fat_attention_select for the backward: the variant fat_attention_bwd
 * would launch (the deterministic flag chooses among the variants whose
 * gradients are bit-identical run to run: dQ in its own pass, or added in
 * a fixed order). */
FAT_API fat_status fat_attention_bwd_select(fat_context *ctx, const fat_attn_bwd_args *args,
                                            fat_choice *out);

/* Everything fat_attention_bwd checks without a GPU: ARGS->fwd as
 * fat_attention_check does (o and lse are inputs here), then dout, dq, dk,
 * dv and workspace NULL, misaligned, with bad strides, overlapping each
 * other or an input, and a workspace smaller than needed; each by name. A
 * paged cache (block_table) is FAT_ERR_UNSUPPORTED: the backward reads
 * contiguous K and V; so are dtype e4m3 and the fp8 K/V caches (no fp8
 * backward yet). */
FAT_API fat_status fat_attention_bwd_check(fat_context *ctx, const fat_attn_bwd_args *args);

/* Launches the backward pass on STREAM (a CUstream; NULL: the legacy
 * default stream) and returns without waiting: a preprocessing kernel
 * (D, and zeroing the dQ accumulator), the kernel that walks key blocks and
 * writes dK and dV, then dQ's own pass or the conversion of its fp32
 * accumulator. Selection, caching and the driver-side checks are those of
 * fat_attention_fwd; RAN (may be NULL) gets the variant. */
FAT_API fat_status fat_attention_bwd(fat_context *ctx, const fat_attn_bwd_args *args, void *stream,
                                     fat_choice *ran);

/* The variant of the context's most recent successful launch (any thread). */
FAT_API fat_status fat_context_last_choice(fat_context *ctx, fat_choice *out);

/* Head dims with a template of their own, ascending; fills up to CAP and
 * returns how many it wrote. With OUT NULL or CAP <= 0 it writes nothing and
 * returns how many there are. Any other multiple of 8 up to the largest runs
 * on the next one up, the padding handled inside the kernel. */
FAT_API int fat_supported_head_dims(int *out, int cap);

/* "fwd.mma80...", "user database", ... names for logging. */
FAT_API const char *fat_origin_name(fat_origin o);
FAT_API const char *fat_match_name(fat_match m);
FAT_API const char *fat_load_name(fat_load l);

#ifdef __cplusplus
}
#endif
#endif
