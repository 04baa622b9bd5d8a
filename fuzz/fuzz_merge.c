/* SPDX-License-Identifier: MIT */
/* libFuzzer target for `fatune merge` (fat_tables_merge): another machine's
 * database is untrusted input. The input is either a database file itself
 * (it starts with SQLite's header: byte-level damage) or SQL text run, as a
 * hand editing the file would, on a copy of a good fatune database with one
 * checked, timed winner of today's generator: views, triggers, generated
 * columns, edited rows, dropped tables. Whatever the database, merge must
 * not crash or hang, must refuse with a message or merge, and must leave
 * the target passing PRAGMA quick_check. One target and one seed database
 * per process, in $TMPDIR. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compile.h"
#include "db.h"
#include "gen.h"
#include "sha256.h"
#include "tables.h"
#include "problems.h"

#define SQLITE_HEADER "SQLite format 3"
/* Virtual-machine steps the editing SQL may take (a recursive CTE could
 * fill the disk): past them it is interrupted, and what it did stays. */
#define EDIT_STEPS 2000000
#define EDIT_CHECK_EVERY 1000

static fat_db *target;
static fat_gen *gen;
static fat_import_options opts;
static char seed[256], work[256];

/* The seed: the first generated variant of fwd fp16 none d64 as the
 * checked, timed winner of its problem on an H200, with a build. */
static void make_seed(void) {
  char err[1024];
  int hd = 64;
  fat_dtype dt = FAT_FP16;
  fat_mask mk = FAT_MASK_NONE;
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
  fat_variant *v = NULL;
  size_t n = 0;
  fat_db *db = NULL;
  unlink(seed);
  if (fat_gen_variants(gen, &q, &v, &n, NULL, NULL, err, sizeof err) || n == 0 ||
      fat_db_open(seed, &db, err, sizeof err)) {
    fprintf(stderr, "fuzz_merge: %s\n", err);
    abort();
  }
  fat_gpu_info g = {.cc_major = 9, .sm_count = 132, .driver_version = 13000, .nvrtc_major = 13,
                    .smem_per_block_optin = 232448};
  snprintf(g.name, sizeof g.name, "NVIDIA H200");
  fat_problem p;
  fat_bench_problem(v[0].dtype, v[0].mask, v[0].head_dim, 1024, &p);
  static const unsigned char cubin[] = {0x7f, 'E', 'L', 'F', 0, 1, 0xff};
  fat_build b = {.ok = 1, .cubin = (unsigned char *)cubin, .cubin_size = sizeof cubin,
                 .registers = 96, .compile_ms = 500, .log = ""};
  snprintf(b.arch, sizeof b.arch, "sm_90a");
  fat_sha256_hex(v[0].name, strlen(v[0].name), b.key);
  fat_check c = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256, .rel_l2 = 0.001,
                 .max_abs = 0.01, .lse_max_abs = 1e-5, .nonfinite = 0, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 20, .median_ms = 1.0, .min_ms = 0.9, .max_ms = 1.2, .p10_ms = 0.95,
                  .p90_ms = 1.05, .tflops = 1.0, .sm_clock_mhz = 1755};
  sqlite3_int64 gid, pid, vid, tid;
  if (fat_db_put_gpu(db, &g, &gid) || fat_db_put_problem(db, &p, &pid) ||
      fat_db_put_variant(db, &v[0], &vid) ||
      fat_db_put_build(db, vid, &b, fat_compile_options(), "13.0") ||
      fat_db_put_check(db, vid, gid, pid, &c) || fat_db_put_timing(db, vid, gid, pid, &t, &tid) ||
      fat_db_set_winner(db, gid, pid, vid, tid)) {
    fprintf(stderr, "fuzz_merge: seed: %s\n", fat_db_errmsg(db));
    abort();
  }
  fat_db_close(db);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

static void setup(void) {
  char path[256], err[1024];
  const char *dir = getenv("TMPDIR");
  dir = dir && *dir ? dir : "/tmp";
  snprintf(path, sizeof path, "%s/fuzz_merge_target_%d.db", dir, (int)getpid());
  snprintf(seed, sizeof seed, "%s/fuzz_merge_seed_%d.db", dir, (int)getpid());
  snprintf(work, sizeof work, "%s/fuzz_merge_work_%d.db", dir, (int)getpid());
  unlink(path);
  if (fat_db_open(path, &target, err, sizeof err) || !(gen = fat_gen_open(NULL, err, sizeof err)) ||
      !(opts.trust = fat_trust_open(gen))) {
    fprintf(stderr, "fuzz_merge: %s\n", err);
    abort();
  }
  make_seed();
  /* The first merge loads, for the trust rule, the generator's group of the
   * seed's variant (fwd fp16 none d64's sources on both architectures):
   * seconds under the sanitizers, and past libFuzzer's per-input timeout
   * once the space grew by the fp8 K/V cache's variants (the first input
   * took 14-18 s). Done here, into a scratch database, before any input is
   * timed; every later merge finds the group loaded. */
  char scratch[256];
  fat_db *db = NULL;
  snprintf(scratch, sizeof scratch, "%s/fuzz_merge_warm_%d.db", dir, (int)getpid());
  unlink(scratch);
  if (fat_db_open(scratch, &db, err, sizeof err) || fat_tables_merge(db, seed, &opts, NULL, err, sizeof err)) {
    fprintf(stderr, "fuzz_merge: warming the trust rule: %s\n", err);
    abort();
  }
  fat_db_close(db);
  unlink(scratch);
}

/* libFuzzer's one-time set-up, outside every input's timeout. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setup();
  return 0;
}

static int write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  const int ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* WORK as a copy of the seed (a WAL database closed cleanly: one file). */
static int copy_seed(void) {
  FILE *f = fopen(seed, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n > 0 ? malloc((size_t)n) : NULL;
  const int ok = buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
  fclose(f);
  const int rc = ok ? write_file(work, buf, (size_t)n) : -1;
  free(buf);
  return rc;
}

static int steps_left;
static int edit_budget(void *unused) {
  (void)unused;
  return (steps_left -= EDIT_CHECK_EVERY) < 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!target) setup(); /* a driver that skips LLVMFuzzerInitialize */
  char side[300];
  for (const char *suffix = "-wal\0-shm\0-journal\0"; *suffix; suffix += strlen(suffix) + 1) {
    snprintf(side, sizeof side, "%s%s", work, suffix);
    unlink(side);
  }
  if (size >= strlen(SQLITE_HEADER) && !memcmp(data, SQLITE_HEADER, strlen(SQLITE_HEADER))) {
    if (write_file(work, data, size)) return 0;
  } else {
    char *sql = malloc(size + 1);
    sqlite3 *h = NULL;
    if (!sql || copy_seed() || sqlite3_open(work, &h) != SQLITE_OK) {
      free(sql);
      sqlite3_close(h);
      return 0;
    }
    memcpy(sql, data, size);
    sql[size] = 0;
    steps_left = EDIT_STEPS;
    sqlite3_progress_handler(h, EDIT_CHECK_EVERY, edit_budget, NULL);
    sqlite3_exec(h, sql, NULL, NULL, NULL); /* errors and all: what it did is the input */
    sqlite3_close(h);
    free(sql);
  }
  char err[1024] = "";
  if (fat_tables_merge(target, work, &opts, NULL, err, sizeof err) != 0 && !err[0]) abort();
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(fat_db_handle(target), "PRAGMA quick_check", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_step(s) != SQLITE_ROW || strcmp((const char *)sqlite3_column_text(s, 0), "ok") != 0)
    abort();
  sqlite3_finalize(s);
  return 0;
}
