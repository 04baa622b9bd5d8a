/* SPDX-License-Identifier: MIT */
/* The runtime's one selection function, on databases built here, through
 * offline contexts (no GPU needed): lookup order (user database, then
 * tables, then the built-in default; an exact bucket anywhere before a
 * nearest one), nearest-bucket choice by seqlen ratio with ties to the
 * larger bucket, a decoding bucket tuned at several batches by the
 * nearest parallelism within it, local windows by the ratio of the keys a query sees, the
 * GPU key, a user database of schema version 1 read as it is, refusals
 * with their exact messages, and that the built-in defaults are what the
 * generator produces today. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "db.h"
#include "fatune.h"
#include "fat_abi.h"
#include "fat_abi_bwd.h"
#include "gen.h"
#include "sha256.h"
#include "problems.h"
#include "check.h"

#define H200 "NVIDIA H200"
#define H200_SMS 132
#define PAGED_TABLE_AT 0x1000  /* a paged call's block table: only its shape is read */

static fat_gpu_info gpu_of(const char *name, int sms) {
  fat_gpu_info g = {0};
  snprintf(g.name, sizeof g.name, "%s", name);
  g.cc_major = 9, g.cc_minor = 0, g.sm_count = sms, g.driver_version = 13000;
  g.nvrtc_major = 13, g.nvrtc_minor = 0;
  g.smem_per_block_optin = 232448;
  return g;
}

/* The fat_fwd_params layout the stand-in sources say they were built
 * against: today's, unless a test stores a winner of an older build. */
static int stand_in_abi = FAT_ABI_VERSION;
/* ... and the backward's per-row launch (0: a source from before its line). */
static int stand_in_bwd_abi = FAT_ABI_BWD_VERSION;
/* The window {left, right} of the local problems stored (0, 0 for the others). */
static int stand_in_window[2];
/* When set, the problems stored are this variable-length profile. */
static const char *stand_in_lengths;
/* The family of the variants stored. */
static const char *stand_in_family = "mma80";
/* The batch of the problems stored (0: the tuner's default). */
static int stand_in_batch;

/* Stores variant VNAME of DIR with PARAMS, checked (PASSED or not) and
 * timed on (dtype, mask, head dim, seqlen bucket) on the GPU NAME/SMS, in
 * the database at PATH; the winner of its problem when WINNER. */
static void put_variant_key(const char *path, const char *name, int sms, fat_direction dir,
                            const char *vname, const char *params, fat_dtype dt, fat_mask mk,
                            int hd, int seqlen, int seqlen_k, int group, double ms, int passed,
                            int winner) {
  char err[1024], source[256], bwd_line[64] = "";
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_gpu_info g = gpu_of(name, sms);
  fat_problem p;
  fat_tune_problem(dt, mk, hd, seqlen, seqlen_k, group, stand_in_batch, &p);
  p.direction = dir;
  if (mk == FAT_MASK_LOCAL) p.window_left = stand_in_window[0], p.window_right = stand_in_window[1];
  if (stand_in_lengths) {
    REQUIRE_EXIT(fat_lengths_parse(stand_in_lengths, &p.lengths, err, sizeof err) == 0);
    fat_lengths_apply(&p);
  }
  fat_variant v = {0};
  /* Carries the ABI lines, as every generated source does. */
  if (dir == FAT_BWD && stand_in_bwd_abi)
    snprintf(bwd_line, sizeof bwd_line, "#define FAT_ABI_BWD_VERSION %d\n", stand_in_bwd_abi);
  snprintf(source, sizeof source, "// stand-in source of %s\n#define FAT_ABI_VERSION %d\n%s", vname,
           stand_in_abi, bwd_line);
  v.name = (char *)vname, v.family = (char *)stand_in_family, v.source = source, v.params = (char *)params;
  v.entry = dir == FAT_FWD ? "fat_fwd_mma80" : "fat_bwd_mma80";
  fat_sha256_hex(source, strlen(source), v.hash);
  v.direction = dir, v.dtype = dt, v.mask = mk, v.head_dim = hd;
  v.block_m = 64, v.threads = 128, v.smem_bytes = 40960;
  fat_check c = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256, .rel_l2 = 0.002,
                 .max_abs = 0.01, .lse_max_abs = 1e-5, .nonfinite = 0, .passed = passed,
                 .reason = "ok"};
  if (!passed) snprintf(c.reason, sizeof c.reason, "dQ rel_l2 1.0e+00 > 2.0e-02");
  fat_timing t = {.reps = 20, .median_ms = ms, .min_ms = ms * 0.9, .max_ms = ms * 1.2,
                  .p10_ms = ms * 0.95, .p90_ms = ms * 1.05, .tflops = 1.0 / ms,
                  .sm_clock_mhz = 1755};
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE_EXIT(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE_EXIT(fat_db_put_variant(db, &v, &vid) == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  if (winner) REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
  fat_db_close(db);
}

static void put_variant(const char *path, const char *name, int sms, fat_direction dir,
                        const char *vname, const char *params, fat_dtype dt, fat_mask mk, int hd,
                        int seqlen, double ms, int passed, int winner) {
  put_variant_key(path, name, sms, dir, vname, params, dt, mk, hd, seqlen, seqlen, 1, ms, passed,
                  winner);
}

/* A forward winner. */
static void put_winner(const char *path, const char *name, int sms, const char *vname,
                       fat_dtype dt, fat_mask mk, int hd, int seqlen, double ms) {
  put_variant(path, name, sms, FAT_FWD, vname, "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4", dt, mk,
              hd, seqlen, ms, 1, 1);
}

static fat_attn_args problem(fat_attn_dtype dt, fat_attn_mask mk, int hd, int seqlen) {
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = 1, a.heads = 16, a.heads_k = 16, a.seqlen_q = a.seqlen_k = seqlen;
  a.head_dim = hd, a.dtype = dt, a.mask = mk;
  return a;
}

/* A forward winner of the local mask with window (LEFT, RIGHT). */
static void put_local_winner(const char *path, const char *vname, int seqlen, int left, int right,
                             double ms) {
  stand_in_window[0] = left, stand_in_window[1] = right;
  put_winner(path, H200, H200_SMS, vname, FAT_FP16, FAT_MASK_LOCAL, 64, seqlen, ms);
  stand_in_window[0] = stand_in_window[1] = 0;
}

/* A database at PATH as a fatune of schema VERSION (1 or 2) left it
 * (tests/data/schema_v<VERSION>.sql), with one winner: VNAME for fp16 none
 * d64 at 4096 on the H200. */
static void make_old_db(const char *path, int version, const char *vname) {
  char schema_path[4096], rows[2048], *schema = NULL, *msg = NULL;
  const char *src = getenv("FATUNE_SOURCE_DIR");
  REQUIRE_EXIT(src);
  snprintf(schema_path, sizeof schema_path, "%s/tests/data/schema_v%d.sql", src, version);
  FILE *f = fopen(schema_path, "rb");
  REQUIRE_EXIT(f && (schema = calloc(1, 1 << 20)) && fread(schema, 1, (1 << 20) - 1, f) > 0);
  fclose(f);
  /* The source its hash names: the runtime passes over any other. */
  char source[64], hash[65];
  snprintf(source, sizeof source, "#define FAT_ABI_VERSION %d", FAT_ABI_VERSION);
  fat_sha256_hex(source, strlen(source), hash);
  snprintf(rows, sizeof rows,
           "INSERT INTO gpus VALUES (1, '%s', 9, 0, %d, 13000, 13, 0, 1, 232448, 1, 1, 1, '');"
           "INSERT INTO variants VALUES (1, '%s', 'mma80', 'fwd', 'fp16', 'none', 64,"
           " 'BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4', 'fat_fwd_mma80', 64, 128, 40960,"
           " '%s', '%s', 0, '');"
           "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads, heads_k,"
           " seqlen_q, seqlen_k) VALUES (1, 'fwd', 'fp16', 'none', 64, 4, 32, 32, 4096, 4096);"
           "INSERT INTO checks VALUES (1, 1, 1, 1, 1, 2, 256, 256, 0.002, 0.01, 1e-5, 0, 1, 'ok',"
           " 0, '');"
           "INSERT INTO timings VALUES (1, 1, 1, 1, 20, 1.0, 0.9, 1.2, 0.95, 1.05, 1, 1755, 0, '');"
           "INSERT INTO winners VALUES (1, 1, 1, 1, '');",
           H200, H200_SMS, vname, hash, source);
  sqlite3 *h = NULL;
  REQUIRE_EXIT(sqlite3_open(path, &h) == SQLITE_OK);
  int rc = sqlite3_exec(h, schema, NULL, NULL, &msg);
  if (rc == SQLITE_OK) rc = sqlite3_exec(h, rows, NULL, NULL, &msg);
  if (rc) fprintf(stderr, "schema-%d database: %s\n", version, msg);
  REQUIRE_EXIT(rc == SQLITE_OK);
  sqlite3_close(h);
  free(schema);
}

static fat_context *offline(const char *user, const char *const *tables, int n, int sms,
                            int no_builtin) {
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  o.user_db = user, o.tables = tables, o.n_tables = n, o.no_builtin = no_builtin;
  o.gpu_name = H200, o.gpu_cc_major = 9, o.gpu_cc_minor = 0, o.gpu_sm_count = sms;
  fat_status st = fat_context_open(&c, &o);
  if (st) fprintf(stderr, "open: %s\n", fat_context_error(c));
  REQUIRE_EXIT(st == FAT_OK);
  return c;
}

/* Paths that hold no database to read: a FIFO (open() would wait for a
 * writer forever; the alarm fails the test instead of hanging it), a
 * device, a folder, and a zero-byte user database (a tuner killed between
 * creating the file and committing its schema). Each is passed over like
 * a missing file: the next level serves. */
static void paths_without_a_database(const char *dir, const char *tables) {
  char fifo[256], empty[256];
  snprintf(fifo, sizeof fifo, "%s/fifo.db", dir);
  snprintf(empty, sizeof empty, "%s/empty.db", dir);
  REQUIRE_EXIT(mkfifo(fifo, 0600) == 0);
  FILE *f = fopen(empty, "wb");
  REQUIRE_EXIT(f);
  fclose(f);
  const fat_attn_args a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 2048);
  const char *const user_dbs[] = {fifo, "/dev/null", dir, empty};
  alarm(60);
  for (size_t i = 0; i < sizeof user_dbs / sizeof user_dbs[0]; i++) {
    const char *const with_tables[] = {tables};
    fat_context *c = offline(user_dbs[i], with_tables, 1, H200_SMS, 0);
    fat_choice ch = FAT_CHOICE_INIT;
    CHECK_WHY(fat_attention_select(c, &a, &ch) == FAT_OK, "user db %s: %s", user_dbs[i],
              fat_context_error(c));
    CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.t2048");
    CHECK_INT(ch.origin, FAT_ORIGIN_TABLES);
    fat_context_close(c);
    /* ... and as a table: the built-in default. */
    const char *const as_table[] = {user_dbs[i]};
    c = offline("", as_table, 1, H200_SMS, 0);
    CHECK_WHY(fat_attention_select(c, &a, &ch) == FAT_OK, "table %s: %s", user_dbs[i],
              fat_context_error(c));
    CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
    fat_context_close(c);
  }
  alarm(0);
  /* The empty file is still empty: nothing was written to it. */
  struct stat st;
  CHECK(stat(empty, &st) == 0 && st.st_size == 0);
  unlink(fifo);
  unlink(empty);
}

/* A context reads a lookup key's candidates once: every later call of the
 * key, whatever its lengths, is answered from memory with what a fresh
 * context (which reads the database) answers -- over a sweep of prefill
 * and decoding shapes -- and a context that has read them serves new
 * shapes from them after the database is gone (a decoding loop whose
 * seqlen_k grows by one asks no database), where a context opened after
 * has only the built-in default. */
static void candidates_read_once(const char *dir) {
  char path[256], gone[256];
  snprintf(path, sizeof path, "%s/once.db", dir);
  snprintf(gone, sizeof gone, "%s/once.db.gone", dir);
  static const char *const FWD = "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4";
  put_variant_key(path, H200, H200_SMS, FAT_FWD, "fwd.once.s1k1024", FWD, FAT_FP16, FAT_MASK_CAUSAL, 128, 1,
                  1024, 4, 0.05, 1, 1);
  put_variant_key(path, H200, H200_SMS, FAT_FWD, "fwd.once.s1k32768", FWD, FAT_FP16, FAT_MASK_CAUSAL, 128, 1,
                  32768, 4, 0.3, 1, 1);
  put_variant_key(path, H200, H200_SMS, FAT_FWD, "fwd.once.s2048", FWD, FAT_FP16, FAT_MASK_CAUSAL, 128, 2048,
                  2048, 4, 1.0, 1, 1);
  put_variant_key(path, H200, H200_SMS, FAT_FWD, "fwd.once.s8192", FWD, FAT_FP16, FAT_MASK_CAUSAL, 128, 8192,
                  8192, 4, 9.0, 1, 1);
  const char *const tables[] = {path};
  fat_context *warm = offline("", tables, 1, H200_SMS, 0);
  static const int qs[] = {1, 2, 7, 16, 300, 2048, 5000, 8192, 20000};
  static const int ks[] = {1, 100, 1023, 1024, 1025, 3000, 8192, 30000, 32768, 65536, 200000};
  fat_attn_args a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_CAUSAL, 128, 1);
  a.heads = 32, a.heads_k = 8;
  int n_tables = 0;
  for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
      a.seqlen_q = qs[i], a.seqlen_k = ks[j];
      fat_choice w = FAT_CHOICE_INIT, f = FAT_CHOICE_INIT;
      fat_context *fresh = offline("", tables, 1, H200_SMS, 0);
      CHECK_INT(fat_attention_select(warm, &a, &w), FAT_OK);
      CHECK_INT(fat_attention_select(fresh, &a, &f), FAT_OK);
      fat_context_close(fresh);
      CHECK_WHY(!strcmp(w.variant, f.variant) && w.match == f.match && w.origin == f.origin &&
                    w.bucket_seqlen == f.bucket_seqlen && w.bucket_seqlen_k == f.bucket_seqlen_k &&
                    w.tuned_ms == f.tuned_ms && !strcmp(w.db_path, f.db_path),
                "q %d k %d: from memory %s (match %d, bucket %d x %d), from the database %s (match %d, "
                "bucket %d x %d)", a.seqlen_q, a.seqlen_k, w.variant, w.match, w.bucket_seqlen,
                w.bucket_seqlen_k, f.variant, f.match, f.bucket_seqlen, f.bucket_seqlen_k);
      n_tables += w.origin == FAT_ORIGIN_TABLES;
    }
  CHECK_INT(n_tables, (int)(sizeof qs / sizeof qs[0] * sizeof ks / sizeof ks[0]));
  REQUIRE_EXIT(rename(path, gone) == 0);
  fat_choice ch = FAT_CHOICE_INIT;
  for (int k = 4096; k < 4096 + 64; k++) { /* a decoding loop, one key more a step */
    a.seqlen_q = 1, a.seqlen_k = k;
    CHECK_INT(fat_attention_select(warm, &a, &ch), FAT_OK);
    CHECK_WHY(ch.origin == FAT_ORIGIN_TABLES && !strcmp(ch.variant, "fwd.once.s1k1024"),
              "seqlen_k %d with the database gone: %s (origin %d)", k, ch.variant, ch.origin);
  }
  fat_context *after = offline("", tables, 1, H200_SMS, 0);
  CHECK_INT(fat_attention_select(after, &a, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  fat_context_close(after);
  fat_context_close(warm);
}

/* A decoding bucket tuned at several batches (issue 24: the split count a
 * winner fixed was chosen for its problem's blocks, batch x K/V heads):
 * the nearest bucket by lengths first, as with one batch a bucket, then
 * within it the nearest parallelism at or below the call's, else the
 * smallest above (a grid fixed for more blocks than the call has leaves
 * SMs idle); the match is the bucket's. One context answers them all, in an order that revisits a
 * shape at another batch: its memo of shapes tells them apart. The tables
 * at DIR/parallel.db: fp16 none d128, one query, group 4 (16 query heads
 * on 4 K/V heads: parallelism 4 x batch), 4096 keys at batches 1, 4 and
 * 16, and 32768 keys at batch 1. */
static void parallelism_within_a_bucket(const char *dir) {
  char path[256];
  snprintf(path, sizeof path, "%s/parallel.db", dir);
  static const char *const FWD = "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4";
  static const struct { const char *name; int batch, seqlen_k; } TUNED[] = {
      {"fwd.par.k4096.b1", 1, 4096}, {"fwd.par.k4096.b4", 4, 4096},
      {"fwd.par.k4096.b16", 16, 4096}, {"fwd.par.k32768.b1", 1, 32768}};
  for (size_t i = 0; i < sizeof TUNED / sizeof TUNED[0]; i++) {
    stand_in_batch = TUNED[i].batch;
    put_variant_key(path, H200, H200_SMS, FAT_FWD, TUNED[i].name, FWD, FAT_FP16, FAT_MASK_NONE, 128, 1,
                    TUNED[i].seqlen_k, 4, 0.05, 1, 1);
  }
  stand_in_batch = 0;
  const char *const tables[] = {path};
  fat_context *c = offline("", tables, 1, H200_SMS, 0);
  static const struct {
    int batch, heads, heads_k, seqlen_k;
    const char *variant;
    fat_match match;
  } CALLS[] = {
      {1, 16, 4, 4096, "fwd.par.k4096.b1", FAT_MATCH_EXACT},   /* parallelism 4 */
      {4, 16, 4, 4096, "fwd.par.k4096.b4", FAT_MATCH_EXACT},   /* 16 */
      {1, 16, 4, 4096, "fwd.par.k4096.b1", FAT_MATCH_EXACT},   /* the first shape again */
      {16, 16, 4, 4096, "fwd.par.k4096.b16", FAT_MATCH_EXACT}, /* 64 */
      {2, 16, 4, 4096, "fwd.par.k4096.b1", FAT_MATCH_EXACT},   /* 8: 4 and 16 as near, the one below */
      {3, 16, 4, 4096, "fwd.par.k4096.b1", FAT_MATCH_EXACT},   /* 12: nearer 16, but 16 is above */
      {5, 16, 4, 4096, "fwd.par.k4096.b4", FAT_MATCH_EXACT},   /* 20: 16 below, nearer than 64 */
      {15, 16, 4, 4096, "fwd.par.k4096.b4", FAT_MATCH_EXACT},  /* 60: nearer 64, but 64 is above */
      {64, 16, 4, 4096, "fwd.par.k4096.b16", FAT_MATCH_EXACT}, /* 256: beyond the largest */
      {1, 32, 8, 4096, "fwd.par.k4096.b1", FAT_MATCH_EXACT},   /* 8 again, from 32/8 heads */
      {1, 16, 4, 5000, "fwd.par.k4096.b1", FAT_MATCH_NEAREST}, /* the nearer lengths, then batch */
      {16, 16, 4, 5000, "fwd.par.k4096.b16", FAT_MATCH_NEAREST},
      /* every row above the call (parallelism 1, 4/1 heads): the smallest */
      {1, 4, 1, 4096, "fwd.par.k4096.b1", FAT_MATCH_EXACT},
      /* the nearest lengths first: 30000 keys is nearer 32768's bucket,
       * whatever its one batch */
      {16, 16, 4, 30000, "fwd.par.k32768.b1", FAT_MATCH_NEAREST},
  };
  for (size_t i = 0; i < sizeof CALLS / sizeof CALLS[0]; i++) {
    fat_attn_args a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 1);
    a.batch = CALLS[i].batch, a.heads = CALLS[i].heads, a.heads_k = CALLS[i].heads_k;
    a.seqlen_k = CALLS[i].seqlen_k;
    fat_choice ch = FAT_CHOICE_INIT;
    CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
    CHECK_WHY(!strcmp(ch.variant, CALLS[i].variant) && ch.match == CALLS[i].match,
              "batch %d, %d/%d heads, %d keys: %s (match %d), expected %s (match %d)", a.batch, a.heads,
              a.heads_k, a.seqlen_k, ch.variant, ch.match, CALLS[i].variant, CALLS[i].match);
  }
  /* A call of 512 queries is no decoding call: no parallelism to weigh;
   * the nearest lengths (4096 keys) serve, their rows as near each other,
   * the tie to the later: the largest batch's (the most blocks). */
  fat_attn_args a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 512);
  a.seqlen_k = 4096, a.heads_k = 4;
  fat_choice ch = FAT_CHOICE_INIT;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  CHECK_STR(ch.variant, "fwd.par.k4096.b16");
  fat_context_close(c);
}

/* A causal forward with one query is looked up, and launched, as no mask
 * (bottom-right alignment: the query sees every key): no mask's exact
 * winner serves it before causal's exact one, causal's exact one before
 * no mask's nearest (tables tuned before the rule hold causal decoding
 * winners only), and with nothing tuned no mask's default; the note says
 * so. Two queries, and the local mask with one, are left as they are.
 * The tables at DIR/causal1.db. */
static void causal_with_one_query(const char *dir) {
  char path[256];
  snprintf(path, sizeof path, "%s/causal1.db", dir);
  const char *params = "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4";
  put_variant_key(path, H200, H200_SMS, FAT_FWD, "fwd.mma80.fp16.d128.causal.q1k4096", params, FAT_FP16,
                  FAT_MASK_CAUSAL, 128, 1, 4096, 1, 0.5, 1, 1);
  put_variant_key(path, H200, H200_SMS, FAT_FWD, "fwd.mma80.fp16.d128.none.q1k4096", params, FAT_FP16,
                  FAT_MASK_NONE, 128, 1, 4096, 1, 0.4, 1, 1);
  put_variant_key(path, H200, H200_SMS, FAT_FWD, "fwd.mma80.bf16.d128.causal.q1k4096", params, FAT_BF16,
                  FAT_MASK_CAUSAL, 128, 1, 4096, 1, 0.5, 1, 1);
  put_variant_key(path, H200, H200_SMS, FAT_FWD, "fwd.mma80.bf16.d128.none.q1k65536", params, FAT_BF16,
                  FAT_MASK_NONE, 128, 1, 65536, 1, 4.0, 1, 1);
  const char *const tables[] = {path};
  fat_context *c = offline("", tables, 1, H200_SMS, 0);
  fat_choice ch = FAT_CHOICE_INIT;
  fat_attn_args a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_CAUSAL, 128, 1);
  a.seqlen_k = 4096;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.q1k4096");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  CHECK_CONTAINS(ch.note, "causal with one query sees every key (bottom-right): served as mask none");
  /* A none call of the shape: the same winner, with no such note. */
  a.mask = FAT_ATTN_MASK_NONE;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.q1k4096");
  CHECK_WHY(!strstr(ch.note, "served as mask none"), "note: %s", ch.note);
  /* causal's exact bucket before no mask's nearest */
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1);
  a.seqlen_k = 4096;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d128.causal.q1k4096");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  CHECK_WHY(!strstr(ch.note, "served as mask none"), "note: %s", ch.note);
  a.seqlen_k = 65536; /* no mask's exact, causal's nearest */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d128.none.q1k65536");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  a.seqlen_k = 32768; /* nearest of both: no mask's (a factor 2, against 8) */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d128.none.q1k65536");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  /* Two queries: causal's alone (here its nearest). */
  a.seqlen_q = 2;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d128.causal.q1k4096");
  /* Nothing tuned (d64): no mask's default, the decoding one here (16
   * blocks of one query against 4096 keys split on 132 SMs). */
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 64, 1);
  a.seqlen_k = 4096;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.splitkv.bf16.d64.none.m64n64w4s2.g1x0");
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK_CONTAINS(ch.note, "decoding-shaped");
  CHECK_CONTAINS(ch.note, "served as mask none");
  a.seqlen_k = 1; /* one key: mma80's default, of no mask */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d64.none.m128n64w4s1");
  a.seqlen_q = 2, a.seqlen_k = 2;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d64.causal.m128n64w4s1");
  /* The local mask keeps its own, whose window bounds the keys. */
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_LOCAL, 64, 1);
  a.seqlen_k = 4096, a.window_left = 128, a.window_right = 0;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d64.local.m128n64w4s1");
  /* A paged call with one query: the paged family's default of no mask. */
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1);
  a.seqlen_k = 4096, a.block_table = (const int *)(uintptr_t)PAGED_TABLE_AT, a.page_size = 16;
  a.block_table_stride = 4096 / 16, a.num_pages = 4096 / 16;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.paged.bf16.d128.none.m64n64w4s2.g0x0");
  fat_context_close(c);
}

int main(void) {
  char dir[] = "/tmp/fatune-lookup-XXXXXX", user[256], tables[256], other[256];
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(user, sizeof user, "%s/user.db", dir);
  snprintf(tables, sizeof tables, "%s/tables.db", dir);
  snprintf(other, sizeof other, "%s/missing.db", dir);
  causal_with_one_query(dir);
  parallelism_within_a_bucket(dir);

  /* Tables: fp16 none d128 at 512 and 2048 (and 4096); bf16 causal d64 at 1024.
   * User: fp16 none d128 at 4096 only. */
  put_winner(tables, H200, H200_SMS, "fwd.mma80.fp16.d128.none.t512", FAT_FP16, FAT_MASK_NONE, 128, 512, 1.0);
  put_winner(tables, H200, H200_SMS, "fwd.mma80.fp16.d128.none.t2048", FAT_FP16, FAT_MASK_NONE, 128, 2048, 2.0);
  put_winner(tables, H200, H200_SMS, "fwd.mma80.fp16.d128.none.t4096", FAT_FP16, FAT_MASK_NONE, 128, 4096, 4.0);
  put_winner(tables, H200, H200_SMS, "fwd.mma80.bf16.d64.causal.t1024", FAT_BF16, FAT_MASK_CAUSAL, 64, 1024, 1.5);
  put_winner(user, H200, H200_SMS, "fwd.mma80.fp16.d128.none.u4096", FAT_FP16, FAT_MASK_NONE, 128, 4096, 3.0);

  const char *const both[] = {tables};
  fat_context *c = offline(user, both, 1, H200_SMS, 0);
  fat_choice ch = FAT_CHOICE_INIT;
  fat_attn_args a;

  /* The user's exact bucket beats the tables' exact bucket. */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 4096);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.u4096");
  CHECK_INT(ch.origin, FAT_ORIGIN_USER_DB);
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  CHECK_INT(ch.bucket_seqlen, 4096);
  CHECK(ch.tuned_ms == 3.0);
  CHECK_STR(ch.db_path, user);

  /* An exact bucket in the tables beats the user's nearest one. */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 2048);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.t2048");
  CHECK_INT(ch.origin, FAT_ORIGIN_TABLES);
  CHECK_INT(ch.match, FAT_MATCH_EXACT);

  /* No exact bucket anywhere: the nearest bucket of any database (a
   * user's decoding winner must not serve a long prefill because it is the
   * user's) ... */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 700);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.t512");
  CHECK_INT(ch.origin, FAT_ORIGIN_TABLES);
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  /* ... and on a tie (4096 in both) the user's. */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 3500);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.u4096");
  CHECK_INT(ch.origin, FAT_ORIGIN_USER_DB);
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  fat_context_close(c);

  /* Tables alone: nearest bucket by ratio; a tie goes to the larger bucket. */
  c = offline("", both, 1, H200_SMS, 0);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 1000); /* 512: ln 1.95, 2048: ln 2.05 */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.t512");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  CHECK_INT(ch.bucket_seqlen, 512);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 1024); /* equidistant from 512 and 2048 */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.bucket_seqlen, 2048);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 100000);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.bucket_seqlen, 4096);
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 64, 1);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d64.causal.t1024");
  /* A decoding-shaped call (one query of 32/8 heads against 32768 keys)
   * takes no nearest winner of a bucket of longer queries than the
   * decoding family's 128: the decoding default, naming what it passed
   * over. Against 256 keys (no split) the nearest serves. */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 1);
  a.heads = 32, a.heads_k = 8, a.seqlen_k = 32768;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.splitkv.fp16.d128.none.m64n64w4s2.g1x0");
  CHECK_INT(ch.match, FAT_MATCH_DEFAULT);
  CHECK_CONTAINS(ch.note, "passed over the nearest winner fwd.mma80.fp16.d128.none.t");
  CHECK_CONTAINS(ch.note, ": tuned for seqlen_q ");
  CHECK_CONTAINS(ch.note, "decoding-shaped");
  a.seqlen_k = 256;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_WHY(!strncmp(ch.variant, "fwd.mma80.fp16.d128.none.t", 26), "variant %s", ch.variant);
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);

  /* Nothing tuned for the key: the built-in default. */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_CAUSAL, 128, 4096);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.causal.m128n64w4s1");
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK_INT(ch.match, FAT_MATCH_DEFAULT);
  CHECK_INT(ch.bucket_seqlen, 0);
  CHECK_STR(ch.db_path, "");

  /* The local mask has a built-in default of its own. */
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_LOCAL, 128, 4096);
  a.window_left = 256, a.window_right = 0;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d128.local.m128n64w4s1");
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK_INT(ch.match, FAT_MATCH_DEFAULT);

  /* A head dim without a template of its own runs on the next one up: its
   * tuned winners and its default are that template's. */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 80, 1024);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d96.none.m128n64w4s1");
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 40, 1024);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d64.none.m128n64w4s1");
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 40, 1024);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d64.causal.t1024");
  CHECK_INT(ch.origin, FAT_ORIGIN_TABLES);
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 24, 1024);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d32.none.m128n64w4s1");

  /* Refusals name the bad value. */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 84, 1024);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(c), "head_dim 84 has no template (templates: 32, 64, 96, 128, 192, "
                                  "256; any multiple of 8 up to 256 runs on the next one up)");
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 264, 1024);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(c), "head_dim 264 has no template (templates: 32, 64, 96, 128, 192, "
                                  "256; any multiple of 8 up to 256 runs on the next one up)");
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 1024);
  a.heads_k = 3;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(c), "heads_k 3 does not divide heads 16");
  a = problem((fat_attn_dtype)7, FAT_ATTN_MASK_NONE, 128, 1024);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(c), "dtype 7: must be FAT_ATTN_FP16, FAT_ATTN_BF16, FAT_ATTN_E4M3, "
            "FAT_ATTN_FP16_E4M3KV or FAT_ATTN_BF16_E4M3KV");
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 0);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(c), "seqlen_q 0: must be >= 1");
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 1024);
  CHECK_INT(fat_attention_fwd(c, &a, NULL, &ch), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(c),
            "this context describes NVIDIA H200 without a device: it can select, not launch");
  CHECK_INT(fat_context_last_choice(c, &ch), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(c), "no launch has succeeded yet");
  fat_context_close(c);

  /* The GPU is part of the key, and the lookup falls back level by level:
   * another GPU of the architecture with a similar SM count (114 against
   * the H200's 132, within 1.25x either way: an H100 PCIe) is served the
   * H200's winners as "same architecture", the note naming the GPU they
   * were tuned on; one with 100 SMs (132 / 100 > 1.25) or of another
   * compute capability gets the built-in default. */
  c = offline(user, both, 1, 114, 0);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 4096);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_SAME_ARCH);
  CHECK_STR(fat_origin_name(ch.origin), "same architecture");
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.u4096");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  CHECK_STR(ch.db_path, user);
  CHECK_WHY(strstr(ch.note, "tuned on NVIDIA H200 (132 SMs), of this GPU's architecture") != NULL, "note: %s",
            ch.note);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 700); /* nearest, of either database */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_SAME_ARCH);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.t512");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  fat_context_close(c);
  c = offline(user, both, 1, 100, 0);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 4096);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  fat_context_close(c);
  {
    fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
    o.user_db = user, o.tables = both, o.n_tables = 1;
    o.gpu_name = "NVIDIA A100-SXM4-80GB", o.gpu_cc_major = 8, o.gpu_cc_minor = 0, o.gpu_sm_count = 132;
    REQUIRE_EXIT(fat_context_open(&c, &o) == FAT_OK);
    CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
    CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
    fat_context_close(c);
  }
  /* A winner tuned on this GPU anywhere (here only at 2048) serves before
   * any other GPU's: level by level, not bucket by bucket. */
  put_winner(tables, H200 " NVL", H200_SMS, "fwd.mma80.fp16.d128.none.nvl2048", FAT_FP16, FAT_MASK_NONE, 128,
             2048, 2.5);
  {
    fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
    o.user_db = user, o.tables = both, o.n_tables = 1;
    o.gpu_name = H200 " NVL", o.gpu_cc_major = 9, o.gpu_cc_minor = 0, o.gpu_sm_count = H200_SMS;
    REQUIRE_EXIT(fat_context_open(&c, &o) == FAT_OK);
    CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK); /* 4096: the H200 has it exactly */
    CHECK_INT(ch.origin, FAT_ORIGIN_TABLES);
    CHECK_STR(ch.variant, "fwd.mma80.fp16.d128.none.nvl2048");
    CHECK_INT(ch.match, FAT_MATCH_NEAREST);
    a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 64, 1024); /* nothing of its own: the H200's */
    CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
    CHECK_INT(ch.origin, FAT_ORIGIN_SAME_ARCH);
    CHECK_STR(ch.variant, "fwd.mma80.bf16.d64.causal.t1024");
    fat_context_close(c);
  }

  /* Without the default, a key nothing was tuned for is refused. A missing
   * database file is no error (a user who never tuned has none). */
  const char *const missing[] = {other};
  c = offline("", missing, 1, H200_SMS, 1);
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_NONE, 256, 512);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(c), "no tuned fwd winner for bf16 none head_dim 256 on NVIDIA H200 "
                                  "and the built-in default is disabled");
  fat_context_close(c);

  /* The built-in defaults are the generator's defaults of today (of the
   * family whose row says so; the materialising baseline is never launched). */
  char err[1024];
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  REQUIRE_EXIT(g);
  fat_gen_query q = {.direction = FAT_FWD, .arch = "sm_80"};
  fat_variant *v = NULL;
  size_t n = 0;
  REQUIRE_EXIT(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == 0);
  c = offline("", missing, 1, H200_SMS, 0);
  int n_defaults = 0;
  for (size_t i = 0; i < n; i++) {
    const fat_family *fam = fat_family_find(v[i].family, FAT_FWD);
    if (v[i].is_default && fam && fam->builtin_default) {
      a = problem((fat_attn_dtype)v[i].dtype, (fat_attn_mask)v[i].mask, v[i].head_dim, 512);
      if (fam->max_seqlen_q) { /* the decoding family's serves decoding-shaped calls */
        a.seqlen_q = 2, a.seqlen_k = 65536; /* (causal with one query is served as no mask) */
        a.window_left = a.window_right = -1; /* a local call's window: no bound */
        CHECK_WHY(v[i].head_dim <= 128, "%s: a decoding default above d128", v[i].name);
      }
      if (fam->paged) { /* the paged family's default serves paged calls, and only those */
        a.block_table = (const int *)(uintptr_t)PAGED_TABLE_AT, a.page_size = 16;
        a.block_table_stride = 512 / 16, a.num_pages = 512 / 16;
      }
      CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
      CHECK_STR(ch.variant, v[i].name);
      CHECK_STR(ch.source_hash, v[i].hash);
      n_defaults++;
    }
    fat_variant_free(&v[i]);
  }
  free(v);
  fat_gen_close(g);
  fat_context_close(c);
  /* 6 head dims x 2 dtypes x 3 masks, contiguous and paged, and the
   * decoding ones of 4 head dims (up to d128) */
  CHECK_INT(n_defaults, 96);
  /* Every forward key has a backward default too, and a deterministic one;
   * the backward has no d32 template, so d32 runs on d64. */
  c = offline("", missing, 1, H200_SMS, 0);
  int n_bwd = 0;
  for (int hd = 0; hd < 6; hd++)
    for (int dt = 0; dt < 2; dt++)
      for (int mk = 0; mk < 3; mk++)
        for (int det = 0; det < 2; det++) {
          static const int dims[6] = {32, 64, 96, 128, 192, 256};
          char want_dim[16];
          snprintf(want_dim, sizeof want_dim, ".d%d.", dims[hd] == 32 ? 64 : dims[hd]);
          fat_attn_bwd_args bb = FAT_ATTN_BWD_ARGS_INIT;
          bb.fwd = problem((fat_attn_dtype)dt, (fat_attn_mask)mk, dims[hd], 512);
          bb.deterministic = det;
          n_bwd += fat_attention_bwd_select(c, &bb, &ch) == FAT_OK &&
                   ch.origin == FAT_ORIGIN_BUILTIN && !strncmp(ch.variant, "bwd.", 4) &&
                   strstr(ch.variant, want_dim) && strstr(ch.variant, fat_mask_name((fat_mask)mk)) &&
                   (!det || strstr(ch.variant, ".separate"));
        }
  CHECK_INT(n_bwd, 72);
  fat_context_close(c);
  int dims[8];
  CHECK_INT(fat_supported_head_dims(dims, 8), 6);
  CHECK_INT(dims[0], 32);
  CHECK_INT(dims[1], 64);
  CHECK_INT(dims[5], 256);

  /* The backward: its winners are its own (the forward's key never sees
   * them), and the deterministic mode takes the fastest passed variant
   * whose dQ mode is deterministic (separate or ordered), winner or not. */
  static const char *const ATOMIC = "BLOCK_M=64 BLOCK_N=128 DQ_MODE=atomic WARPS=8";
  static const char *const SEPARATE = "BLOCK_M=64 BLOCK_N=64 DQ_MODE=separate WARPS=4";
  static const char *const ORDERED = "BLOCK_M=64 BLOCK_N=128 DQ_MODE=ordered STAGES=2";
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d128.causal.atomic", ATOMIC, FAT_BF16,
              FAT_MASK_CAUSAL, 128, 2048, 2.0, 1, 1);
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d128.causal.sep-slow", SEPARATE,
              FAT_BF16, FAT_MASK_CAUSAL, 128, 2048, 3.5, 1, 0);
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d128.causal.sep-fast", SEPARATE,
              FAT_BF16, FAT_MASK_CAUSAL, 128, 2048, 3.0, 1, 0);
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d128.causal.sep-failed", SEPARATE,
              FAT_BF16, FAT_MASK_CAUSAL, 128, 2048, 2.5, 0, 0);
  /* Without a mask: ws90's ordered variants beside mma80's. At 2048 the
   * atomic winner, a separate variant, an ordered one faster than it and a
   * faster ordered one that failed a check; at 8192 an ordered winner. */
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d128.none.atomic", ATOMIC, FAT_BF16,
              FAT_MASK_NONE, 128, 2048, 2.0, 1, 1);
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d128.none.sep", SEPARATE, FAT_BF16,
              FAT_MASK_NONE, 128, 2048, 3.0, 1, 0);
  stand_in_family = "ws90";
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.ws90.bf16.d128.none.ordered", ORDERED, FAT_BF16,
              FAT_MASK_NONE, 128, 2048, 2.4, 1, 0);
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.ws90.bf16.d128.none.ordered-failed", ORDERED,
              FAT_BF16, FAT_MASK_NONE, 128, 2048, 2.2, 0, 0);
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.ws90.bf16.d128.none.ordered-wins", ORDERED, FAT_BF16,
              FAT_MASK_NONE, 128, 8192, 1.9, 1, 1);
  stand_in_family = "mma80";
  put_variant(tables, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d128.none.atomic", ATOMIC, FAT_BF16,
              FAT_MASK_NONE, 128, 8192, 2.0, 1, 0);
  c = offline("", both, 1, H200_SMS, 0);
  fat_attn_bwd_args b = FAT_ATTN_BWD_ARGS_INIT;
  b.fwd = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 2048);
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80.bf16.d128.causal.atomic");
  CHECK_INT(ch.origin, FAT_ORIGIN_TABLES);
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  b.deterministic = 1;
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80.bf16.d128.causal.sep-fast");
  CHECK(ch.tuned_ms == 3.0);
  b.fwd.seqlen_q = b.fwd.seqlen_k = 9000;
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80.bf16.d128.causal.sep-fast");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  /* An ordered variant is deterministic: the fastest passed one serves a
   * deterministic call ahead of a slower separate one; a call without
   * `deterministic` still gets the fastest overall, the winner of its
   * bucket, which may be ordered too. */
  fat_attn_bwd_args bn = FAT_ATTN_BWD_ARGS_INIT;
  bn.fwd = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_NONE, 128, 2048);
  bn.deterministic = 1;
  CHECK_INT(fat_attention_bwd_select(c, &bn, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.ws90.bf16.d128.none.ordered");
  CHECK(ch.tuned_ms == 2.4);
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  bn.deterministic = 0;
  CHECK_INT(fat_attention_bwd_select(c, &bn, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80.bf16.d128.none.atomic");
  bn.fwd.seqlen_q = bn.fwd.seqlen_k = 8192;
  CHECK_INT(fat_attention_bwd_select(c, &bn, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.ws90.bf16.d128.none.ordered-wins");
  bn.deterministic = 1;
  CHECK_INT(fat_attention_bwd_select(c, &bn, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.ws90.bf16.d128.none.ordered-wins");
  /* The forward of the same key has no winner: its default. */
  CHECK_INT(fat_attention_select(c, &b.fwd, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK(!strncmp(ch.variant, "fwd.", 4));
  /* A soft-capped or packed backward: mma80f's default (variable lengths
   * and the soft-cap), never the dense families' winner of its bucket. */
  b.fwd.seqlen_q = b.fwd.seqlen_k = 2048;
  b.deterministic = 0;
  b.fwd.softcap = 30.f;
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80f.bf16.d128.causal.m64n64w8.atomic");
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  b.deterministic = 1;
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80f.bf16.d128.causal.m64n64w8.separate");
  b.deterministic = 0, b.fwd.softcap = 0.f, b.fwd.seqused_k = (const int *)(uintptr_t)0x1000;
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80f.bf16.d128.causal.m64n64w8.atomic");
  b.fwd.seqused_k = NULL; /* dense again: the tuned winner */
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80.bf16.d128.causal.atomic");
  /* Nothing tuned: the backward's defaults, the deterministic one without atomics. */
  b.fwd = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 96, 101);
  b.deterministic = 0;
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK_STR(ch.variant, "bwd.mma80.fp16.d96.none.m64n64w4.atomic");
  b.deterministic = 1;
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK(strstr(ch.variant, ".separate") != NULL);
  /* D: 16 x 101 floats = 6464 bytes, rounded up to 256; the fp32 dQ
   * accumulator, rows of 128; 16 x ceil(101 / 64) semaphores. The same
   * for both modes: a deterministic call may be served an ordered variant,
   * which needs the last two, and any call may. */
  size_t ws = 0;
  CHECK_INT(fat_attention_bwd_workspace(c, &b, &ws), FAT_OK);
  CHECK_INT((long long)ws, 6656 + 16 * 101 * 128 * 4 + 16 * 2 * 4);
  b.deterministic = 0;
  CHECK_INT(fat_attention_bwd_workspace(c, &b, &ws), FAT_OK);
  CHECK_INT((long long)ws, 6656 + 16 * 101 * 128 * 4 + 16 * 2 * 4);
  CHECK_INT(fat_attention_bwd(c, &b, NULL, &ch), FAT_ERR_INVALID_ARGUMENT);
  b.fwd.head_dim = 80; /* on d96 */
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80.fp16.d96.none.m64n64w4.atomic");
  CHECK_INT(fat_attention_bwd_workspace(c, &b, &ws), FAT_OK);
  CHECK_INT((long long)ws, 6656 + 16 * 101 * 128 * 4 + 16 * 2 * 4); /* FAT_BWD_ACCUM_WIDTH(80): 128 */
  b.fwd.head_dim = 84;
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(c), "head_dim 84 has no template (templates: 32, 64, 96, 128, 192, "
                                  "256; any multiple of 8 up to 256 runs on the next one up)");
  CHECK_INT(fat_attention_bwd_select(c, NULL, &ch), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(c), "args is NULL");
  fat_context_close(c);

  /* A backward winner stored before the per-row kernels' launch had its
   * line (FAT_ABI_BWD_VERSION) would be launched with a grid it does not
   * cover: passed over, the built-in default serves. */
  char old_bwd[256];
  snprintf(old_bwd, sizeof old_bwd, "%s/old-bwd-abi.db", dir);
  stand_in_bwd_abi = 0;
  put_variant(old_bwd, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d64.none.old", ATOMIC, FAT_BF16,
              FAT_MASK_NONE, 64, 1024, 1.0, 1, 1);
  stand_in_bwd_abi = FAT_ABI_BWD_VERSION;
  put_variant(old_bwd, H200, H200_SMS, FAT_BWD, "bwd.mma80.bf16.d64.causal.today", ATOMIC, FAT_BF16,
              FAT_MASK_CAUSAL, 64, 1024, 1.0, 1, 1);
  c = offline(old_bwd, missing, 1, H200_SMS, 0);  /* nor the installed tables */
  b = (fat_attn_bwd_args)FAT_ATTN_BWD_ARGS_INIT;
  b.fwd = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_NONE, 64, 1024);
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  b.fwd = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 64, 1024);
  CHECK_INT(fat_attention_bwd_select(c, &b, &ch), FAT_OK);
  CHECK_STR(ch.variant, "bwd.mma80.bf16.d64.causal.today");
  fat_context_close(c);

  /* Keys beyond seqlen_q: decoding shapes (few queries, many keys) and
   * grouped-query heads are buckets of their own, nearest by both lengths
   * and the group. */
  static const char *const FWD = "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4";
  put_variant_key(tables, H200, H200_SMS, FAT_FWD, "fwd.decode.s16k65536g4", FWD, FAT_BF16,
                  FAT_MASK_CAUSAL, 128, 16, 65536, 4, 0.5, 1, 1);
  put_variant_key(tables, H200, H200_SMS, FAT_FWD, "fwd.square.s1024g4", FWD, FAT_BF16,
                  FAT_MASK_CAUSAL, 128, 1024, 1024, 4, 0.7, 1, 1);
  put_variant_key(tables, H200, H200_SMS, FAT_FWD, "fwd.square.s1024g1", FWD, FAT_BF16,
                  FAT_MASK_CAUSAL, 128, 1024, 1024, 1, 0.6, 1, 1);
  c = offline("", both, 1, H200_SMS, 0);
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 16);
  a.seqlen_k = 65536, a.heads = 32, a.heads_k = 8;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.decode.s16k65536g4");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  CHECK_INT(ch.bucket_seqlen_k, 65536);
  CHECK_INT(ch.bucket_group, 4);
  a.seqlen_q = 8, a.seqlen_k = 50000; /* nearer the decode bucket than the square ones */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.decode.s16k65536g4");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  a.seqlen_q = a.seqlen_k = 1024; /* group 4: its own bucket, not group 1's */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.square.s1024g4");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  a.heads_k = 32;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.square.s1024g1");
  a.heads_k = 16; /* group 2: as near group 1 as group 4; ties go to the larger */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.square.s1024g4");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  fat_context_close(c);

  /* A winner stored by a build with another fat_fwd_params layout (its
   * source says FAT_ABI_VERSION 1) is never launched with today's block:
   * passed over, the built-in default serves. */
  char old_abi[256];
  snprintf(old_abi, sizeof old_abi, "%s/old-abi.db", dir);
  stand_in_abi = FAT_ABI_VERSION - 1;
  put_winner(old_abi, H200, H200_SMS, "fwd.mma80.fp16.d256.causal.old", FAT_FP16, FAT_MASK_CAUSAL,
             256, 2048, 1.0);
  stand_in_abi = FAT_ABI_VERSION;
  const char *const no_tables[] = {other};  /* a missing file: not the installed tables */
  c = offline(old_abi, no_tables, 1, H200_SMS, 0);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_CAUSAL, 256, 2048);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.match, FAT_MATCH_DEFAULT);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  fat_context_close(c);
  /* The same winner with today's line serves. */
  put_winner(old_abi, H200, H200_SMS, "fwd.mma80.fp16.d256.causal.new", FAT_FP16, FAT_MASK_CAUSAL,
             256, 2048, 0.9);
  c = offline(old_abi, no_tables, 1, H200_SMS, 0);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d256.causal.new");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  fat_context_close(c);

  /* Local windows: a window is part of the bucket. The nearest is the
   * nearest by lengths and by the keys one query sees (L + R + 1, an
   * unbounded side as seqlen_k, at most seqlen_k), both by ratio. */
  char local_db[256];
  snprintf(local_db, sizeof local_db, "%s/local.db", dir);
  put_local_winner(local_db, "fwd.local.s4096.w256", 4096, 256, 0, 0.3);
  put_local_winner(local_db, "fwd.local.s4096.w1024", 4096, 1024, 0, 0.6);
  put_local_winner(local_db, "fwd.local.s16384.w1024", 16384, 1024, 0, 2.0);
  const char *const local_tables[] = {local_db};
  c = offline("", local_tables, 1, H200_SMS, 0);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_LOCAL, 64, 4096);
  a.window_left = 256, a.window_right = 0;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s4096.w256");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  CHECK_INT(ch.origin, FAT_ORIGIN_TABLES);
  a.window_left = 1024;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s4096.w1024");
  CHECK_INT(ch.match, FAT_MATCH_EXACT);
  a.window_left = 300; /* 301 keys: ln(301/257) = 0.16 from w256, ln(1025/301) = 1.23 from w1024 */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s4096.w256");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  CHECK_INT(ch.bucket_window_left, 256); /* the window that serves, not the call's */
  CHECK_INT(ch.bucket_window_right, 0);
  a.window_left = 700; /* 701 keys: ln(701/257) = 1.00, ln(1025/701) = 0.38 */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s4096.w1024");
  a.window_left = 128, a.window_right = 128; /* 257 keys, on both sides: not exact, no nearer */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s4096.w256");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  a.window_left = -1, a.window_right = 0; /* unbounded left: all 4096 keys, nearest 1025 */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s4096.w1024");
  CHECK_INT(ch.bucket_window_left, 1024);
  a.window_left = 100000; /* wider than the sequence: 4096 keys as well */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s4096.w1024");
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_LOCAL, 64, 12000); /* lengths decide: 16384 */
  a.window_left = 1024, a.window_right = 0;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s16384.w1024");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  CHECK_INT(ch.bucket_seqlen, 16384);
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_LOCAL, 64, 8192); /* both: 1.39 + 0 beats 1.39 + 1.38 */
  a.window_left = 256, a.window_right = 0;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.local.s4096.w256");
  /* Other masks of the key never see a local winner, whatever their
   * (unread) window fields hold; a local call of another key gets its
   * family default. */
  a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 64, 4096);
  a.window_left = 256, a.window_right = 0;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK_STR(ch.variant, "fwd.mma80.fp16.d64.none.m128n64w4s1");
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_LOCAL, 64, 4096);
  a.window_left = 256, a.window_right = 0;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK_STR(ch.variant, "fwd.mma80.bf16.d64.local.m128n64w4s1");
  CHECK_INT(ch.bucket_window_left, 0); /* the default has no bucket */
  CHECK_INT(ch.bucket_window_right, 0);
  fat_context_close(c);

  /* A user database a fatune of schema 1 or 2 wrote serves its winners as
   * it is (the runtime reads, never upgrades it): a schema-1 one has no
   * local winner, and neither has a profile (a packed call gets the
   * nearest dense winner). */
  for (int version = 1; version <= 2; version++) {
    char old_db[256], vname[64];
    snprintf(old_db, sizeof old_db, "%s/schema%d.db", dir, version);
    snprintf(vname, sizeof vname, "fwd.mma80.fp16.d64.none.v%d", version);
    make_old_db(old_db, version, vname);
    c = offline(old_db, no_tables, 1, H200_SMS, 0);
    a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 64, 4096);
    CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
    CHECK_STR(ch.variant, vname);
    CHECK_INT(ch.match, FAT_MATCH_EXACT);
    CHECK_INT(ch.origin, FAT_ORIGIN_USER_DB);
    int cu_old[2] = {0};
    a.cu_seqlens_q = a.cu_seqlens_k = cu_old, a.total_q = a.total_k = 4 * 4096;
    CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
    CHECK_STR(ch.variant, vname);
    CHECK_INT(ch.match, FAT_MATCH_NEAREST);
    a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_LOCAL, 64, 4096);
    a.window_left = 256, a.window_right = 0;
    CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
    CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
    fat_context_close(c);
    sqlite3 *oh = NULL;
    sqlite3_stmt *os = NULL;
    REQUIRE_EXIT(sqlite3_open_v2(old_db, &oh, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
                 sqlite3_prepare_v2(oh, "PRAGMA user_version", -1, &os, NULL) == SQLITE_OK &&
                 sqlite3_step(os) == SQLITE_ROW);
    CHECK_INT(sqlite3_column_int(os, 0), version);
    sqlite3_finalize(os);
    sqlite3_close(oh);
  }

  /* Variable-length profiles: a profile's winner serves packed calls only,
   * the nearest by longest and mean length (here 538, 3976, 2092: longest
   * 3976, mean 2202); a packed call far from every profile gets the dense
   * winner nearest by both. */
  char vl_db[256];
  snprintf(vl_db, sizeof vl_db, "%s/varlen.db", dir);
  put_winner(vl_db, H200, H200_SMS, "fwd.dense.s1024", FAT_BF16, FAT_MASK_CAUSAL, 128, 1024, 0.3);
  put_winner(vl_db, H200, H200_SMS, "fwd.dense.s4096", FAT_BF16, FAT_MASK_CAUSAL, 128, 4096, 1.0);
  stand_in_lengths = "538,3976,2092";
  put_winner(vl_db, H200, H200_SMS, "fwd.varlen.p3", FAT_BF16, FAT_MASK_CAUSAL, 128, 3976, 0.5);
  stand_in_lengths = NULL;
  c = offline(vl_db, no_tables, 1, H200_SMS, 0);
  a = problem(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 3976); /* dense: never the profile */
  a.batch = 3;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.dense.s4096");
  int cu[4] = {0};                  /* the runtime reads only that it is set */
  a.cu_seqlens_q = a.cu_seqlens_k = cu;
  a.total_q = a.total_k = 538 + 3976 + 2092;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.varlen.p3");
  CHECK_INT(ch.match, FAT_MATCH_EXACT); /* same sequences, longest and mean step */
  CHECK_INT(ch.bucket_seqlen, 3976);
  a.total_q = a.total_k = 3 * 1500;     /* another mean: still the nearest */
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.varlen.p3");
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  a.seqlen_q = a.seqlen_k = 1000;       /* short sequences, mean 300: the dense s1024 */
  a.batch = 8, a.total_q = a.total_k = 8 * 300;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, "fwd.dense.s1024");
  fat_context_close(c);

  /* Only a family the family table lets win is served: the materialising
   * baseline's exact bucket and that of a family it does not name (a
   * --templates folder's) are passed over for the nearest fused winner. */
  char fam_db[256];
  snprintf(fam_db, sizeof fam_db, "%s/families.db", dir);
  put_winner(fam_db, H200, H200_SMS, "fwd.mma80.s4096", FAT_FP16, FAT_MASK_NONE, 64, 4096, 1.0);
  stand_in_family = FAT_FAMILY_MATERIALIZE;
  put_winner(fam_db, H200, H200_SMS, "fwd.materialize.s1024", FAT_FP16, FAT_MASK_NONE, 64, 1024, 0.1);
  stand_in_family = "naive";
  put_winner(fam_db, H200, H200_SMS, "fwd.naive.s2048", FAT_FP16, FAT_MASK_NONE, 64, 2048, 0.1);
  stand_in_family = "mma80";
  c = offline(fam_db, no_tables, 1, H200_SMS, 0);
  for (int seqlen = 1024; seqlen <= 2048; seqlen *= 2) {
    a = problem(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 64, seqlen);
    CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
    CHECK_STR(ch.variant, "fwd.mma80.s4096");
    CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  }
  fat_context_close(c);

  paths_without_a_database(dir, tables);
  candidates_read_once(dir);

  /* One message per code. */
  CHECK_STR(fat_strerror(FAT_OK), "success");
  CHECK_STR(fat_strerror(FAT_ERR_UNSUPPORTED), "unsupported problem");
  CHECK_STR(fat_strerror(FAT_ERR_NO_NVRTC), "NVRTC unavailable");
  CHECK_STR(fat_strerror((fat_status)99), "unknown status");

  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_summary("test_runtime_lookup");
}
