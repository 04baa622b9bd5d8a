/* SPDX-License-Identifier: MIT */
/* What libfatune's files share (include/fatune.h is their public header):
 * the context's fields, the selection, its records and memo, the loaded
 * kernel, the error and log helpers, and the functions one file lends
 * another, each named fat_rt_ (hidden, as is every symbol of the library
 * but the API's). errors.c names the codes and checks struct sizes,
 * context.c opens and closes a context, select.c decides which variant
 * serves a problem and caches the answer, load.c loads or compiles its
 * module, args.c checks a call's arguments, launch.c runs the call.
 * Nothing outside runtime/ includes it but the tests and benchmarks that
 * read a context's sel_stats. */
#ifndef FAT_RUNTIME_INT_H
#define FAT_RUNTIME_INT_H
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "fatune.h"
#include "cuda_api.h"
#include "defaults.h"
#include "types.h"

#define ERR_CAP 1024
#define PATH_CAP 4096
#define MAX_TABLES 16
/* The exact-shape memo: a hash of the problem picks one of SEL_MEMO_SETS
 * sets, each of SEL_MEMO_WAYS shapes, where a new shape takes the least
 * recently called one's place. 1,024 shapes of 80 bytes, allocated with the
 * context: more than the shapes a program repeats (its prefill lengths,
 * the batch sizes it pads to), while one that never repeats (a decoding
 * step) only passes through. */
#define SEL_MEMO_SETS 256
#define SEL_MEMO_WAYS 4

/* One loaded module, by variant source hash (a hash names a source exactly). */
typedef struct kernel {
  struct kernel *next;
  char hash[65];
  CUmodule module;
  CUfunction fn;
  /* The backward's other kernels (kernel.h gives the order); NULL for the forward. */
  CUfunction pre_fn, dq_fn, convert_fn;
  CUfunction combine_fn;  /* split-KV forward variants */
  fat_load load;
  char note[256];  /* why no stored cubin was loaded ("" when one was) */
} kernel;

/* What a launch needs of one answer of the selection: the variant, its
 * loaded kernel, its schedule and the choice it reports but for `match`,
 * which is the shape's (sel_shape). One record serves every shape whose
 * answer is the same -- the decoding steps of a growing seqlen_k, while
 * their nearest bucket stays -- so that a new shape allocates nothing. Made
 * on the first call that meets it, never changed after and freed with the
 * context: a launch reads it with the lock released. */
typedef struct sel_record {
  struct sel_record *next;
  int direction, dtype, mask;
  fat_choice choice;         /* match: not read (the shape's is, sel_shape) */
  int block_m, threads, smem_bytes;
  int block_q;               /* backward: the query tile */
  fat_dq_mode dq_mode;       /* backward: how dQ is summed (types.h) */
  int pack_gqa, splits;      /* forward: the decoding schedule (fwd_launch.h); splits 0: the
                                launch chooses them */
  int paged;                 /* forward: K and V read from a paged cache */
  int block_n;               /* > 0 for a variant that takes tensor maps: its key tile */
  int tma_slab;              /* with block_n: the maps' box columns, the template's slab */
  int persistent;            /* forward: resident blocks, at most one an SM */
  int template_dim;          /* the template's head dim (>= the problem's) */
  const kernel *k;
} sel_record;

/* A call's exact problem: its sel_key and its shape. */
typedef struct sel_shape_key {
  int direction, deterministic, no_workspace, no_tma, features, paged, decoding;  /* the sel_key */
  int dtype, mask, head_dim, seqlen_q, seqlen_k, group;
  int window_left, window_right;  /* the local mask's window (0, 0 for the others) */
  int varlen_mean;                /* a packed batch's mean length step (varlen_mean_step); 0 dense */
  int page_size;                  /* a paged cache's page size; 0 contiguous */
  int parallel;                   /* a decoding call's batch x K/V heads (select.c's bucket) */
} sel_shape_key;

/* One way of the exact-shape memo: a problem and what serves it. */
typedef struct sel_shape {
  sel_shape_key key;
  const sel_record *rec;  /* NULL: an empty way */
  fat_match match;        /* the shape's own: its bucket exact or nearest, or the default */
  unsigned long used;     /* the memo's clock at the shape's last call: the oldest goes first */
} sel_shape;

/* What serves a call: its record and its match, copied out under the lock
 * (the memo's way may go to another shape as soon as the lock is let go). */
typedef struct sel_served {
  const sel_record *rec;
  fat_match match;
} sel_served;

/* One database's candidates (LOOKUP_SQL's rows, select.c's sel_row) for a
 * lookup key -- (direction, deterministic, dtype, mask, template head
 * dim) -- read on the key's first call in a context and kept for its life,
 * so that a call of a new shape asks no database. */
typedef struct sel_row sel_row;
typedef struct sel_rows {
  struct sel_rows *next;
  int db;  /* index into the context's dbs */
  char gpu_name[256];  /* the GPU they were tuned on (this one, or another of its architecture) */
  int sm_count;
  int direction, deterministic, dtype, mask, head_dim;
  int n;
  sel_row *rows;
} sel_rows;

/* Frees a list of sel_rows (select.c). */
void fat_rt_free_rows(sel_rows *r);

/* What the lookup has done in this context, counted under the lock; tests
 * and benchmarks read it through this header, nothing in the library acts
 * on it. Every heap allocation of a launch's lookup is part of making one
 * of the first three, and every database read (and with it the copy of a
 * stored cubin) begins with the fourth. */
typedef struct sel_stats {
  unsigned long rows_read;  /* sel_rows read: a database's candidates of a lookup key */
  unsigned long records;    /* sel_records made: answers met */
  unsigned long kernels;    /* modules loaded (a stored cubin, or compiled) */
  unsigned long db_opens;   /* fat_rt_open_ro calls, whether or not a database was there */
  unsigned long shapes;     /* shapes the memo took: selected from the candidates in memory */
  unsigned long evictions;  /* shapes the memo let go for a newer one */
} sel_stats;

/* What a selection is for: the problem key beyond the shape. */
typedef struct sel_key {
  int direction;      /* fat_direction */
  int deterministic;  /* backward: only variants whose dQ mode is deterministic (types.h:
                         fat_dq_deterministic), separate or ordered */
  int no_workspace;   /* forward: the caller's workspace is too small for the tuned
                         variant; only variants that need none */
  int no_tma;         /* the call's tensors are none a tensor map can describe
                         (fat_fwd_tma_describable, fat_bwd_tma_describable); only
                         variants that load without */
  int features;       /* backward: the call has variable lengths or a soft-cap
                         (fat_rt_bwd_features); only families that take them
                         (family.h's features), a call without them only the
                         others */
  int paged;          /* forward: the call reads a paged cache (a block table); only
                         families that do (family.h's paged), a call without one only
                         the others */
  int decoding;       /* forward: the call is decoding-shaped (fat_rt_decoding_call): its
                         built-in default is the decoding family's, not mma80's */
} sel_key;

/* select.c: the selection key of forward call A on C's GPU: the forward,
 * paged or not, decoding-shaped or not. A need not be checked yet (the key
 * of a bad call is never used). */
sel_key fat_rt_fwd_key(const fat_context *c, const fat_attn_args *a);

/* select.c: 1 when forward call A is causal with one query, which sees
 * every key: no mask's winners and default serve it (the reasons are
 * beside its code). */
int fat_rt_causal_is_none(const fat_attn_args *a);

/* select.c: 1 when forward call A is decoding-shaped on C's GPU, so that
 * with nothing tuned the decoding family's built-in default (splitkv's,
 * its splits the launch's) serves it rather than mma80's; the rule and
 * its reasons are beside its code. 0 for a call it cannot judge (not yet
 * checked, or of a shape the rule leaves alone). */
int fat_rt_decoding_call(const fat_context *c, const fat_attn_args *a);

/* 1 when the backward of A needs a family with features (family.h): a
 * packed batch (cu_seqlens), seqused_k or a soft-cap. */
int fat_rt_bwd_features(const fat_attn_args *a);

/* What fat_rt_select_variant finds, beyond the public choice: how to
 * launch and where the source lives. */
typedef struct selection {
  fat_choice choice;
  char entry[128];
  char family[64], params[256];
  int block_m, threads, smem_bytes;
  int block_q;                     /* backward only */
  fat_dq_mode dq_mode;             /* backward only */
  int pack_gqa, splits;            /* forward only; splits 0: chosen at launch */
  int paged;                       /* forward: a paged family's variant */
  int block_n;                     /* a tensor-map variant's key tile, else 0 */
  int tma_slab;                    /* with block_n: the maps' box columns */
  int persistent;                  /* forward: a persistent variant */
  int direction, dtype, mask, head_dim;  /* the key's (for storing a compiled build); head_dim
                                            is the template's */
  const fat_default_variant *def;  /* non-NULL for the built-in default */
  int db_index;                    /* which database (-1: built-in) */
  double distance;                 /* bucket_distance of the tuned bucket to the call */
  char passed_over[256];           /* why a nearer stored winner was not taken ("" none) */
} selection;

struct fat_context {
  fat_cuda cu;
  CUdevice dev;
  CUcontext pctx;
  int retained;
  int ordinal;  /* the device's ordinal, for the pointer check */
  /* Driver calls for the launch-time checks, looked up beside fat_cuda's
   * (NULL when the driver lacks them: the check is skipped). */
  CUresult (*ptr_attr)(void *, CUpointer_attribute, CUdeviceptr);
  CUresult (*stream_ctx)(CUstream, CUcontext *);
  int offline;  /* describes a GPU without opening it: select only */
  char gpu_name[256];
  int cc_major, cc_minor, sm_count, smem_optin;
  char arch[16];
  /* Databases in search order: [0] the user's (may be ""), then tables. */
  char *dbs[MAX_TABLES + 1];
  int n_dbs;
  int user_db_enabled;
  int no_builtin;
  int log;
  pthread_mutex_t lock;
  sel_shape memo[SEL_MEMO_SETS][SEL_MEMO_WAYS];  /* exact shapes, and what serves each */
  unsigned long memo_clock;                      /* calls the memo has seen (sel_shape's used) */
  sel_record *records;                           /* every answer met */
  sel_rows *rows;  /* the databases' candidates, by lookup key */
  /* Per database, once asked: the other GPU of this architecture whose
   * winners serve where none is tuned on this one (select.c sibling_gpu);
   * sm 0 for none. */
  int sibling_known[MAX_TABLES + 1], sibling_sms[MAX_TABLES + 1];
  char sibling_name[MAX_TABLES + 1][256];
  kernel *kernels;
  /* The runtime's own fat_bwd_sub_dlse (core/bwd_launch.h), loaded on the
   * first backward given a dlse; NULL before. */
  CUmodule dlse_module;
  CUfunction dlse_fn;
  sel_stats stats;
  sel_served last;  /* the last launch that succeeded; rec NULL before one */
  char err[ERR_CAP];
};

/* The context current on the calling thread when a call began. A call that
 * loads, launches or unloads makes the device's primary context current
 * (the modules live there); the caller's is put back on every exit, so that
 * a program driving contexts of its own (other GPUs, a context of its own
 * on this one) finds the one it left. */
typedef struct saved_ctx {
  CUcontext ctx;
  int saved;  /* 0: nothing to restore (offline, or the driver did not say) */
} saved_ctx;

/* ---- errors and logging -------------------------------------------------- */

/* S, with the message fat_context_error returns (and FATUNE_LOG prints). */
static inline fat_status fail(fat_context *c, fat_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline fat_status fail(fat_context *c, fat_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  if (c->log) fprintf(stderr, "fatune: %s: %s\n", fat_strerror(s), c->err);
  return s;
}

/* A line on stderr when FATUNE_LOG is set. */
static inline void logf_(fat_context *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void logf_(fat_context *c, const char *fmt, ...) {
  if (!c->log) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("fatune: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* A choice the library fills, of the caller's struct_size checked first. */
static inline void put_choice(fat_choice *out, const fat_choice *in) {
  *out = *in;
  out->struct_size = sizeof *out;
}

/* The choice of a call that S served: its record's, with its shape's match. */
static inline void put_served(fat_choice *out, sel_served s) {
  put_choice(out, &s.rec->choice);
  out->match = s.match;
}

static inline char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

#define CUDA_TRY(call, what)                                                       \
  do {                                                                             \
    CUresult r_ = (call);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                      \
      char b_[256];                                                                \
      st = fail(c, FAT_ERR_CUDA, "%s: %s", what, fat_cuda_result_text(&c->cu, r_, b_, sizeof b_)); \
      goto out;                                                                    \
    }                                                                              \
  } while (0)

/* ---- what one file lends another ---------------------------------------- */

/* errors.c: a struct_size against this library's sizeof (CHECK_SIZE). */
fat_status fat_rt_check_size(fat_context *c, const char *type, size_t got, size_t want,
                             const char *init);
#define CHECK_SIZE(c, type, p, init) \
  fat_rt_check_size((c), #type, (p)->struct_size, sizeof(type), init)

/* context.c: the caller's current context, saved and put back. */
saved_ctx fat_rt_save_current(const fat_context *c);
void fat_rt_restore_current(fat_context *c, saved_ctx s);

/* select.c: database I read-only, or NULL when it has nothing to read. */
sqlite3 *fat_rt_open_ro(fat_context *c, int i);
/* select.c: the template a head dim of DTYPE runs on in DIRECTION (0 if none). */
int fat_rt_template_head_dim(int direction, int dtype, int head_dim);
/* select.c: the head dims of the built-in forwards of DTYPE and MASK (-1:
 * any mask), ascending, up to CAP into OUT; how many. */
int fat_rt_dtype_head_dims(int dtype, int mask, int *out, int cap);
/* select.c: the built-in default of a problem, or NULL. */
const fat_default_variant *fat_rt_find_default(sel_key key, int dtype, int mask, int head_dim);
/* select.c: the one selection function. */
fat_status fat_rt_select_variant(fat_context *c, sel_key key, const fat_attn_args *a,
                                 selection *out);
/* select.c: what serves (KEY, A), selected and loaded on first use; the
 * lock is held. */
fat_status fat_rt_lookup_entry(fat_context *c, sel_key key, const fat_attn_args *a,
                               sel_served *out);

/* load.c: a stored cubin of SEL that may be loaded on this GPU, or why none. */
void fat_rt_find_cubin(fat_context *c, const selection *sel, void **cubin, char *note,
                       size_t cap);
/* load.c: the loaded kernel of SEL; the lock is held. */
fat_status fat_rt_ensure_kernel(fat_context *c, const selection *sel, const kernel **out);
/* load.c: the kernel of source hash HASH if its module is loaded, else NULL;
 * the lock is held. */
const kernel *fat_rt_loaded_kernel(const fat_context *c, const char *hash);

/* args.c: the checks of a call, each with the lock held. */
fat_status fat_rt_check_bwd_size(fat_context *c, const fat_attn_bwd_args *a);
fat_status fat_rt_check_problem(fat_context *c, const fat_attn_args *a);
/* ... and for the backward: that, and no paged cache (FAT_ERR_UNSUPPORTED). */
fat_status fat_rt_check_bwd_problem(fat_context *c, const fat_attn_args *a);
fat_status fat_rt_unsupported_head_dim(fat_context *c, int head_dim);
/* ... the refusal of A when no built-in default serves it: its head dim,
 * or for the fp8 dtypes what their kernels do not cover (FAT_ERR_UNSUPPORTED). */
fat_status fat_rt_unsupported(fat_context *c, const fat_attn_args *a);
/* ... an fp8 K/V cache's head dim below its template TEMPLATE_DIM and not
 * a multiple of 16 (FAT_ERR_UNSUPPORTED); FAT_OK for any other call. */
fat_status fat_rt_check_padded(fat_context *c, const fat_attn_args *a, int template_dim);
fat_status fat_rt_check_args(fat_context *c, const fat_attn_args *a);
fat_status fat_rt_check_on_device(fat_context *c, const void *args, int direction, void *stream);
fat_status fat_rt_check_bwd_args(fat_context *c, const void *args);
/* args.c: workspace sizes. */
fat_status fat_rt_workspace_overflow(fat_context *c, const fat_attn_args *a);
/* ... the backward's: D, the dQ accumulator and the ordered dQ's
 * semaphores, in that order (-1 when they do not fit in a size_t); D_ROWS
 * (NULL: not asked) D's entries, which are lse's. */
int fat_rt_bwd_workspace_parts(const fat_attn_args *a, size_t *delta, size_t *accum, size_t *sems,
                               size_t *d_rows);
#endif
