/* SPDX-License-Identifier: MIT */
/* Proves the upgrades of a version-1 database (db/migrations/2.sql to
 * 10.sql, run by fat_db_open one after the other): a real version-1 file,
 * made from the frozen copy of the old schema (tests/data/schema_v1.sql)
 * and filled with rows whose ids have gaps, opens at version 10 with every
 * row and id kept and every reference intact; its schema is then, object
 * for object, the schema a new database gets; a local problem (the reason
 * for version 2), a variable-length profile (version 3) and a timing on a
 * device of its GPU (version 5) can be stored, with their CHECKs in force;
 * a version-4 file's timings keep their ids, jobs and winners, naming no
 * device; a version-5 file's variants keep theirs, and a sourceless one
 * can then be stored; a version-6 file's problems keep theirs, each
 * contiguous, and a paged one can then be stored (version 7); a version-7
 * file's variants and problems keep theirs, and an e4m3 forward of each
 * can then be stored, an e4m3 backward cannot (version 8); a version-8
 * file's keep theirs, and an fp8 K/V cache's forward (fp16-e4m3kv,
 * bf16-e4m3kv) of each can then be stored, its backward cannot (version
 * 9); a version-9 file's winners and timings keep theirs, and a decision
 * then records why each candidate not timed in full lost (version 10:
 * eliminations), which --retune removes; and a file
 * whose upgrade cannot succeed (a row referencing a missing parent) is
 * refused with the row named and left at version 1, untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "db.h"
#include "check.h"

#define ERRLEN 1024
#define TEXT_CAP 65536
/* The CHECK that refuses a backward of any dtype but the 16-bit ones
 * (version 9's; version 8's named e4m3 alone), as SQLite words it. */
#define BWD_CHECK "CHECK constraint failed: dtype IN ('fp16', 'bf16') OR direction = 'fwd'"

static char tmpdir[] = "/tmp/fatune_test_migrate.XXXXXX";

/* 64 copies of hex digit C: a stand-in source hash or build key. */
#define HEX64(c) "replace(hex(zeroblob(32)), '0', '" c "')"

/* Rows of every table that references problems or variants, with ids far
 * from 1..n so that a renumbering copy would show. The cubin's hash is the
 * sha256 of its 4 bytes. */
static const char *const V1_ROWS =
    "INSERT INTO gpus (id, name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major,"
    " nvrtc_minor, mem_bytes, smem_per_block_optin, l2_bytes, clock_khz, mem_clock_khz)"
    " VALUES (4, 'NVIDIA H200', 9, 0, 132, 13000, 13, 0, 1, 232448, 1, 1980000, 3201000);"
    "INSERT INTO variants (id, name, family, direction, dtype, mask, head_dim, params, entry,"
    " block_m, threads, smem_bytes, source_hash, source, is_default) VALUES"
    " (5, 'fwd.mma80.bf16.d128.causal.a', 'mma80', 'fwd', 'bf16', 'causal', 128, 'P=1', 'f',"
    "  128, 128, 49152, " HEX64("a") ", 'source a', 1),"
    " (9, 'fwd.mma80.fp16.d64.none.b', 'mma80', 'fwd', 'fp16', 'none', 64, 'P=2', 'f',"
    "  64, 128, 40960, " HEX64("b") ", 'source b', 0);"
    "INSERT INTO builds (id, key, variant_id, arch, options, nvrtc_version, ok, cubin, registers,"
    " smem_static, stack_frame, spill_stores, spill_loads, compile_ms) VALUES"
    " (11, " HEX64("c") ", 9, 'sm_90a', '', '13.0', 1, X'7f454c46', 168, 0, 0, 0, 0, 812.5);"
    "INSERT INTO build_hashes (build_key, cubin_sha256) VALUES (" HEX64("c") ","
    " '3bdbb4fe8397cd2b842430b39ccff01a8663c751945ef5e9a09e267fb8b1d359');"
    "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads, heads_k,"
    " seqlen_q, seqlen_k) VALUES (7, 'fwd', 'bf16', 'causal', 128, 4, 16, 16, 4096, 4096),"
    " (3, 'fwd', 'fp16', 'none', 64, 16, 32, 32, 1024, 1024);"
    "INSERT INTO checks (id, variant_id, gpu_id, problem_id, batch, heads, seqlen_q, seqlen_k,"
    " rel_l2, max_abs, lse_max_abs, nonfinite, passed, reason) VALUES"
    " (21, 5, 4, 7, 1, 2, 256, 256, 0.002, 0.01, 1e-5, 0, 1, 'ok'),"
    " (22, 9, 4, 3, 1, 2, 256, 256, 0.003, 0.02, 1e-5, 0, 1, 'ok');"
    "INSERT INTO timings (id, variant_id, gpu_id, problem_id, reps, median_ms, min_ms, max_ms,"
    " p10_ms, p90_ms, tflops, sm_clock_mhz) VALUES"
    " (31, 5, 4, 7, 20, 2.0, 1.9, 2.2, 1.95, 2.1, 300, 1755),"
    " (32, 9, 4, 3, 20, 0.5, 0.4, 0.6, 0.45, 0.55, 200, 1755);"
    "INSERT INTO winners (gpu_id, problem_id, variant_id, timing_id) VALUES (4, 7, 5, 31),"
    " (4, 3, 9, 32);"
    "INSERT INTO external_timings (id, gpu_id, problem_id, source, median_ms, tflops) VALUES"
    " (41, 4, 7, 'sdpa_flash', 2.5, 250);";


/* A database of schema VERSION (1 to 9) at PATH, as that fatune left it
 * (WAL mode), holding V1_ROWS and then EXTRA (written with foreign keys
 * off). */
static void make_old(const char *path, int version, const char *extra) {
  char schema_path[4096];
  const char *src = getenv("FATUNE_SOURCE_DIR");
  REQUIRE_EXIT(src);
  snprintf(schema_path, sizeof schema_path, "%s/tests/data/schema_v%d.sql", src, version);
  char *schema = check_read_file(schema_path);
  REQUIRE_EXIT(schema);
  sqlite3 *h = NULL;
  char *msg = NULL;
  REQUIRE_EXIT(sqlite3_open(path, &h) == SQLITE_OK);
  int rc = sqlite3_exec(h, schema, NULL, NULL, &msg);
  if (rc == SQLITE_OK) rc = sqlite3_exec(h, "PRAGMA journal_mode = WAL", NULL, NULL, &msg);
  if (rc == SQLITE_OK) rc = sqlite3_exec(h, V1_ROWS, NULL, NULL, &msg);
  if (rc == SQLITE_OK && extra) rc = sqlite3_exec(h, extra, NULL, NULL, &msg);
  if (rc != SQLITE_OK) fprintf(stderr, "make_old: %s\n", msg);
  REQUIRE_EXIT(rc == SQLITE_OK);
  sqlite3_free(msg);
  sqlite3_close(h);
  free(schema);
}

/* The rows of SQL, one line each, columns '|'-separated, into OUT. */
static void rows_of(sqlite3 *h, const char *sql, char *out, size_t cap) {
  sqlite3_stmt *s = NULL;
  size_t used = 0;
  out[0] = 0;
  if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) != SQLITE_OK) {
    snprintf(out, cap, "(%s)", sqlite3_errmsg(h));
    return;
  }
  while (sqlite3_step(s) == SQLITE_ROW && used < cap)
    for (int c = 0; c < sqlite3_column_count(s) && used < cap; c++) {
      const char *t = (const char *)sqlite3_column_text(s, c);
      used += (size_t)snprintf(out + used, cap - used, "%s%s", t ? t : "NULL",
                               c + 1 < sqlite3_column_count(s) ? "|" : "\n");
    }
  sqlite3_finalize(s);
}

/* Every row of every table references what it did before the upgrade. */
static void test_rows_and_ids_kept(const char *path) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 1, NULL);
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, mask, head_dim, seqlen_q, window_left, window_right, '[' || lengths || ']'"
             " FROM problems ORDER BY id", got, sizeof got);
  CHECK_STR(got, "3|none|64|1024|0|0|[]\n7|causal|128|4096|0|0|[]\n");
  rows_of(h, "SELECT id, name, is_default, source_hash = replace(hex(zeroblob(32)), '0', substr(source, 8))"
             " FROM variants ORDER BY id", got, sizeof got);
  CHECK_STR(got, "5|fwd.mma80.bf16.d128.causal.a|1|1\n9|fwd.mma80.fp16.d64.none.b|0|1\n");
  rows_of(h, "SELECT id, variant_id, hex(cubin) FROM builds", got, sizeof got);
  CHECK_STR(got, "11|9|7F454C46\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  rows_of(h, "SELECT id, variant_id, problem_id FROM checks ORDER BY id", got, sizeof got);
  CHECK_STR(got, "21|5|7\n22|9|3\n");
  rows_of(h, "SELECT id, problem_id FROM external_timings", got, sizeof got);
  CHECK_STR(got, "41|7\n");
  rows_of(h, "SELECT id, variant_id, gpu_id, problem_id, coalesce(device_id, '-'), median_ms,"
             " sm_clock_mhz FROM timings ORDER BY id", got, sizeof got);
  CHECK_STR(got, "31|5|4|7|-|2.0|1755\n32|9|4|3|-|0.5|1755\n");
  rows_of(h, "SELECT count(*) FROM build_hashes", got, sizeof got);
  CHECK_STR(got, "1\n");
  /* The view reads the new tables, windows and lengths included. */
  rows_of(h, "SELECT timing_id, variant, mask, window_left, window_right, '[' || lengths || ']'"
             " FROM timing_conditions ORDER BY timing_id", got, sizeof got);
  CHECK_STR(got, "31|fwd.mma80.bf16.d128.causal.a|causal|0|0|[]\n"
                 "32|fwd.mma80.fp16.d64.none.b|none|0|0|[]\n");
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  rows_of(h, "PRAGMA foreign_keys", got, sizeof got);
  CHECK_STR(got, "1\n");
  /* A version-1 problem is found again under its old id. */
  fat_problem p = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL,
                   .head_dim = 128, .batch = 4, .heads = 16, .heads_k = 16, .seqlen_q = 4096,
                   .seqlen_k = 4096};
  sqlite3_int64 id = -1;
  CHECK_INT(fat_db_put_problem(db, &p, &id), 0);
  CHECK_INT(id, 7);
out:
  fat_db_close(db);
}

/* The upgraded schema is the one a new database gets: same objects, same
 * SQL text (comments included), same table of contents. */
static void test_schema_matches_new(const char *upgraded, const char *fresh) {
  char err[ERRLEN], *want = malloc(TEXT_CAP), *got = malloc(TEXT_CAP);
  fat_db *db = NULL;
  static const char *const objects =
      "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name";
  REQUIRE(want && got);
  REQUIRE(fat_db_open(fresh, &db, err, sizeof err) == 0);
  rows_of(fat_db_handle(db), objects, want, TEXT_CAP);
  fat_db_close(db);
  REQUIRE(fat_db_open(upgraded, &db, err, sizeof err) == 0);
  rows_of(fat_db_handle(db), objects, got, TEXT_CAP);
  CHECK(strstr(want, "window_left  INTEGER NOT NULL DEFAULT 0") != NULL);
  CHECK(strstr(want, "lengths      TEXT    NOT NULL DEFAULT ''") != NULL);
  CHECK(strstr(want, "device_id    INTEGER REFERENCES devices (id)") != NULL);
  CHECK(strstr(want, "timing_id INTEGER PRIMARY KEY REFERENCES timings (id)") != NULL);
  CHECK(strstr(want, "page_size    INTEGER NOT NULL DEFAULT 0") != NULL);
  CHECK(strstr(want, "best_timing_id INTEGER NOT NULL REFERENCES timings (id)") != NULL);
  CHECK_STR(got, want);
  CHECK(strstr(want, "CHECK (dtype IN ('fp16', 'bf16') OR direction = 'fwd')") != NULL);
out:
  fat_db_close(db);
  free(want);
  free(got);
}

/* What version 2 is for: local problems and variants, with their windows
 * checked by the schema. */
static void test_local_problem_stored(const char *path) {
  char err[ERRLEN];
  fat_db *db = NULL;
  sqlite3_int64 id = -1, again = -1;
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_problem p = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_LOCAL, .head_dim = 128,
                   .batch = 1, .heads = 16, .heads_k = 16, .seqlen_q = 16384, .seqlen_k = 16384,
                   .window_left = 1024};
  CHECK_INT(fat_db_put_problem(db, &p, &id), 0);
  CHECK(id > 7);
  p.window_left = 256;  /* another window: another problem */
  CHECK_INT(fat_db_put_problem(db, &p, &again), 0);
  CHECK(again != id && again > 7);
  p.window_left = 1024;
  CHECK_INT(fat_db_put_problem(db, &p, &again), 0);
  CHECK_INT(again, id);
  p.window_left = p.window_right = -1;
  CHECK_INT(fat_db_put_problem(db, &p, &again), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot store problem fwd bf16 local d128 b1 h16/16 sq16384 "
                               "sk16384 w-1,-1: CHECK constraint failed: mask <> 'local' OR "
                               "window_left >= 0 OR window_right >= 0");
  p.mask = FAT_MASK_CAUSAL, p.window_left = 256, p.window_right = 0;
  CHECK_INT(fat_db_put_problem(db, &p, &again), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot store problem fwd bf16 causal d128 b1 h16/16 sq16384 "
                               "sk16384 w256,0: CHECK constraint failed: mask = 'local' OR "
                               "(window_left = 0 AND window_right = 0)");
  p.mask = FAT_MASK_LOCAL, p.window_left = -2;
  CHECK_INT(fat_db_put_problem(db, &p, &again), -1);
  CHECK_STR(fat_db_errmsg(db), "cannot store problem fwd bf16 local d128 b1 h16/16 sq16384 "
                               "sk16384 w-2,0: CHECK constraint failed: window_left >= -1");
  fat_variant v = {0};
  v.name = "fwd.mma80.bf16.d128.local.m128n64w4s1", v.family = "mma80", v.params = "P=3";
  v.entry = "f", v.source = "source c";
  memset(v.hash, 'd', 64);
  v.direction = FAT_FWD, v.dtype = FAT_BF16, v.mask = FAT_MASK_LOCAL, v.head_dim = 128;
  v.block_m = 128, v.threads = 128, v.smem_bytes = 49152;
  CHECK_INT(fat_db_put_variant(db, &v, &id), 0);
  CHECK(id > 9);
out:
  fat_db_close(db);
}

/* What version 3 is for: a variable-length profile, a problem of its own
 * beside the dense one of the same batch and longest length, its lengths
 * checked by the schema. */
static void test_varlen_problem_stored(const char *path) {
  char err[ERRLEN];
  fat_db *db = NULL;
  sqlite3_int64 dense = -1, id = -1, again = -1;
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_problem p = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL,
                   .head_dim = 128, .batch = 3, .heads = 16, .heads_k = 16, .seqlen_q = 3976,
                   .seqlen_k = 3976};
  CHECK_INT(fat_db_put_problem(db, &p, &dense), 0);
  p.lengths.n = 3, p.lengths.v[0] = 538, p.lengths.v[1] = 3976, p.lengths.v[2] = 2092;
  CHECK_INT(fat_db_put_problem(db, &p, &id), 0);
  CHECK(id != dense);
  CHECK_INT(fat_db_put_problem(db, &p, &again), 0);
  CHECK_INT(again, id);
  sqlite3 *h = fat_db_handle(db);
  char got[TEXT_CAP];
  snprintf(err, sizeof err, "SELECT lengths FROM problems WHERE id = %lld", (long long)id);
  rows_of(h, err, got, sizeof got);
  CHECK_STR(got, "538,3976,2092\n");
  p.batch = 2;  /* three lengths make a batch of three */
  CHECK_INT(fat_db_put_problem(db, &p, &again), -1);
  CHECK(strstr(fat_db_errmsg(db), "lengths 538,3976,2092: CHECK constraint failed: lengths = '' OR"));
  /* Malformed text never reaches the table. */
  static const char *const bad[] = {"0,12", "12,", ",12", "12,,3", "12,03", "1 2", "x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(err, sizeof err, "INSERT INTO problems (direction, dtype, mask, head_dim, batch, heads,"
             " heads_k, seqlen_q, seqlen_k, lengths) VALUES ('fwd', 'bf16', 'none', 128, 2, 16, 16,"
             " 12, 12, '%s')", bad[i]);
    CHECK((sqlite3_exec(h, err, NULL, NULL, NULL) & 0xff) == SQLITE_CONSTRAINT);
  }
out:
  fat_db_close(db);
}

/* An upgrade that cannot keep every reference is rolled back whole: the
 * file stays at version 1 with its own tables, and says which row. */
static void test_broken_file_untouched(const char *path) {
  char err[ERRLEN], want[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 1, "INSERT INTO checks (id, variant_id, gpu_id, problem_id, batch, heads, seqlen_q,"
                " seqlen_k, rel_l2, max_abs, lse_max_abs, nonfinite, passed, reason)"
                " VALUES (23, 5, 4, 99, 1, 2, 256, 256, 0.002, 0.01, 1e-5, 0, 1, 'ok')");
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), -1);
  CHECK(db == NULL);
  snprintf(want, sizeof want, "cannot upgrade database %s from schema version 1: row 23 of checks "
           "references a missing row of problems", path);
  CHECK_STR(err, want);
  sqlite3 *h = NULL;
  REQUIRE(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "1\n");
  rows_of(h, "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_schema WHERE type ="
             " 'table' ORDER BY name)", got, sizeof got);
  CHECK_STR(got, "build_hashes,builds,ceilings,checks,external_timings,gpus,problems,timings,"
                 "variants,winners\n");
  rows_of(h, "SELECT count(*) FROM sqlite_schema WHERE sql LIKE '%window_left%'", got, sizeof got);
  CHECK_STR(got, "0\n");
  rows_of(h, "SELECT group_concat(id) FROM (SELECT id FROM problems ORDER BY id)", got, sizeof got);
  CHECK_STR(got, "3,7\n");
out:
  sqlite3_close(h);
}

/* A version-2 database (tests/data/schema_v2.sql) with a local problem
 * upgrades to version 10 by 3.sql to 10.sql: its windows and ids kept,
 * every problem dense, its schema the new one. */
static void test_v2_upgrade(const char *path, const char *fresh) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 2, "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads,"
                    " heads_k, seqlen_q, seqlen_k, window_left, window_right) VALUES"
                    " (12, 'fwd', 'bf16', 'local', 128, 1, 16, 16, 16384, 16384, 1024, 0)");
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, mask, window_left, window_right, '[' || lengths || ']' FROM problems"
             " ORDER BY id", got, sizeof got);
  CHECK_STR(got, "3|none|0|0|[]\n7|causal|0|0|[]\n12|local|1024|0|[]\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  fat_db_close(db);
  db = NULL;
  test_schema_matches_new(path, fresh);
out:
  fat_db_close(db);
}

/* A version-3 database (tests/data/schema_v3.sql) upgrades to version 10 by
 * 4.sql to 10.sql: every timing kept, none of them in a job (timed alone),
 * the winners as they were, its schema the new one; a job can then be
 * stored and a timing_jobs row naming no timing is refused. */
static void test_v3_upgrade(const char *path, const char *fresh) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 3, NULL);
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, variant_id, median_ms FROM timings ORDER BY id", got, sizeof got);
  CHECK_STR(got, "31|5|2.0\n32|9|0.5\n");
  rows_of(h, "SELECT count(*) FROM timing_jobs", got, sizeof got);
  CHECK_STR(got, "0\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  CHECK(sqlite3_exec(h, "INSERT INTO timing_jobs (timing_id, job) VALUES (31, 31), (32, 31)", NULL,
                     NULL, NULL) == SQLITE_OK);
  CHECK(sqlite3_exec(h, "INSERT INTO timing_jobs (timing_id, job) VALUES (99, 31)", NULL, NULL,
                     NULL) != SQLITE_OK);
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  fat_db_close(db);
  db = NULL;
  test_schema_matches_new(path, fresh);
out:
  fat_db_close(db);
}

/* A version-4 database (tests/data/schema_v4.sql) upgrades to version 10
 * by 5.sql to 10.sql: its timings keep their ids, values, jobs and winners and
 * name no device (NULL: which GPU of the host made them is not known); a
 * device of its GPU can then be stored and named by a timing, one of
 * another GPU cannot; the winner rule reads the kept job as before; its
 * schema is the new one. */
static void test_v4_upgrade(const char *path, const char *fresh) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 4, "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads,"
                    " heads_k, seqlen_q, seqlen_k, lengths) VALUES"
                    " (13, 'fwd', 'bf16', 'causal', 128, 3, 16, 16, 3976, 3976, '538,3976,2092');"
                    "INSERT INTO timings (id, variant_id, gpu_id, problem_id, reps, median_ms,"
                    " min_ms, max_ms, p10_ms, p90_ms, tflops, sm_clock_mhz) VALUES"
                    " (35, 5, 4, 7, 20, 2.1, 2.0, 2.2, 2.05, 2.15, 290, 1755);"
                    "INSERT INTO timing_jobs (timing_id, job) VALUES (35, 35)");
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, variant_id, gpu_id, problem_id, coalesce(device_id, '-'), reps, median_ms,"
             " min_ms, max_ms, p10_ms, p90_ms, tflops, sm_clock_mhz, retired FROM timings ORDER BY id",
          got, sizeof got);
  CHECK_STR(got, "31|5|4|7|-|20|2.0|1.9|2.2|1.95|2.1|300.0|1755|0\n"
                 "32|9|4|3|-|20|0.5|0.4|0.6|0.45|0.55|200.0|1755|0\n"
                 "35|5|4|7|-|20|2.1|2.0|2.2|2.05|2.15|290.0|1755|0\n");
  rows_of(h, "SELECT timing_id, job FROM timing_jobs", got, sizeof got);
  CHECK_STR(got, "35|35\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  rows_of(h, "SELECT id, lengths FROM problems WHERE lengths <> ''", got, sizeof got);
  CHECK_STR(got, "13|538,3976,2092\n");
  rows_of(h, "SELECT timing_id, coalesce(host, '-'), coalesce(device, '-') FROM timing_conditions"
             " ORDER BY timing_id", got, sizeof got);
  CHECK_STR(got, "31|-|-\n32|-|-\n35|-|-\n");
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  /* The rule still reads the kept job: variant 5's only contender is itself. */
  fat_db_choice best;
  int found = 0;
  CHECK_INT(fat_db_decide_winner(db, 4, 7, &best, &found, NULL), 0);
  CHECK_INT(found, 1);
  CHECK_INT(best.variant_id, 5);
  fat_gpu_info g = {.cc_major = 9, .sm_count = 132, .driver_version = 13000, .nvrtc_major = 13,
                    .clock_khz = 1980000};
  snprintf(g.name, sizeof g.name, "NVIDIA H200");
  fat_timing t = {.reps = 20, .median_ms = 1.5, .min_ms = 1.4, .max_ms = 1.6, .p10_ms = 1.45,
                  .p90_ms = 1.55, .tflops = 400, .sm_clock_mhz = 1980};
  sqlite3_int64 dev = -1, tid = -1;
  CHECK_INT(fat_db_put_device(db, 4, "node7", 1, &g, &dev), 0);
  CHECK_INT(fat_db_put_timing_on(db, 5, 4, dev, 7, &t, &tid), 0);
  CHECK(tid > 35);
  rows_of(h, "SELECT host, device FROM timing_conditions WHERE timing_id > 35", got, sizeof got);
  CHECK_STR(got, "node7|1\n");
  REQUIRE(sqlite3_exec(h, "INSERT INTO gpus (id, name, cc_major, cc_minor, sm_count, driver_version,"
                          " nvrtc_major, nvrtc_minor, mem_bytes, smem_per_block_optin, l2_bytes,"
                          " clock_khz, mem_clock_khz) VALUES (6, 'NVIDIA H100', 9, 0, 114, 13000,"
                          " 13, 0, 1, 232448, 1, 1980000, 3201000)", NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_int64 other = -1;
  CHECK_INT(fat_db_put_device(db, 6, "node7", 0, &g, &other), 0);
  CHECK_INT(fat_db_put_timing_on(db, 5, 4, other, 7, &t, &tid), -1);
  CHECK(strstr(fat_db_errmsg(db), ": timing device is not a device of its GPU") != NULL);
  fat_db_close(db);
  db = NULL;
  test_schema_matches_new(path, fresh);
out:
  fat_db_close(db);
}

/* A version-5 database (tests/data/schema_v5.sql) upgrades to version 10 by
 * 6.sql to 10.sql: its variants keep their ids, sources and everything that
 * references them (builds, checks, timings, winners, the view), and a
 * variant may then be stored without a source (a table's stale one), while
 * an empty source is still refused; its schema is the new one. */
static void test_v5_upgrade(const char *path, const char *fresh) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 5, NULL);
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, name, source, is_default FROM variants ORDER BY id", got, sizeof got);
  CHECK_STR(got, "5|fwd.mma80.bf16.d128.causal.a|source a|1\n9|fwd.mma80.fp16.d64.none.b|source b|0\n");
  rows_of(h, "SELECT id, variant_id FROM builds ORDER BY id", got, sizeof got);
  CHECK_STR(got, "11|9\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  rows_of(h, "SELECT timing_id, variant FROM timing_conditions ORDER BY timing_id", got, sizeof got);
  CHECK_STR(got, "31|fwd.mma80.bf16.d128.causal.a\n32|fwd.mma80.fp16.d64.none.b\n");
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  CHECK_INT(sqlite3_exec(h, "INSERT INTO variants (id, name, family, direction, dtype, mask, head_dim,"
                            " params, entry, block_m, threads, smem_bytes, source_hash, source)"
                            " VALUES (12, 'fwd.mma80.bf16.d64.none.c', 'mma80', 'fwd', 'bf16', 'none',"
                            " 64, 'P=3', 'f', 64, 128, 0, " HEX64("d") ", NULL)", NULL, NULL, NULL),
            SQLITE_OK);
  CHECK_INT(sqlite3_exec(h, "INSERT INTO variants (id, name, family, direction, dtype, mask, head_dim,"
                            " params, entry, block_m, threads, smem_bytes, source_hash, source)"
                            " VALUES (13, 'fwd.mma80.bf16.d64.none.e', 'mma80', 'fwd', 'bf16', 'none',"
                            " 64, 'P=4', 'f', 64, 128, 0, " HEX64("e") ", '')", NULL, NULL, NULL) & 0xff,
            SQLITE_CONSTRAINT);
  fat_db_close(db);
  db = NULL;
  test_schema_matches_new(path, fresh);
out:
  fat_db_close(db);
}

/* A version-6 database (tests/data/schema_v6.sql) upgrades to version 10 by
 * 7.sql to 10.sql: its problems and ids kept, each contiguous (page_size 0),
 * the winners as they were, its schema the new one; a paged problem (the
 * reason for version 7) is then a problem of its own beside the
 * contiguous one of its shape, and a page size that is no power of two
 * from 16, or a paged backward, is refused by the CHECKs. */
static void test_v6_upgrade(const char *path, const char *fresh) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 6, NULL);
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, seqlen_q, page_size FROM problems ORDER BY id", got, sizeof got);
  CHECK_STR(got, "3|1024|0\n7|4096|0\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  rows_of(h, "SELECT timing_id, page_size FROM timing_conditions ORDER BY timing_id", got, sizeof got);
  CHECK_STR(got, "31|0\n32|0\n");
  fat_problem p = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL, .head_dim = 128,
                   .batch = 4, .heads = 16, .heads_k = 16, .seqlen_q = 4096, .seqlen_k = 4096,
                   .page_size = 64};
  sqlite3_int64 id = 0;
  CHECK_INT(fat_db_put_problem(db, &p, &id), 0);
  CHECK(id != 7);
  rows_of(h, "SELECT count(*) FROM problems WHERE seqlen_q = 4096", got, sizeof got);
  CHECK_STR(got, "2\n");
  p.page_size = 48;
  CHECK_INT(fat_db_put_problem(db, &p, &id), -1);
  CHECK(strstr(fat_db_errmsg(db), "CHECK constraint failed") != NULL);
  p.page_size = 8;
  CHECK_INT(fat_db_put_problem(db, &p, &id), -1);
  p.page_size = 64, p.direction = FAT_BWD;
  CHECK_INT(fat_db_put_problem(db, &p, &id), -1);
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  fat_db_close(db);
  db = NULL;
  test_schema_matches_new(path, fresh);
out:
  fat_db_close(db);
}

/* A version-7 database (tests/data/schema_v7.sql) with a paged problem
 * upgrades to version 10 by 8.sql to 10.sql: its variants and problems keep
 * their ids (and the builds, checks, timings and winners that name them
 * stay valid), its schema the new one; an e4m3 forward problem and variant
 * (the reason for version 8) can then be stored, and an e4m3 backward
 * problem or variant is refused by the CHECKs. */
static void test_v7_upgrade(const char *path, const char *fresh) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 7, "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads,"
                    " heads_k, seqlen_q, seqlen_k, page_size) VALUES"
                    " (14, 'fwd', 'bf16', 'none', 128, 2, 16, 16, 1024, 1024, 64)");
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, dtype, seqlen_q, page_size FROM problems ORDER BY id", got, sizeof got);
  CHECK_STR(got, "3|fp16|1024|0\n7|bf16|4096|0\n14|bf16|1024|64\n");
  rows_of(h, "SELECT id, name, source FROM variants ORDER BY id", got, sizeof got);
  CHECK_STR(got, "5|fwd.mma80.bf16.d128.causal.a|source a\n9|fwd.mma80.fp16.d64.none.b|source b\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  rows_of(h, "SELECT timing_id, variant, dtype FROM timing_conditions ORDER BY timing_id", got,
          sizeof got);
  CHECK_STR(got, "31|fwd.mma80.bf16.d128.causal.a|bf16\n32|fwd.mma80.fp16.d64.none.b|fp16\n");
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  fat_problem p = {.direction = FAT_FWD, .dtype = FAT_E4M3, .mask = FAT_MASK_CAUSAL, .head_dim = 128,
                   .batch = 4, .heads = 16, .heads_k = 16, .seqlen_q = 4096, .seqlen_k = 4096};
  sqlite3_int64 id = 0, again = 0;
  CHECK_INT(fat_db_put_problem(db, &p, &id), 0);
  CHECK(id > 14);
  CHECK_INT(fat_db_put_problem(db, &p, &again), 0);
  CHECK_INT(again, id);
  p.direction = FAT_BWD;
  CHECK_INT(fat_db_put_problem(db, &p, &again), -1);
  CHECK(strstr(fat_db_errmsg(db), BWD_CHECK) != NULL);
  fat_variant v = {0};
  v.name = "fwd.ws90.e4m3.d128.causal.m128n128s2op", v.family = "ws90", v.params = "P=5";
  v.entry = "f", v.source = "source e";
  memset(v.hash, 'e', 64);
  v.direction = FAT_FWD, v.dtype = FAT_E4M3, v.mask = FAT_MASK_CAUSAL, v.head_dim = 128;
  v.block_m = 128, v.threads = 384, v.smem_bytes = 200000;
  CHECK_INT(fat_db_put_variant(db, &v, &id), 0);
  CHECK(id > 9);
  rows_of(h, "SELECT dtype, direction FROM variants WHERE name LIKE '%e4m3%'", got, sizeof got);
  CHECK_STR(got, "e4m3|fwd\n");
  v.name = "bwd.ws90.e4m3.d128.causal.x", v.direction = FAT_BWD;
  memset(v.hash, 'f', 64);
  CHECK_INT(fat_db_put_variant(db, &v, &id), -1);
  CHECK(strstr(fat_db_errmsg(db), BWD_CHECK) != NULL);
  fat_db_close(db);
  db = NULL;
  test_schema_matches_new(path, fresh);
out:
  fat_db_close(db);
}

/* A version-8 database (tests/data/schema_v8.sql) with an e4m3 forward
 * problem and variant upgrades to version 10 by 9.sql and 10.sql: its variants
 * and problems keep their ids (and the builds, checks, timings and winners
 * that name them stay valid), the e4m3 rows as they were, its schema the
 * new one; a forward problem and variant of each fp8 K/V cache dtype (the
 * reason for version 9) can then be stored -- a paged problem among them,
 * the decoding families' -- and their backward is refused by the CHECKs,
 * as e4m3's still is. */
static void test_v8_upgrade(const char *path, const char *fresh) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 8, "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads,"
                    " heads_k, seqlen_q, seqlen_k) VALUES"
                    " (15, 'fwd', 'e4m3', 'causal', 128, 4, 16, 16, 4096, 4096);"
                    "INSERT INTO variants (id, name, family, direction, dtype, mask, head_dim, params,"
                    " entry, block_m, threads, smem_bytes, source_hash, source) VALUES"
                    " (12, 'fwd.ws90.e4m3.d128.causal.c', 'ws90', 'fwd', 'e4m3', 'causal', 128, 'P=3',"
                    "  'f', 128, 384, 200000, " HEX64("d") ", 'source c')");
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, direction, dtype, seqlen_q FROM problems ORDER BY id", got, sizeof got);
  CHECK_STR(got, "3|fwd|fp16|1024\n7|fwd|bf16|4096\n15|fwd|e4m3|4096\n");
  rows_of(h, "SELECT id, dtype, source FROM variants ORDER BY id", got, sizeof got);
  CHECK_STR(got, "5|bf16|source a\n9|fp16|source b\n12|e4m3|source c\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  rows_of(h, "SELECT timing_id, variant, dtype FROM timing_conditions ORDER BY timing_id", got,
          sizeof got);
  CHECK_STR(got, "31|fwd.mma80.bf16.d128.causal.a|bf16\n32|fwd.mma80.fp16.d64.none.b|fp16\n");
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  static const fat_dtype kv8[] = {FAT_FP16_E4M3KV, FAT_BF16_E4M3KV};
  for (int i = 0; i < 2; i++) {
    char name[96];
    fat_problem p = {.direction = FAT_FWD, .dtype = kv8[i], .mask = FAT_MASK_NONE, .head_dim = 128,
                     .batch = 8, .heads = 32, .heads_k = 8, .seqlen_q = 1, .seqlen_k = 8192,
                     .page_size = 256};
    sqlite3_int64 id = 0, again = 0;
    CHECK_INT(fat_db_put_problem(db, &p, &id), 0);
    CHECK(id > 15);
    CHECK_INT(fat_db_put_problem(db, &p, &again), 0);
    CHECK_INT(again, id);
    p.direction = FAT_BWD, p.page_size = 0;
    CHECK_INT(fat_db_put_problem(db, &p, &again), -1);
    CHECK(strstr(fat_db_errmsg(db), BWD_CHECK) != NULL);
    fat_variant v = {0};
    snprintf(name, sizeof name, "fwd.splitkv.%s.d128.none.m64n64w4s2", fat_dtype_name(kv8[i]));
    v.name = name, v.family = "splitkv", v.params = "P=6";
    v.entry = "f", v.source = "source k";
    memset(v.hash, i ? '9' : '8', 64);
    v.direction = FAT_FWD, v.dtype = kv8[i], v.mask = FAT_MASK_NONE, v.head_dim = 128;
    v.block_m = 64, v.threads = 128, v.smem_bytes = 24576;
    CHECK_INT(fat_db_put_variant(db, &v, &id), 0);
    CHECK(id > 12);
    v.direction = FAT_BWD;
    CHECK_INT(fat_db_put_variant(db, &v, &id), -1);
    CHECK(strstr(fat_db_errmsg(db), BWD_CHECK) != NULL);
  }
  rows_of(h, "SELECT dtype, direction, name FROM variants WHERE dtype LIKE '%kv' ORDER BY dtype",
          got, sizeof got);
  CHECK_STR(got, "bf16-e4m3kv|fwd|fwd.splitkv.bf16-e4m3kv.d128.none.m64n64w4s2\n"
                 "fp16-e4m3kv|fwd|fwd.splitkv.fp16-e4m3kv.d128.none.m64n64w4s2\n");
  rows_of(h, "SELECT dtype, page_size FROM problems WHERE dtype LIKE '%kv' ORDER BY dtype", got,
          sizeof got);
  CHECK_STR(got, "bf16-e4m3kv|256\nfp16-e4m3kv|256\n");
  /* e4m3 has no backward still: the new CHECK names the dtypes that do. */
  fat_problem e = {.direction = FAT_BWD, .dtype = FAT_E4M3, .mask = FAT_MASK_CAUSAL, .head_dim = 128,
                   .batch = 4, .heads = 16, .heads_k = 16, .seqlen_q = 4096, .seqlen_k = 4096};
  sqlite3_int64 eid = 0;
  CHECK_INT(fat_db_put_problem(db, &e, &eid), -1);
  CHECK(strstr(fat_db_errmsg(db), BWD_CHECK) != NULL);
  /* A dtype the schema does not know is still refused by name. */
  CHECK(sqlite3_exec(h, "INSERT INTO problems (direction, dtype, mask, head_dim, batch, heads,"
                        " heads_k, seqlen_q, seqlen_k) VALUES"
                        " ('fwd', 'fp16-e5m2kv', 'none', 128, 1, 8, 8, 1, 1024)",
                     NULL, NULL, NULL) != SQLITE_OK);
  CHECK_STR(sqlite3_errmsg(h), "CHECK constraint failed: dtype IN ('fp16', 'bf16', 'e4m3',"
                               " 'fp16-e4m3kv', 'bf16-e4m3kv')");
  fat_db_close(db);
  db = NULL;
  test_schema_matches_new(path, fresh);
out:
  fat_db_close(db);
}

/* A version-9 database (tests/data/schema_v9.sql) upgrades to version 10
 * by 10.sql alone: its timings and winners keep their ids, no elimination
 * is made up for a decision taken before; decided again, the problem gets
 * a row for each candidate not timed in full -- a screening 1.5x the best
 * after 5 repetitions, a drop 2x after 1 -- against the winner's timing,
 * and none for the winner; an elimination naming a timing of another
 * problem is refused; --retune (fat_db_forget) removes them; its schema is
 * the new one. */
static void test_v9_upgrade(const char *path, const char *fresh) {
  char err[ERRLEN], got[TEXT_CAP];
  fat_db *db = NULL;
  make_old(path, 9, "INSERT INTO variants (id, name, family, direction, dtype, mask, head_dim,"
                    " params, entry, block_m, threads, smem_bytes, source_hash, source) VALUES"
                    " (13, 'fwd.mma80.bf16.d128.causal.d', 'mma80', 'fwd', 'bf16', 'causal', 128,"
                    "  'P=4', 'f', 64, 128, 49152, " HEX64("e") ", 'source d'),"
                    " (14, 'fwd.mma80.bf16.d128.causal.e', 'mma80', 'fwd', 'bf16', 'causal', 128,"
                    "  'P=5', 'f', 64, 128, 49152, " HEX64("f") ", 'source e');"
                    "INSERT INTO checks (id, variant_id, gpu_id, problem_id, batch, heads, seqlen_q,"
                    " seqlen_k, rel_l2, max_abs, lse_max_abs, nonfinite, passed, reason) VALUES"
                    " (23, 13, 4, 7, 1, 2, 256, 256, 0.002, 0.01, 1e-5, 0, 1, 'ok'),"
                    " (24, 14, 4, 7, 1, 2, 256, 256, 0.002, 0.01, 1e-5, 0, 1, 'ok');"
                    "INSERT INTO timings (id, variant_id, gpu_id, problem_id, reps, median_ms,"
                    " min_ms, max_ms, p10_ms, p90_ms, tflops, sm_clock_mhz) VALUES"
                    " (36, 13, 4, 7, 5, 3.0, 2.9, 3.2, 2.95, 3.1, 200, 1980),"
                    " (37, 14, 4, 7, 1, 4.0, 4.0, 4.0, 4.0, 4.0, 150, 1980)");
  CHECK_INT(fat_db_open(path, &db, err, sizeof err), 0);
  REQUIRE(db);
  sqlite3 *h = fat_db_handle(db);
  rows_of(h, "PRAGMA user_version", got, sizeof got);
  CHECK_STR(got, "10\n");
  rows_of(h, "SELECT id, variant_id, reps, median_ms FROM timings ORDER BY id", got, sizeof got);
  CHECK_STR(got, "31|5|20|2.0\n32|9|20|0.5\n36|13|5|3.0\n37|14|1|4.0\n");
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id FROM winners ORDER BY problem_id",
          got, sizeof got);
  CHECK_STR(got, "4|3|9|32\n4|7|5|31\n");
  rows_of(h, "SELECT count(*) FROM eliminations", got, sizeof got);
  CHECK_STR(got, "0\n");
  rows_of(h, "PRAGMA foreign_key_check", got, sizeof got);
  CHECK_STR(got, "");
  fat_db_choice best;
  int found = 0, changed = -1;
  CHECK_INT(fat_db_decide_winner(db, 4, 7, &best, &found, &changed), 0);
  CHECK_INT(found, 1);
  CHECK_INT(changed, 0);
  CHECK_INT(best.variant_id, 5);
  rows_of(h, "SELECT gpu_id, problem_id, variant_id, timing_id, best_timing_id, ratio, reps"
             " FROM eliminations ORDER BY variant_id", got, sizeof got);
  CHECK_STR(got, "4|7|13|36|31|1.5|5\n4|7|14|37|31|2.0|1\n");
  fat_db_elimination e[4];
  size_t n = 0, total = 0, drops = 0;
  CHECK_INT(fat_db_eliminations(db, 4, 7, e, 1, &n, &total, &drops), 0);
  CHECK_INT(n, 1);
  CHECK_INT(total, 2);
  CHECK_INT(drops, 1);
  CHECK_STR(e[0].name, "fwd.mma80.bf16.d128.causal.d");
  CHECK_STR(e[0].best, "fwd.mma80.bf16.d128.causal.a");
  CHECK(e[0].ratio == 1.5 && e[0].reps == 5 && e[0].median_ms == 3.0 && e[0].best_ms == 2.0);
  /* An elimination is of its problem's timings. */
  CHECK(sqlite3_exec(h, "INSERT INTO eliminations (gpu_id, problem_id, variant_id, timing_id,"
                        " best_timing_id, ratio, reps) VALUES (4, 7, 9, 32, 31, 0.25, 20)",
                     NULL, NULL, NULL) != SQLITE_OK);
  CHECK_STR(sqlite3_errmsg(h), "elimination timings are not live timings of its GPU and problem");
  long long retired = 0;
  CHECK_INT(fat_db_forget(db, 4, 7, &retired), 0);
  rows_of(h, "SELECT count(*) FROM eliminations", got, sizeof got);
  CHECK_STR(got, "0\n");
  fat_db_close(db);
  db = NULL;
  test_schema_matches_new(path, fresh);
out:
  fat_db_close(db);
}

int main(void) {
  char upgraded[256], fresh[256], broken[256], v2[256], v3[256], v4[256], v5[256], v6[256], v7[256],
      v8[256], v9[256];
  REQUIRE_EXIT(mkdtemp(tmpdir));
  snprintf(upgraded, sizeof upgraded, "%s/v1.db", tmpdir);
  snprintf(fresh, sizeof fresh, "%s/new.db", tmpdir);
  snprintf(broken, sizeof broken, "%s/broken.db", tmpdir);
  snprintf(v2, sizeof v2, "%s/v2.db", tmpdir);
  snprintf(v3, sizeof v3, "%s/v3.db", tmpdir);
  snprintf(v4, sizeof v4, "%s/v4.db", tmpdir);
  snprintf(v5, sizeof v5, "%s/v5.db", tmpdir);
  snprintf(v6, sizeof v6, "%s/v6.db", tmpdir);
  snprintf(v7, sizeof v7, "%s/v7.db", tmpdir);
  snprintf(v8, sizeof v8, "%s/v8.db", tmpdir);
  snprintf(v9, sizeof v9, "%s/v9.db", tmpdir);
  test_rows_and_ids_kept(upgraded);
  test_schema_matches_new(upgraded, fresh);
  test_local_problem_stored(upgraded);
  test_varlen_problem_stored(upgraded);
  test_broken_file_untouched(broken);
  test_v2_upgrade(v2, fresh);
  test_v3_upgrade(v3, fresh);
  test_v4_upgrade(v4, fresh);
  test_v5_upgrade(v5, fresh);
  test_v6_upgrade(v6, fresh);
  test_v7_upgrade(v7, fresh);
  test_v8_upgrade(v8, fresh);
  test_v9_upgrade(v9, fresh);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return check_summary("test_db_migrate");
}
