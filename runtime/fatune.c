/* SPDX-License-Identifier: MIT */
/* libfatune: choose, load and launch the tuned variant for an attention
 * problem (include/fatune.h is the contract). One function, select_variant,
 * decides which kernel serves a problem; fat_attention_select (the
 * "supported?" query) and fat_attention_fwd both ask it. Its answer and the
 * loaded module are cached per context, so a hot key costs a hash lookup
 * under a mutex and one cuLaunchKernel. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sqlite3.h>
#include "fatune.h"
#include "compile.h"
#include "cuda_api.h"
#include "db.h"
#include "defaults.h"
#include "fat_abi.h"
#include "fat_abi_bwd.h"
#include "bwd_launch.h"
#include "fwd_launch.h"
#include "family.h"
#include "kernel.h"
#include "nvrtc_api.h"
#include "sha256.h"
#include "tables_path.h"
#include "types.h"

#define ERR_CAP 1024
#define PATH_CAP 4096
#define MAX_TABLES 16
#define SEL_BUCKETS 256             /* hash buckets of the selection cache */
#define DEFAULT_SMEM_LIMIT (48 * 1024) /* more needs the opt-in attribute */
#define MIN_CC_MAJOR 8              /* the mma80 family needs Ampere or newer */
#define MAX_CC_MAJOR 99             /* an offline GPU's compute capability: what "sm_XY" can say */
#define MAX_CC_MINOR 9
#define INDEX_BYTES 4               /* cu_seqlens_q/k and seqused_k: device int32 */
#define ALIGN_BYTES 16              /* kernels load and store 16 bytes at a time */
#define STRIDE_MULTIPLE 8           /* elements of 2 bytes per 16-byte access */
#define N_TENSORS 5                 /* q, k, v, o, lse */
#define N_BWD_SPANS (N_TENSORS + 5) /* and the backward's dout, dq, dk, dv, workspace */
#define N_STRIDED 4                 /* q, k, v, o have (batch, row, head) strides */
#define ELEM_BYTES 2                /* fp16 and bf16 */
#define LSE_BYTES 4                 /* fp32 */
#define KEY_PREFIX 12               /* hex digits of a build key shown in a message */

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

/* A resolved problem key: the selection, its launch geometry and kernel. */
typedef struct sel_entry {
  struct sel_entry *next;
  int direction, deterministic, dtype, mask, head_dim, seqlen_q, seqlen_k, group;  /* the key */
  int window_left, window_right;  /* ... and the local mask's window (0, 0 for the others) */
  int varlen_mean;                /* ... and a packed batch's mean length step (varlen_mean_step) */
  fat_choice choice;
  int block_m, threads, smem_bytes;
  int block_q, dq_separate;  /* backward: the query tile, and dQ in its own pass */
  int pack_gqa, splits;      /* forward: the decoding schedule (fwd_launch.h) */
  int block_n;               /* > 0 for a variant that takes tensor maps: its key tile */
  int persistent;            /* forward: resident blocks, at most one an SM */
  int template_dim;          /* the template's head dim (>= the problem's) */
  int no_workspace, no_tma;
  const kernel *k;
} sel_entry;

/* What a selection is for: the problem key beyond the shape. */
typedef struct sel_key {
  int direction;      /* fat_direction */
  int deterministic;  /* backward: only variants without atomics */
  int no_workspace;   /* forward: the caller's workspace is too small for the tuned
                         variant; only variants that need none */
  int no_tma;         /* the call's tensors are none a tensor map can describe
                         (fat_fwd_tma_describable, fat_bwd_tma_describable); only
                         variants that load without */
} sel_key;

/* What select_variant finds, beyond the public choice: how to launch and
 * where the source lives. */
typedef struct selection {
  fat_choice choice;
  char entry[128];
  char family[64], params[256];
  int block_m, threads, smem_bytes;
  int block_q, dq_separate;        /* backward only */
  int pack_gqa, splits;            /* forward only */
  int block_n;                     /* a tensor-map variant's key tile, else 0 */
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
  sel_entry *sels[SEL_BUCKETS];
  kernel *kernels;
  fat_choice last;
  int has_last;
  char err[ERR_CAP];
};

/* ---- names ------------------------------------------------------------- */

const char *fat_strerror(fat_status s) {
  switch (s) {
  case FAT_OK: return "success";
  case FAT_ERR_INVALID_ARGUMENT: return "invalid argument";
  case FAT_ERR_UNSUPPORTED: return "unsupported problem";
  case FAT_ERR_NO_DRIVER: return "no CUDA driver or device";
  case FAT_ERR_CUDA: return "CUDA driver call failed";
  case FAT_ERR_NO_NVRTC: return "NVRTC unavailable";
  case FAT_ERR_COMPILE: return "kernel compilation failed";
  case FAT_ERR_DATABASE: return "database error";
  case FAT_ERR_OUT_OF_MEMORY: return "out of memory";
  case FAT_ERR_INTEGRITY: return "stored cubin or source failed its integrity check";
  }
  return "unknown status";
}

const char *fat_origin_name(fat_origin o) {
  switch (o) {
  case FAT_ORIGIN_USER_DB: return "user database";
  case FAT_ORIGIN_TABLES: return "shipped tables";
  case FAT_ORIGIN_BUILTIN: return "built-in default";
  }
  return "?";
}

const char *fat_match_name(fat_match m) {
  switch (m) {
  case FAT_MATCH_EXACT: return "exact bucket";
  case FAT_MATCH_NEAREST: return "nearest bucket";
  case FAT_MATCH_DEFAULT: return "default";
  }
  return "?";
}

const char *fat_load_name(fat_load l) {
  switch (l) {
  case FAT_LOAD_STORED_CUBIN: return "stored cubin";
  case FAT_LOAD_COMPILED: return "compiled with NVRTC";
  }
  return "?";
}

/* ---- errors and logging -------------------------------------------------- */

static fat_status fail(fat_context *c, fat_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static fat_status fail(fat_context *c, fat_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  if (c->log) fprintf(stderr, "fatune: %s: %s\n", fat_strerror(s), c->err);
  return s;
}

static void logf_(fat_context *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(fat_context *c, const char *fmt, ...) {
  if (!c->log) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("fatune: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

const char *fat_context_error(const fat_context *ctx) { return ctx ? ctx->err : "no context"; }

/* ---- versions and struct sizes ------------------------------------------ */

unsigned fat_version_number(void) { return FATUNE_VERSION_NUMBER; }
const char *fat_version_string(void) { return FATUNE_VERSION_STRING; }

/* Every public struct's struct_size against this library's sizeof
 * (fatune.h): a struct of another release's layout is refused by name
 * before any other field is read or written. */
static fat_status check_size(fat_context *c, const char *type, size_t got, size_t want,
                             const char *init) {
  if (got == want) return FAT_OK;
  return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s.struct_size %zu: this libfatune (%s) has "
              "sizeof(%s) %zu; initialise it with %s, built against this library's fatune.h",
              type, got, FATUNE_VERSION_STRING, type, want, init);
}
#define CHECK_SIZE(c, type, p, init) check_size((c), #type, (p)->struct_size, sizeof(type), init)

/* A choice the library fills, of the caller's struct_size checked first. */
static void put_choice(fat_choice *out, const fat_choice *in) {
  *out = *in;
  out->struct_size = sizeof *out;
}

/* The caller's RAN of fat_attention_fwd / _bwd (may be NULL): checked
 * before anything is launched, so that no launch goes unreported. */
static fat_status check_ran(fat_context *c, const fat_choice *ran) {
  if (!ran) return FAT_OK;
  pthread_mutex_lock(&c->lock);
  fat_status st = CHECK_SIZE(c, fat_choice, ran, "FAT_CHOICE_INIT");
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* A backward's struct sizes, its own and its forward's; the lock is held. */
static fat_status check_bwd_size(fat_context *c, const fat_attn_bwd_args *a) {
  if (!a) return fail(c, FAT_ERR_INVALID_ARGUMENT, "args is NULL");
  fat_status st = CHECK_SIZE(c, fat_attn_bwd_args, a, "FAT_ATTN_BWD_ARGS_INIT");
  return st ? st : CHECK_SIZE(c, fat_attn_args, &a->fwd, "FAT_ATTN_ARGS_INIT");
}

/* ---- supported problems --------------------------------------------------- */

#define MAX_TEMPLATE_DIMS 64  /* more head dims than any space has */

int fat_supported_head_dims(int *out, int cap) {
  int all[MAX_TEMPLATE_DIMS], n = 0;
  for (int i = 0; i < fat_n_default_variants; i++) {
    if (fat_default_variants[i].direction != FAT_FWD) continue;
    int d = fat_default_variants[i].head_dim, seen = 0;
    for (int j = 0; j < n; j++) seen |= all[j] == d;
    if (seen || n == MAX_TEMPLATE_DIMS) continue;
    /* insertion keeps the list ascending */
    int j = n++;
    while (j > 0 && all[j - 1] > d) {
      all[j] = all[j - 1];
      j--;
    }
    all[j] = d;
  }
  /* Nothing to fill: how many there are, for sizing OUT. */
  if (!out || cap <= 0) return n;
  const int k = n < cap ? n : cap;
  memcpy(out, all, (size_t)k * sizeof *out);
  return k;
}

/* The template a problem's head dim runs on in DIRECTION: itself, or the
 * next one up for any other multiple of 8 (the kernels zero the padding);
 * 0 if none. The backward has no d32, so its small head dims run on d64. */
static int template_head_dim(int direction, int head_dim) {
  int best = 0;
  if (head_dim < 1 || head_dim % 8) return 0;
  for (int i = 0; i < fat_n_default_variants; i++) {
    const int d = fat_default_variants[i].head_dim;
    if (fat_default_variants[i].direction == direction && d >= head_dim && (!best || d < best))
      best = d;
  }
  return best;
}

/* The built-in default of a problem: for the backward, the deterministic
 * one when KEY asks for it, else the family's default. */
static const fat_default_variant *find_default(sel_key key, int dtype, int mask, int head_dim) {
  const fat_default_variant *any = NULL;
  for (int i = 0; i < fat_n_default_variants; i++) {
    const fat_default_variant *d = &fat_default_variants[i];
    if (d->direction != key.direction || d->dtype != dtype || d->mask != mask ||
        d->head_dim != head_dim)
      continue;
    if (d->deterministic == key.deterministic) return d;
    if (!key.deterministic) any = d; /* a default that is deterministic anyway serves */
  }
  return any;
}

/* ---- context ------------------------------------------------------------ */

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* The user's database path by the same rule as the fatune command. */
static int default_user_db(char *out, size_t cap) {
  const char *env = getenv("FATUNE_DB"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (env && *env) n = snprintf(out, cap, "%s", env);
  else if (xdg && *xdg) n = snprintf(out, cap, "%s/fatune/fatune.db", xdg);
  else if (home && *home) n = snprintf(out, cap, "%s/.cache/fatune/fatune.db", home);
  else return -1;
  return n > 0 && (size_t)n < cap ? 0 : -1;
}

static fat_status add_db(fat_context *c, const char *path) {
  if (c->n_dbs > MAX_TABLES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "more than %d table databases", MAX_TABLES);
  if (!(c->dbs[c->n_dbs] = dup_str(path))) return fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
  c->n_dbs++;
  return FAT_OK;
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

fat_status fat_context_open(fat_context **ctx, const fat_context_options *opts) {
  fat_context_options none = {0};
  fat_status st = FAT_OK;
  char e[ERR_CAP], path[PATH_CAP];
  if (!ctx) return FAT_ERR_INVALID_ARGUMENT;
  if (!opts) opts = &none;
  fat_context *c = calloc(1, sizeof *c);
  *ctx = c;
  if (!c) return FAT_ERR_OUT_OF_MEMORY;
  pthread_mutex_init(&c->lock, NULL);
  const char *lg = getenv("FATUNE_LOG");
  c->log = lg && *lg && strcmp(lg, "0");
  if (opts != &none && (st = CHECK_SIZE(c, fat_context_options, opts, "FAT_CONTEXT_OPTIONS_INIT")))
    goto out;
  c->no_builtin = opts->no_builtin;

  /* Databases: the user's first (it may not exist yet), then the tables. */
  if (opts->user_db) {
    c->user_db_enabled = opts->user_db[0] != 0;
    snprintf(path, sizeof path, "%s", opts->user_db);
  } else {
    c->user_db_enabled = default_user_db(path, sizeof path) == 0;
    if (!c->user_db_enabled) path[0] = 0;
  }
  if ((st = add_db(c, c->user_db_enabled ? path : ""))) goto out;
  if (opts->tables) {
    for (int i = 0; i < opts->n_tables; i++) {
      if (!opts->tables[i]) {
        st = fail(c, FAT_ERR_INVALID_ARGUMENT, "tables[%d] is NULL", i);
        goto out;
      }
      if ((st = add_db(c, opts->tables[i]))) goto out;
    }
  } else if (getenv("FATUNE_TABLES") && *getenv("FATUNE_TABLES")) {
    char list[PATH_CAP], *save = NULL;
    snprintf(list, sizeof list, "%s", getenv("FATUNE_TABLES"));
    for (char *t = strtok_r(list, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
      if (access(t, R_OK)) logf_(c, "warning: FATUNE_TABLES names %s, which cannot be read", t);
      if ((st = add_db(c, t))) goto out;
    }
  } else {
    /* The same search from a shared and a static link (tables_path.h). */
    char looked[PATH_CAP];
    if (fat_tables_installed(path, sizeof path, looked, sizeof looked) == 0) {
      logf_(c, "shipped tables: %s", path);
      if ((st = add_db(c, path))) goto out;
    } else {
      logf_(c, "warning: no shipped tables found (looked for %s); set FATUNE_TABLES to "
            "fatune_tables.db: until then only the user database and the built-in defaults serve",
            looked);
    }
  }

  if (opts->gpu_name) {
    if (!opts->gpu_name[0] || opts->gpu_cc_major < 1 || opts->gpu_cc_major > MAX_CC_MAJOR ||
        opts->gpu_cc_minor < 0 || opts->gpu_cc_minor > MAX_CC_MINOR || opts->gpu_sm_count < 1) {
      st = fail(c, FAT_ERR_INVALID_ARGUMENT,
                "offline GPU '%s' compute capability %d.%d, %d SMs: give a name, a compute "
                "capability (major 1 to %d, minor 0 to %d) and an SM count of at least 1",
                opts->gpu_name, opts->gpu_cc_major, opts->gpu_cc_minor, opts->gpu_sm_count,
                MAX_CC_MAJOR, MAX_CC_MINOR);
      goto out;
    }
    c->offline = 1;
    snprintf(c->gpu_name, sizeof c->gpu_name, "%s", opts->gpu_name);
    c->cc_major = opts->gpu_cc_major;
    c->cc_minor = opts->gpu_cc_minor;
    c->sm_count = opts->gpu_sm_count;
    c->smem_optin = INT_MAX; /* unknown: every stored winner ran on its own GPU */
    fat_arch_for_cc(c->cc_major, c->cc_minor, c->arch);
    goto out;
  }
  /* The device. */
  if (opts->device < 0) {
    st = fail(c, FAT_ERR_INVALID_ARGUMENT, "device %d: must be >= 0", opts->device);
    goto out;
  }
  if (fat_cuda_load(&c->cu, e, sizeof e)) {
    st = fail(c, FAT_ERR_NO_DRIVER, "%s", e);
    goto out;
  }
  CUresult r = c->cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    st = fail(c, FAT_ERR_NO_DRIVER, "no CUDA device: cuInit: %s",
              fat_cuda_result_text(&c->cu, r, e, sizeof e));
    goto out;
  }
  int count = 0;
  CUDA_TRY(c->cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (opts->device >= count) {
    st = fail(c, FAT_ERR_NO_DRIVER, "device %d out of range: %d device%s found", opts->device,
              count, count == 1 ? "" : "s");
    goto out;
  }
  CUDA_TRY(c->cu.cuDeviceGet(&c->dev, opts->device), "cuDeviceGet");
  CUDA_TRY(c->cu.cuDeviceGetName(c->gpu_name, sizeof c->gpu_name, c->dev), "cuDeviceGetName");
  CUDA_TRY(c->cu.cuDeviceGetAttribute(&c->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                      c->dev), "compute capability");
  CUDA_TRY(c->cu.cuDeviceGetAttribute(&c->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                      c->dev), "compute capability");
  CUDA_TRY(c->cu.cuDeviceGetAttribute(&c->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                      c->dev), "SM count");
  CUDA_TRY(c->cu.cuDeviceGetAttribute(&c->smem_optin,
                                      CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, c->dev),
           "shared memory per block");
  fat_arch_for_cc(c->cc_major, c->cc_minor, c->arch);
  CUDA_TRY(c->cu.cuDevicePrimaryCtxRetain(&c->pctx, c->dev), "cuDevicePrimaryCtxRetain");
  c->retained = 1;
  c->ordinal = opts->device;
  *(void **)&c->ptr_attr = dlsym(c->cu.handle, "cuPointerGetAttribute");
  *(void **)&c->stream_ctx = dlsym(c->cu.handle, "cuStreamGetCtx");
  logf_(c, "context on %s (%s, %d SMs), user database %s, %d table database(s)", c->gpu_name,
        c->arch, c->sm_count, c->user_db_enabled ? c->dbs[0] : "(none)", c->n_dbs - 1);
out:
  return st;
}

/* ---- the caller's CUDA context -------------------------------------------- */

/* The context current on the calling thread when a call began. A call that
 * loads, launches or unloads makes the device's primary context current
 * (the modules live there); the caller's is put back on every exit, so that
 * a program driving contexts of its own (other GPUs, a context of its own
 * on this one) finds the one it left. */
typedef struct saved_ctx {
  CUcontext ctx;
  int saved;  /* 0: nothing to restore (offline, or the driver did not say) */
} saved_ctx;

static saved_ctx save_current(const fat_context *c) {
  saved_ctx s = {NULL, 0};
  if (c->retained && c->cu.cuCtxGetCurrent(&s.ctx) == CUDA_SUCCESS) s.saved = 1;
  return s;
}

/* Nothing to do when the caller's was the primary context: the calls only
 * ever make that one current. */
static void restore_current(fat_context *c, saved_ctx s) {
  if (!s.saved || s.ctx == c->pctx) return;
  CUresult r = c->cu.cuCtxSetCurrent(s.ctx);
  if (r != CUDA_SUCCESS) {
    char t[256];
    logf_(c, "warning: restoring the caller's CUDA context %p: %s", (void *)s.ctx,
          fat_cuda_result_text(&c->cu, r, t, sizeof t));
  }
}

void fat_context_close(fat_context *c) {
  if (!c) return;
  if (c->retained) {
    const saved_ctx caller = save_current(c);
    c->cu.cuCtxSetCurrent(c->pctx);
    for (kernel *k = c->kernels, *n; k; k = n) {
      n = k->next;
      if (k->module) c->cu.cuModuleUnload(k->module);
      free(k);
    }
    restore_current(c, caller);  /* before the release, which may end the primary context */
    c->cu.cuDevicePrimaryCtxRelease(c->dev);
  }
  for (int b = 0; b < SEL_BUCKETS; b++)
    for (sel_entry *s = c->sels[b], *n; s; s = n) {
      n = s->next;
      free(s);
    }
  for (int i = 0; i < c->n_dbs; i++) free(c->dbs[i]);
  fat_cuda_unload(&c->cu);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* ---- selection ------------------------------------------------------------ */

/* 1 when H's main database holds no schema object at all (a file created
 * and never written, or emptied). */
static int schema_empty(sqlite3 *h) {
  sqlite3_stmt *s = NULL;
  int empty = 0;
  if (sqlite3_prepare_v2(h, "SELECT count(*) FROM main.sqlite_schema", -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    empty = sqlite3_column_int(s, 0) == 0;
  sqlite3_finalize(s);
  return empty;
}

static int schema_version(sqlite3 *h);

/* Opens database I read-only; NULL (not an error) when there is nothing to
 * read: no such file; not a regular file (a FIFO would block open() until
 * a writer came, a device reads as anything); or a file with no schema yet
 * (zero bytes: a tuner killed between creating the file and committing its
 * schema), which the next level serves. */
static sqlite3 *open_ro(fat_context *c, int i) {
  sqlite3 *h = NULL;
  struct stat st;
  if (!c->dbs[i][0] || stat(c->dbs[i], &st)) return NULL;
  if (!S_ISREG(st.st_mode)) {
    logf_(c, "%s: not a regular file: skipped", c->dbs[i]);
    return NULL;
  }
  if (access(c->dbs[i], R_OK)) return NULL;
  if (sqlite3_open_v2(c->dbs[i], &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    sqlite3_close(h);
    return NULL;
  }
  sqlite3_busy_timeout(h, FAT_DB_BUSY_TIMEOUT_MS);
  if (schema_version(h) == 0 && schema_empty(h)) {
    logf_(c, "%s: no fatune schema yet (an empty file): skipped", c->dbs[i]);
    sqlite3_close(h);
    return NULL;
  }
  return h;
}

/* The first schema versions whose problems carry a window, and a
 * variable-length profile. A user's database of an older one is read as it
 * is (the tuner upgrades it on its next write): its problems read as
 * window 0, 0 and dense, and it has no local or variable-length one. */
#define WINDOW_SCHEMA_VERSION 2
#define LENGTHS_SCHEMA_VERSION 3

/* The winners of a key, bucket by bucket (a bucket's rows adjacent, its
 * newest winner first). WINDOW: the problem's window and lengths columns,
 * or constants for a database without them; either way result columns 13,
 * 14 and 15, which the ORDER BY names by number; the source is the 16th.
 * The variant must be of its problem's key (import refuses any other). */
#define VARIANT_OF_PROBLEM                                                                     \
  " AND v.direction = p.direction AND v.dtype = p.dtype AND v.mask = p.mask"                   \
  " AND v.head_dim = p.head_dim"
#define WINNER_SELECT(window)                                                                  \
  "SELECT v.name, v.source_hash, v.entry, v.family, v.params, v.block_m, v.threads,"           \
  " v.smem_bytes, p.seqlen_q, t.median_ms, p.seqlen_k, p.heads / p.heads_k, " window           \
  ", v.source FROM winners w JOIN gpus g ON g.id = w.gpu_id"                                   \
  " JOIN problems p ON p.id = w.problem_id JOIN variants v ON v.id = w.variant_id"             \
  " JOIN timings t ON t.id = w.timing_id"                                                      \
  " WHERE g.name = ?1 AND g.cc_major = ?2 AND g.cc_minor = ?3 AND g.sm_count = ?4"             \
  " AND p.direction = ?8 AND p.dtype = ?5 AND p.mask = ?6 AND p.head_dim = ?7"                 \
  VARIANT_OF_PROBLEM                                                                           \
  /* Families of one fused kernel; the materialising baseline never wins. */                   \
  " AND v.family IN ('mma80', 'splitkv', 'wgmma90', 'ws90') AND instr(v.source, ?9) > 0"       \
  " AND instr(v.source, ?10) > 0"                                                              \
  " ORDER BY p.seqlen_q, p.seqlen_k, p.heads / p.heads_k, 13, 14, 15, w.chosen_at DESC"

/* The deterministic backward: the fastest live timing, per bucket, of a
 * variant without atomics that passed every live check on this GPU and
 * problem -- the winner among those the tuner measured, which `fatune
 * export` ships beside the overall winner. Same columns as WINNER_SELECT. */
#define DETERMINISTIC_SELECT(window)                                                           \
  "SELECT v.name, v.source_hash, v.entry, v.family, v.params, v.block_m, v.threads,"           \
  " v.smem_bytes, p.seqlen_q, t.median_ms, p.seqlen_k, p.heads / p.heads_k, " window           \
  ", v.source FROM timings t JOIN gpus g ON g.id = t.gpu_id"                                   \
  " JOIN problems p ON p.id = t.problem_id JOIN variants v ON v.id = t.variant_id"             \
  " WHERE g.name = ?1 AND g.cc_major = ?2 AND g.cc_minor = ?3 AND g.sm_count = ?4"             \
  " AND p.direction = ?8 AND p.dtype = ?5 AND p.mask = ?6 AND p.head_dim = ?7"                 \
  VARIANT_OF_PROBLEM                                                                           \
  " AND v.family = 'mma80' AND t.retired = 0 AND instr(v.source, ?9) > 0"                      \
  " AND instr(v.source, ?10) > 0"                                                              \
  " AND ' ' || v.params || ' ' LIKE '% DQ_MODE=separate %'"                                    \
  " AND EXISTS (SELECT 1 FROM checks c WHERE c.variant_id = t.variant_id AND c.gpu_id ="       \
  "   t.gpu_id AND c.problem_id = t.problem_id AND c.retired = 0 AND c.passed = 1)"            \
  " AND NOT EXISTS (SELECT 1 FROM checks c WHERE c.variant_id = t.variant_id AND c.gpu_id ="   \
  "   t.gpu_id AND c.problem_id = t.problem_id AND c.retired = 0 AND c.passed = 0)"            \
  " ORDER BY p.seqlen_q, p.seqlen_k, p.heads / p.heads_k, 13, 14, 15, t.median_ms, t.id"

#define V1_COLUMNS "0, 0, ''"
#define V2_COLUMNS "p.window_left, p.window_right, ''"
#define V3_COLUMNS "p.window_left, p.window_right, p.lengths"
/* By [deterministic][the database's columns: none, windows, windows and lengths]. */
static const char *const LOOKUP_SQL[2][3] = {
    {WINNER_SELECT(V1_COLUMNS), WINNER_SELECT(V2_COLUMNS), WINNER_SELECT(V3_COLUMNS)},
    {DETERMINISTIC_SELECT(V1_COLUMNS), DETERMINISTIC_SELECT(V2_COLUMNS),
     DETERMINISTIC_SELECT(V3_COLUMNS)},
};

/* The line every source built against today's fat_fwd_params carries:
 * winners stored by a build with another layout are passed over. A
 * backward source must also carry today's launch of its per-row kernels
 * (FAT_ABI_BWD_VERSION); for the forward the second marker is the first. */
#define ABI_STR2(x) #x
#define ABI_STR(x) ABI_STR2(x)
#define ABI_MARKER "#define FAT_ABI_VERSION " ABI_STR(FAT_ABI_VERSION)
#define BWD_ABI_MARKER "#define FAT_ABI_BWD_VERSION " ABI_STR(FAT_ABI_BWD_VERSION)

/* A tuned problem's key beyond (dtype, mask, head dim), and a call's. */
typedef struct bucket {
  int seqlen_q, seqlen_k;         /* a packed batch's: its longest sequence */
  int group;                      /* query heads per K/V head */
  int window_left, window_right;  /* the local mask's window (-1: unbounded); 0, 0 otherwise */
  int sequences;                  /* a packed batch of variable lengths: its sequences; 0 dense */
  double mean;                    /* ... and their mean length (a dense bucket: seqlen_q) */
  int mean_step;                  /* ... in quarter octaves (mean_step_of) */
} bucket;

static int mean_step_of(double mean) { return (int)lround(4.0 * log2(mean > 1.0 ? mean : 1.0)); }

/* A packed call's mean length, in steps of a quarter octave: the lookup
 * cache keys on it (not on the exact token count, which differs from call
 * to call), and the distance reads the step's length. */
static int varlen_mean_step(const fat_attn_args *a) { return mean_step_of((double)a->total_q / a->batch); }

/* The mean length step in A's cache key: 0 for a dense call. */
static int key_varlen_mean(const fat_attn_args *a) {
  return a->cu_seqlens_q ? 1 + varlen_mean_step(a) : 0;
}

/* The bucket of call A (its group and window as its problem key has them). */
static bucket call_bucket(const fat_attn_args *a, int window_left, int window_right) {
  bucket b = {a->seqlen_q, a->seqlen_k, a->heads / a->heads_k, window_left, window_right, 0,
              a->seqlen_q, 0};
  if (a->cu_seqlens_q) {
    b.sequences = a->batch;
    b.mean_step = varlen_mean_step(a);
    b.mean = exp2(b.mean_step / 4.0);
  }
  return b;
}

/* The sequences and mean length of a stored profile ("538,3976,2092", or
 * "" for a dense problem) into B; -1 for text fatune would not have
 * stored (fat_lengths_parse refuses it). */
static int profile_of(const char *text, bucket *b) {
  fat_lengths l;
  char why[160];
  if (fat_lengths_parse(text ? text : "", &l, why, sizeof why)) return -1;
  if (l.n) {
    b->sequences = l.n;
    b->mean = (double)fat_lengths_tokens(&l) / l.n;
    b->mean_step = mean_step_of(b->mean);
  }
  return 0;
}

/* The keys one query row sees through B's window: L + R + 1, an unbounded
 * side counting as seqlen_k, at most seqlen_k. 1 for the window 0, 0 of
 * the masks other than local, so that their window term is 0. */
static double visible_keys(bucket b) {
  const double sk = b.seqlen_k;
  const double left = b.window_left < 0 ? sk : b.window_left;
  const double right = b.window_right < 0 ? sk : b.window_right;
  return fmin(sk, left + right + 1);
}

/* Distance between a tuned bucket and a call: the ratios of the lengths,
 * so that 3000 is nearer 4096 than 2048 the way the cost of attention
 * grows, queries and keys alike; for a window, the ratio of the keys a
 * query sees (the work per row, which the window bounds); a different group
 * size counts by its ratio too, at half weight (the kernel is the same,
 * only the K/V reuse differs). 0 for an exact match. */
static double bucket_distance(bucket b, bucket call) {
  double d = fabs(log((double)b.seqlen_q / call.seqlen_q)) +
             fabs(log((double)b.seqlen_k / call.seqlen_k)) +
             fabs(log(visible_keys(b) / visible_keys(call))) +
             0.5 * fabs(log((double)b.group / call.group));
  /* A packed call also weighs the mean length, where most of its work is
   * (a dense bucket's mean is its length). */
  if (call.sequences) d += fabs(log(b.mean / call.mean));
  return d;
}

static int same_bucket(bucket a, bucket b) {
  return a.seqlen_q == b.seqlen_q && a.seqlen_k == b.seqlen_k && a.group == b.group &&
         a.window_left == b.window_left && a.window_right == b.window_right &&
         a.sequences == b.sequences && a.mean_step == b.mean_step;
}

/* The window in A's problem key: the local mask's own, 0, 0 for the
 * other masks (whose window fields are not read: they may hold anything). */
static int key_window_left(const fat_attn_args *a) {
  return a->mask == FAT_ATTN_MASK_LOCAL ? a->window_left : 0;
}
static int key_window_right(const fat_attn_args *a) {
  return a->mask == FAT_ATTN_MASK_LOCAL ? a->window_right : 0;
}

/* PRAGMA user_version of H; 0 when it cannot be read. */
static int schema_version(sqlite3 *h) {
  sqlite3_stmt *s = NULL;
  int v = 0;
  if (sqlite3_prepare_v2(h, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int(s, 0);
  sqlite3_finalize(s);
  return v;
}

/* 1 when the stored source of row S (column SOURCE_COL) hashes to its
 * source_hash (column 1): what is compiled is what was checked. */
#define SOURCE_COL 15
static int source_matches(sqlite3_stmt *s) {
  char hex[FAT_SHA256_HEX_CHARS + 1];
  const char *src = (const char *)sqlite3_column_text(s, SOURCE_COL);
  const char *hash = (const char *)sqlite3_column_text(s, 1);
  if (!src || !hash) return 0;
  fat_sha256_hex(src, (size_t)sqlite3_column_bytes(s, SOURCE_COL), hex);
  return !strcmp(hex, hash);
}

/* Looks for a winner of (KEY, dtype, mask, head_dim) on this GPU in
 * database I; *FOUND = 1 with OUT filled (nearest bucket; ties go to the
 * larger). A winner whose source does not hash to its source_hash is
 * passed over, and PASSED_OVER (CAP bytes) says so when it is still "". */
static fat_status find_winner(fat_context *c, int i, sel_key key, int dtype, int mask,
                              int head_dim, bucket call, selection *out, int *found,
                              char *passed_over, size_t cap) {
  sqlite3 *h = open_ro(c, i);
  sqlite3_stmt *s = NULL;
  fat_status st = FAT_OK;
  double best = INFINITY;
  *found = 0;
  if (!h) return FAT_OK;
  const int version = schema_version(h);
  const char *sql = LOOKUP_SQL[key.direction == FAT_BWD && key.deterministic]
                              [version >= LENGTHS_SCHEMA_VERSION ? 2 : version >= WINDOW_SCHEMA_VERSION];
  if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) != SQLITE_OK) {
    /* A database without fatune's tables has nothing for us. */
    st = fail(c, FAT_ERR_DATABASE, "%s: not a fatune database: %s", c->dbs[i], sqlite3_errmsg(h));
    goto out;
  }
  sqlite3_bind_text(s, 1, c->gpu_name, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, c->cc_major);
  sqlite3_bind_int(s, 3, c->cc_minor);
  sqlite3_bind_int(s, 4, c->sm_count);
  sqlite3_bind_text(s, 5, fat_dtype_name((fat_dtype)dtype), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 6, fat_mask_name((fat_mask)mask), -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 7, head_dim);
  sqlite3_bind_text(s, 8, fat_direction_name((fat_direction)key.direction), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 9, ABI_MARKER, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 10, key.direction == FAT_BWD ? BWD_ABI_MARKER : ABI_MARKER, -1, SQLITE_STATIC);
  int step;
  bucket last = {-1, -1, -1};
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    bucket b = {sqlite3_column_int(s, 8), sqlite3_column_int(s, 10), sqlite3_column_int(s, 11),
                sqlite3_column_int(s, 12), sqlite3_column_int(s, 13), 0, 0, 0};
    if (b.seqlen_q < 1 || b.seqlen_k < 1 || b.group < 1) continue; /* the schema forbids these */
    b.mean = b.seqlen_q;
    if (profile_of((const char *)sqlite3_column_text(s, 14), &b)) continue;
    /* A profile's winner ran on a packed batch: it serves packed calls only. */
    if (b.sequences && !call.sequences) continue;
    if (same_bucket(b, last)) continue; /* an older winner (a slower timing) of the bucket */
    last = b;
    double d = bucket_distance(b, call);
    if (d > best) continue;
    int smem = sqlite3_column_int(s, 7);
    if (smem > c->smem_optin) continue; /* cannot run here (should not happen on its own GPU) */
    fat_kernel_desc sched;
    char why[256];
    if (fat_kernel_schedule(&sched, (fat_direction)key.direction, (const char *)sqlite3_column_text(s, 3),
                            (const char *)sqlite3_column_text(s, 4), why, sizeof why)) {
      logf_(c, "%s: %s: skipped", c->dbs[i], why);
      continue;
    }
    if (key.deterministic && !sched.dq_separate) continue;
    if (key.no_workspace && fat_fwd_needs_workspace(sched.splits, sched.persistent)) continue;
    if (key.no_tma && sched.kind == FAT_KERNEL_FUSED_TMA) continue;
    /* A family with a longest seqlen_q (the decoding family's tiles are for
     * short query sides) serves calls of that kind only, however near their
     * bucket; fat_kernel_schedule found its row. */
    const fat_family *fam = fat_family_find((const char *)sqlite3_column_text(s, 3),
                                            (fat_direction)key.direction);
    if (fam->max_seqlen_q > 0 && call.seqlen_q > fam->max_seqlen_q) continue;
    if (!source_matches(s)) {
      if (!passed_over[0] &&
          snprintf(passed_over, cap, "%s: variant %s: its source does not hash to its "
                   "source_hash; passed over", c->dbs[i], sqlite3_column_text(s, 0)) < 0)
        passed_over[0] = 0;
      logf_(c, "%s: variant %s: its source does not hash to its source_hash; passed over",
            c->dbs[i], sqlite3_column_text(s, 0));
      continue;
    }
    best = d;
    memset(out, 0, sizeof *out);
    out->block_q = sched.block_q;
    out->dq_separate = sched.dq_separate;
    out->pack_gqa = sched.pack_gqa;
    out->splits = sched.splits;
    out->block_n = sched.block_n;
  out->persistent = sched.persistent;
    out->persistent = sched.persistent;
    snprintf(out->choice.variant, sizeof out->choice.variant, "%s", sqlite3_column_text(s, 0));
    snprintf(out->choice.source_hash, sizeof out->choice.source_hash, "%s",
             sqlite3_column_text(s, 1));
    snprintf(out->entry, sizeof out->entry, "%s", sqlite3_column_text(s, 2));
    snprintf(out->family, sizeof out->family, "%s", sqlite3_column_text(s, 3));
    snprintf(out->params, sizeof out->params, "%s", sqlite3_column_text(s, 4));
    out->block_m = sqlite3_column_int(s, 5);
    out->threads = sqlite3_column_int(s, 6);
    out->smem_bytes = smem;
    out->choice.bucket_seqlen = b.seqlen_q;
    out->choice.bucket_seqlen_k = b.seqlen_k;
    out->choice.bucket_group = b.group;
    out->choice.bucket_window_left = b.window_left;
    out->choice.bucket_window_right = b.window_right;
    out->choice.tuned_ms = sqlite3_column_double(s, 9);
    out->choice.origin = i == 0 ? FAT_ORIGIN_USER_DB : FAT_ORIGIN_TABLES;
    out->choice.match = same_bucket(b, call) ? FAT_MATCH_EXACT : FAT_MATCH_NEAREST;
    snprintf(out->choice.db_path, sizeof out->choice.db_path, "%s", c->dbs[i]);
    out->db_index = i;
    out->distance = d;
    *found = 1;
  }
  if (step != SQLITE_DONE) st = fail(c, FAT_ERR_DATABASE, "%s: %s", c->dbs[i], sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  sqlite3_close(h);
  return st;
}

static fat_status check_problem(fat_context *c, const fat_attn_args *a) {
  if (!a) return fail(c, FAT_ERR_INVALID_ARGUMENT, "args is NULL");
  fat_status st = CHECK_SIZE(c, fat_attn_args, a, "FAT_ATTN_ARGS_INIT");
  if (st) return st;
  if (a->dtype != FAT_ATTN_FP16 && a->dtype != FAT_ATTN_BF16)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "dtype %d: must be FAT_ATTN_FP16 or FAT_ATTN_BF16",
                (int)a->dtype);
  if (a->mask != FAT_ATTN_MASK_NONE && a->mask != FAT_ATTN_MASK_CAUSAL &&
      a->mask != FAT_ATTN_MASK_LOCAL)
    return fail(c, FAT_ERR_INVALID_ARGUMENT,
                "mask %d: must be FAT_ATTN_MASK_NONE, FAT_ATTN_MASK_CAUSAL or FAT_ATTN_MASK_LOCAL",
                (int)a->mask);
  if (a->mask == FAT_ATTN_MASK_LOCAL && (a->window_left < -1 || a->window_right < -1))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "window (%d, %d): each bound must be >= -1 (-1: "
                "unbounded)", a->window_left, a->window_right);
  if (!(a->softcap >= 0) || isinf(a->softcap))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "softcap %g: must be finite and >= 0 (0: none)",
                (double)a->softcap);
  if (!a->cu_seqlens_q != !a->cu_seqlens_k)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "cu_seqlens_q %p and cu_seqlens_k %p: give both or "
                "neither", (const void *)a->cu_seqlens_q, (const void *)a->cu_seqlens_k);
  if (a->cu_seqlens_q && (a->total_q < 1 || a->total_k < 1))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "total_q %d, total_k %d: a variable-length batch "
                "needs the packed tensors' rows (>= 1)", a->total_q, a->total_k);
  const int dims[5] = {a->batch, a->heads, a->heads_k, a->seqlen_q, a->seqlen_k};
  static const char *const dim_names[5] = {"batch", "heads", "heads_k", "seqlen_q", "seqlen_k"};
  for (int i = 0; i < 5; i++)
    if (dims[i] < 1)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %d: must be >= 1", dim_names[i], dims[i]);
  if (a->heads % a->heads_k)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "heads_k %d does not divide heads %d", a->heads_k,
                a->heads);
  return FAT_OK;
}

#define MAX_HEAD_DIMS 16

static fat_status unsupported_head_dim(fat_context *c, int head_dim) {
  int dims[MAX_HEAD_DIMS], n = fat_supported_head_dims(dims, MAX_HEAD_DIMS);
  char list[128] = "";
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? ", " : "", dims[i]);
  return fail(c, FAT_ERR_UNSUPPORTED, "head_dim %d has no template (templates: %s; any multiple "
              "of 8 up to %d runs on the next one up)", head_dim, list, n ? dims[n - 1] : 0);
}

/* The one selection function: which variant serves (dtype, mask, head dim,
 * seqlen_q) on this context's GPU, or why none does. */
static fat_status select_variant(fat_context *c, sel_key key, const fat_attn_args *a,
                                 selection *out) {
  fat_status st = check_problem(c, a);
  if (st) return st;
  memset(out, 0, sizeof *out);
  if (c->cc_major < MIN_CC_MAJOR)
    return fail(c, FAT_ERR_UNSUPPORTED,
                "%s has compute capability %d.%d; fatune's kernels need %d.0 or newer", c->gpu_name,
                c->cc_major, c->cc_minor, MIN_CC_MAJOR);
  const int tdim = template_head_dim(key.direction, a->head_dim);
  const fat_default_variant *def = find_default(key, a->dtype, a->mask, tdim);
  if (!def) return unsupported_head_dim(c, a->head_dim);
  /* An exact bucket anywhere (the user's database first) beats a nearest
   * one; among nearest ones the nearest, the earlier database on a tie. */
  selection nearest;
  int have_nearest = 0;
  char passed_over[sizeof out->passed_over] = "";
  for (int i = 0; i < c->n_dbs; i++) {
    int found = 0;
    const bucket call = call_bucket(a, key_window_left(a), key_window_right(a));
    if ((st = find_winner(c, i, key, a->dtype, a->mask, tdim, call, out, &found, passed_over,
                          sizeof passed_over)))
      return st;
    if (found && out->choice.match == FAT_MATCH_EXACT) break;
    if (found && (!have_nearest || out->distance < nearest.distance)) {
      nearest = *out;
      have_nearest = 1;
    }
    memset(out, 0, sizeof *out);
  }
  if (!out->choice.variant[0] && have_nearest) *out = nearest;
  memcpy(out->passed_over, passed_over, sizeof passed_over);
  out->direction = key.direction;
  out->dtype = a->dtype;
  out->mask = a->mask;
  out->head_dim = tdim;
  if (out->choice.variant[0]) return FAT_OK;
  if (c->no_builtin)
    return fail(c, FAT_ERR_UNSUPPORTED,
                "no tuned %s%s winner for %s %s head_dim %d on %s and the built-in default is "
                "disabled", key.deterministic ? "deterministic " : "",
                fat_direction_name((fat_direction)key.direction),
                fat_dtype_name((fat_dtype)a->dtype), fat_mask_name((fat_mask)a->mask), a->head_dim,
                c->gpu_name);
  snprintf(out->choice.variant, sizeof out->choice.variant, "%s", def->name);
  snprintf(out->choice.source_hash, sizeof out->choice.source_hash, "%s", def->hash);
  snprintf(out->entry, sizeof out->entry, "%s", def->entry);
  snprintf(out->family, sizeof out->family, "%s", def->family);
  snprintf(out->params, sizeof out->params, "%s", def->params);
  out->block_m = def->block_m;
  out->threads = def->threads;
  out->smem_bytes = def->smem_bytes;
  fat_kernel_desc sched;
  char why[256];
  if (fat_kernel_schedule(&sched, (fat_direction)key.direction, def->family, def->params, why, sizeof why))
    return fail(c, FAT_ERR_UNSUPPORTED, "built-in default %s: %s", def->name, why);
  out->block_q = sched.block_q;
  out->dq_separate = sched.dq_separate;
  out->pack_gqa = sched.pack_gqa;
  out->splits = sched.splits;
  out->block_n = sched.block_n;
  out->persistent = sched.persistent;
  out->choice.origin = FAT_ORIGIN_BUILTIN;
  out->choice.match = FAT_MATCH_DEFAULT;
  out->def = def;
  out->db_index = -1;
  if (def->smem_bytes > c->smem_optin)
    return fail(c, FAT_ERR_UNSUPPORTED, "%s needs %d bytes of shared memory; %s allows %d",
                def->name, def->smem_bytes, c->gpu_name, c->smem_optin);
  return FAT_OK;
}

static void find_cubin(fat_context *c, const selection *sel, void **cubin, char *note,
                       size_t cap);
static sel_entry *cached_entry(fat_context *c, sel_key key, const fat_attn_args *a);

/* OUT (CAP bytes): the non-empty ones of the N_PARTS PARTS, joined by "; ". */
static void join_notes(char *out, size_t cap, const char *const *parts, size_t n_parts) {
  size_t used = 0;
  out[0] = 0;
  for (size_t i = 0; i < n_parts; i++) {
    if (!parts[i][0] || used + 1 >= cap) continue;
    int n = snprintf(out + used, cap - used, "%s%s", used ? "; " : "", parts[i]);
    if (n < 0) break;
    used += (size_t)n < cap - used ? (size_t)n : cap - used - 1;
  }
}

/* fat_attention_select and fat_attention_bwd_select. */
static fat_status select_public(fat_context *c, sel_key key, const fat_attn_args *a,
                                fat_choice *out) {
  selection sel;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = !out ? fail(c, FAT_ERR_INVALID_ARGUMENT, "out is NULL")
                  : CHECK_SIZE(c, fat_choice, out, "FAT_CHOICE_INIT");
  if (!st) st = check_problem(c, a);
  /* A problem this context has launched is served by its cache entry: that
   * is what the next launch runs, and answering from it spares the
   * database read and the cubin's hash (milliseconds for a large cubin). */
  const sel_entry *e = st ? NULL : cached_entry(c, key, a);
  if (e) {
    put_choice(out, &e->choice);
  } else if (st == FAT_OK && (st = select_variant(c, key, a, &sel)) == FAT_OK) {
    /* How a launch would get the module: the same integrity check. */
    void *cubin = NULL;
    char cubin_note[sizeof sel.choice.note];
    find_cubin(c, &sel, &cubin, cubin_note, sizeof cubin_note);
    const char *notes[] = {sel.passed_over, cubin_note};
    join_notes(sel.choice.note, sizeof sel.choice.note, notes, 2);
    sel.choice.load = cubin ? FAT_LOAD_STORED_CUBIN : FAT_LOAD_COMPILED;
    sel.choice.loaded = 0;
    free(cubin);
    put_choice(out, &sel.choice);
  }
  pthread_mutex_unlock(&c->lock);
  return st;
}

fat_status fat_attention_select(fat_context *c, const fat_attn_args *a, fat_choice *out) {
  return select_public(c, (sel_key){FAT_FWD, 0, 0}, a, out);
}

fat_status fat_attention_bwd_select(fat_context *c, const fat_attn_bwd_args *a, fat_choice *out) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = check_bwd_size(c, a);
  pthread_mutex_unlock(&c->lock);
  if (st) return st;
  return select_public(c, (sel_key){FAT_BWD, a && a->deterministic, 0}, a ? &a->fwd : NULL, out);
}

/* ---- loading ------------------------------------------------------------ */

fat_status fat_verify_cubin(const void *cubin, size_t len, const char *expected_sha256,
                            const char *build_arch, const char *device_arch, char *err,
                            size_t errlen) {
  char hex[FAT_SHA256_HEX_CHARS + 1], scratch[8];
  fat_status st = FAT_OK;
  if (!err) err = scratch, errlen = sizeof scratch;
  err[0] = 0;
  if (!cubin || len == 0) {
    st = FAT_ERR_INTEGRITY;
    snprintf(err, errlen, "the cubin is empty");
  } else if (len > (size_t)FAT_TABLES_MAX_CUBIN_BYTES) {
    st = FAT_ERR_INTEGRITY;
    snprintf(err, errlen, "the cubin of %zu bytes is over the %lld-byte cap", len,
             (long long)FAT_TABLES_MAX_CUBIN_BYTES);
  } else if (!expected_sha256 || !expected_sha256[0]) {
    st = FAT_ERR_INTEGRITY;
    snprintf(err, errlen, "the cubin has no recorded sha256: not trusted");
  } else if (!build_arch || !device_arch || strcmp(build_arch, device_arch)) {
    st = FAT_ERR_UNSUPPORTED;
    snprintf(err, errlen, "the cubin was built for %s, this GPU is %s",
             build_arch ? build_arch : "(no architecture)", device_arch ? device_arch : "(unknown)");
  } else {
    fat_sha256_hex(cubin, len, hex);
    if (strcmp(hex, expected_sha256)) {
      st = FAT_ERR_INTEGRITY;
      snprintf(err, errlen, "the cubin's sha256 %s does not match its recorded %.64s", hex,
               expected_sha256);
    }
  }
  return st;
}

/* A stored cubin of variant (name, hash) that may be loaded on this GPU:
 * from any database (the user's first), builds for this architecture
 * first, newest first, the first that passes fat_verify_cubin. Heap copy in
 * *CUBIN (NULL when none); NOTE gets why the first stored one was refused,
 * or that none is stored for this architecture. */
static void find_cubin(fat_context *c, const selection *sel, void **cubin, char *note,
                       size_t cap) {
  int stored = 0;
  *cubin = NULL;
  note[0] = 0;
  for (int i = 0; i < c->n_dbs && !*cubin; i++) {
    sqlite3 *h = open_ro(c, i);
    sqlite3_stmt *s = NULL;
    int step;
    if (!h) continue;
    if (sqlite3_prepare_v2(h,
                           "SELECT b.key, b.arch, b.cubin, hs.cubin_sha256 FROM builds b"
                           " JOIN variants v ON v.id = b.variant_id"
                           " LEFT JOIN build_hashes hs ON hs.build_key = b.key"
                           " WHERE v.name = ?1 AND v.source_hash = ?2 AND b.ok = 1"
                           " ORDER BY b.arch = ?3 DESC, b.created_at DESC, b.key",
                           -1, &s, NULL) != SQLITE_OK) {
      /* A database from before build_hashes: its cubins are not trusted. */
      if (!note[0])
        snprintf(note, cap, "%s: %s; its cubins are not trusted", c->dbs[i], sqlite3_errmsg(h));
      sqlite3_close(h);
      continue;
    }
    sqlite3_bind_text(s, 1, sel->choice.variant, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, sel->choice.source_hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, c->arch, -1, SQLITE_STATIC);
    while ((step = sqlite3_step(s)) == SQLITE_ROW && !*cubin) {
      char why[256];
      const void *blob = sqlite3_column_blob(s, 2);
      size_t n = (size_t)sqlite3_column_bytes(s, 2);
      stored = 1;
      if (fat_verify_cubin(blob, n, (const char *)sqlite3_column_text(s, 3),
                           (const char *)sqlite3_column_text(s, 1), c->arch, why, sizeof why)) {
        /* A long path may truncate the note: its end says the least. */
        if (!note[0] && snprintf(note, cap, "%s: build %.*s: %s; compiling from source", c->dbs[i],
                                 KEY_PREFIX, (const char *)sqlite3_column_text(s, 0), why) < 0)
          note[0] = 0;
        continue;
      }
      if ((*cubin = malloc(n))) memcpy(*cubin, blob, n);
    }
    sqlite3_finalize(s);
    sqlite3_close(h);
  }
  if (*cubin) note[0] = 0;
  else if (!stored && !note[0])
    snprintf(note, cap, "no stored cubin of %s for %s; compiling from source", sel->choice.variant,
             c->arch);
}

/* The source of the selected variant: built in, or from its database. */
static char *find_source(fat_context *c, const selection *sel) {
  if (sel->def) return dup_str(sel->def->source);
  sqlite3 *h = open_ro(c, sel->db_index);
  sqlite3_stmt *s = NULL;
  char *src = NULL;
  if (!h) return NULL;
  if (sqlite3_prepare_v2(h, "SELECT source FROM variants WHERE name = ?1 AND source_hash = ?2",
                         -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, sel->choice.variant, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, sel->choice.source_hash, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) src = dup_str((const char *)sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return src;
}

static int make_parent_dirs(const char *path) {
  char p[PATH_CAP];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) && errno != EEXIST) return -1;
    *s = '/';
  }
  return 0;
}

/* Keeps a cubin compiled here in the user's database, so the next process
 * loads it without NVRTC. Failing to store is logged, not an error: the
 * kernel runs all the same. */
static void store_build(fat_context *c, const selection *sel, const char *source,
                        const fat_build *b) {
  char e[ERR_CAP], nv[32];
  fat_db *db = NULL;
  fat_variant v = {0};
  fat_build kb = *b;
  sqlite3_int64 vid;
  const fat_nvrtc *nvrtc = fat_nvrtc_get(e, sizeof e);
  if (!c->user_db_enabled || !nvrtc) return;
  if (make_parent_dirs(c->dbs[0]) || fat_db_open(c->dbs[0], &db, e, sizeof e)) {
    logf_(c, "cannot store the cubin of %s in %s", sel->choice.variant, c->dbs[0]);
    return;
  }
  v.name = (char *)sel->choice.variant;
  v.family = (char *)sel->family;
  v.params = (char *)sel->params;
  v.entry = (char *)sel->entry;
  v.source = (char *)source;
  snprintf(v.hash, sizeof v.hash, "%s", sel->choice.source_hash);
  v.direction = (fat_direction)sel->direction;
  v.dtype = (fat_dtype)sel->dtype;
  v.mask = (fat_mask)sel->mask;
  v.head_dim = sel->head_dim;
  v.block_m = sel->block_m;
  v.threads = sel->threads;
  v.smem_bytes = sel->smem_bytes;
  v.is_default = sel->def != NULL;
  snprintf(nv, sizeof nv, "%d.%d", nvrtc->major, nvrtc->minor);
  if (fat_db_put_variant(db, &v, &vid) || fat_db_put_build(db, vid, &kb, fat_compile_options(), nv))
    logf_(c, "cannot store the cubin of %s in %s: %s", sel->choice.variant, c->dbs[0],
          fat_db_errmsg(db));
  else
    logf_(c, "stored the cubin of %s (%s) in %s", sel->choice.variant, c->arch, c->dbs[0]);
  fat_db_close(db);
}

/* Compiles the selected variant's source for this GPU with NVRTC into a
 * heap cubin, and stores it for next time. */
static fat_status compile_variant(fat_context *c, const selection *sel, void **cubin) {
  char e[ERR_CAP];
  fat_build b;
  fat_status st = FAT_OK;
  char *src = find_source(c, sel);
  *cubin = NULL;
  memset(&b, 0, sizeof b);
  if (!src) return fail(c, FAT_ERR_DATABASE, "%s: the source of %s is missing",
                        sel->choice.db_path, sel->choice.variant);
  /* What is compiled is what was checked: the source its hash names (the
   * selection passed over any other; the file may have changed since). */
  char hex[FAT_SHA256_HEX_CHARS + 1];
  fat_sha256_hex(src, strlen(src), hex);
  if (strcmp(hex, sel->choice.source_hash)) {
    st = fail(c, FAT_ERR_INTEGRITY, "%s: the stored source of %s does not hash to its source_hash "
              "%s; not compiled", sel->def ? "built-in" : sel->choice.db_path, sel->choice.variant,
              sel->choice.source_hash);
    goto out;
  }
  if (!fat_nvrtc_get(e, sizeof e)) {
    st = fail(c, FAT_ERR_NO_NVRTC, "%s has no stored cubin for %s and NVRTC is unavailable: %s",
              sel->choice.variant, c->arch, e);
    goto out;
  }
  if (fat_compile_one(sel->choice.variant, src, c->arch, &b, e, sizeof e)) {
    st = fail(c, FAT_ERR_NO_NVRTC, "compiling %s: %s", sel->choice.variant, e);
    goto out;
  }
  if (!b.ok) {
    st = fail(c, FAT_ERR_COMPILE, "NVRTC could not compile %s for %s: %.400s", sel->choice.variant,
              c->arch, b.log ? b.log : "");
    goto out;
  }
  if (fat_build_key(src, c->arch, b.key, e, sizeof e) == 0) store_build(c, sel, src, &b);
  logf_(c, "compiled %s for %s with NVRTC (%.0f ms)", sel->choice.variant, c->arch, b.compile_ms);
  *cubin = b.cubin;
  b.cubin = NULL;
out:
  fat_build_free(&b);
  free(src);
  return st;
}

/* The loaded kernel of SEL, loading its module on first use: a stored cubin
 * when one fits the GPU and loads, else the source compiled with NVRTC.
 * Called with the context lock held. */
static fat_status ensure_kernel(fat_context *c, const selection *sel, const kernel **out) {
  fat_status st = FAT_OK;
  void *cubin = NULL;
  char e[256];
  for (kernel *k = c->kernels; k; k = k->next)
    if (!strcmp(k->hash, sel->choice.source_hash)) {
      *out = k;
      return FAT_OK;
    }
  kernel *k = calloc(1, sizeof *k);
  if (!k) return fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
  snprintf(k->hash, sizeof k->hash, "%s", sel->choice.source_hash);
  find_cubin(c, sel, &cubin, k->note, sizeof k->note);
  if (k->note[0]) logf_(c, "%s", k->note);
  if (cubin) {
    CUresult r = c->cu.cuModuleLoadData(&k->module, cubin);
    if (r == CUDA_SUCCESS) {
      k->load = FAT_LOAD_STORED_CUBIN;
      logf_(c, "loaded the stored cubin of %s", sel->choice.variant);
    } else {
      /* A cubin from a newer toolkit than the driver, say: compile instead. */
      snprintf(k->note, sizeof k->note, "the stored cubin of %s does not load (%s); compiling",
               sel->choice.variant, fat_cuda_result_text(&c->cu, r, e, sizeof e));
      logf_(c, "%s", k->note);
      k->module = NULL;
    }
    free(cubin);
    cubin = NULL;
  }
  if (!k->module) {
    if ((st = compile_variant(c, sel, &cubin))) goto out;
    CUDA_TRY(c->cu.cuModuleLoadData(&k->module, cubin), "loading the compiled module");
    k->load = FAT_LOAD_COMPILED;
  }
  CUresult r = c->cu.cuModuleGetFunction(&k->fn, k->module, sel->entry);
  if (r != CUDA_SUCCESS) {
    st = fail(c, FAT_ERR_CUDA, "entry %s of %s: %s", sel->entry, sel->choice.variant,
              fat_cuda_result_text(&c->cu, r, e, sizeof e));
    goto out;
  }
  if (sel->direction == FAT_FWD && sel->splits > 1) {
    char entry[160];
    snprintf(entry, sizeof entry, "%s%s", sel->entry, FAT_FWD_COMBINE_SUFFIX);
    r = c->cu.cuModuleGetFunction(&k->combine_fn, k->module, entry);
    if (r != CUDA_SUCCESS) {
      st = fail(c, FAT_ERR_CUDA, "entry %s of %s: %s", entry, sel->choice.variant,
                fat_cuda_result_text(&c->cu, r, e, sizeof e));
      goto out;
    }
  }
  if (sel->direction == FAT_BWD) {
    /* The backward's three other kernels; the dQ pass shares the variant's
     * shared memory, the per-row kernels need none. */
    static const char *const names[3] = {FAT_BWD_PREPROCESS_ENTRY, FAT_BWD_DQ_ENTRY,
                                         FAT_BWD_CONVERT_ENTRY};
    CUfunction *fns[3] = {&k->pre_fn, &k->dq_fn, &k->convert_fn};
    for (int i = 0; i < 3; i++) {
      r = c->cu.cuModuleGetFunction(fns[i], k->module, names[i]);
      if (r != CUDA_SUCCESS) {
        st = fail(c, FAT_ERR_CUDA, "entry %s of %s: %s", names[i], sel->choice.variant,
                  fat_cuda_result_text(&c->cu, r, e, sizeof e));
        goto out;
      }
    }
  }
  if (sel->smem_bytes > DEFAULT_SMEM_LIMIT) {
    CUDA_TRY(c->cu.cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      sel->smem_bytes),
             "opting into dynamic shared memory");
    if (k->dq_fn)
      CUDA_TRY(c->cu.cuFuncSetAttribute(k->dq_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        sel->smem_bytes),
               "opting into dynamic shared memory for the dQ pass");
  }
  k->next = c->kernels;
  c->kernels = k;
  *out = k;
  k = NULL;
out:
  free(cubin);
  if (k) {
    if (k->module) c->cu.cuModuleUnload(k->module);
    free(k);
  }
  return st;
}

/* ---- launch ------------------------------------------------------------- */

/* X * Y, or -1 (a stride fat_attention_check refuses) when it overflows. */
static long long stride_product(long long x, long long y) {
  long long r;
  return __builtin_mul_overflow(x, y, &r) ? -1 : r;
}

void fat_attn_args_contiguous(fat_attn_args *a) {
  if (!a || a->struct_size != sizeof *a) return;
  long long d = a->head_dim;
  a->q_head_stride = a->k_head_stride = a->v_head_stride = a->o_head_stride = d;
  a->q_row_stride = a->o_row_stride = stride_product(d, a->heads);
  a->k_row_stride = a->v_row_stride = stride_product(d, a->heads_k);
  a->q_batch_stride = a->o_batch_stride = stride_product(a->q_row_stride, a->seqlen_q);
  a->k_batch_stride = a->v_batch_stride = stride_product(a->k_row_stride, a->seqlen_k);
}

static unsigned bucket_of(sel_key k, const fat_attn_args *a) {
  uint32_t h = 2166136261u; /* FNV-1a over the key */
  const int key[] = {k.direction, k.deterministic, a->dtype,       a->mask,
                     a->head_dim, a->seqlen_q,      a->seqlen_k,    k.no_workspace,
                     a->heads / a->heads_k, key_window_left(a), key_window_right(a),
                     key_varlen_mean(a), k.no_tma};
  for (size_t i = 0; i < sizeof key / sizeof key[0]; i++) {
    h ^= (uint32_t)key[i];
    h *= 16777619u;
  }
  return h % SEL_BUCKETS;
}

/* One dimension of a strided tensor. */
typedef struct dim {
  const char *name;  /* "row_stride" */
  long long extent, stride;
} dim;

/* The elements tensor NAME spans (max offset + 1) in *SPAN, after checking
 * that no dimension of more than one element steps by less than what its
 * inner dimensions span: then no two elements share an address. */
static fat_status check_layout(fat_context *c, const char *name, dim *d, int n, long long head_dim,
                               long long *span) {
  /* Insertion sort by stride: the innermost dimension first. */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && d[j].stride < d[j - 1].stride; j--) {
      dim t = d[j];
      d[j] = d[j - 1];
      d[j - 1] = t;
    }
  long long inner = head_dim; /* the contiguous last dimension */
  const char *inside = "head_dim";
  for (int i = 0; i < n; i++) {
    long long step;
    if (d[i].extent < 2) continue;
    if (d[i].stride < inner)
      return fail(c, FAT_ERR_INVALID_ARGUMENT,
                  "%s_%s %lld: smaller than the %lld elements inside it (%s); %s would overlap "
                  "itself", name, d[i].name, d[i].stride, inner, inside, name);
    if (__builtin_mul_overflow(d[i].stride, d[i].extent - 1, &step) ||
        __builtin_add_overflow(inner, step, &inner))
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s_%s %lld: %s spans more than %lld elements",
                  name, d[i].name, d[i].stride, name, LLONG_MAX);
    inside = d[i].name;
  }
  *span = inner;
  return FAT_OK;
}

/* [lo, hi) byte ranges. */
static int overlaps(uintptr_t a, unsigned long long an, uintptr_t b, unsigned long long bn) {
  return a < b + bn && b < a + an;
}

/* A tensor the kernels touch: where it is and the bytes it spans. */
typedef struct span {
  const char *name;
  const void *ptr;
  unsigned long long bytes;
} span;

/* NAME at PTR, a (batch, seqlen, heads, head_dim) tensor with the given
 * element strides: not NULL, aligned, strides the kernels can use, no
 * element sharing an address with another, within the address space. *OUT
 * gets the bytes it spans. */
static fat_status check_strided(fat_context *c, const char *name, const void *ptr, long long bs,
                                long long rs, long long hs, int batch, int seqlen, int heads,
                                int head_dim, span *out) {
  if (!ptr) return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s is NULL", name);
  if ((uintptr_t)ptr % ALIGN_BYTES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is not %d-byte aligned", name, ptr,
                ALIGN_BYTES);
  /* Innermost first by convention: equal strides keep this order (the sort
   * is stable), so the message blames the outer dimension. */
  dim d[3] = {{"head_stride", heads, hs}, {"row_stride", seqlen, rs}, {"batch_stride", batch, bs}};
  for (int i = 2; i >= 0; i--)
    if (d[i].stride < 0 || d[i].stride % STRIDE_MULTIPLE)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s_%s %lld: must be a non-negative multiple of %d",
                  name, d[i].name, d[i].stride, STRIDE_MULTIPLE);
  long long n = 0;
  unsigned long long bytes;
  fat_status st = check_layout(c, name, d, 3, head_dim, &n);
  if (st) return st;
  /* Bytes, then room above PTR: a bound computed as UINTPTR_MAX / 2 - PTR
   * wrapped for a pointer in the upper half and passed anything. */
  if (__builtin_mul_overflow((unsigned long long)n, (unsigned long long)ELEM_BYTES, &bytes) ||
      bytes > UINTPTR_MAX - (uintptr_t)ptr)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p: its %lld elements run past the end of the "
                "address space", name, ptr, n);
  *out = (span){name, ptr, bytes};
  return FAT_OK;
}

/* lse (or D): contiguous (batch, heads, seqlen_q) fp32. */
static fat_status check_rows(fat_context *c, const char *name, const void *ptr,
                             const fat_attn_args *a, span *out) {
  if (!ptr) return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s is NULL", name);
  if ((uintptr_t)ptr % ALIGN_BYTES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is not %d-byte aligned", name, ptr,
                ALIGN_BYTES);
  /* The shape was checked positive, and each factor fits an int. */
  unsigned long long n = (unsigned long long)(a->cu_seqlens_q ? 1 : a->batch) * (unsigned long long)a->heads;
  if (__builtin_mul_overflow(n, (unsigned long long)(a->cu_seqlens_q ? a->total_q : a->seqlen_q), &n) ||
      n > (UINTPTR_MAX - (uintptr_t)ptr) / LSE_BYTES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p: its batch x heads x seqlen_q floats run past "
                "the end of the address space", name, ptr);
  *out = (span){name, ptr, n * LSE_BYTES};
  return FAT_OK;
}

/* What a kernel writes (T[0 .. N_WRITTEN)) must share no byte with anything
 * else it reads or writes: another block may still be reading it. */
static fat_status check_no_alias(fat_context *c, const span *t, int n, int n_written) {
  for (int i = 0; i < n_written; i++)
    for (int j = 0; j < n; j++) {
      if (j == i || (j < n_written && j < i)) continue; /* each written pair once */
      if (overlaps((uintptr_t)t[i].ptr, t[i].bytes, (uintptr_t)t[j].ptr, t[j].bytes))
        return fail(c, FAT_ERR_INVALID_ARGUMENT,
                    "%s [%p, +%llu bytes) overlaps %s [%p, +%llu bytes): the outputs must not "
                    "alias another tensor", t[i].name, t[i].ptr, t[i].bytes, t[j].name, t[j].ptr,
                    t[j].bytes);
    }
  return FAT_OK;
}

/* The forward's tensors in T: o, lse (written by the forward), q, k, v. */
static fat_status check_tensors(fat_context *c, const fat_attn_args *a, span t[N_TENSORS]) {
  fat_status st;
  /* A variable-length batch is one sequence of total rows as far as the
   * layout goes: its batch strides are not used. */
  const int vl = a->cu_seqlens_q != NULL;
  const int bq = vl ? 1 : a->batch, sq = vl ? a->total_q : a->seqlen_q;
  const int sk = vl ? a->total_k : a->seqlen_k;
  if ((st = check_strided(c, "q", a->q, vl ? 0 : a->q_batch_stride, a->q_row_stride,
                          a->q_head_stride, bq, sq, a->heads, a->head_dim, &t[2])) ||
      (st = check_strided(c, "k", a->k, vl ? 0 : a->k_batch_stride, a->k_row_stride,
                          a->k_head_stride, bq, sk, a->heads_k, a->head_dim, &t[3])) ||
      (st = check_strided(c, "v", a->v, vl ? 0 : a->v_batch_stride, a->v_row_stride,
                          a->v_head_stride, bq, sk, a->heads_k, a->head_dim, &t[4])) ||
      (st = check_strided(c, "o", a->o, vl ? 0 : a->o_batch_stride, a->o_row_stride,
                          a->o_head_stride, bq, sq, a->heads, a->head_dim, &t[0])) ||
      (st = check_rows(c, "lse", a->lse, a, &t[1])))
    return st;
  if (!(a->softmax_scale >= 0) || isinf(a->softmax_scale))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "softmax_scale %g: must be finite and >= 0 (0: default)",
                (double)a->softmax_scale);
  /* The variable-length index arrays: device int32, read whole by every
   * block, beside the outputs it writes. */
  const struct { const char *name; const int *ptr; unsigned long long n; } index[] = {
      {"cu_seqlens_q", a->cu_seqlens_q, (unsigned long long)a->batch + 1},
      {"cu_seqlens_k", a->cu_seqlens_k, (unsigned long long)a->batch + 1},
      {"seqused_k", a->seqused_k, (unsigned long long)a->batch}};
  for (size_t i = 0; i < sizeof index / sizeof index[0]; i++) {
    const uintptr_t at = (uintptr_t)index[i].ptr;
    const unsigned long long bytes = index[i].n * INDEX_BYTES;
    if (!at) continue;
    if (at % INDEX_BYTES)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is not %d-byte aligned (int32 entries)",
                  index[i].name, (const void *)index[i].ptr, INDEX_BYTES);
    if (bytes > UINTPTR_MAX - at)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p: its %llu entries run past the end of the "
                  "address space", index[i].name, (const void *)index[i].ptr, index[i].n);
    for (int w = 0; w < 2; w++) /* o and lse, which the forward writes */
      if (overlaps(at, bytes, (uintptr_t)t[w].ptr, t[w].bytes))
        return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s [%p, +%llu bytes) overlaps %s [%p, +%llu "
                    "bytes)", index[i].name, (const void *)index[i].ptr, bytes, t[w].name,
                    t[w].ptr, t[w].bytes);
  }
  /* The forward's scratch (split variants write their partials there). */
  if (a->workspace && a->workspace_bytes > 0) {
    if ((uintptr_t)a->workspace % ALIGN_BYTES)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace %p is not %d-byte aligned", a->workspace,
                  ALIGN_BYTES);
    if (a->workspace_bytes > UINTPTR_MAX - (uintptr_t)a->workspace)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace %p: its %zu bytes run past the end of "
                  "the address space", a->workspace, a->workspace_bytes);
    for (int i = 0; i < N_TENSORS; i++)
      if (overlaps((uintptr_t)a->workspace, a->workspace_bytes, (uintptr_t)t[i].ptr, t[i].bytes))
        return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace [%p, +%zu bytes) overlaps %s [%p, "
                    "+%llu bytes)", a->workspace, a->workspace_bytes, t[i].name, t[i].ptr,
                    t[i].bytes);
  }
  return FAT_OK;
}

/* Everything about ARGS that needs no GPU; the context lock is held. */
static fat_status check_args(fat_context *c, const fat_attn_args *a) {
  span t[N_TENSORS];
  fat_status st = check_problem(c, a);
  if (st) return st;
  if (!find_default((sel_key){FAT_FWD, 0, 0}, a->dtype, a->mask,
                    template_head_dim(FAT_FWD, a->head_dim)))
    return unsupported_head_dim(c, a->head_dim);
  if ((st = check_tensors(c, a, t))) return st;
  return check_no_alias(c, t, N_TENSORS, 2);
}

fat_status fat_attention_check(fat_context *c, const fat_attn_args *a) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = check_args(c, a);
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* What only the driver can tell: every tensor is memory of this context's
 * device, and STREAM belongs to its primary context. A launch with either
 * wrong faults the context (or runs on another GPU's stream); refusing
 * costs a few driver calls per launch. The lock is held. */
static fat_status check_on_device(fat_context *c, const void *args, int direction, void *stream) {
  /* ARGS is a fat_attn_args, or a fat_attn_bwd_args (which begins with one). */
  const fat_attn_args *a = direction == FAT_BWD ? &((const fat_attn_bwd_args *)args)->fwd : args;
  const fat_attn_bwd_args *b = direction == FAT_BWD ? args : NULL;
  const void *ptrs[N_BWD_SPANS] = {a->q, a->k, a->v, a->o, a->lse};
  static const char *const names[N_BWD_SPANS] = {"q", "k", "v", "o", "lse",
                                                  "dout", "dq", "dk", "dv", "workspace"};
  int n = N_TENSORS;
  if (b) {
    ptrs[n++] = b->dout;
    ptrs[n++] = b->dq;
    ptrs[n++] = b->dk;
    ptrs[n++] = b->dv;
    ptrs[n++] = b->workspace;
  }
  char t[256];
  for (int i = 0; i < n && c->ptr_attr; i++) {
    int ordinal = -1;
    unsigned long long managed = 0; /* the driver writes a bool or an int: zeroed wider */
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptrs[i];
    CUresult r = c->ptr_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
    if (r == CUDA_ERROR_INVALID_VALUE)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is not memory CUDA knows (%s)", names[i],
                  ptrs[i], fat_cuda_result_text(&c->cu, r, t, sizeof t));
    if (r != CUDA_SUCCESS || managed) continue; /* managed memory migrates on demand */
    r = c->ptr_attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    if (r == CUDA_SUCCESS && ordinal != c->ordinal)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is memory of device %d; this context is on "
                  "device %d", names[i], ptrs[i], ordinal, c->ordinal);
  }
  /* The legacy and per-thread default streams (handles 0, 1, 2) are those
   * of whatever context is current: ours, made current by the launch. */
  if (stream && (uintptr_t)stream > (uintptr_t)CU_STREAM_PER_THREAD && c->stream_ctx) {
    CUcontext sc = NULL;
    CUresult r = c->stream_ctx((CUstream)stream, &sc);
    if (r != CUDA_SUCCESS)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "stream %p: %s", stream,
                  fat_cuda_result_text(&c->cu, r, t, sizeof t));
    if (sc != c->pctx)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "stream %p belongs to another CUDA context (%p), "
                  "not the primary context of device %d (%p)", stream, (void *)sc, c->ordinal,
                  (void *)c->pctx);
  }
  return FAT_OK;
}

/* The cache entry of (KEY, A)'s problem, or NULL before its first launch.
 * The lock is held. */
static sel_entry *cached_entry(fat_context *c, sel_key key, const fat_attn_args *a) {
  const int group = a->heads / a->heads_k;
  sel_entry *e = c->sels[bucket_of(key, a)];
  while (e && !(e->direction == key.direction && e->deterministic == key.deterministic &&
                e->no_workspace == key.no_workspace && e->no_tma == key.no_tma && e->dtype == (int)a->dtype && e->mask == (int)a->mask &&
                e->head_dim == a->head_dim && e->seqlen_q == a->seqlen_q &&
                e->seqlen_k == a->seqlen_k && e->group == group &&
                e->window_left == key_window_left(a) && e->window_right == key_window_right(a) &&
                e->varlen_mean == key_varlen_mean(a)))
    e = e->next;
  return e;
}

/* The cache entry serving (KEY, A)'s problem, selecting and loading on the
 * first call for it. The lock is held. */
static fat_status lookup_entry(fat_context *c, sel_key key, const fat_attn_args *a,
                               const sel_entry **out) {
  fat_status st = FAT_OK;
  const unsigned b = bucket_of(key, a);
  const int group = a->heads / a->heads_k;
  sel_entry *e = cached_entry(c, key, a);
  if (e) {
    *out = e;
    return FAT_OK;
  }
  /* First call for this key: select, load, remember. */
  selection sel;
  const kernel *k = NULL;
  CUresult r = c->cu.cuCtxSetCurrent(c->pctx);
  if (r != CUDA_SUCCESS) {
    char t[256];
    return fail(c, FAT_ERR_CUDA, "cuCtxSetCurrent: %s", fat_cuda_result_text(&c->cu, r, t, sizeof t));
  }
  if ((st = select_variant(c, key, a, &sel)) || (st = ensure_kernel(c, &sel, &k))) return st;
  if (!(e = calloc(1, sizeof *e))) return fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
  e->direction = key.direction;
  e->deterministic = key.deterministic;
  e->no_workspace = key.no_workspace;
  e->no_tma = key.no_tma;
  e->pack_gqa = sel.pack_gqa;
  e->block_n = sel.block_n;
  e->persistent = sel.persistent;
  e->splits = sel.splits > 1 ? sel.splits : 1;
  e->template_dim = sel.head_dim;
  e->dtype = a->dtype;
  e->mask = a->mask;
  e->head_dim = a->head_dim;
  e->seqlen_q = a->seqlen_q;
  e->seqlen_k = a->seqlen_k;
  e->group = group;
  e->window_left = key_window_left(a);
  e->window_right = key_window_right(a);
  e->varlen_mean = key_varlen_mean(a);
  e->choice = sel.choice;
  e->choice.loaded = 1;
  e->choice.load = k->load;
  /* Why this variant and not the tuned one, then why no stored cubin. */
  const char *notes[] = {
      key.no_workspace ? "the tuned variant needs more workspace than given "
                         "(fat_attention_fwd_workspace); this one needs none" : "",
      key.no_tma ? "tensor maps cannot describe these tensors (FATUNE_LOG=1 says why); "
                   "this variant loads without" : "",
      sel.passed_over, k->note};
  join_notes(e->choice.note, sizeof e->choice.note, notes, sizeof notes / sizeof notes[0]);
  e->block_m = sel.block_m;
  e->threads = sel.threads;
  e->smem_bytes = sel.smem_bytes;
  e->block_q = sel.block_q;
  e->dq_separate = sel.dq_separate;
  e->k = k;
  e->next = c->sels[b];
  c->sels[b] = e;
  logf_(c, "%s%s %s %s d%d seqlen %d -> %s (%s, %s, bucket %d, %s)",
        key.deterministic ? "deterministic " : "", fat_direction_name((fat_direction)key.direction),
        fat_dtype_name((fat_dtype)a->dtype), fat_mask_name((fat_mask)a->mask), a->head_dim,
        a->seqlen_q, sel.choice.variant, fat_origin_name(sel.choice.origin),
        fat_match_name(sel.choice.match), sel.choice.bucket_seqlen, fat_load_name(k->load));
  *out = e;
  return FAT_OK;
}

/* The forward's parameter block for A. */
static void fwd_params(const fat_attn_args *a, fat_fwd_params *p) {
  memset(p, 0, sizeof *p);
  p->q = a->q;
  p->k = a->k;
  p->v = a->v;
  p->o = a->o;
  p->lse = a->lse;
  p->q_batch_stride = a->q_batch_stride;
  p->q_row_stride = a->q_row_stride;
  p->q_head_stride = a->q_head_stride;
  p->k_batch_stride = a->k_batch_stride;
  p->k_row_stride = a->k_row_stride;
  p->k_head_stride = a->k_head_stride;
  p->v_batch_stride = a->v_batch_stride;
  p->v_row_stride = a->v_row_stride;
  p->v_head_stride = a->v_head_stride;
  p->o_batch_stride = a->o_batch_stride;
  p->o_row_stride = a->o_row_stride;
  p->o_head_stride = a->o_head_stride;
  p->batch = a->batch;
  p->heads = a->heads;
  p->heads_k = a->heads_k;
  p->seqlen_q = a->seqlen_q;
  p->seqlen_k = a->seqlen_k;
  p->head_dim = a->head_dim;
  p->cu_seqlens_q = a->cu_seqlens_q;
  p->cu_seqlens_k = a->cu_seqlens_k;
  p->seqused_k = a->seqused_k;
  p->window_left = a->mask == FAT_ATTN_MASK_LOCAL ? a->window_left : -1;
  p->window_right = a->mask == FAT_ATTN_MASK_LOCAL ? a->window_right : -1;
  fat_fwd_set_scale(p, a->softmax_scale > 0 ? a->softmax_scale : 1.0 / sqrt((double)a->head_dim),
                    a->softcap);
}

static fat_fwd_geometry entry_geometry(const sel_entry *e) {
  fat_fwd_geometry g = {.block_m = e->block_m, .threads = e->threads, .smem_bytes = e->smem_bytes,
                        .pack_gqa = e->pack_gqa, .splits = e->splits, .head_dim = e->template_dim,
                        .block_n = e->block_n, .bf16 = e->dtype == FAT_ATTN_BF16,
                        .persistent = e->persistent};
  return g;
}

/* The entry point's lock, offline refusal and checks; on FAT_OK *E serves
 * the problem and the lock is released. */
typedef fat_status (*args_check)(fat_context *c, const void *args);

static fat_status prepare_launch(fat_context *c, sel_key key, const fat_attn_args *a,
                                 const void *args, args_check check, void *stream,
                                 const sel_entry **e) {
  fat_status st;
  pthread_mutex_lock(&c->lock);
  if (c->offline)
    st = fail(c, FAT_ERR_INVALID_ARGUMENT,
              "this context describes %s without a device: it can select, not launch", c->gpu_name);
  else if (!(st = check(c, args)) && !(st = check_on_device(c, args, key.direction, stream)))
    st = lookup_entry(c, key, a, e);
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* After the launches: the outcome, and the choice it ran. */
static fat_status finish_launch(fat_context *c, const sel_entry *e, CUresult r, fat_choice *ran) {
  fat_status st = FAT_OK;
  pthread_mutex_lock(&c->lock);
  if (r != CUDA_SUCCESS) {
    char t[256];
    st = fail(c, FAT_ERR_CUDA, "launching %s: %s", e->choice.variant,
              fat_cuda_result_text(&c->cu, r, t, sizeof t));
  } else {
    c->last = e->choice;
    c->has_last = 1;
    if (ran) put_choice(ran, &e->choice);
  }
  pthread_mutex_unlock(&c->lock);
  return st;
}

static fat_status check_fwd(fat_context *c, const void *args) { return check_args(c, args); }

static fat_status attention_fwd(fat_context *c, const fat_attn_args *a, void *stream,
                               fat_choice *ran) {
  const sel_entry *e = NULL;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  fat_status st = check_ran(c, ran);
  if (st) return st;
  /* The hot path: entries are never changed once published. The tuned
   * variant, or the best one that can run the call: one that needs no
   * scratch when the caller's is too small for the tuned split, one that
   * loads without tensor maps when they cannot describe the tensors. */
  sel_key key = {.direction = FAT_FWD};
  fat_fwd_params p;
  fat_fwd_call call;
  fat_fwd_geometry g;
  for (;;) {
    if ((st = prepare_launch(c, key, a, a, check_fwd, stream, &e))) return st;
    fwd_params(a, &p);  /* A is checked now */
    call = (fat_fwd_call){a->cu_seqlens_q ? a->total_q : 0, a->cu_seqlens_k ? a->total_k : 0, c->sm_count};
    g = entry_geometry(e);
    size_t need = fat_fwd_workspace_bytes(&g, a->batch, a->heads, a->seqlen_q);
    char why[256];
    if (!key.no_workspace && need > 0 && (!a->workspace || a->workspace_bytes < need)) {
      key.no_workspace = 1;
    } else if (!key.no_tma && g.block_n > 0 && fat_fwd_tma_describable(&p, &call, why, sizeof why)) {
      logf_(c, "%s: %s", e->choice.variant, why);
      key.no_tma = 1;
    } else {
      break;
    }
  }
  fat_fwd_set_workspace(&g, &p, (CUdeviceptr)(uintptr_t)a->workspace);
  const fat_fwd_kernels fns = {e->k->fn, e->k->combine_fn};
  CUresult r = c->cu.cuCtxSetCurrent(c->pctx);
  if (r == CUDA_SUCCESS) r = fat_fwd_launch(&c->cu, &fns, &g, &p, &call, (CUstream)stream);
  return finish_launch(c, e, r, ran);
}

/* The refusal of a shape whose workspace does not fit in a size_t. */
static fat_status workspace_overflow(fat_context *c, const fat_attn_args *a) {
  return fail(c, FAT_ERR_INVALID_ARGUMENT, "batch %d x heads %d x seqlen_q %d: the workspace "
              "would be more bytes than a size_t holds", a->batch, a->heads, a->seqlen_q);
}

static fat_status attention_fwd_workspace(fat_context *c, const fat_attn_args *a, size_t *bytes) {
  selection sel;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  const sel_entry *e = NULL;
  fat_status st;
  if (!bytes)
    st = fail(c, FAT_ERR_INVALID_ARGUMENT, "bytes is NULL");
  else if (c->offline)
    st = select_variant(c, (sel_key){FAT_FWD, 0, 0}, a, &sel);
  else if (!(st = check_problem(c, a)))
    /* With a device, the launch's own cache entry: asked before every
     * call, it must cost no more than the launch's lookup. */
    st = lookup_entry(c, (sel_key){FAT_FWD, 0, 0}, a, &e);
  if (st == FAT_OK) {
    const fat_fwd_geometry g = e ? entry_geometry(e)
                                 : (fat_fwd_geometry){.block_m = sel.block_m, .threads = sel.threads,
                                                      .smem_bytes = sel.smem_bytes, .pack_gqa = sel.pack_gqa,
                                                      .splits = sel.splits > 1 ? sel.splits : 1,
                                                      .head_dim = sel.head_dim, .block_n = sel.block_n,
                                                      .bf16 = a->dtype == FAT_ATTN_BF16};
    *bytes = fat_fwd_workspace_bytes(&g, a->batch, a->heads, a->seqlen_q);
    if (*bytes == SIZE_MAX) st = workspace_overflow(c, a);
  }
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* ---- backward ------------------------------------------------------------- */

#define WORKSPACE_ALIGN 256  /* D, then the dQ accumulator at this alignment */

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

/* Bytes of D and of the dQ accumulator for A's shape (checked positive).
 * Returns -1 when they do not fit in a size_t (batch, heads and seqlen_q
 * near INT_MAX once wrapped to a small number, with FAT_OK). */
static int bwd_workspace_parts(const fat_attn_args *a, int deterministic, size_t *delta,
                               size_t *accum) {
  size_t rows, d_bytes, sum;
  /* The accumulator's rows are the template's head dim wide. */
  const int tdim = template_head_dim(FAT_BWD, a->head_dim);
  const size_t width = (size_t)(tdim > 0 ? tdim : a->head_dim) * sizeof(float);
  if (__builtin_mul_overflow((size_t)a->batch, (size_t)a->heads, &rows) ||
      __builtin_mul_overflow(rows, (size_t)a->seqlen_q, &rows) ||
      __builtin_mul_overflow(rows, sizeof(float), &d_bytes) || d_bytes > SIZE_MAX - WORKSPACE_ALIGN ||
      (!deterministic && __builtin_mul_overflow(rows, width, accum)))
    return -1;
  *delta = round_up(d_bytes, WORKSPACE_ALIGN);
  if (deterministic) *accum = 0;
  return __builtin_add_overflow(*delta, *accum, &sum) ? -1 : 0;
}


void fat_attn_bwd_args_contiguous(fat_attn_bwd_args *a) {
  if (!a || a->struct_size != sizeof *a || a->fwd.struct_size != sizeof a->fwd) return;
  fat_attn_args_contiguous(&a->fwd);
  const fat_attn_args *f = &a->fwd;
  a->do_batch_stride = a->dq_batch_stride = f->q_batch_stride;
  a->do_row_stride = a->dq_row_stride = f->q_row_stride;
  a->do_head_stride = a->dq_head_stride = f->q_head_stride;
  a->dk_batch_stride = a->dv_batch_stride = f->k_batch_stride;
  a->dk_row_stride = a->dv_row_stride = f->k_row_stride;
  a->dk_head_stride = a->dv_head_stride = f->k_head_stride;
}

fat_status fat_attention_bwd_workspace(fat_context *c, const fat_attn_bwd_args *a, size_t *bytes) {
  size_t delta, accum;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = check_bwd_size(c, a);
  if (!st) st = !bytes ? fail(c, FAT_ERR_INVALID_ARGUMENT, "bytes is NULL") : check_problem(c, &a->fwd);
  if (!st && bwd_workspace_parts(&a->fwd, a->deterministic, &delta, &accum))
    st = workspace_overflow(c, &a->fwd);
  else if (!st)
    *bytes = delta + accum;
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* Everything about A that needs no GPU; the lock is held. */
static fat_status check_bwd_args(fat_context *c, const void *args) {
  const fat_attn_bwd_args *a = args;
  fat_status st = check_bwd_size(c, a);
  if (st) return st;
  const fat_attn_args *f = &a->fwd;
  /* The written ones first: dq, dk, dv, workspace; then dout and the forward's. */
  span t[N_BWD_SPANS];
  if ((st = check_problem(c, f))) return st;
  if (a->deterministic != 0 && a->deterministic != 1)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "deterministic %d: must be 0 or 1", a->deterministic);
  if (f->softcap > 0)
    return fail(c, FAT_ERR_UNSUPPORTED, "softcap %g: the backward has no soft-cap (forward only)",
                (double)f->softcap);
  if (f->cu_seqlens_q || f->seqused_k)
    return fail(c, FAT_ERR_UNSUPPORTED, "variable-length batches (cu_seqlens, seqused_k): the "
                "backward takes dense batches only");
  if (!find_default((sel_key){FAT_BWD, a->deterministic, 0}, f->dtype, f->mask,
                    template_head_dim(FAT_BWD, f->head_dim)))
    return unsupported_head_dim(c, f->head_dim);
  if ((st = check_tensors(c, f, t + 5)) ||
      (st = check_strided(c, "dout", a->dout, a->do_batch_stride, a->do_row_stride,
                          a->do_head_stride, f->batch, f->seqlen_q, f->heads, f->head_dim, &t[4])) ||
      (st = check_strided(c, "dq", a->dq, a->dq_batch_stride, a->dq_row_stride, a->dq_head_stride,
                          f->batch, f->seqlen_q, f->heads, f->head_dim, &t[0])) ||
      (st = check_strided(c, "dk", a->dk, a->dk_batch_stride, a->dk_row_stride, a->dk_head_stride,
                          f->batch, f->seqlen_k, f->heads_k, f->head_dim, &t[1])) ||
      (st = check_strided(c, "dv", a->dv, a->dv_batch_stride, a->dv_row_stride, a->dv_head_stride,
                          f->batch, f->seqlen_k, f->heads_k, f->head_dim, &t[2])))
    return st;
  size_t delta, accum;
  if (bwd_workspace_parts(f, a->deterministic, &delta, &accum)) return workspace_overflow(c, f);
  if (!a->workspace)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace is NULL (fat_attention_bwd_workspace: "
                "%zu bytes)", delta + accum);
  if ((uintptr_t)a->workspace % ALIGN_BYTES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace %p is not %d-byte aligned", a->workspace,
                ALIGN_BYTES);
  if (a->workspace_bytes < delta + accum)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace_bytes %zu: this problem needs %zu "
                "(fat_attention_bwd_workspace)", a->workspace_bytes, delta + accum);
  if (a->workspace_bytes > UINTPTR_MAX - (uintptr_t)a->workspace)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace %p: its %zu bytes run past the end of the "
                "address space", a->workspace, a->workspace_bytes);
  t[3] = (span){"workspace", a->workspace, delta + accum};
  return check_no_alias(c, t, N_BWD_SPANS, 4);
}

fat_status fat_attention_bwd_check(fat_context *c, const fat_attn_bwd_args *a) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = check_bwd_args(c, a);
  pthread_mutex_unlock(&c->lock);
  return st;
}

static fat_status attention_bwd(fat_context *c, const fat_attn_bwd_args *a, void *stream,
                               fat_choice *ran) {
  const sel_entry *e = NULL;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  fat_status st = check_ran(c, ran);
  if (st) return st;
  pthread_mutex_lock(&c->lock);
  st = check_bwd_size(c, a);  /* before deterministic is read */
  pthread_mutex_unlock(&c->lock);
  if (st) return st;
  /* The tuned variant, or where tensor maps cannot describe the tensors
   * the best one that loads without them. */
  sel_key key = {.direction = FAT_BWD, .deterministic = a->deterministic};
  const fat_attn_args *f = &a->fwd;
  fat_bwd_params p;
  for (;;) {
    if ((st = prepare_launch(c, key, &a->fwd, a, check_bwd_args, stream, &e))) return st;
    memset(&p, 0, sizeof p);
    fwd_params(f, &p.fwd);  /* A is checked now */
    p.dout = a->dout;
    p.do_batch_stride = a->do_batch_stride;
    p.do_row_stride = a->do_row_stride;
    p.do_head_stride = a->do_head_stride;
    char why[256];
    if (key.no_tma || e->block_n < 1 || !fat_bwd_tma_describable(&p, why, sizeof why)) break;
    logf_(c, "%s: %s", e->choice.variant, why);
    key.no_tma = 1;
  }
  size_t delta, accum;
  bwd_workspace_parts(f, a->deterministic, &delta, &accum); /* fits: checked by check_bwd_args */
  p.dq = a->dq;
  p.dk = a->dk;
  p.dv = a->dv;
  p.delta = (float *)a->workspace;
  p.dq_accum = e->dq_separate ? NULL : (float *)((char *)a->workspace + delta);
  p.dq_batch_stride = a->dq_batch_stride;
  p.dq_row_stride = a->dq_row_stride;
  p.dq_head_stride = a->dq_head_stride;
  p.dk_batch_stride = a->dk_batch_stride;
  p.dk_row_stride = a->dk_row_stride;
  p.dk_head_stride = a->dk_head_stride;
  p.dv_batch_stride = a->dv_batch_stride;
  p.dv_row_stride = a->dv_row_stride;
  p.dv_head_stride = a->dv_head_stride;
  const fat_bwd_kernels fns = {e->k->pre_fn, e->k->fn, e->k->dq_fn, e->k->convert_fn};
  const fat_bwd_geometry geo = {.block_n = e->block_m, .block_q = e->block_q, .dq_separate = e->dq_separate,
                                .threads = e->threads, .smem_bytes = e->smem_bytes, .tma = e->block_n > 0,
                                .bf16 = e->dtype == FAT_ATTN_BF16, .persistent = e->persistent,
                                .sm_count = c->sm_count};
  CUresult r = c->cu.cuCtxSetCurrent(c->pctx);
  if (r == CUDA_SUCCESS) r = fat_bwd_launch(&c->cu, &fns, &geo, &p, (CUstream)stream);
  return finish_launch(c, e, r, ran);
}

fat_status fat_context_last_choice(fat_context *c, fat_choice *out) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = FAT_OK;
  if (!out) st = fail(c, FAT_ERR_INVALID_ARGUMENT, "out is NULL");
  else st = CHECK_SIZE(c, fat_choice, out, "FAT_CHOICE_INIT");
  if (!st && !c->has_last) st = fail(c, FAT_ERR_INVALID_ARGUMENT, "no launch has succeeded yet");
  if (!st) put_choice(out, &c->last);
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* ---- entry points that make the primary context current --------------------- */

/* Each restores the caller's current context on every exit (save_current). */

fat_status fat_attention_fwd(fat_context *c, const fat_attn_args *a, void *stream,
                             fat_choice *ran) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  const saved_ctx caller = save_current(c);
  const fat_status st = attention_fwd(c, a, stream, ran);
  restore_current(c, caller);
  return st;
}

fat_status fat_attention_fwd_workspace(fat_context *c, const fat_attn_args *a, size_t *bytes) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  const saved_ctx caller = save_current(c);
  const fat_status st = attention_fwd_workspace(c, a, bytes);
  restore_current(c, caller);
  return st;
}

fat_status fat_attention_bwd(fat_context *c, const fat_attn_bwd_args *a, void *stream,
                             fat_choice *ran) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  const saved_ctx caller = save_current(c);
  const fat_status st = attention_bwd(c, a, stream, ran);
  restore_current(c, caller);
  return st;
}
