/* SPDX-License-Identifier: MIT */
/* The one winner rule (fat_db_decide_winner) on a fixture database
 * (winners_fixture.h): it picks the fastest live passing candidate by its
 * latest timing, never a variant that failed a check nor the
 * materialising baseline; deciding again from the same timings (a rerun
 * that measured nothing) changes nothing, not even the row's chosen_at;
 * and every printer of winners -- the run's table and --json
 * (fat_db_summary), the export, the runtime's lookup -- names the winners
 * it decided, before and after a new timing changes one; a drop (a
 * screening stopped after one repetition) is never a contender nor a
 * winner. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "fatune.h"
#include "summary.h"
#include "tables.h"
#include "winners_fixture.h"

#define ERRLEN 1024
#define TEXT_CAP 4096

static char tmpdir[] = "/tmp/fatune_test_winner_rule.XXXXXX";

/* One text value of SQL on DB's connection ("(failed)" when none). */
static void text_of(fat_db *db, const char *sql, char *out, size_t len) {
  sqlite3_stmt *s = NULL;
  snprintf(out, len, "(failed)");
  if (sqlite3_prepare_v2(fat_db_handle(db), sql, -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
    snprintf(out, len, "%s", (const char *)sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
}

/* Every printer names WANT[k] as problem k's winner. */
static void check_printers(const char *path, fat_db *db, const fixture *fx,
                           const char *const want[FIX_N_PROBLEMS]) {
  char err[ERRLEN], needle[320];
  fat_db_summary_row *rows = NULL;
  size_t n = 0;
  char *json = NULL, *exported = NULL;
  size_t len = 0;
  fat_context *c = NULL;

  /* The end-of-run table and --json: fat_db_summary's rows, in its order. */
  REQUIRE(fat_db_summary(db, fx->gpu_id, &rows, &n) == 0);
  CHECK_INT(n, FIX_N_PROBLEMS);
  for (size_t k = 0; k < n && k < FIX_N_PROBLEMS; k++) {
    CHECK_INT(rows[k].problem_id, fx->problem_ids[k]);
    CHECK_STR(rows[k].winner, want[k]);
  }
  const fat_run_summary s = {.status = 0, .shard_index = 1, .shard_count = 1};
  FILE *f = open_memstream(&json, &len);
  REQUIRE(f);
  CHECK(fat_summary_write_json(f, &s, rows, n) == 0);
  fclose(f);
  for (int k = 0; k < FIX_N_PROBLEMS; k++) {
    snprintf(needle, sizeof needle, "\"winner\": \"%s\"", want[k]);
    CHECK_WHY(json && strstr(json, needle), "--json lacks %s", needle);
  }

  /* The export: a forward problem's winner is the only variant of it that
   * goes out, so the variants in the file are the winners. */
  f = open_memstream(&exported, &len);
  REQUIRE(f);
  int rc = fat_tables_export(db, "NVIDIA H200", NULL, f, err, sizeof err);
  fclose(f);
  CHECK_WHY(rc == 0, "export: %s", err);
  for (size_t i = 0; i < FIX_N_VARIANTS; i++) {
    const char *name = FIXTURE_VARIANTS[i].name;
    int wins = 0;
    for (int k = 0; k < FIX_N_PROBLEMS; k++) wins |= !strcmp(want[k], name);
    snprintf(needle, sizeof needle, "'%s'", name);
    const int out_there = exported && strstr(exported, needle) != NULL;
    CHECK_WHY(out_there == wins, "the export %s %s", wins ? "lacks" : "has", name);
  }

  /* The runtime's lookup, offline, of each problem's own shape: the user
   * database's winner. */
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  o.user_db = path, o.no_builtin = 1;
  o.gpu_name = "NVIDIA H200", o.gpu_cc_major = 9, o.gpu_cc_minor = 0, o.gpu_sm_count = 132;
  fat_status st = fat_context_open(&c, &o);
  CHECK_WHY(st == FAT_OK, "context: %s", c ? fat_context_error(c) : "out of memory");
  REQUIRE(st == FAT_OK);
  for (int k = 0; k < FIX_N_PROBLEMS; k++) {
    const fat_problem *p = &fx->problems[k];
    fat_attn_args a = FAT_ATTN_ARGS_INIT;
    a.batch = p->batch, a.heads = p->heads, a.heads_k = p->heads_k;
    a.seqlen_q = p->seqlen_q, a.seqlen_k = p->seqlen_k, a.head_dim = p->head_dim;
    a.dtype = p->dtype == FAT_BF16 ? FAT_ATTN_BF16 : FAT_ATTN_FP16;
    a.mask = p->mask == FAT_MASK_CAUSAL ? FAT_ATTN_MASK_CAUSAL : FAT_ATTN_MASK_NONE;
    fat_choice ch = FAT_CHOICE_INIT;
    CHECK_WHY(fat_attention_select(c, &a, &ch) == FAT_OK, "select: %s", fat_context_error(c));
    CHECK_STR(ch.variant, want[k]);
    CHECK_INT(ch.origin, FAT_ORIGIN_USER_DB);
  }
out:
  if (c) fat_context_close(c);
  free(rows);
  free(json);
  free(exported);
}

static void test_one_rule(void) {
  char err[ERRLEN], path[256], chosen[TEXT_CAP], again[TEXT_CAP];
  fat_db *db = NULL;
  fixture fx;
  snprintf(path, sizeof path, "%s/fixture.db", tmpdir);
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fixture_fill(db, &fx) == 0);

  /* The cold run's decision. */
  for (int k = 0; k < FIX_N_PROBLEMS; k++) {
    fat_db_choice w, stored;
    int found = -1, changed = -1, has = -1;
    REQUIRE(fat_db_get_winner(db, fx.gpu_id, fx.problem_ids[k], &stored, &has) == 0);
    CHECK_INT(has, 0);
    REQUIRE(fat_db_decide_winner(db, fx.gpu_id, fx.problem_ids[k], &w, &found, &changed) == 0);
    CHECK_INT(found, 1);
    CHECK_INT(changed, 1);
    CHECK_STR(w.name, FIXTURE_WINNERS[k]);
    REQUIRE(fat_db_get_winner(db, fx.gpu_id, fx.problem_ids[k], &stored, &has) == 0);
    CHECK_INT(has, 1);
    CHECK_STR(stored.name, FIXTURE_WINNERS[k]);
    CHECK_INT(stored.timing_id, w.timing_id);
    CHECK_DBL(stored.median_ms, k == FIX_P_BF16 ? 1.5 : 0.5);
  }
  check_printers(path, db, &fx, FIXTURE_WINNERS);

  /* A rerun decides again from the same timings: nothing changes. */
  text_of(db, "SELECT group_concat(problem_id || ':' || variant_id || ':' || timing_id || ':' ||"
              " chosen_at, ' ') FROM (SELECT * FROM winners ORDER BY problem_id)",
          chosen, sizeof chosen);
  usleep(2000);  /* chosen_at counts milliseconds: a rewrite would show */
  for (int k = 0; k < FIX_N_PROBLEMS; k++) {
    fat_db_choice w;
    int found = -1, changed = -1;
    REQUIRE(fat_db_decide_winner(db, fx.gpu_id, fx.problem_ids[k], &w, &found, &changed) == 0);
    CHECK_INT(found, 1);
    CHECK_INT(changed, 0);
    CHECK_STR(w.name, FIXTURE_WINNERS[k]);
  }
  text_of(db, "SELECT group_concat(problem_id || ':' || variant_id || ':' || timing_id || ':' ||"
              " chosen_at, ' ') FROM (SELECT * FROM winners ORDER BY problem_id)",
          again, sizeof again);
  CHECK_STR(again, chosen);
  check_printers(path, db, &fx, FIXTURE_WINNERS);

  /* A new timing makes m64n64 the fastest by its latest (0.4 < 0.5): the
   * rule says so, and every printer follows. */
  const fat_timing t = {.reps = 20, .median_ms = 0.4, .min_ms = 0.36, .max_ms = 0.48,
                        .p10_ms = 0.38, .p90_ms = 0.42, .tflops = 2.5, .sm_clock_mhz = 1755};
  sqlite3_int64 m64 = 0;
  char sql[256], id[32];
  snprintf(sql, sizeof sql, "SELECT id FROM variants WHERE name = '%s'", FIXTURE_VARIANTS[1].name);
  text_of(db, sql, id, sizeof id);
  m64 = atoll(id);
  REQUIRE(m64 > 0);
  REQUIRE(fat_db_put_timing(db, m64, fx.gpu_id, fx.problem_ids[FIX_P_FP16], &t, NULL) == 0);
  fat_db_choice w;
  int found = -1, changed = -1;
  REQUIRE(fat_db_decide_winner(db, fx.gpu_id, fx.problem_ids[FIX_P_FP16], &w, &found, &changed) == 0);
  CHECK_INT(changed, 1);
  CHECK_STR(w.name, FIXTURE_VARIANTS[1].name);
  const char *const now[FIX_N_PROBLEMS] = {[FIX_P_BF16] = FIXTURE_WINNERS[FIX_P_BF16],
                                           [FIX_P_FP16] = FIXTURE_VARIANTS[1].name};
  check_printers(path, db, &fx, now);
out:
  fat_db_close(db);
  char side[300];
  unlink(path);
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}

/* A passing variant NAME of problem K timed alone at MS; its id. */
static sqlite3_int64 add_variant(fat_db *db, const fixture *fx, int k, const char *name, double ms) {
  fat_variant v;
  memset(&v, 0, sizeof v);
  char source[256];
  snprintf(source, sizeof source, "// stand-in of %s\n#define FAT_ABI_VERSION %d\n", name,
           FAT_ABI_VERSION);
  const fat_problem *p = &fx->problems[k];
  v.name = (char *)name, v.family = "mma80", v.params = "BLOCK_M=64 BLOCK_N=32 STAGES=1 WARPS=4";
  v.entry = "fat_fwd_mma80", v.source = source;
  fat_sha256_hex(source, strlen(source), v.hash);
  v.direction = p->direction, v.dtype = p->dtype, v.mask = p->mask, v.head_dim = p->head_dim;
  v.block_m = 64, v.threads = 128, v.smem_bytes = 32768;
  sqlite3_int64 vid = 0;
  fat_check c;
  memset(&c, 0, sizeof c);
  c.batch = 1, c.heads = 2, c.seqlen_q = c.seqlen_k = 256;
  c.rel_l2 = 1e-3, c.max_abs = 4e-3, c.lse_max_abs = 1e-5, c.passed = 1;
  snprintf(c.reason, sizeof c.reason, "ok");
  const fat_timing t = {.reps = 20, .median_ms = ms, .min_ms = ms * 0.9, .max_ms = ms * 1.2,
                        .p10_ms = ms * 0.95, .p90_ms = ms * 1.05, .tflops = 1.0 / ms,
                        .sm_clock_mhz = 1980};
  if (fat_db_put_variant(db, &v, &vid) || fat_db_put_check(db, vid, fx->gpu_id, fx->problem_ids[k], &c) ||
      fat_db_put_timing(db, vid, fx->gpu_id, fx->problem_ids[k], &t, NULL))
    return 0;
  return vid;
}

static fat_timing timing_of(double ms, int mhz) {
  return (fat_timing){.reps = 20, .median_ms = ms, .min_ms = ms * 0.9, .max_ms = ms * 1.2,
                      .p10_ms = ms * 0.95, .p90_ms = ms * 1.05, .tflops = 1.0 / ms,
                      .sm_clock_mhz = mhz};
}

static sqlite3_int64 variant_id_of(fat_db *db, const char *name) {
  char sql[320], id[32];
  snprintf(sql, sizeof sql, "SELECT id FROM variants WHERE name = '%s'", name);
  text_of(db, sql, id, sizeof id);
  return atoll(id);
}

static void test_jobs(void) {
  char err[ERRLEN], path[256], before[64], after[64];
  fat_db *db = NULL;
  fixture fx;
  snprintf(path, sizeof path, "%s/jobs.db", tmpdir);
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fixture_fill(db, &fx) == 0);
  const sqlite3_int64 P = fx.problem_ids[FIX_P_FP16];
  const char *a = FIXTURE_VARIANTS[0].name, *b = FIXTURE_VARIANTS[1].name;
  const char *c = "fwd.mma80.fp16.d64.none.m64n32w4s1";
  const sqlite3_int64 ia = variant_id_of(db, a), ib = variant_id_of(db, b);
  /* A alone 0.5; B alone 0.75, then 0.505 (its latest alone counts); C
   * alone 0.52, 1.04x A's: outside the 3 % of a close contender. */
  const sqlite3_int64 ic = add_variant(db, &fx, FIX_P_FP16, c, 0.52);
  REQUIRE(ia > 0 && ib > 0 && ic > 0);
  const fat_timing b_alone = timing_of(0.505, 1980);
  REQUIRE(fat_db_put_timing(db, ib, fx.gpu_id, P, &b_alone, NULL) == 0);
  fat_db_choice k[FAT_DB_MAX_CONTENDERS], w;
  size_t n = 0;
  int found = -1, changed = -1;
  REQUIRE(fat_db_contenders(db, fx.gpu_id, P, k, FAT_DB_MAX_CONTENDERS, &n) == 0);
  CHECK_INT(n, 2);
  CHECK_STR(k[0].name, a);
  CHECK_STR(k[1].name, b);
  /* No job yet: the best alone wins. */
  REQUIRE(fat_db_decide_winner(db, fx.gpu_id, P, &w, &found, &changed) == 0);
  CHECK_INT(found, 1);
  CHECK_STR(w.name, a);
  CHECK_DBL(w.median_ms, 0.5);

  /* The two re-timed together at the sustained clock: B the faster there.
   * Every latest timing now ranks C first (0.52 alone against 0.53 and
   * 0.535 in the job) -- the old rule's winner -- but C was timed alone,
   * 4 % behind A, and the job decides. */
  const sqlite3_int64 ids[2] = {ia, ib};
  const fat_timing job[2] = {timing_of(0.535, 1755), timing_of(0.53, 1755)};
  sqlite3_int64 job_id = 0;
  REQUIRE(fat_db_put_job_timings(db, fx.gpu_id, 0, P, 2, ids, job, &job_id) == 0);
  CHECK(job_id > 0);
  fat_db_choice latest[4];
  REQUIRE(fat_db_rank(db, fx.gpu_id, P, latest, 4, &n) == 0);
  CHECK_STR(latest[0].name, c);
  REQUIRE(fat_db_decide_winner(db, fx.gpu_id, P, &w, &found, &changed) == 0);
  CHECK_INT(changed, 1);
  CHECK_STR(w.name, b);
  CHECK_DBL(w.median_ms, 0.53);
  char sql[256], got[64];
  snprintf(sql, sizeof sql, "SELECT job FROM timing_jobs WHERE timing_id = %lld", (long long)w.timing_id);
  text_of(db, sql, got, sizeof got);
  CHECK_INT(atoll(got), job_id);

  /* A newer job without A (the best alone) does not decide: the older one
   * that timed A with B still does. */
  const fat_timing b_only = timing_of(0.3, 1755);
  REQUIRE(fat_db_put_job_timings(db, fx.gpu_id, 0, P, 1, &ib, &b_only, NULL) == 0);
  REQUIRE(fat_db_decide_winner(db, fx.gpu_id, P, &w, &found, &changed) == 0);
  CHECK_INT(changed, 0);
  CHECK_STR(w.name, b);
  CHECK_DBL(w.median_ms, 0.53);

  /* A newer job of all three (C now a contender by a new alone timing):
   * the fastest there wins, C. */
  const fat_timing c_alone = timing_of(0.5, 1980);
  REQUIRE(fat_db_put_timing(db, ic, fx.gpu_id, P, &c_alone, NULL) == 0);
  const sqlite3_int64 ids3[3] = {ia, ib, ic};
  const fat_timing job3[3] = {timing_of(0.54, 1740), timing_of(0.535, 1740), timing_of(0.532, 1740)};
  REQUIRE(fat_db_put_job_timings(db, fx.gpu_id, 0, P, 3, ids3, job3, NULL) == 0);
  REQUIRE(fat_db_decide_winner(db, fx.gpu_id, P, &w, &found, &changed) == 0);
  CHECK_INT(changed, 1);
  CHECK_STR(w.name, c);
  CHECK_DBL(w.median_ms, 0.532);

  /* A job is stored whole or not at all: a variant that does not exist
   * fails the second row, and the first is rolled back. */
  text_of(db, "SELECT count(*) || '/' || (SELECT count(*) FROM timing_jobs) FROM timings", before,
          sizeof before);
  const sqlite3_int64 bad[2] = {ia, 999999};
  CHECK_INT(fat_db_put_job_timings(db, fx.gpu_id, 0, P, 2, bad, job, NULL), -1);
  text_of(db, "SELECT count(*) || '/' || (SELECT count(*) FROM timing_jobs) FROM timings", after,
          sizeof after);
  CHECK_STR(after, before);
  /* The database still takes a job after the failed one. */
  CHECK_INT(fat_db_put_job_timings(db, fx.gpu_id, 0, P, 2, ids, job, NULL), 0);
out:
  fat_db_close(db);
  char side[300];
  unlink(path);
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}

/* A drop -- a screening stopped after its first repetition, FAT_DROP_FACTOR
 * behind the best so far -- is a measurement kept, never a contender nor a
 * winner: here one forged faster than everything (a merged database could
 * hold anything the trust rule lets in) still ranks after the others, is
 * left out of the contenders and loses to a slower screening; a candidate
 * whose latest timing is a drop is out, though an earlier one was fast. */
static void test_drops(void) {
  char err[ERRLEN], path[256];
  fat_db *db = NULL;
  fixture fx;
  CHECK(FAT_DROP_FACTOR > 1 + FAT_SCREEN_CONTENDER);  /* a drop is never a contender */
  snprintf(path, sizeof path, "%s/drops.db", tmpdir);
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fixture_fill(db, &fx) == 0);
  const sqlite3_int64 P = fx.problem_ids[FIX_P_FP16];
  const char *a = FIXTURE_VARIANTS[0].name, *b = FIXTURE_VARIANTS[1].name;
  const char *c = "fwd.mma80.fp16.d64.none.m64n32w4s1";
  const sqlite3_int64 ia = variant_id_of(db, a), ib = variant_id_of(db, b);
  const sqlite3_int64 ic = add_variant(db, &fx, FIX_P_FP16, c, 0.45);
  REQUIRE(ia > 0 && ib > 0 && ic > 0);
  /* A 0.5 (full), B now a drop of 0.2, C a screening of 0.47 that is its
   * latest: C is the best, A within 10 % of it; B, the fastest number,
   * ranks last. */
  fat_timing drop = timing_of(0.2, 1980), screen = timing_of(0.47, 1980);
  drop.reps = 1, drop.min_ms = drop.max_ms = drop.p10_ms = drop.p90_ms = 0.2;
  screen.reps = FAT_SCREEN_REPS;
  REQUIRE(fat_db_put_timing(db, ib, fx.gpu_id, P, &drop, NULL) == 0);
  REQUIRE(fat_db_put_timing(db, ic, fx.gpu_id, P, &screen, NULL) == 0);
  fat_db_choice r[4], k[FAT_DB_MAX_CONTENDERS], w;
  size_t n = 0;
  int found = -1, changed = -1;
  REQUIRE(fat_db_rank(db, fx.gpu_id, P, r, 4, &n) == 0);
  CHECK_INT(n, 3);
  CHECK_STR(r[0].name, c);
  CHECK_STR(r[1].name, a);
  CHECK_STR(r[2].name, b);
  CHECK_INT(r[2].reps, 1);
  CHECK(fat_db_dropped(&r[2]) && !fat_db_dropped(&r[0]) && !fat_db_dropped(&r[1]));
  REQUIRE(fat_db_contenders(db, fx.gpu_id, P, k, FAT_DB_MAX_CONTENDERS, &n) == 0);
  CHECK_INT(n, 2);
  CHECK_STR(k[0].name, c);
  CHECK_STR(k[1].name, a);
  REQUIRE(fat_db_decide_winner(db, fx.gpu_id, P, &w, &found, &changed) == 0);
  CHECK_INT(found, 1);
  CHECK_STR(w.name, c);
  /* With the other two failed, only the drop is left: no contender, no
   * winner (the stored one, C, unseated by its failed check). */
  fat_check failed;
  memset(&failed, 0, sizeof failed);
  failed.batch = 1, failed.heads = 2, failed.seqlen_q = failed.seqlen_k = 256;
  failed.rel_l2 = 0.5, failed.max_abs = 1, failed.lse_max_abs = 0;
  snprintf(failed.reason, sizeof failed.reason, "rel_l2 0.5 > 0.01");
  REQUIRE(fat_db_put_check(db, ia, fx.gpu_id, P, &failed) == 0);
  REQUIRE(fat_db_put_check(db, ic, fx.gpu_id, P, &failed) == 0);
  REQUIRE(fat_db_contenders(db, fx.gpu_id, P, k, FAT_DB_MAX_CONTENDERS, &n) == 0);
  CHECK_INT(n, 0);
  REQUIRE(fat_db_decide_winner(db, fx.gpu_id, P, &w, &found, &changed) == 0);
  CHECK_INT(found, 0);
  REQUIRE(fat_db_get_winner(db, fx.gpu_id, P, &w, &found) == 0);
  CHECK_INT(found, 0);
out:
  fat_db_close(db);
  char side[300];
  unlink(path);
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_one_rule();
  test_jobs();
  test_drops();
  rmdir(tmpdir);
  return check_summary("test_tables_winner_rule");
}
