/* SPDX-License-Identifier: MIT */
/* Which variant serves a problem. One function, fat_rt_select_variant,
 * decides: a tuned winner of this GPU from the user's database, then the
 * shipped tables (an exact bucket anywhere before a nearest one), else
 * the built-in default; fat_attention_select (the "supported?" query) and
 * the launches (fat_rt_lookup_entry) both ask it. A context keeps what
 * it has read and decided, under its mutex: each database's candidates of
 * a lookup key, read once (sel_rows); each answer met, as a record that
 * every shape with that answer shares (sel_record: the variant, its loaded
 * kernel, its schedule, its choice but for the shape's match), kept for
 * the context's life; and a bounded memo of exact shapes, allocated with
 * the context, from a call to its record and match (sel_shape, the least
 * recently called of a set giving way). A repeated shape costs a hash and
 * a few comparisons; a new one -- a decoding step one key longer -- a
 * selection from memory, with no database read and no allocation unless
 * its answer is new. Also here: which head dims have a template, and a
 * problem's built-in default. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sqlite3.h>
#include "db.h"
#include "fat_abi.h"
#include "fat_abi_bwd.h"
#include "family.h"
#include "fwd_launch.h"
#include "kernel.h"
#include "sha256.h"
#include "types.h"
#include "runtime_int.h"

#define MIN_CC_MAJOR 8              /* the mma80 family needs Ampere or newer */
#define E4M3_CC_MAJOR 9             /* the e4m3 kernels are the ws90 family's: sm_90a, */
#define E4M3_CC_MINOR 0             /* which only compute capability 9.0 runs */
#define KV8_MIN_CC 89               /* an fp8 K/V cache's kernels convert e4m3 with sm_89's
                                       cvt (Ada, Hopper and newer), as major * 10 + minor */

/* ---- supported problems --------------------------------------------------- */

#define MAX_TEMPLATE_DIMS 64  /* more head dims than any space has */

/* The distinct head dims of the forward's built-in defaults, ascending, at
 * most CAP of them into OUT: of DTYPE's and MASK's (-1: any). */
static int default_head_dims(int dtype, int mask, int *out, int cap) {
  int n = 0;
  for (int i = 0; i < fat_n_default_variants; i++) {
    const fat_default_variant *v = &fat_default_variants[i];
    if (v->direction != FAT_FWD || (dtype >= 0 && v->dtype != dtype) || (mask >= 0 && v->mask != mask)) continue;
    int j = 0;
    while (j < n && out[j] < v->head_dim) j++;
    if ((j < n && out[j] == v->head_dim) || n == cap) continue;
    memmove(out + j + 1, out + j, (size_t)(n - j) * sizeof *out); /* ascending */
    out[j] = v->head_dim;
    n++;
  }
  return n;
}

int fat_supported_head_dims(int *out, int cap) {
  int all[MAX_TEMPLATE_DIMS];
  const int n = default_head_dims(-1, -1, all, MAX_TEMPLATE_DIMS);
  /* Nothing to fill: how many there are, for sizing OUT. */
  if (!out || cap <= 0) return n;
  const int k = n < cap ? n : cap;
  memcpy(out, all, (size_t)k * sizeof *out);
  return k;
}

static int sixteen_bit(int dtype) { return dtype == FAT_FP16 || dtype == FAT_BF16; }

/* Whether default D's templates are those of a problem of DTYPE: an fp8
 * dtype's are its own (e4m3's the ws90 family's, an fp8 K/V cache's the
 * decoding families'), the 16-bit dtypes' those of either. */
static int default_of_dtype(const fat_default_variant *d, int dtype) {
  return sixteen_bit(dtype) ? sixteen_bit(d->dtype) : d->dtype == dtype;
}

/* The template a problem's head dim runs on in DIRECTION: itself, or the
 * next one up for any other multiple of 8 (the kernels zero the padding);
 * 0 if none. The backward has no d32, so its small head dims run on d64;
 * an fp8 dtype runs on the head dims of its own defaults. */
int fat_rt_template_head_dim(int direction, int dtype, int head_dim) {
  int best = 0;
  if (head_dim < 1 || head_dim % 8) return 0;
  for (int i = 0; i < fat_n_default_variants; i++) {
    const int d = fat_default_variants[i].head_dim;
    if (fat_default_variants[i].direction == direction && default_of_dtype(&fat_default_variants[i], dtype) &&
        d >= head_dim && (!best || d < best))
      best = d;
  }
  return best;
}

int fat_rt_dtype_head_dims(int dtype, int mask, int *out, int cap) {
  return default_head_dims(dtype, mask, out, cap);
}

/* Whether a variant of FAMILY serves a call of KEY: a backward with
 * variable lengths or a soft-cap only on a family that takes them, one
 * without on a family for dense calls (family.h's features); a forward
 * over a paged cache only on a family that reads pages, one over a
 * contiguous cache on the others (family.h's paged). */
static int family_serves(sel_key key, const char *family) {
  const fat_family *f = fat_family_find(family, (fat_direction)key.direction);
  if (!f) return 1;
  return key.direction == FAT_BWD ? f->features == key.features : f->paged == key.paged;
}

/* Whether default D is of a decoding family: one with a longest seqlen_q
 * (family.h), splitkv. */
static int decoding_family(const fat_default_variant *d) {
  const fat_family *f = fat_family_find(d->family, (fat_direction)d->direction);
  return f && f->max_seqlen_q > 0;
}

/* The built-in default of a problem, of a family that serves KEY's
 * features: for the backward, the deterministic one when KEY asks for it,
 * else the family's default; for a contiguous forward of a 16-bit dtype,
 * which has two up to d128, the decoding family's when KEY is
 * decoding-shaped and mma80's when not (an fp8 K/V cache's, the decoding
 * family's alone, serves every call of its dtype). */
const fat_default_variant *fat_rt_find_default(sel_key key, int dtype, int mask, int head_dim) {
  const fat_default_variant *best = NULL;
  int best_rank = -1;
  for (int i = 0; i < fat_n_default_variants; i++) {
    const fat_default_variant *d = &fat_default_variants[i];
    if (d->direction != key.direction || d->dtype != dtype || d->mask != mask ||
        d->head_dim != head_dim || !family_serves(key, d->family))
      continue;
    /* A backward that asks for deterministic gradients gets a default that
     * gives them; one that does not takes such a default only when it has
     * no other. */
    if (key.deterministic && !d->deterministic) continue;
    const int rank = 2 * (d->deterministic == key.deterministic) +
                     (key.direction != FAT_FWD || decoding_family(d) == key.decoding);
    if (rank > best_rank) best = d, best_rank = rank;
  }
  return best;
}

/* ---- the decoding default ------------------------------------------------- */

/* What the rule asks of the decoding default of a (16-bit dtype, mask,
 * head dim): found once for the process, so that the rule, asked before
 * every forward call, costs a few comparisons and the launch's arithmetic
 * rather than walks over the built-in defaults and a parse of their
 * parameters (a decoding loop's host time is the measure). */
typedef struct {
  int block_m;       /* 0: no decoding default with launch splits */
  int pack_gqa;
  int max_seqlen_q;  /* the decoding family's */
} decoding_default;

#define DECODING_DIMS 65 /* head dims 8, 16, ... 512 by head_dim / 8 */
static decoding_default decoding_defaults[2][3][DECODING_DIMS]; /* [bf16?][mask][head_dim / 8] */
static pthread_once_t decoding_defaults_once = PTHREAD_ONCE_INIT;

static void find_decoding_defaults(void) {
  const sel_key key = {.direction = FAT_FWD, .decoding = 1};
  for (int b = 0; b < 2; b++)
    for (int mask = FAT_ATTN_MASK_NONE; mask <= FAT_ATTN_MASK_LOCAL; mask++)
      for (int i = 1; i < DECODING_DIMS; i++) {
        const int dtype = b ? FAT_BF16 : FAT_FP16;
        const int tdim = fat_rt_template_head_dim(FAT_FWD, dtype, 8 * i);
        const fat_default_variant *d = tdim ? fat_rt_find_default(key, dtype, mask, tdim) : NULL;
        int pack_gqa = 0, splits = 1;
        char why[256];
        /* A default of a fixed split count would not ask the launch. */
        if (!d || !decoding_family(d) || fat_fwd_params_parse(d->params, &pack_gqa, &splits, why, sizeof why) ||
            splits != 0)
          continue;
        decoding_defaults[b][mask][i] = (decoding_default){
            .block_m = d->block_m, .pack_gqa = pack_gqa,
            .max_seqlen_q = fat_family_find(d->family, FAT_FWD)->max_seqlen_q};
      }
}

/* The rule that gives a contiguous 16-bit forward with nothing tuned the
 * decoding family's default (splitkv's: the packed decoding tile, its key
 * splits chosen by the launch) instead of mma80's. mma80's default runs one
 * block per 128 query rows and head: with a few queries against a long
 * cache that grid leaves most SMs idle while each block streams the whole
 * of K and V (measured 18x the tuned split-KV winner at 131072 keys, batch
 * 1, 32 query and 8 K/V heads). The question "would more blocks fill this
 * GPU, and are the keys long enough to divide?" is the launch's own split
 * rule (core/fwd_launch.c, fat_fwd_launch_splits), so the rule asks it
 * rather than restating its thresholds: a call is decoding-shaped when
 *   - it is a dense forward of fp16 or bf16 over a contiguous cache (a
 *     paged call has the paged family's default, which splits at launch
 *     already; a packed batch of variable lengths is left to mma80, whose
 *     kernels take one: splitkv is not timed on them);
 *   - its seqlen_q is within the decoding family's longest (family.h's
 *     max_seqlen_q: its blocks are for few queries);
 *   - its head dim's template has a decoding default (up to d128: above,
 *     the launch's splits spill: family_splitkv.lua); and
 *   - the launch would divide its keys among two splits or more for the
 *     decoding default's grid (query blocks of its packed rows x K/V heads
 *     x batch) on this GPU: that grid fills under SPLIT_FILL of the SMs'
 *     block slots and each split keeps SPLIT_MIN_KEYS keys or more
 *     (fwd_launch.c's rule; a local window counts the keys it leaves).
 * On an H100's 132 SMs, one query a sequence with 32/8 heads (8 blocks a
 * sequence) is decoding-shaped up to batch 26 at any seqlen_k above 256,
 * and not from batch 27 (216 blocks fill 80 % of its 264 slots). The
 * answer depends on batch and heads, which the selection memo's shape
 * does not hold otherwise: sel_key carries it. */
int fat_rt_decoding_call(const fat_context *c, const fat_attn_args *a) {
  if (!c || !a || !sixteen_bit(a->dtype) || a->block_table || a->cu_seqlens_q || a->cu_seqlens_k)
    return 0;
  /* An unchecked call: nothing to judge (its checks refuse it). */
  if (a->batch < 1 || a->heads < 1 || a->heads_k < 1 || a->heads % a->heads_k || a->seqlen_q < 1 ||
      a->seqlen_k < 1 || a->mask < FAT_ATTN_MASK_NONE || a->mask > FAT_ATTN_MASK_LOCAL ||
      a->head_dim < 8 || a->head_dim % 8 || a->head_dim / 8 >= DECODING_DIMS)
    return 0;
  pthread_once(&decoding_defaults_once, find_decoding_defaults);
  const decoding_default *d = &decoding_defaults[a->dtype == FAT_ATTN_BF16][a->mask][a->head_dim / 8];
  if (!d->block_m || a->seqlen_q > d->max_seqlen_q) return 0;
  const fat_fwd_geometry g = {.block_m = d->block_m, .pack_gqa = d->pack_gqa, .launch_splits = 1,
                              .local = a->mask == FAT_ATTN_MASK_LOCAL};
  const fat_fwd_params p = {.batch = a->batch, .heads = a->heads, .heads_k = a->heads_k,
                            .seqlen_q = a->seqlen_q, .seqlen_k = a->seqlen_k,
                            .window_left = g.local ? a->window_left : -1,
                            .window_right = g.local ? a->window_right : -1};
  const fat_fwd_call call = {.sm_count = c->sm_count};
  return fat_fwd_call_splits(&g, &p, &call) > 1;
}

/* A causal forward with one query is the problem of no mask: the masks
 * are bottom-right aligned (fatune.h; templates/reference_fwd.cu, the
 * kernels' diag), so the one query of a sequence sits at its last key
 * position, seqlen_k - 1, and sees every key -- and so it is, sequence by
 * sequence, for a packed batch whose longest has one query (a sequence of
 * none computes nothing either way), for seqused_k (the position counts
 * the keys used) and for a paged cache. The local mask is left alone: its
 * window bounds the keys even then. No mask's kernels skip the causal
 * test, and its tuned decoding winners serve the call. */
int fat_rt_causal_is_none(const fat_attn_args *a) {
  return a && a->mask == FAT_ATTN_MASK_CAUSAL && a->seqlen_q == 1;
}

sel_key fat_rt_fwd_key(const fat_context *c, const fat_attn_args *a) {
  return (sel_key){.direction = FAT_FWD, .paged = a && a->block_table != NULL,
                   .decoding = fat_rt_decoding_call(c, a)};
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
sqlite3 *fat_rt_open_ro(fat_context *c, int i) {
  sqlite3 *h = NULL;
  struct stat st;
  c->stats.db_opens++;
  if (!c->dbs[i][0] || stat(c->dbs[i], &st)) return NULL;
  if (!S_ISREG(st.st_mode)) {
    logf_(c, "%s: not a regular file: skipped", c->dbs[i]);
    return NULL;
  }
  if (access(c->dbs[i], R_OK)) return NULL;
  /* The lookup's SQL asks the parser and the family table (db.h). */
  if (sqlite3_open_v2(c->dbs[i], &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
      fat_db_add_functions(h) != SQLITE_OK) {
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

/* The first schema versions whose problems carry a window, a
 * variable-length profile, and a paged cache's page size. A user's database
 * of an older one is read as it is (the tuner upgrades it on its next
 * write): its problems read as window 0, 0, dense and contiguous, and it
 * has no local, variable-length or paged one. */
#define WINDOW_SCHEMA_VERSION 2
#define LENGTHS_SCHEMA_VERSION 3
#define PAGE_SCHEMA_VERSION 7

/* The winners of a key, bucket by bucket (a bucket's rows adjacent, its
 * newest winner first). WINDOW: the problem's window, lengths and page
 * size columns, or constants for a database without them; either way
 * result columns 13 to 16, which the ORDER BY names by number; the source
 * is the 17th, and the 18th the problem's parallelism (batch x K/V heads,
 * a decoding bucket's: bucket.parallel).
 * The variant must be of its problem's key (import refuses any other). */
#define VARIANT_OF_PROBLEM                                                                     \
  " AND v.direction = p.direction AND v.dtype = p.dtype AND v.mask = p.mask"                   \
  " AND v.head_dim = p.head_dim"
#define WINNER_SELECT(window)                                                                  \
  "SELECT v.name, v.source_hash, v.entry, v.family, v.params, v.block_m, v.threads,"           \
  " v.smem_bytes, p.seqlen_q, t.median_ms, p.seqlen_k, p.heads / p.heads_k, " window           \
  ", v.source, p.batch * p.heads_k FROM winners w JOIN gpus g ON g.id = w.gpu_id"            \
  " JOIN problems p ON p.id = w.problem_id JOIN variants v ON v.id = w.variant_id"             \
  " JOIN timings t ON t.id = w.timing_id"                                                      \
  " WHERE g.name = ?1 AND g.cc_major = ?2 AND g.cc_minor = ?3 AND g.sm_count = ?4"             \
  " AND p.direction = ?8 AND p.dtype = ?5 AND p.mask = ?6 AND p.head_dim = ?7"                 \
  VARIANT_OF_PROBLEM                                                                           \
  /* Families the table lets win: the materialising baseline never does. */                   \
  " AND " FAT_SQL_MAY_WIN("v.family", "v.direction") " AND instr(v.source, ?9) > 0"            \
  " AND instr(v.source, ?10) > 0"                                                              \
  " ORDER BY p.seqlen_q, p.seqlen_k, p.heads / p.heads_k, 13, 14, 15, 16, 18, w.chosen_at DESC"

/* The deterministic backward: the fastest live timing, per bucket, of a
 * variant whose dQ mode is deterministic (mma80's DQ_MODE=separate, dQ in
 * its own pass, or ws90's ordered, added into the accumulator in a fixed
 * order) that passed every live check on this GPU and problem -- the
 * winner among those the tuner measured, which `fatune export` ships
 * beside the overall winner. Same columns as WINNER_SELECT. */
#define DETERMINISTIC_SELECT(window)                                                           \
  "SELECT v.name, v.source_hash, v.entry, v.family, v.params, v.block_m, v.threads,"           \
  " v.smem_bytes, p.seqlen_q, t.median_ms, p.seqlen_k, p.heads / p.heads_k, " window           \
  ", v.source, p.batch * p.heads_k FROM timings t JOIN gpus g ON g.id = t.gpu_id"            \
  " JOIN problems p ON p.id = t.problem_id JOIN variants v ON v.id = t.variant_id"             \
  " WHERE g.name = ?1 AND g.cc_major = ?2 AND g.cc_minor = ?3 AND g.sm_count = ?4"             \
  " AND p.direction = ?8 AND p.dtype = ?5 AND p.mask = ?6 AND p.head_dim = ?7"                 \
  VARIANT_OF_PROBLEM                                                                           \
  " AND " FAT_SQL_MAY_WIN("v.family", "v.direction") " AND t.retired = 0"                     \
  " AND instr(v.source, ?9) > 0 AND instr(v.source, ?10) > 0"                                  \
  " AND " FAT_SQL_DQ_DETERMINISTIC("v.params")                                                 \
  " AND " FAT_SQL_LIVE_PASSING("", "t.variant_id", "t.gpu_id", "t.problem_id")                \
  " ORDER BY p.seqlen_q, p.seqlen_k, p.heads / p.heads_k, 13, 14, 15, 16, 18, t.median_ms, t.id"

#define V1_COLUMNS "0, 0, '', 0"
#define V2_COLUMNS "p.window_left, p.window_right, '', 0"
#define V3_COLUMNS "p.window_left, p.window_right, p.lengths, 0"
#define V5_COLUMNS "p.window_left, p.window_right, p.lengths, p.page_size"
/* By [deterministic][the database's columns: none, windows, windows and
 * lengths, and page sizes]. */
static const char *const LOOKUP_SQL[2][4] = {
    {WINNER_SELECT(V1_COLUMNS), WINNER_SELECT(V2_COLUMNS), WINNER_SELECT(V3_COLUMNS),
     WINNER_SELECT(V5_COLUMNS)},
    {DETERMINISTIC_SELECT(V1_COLUMNS), DETERMINISTIC_SELECT(V2_COLUMNS),
     DETERMINISTIC_SELECT(V3_COLUMNS), DETERMINISTIC_SELECT(V5_COLUMNS)},
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
  int page_size;                  /* a paged cache's page size; 0 contiguous */
  /* A decoding bucket's parallelism: batch x K/V heads, the blocks its
   * kernels have before they split the keys (a dense problem of at most
   * the decoding family's longest seqlen_q); 0 for the others. The
   * tuner's default batch (16384 tokens / seqlen_k) is 4 at 4096 keys
   * and 1 from 16384: a call of batch 1 served by the winner tuned at 4,
   * whose split count was fixed for four times its blocks, ran at 0.027
   * ms where the launch-chosen splits took 0.023 (H100, 32/8 heads, 4096
   * keys, one query; RESULTS.md's paged table). Tuned at several batches,
   * the nearest parallelism at or below the call's serves (parallel_above). */
  int parallel;
} bucket;

/* The decoding family's longest seqlen_q, looked up once (every launch's
 * memo key asks parallel_of). */
static int decoding_max_q;
static pthread_once_t decoding_max_q_once = PTHREAD_ONCE_INIT;
static void find_decoding_max_q(void) { decoding_max_q = fat_family_find("splitkv", FAT_FWD)->max_seqlen_q; }

/* The parallelism of a dense problem of SEQLEN_Q queries, BATCH sequences
 * and HEADS_K K/V heads with profile LENGTHS ("" dense): bucket.parallel. */
static int parallel_of(int seqlen_q, int batch, int heads_k, const char *lengths) {
  pthread_once(&decoding_max_q_once, find_decoding_max_q);
  return seqlen_q <= decoding_max_q && !(lengths && lengths[0]) ? batch * heads_k : 0;
}

/* ... of call A (a packed batch has none). */
static int call_parallel(const fat_attn_args *a) {
  return a->cu_seqlens_q ? 0 : parallel_of(a->seqlen_q, a->batch, a->heads_k, "");
}

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
  bucket b = {.seqlen_q = a->seqlen_q, .seqlen_k = a->seqlen_k, .group = a->heads / a->heads_k,
              .window_left = window_left, .window_right = window_right, .mean = a->seqlen_q,
              .page_size = a->block_table ? a->page_size : 0,
              .parallel = call_parallel(a)};
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
  /* A paged call weighs the page size, at a quarter: the kernels are the
   * same, only how far apart their rows' pages are differs. */
  if (call.page_size && b.page_size) d += 0.25 * fabs(log((double)b.page_size / call.page_size));
  return d;
}

/* Among the rows of one bucket tuned at several batches, how far a row's
 * parallelism is from the call's (its ratio); 0 where either has none.
 * The nearest bucket is chosen first (bucket_distance, which leaves the
 * parallelism out, so that a table tuned at one batch a bucket serves as
 * it did), then within it the nearest parallelism at or below the call's
 * (parallel_above), else the smallest above it. */
static double parallel_distance(bucket b, bucket call) {
  return call.parallel && b.parallel ? fabs(log((double)b.parallel / call.parallel)) : 0.0;
}

/* 1 when row B was tuned at more parallelism than the call has. Such a
 * row serves only where the bucket has none at or below the call's: a
 * winner whose grid was fixed for its problem's blocks (a split count, or
 * one block per query tile) leaves SMs idle on a call with fewer, while
 * one tuned for fewer blocks over-splits a larger call, which costs far
 * less. Measured on the H100 (bf16 d128, 32/8 heads, RESULTS.md's
 * decoding parallelism section): a one-split winner tuned at batch x K/V
 * heads 128 ran 0.514 ms at 32 and 1.091 at 64, where the launch-chosen
 * splits took 0.205 and 0.713; a 32-split winner tuned at 4 ran 0.751 at
 * 128 against 0.704. */
static int parallel_above(bucket b, bucket call) {
  return call.parallel && b.parallel > call.parallel;
}

/* The same bucket, whatever the parallelism: an exact match. */
static int same_key(bucket a, bucket b) {
  return a.seqlen_q == b.seqlen_q && a.seqlen_k == b.seqlen_k && a.group == b.group &&
         a.window_left == b.window_left && a.window_right == b.window_right &&
         a.sequences == b.sequences && a.mean_step == b.mean_step && a.page_size == b.page_size;
}

/* ... and the same parallelism: one problem's winners. */
static int same_bucket(bucket a, bucket b) { return same_key(a, b) && a.parallel == b.parallel; }

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
#define SOURCE_COL 16
static int source_matches(sqlite3_stmt *s) {
  char hex[FAT_SHA256_HEX_CHARS + 1];
  const char *src = (const char *)sqlite3_column_text(s, SOURCE_COL);
  const char *hash = (const char *)sqlite3_column_text(s, 1);
  if (!src || !hash) return 0;
  fat_sha256_hex(src, (size_t)sqlite3_column_bytes(s, SOURCE_COL), hex);
  return !strcmp(hex, hash);
}

/* 1 when the source of row S carries today's layout of fat_fwd_kv_params. */
#define KV_ABI_MARKER "#define FAT_ABI_KV_VERSION " ABI_STR(FAT_ABI_KV_VERSION)
static int kv_abi_of(sqlite3_stmt *s) {
  const char *src = (const char *)sqlite3_column_text(s, SOURCE_COL);
  return src && strstr(src, KV_ABI_MARKER) != NULL;
}

/* 1 when the source of row S carries today's layout of fat_fwd_fp8_params
 * (an e4m3 variant's last argument, an fp8 K/V cache's third:
 * templates/fat_abi_fp8.h). */
#define FP8_ABI_MARKER "#define FAT_ABI_FP8_VERSION " ABI_STR(FAT_ABI_FP8_VERSION)
static int fp8_abi_of(sqlite3_stmt *s) {
  const char *src = (const char *)sqlite3_column_text(s, SOURCE_COL);
  return src && strstr(src, FP8_ABI_MARKER) != NULL;
}

/* The variant a selection names, and its launch geometry. */
static void put_variant(selection *out, const char *name, const char *hash, const char *entry,
                        const char *family, const char *params, int block_m, int threads, int smem_bytes) {
  snprintf(out->choice.variant, sizeof out->choice.variant, "%s", name);
  snprintf(out->choice.source_hash, sizeof out->choice.source_hash, "%s", hash);
  snprintf(out->entry, sizeof out->entry, "%s", entry);
  snprintf(out->family, sizeof out->family, "%s", family);
  snprintf(out->params, sizeof out->params, "%s", params);
  out->block_m = block_m;
  out->threads = threads;
  out->smem_bytes = smem_bytes;
}

/* What a selection launches with from its variant's schedule (fat_kernel_schedule). */
static void put_schedule(selection *out, const fat_kernel_desc *sched) {
  out->block_q = sched->block_q;
  out->dq_mode = sched->dq_mode;
  out->pack_gqa = sched->pack_gqa;
  out->splits = sched->splits;
  out->paged = sched->paged;
  out->block_n = sched->block_n;
  out->tma_slab = sched->tma_slab;
  out->persistent = sched->persistent;
}

/* ---- the candidates of a lookup key, read once ---------------------------- */

/* One row of LOOKUP_SQL: a stored winner (or deterministic pick) of a
 * lookup key, its bucket, and whether its source hashes to its hash (what
 * the selection asks of the row it takes; reading it once spares hashing a
 * large source on every new shape). */
struct sel_row {
  char *name, *source_hash, *entry, *family, *params, *lengths;
  int block_m, threads, smem_bytes;
  int seqlen_q, seqlen_k, group, window_left, window_right, page_size;
  int batch_heads_k;  /* the problem's batch x K/V heads */
  double tuned_ms;
  int source_ok;
  int kv_abi;  /* its source carries today's FAT_ABI_KV_VERSION line (a variant that takes
                  fat_fwd_kv_params is served only then) */
  int fp8_abi; /* ... and FAT_ABI_FP8_VERSION's (a variant of fp8 K and V -- e4m3, an fp8
                  K/V cache -- is served only then) */
};

static char *dup_text(sqlite3_stmt *s, int col) {
  const char *t = (const char *)sqlite3_column_text(s, col);
  return strdup(t ? t : "");
}

void fat_rt_free_rows(sel_rows *r) {
  while (r) {
    sel_rows *next = r->next;
    for (int i = 0; i < r->n; i++) {
      sel_row *w = &r->rows[i];
      free(w->name), free(w->source_hash), free(w->entry), free(w->family), free(w->params),
          free(w->lengths);
    }
    free(r->rows);
    free(r);
    r = next;
  }
}

/* The GPU a database's winners were tuned on: this one, or (the second
 * level of the lookup) another of its architecture. */
typedef struct tuned_gpu {
  char name[256];
  int sm_count;
} tuned_gpu;

/* GPUs of this architecture whose tables serve it when nothing was tuned on
 * it: the same compute capability (its cubins run here; sm_90a's on every
 * 9.0 part) and an SM count within this factor of ours either way (an H100
 * SXM's 132 or PCIe's 114 for the H200's 132; an A30's 56 is not an
 * A100's 108), so that the tiles the tuner chose for the other's
 * parallelism still fill this one. */
#define SAME_ARCH_SM_RATIO 1.25

/* Database I's nearest other GPU of this architecture by SM count (ties to
 * the name that sorts first) with a winner stored, into *OUT; 0 when there
 * is one, 1 when not (or the database cannot be read: the next level
 * serves). Asked once a context, the answer kept in c->sibling_*. */
static int sibling_gpu(fat_context *c, int i, tuned_gpu *out) {
  if (c->sibling_known[i]) {
    *out = (tuned_gpu){.sm_count = c->sibling_sms[i]};
    snprintf(out->name, sizeof out->name, "%s", c->sibling_name[i]);
    return c->sibling_sms[i] > 0 ? 0 : 1;
  }
  c->sibling_known[i] = 1;
  c->sibling_sms[i] = 0;
  c->sibling_name[i][0] = 0;
  sqlite3 *h = fat_rt_open_ro(c, i);
  sqlite3_stmt *s = NULL;
  if (!h) return 1;
  const double lo = c->sm_count / SAME_ARCH_SM_RATIO, hi = c->sm_count * SAME_ARCH_SM_RATIO;
  if (sqlite3_prepare_v2(h,
                         "SELECT g.name, g.sm_count FROM gpus g WHERE g.cc_major = ?1 AND g.cc_minor = ?2"
                         " AND g.sm_count >= ?3 AND g.sm_count <= ?4"
                         " AND NOT (g.name = ?5 AND g.sm_count = ?6)"
                         " AND EXISTS (SELECT 1 FROM winners w WHERE w.gpu_id = g.id)"
                         " ORDER BY abs(g.sm_count - ?6), g.name LIMIT 1",
                         -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_int(s, 1, c->cc_major);
    sqlite3_bind_int(s, 2, c->cc_minor);
    sqlite3_bind_double(s, 3, lo);
    sqlite3_bind_double(s, 4, hi);
    sqlite3_bind_text(s, 5, c->gpu_name, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 6, c->sm_count);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) {
      snprintf(c->sibling_name[i], sizeof c->sibling_name[i], "%s", (const char *)sqlite3_column_text(s, 0));
      c->sibling_sms[i] = sqlite3_column_int(s, 1);
    }
  } else {
    logf_(c, "%s: no GPUs to read (%s): no table of another GPU", c->dbs[i], sqlite3_errmsg(h));
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return sibling_gpu(c, i, out);
}

/* Database I's candidates for (KEY, DTYPE, MASK, HEAD_DIM) tuned on GPU, in
 * LOOKUP_SQL's order: read from the database on the lookup key's first
 * call in this context, from memory after (a decoding loop whose seqlen_k
 * grows by one a step asks no database). A context therefore sees a table
 * as it was at the key's first call; a winner tuned later is served to a
 * context opened after it. A database that cannot be read (no such file)
 * has no candidates, remembered too; an SQL failure or a lack of memory is
 * an error, not remembered. */
static fat_status lookup_rows(fat_context *c, int i, const tuned_gpu *gpu, sel_key key, int dtype,
                              int mask, int head_dim, const sel_rows **out) {
  const int deterministic = key.direction == FAT_BWD && key.deterministic;
  for (const sel_rows *r = c->rows; r; r = r->next)
    if (r->db == i && r->direction == key.direction && r->deterministic == deterministic &&
        r->dtype == dtype && r->mask == mask && r->head_dim == head_dim && r->sm_count == gpu->sm_count &&
        !strcmp(r->gpu_name, gpu->name)) {
      *out = r;
      return FAT_OK;
    }
  sel_rows *r = calloc(1, sizeof *r);
  if (!r) return fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
  r->db = i, r->direction = key.direction, r->deterministic = deterministic;
  r->dtype = dtype, r->mask = mask, r->head_dim = head_dim, r->sm_count = gpu->sm_count;
  snprintf(r->gpu_name, sizeof r->gpu_name, "%s", gpu->name);
  sqlite3 *h = fat_rt_open_ro(c, i);
  sqlite3_stmt *s = NULL;
  fat_status st = FAT_OK;
  if (h) {
    const int version = schema_version(h);
    const char *sql = LOOKUP_SQL[deterministic][version >= PAGE_SCHEMA_VERSION      ? 3
                                                : version >= LENGTHS_SCHEMA_VERSION ? 2
                                                : version >= WINDOW_SCHEMA_VERSION];
    if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) != SQLITE_OK) {
      /* A database without fatune's tables has nothing for us. */
      st = fail(c, FAT_ERR_DATABASE, "%s: not a fatune database: %s", c->dbs[i], sqlite3_errmsg(h));
      goto out;
    }
    sqlite3_bind_text(s, 1, gpu->name, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, c->cc_major);
    sqlite3_bind_int(s, 3, c->cc_minor);
    sqlite3_bind_int(s, 4, gpu->sm_count);
    sqlite3_bind_text(s, 5, fat_dtype_name((fat_dtype)dtype), -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, fat_mask_name((fat_mask)mask), -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 7, head_dim);
    sqlite3_bind_text(s, 8, fat_direction_name((fat_direction)key.direction), -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 9, ABI_MARKER, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 10, key.direction == FAT_BWD ? BWD_ABI_MARKER : ABI_MARKER, -1, SQLITE_STATIC);
    int step, cap = 0;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
      if (r->n == cap) {
        const int more = cap ? 2 * cap : 16;
        sel_row *grown = realloc(r->rows, (size_t)more * sizeof *grown);
        if (!grown) {
          st = fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
          goto out;
        }
        r->rows = grown, cap = more;
      }
      sel_row *w = &r->rows[r->n];
      *w = (sel_row){.block_m = sqlite3_column_int(s, 5), .threads = sqlite3_column_int(s, 6),
                     .smem_bytes = sqlite3_column_int(s, 7), .seqlen_q = sqlite3_column_int(s, 8),
                     .tuned_ms = sqlite3_column_double(s, 9), .seqlen_k = sqlite3_column_int(s, 10),
                     .group = sqlite3_column_int(s, 11), .window_left = sqlite3_column_int(s, 12),
                     .window_right = sqlite3_column_int(s, 13), .page_size = sqlite3_column_int(s, 15),
                     .batch_heads_k = sqlite3_column_int(s, 17),
                     .source_ok = source_matches(s), .kv_abi = kv_abi_of(s),
                     .fp8_abi = fp8_abi_of(s)};
      w->name = dup_text(s, 0), w->source_hash = dup_text(s, 1), w->entry = dup_text(s, 2);
      w->family = dup_text(s, 3), w->params = dup_text(s, 4), w->lengths = dup_text(s, 14);
      r->n++;
      if (!w->name || !w->source_hash || !w->entry || !w->family || !w->params || !w->lengths) {
        st = fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
      }
    }
    if (step != SQLITE_DONE) st = fail(c, FAT_ERR_DATABASE, "%s: %s", c->dbs[i], sqlite3_errmsg(h));
  }
out:
  sqlite3_finalize(s);
  sqlite3_close(h);
  if (st) {
    fat_rt_free_rows(r);
    return st;
  }
  r->next = c->rows;
  c->rows = r;
  c->stats.rows_read++;
  *out = r;
  return FAT_OK;
}

/* Looks for a winner of (KEY, dtype, mask, head_dim) on this GPU in
 * database I; *FOUND = 1 with OUT filled (nearest bucket; ties go to the
 * larger). A winner whose source does not hash to its source_hash is
 * passed over, and PASSED_OVER (CAP bytes) says so when it is still "". */
static fat_status find_winner(fat_context *c, int i, const tuned_gpu *gpu, sel_key key, int dtype,
                              int mask, int head_dim, bucket call, selection *out, int *found,
                              char *passed_over, size_t cap) {
  const sel_rows *rows = NULL;
  double best = INFINITY, best_parallel = INFINITY;
  int best_above = 1;
  bucket best_bucket = {.seqlen_q = -1};
  *found = 0;
  fat_status st = lookup_rows(c, i, gpu, key, dtype, mask, head_dim, &rows);
  if (st) return st;
  bucket last = {.seqlen_q = -1, .seqlen_k = -1, .group = -1};
  for (int j = 0; j < rows->n; j++) {
    const sel_row *w = &rows->rows[j];
    bucket b = {.seqlen_q = w->seqlen_q, .seqlen_k = w->seqlen_k, .group = w->group,
                .window_left = w->window_left, .window_right = w->window_right,
                .page_size = w->page_size};
    /* A paged problem's winner read pages: it serves paged calls only, and
     * they only such winners. */
    if ((b.page_size > 0) != (call.page_size > 0)) continue;
    if (b.seqlen_q < 1 || b.seqlen_k < 1 || b.group < 1) continue; /* the schema forbids these */
    b.mean = b.seqlen_q;
    if (profile_of(w->lengths, &b)) continue;
    b.parallel = parallel_of(b.seqlen_q, w->batch_heads_k, 1, w->lengths);
    /* A profile's winner ran on a packed batch: it serves packed calls only. */
    if (b.sequences && !call.sequences) continue;
    if (same_bucket(b, last)) continue; /* an older winner (a slower timing) of the bucket */
    last = b;
    const double d = bucket_distance(b, call), dp = parallel_distance(b, call);
    const int above = parallel_above(b, call);
    if (d > best) continue;
    /* Another batch of the bucket taken so far: one at or below the call's
     * parallelism before one above it, then the nearer (a tie to the
     * larger, the later row). */
    if (*found && same_key(b, best_bucket) &&
        (above > best_above || (above == best_above && dp > best_parallel)))
      continue;
    if (w->smem_bytes > c->smem_optin) continue; /* cannot run here (should not happen on its own GPU) */
    fat_kernel_desc sched;
    char why[256];
    if (fat_kernel_schedule(&sched, (fat_direction)key.direction, w->family, w->params, why, sizeof why)) {
      logf_(c, "%s: %s: skipped", c->dbs[i], why);
      continue;
    }
    if (key.deterministic && !fat_dq_deterministic(sched.dq_mode)) continue;
    if (!family_serves(key, w->family)) continue;
    if (key.no_workspace && fat_fwd_needs_workspace(sched.splits, sched.persistent)) continue;
    if (key.no_tma && sched.kind == FAT_KERNEL_FUSED_TMA) continue;
    /* A variant that takes fat_fwd_kv_params (fat_fwd_takes_kv: it reads
     * pages, its launch chooses its splits, or it reads an fp8 K/V cache),
     * built against another layout of it, would read the wrong fields. */
    if ((sched.paged || (key.direction == FAT_FWD && sched.splits == 0) ||
         fat_dtype_is_kv8((fat_dtype)dtype)) && !w->kv_abi)
      continue;
    /* A variant of fp8 K and V built against another layout of
     * fat_fwd_fp8_params would read the wrong descale factors. */
    if (fat_dtype_kv_fp8((fat_dtype)dtype) && !w->fp8_abi) {
      logf_(c, "%s: variant %s: its source does not carry today's %s; passed over", c->dbs[i],
            w->name, FP8_ABI_MARKER);
      continue;
    }
    /* A family with a longest seqlen_q (the decoding family's tiles are for
     * short query sides) serves calls of that kind only, however near their
     * bucket; fat_kernel_schedule found its row. */
    const fat_family *fam = fat_family_find(w->family, (fat_direction)key.direction);
    if (fam->max_seqlen_q > 0 && call.seqlen_q > fam->max_seqlen_q) continue;
    if (!w->source_ok) {
      if (!passed_over[0] &&
          snprintf(passed_over, cap, "%s: variant %s: its source does not hash to its "
                   "source_hash; passed over", c->dbs[i], w->name) < 0)
        passed_over[0] = 0;
      logf_(c, "%s: variant %s: its source does not hash to its source_hash; passed over",
            c->dbs[i], w->name);
      continue;
    }
    best = d, best_parallel = dp, best_above = above, best_bucket = b;
    memset(out, 0, sizeof *out);
    put_schedule(out, &sched);
    put_variant(out, w->name, w->source_hash, w->entry, w->family, w->params, w->block_m, w->threads,
                w->smem_bytes);
    out->choice.bucket_seqlen = b.seqlen_q;
    out->choice.bucket_seqlen_k = b.seqlen_k;
    out->choice.bucket_group = b.group;
    out->choice.bucket_window_left = b.window_left;
    out->choice.bucket_window_right = b.window_right;
    out->choice.bucket_page_size = b.page_size;
    out->choice.tuned_ms = w->tuned_ms;
    out->choice.origin = i == 0 ? FAT_ORIGIN_USER_DB : FAT_ORIGIN_TABLES;
    out->choice.match = same_key(b, call) ? FAT_MATCH_EXACT : FAT_MATCH_NEAREST;
    snprintf(out->choice.db_path, sizeof out->choice.db_path, "%s", c->dbs[i]);
    out->db_index = i;
    out->distance = d;
    *found = 1;
  }
  return FAT_OK;
}

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

/* The one selection function: which variant serves (dtype, mask, head dim,
 * seqlen_q) on this context's GPU, or why none does. */
fat_status fat_rt_select_variant(fat_context *c, sel_key key, const fat_attn_args *a,
                                 selection *out) {
  fat_status st = key.direction == FAT_BWD ? fat_rt_check_bwd_problem(c, a) : fat_rt_check_problem(c, a);
  if (st) return st;
  memset(out, 0, sizeof *out);
  if (c->cc_major < MIN_CC_MAJOR)
    return fail(c, FAT_ERR_UNSUPPORTED,
                "%s has compute capability %d.%d; fatune's kernels need %d.0 or newer", c->gpu_name,
                c->cc_major, c->cc_minor, MIN_CC_MAJOR);
  /* Never an attempt to compile sm_90a code for another architecture. */
  if (a->dtype == FAT_ATTN_E4M3 && (c->cc_major != E4M3_CC_MAJOR || c->cc_minor != E4M3_CC_MINOR))
    return fail(c, FAT_ERR_UNSUPPORTED,
                "dtype e4m3: its kernels are Hopper's (sm_90a, compute capability %d.%d); %s is %s "
                "(compute capability %d.%d)", E4M3_CC_MAJOR, E4M3_CC_MINOR, c->gpu_name, c->arch,
                c->cc_major, c->cc_minor);
  /* Never an attempt to compile an fp8 K/V cache's kernels for an
   * architecture without e4m3 conversions (NVRTC would refuse them). */
  if (fat_dtype_is_kv8((fat_dtype)a->dtype) &&
      c->cc_major * 10 + c->cc_minor < KV8_MIN_CC)
    return fail(c, FAT_ERR_UNSUPPORTED,
                "dtype %s: its kernels need compute capability %d.%d or newer (sm_%d's e4m3 "
                "conversions); %s is %s (compute capability %d.%d)",
                fat_dtype_name((fat_dtype)a->dtype), KV8_MIN_CC / 10, KV8_MIN_CC % 10, KV8_MIN_CC,
                c->gpu_name, c->arch, c->cc_major, c->cc_minor);
  const int tdim = fat_rt_template_head_dim(key.direction, a->dtype, a->head_dim);
  /* The masks whose winners serve the call: its own, and for a causal
   * forward with one query (fat_rt_causal_is_none) no mask's first, then
   * causal's (the tables tuned before this rule hold causal decoding
   * winners only, for some dtypes); the default is the first's. */
  const int as_none = key.direction == FAT_FWD && fat_rt_causal_is_none(a);
  const int masks[2] = {as_none ? FAT_ATTN_MASK_NONE : a->mask, a->mask};
  const int n_masks = as_none ? 2 : 1;
  const fat_default_variant *def = fat_rt_find_default(key, a->dtype, masks[0], tdim);
  if (!def) return fat_rt_unsupported(c, a);
  if ((st = fat_rt_check_padded(c, a, tdim))) return st;
  /* Within a level an exact bucket anywhere (the user's database first)
   * beats a nearest one; among nearest ones the nearest, the earlier
   * database on a tie. Level 0, this GPU's winners; level 1, where no
   * database has one for the key, those of another GPU of its architecture
   * and a similar SM count (sibling_gpu), origin FAT_ORIGIN_SAME_ARCH; then
   * the built-in default. */
  char passed_over[sizeof out->passed_over] = "";
  const bucket call = call_bucket(a, key_window_left(a), key_window_right(a));
  for (int level = 0; level < 2 && !out->choice.variant[0]; level++) {
    selection nearest;
    int have_nearest = 0, exact = 0;
    tuned_gpu from = {.sm_count = 0};
    for (int i = 0; i < c->n_dbs && !exact; i++) {
      tuned_gpu gpu = {.sm_count = c->sm_count};
      if (level == 0)
        snprintf(gpu.name, sizeof gpu.name, "%s", c->gpu_name);
      else if (sibling_gpu(c, i, &gpu))
        continue;
      for (int m = 0; m < n_masks && !exact; m++) {
        int found = 0;
        if ((st = find_winner(c, i, &gpu, key, a->dtype, masks[m], tdim, call, out, &found, passed_over,
                              sizeof passed_over)))
          return st;
        out->mask = masks[m];
        if (found && out->choice.match == FAT_MATCH_EXACT) {
          from = gpu;
          exact = 1;
          break;
        }
        /* A decoding-shaped call takes no nearest winner of a bucket of
         * longer queries than the decoding family's (a prefill bucket):
         * its kernel's grid, a block per query tile, leaves the SMs idle
         * as mma80's default would (on the H100 the nearest bf16 winner,
         * wgmma90's of seqlen_q 512, took 1.49 ms where the tuned split
         * took 0.07 at batch 1, 32/8 heads, 32768 keys, one query): the
         * decoding default serves instead. */
        if (found && key.decoding && out->choice.bucket_seqlen > fat_family_find("splitkv", FAT_FWD)->max_seqlen_q) {
          char why[sizeof passed_over], earlier[sizeof passed_over];
          snprintf(why, sizeof why, "passed over the nearest winner %.120s: tuned for seqlen_q %d",
                   out->choice.variant, out->choice.bucket_seqlen);
          memcpy(earlier, passed_over, sizeof earlier);
          const char *parts[] = {why, earlier};
          join_notes(passed_over, sizeof passed_over, parts, 2);
          found = 0;
        }
        if (found && (!have_nearest || out->distance < nearest.distance)) {
          nearest = *out;
          have_nearest = 1;
          from = gpu;
        }
        memset(out, 0, sizeof *out);
      }
    }
    if (!out->choice.variant[0] && have_nearest) *out = nearest;
    if (level == 1 && out->choice.variant[0]) {
      out->choice.origin = FAT_ORIGIN_SAME_ARCH;
      char why[sizeof passed_over];
      snprintf(why, sizeof why,
               "tuned on %.80s (%d SMs), of this GPU's architecture: nothing is tuned on %.80s", from.name,
               from.sm_count, c->gpu_name);
      char earlier[sizeof passed_over];
      memcpy(earlier, passed_over, sizeof earlier);
      const char *parts[] = {why, earlier};
      join_notes(passed_over, sizeof passed_over, parts, 2);
    }
  }
  /* The mask of the variant that serves: a winner's, else the default's
   * (no mask's for a causal call with one query). */
  const int served_mask = out->choice.variant[0] ? out->mask : masks[0];
  if (served_mask != (int)a->mask) {
    char earlier[sizeof passed_over];
    memcpy(earlier, passed_over, sizeof earlier);
    const char *parts[] = {"causal with one query sees every key (bottom-right): served as mask none",
                           earlier};
    join_notes(passed_over, sizeof passed_over, parts, 2);
  }
  memcpy(out->passed_over, passed_over, sizeof passed_over);
  out->direction = key.direction;
  out->dtype = a->dtype;
  out->mask = served_mask;
  out->head_dim = tdim;
  if (out->choice.variant[0]) return FAT_OK;
  if (c->no_builtin)
    return fail(c, FAT_ERR_UNSUPPORTED,
                "no tuned %s%s winner for %s %s head_dim %d on %s and the built-in default is "
                "disabled", key.deterministic ? "deterministic " : "",
                fat_direction_name((fat_direction)key.direction),
                fat_dtype_name((fat_dtype)a->dtype), fat_mask_name((fat_mask)a->mask), a->head_dim,
                c->gpu_name);
  put_variant(out, def->name, def->hash, def->entry, def->family, def->params, def->block_m, def->threads,
              def->smem_bytes);
  fat_kernel_desc sched;
  char why[256];
  if (fat_kernel_schedule(&sched, (fat_direction)key.direction, def->family, def->params, why, sizeof why))
    return fail(c, FAT_ERR_UNSUPPORTED, "built-in default %s: %s", def->name, why);
  put_schedule(out, &sched);
  out->choice.origin = FAT_ORIGIN_BUILTIN;
  out->choice.match = FAT_MATCH_DEFAULT;
  out->def = def;
  out->db_index = -1;
  /* Which default and why, where the 16-bit dtypes have two: the note
   * names no count of this shape's, so that the steps of a decoding loop
   * share one record. */
  if (key.decoding && decoding_family(def)) {
    char why_default[sizeof out->passed_over], earlier[sizeof out->passed_over];
    snprintf(why_default, sizeof why_default,
             "decoding-shaped: nothing tuned, so the %s family's built-in default, whose launch "
             "splits the keys to fill the %d SMs (mma80's would leave most idle)", def->family,
             c->sm_count);
    memcpy(earlier, out->passed_over, sizeof earlier);
    const char *parts[] = {why_default, earlier};
    join_notes(out->passed_over, sizeof out->passed_over, parts, 2);
  }
  if (def->smem_bytes > c->smem_optin)
    return fail(c, FAT_ERR_UNSUPPORTED, "%s needs %d bytes of shared memory; %s allows %d",
                def->name, def->smem_bytes, c->gpu_name, c->smem_optin);
  return FAT_OK;
}

/* ---- the selection cache ------------------------------------------------- */

/* What a launch needs once per call is a memo's hash, a few comparisons
 * and the record of the answer; a shape the memo does not hold (each step
 * of a decoding loop) costs a selection from the candidates in memory and
 * a walk of the records held, and allocates only when its answer is new. */

static sel_shape_key shape_key(sel_key k, const fat_attn_args *a) {
  return (sel_shape_key){.direction = k.direction, .deterministic = k.deterministic,
                         .no_workspace = k.no_workspace, .no_tma = k.no_tma, .features = k.features,
                         .paged = k.paged, .decoding = k.decoding, .page_size = a->block_table ? a->page_size : 0,
                         .dtype = a->dtype, .mask = a->mask, .head_dim = a->head_dim,
                         .seqlen_q = a->seqlen_q, .seqlen_k = a->seqlen_k,
                         .group = a->heads / a->heads_k, .window_left = key_window_left(a),
                         .window_right = key_window_right(a), .varlen_mean = key_varlen_mean(a),
                         .parallel = call_parallel(a)};
}

static int same_shape(const sel_shape_key *x, const sel_shape_key *y) {
  return x->direction == y->direction && x->deterministic == y->deterministic &&
         x->no_workspace == y->no_workspace && x->no_tma == y->no_tma && x->features == y->features &&
         x->dtype == y->dtype && x->mask == y->mask && x->head_dim == y->head_dim &&
         x->seqlen_q == y->seqlen_q && x->seqlen_k == y->seqlen_k && x->group == y->group &&
         x->window_left == y->window_left && x->window_right == y->window_right &&
         x->varlen_mean == y->varlen_mean && x->paged == y->paged && x->page_size == y->page_size &&
         x->decoding == y->decoding && x->parallel == y->parallel;
}

/* The memo's set of SHAPE. */
static sel_shape *memo_set(fat_context *c, const sel_shape_key *s) {
  uint32_t h = 2166136261u; /* FNV-1a over the key */
  const int key[] = {s->direction, s->deterministic, s->no_workspace, s->no_tma, s->features,
                     s->dtype,     s->mask,          s->head_dim,     s->seqlen_q, s->seqlen_k,
                     s->group,     s->window_left,   s->window_right, s->varlen_mean,
                     s->paged,     s->page_size,     s->decoding,     s->parallel};
  for (size_t i = 0; i < sizeof key / sizeof key[0]; i++) {
    h ^= (uint32_t)key[i];
    h *= 16777619u;
  }
  return c->memo[h % SEL_MEMO_SETS];
}

/* What serves SHAPE, from the memo (rec NULL when it does not hold it).
 * The lock is held. */
static sel_served memo_find(fat_context *c, const sel_shape_key *shape) {
  sel_shape *set = memo_set(c, shape);
  for (int w = 0; w < SEL_MEMO_WAYS; w++)
    if (set[w].rec && same_shape(&set[w].key, shape)) {
      set[w].used = ++c->memo_clock;
      return (sel_served){.rec = set[w].rec, .match = set[w].match};
    }
  return (sel_served){.rec = NULL};
}

/* Keeps SHAPE, served by SERVED, in its set: in an empty way, else in that
 * of the shape called least recently. The lock is held. */
static void memo_put(fat_context *c, const sel_shape_key *shape, sel_served served) {
  sel_shape *set = memo_set(c, shape), *way = &set[0];
  for (int w = 0; w < SEL_MEMO_WAYS && way->rec; w++)
    if (!set[w].rec || set[w].used < way->used) way = &set[w];
  if (way->rec) c->stats.evictions++;
  *way = (sel_shape){.key = *shape, .rec = served.rec, .match = served.match,
                     .used = ++c->memo_clock};
  c->stats.shapes++;
}

/* Whether two records launch the same kernel alike and report the same
 * choice (but for match, the shape's). */
static int same_record(const sel_record *x, const sel_record *y) {
  const fat_choice *p = &x->choice, *q = &y->choice;
  return x->k == y->k && x->direction == y->direction && x->dtype == y->dtype && x->mask == y->mask &&
         x->block_m == y->block_m && x->threads == y->threads && x->smem_bytes == y->smem_bytes &&
         x->block_q == y->block_q && x->dq_mode == y->dq_mode && x->pack_gqa == y->pack_gqa &&
         x->splits == y->splits && x->paged == y->paged && x->block_n == y->block_n &&
         x->tma_slab == y->tma_slab && x->persistent == y->persistent &&
         x->template_dim == y->template_dim && !strcmp(p->variant, q->variant) &&
         !strcmp(p->source_hash, q->source_hash) && p->origin == q->origin &&
         p->bucket_seqlen == q->bucket_seqlen && p->bucket_seqlen_k == q->bucket_seqlen_k &&
         p->bucket_group == q->bucket_group && p->bucket_window_left == q->bucket_window_left &&
         p->bucket_window_right == q->bucket_window_right && p->tuned_ms == q->tuned_ms &&
         p->loaded == q->loaded && p->load == q->load && !strcmp(p->db_path, q->db_path) &&
         !strcmp(p->note, q->note);
}

/* The record of SEL's answer for KEY with its loaded kernel K: one held
 * when an earlier shape had the same answer, else a new one. The lock is
 * held. */
static fat_status record_of(fat_context *c, sel_key key, const selection *sel, const kernel *k,
                            const sel_record **out) {
  sel_record r = {.direction = key.direction, .dtype = sel->dtype, .mask = sel->mask, .choice = sel->choice,
                  .block_m = sel->block_m, .threads = sel->threads, .smem_bytes = sel->smem_bytes,
                  .block_q = sel->block_q, .dq_mode = sel->dq_mode,
                  .pack_gqa = sel->pack_gqa, .splits = sel->splits, .paged = sel->paged,
                  .block_n = sel->block_n, .tma_slab = sel->tma_slab, .persistent = sel->persistent,
                  .template_dim = sel->head_dim, .k = k};
  r.choice.loaded = 1;
  r.choice.load = k->load;
  r.choice.match = FAT_MATCH_EXACT; /* not read: the shape's own is */
  /* Why this variant and not the tuned one, then why no stored cubin. */
  const char *notes[] = {
      key.no_workspace ? "the tuned variant needs more workspace than given "
                         "(fat_attention_fwd_workspace); this one needs none" : "",
      key.no_tma ? "tensor maps cannot describe these tensors (FATUNE_LOG=1 says why); "
                   "this variant loads without" : "",
      sel->passed_over, k->note};
  join_notes(r.choice.note, sizeof r.choice.note, notes, sizeof notes / sizeof notes[0]);
  for (const sel_record *held = c->records; held; held = held->next)
    if (same_record(held, &r)) {
      *out = held;
      return FAT_OK;
    }
  sel_record *made = malloc(sizeof *made);
  if (!made) return fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
  *made = r;
  made->next = c->records;
  c->records = made;
  c->stats.records++;
  *out = made;
  return FAT_OK;
}

/* What serves (KEY, A)'s problem, selecting and loading on the first call
 * for its answer. The lock is held. */
fat_status fat_rt_lookup_entry(fat_context *c, sel_key key, const fat_attn_args *a,
                               sel_served *out) {
  fat_status st = FAT_OK;
  const sel_shape_key shape = shape_key(key, a);
  if ((*out = memo_find(c, &shape)).rec) return FAT_OK;
  /* A shape not met lately: select from the candidates in memory, load
   * the module on its first use, take the record of the answer. */
  selection sel;
  const kernel *k = NULL;
  CUresult r = c->cu.cuCtxSetCurrent(c->pctx);
  if (r != CUDA_SUCCESS) {
    char t[256];
    return fail(c, FAT_ERR_CUDA, "cuCtxSetCurrent: %s", fat_cuda_result_text(&c->cu, r, t, sizeof t));
  }
  if ((st = fat_rt_select_variant(c, key, a, &sel)) || (st = fat_rt_ensure_kernel(c, &sel, &k)) ||
      (st = record_of(c, key, &sel, k, &out->rec)))
    return st;
  out->match = sel.choice.match;
  memo_put(c, &shape, *out);
  logf_(c, "%s%s %s %s d%d seqlen %d x %d -> %s (%s, %s, bucket %d, %s)%s%s",
        key.deterministic ? "deterministic " : "", fat_direction_name((fat_direction)key.direction),
        fat_dtype_name((fat_dtype)a->dtype), fat_mask_name((fat_mask)a->mask), a->head_dim,
        a->seqlen_q, a->seqlen_k, sel.choice.variant, fat_origin_name(sel.choice.origin),
        fat_match_name(sel.choice.match), sel.choice.bucket_seqlen, fat_load_name(k->load),
        out->rec->choice.note[0] ? ": " : "", out->rec->choice.note);
  return FAT_OK;
}

/* ---- the "supported?" query ---------------------------------------------- */

/* fat_attention_select and fat_attention_bwd_select. */
static fat_status select_public(fat_context *c, sel_key key, const fat_attn_args *a,
                                fat_choice *out) {
  selection sel;
  sel_shape_key shape = {.direction = 0};
  sel_served e = {.rec = NULL};
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = !out ? fail(c, FAT_ERR_INVALID_ARGUMENT, "out is NULL")
                  : CHECK_SIZE(c, fat_choice, out, "FAT_CHOICE_INIT");
  if (!st) st = key.direction == FAT_BWD ? fat_rt_check_bwd_problem(c, a) : fat_rt_check_problem(c, a);
  /* A problem this context has launched is answered as its launch was:
   * that is what the next launch runs, and answering from memory spares
   * the database read and the cubin's hash (milliseconds for a large
   * cubin). From the memo while it holds the shape; after, and for any
   * problem whose variant's module is loaded, from the record a launch
   * takes (the memo keeps the shape for that launch). */
  if (!st) {
    shape = shape_key(key, a);
    e = memo_find(c, &shape);
  }
  if (!st && !e.rec && !(st = fat_rt_select_variant(c, key, a, &sel))) {
    const kernel *k = c->offline ? NULL : fat_rt_loaded_kernel(c, sel.choice.source_hash);
    if (k) {
      if (!(st = record_of(c, key, &sel, k, &e.rec))) {
        e.match = sel.choice.match;
        memo_put(c, &shape, e);
      }
    } else {
      /* How a launch would get the module: the same integrity check. */
      void *cubin = NULL;
      char cubin_note[sizeof sel.choice.note];
      fat_rt_find_cubin(c, &sel, &cubin, cubin_note, sizeof cubin_note);
      const char *notes[] = {sel.passed_over, cubin_note};
      join_notes(sel.choice.note, sizeof sel.choice.note, notes, 2);
      sel.choice.load = cubin ? FAT_LOAD_STORED_CUBIN : FAT_LOAD_COMPILED;
      sel.choice.loaded = 0;
      free(cubin);
      put_choice(out, &sel.choice);
    }
  }
  if (!st && e.rec) put_served(out, e);
  pthread_mutex_unlock(&c->lock);
  return st;
}

fat_status fat_attention_select(fat_context *c, const fat_attn_args *a, fat_choice *out) {
  return select_public(c, fat_rt_fwd_key(c, a), a, out);
}

fat_status fat_attention_bwd_select(fat_context *c, const fat_attn_bwd_args *a, fat_choice *out) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = fat_rt_check_bwd_size(c, a);
  pthread_mutex_unlock(&c->lock);
  if (st) return st;
  const sel_key key = {.direction = FAT_BWD, .deterministic = a && a->deterministic,
                       .features = a && fat_rt_bwd_features(&a->fwd)};
  return select_public(c, key, a ? &a->fwd : NULL, out);
}
