/* SPDX-License-Identifier: MIT */
/* Proves the tuning database keeps what the tuner relies on: the schema is
 * created at this build's version in WAL mode; every row round-trips (a
 * cubin byte for byte); identical GPUs share one key and each keeps its own
 * device row, a timing naming only a device of its own GPU; each put is
 * committed before it returns; a re-run sees what was
 * measured for the same source hash and nothing for another; a variant that
 * failed a check never wins however fast; --retune forgets without deleting;
 * and bad input, foreign files and newer schemas are refused with exact
 * messages. All files live in a fresh folder under /tmp, removed at the end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "db.h"
#include "embedded.h"
#include "job.h"
#include "check.h"

#define ERRLEN 512
#define CUBIN_BYTES 4099 /* odd size, with zero bytes inside */

static char tmpdir[] = "/tmp/fatune_test_db.XXXXXX";
#define MAX_PATHS 16
#define PATH_LEN 256
static int n_made;
static char made[MAX_PATHS][PATH_LEN];

/* A fresh database path in the test folder, remembered for cleanup. */
static const char *new_path(const char *name) {
  snprintf(made[n_made], sizeof made[0], "%s/%s", tmpdir, name);
  return made[n_made++];
}

/* Removes PATH followed by SUFFIX ("", "-wal", "-shm"): SQLite's files. */
static void remove_with_suffix(const char *path, const char *suffix) {
  char p[PATH_LEN + sizeof "-wal"];
  if (strlen(path) + strlen(suffix) >= sizeof p) return;
  strcpy(p, path);
  strcat(p, suffix);
  remove(p);
}

static void cleanup(void) {
  for (int i = 0; i < n_made; i++) {
    remove_with_suffix(made[i], "");
    remove_with_suffix(made[i], "-wal");
    remove_with_suffix(made[i], "-shm");
  }
  rmdir(tmpdir);
}

/* Runs SQL returning one integer or text value through a separate
 * connection, so what it sees is what was committed. */
static long long peek_int(const char *path, const char *sql) {
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  long long v = -999;
  if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  else
    fprintf(stderr, "peek_int(%s): %s\n", sql, sqlite3_errmsg(h));
  sqlite3_finalize(s);
  sqlite3_close(h);
  return v;
}

static void text_of(sqlite3 *h, const char *sql, char *out, size_t len) {
  sqlite3_stmt *s = NULL;
  snprintf(out, len, "(failed)");
  if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    snprintf(out, len, "%s", (const char *)sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
}

static fat_gpu_info test_gpu(void) {
  fat_gpu_info g = {0};
  snprintf(g.name, sizeof g.name, "NVIDIA H200");
  g.cc_major = 9, g.cc_minor = 0, g.sm_count = 132, g.driver_version = 13000;
  g.nvrtc_major = 13, g.nvrtc_minor = 0;
  g.mem_bytes = 150ull << 30, g.smem_per_block_optin = 232448, g.l2_bytes = 50 << 20;
  g.clock_khz = 1980000, g.mem_clock_khz = 2619000;
  return g;
}

/* A variant whose hash is 64 copies of HASH_CHAR (a hex digit). */
static fat_variant test_variant(const char *name, char hash_char, int is_default) {
  fat_variant v = {0};
  v.name = (char *)name;
  v.family = "mma80";
  v.params = "BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4";
  v.entry = "fat_fwd";
  v.source = "extern \"C\" __global__ void fat_fwd() {}\n/* \xe2\x80\x94 utf-8 kept */\n";
  memset(v.hash, hash_char, 64);
  v.hash[64] = '\0';
  v.direction = FAT_FWD, v.dtype = FAT_BF16, v.mask = FAT_MASK_CAUSAL, v.head_dim = 128;
  v.block_m = 128, v.threads = 128, v.smem_bytes = 49152, v.is_default = is_default;
  return v;
}

static fat_problem test_problem(int seqlen) {
  fat_problem p = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL,
                   .head_dim = 128, .batch = 4, .heads = 16, .heads_k = 16, .seqlen_q = seqlen,
                   .seqlen_k = seqlen};
  return p;
}

static fat_check check_result(int passed, double rel_l2) {
  fat_check c = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256, .rel_l2 = rel_l2,
                 .max_abs = rel_l2 * 4, .lse_max_abs = 1e-5, .nonfinite = 0, .passed = passed,
                 .reason = ""};
  snprintf(c.reason, sizeof c.reason, "%s", passed ? "ok" : "rel_l2 0.03 > 0.01");
  return c;
}

static fat_timing timing_of(double median_ms) {
  fat_timing t = {.reps = 100, .median_ms = median_ms, .min_ms = median_ms * 0.9,
                  .max_ms = median_ms * 1.2, .p10_ms = median_ms * 0.95, .p90_ms = median_ms * 1.05,
                  .tflops = 1.0 / median_ms, .sm_clock_mhz = 1755};
  return t;
}

static void test_schema_created(void) {
  fat_db *db = NULL;
  char err[ERRLEN], text[256];
  const char *path = new_path("schema.db");
  CHECK(fat_embedded_find("db/schema.sql") != NULL);
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  sqlite3 *h = fat_db_handle(db);
  text_of(h, "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_schema"
             " WHERE type = 'table' ORDER BY name)", text, sizeof text);
  CHECK_STR(text, "build_hashes,builds,ceilings,checks,devices,eliminations,external_timings,gpus,"
                 "problems,timing_jobs,timings,variants,winners");
  text_of(h, "PRAGMA user_version", text, sizeof text);
  CHECK_STR(text, "10");
  text_of(h, "PRAGMA journal_mode", text, sizeof text);
  CHECK_STR(text, "wal");
  text_of(h, "PRAGMA foreign_keys", text, sizeof text);
  CHECK_STR(text, "1");
  fat_db_close(db);
  db = NULL;
  /* Reopening an existing database keeps it as it is. */
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'"), 13);
out:
  fat_db_close(db);
}

static void test_round_trips(void) {
  fat_db *db = NULL;
  char err[ERRLEN];
  const char *path = new_path("roundtrip.db");
  unsigned char cubin[CUBIN_BYTES];
  fat_variant got = {0};
  fat_build back = {0};
  int found = -1;
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);

  fat_gpu_info g = test_gpu();
  sqlite3_int64 gpu = 0, gpu_again = 0, gpu_new_driver = 0;
  REQUIRE(fat_db_put_gpu(db, &g, &gpu) == 0);
  CHECK(gpu > 0);
  g.clock_khz = 1700000; /* informational: same GPU, refreshed */
  REQUIRE(fat_db_put_gpu(db, &g, &gpu_again) == 0);
  CHECK_INT(gpu_again, gpu);
  CHECK_INT(peek_int(path, "SELECT clock_khz FROM gpus"), 1700000);
  g.driver_version = 13010; /* part of the key: another row */
  REQUIRE(fat_db_put_gpu(db, &g, &gpu_new_driver) == 0);
  CHECK(gpu_new_driver != gpu);

  fat_variant v = test_variant("fwd.mma80.bf16.d128.causal.m128n64w4s2", 'a', 1);
  sqlite3_int64 vid = 0, vid_again = 0;
  REQUIRE(fat_db_put_variant(db, &v, &vid) == 0);
  REQUIRE(fat_db_put_variant(db, &v, &vid_again) == 0);
  CHECK_INT(vid_again, vid);
  REQUIRE(fat_db_get_variant(db, vid, &got, &found) == 0);
  CHECK_INT(found, 1);
  CHECK_STR(got.name, v.name);
  CHECK_STR(got.family, "mma80");
  CHECK_STR(got.params, v.params);
  CHECK_STR(got.entry, "fat_fwd");
  CHECK_STR(got.source, v.source);
  CHECK_STR(got.hash, v.hash);
  CHECK_INT(got.direction, FAT_FWD);
  CHECK_INT(got.dtype, FAT_BF16);
  CHECK_INT(got.mask, FAT_MASK_CAUSAL);
  CHECK_INT(got.head_dim, 128);
  CHECK_INT(got.block_m, 128);
  CHECK_INT(got.threads, 128);
  CHECK_INT(got.smem_bytes, 49152);
  CHECK_INT(got.is_default, 1);
  fat_variant_free(&got);
  REQUIRE(fat_db_get_variant(db, vid + 1000, &got, &found) == 0);
  CHECK_INT(found, 0);

  for (int i = 0; i < CUBIN_BYTES; i++) cubin[i] = (unsigned char)(i * 7 % 256);
  fat_build b = {0};
  snprintf(b.arch, sizeof b.arch, "sm_90a");
  memset(b.key, 'c', 64);
  b.ok = 1, b.cubin = cubin, b.cubin_size = CUBIN_BYTES;
  b.registers = 168, b.smem_static = 0, b.stack_frame = 16, b.spill_stores = 8, b.spill_loads = 4;
  b.compile_ms = 1234.5;
  b.log = "ptxas info    : Used 168 registers";
  REQUIRE(fat_db_put_build(db, vid, &b, "--std=c++17 -arch=sm_90a", "13.0") == 0);
  REQUIRE(fat_db_find_build(db, b.key, &back, &found) == 0);
  CHECK_INT(found, 1);
  CHECK_STR(back.arch, "sm_90a");
  CHECK_STR(back.key, b.key);
  CHECK_INT(back.ok, 1);
  CHECK_INT(back.cubin_size, CUBIN_BYTES);
  CHECK(back.cubin && memcmp(back.cubin, cubin, CUBIN_BYTES) == 0);
  CHECK_INT(back.registers, 168);
  CHECK_INT(back.stack_frame, 16);
  CHECK_INT(back.spill_stores, 8);
  CHECK_INT(back.spill_loads, 4);
  CHECK_DBL(back.compile_ms, 1234.5);
  CHECK_STR(back.log, b.log);
  fat_build_free(&back);

  /* A failed compile is cached too: no cubin, the log says why. */
  fat_build bad = {0};
  snprintf(bad.arch, sizeof bad.arch, "sm_80");
  memset(bad.key, 'd', 64);
  bad.log = "error: identifier \"x\" is undefined";
  REQUIRE(fat_db_put_build(db, vid, &bad, "--std=c++17", "13.0") == 0);
  REQUIRE(fat_db_find_build(db, bad.key, &back, &found) == 0);
  CHECK_INT(found, 1);
  CHECK_INT(back.ok, 0);
  CHECK(back.cubin == NULL);
  CHECK_INT(back.cubin_size, 0);
  CHECK_STR(back.log, bad.log);
  fat_build_free(&back);
  /* ok = 1 without a cubin is a lie the schema refuses. */
  bad.ok = 1;
  CHECK_INT(fat_db_put_build(db, vid, &bad, "--std=c++17", "13.0"), -1);
  CHECK_STR(fat_db_errmsg(db),
            "cannot store build dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
            " (variant 1, sm_80): CHECK constraint failed: (ok = 1) = (cubin IS NOT NULL AND"
            " length(cubin) > 0)");
  REQUIRE(fat_db_find_build(db, "0000000000000000000000000000000000000000000000000000000000000000",
                            &back, &found) == 0);
  CHECK_INT(found, 0);

  fat_problem p = test_problem(1024);
  sqlite3_int64 pid = 0, pid_again = 0, pid_other = 0;
  REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE(fat_db_put_problem(db, &p, &pid_again) == 0);
  CHECK_INT(pid_again, pid);
  p.seqlen_k = 2048;
  REQUIRE(fat_db_put_problem(db, &p, &pid_other) == 0);
  CHECK(pid_other != pid);

  /* Each put is committed when it returns: another connection sees it. */
  fat_timing t = timing_of(2.0);
  sqlite3_int64 tid = 0;
  REQUIRE(fat_db_put_timing(db, vid, gpu, pid, &t, &tid) == 0);
  CHECK(tid > 0);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM timings"), 1);
  CHECK_INT(peek_int(path, "SELECT sm_clock_mhz FROM timing_conditions"), 1755);
  fat_check c = check_result(1, 0.002);
  REQUIRE(fat_db_put_check(db, vid, gpu, pid, &c) == 0);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM checks WHERE passed = 1"), 1);
out:
  fat_variant_free(&got);
  fat_build_free(&back);
  fat_db_close(db);
}

/* Two identical GPUs of a host share their gpus row (the key winners are
 * stored under) and each has its own devices row; another model has its
 * own key; a timing names its device, never another GPU's; a job's
 * timings name theirs; and the winner rule reads the timings of every
 * device of the key alike. */
static void test_devices(void) {
  fat_db *db = NULL;
  char err[ERRLEN], text[256], want[ERRLEN];
  const char *path = new_path("devices.db");
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_gpu_info g = test_gpu(), other = test_gpu();
  snprintf(other.name, sizeof other.name, "NVIDIA H100 80GB HBM3");
  other.sm_count = 132 - 18;
  sqlite3_int64 h200 = 0, h200_again = 0, h100 = 0, d0 = 0, d1 = 0, d1_again = 0, e0 = 0, b0 = 0;
  REQUIRE(fat_db_put_gpu(db, &g, &h200) == 0);
  REQUIRE(fat_db_put_gpu(db, &g, &h200_again) == 0);  /* the second H200 of the host */
  CHECK_INT(h200_again, h200);
  REQUIRE(fat_db_put_gpu(db, &other, &h100) == 0);
  CHECK(h100 != h200);
  REQUIRE(fat_db_put_device(db, h200, "node7", 0, &g, &d0) == 0);
  REQUIRE(fat_db_put_device(db, h200, "node7", 1, &g, &d1) == 0);
  CHECK(d0 > 0 && d1 > 0 && d0 != d1);
  g.clock_khz = 1755000;  /* informational: the same device, refreshed */
  REQUIRE(fat_db_put_device(db, h200, "node7", 1, &g, &d1_again) == 0);
  CHECK_INT(d1_again, d1);
  CHECK_INT(peek_int(path, "SELECT clock_khz FROM devices WHERE device_index = 1"), 1755000);
  CHECK_INT(peek_int(path, "SELECT clock_khz FROM devices WHERE device_index = 0"), 1980000);
  REQUIRE(fat_db_put_device(db, h100, "node7", 0, &other, &e0) == 0);
  REQUIRE(fat_db_put_device(db, h200, "node8", 0, &g, &b0) == 0);  /* another host's GPU 0 */
  CHECK(e0 != d0 && b0 != d0 && b0 != e0);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM devices"), 4);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM gpus"), 2);
  /* No host is no device. */
  sqlite3_int64 bad = 0;
  CHECK_INT(fat_db_put_device(db, h200, "", 2, &g, &bad), -1);
  snprintf(want, sizeof want, "cannot store device 2 of host '' (gpu %lld, NVIDIA H200): CHECK"
           " constraint failed: length(host) > 0", (long long)h200);
  CHECK_STR(fat_db_errmsg(db), want);

  fat_variant v = test_variant("fwd.mma80.bf16.d128.causal.m128n64w4s2", 'a', 0);
  fat_variant w = test_variant("fwd.mma80.bf16.d128.causal.m64n64w4s2", 'b', 0);
  fat_problem p = test_problem(2048);
  sqlite3_int64 vid = 0, wid = 0, pid = 0, t0 = 0, t1 = 0, tn = 0, job = 0;
  REQUIRE(fat_db_put_variant(db, &v, &vid) == 0);
  REQUIRE(fat_db_put_variant(db, &w, &wid) == 0);
  REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
  fat_timing t = timing_of(2.0);
  REQUIRE(fat_db_put_timing_on(db, vid, h200, d0, pid, &t, &t0) == 0);
  t.sm_clock_mhz = 1980;
  REQUIRE(fat_db_put_timing_on(db, vid, h200, d1, pid, &t, &t1) == 0);
  REQUIRE(fat_db_put_timing(db, vid, h200, pid, &t, &tn) == 0);
  sqlite3 *h = fat_db_handle(db);
  snprintf(want, sizeof want, "SELECT group_concat(coalesce(host, '-') || ':' || coalesce(device, '-')"
           " || '@' || sm_clock_mhz, ' ') FROM (SELECT * FROM timing_conditions ORDER BY timing_id)");
  text_of(h, want, text, sizeof text);
  CHECK_STR(text, "node7:0@1755 node7:1@1980 -:-@1980");
  /* The H100's device under the H200's key is refused, and so is no device. */
  CHECK_INT(fat_db_put_timing_on(db, vid, h200, e0, pid, &t, &bad), -1);
  snprintf(want, sizeof want, "cannot store timing of variant %lld on gpu %lld, device %lld, problem"
           " %lld (median 2 ms): timing device is not a device of its GPU", (long long)vid,
           (long long)h200, (long long)e0, (long long)pid);
  CHECK_STR(fat_db_errmsg(db), want);
  CHECK_INT(fat_db_put_timing_on(db, vid, h200, e0 + 100, pid, &t, &bad), -1);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM timings"), 3);
  /* A job's timings name its device, all of them or none stored. */
  const sqlite3_int64 ids[2] = {vid, wid};
  const fat_timing job_t[2] = {timing_of(2.1), timing_of(2.05)};
  REQUIRE(fat_db_put_job_timings(db, h200, d1, pid, 2, ids, job_t, &job) == 0);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM timings WHERE device_id IS NOT NULL AND id >= (SELECT"
                           " max(job) FROM timing_jobs)"), 2);
  CHECK_INT(fat_db_put_job_timings(db, h200, e0, pid, 2, ids, job_t, NULL), -1);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM timings"), 5);
  /* Both H200s' timings count for the one key: the rule decides among the
   * job's, whichever device ran it. */
  fat_check c = check_result(1, 0.002);
  REQUIRE(fat_db_put_check(db, vid, h200, pid, &c) == 0);
  REQUIRE(fat_db_put_check(db, wid, h200, pid, &c) == 0);
  fat_db_choice best;
  int found = 0;
  REQUIRE(fat_db_decide_winner(db, h200, pid, &best, &found, NULL) == 0);
  CHECK_INT(found, 1);
  CHECK_INT(best.variant_id, wid);
  CHECK_INT(best.timing_id, job + 1);
out:
  fat_db_close(db);
}

static void test_resume(void) {
  fat_db *db = NULL;
  char err[ERRLEN];
  const char *path = new_path("resume.db");
  fat_gpu_info g = test_gpu();
  fat_problem p = test_problem(4096);
  fat_variant v = test_variant("fwd.mma80.bf16.d128.causal.m128n64w4s2", 'a', 0);
  fat_variant fails = test_variant("fwd.mma80.bf16.d128.causal.m64n64w4s2", 'b', 0);
  fat_variant changed = test_variant("fwd.mma80.bf16.d128.causal.m128n64w4s2", 'e', 0);
  sqlite3_int64 gpu, pid, vid, fid, vid2 = 0, vid_changed = 0;
  int checked = -1, passed = -1, timed = -1;

  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_gpu(db, &g, &gpu) == 0);
  REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE(fat_db_put_variant(db, &v, &vid) == 0);
  REQUIRE(fat_db_put_variant(db, &fails, &fid) == 0);
  REQUIRE(fat_db_has_result(db, vid, gpu, pid, &checked, &passed, &timed) == 0);
  CHECK_INT(checked, 0);
  CHECK_INT(passed, 0);
  CHECK_INT(timed, 0);
  fat_check ok = check_result(1, 0.002), bad = check_result(0, 0.03);
  fat_timing t = timing_of(1.25);
  REQUIRE(fat_db_put_check(db, vid, gpu, pid, &ok) == 0);
  REQUIRE(fat_db_put_timing(db, vid, gpu, pid, &t, NULL) == 0);
  REQUIRE(fat_db_put_check(db, fid, gpu, pid, &ok) == 0);
  REQUIRE(fat_db_put_check(db, fid, gpu, pid, &bad) == 0);
  /* A NaN error is stored (as NULL) when failed, refused when "passed". */
  fat_check nan_fail = check_result(0, NAN);
  nan_fail.nonfinite = 12;
  REQUIRE(fat_db_put_check(db, fid, gpu, pid, &nan_fail) == 0);
  fat_check nan_pass = check_result(1, NAN);
  CHECK_INT(fat_db_put_check(db, fid, gpu, pid, &nan_pass), -1);
  CHECK_STR(fat_db_errmsg(db),
            "cannot store check of variant 2 on gpu 1, problem 1 (ok): CHECK constraint failed:"
            " passed = 0 OR (rel_l2 IS NOT NULL AND max_abs IS NOT NULL AND nonfinite = 0)");
  fat_db_close(db);
  db = NULL;

  /* The re-run: same variants, same ids, results still there. */
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_variant(db, &v, &vid2) == 0);
  CHECK_INT(vid2, vid);
  REQUIRE(fat_db_has_result(db, vid2, gpu, pid, &checked, &passed, &timed) == 0);
  CHECK_INT(checked, 1);
  CHECK_INT(passed, 1);
  CHECK_INT(timed, 1);
  REQUIRE(fat_db_has_result(db, fid, gpu, pid, &checked, &passed, &timed) == 0);
  CHECK_INT(checked, 1);
  CHECK_INT(passed, 0);
  CHECK_INT(timed, 0);
  /* Same name, new source: another variant, nothing measured. */
  REQUIRE(fat_db_put_variant(db, &changed, &vid_changed) == 0);
  CHECK(vid_changed != vid);
  REQUIRE(fat_db_has_result(db, vid_changed, gpu, pid, &checked, &passed, &timed) == 0);
  CHECK_INT(checked, 0);
  CHECK_INT(passed, 0);
  CHECK_INT(timed, 0);
out:
  fat_db_close(db);
}

static void test_winner(void) {
  fat_db *db = NULL;
  char err[ERRLEN];
  const char *path = new_path("winner.db");
  fat_gpu_info g = test_gpu();
  fat_problem p = test_problem(2048);
  fat_variant fast_wrong = test_variant("fwd.mma80.bf16.d128.causal.m64n32w2s1", '1', 0);
  fat_variant good = test_variant("fwd.mma80.bf16.d128.causal.m128n64w4s2", '2', 0);
  fat_variant base = test_variant("fwd.mma80.bf16.d128.causal.m64n64w4s1", '3', 1);
  sqlite3_int64 gpu, pid, a, b, c, ta, tb, tc, tc2;
  fat_db_choice best = {0}, ranked[4];
  fat_db_summary_row *rows = NULL;
  size_t n = 0;
  int found = -1;
  long long retired = -1;

  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_gpu(db, &g, &gpu) == 0);
  REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE(fat_db_put_variant(db, &fast_wrong, &a) == 0);
  REQUIRE(fat_db_put_variant(db, &good, &b) == 0);
  REQUIRE(fat_db_put_variant(db, &base, &c) == 0);
  fat_check ok1 = check_result(1, 0.001), ok2 = check_result(1, 0.004), bad = check_result(0, 0.5);
  fat_timing t05 = timing_of(0.5), t20 = timing_of(2.0), t30 = timing_of(3.0), t15 = timing_of(1.5);
  /* The fastest variant passed one check and failed another. */
  REQUIRE(fat_db_put_check(db, a, gpu, pid, &ok1) == 0);
  REQUIRE(fat_db_put_check(db, a, gpu, pid, &bad) == 0);
  REQUIRE(fat_db_put_timing(db, a, gpu, pid, &t05, &ta) == 0);
  REQUIRE(fat_db_put_check(db, b, gpu, pid, &ok1) == 0);
  REQUIRE(fat_db_put_timing(db, b, gpu, pid, &t20, &tb) == 0);
  REQUIRE(fat_db_put_check(db, c, gpu, pid, &ok1) == 0);
  REQUIRE(fat_db_put_check(db, c, gpu, pid, &ok2) == 0);
  REQUIRE(fat_db_put_timing(db, c, gpu, pid, &t30, &tc) == 0);

  REQUIRE(fat_db_best(db, gpu, pid, &best, &found) == 0);
  CHECK_INT(found, 1);
  CHECK_INT(best.variant_id, b);
  CHECK_INT(best.timing_id, tb);
  CHECK_DBL(best.median_ms, 2.0);
  CHECK_DBL(best.tflops, 0.5);
  CHECK_STR(best.name, good.name);
  REQUIRE(fat_db_rank(db, gpu, pid, ranked, 4, &n) == 0);
  CHECK_INT(n, 2);
  CHECK_INT(ranked[0].variant_id, b);
  CHECK_INT(ranked[1].variant_id, c);
  REQUIRE(fat_db_set_winner(db, gpu, pid, b, tb) == 0);

  /* The schema itself refuses an unchecked winner, and a borrowed timing. */
  CHECK_INT(fat_db_set_winner(db, gpu, pid, a, ta), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot make variant 1 (timing 1) the winner on gpu 1, problem 1:"
                               " winner has not passed the reference check on this GPU and problem");
  CHECK_INT(fat_db_set_winner(db, gpu, pid, c, tb), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot make variant 3 (timing 2) the winner on gpu 1, problem 1:"
                               " winner timing is not a live timing of that variant on this GPU"
                               " and problem");
  CHECK_INT(peek_int(path, "SELECT variant_id FROM winners"), b);

  /* A re-timing adds a row; the latest one counts. */
  REQUIRE(fat_db_put_timing(db, c, gpu, pid, &t15, &tc2) == 0);
  REQUIRE(fat_db_best(db, gpu, pid, &best, &found) == 0);
  CHECK_INT(best.variant_id, c);
  CHECK_INT(best.timing_id, tc2);
  REQUIRE(fat_db_set_winner(db, gpu, pid, c, tc2) == 0);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM timings"), 4);

  REQUIRE(fat_db_summary(db, gpu, &rows, &n) == 0);
  REQUIRE(n == 1);
  CHECK_INT(rows[0].problem_id, pid);
  CHECK_INT(rows[0].problem.seqlen_q, 2048);
  CHECK_INT(rows[0].problem.dtype, FAT_BF16);
  CHECK_INT(rows[0].problem.mask, FAT_MASK_CAUSAL);
  CHECK_STR(rows[0].winner, base.name);
  CHECK_DBL(rows[0].median_ms, 1.5);
  CHECK_DBL(rows[0].rel_l2, 0.004);   /* the worse of its two checks */
  CHECK_DBL(rows[0].max_abs, 0.016);
  CHECK_DBL(rows[0].slowest_ms, 2.0); /* b; a failed and does not count */
  CHECK_DBL(rows[0].default_ms, 1.5);
  CHECK_STR(rows[0].default_name, base.name);
  CHECK_INT(rows[0].n_passing, 2);
  CHECK_INT(rows[0].n_failed, 1);
  free(rows);
  rows = NULL;

  /* A failing check arriving later unseats the winner. */
  REQUIRE(fat_db_put_check(db, c, gpu, pid, &bad) == 0);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM winners"), 0);
  REQUIRE(fat_db_best(db, gpu, pid, &best, &found) == 0);
  CHECK_INT(best.variant_id, b);

  /* --retune: results retired, kept, and no longer seen. */
  REQUIRE(fat_db_set_winner(db, gpu, pid, b, tb) == 0);
  REQUIRE(fat_db_forget(db, gpu, pid, &retired) == 0);
  CHECK_INT(retired, 10); /* 6 checks + 4 timings */
  CHECK_INT(peek_int(path, "SELECT count(*) FROM winners"), 0);
  CHECK_INT(peek_int(path, "SELECT count(*) FROM checks WHERE retired = 1"), 6);
  REQUIRE(fat_db_best(db, gpu, pid, &best, &found) == 0);
  CHECK_INT(found, 0);
  int checked = -1, passed = -1, timed = -1;
  REQUIRE(fat_db_has_result(db, b, gpu, pid, &checked, &passed, &timed) == 0);
  CHECK_INT(checked, 0);
  CHECK_INT(timed, 0);
  REQUIRE(fat_db_summary(db, gpu, &rows, &n) == 0);
  CHECK_INT(n, 0);
  /* Re-measured after --retune, only the new results count: a's old failure
   * is history, and its new passing check and timing make it the best. */
  REQUIRE(fat_db_put_check(db, a, gpu, pid, &ok1) == 0);
  REQUIRE(fat_db_put_timing(db, a, gpu, pid, &t05, &ta) == 0);
  REQUIRE(fat_db_has_result(db, a, gpu, pid, &checked, &passed, &timed) == 0);
  CHECK_INT(checked, 1);
  CHECK_INT(passed, 1);
  CHECK_INT(timed, 1);
  REQUIRE(fat_db_best(db, gpu, pid, &best, &found) == 0);
  CHECK_INT(found, 1);
  CHECK_INT(best.variant_id, a);
  CHECK_INT(best.timing_id, ta);
  REQUIRE(fat_db_set_winner(db, gpu, pid, a, ta) == 0);
out:
  free(rows);
  fat_db_close(db);
}

static void test_bad_rows_refused(void) {
  fat_db *db = NULL;
  char err[ERRLEN];
  const char *path = new_path("bad.db");
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_variant v = test_variant("fwd.mma80.xx.d128.causal.m128n64w4s2", 'f', 0);
  v.dtype = (fat_dtype)7;
  sqlite3_int64 id = -1;
  CHECK_INT(fat_db_put_variant(db, &v, &id), -1);
  CHECK(strstr(fat_db_errmsg(db), "CHECK constraint failed") != NULL);
  CHECK_STR(fat_db_errmsg(db), "cannot store variant fwd.mma80.xx.d128.causal.m128n64w4s2"
                               " (source ffffffffffff): CHECK constraint failed:"
                               " dtype IN ('fp16', 'bf16', 'e4m3', 'fp16-e4m3kv', 'bf16-e4m3kv')");
  CHECK_INT(id, -1);
  /* An fp8 K/V cache has no backward, as e4m3 has none. */
  v.dtype = FAT_BF16_E4M3KV, v.direction = FAT_BWD;
  CHECK_INT(fat_db_put_variant(db, &v, &id), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot store variant fwd.mma80.xx.d128.causal.m128n64w4s2"
                               " (source ffffffffffff): CHECK constraint failed:"
                               " dtype IN ('fp16', 'bf16') OR direction = 'fwd'");
  v.direction = FAT_FWD;
  v.dtype = FAT_FP16;
  v.head_dim = 100; /* not a multiple of 8 */
  CHECK_INT(fat_db_put_variant(db, &v, &id), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot store variant fwd.mma80.xx.d128.causal.m128n64w4s2"
                               " (source ffffffffffff): CHECK constraint failed:"
                               " head_dim BETWEEN 8 AND 256 AND head_dim % 8 = 0");
  fat_problem p = test_problem(0);
  CHECK_INT(fat_db_put_problem(db, &p, &id), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot store problem fwd bf16 causal d128 b4 h16/16 sq0 sk0 w0,0:"
                               " CHECK constraint failed: seqlen_q > 0");
  /* Foreign keys are on: a check for a variant that does not exist. */
  fat_check c = check_result(1, 0.001);
  CHECK_INT(fat_db_put_check(db, 42, 43, 44, &c), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot store check of variant 42 on gpu 43, problem 44 (ok):"
                               " FOREIGN KEY constraint failed");
  CHECK_INT(peek_int(path, "SELECT count(*) FROM variants"), 0);
out:
  fat_db_close(db);
}

static void test_open_refusals(void) {
  fat_db *db = NULL;
  char err[ERRLEN], want[ERRLEN];
  sqlite3 *h = NULL;

  const char *garbage = new_path("garbage.db");
  FILE *f = fopen(garbage, "wb");
  REQUIRE(f != NULL);
  for (int i = 0; i < 64; i++) fputs("this is not a database, only text. ", f);
  fclose(f);
  CHECK_INT(fat_db_open(garbage, &db, err, sizeof err), -1);
  CHECK(db == NULL);
  snprintf(want, sizeof want, "not a fatune database: %s: file is not a database", garbage);
  CHECK_STR(err, want);

  CHECK_INT(fat_db_open("/nonexistent-dir/x.db", &db, err, sizeof err), -1);
  CHECK(db == NULL);
  CHECK_STR(err, "cannot open database /nonexistent-dir/x.db: unable to open database file"
                 " (No such file or directory)");

  CHECK_INT(fat_db_open("", &db, err, sizeof err), -1);
  CHECK_STR(err, "cannot open database: empty path");

  /* Another program's SQLite file is left alone. */
  const char *foreign = new_path("foreign.db");
  REQUIRE(sqlite3_open(foreign, &h) == SQLITE_OK);
  REQUIRE(sqlite3_exec(h, "CREATE TABLE notes (body TEXT)", NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(h);
  h = NULL;
  CHECK_INT(fat_db_open(foreign, &db, err, sizeof err), -1);
  snprintf(want, sizeof want,
           "not a fatune database: %s: it holds 1 schema objects but no fatune schema version",
           foreign);
  CHECK_STR(err, want);
  CHECK_INT(peek_int(foreign, "SELECT count(*) FROM sqlite_schema"), 1);

  /* A database written by a newer fatune is refused, untouched. */
  const char *future = new_path("future.db");
  REQUIRE(sqlite3_open(future, &h) == SQLITE_OK);
  REQUIRE(sqlite3_exec(h, "CREATE TABLE gpus (id INTEGER PRIMARY KEY); PRAGMA user_version = 11",
                       NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(h);
  h = NULL;
  CHECK_INT(fat_db_open(future, &db, err, sizeof err), -1);
  CHECK(db == NULL);
  snprintf(want, sizeof want,
           "database %s has schema version 11, newer than this fatune's 10: use a newer fatune or"
           " another database",
           future);
  CHECK_STR(err, want);
  CHECK_INT(peek_int(future, "PRAGMA user_version"), 11);
out:
  sqlite3_close(h);
  fat_db_close(db);
}

/* The materialising baseline is a yardstick, never a candidate: however fast
 * and however well checked, fat_db_rank and fat_db_best leave family
 * "materialize" out, the summary keeps it out of the slowest and default
 * figures and reports its fastest passing timing as materialize_ms; and the
 * schema's winner triggers do not stand in the way of the rule (it is the
 * ranking that excludes it). NAN when a problem has no baseline timed. */
static void test_materialize_never_wins(void) {
  fat_db *db = NULL;
  char err[ERRLEN];
  const char *path = new_path("materialize.db");
  fat_gpu_info g = test_gpu();
  fat_problem p = test_problem(4096), q = test_problem(1024);
  fat_variant fused = test_variant("fwd.mma80.bf16.d128.causal.m128n64w4s2", '4', 1);
  fat_variant mat16 = test_variant("fwd.materialize.bf16.d128.causal.t16", '5', 0);
  fat_variant mat32 = test_variant("fwd.materialize.bf16.d128.causal.t32", '6', 0);
  mat16.family = mat32.family = (char *)FAT_FAMILY_MATERIALIZE;
  mat16.params = "TILE=16", mat32.params = "TILE=32";
  sqlite3_int64 gpu, pid, qid, f, m16, m32, tf, tq;
  fat_db_choice best = {0}, ranked[4];
  fat_db_summary_row *rows = NULL;
  size_t n = 0;
  int found = -1;

  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_gpu(db, &g, &gpu) == 0);
  REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE(fat_db_put_problem(db, &q, &qid) == 0);
  REQUIRE(fat_db_put_variant(db, &fused, &f) == 0);
  REQUIRE(fat_db_put_variant(db, &mat16, &m16) == 0);
  REQUIRE(fat_db_put_variant(db, &mat32, &m32) == 0);
  fat_check ok = check_result(1, 0.001);
  fat_timing t_fused = timing_of(2.0), t_m16 = timing_of(0.25), t_m32 = timing_of(8.0);
  /* Both baselines pass; the t16 one is (implausibly) the fastest of all. */
  REQUIRE(fat_db_put_check(db, f, gpu, pid, &ok) == 0);
  REQUIRE(fat_db_put_timing(db, f, gpu, pid, &t_fused, &tf) == 0);
  REQUIRE(fat_db_put_check(db, m16, gpu, pid, &ok) == 0);
  REQUIRE(fat_db_put_timing(db, m16, gpu, pid, &t_m16, NULL) == 0);
  REQUIRE(fat_db_put_check(db, m32, gpu, pid, &ok) == 0);
  REQUIRE(fat_db_put_timing(db, m32, gpu, pid, &t_m32, NULL) == 0);

  REQUIRE(fat_db_rank(db, gpu, pid, ranked, 4, &n) == 0);
  CHECK_INT(n, 1);
  CHECK_INT(ranked[0].variant_id, f);
  REQUIRE(fat_db_best(db, gpu, pid, &best, &found) == 0);
  CHECK_INT(found, 1);
  CHECK_INT(best.variant_id, f);
  CHECK_INT(best.timing_id, tf);
  REQUIRE(fat_db_set_winner(db, gpu, pid, f, tf) == 0);

  /* A problem where only the baseline was timed has no winner at all. */
  REQUIRE(fat_db_put_check(db, m32, gpu, qid, &ok) == 0);
  REQUIRE(fat_db_put_timing(db, m32, gpu, qid, &t_m32, NULL) == 0);
  REQUIRE(fat_db_best(db, gpu, qid, &best, &found) == 0);
  CHECK_INT(found, 0);
  /* One that does not fit is a failed check with its reason, and the
   * fused winner of that problem is unaffected. */
  fat_check no_fit = check_result(0, 0.0);
  no_fit.rel_l2 = no_fit.max_abs = no_fit.lse_max_abs = NAN;
  snprintf(no_fit.reason, sizeof no_fit.reason, "does not fit: needs 17179869184 bytes, 1024 free");
  REQUIRE(fat_db_put_check(db, m16, gpu, qid, &no_fit) == 0);
  REQUIRE(fat_db_put_check(db, f, gpu, qid, &ok) == 0);
  REQUIRE(fat_db_put_timing(db, f, gpu, qid, &t_fused, &tq) == 0);
  REQUIRE(fat_db_best(db, gpu, qid, &best, &found) == 0);
  CHECK_INT(found, 1);
  CHECK_INT(best.variant_id, f);
  REQUIRE(fat_db_set_winner(db, gpu, qid, f, tq) == 0);

  REQUIRE(fat_db_summary(db, gpu, &rows, &n) == 0);
  REQUIRE(n == 2);
  /* Ordered by seqlen: q (1024) first. */
  CHECK_INT(rows[0].problem_id, qid);
  CHECK_DBL(rows[0].materialize_ms, 8.0); /* t32 passed; t16 did not fit */
  CHECK_INT(rows[0].n_passing, 2);
  CHECK_INT(rows[0].n_failed, 1);
  CHECK_INT(rows[1].problem_id, pid);
  CHECK_STR(rows[1].winner, fused.name);
  CHECK_DBL(rows[1].median_ms, 2.0);
  CHECK_DBL(rows[1].materialize_ms, 0.25);  /* the fastest baseline */
  CHECK_DBL(rows[1].slowest_ms, 2.0);       /* not the 8 ms baseline */
  CHECK_DBL(rows[1].default_ms, 2.0);
  CHECK_STR(rows[1].default_name, fused.name);
  CHECK_INT(rows[1].n_passing, 3);
  CHECK_INT(rows[1].n_failed, 0);
  free(rows);
  rows = NULL;

  /* No baseline timed: NAN. */
  REQUIRE(fat_db_forget(db, gpu, pid, NULL) == 0);
  REQUIRE(fat_db_put_check(db, f, gpu, pid, &ok) == 0);
  REQUIRE(fat_db_put_timing(db, f, gpu, pid, &t_fused, &tf) == 0);
  REQUIRE(fat_db_set_winner(db, gpu, pid, f, tf) == 0);
  REQUIRE(fat_db_summary(db, gpu, &rows, &n) == 0);
  REQUIRE(n == 2);
  CHECK(isnan(rows[1].materialize_ms));
out:
  free(rows);
  fat_db_close(db);
}

/* The SQL rule the deterministic picks read (FAT_SQL_DQ_DETERMINISTIC):
 * the parser's word, separate and ordered deterministic, atomic not, and
 * anything that does not parse (a misspelt mode, NULL, a forward's
 * parameters) not either. */
static void test_dq_deterministic_sql(void) {
  sqlite3 *h = NULL;
  char got[64];
  REQUIRE(sqlite3_open(":memory:", &h) == SQLITE_OK);
  REQUIRE(fat_db_add_functions(h) == SQLITE_OK);
  static const struct {
    const char *params;
    const char *want;
  } CASES[] = {
      {"'BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic WARPS=4'", "0"},
      {"'BLOCK_M=64 BLOCK_N=64 DQ_MODE=separate WARPS=4'", "1"},
      {"'BLOCK_M=64 BLOCK_N=128 DQ_MODE=ordered STAGES=2'", "1"},
      {"'BLOCK_M=64 BLOCK_N=128 DQ_MODE=orderly STAGES=2'", "0"},
      {"'BLOCK_M=128 BLOCK_N=64 STAGES=2'", "0"},
      {"'garbage'", "0"},
      {"NULL", "0"},
  };
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT fat_dq_deterministic(%s)", CASES[i].params);
    text_of(h, sql, got, sizeof got);
    CHECK_STR(got, CASES[i].want);
  }
  /* The macro is that call, usable as a condition. */
  text_of(h, "SELECT count(*) FROM (SELECT 'BLOCK_M=64 BLOCK_N=128 DQ_MODE=ordered' AS params UNION ALL"
             " SELECT 'BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic') WHERE " FAT_SQL_DQ_DETERMINISTIC("params"),
          got, sizeof got);
  CHECK_STR(got, "1");
out:
  sqlite3_close(h);
}

/* The winner rule's one preference (FAT_LAUNCH_SPLITS_TIE): in the job
 * that re-timed the contenders, a forward variant whose launch chooses
 * its key splits (SPLITS 0) wins over a faster one of a fixed count by
 * less than 2 %, and loses to one faster by more; a fixed count between
 * them changes nothing of the kind. */
static void test_launch_splits_tie(void) {
  fat_db *db = NULL;
  char err[ERRLEN];
  const char *path = new_path("launch_splits.db");
  fat_gpu_info g = test_gpu();
  fat_variant fixed = test_variant("fwd.splitkv.bf16.d128.causal.m64n128w4s2.g1x32", 'c', 0),
              fixed8 = test_variant("fwd.splitkv.bf16.d128.causal.m64n128w4s2.g1x8", 'd', 0),
              launch = test_variant("fwd.splitkv.bf16.d128.causal.m64n128w4s2.g1x0", 'e', 0);
  fixed.family = fixed8.family = launch.family = "splitkv";
  fixed.params = "BLOCK_M=64 BLOCK_N=128 PACK_GQA=1 SPLITS=32 STAGES=2 WARPS=4";
  fixed8.params = "BLOCK_M=64 BLOCK_N=128 PACK_GQA=1 SPLITS=8 STAGES=2 WARPS=4";
  launch.params = "BLOCK_M=64 BLOCK_N=128 PACK_GQA=1 SPLITS=0 STAGES=2 WARPS=4";
  sqlite3_int64 gpu, ids[3];
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_gpu(db, &g, &gpu) == 0);
  REQUIRE(fat_db_put_variant(db, &fixed, &ids[0]) == 0);
  REQUIRE(fat_db_put_variant(db, &launch, &ids[1]) == 0);
  REQUIRE(fat_db_put_variant(db, &fixed8, &ids[2]) == 0);
  /* Per problem: the launch-split variant's job median against the fixed
   * one's 1.000 ms (the fixed 8 at 1.005), and who wins. */
  static const struct { double launch_ms; int launch_wins; } CASES[] = {
      {1.015, 1}, {1.019, 1}, {1.000, 1}, {0.990, 1}, {1.021, 0}, {1.028, 0}};
  for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
    fat_problem p = test_problem(1);
    p.seqlen_k = 4096 + (int)k;
    sqlite3_int64 pid, tid;
    REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
    fat_check ok = check_result(1, 0.002);
    const fat_timing alone[3] = {timing_of(1.0), timing_of(CASES[k].launch_ms), timing_of(1.005)};
    for (int i = 0; i < 3; i++) {
      REQUIRE(fat_db_put_check(db, ids[i], gpu, pid, &ok) == 0);
      REQUIRE(fat_db_put_timing(db, ids[i], gpu, pid, &alone[i], &tid) == 0);
    }
    sqlite3_int64 job = 0;
    REQUIRE(fat_db_put_job_timings(db, gpu, 0, pid, 3, ids, alone, &job) == 0);
    fat_db_choice best;
    int found = 0;
    REQUIRE(fat_db_decide_winner(db, gpu, pid, &best, &found, NULL) == 0);
    CHECK_INT(found, 1);
    const sqlite3_int64 want = CASES[k].launch_wins ? ids[1] : ids[0];
    CHECK_WHY(best.variant_id == want && best.timing_id == job + (CASES[k].launch_wins ? 1 : 0),
              "launch splits at %.3f ms against 1.000: %s won (timing %lld, job %lld)",
              CASES[k].launch_ms, best.name, (long long)best.timing_id, (long long)job);
  }
out:
  fat_db_close(db);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_schema_created();
  test_round_trips();
  test_devices();
  test_resume();
  test_winner();
  test_launch_splits_tie();
  test_bad_rows_refused();
  test_open_refusals();
  test_materialize_never_wins();
  test_dq_deterministic_sql();
  cleanup();
  return check_summary("test_db");
}
