/* SPDX-License-Identifier: MIT */
/* Shipped tables (tuner/tables/tables.h) on databases built here: export -> import
 * -> export is byte-identical; importing or merging twice adds nothing; the
 * exported text is one INSERT per line with blobs as X'hex'; local windows
 * travel as part of the problem key; a table exported by a schema-1 fatune
 * (no window columns) still imports, and a schema-1 database still merges,
 * both to what today's export gives; an import that tries anything but
 * INSERT into fatune's tables is refused with its reason; the command
 * line's usage errors. The winners are real variants of today's generator
 * (import and merge refuse any other: test_tables_trust shows how), and the
 * imports keep cubins as the build's own tables do, so that a round trip
 * gives the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "db.h"
#include "gen.h"
#include "sha256.h"
#include "tables.h"
#include "tune.h"
#include "check.h"

#define H200 "NVIDIA H200"

/* A winner with a cubin build, a source with quotes and newlines, two
 * checks and a fractional timing: everything export must carry exactly. */
/* When set, the next put_variant's problem has this window {left, right}. */
static const int *window_override;
/* When set, the next put_variant's problem is this variable-length profile. */
static const char *lengths_override;

/* The generator, and what the imports and merges here are checked against. */
static fat_gen *gen;
static fat_trust *trust;

/* The K-th variant of today's space for (DIR, bf16, MK, d128) on sm_90a
 * whose params contain WITH ("" for any). Kept for the whole test. */
static const fat_variant *real_variant(fat_direction dir, fat_mask mk, const char *with, int k) {
  static fat_variant *cache[2][3];
  static size_t n_cache[2][3];
  char err[1024];
  if (!cache[dir][mk]) {
    int hd = 128;
    fat_dtype dt = FAT_BF16;
    fat_gen_query q = {.direction = dir, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                       .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
    REQUIRE_EXIT(fat_gen_variants(gen, &q, &cache[dir][mk], &n_cache[dir][mk], NULL, NULL, err,
                                  sizeof err) == 0);
  }
  for (size_t i = 0; i < n_cache[dir][mk]; i++)
    if (strstr(cache[dir][mk][i].params, with) && k-- == 0) return &cache[dir][mk][i];
  REQUIRE_EXIT(!"no such variant");
  return NULL;
}

/* V as a result on GPU at SEQLEN (its problem: V's direction, dtype, mask
 * and head dim; the window or profile of the overrides), with a cubin
 * build, two checks (the second failed unless PASSED) and a fractional
 * timing, the winner if WINNER: everything export must carry exactly. */
static void put_variant(fat_db *db, const char *gpu, const fat_variant *v, int seqlen, double ms,
                        int passed, int winner) {
  fat_gpu_info g = {0};
  snprintf(g.name, sizeof g.name, "%s", gpu);
  g.cc_major = 9, g.sm_count = 132, g.driver_version = 13000, g.nvrtc_major = 13;
  g.mem_bytes = 150ull << 30, g.smem_per_block_optin = 232448;
  fat_problem p;
  fat_bench_problem(v->dtype, v->mask, v->head_dim, seqlen, &p);
  p.direction = v->direction;
  if (window_override) p.window_left = window_override[0], p.window_right = window_override[1];
  if (lengths_override) {
    char why[256];
    REQUIRE_EXIT(fat_lengths_parse(lengths_override, &p.lengths, why, sizeof why) == 0);
    fat_lengths_apply(&p);
  }
  unsigned char cubin[] = {0x7f, 'E', 'L', 'F', 0, 1, 0xff};
  fat_build b = {0};
  snprintf(b.arch, sizeof b.arch, "sm_90a");
  fat_sha256_hex(v->name, strlen(v->name), b.key);
  b.ok = 1, b.cubin = cubin, b.cubin_size = sizeof cubin, b.registers = 168, b.compile_ms = 812.25;
  b.log = "ptxas info";
  fat_check c1 = {1, 2, 256, 256, 0.0021, 0.0123, 1e-5, 0, 1, "ok"};
  fat_check c2 = {1, 2, 203, 203, 1.0 / 3.0, 0.1, 2e-6, 0, passed, "ok"};
  if (!passed) snprintf(c2.reason, sizeof c2.reason, "dQ rel_l2 3.3e-01 > 2.0e-02");
  c2.rel_l2 = 0.0019999999999999999;
  fat_timing t = {20, ms, ms * 0.9, ms * 1.2, ms * 0.95, ms * 1.05, 1.0 / ms, 1755};
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE_EXIT(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE_EXIT(fat_db_put_variant(db, v, &vid) == 0);
  REQUIRE_EXIT(fat_db_put_build(db, vid, &b, "--std=c++17", "13.0") == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c1) == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c2) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  if (winner) REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
}

static void put_winner(fat_db *db, const char *gpu, const fat_variant *v, int seqlen, double ms) {
  put_variant(db, gpu, v, seqlen, ms, 1, 1);
}

/* A winner whose variant the generator does not make (a stand-in source
 * with quotes, a tab and CR LF; or SOURCE): for what export writes. */
static void put_stand_in(fat_db *db, const char *vname, const char *source) {
  char text[256];
  fat_variant v = *real_variant(FAT_FWD, FAT_MASK_NONE, "", 0);
  snprintf(text, sizeof text, "// '%s'\n\textern \"C\" __global__ void f() {}\r\n", vname);
  v.name = (char *)vname, v.entry = "f", v.source = source ? (char *)source : text;
  fat_sha256_hex(v.source, strlen(v.source), v.hash);
  put_winner(db, H200, &v, 1024, 1.0);
}

static char *export_text(const char *path, const char *gpu) {
  char err[1024];
  fat_db *db = NULL;
  char *buf = NULL;
  size_t len = 0;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  FILE *f = open_memstream(&buf, &len);
  int rc = fat_tables_export(db, gpu, f, err, sizeof err);
  fclose(f);
  if (rc) fprintf(stderr, "export: %s\n", err);
  REQUIRE_EXIT(rc == 0);
  fat_db_close(db);
  return buf;
}

/* As the build imports the shipped tables: cubins kept, so that a round
 * trip gives the same bytes. */
static fat_import_options shipped(void) {
  return (fat_import_options){.trust = trust, .cubins = FAT_CUBINS_SHIPPED};
}

static long long import_text(const char *path, const char *text, char *err, size_t errlen) {
  fat_db *db = NULL;
  fat_tables_report r;
  const fat_import_options o = shipped();
  long long added = -1;
  REQUIRE_EXIT(fat_db_open(path, &db, err, errlen) == 0);
  if (fat_tables_import(db, text, "t.sql", &o, &r, err, errlen) == 0) added = r.added;
  fat_db_close(db);
  return added;
}

/* fat_tables_merge of PATH into DB as the build would; *ADDED its new rows. */
static int merge(fat_db *db, const char *path, long long *added, char *err, size_t errlen) {
  fat_tables_report r;
  const fat_import_options o = shipped();
  int rc = fat_tables_merge(db, path, &o, &r, err, errlen);
  *added = rc ? -1 : r.added;
  return rc;
}

/* TEXT as a fatune of schema VERSION (1 or 2) exported it: problems
 * without the lengths column (version 2: every problem dense), and for
 * version 1 without the window columns either (every window 0, 0); the
 * header naming the version. */
static char *as_old_export(const char *text, int version) {
  static const char *const lengths_col = ", lengths", *lengths_val = ", '');\n";
  static const char *const window_cols = ", window_left, window_right", *window_vals = ", 0, 0);\n";
  char *out = malloc(strlen(text) + 1), *w = out;
  REQUIRE_EXIT(out);
  for (const char *l = text; *l;) {
    const char *nl = strchr(l, '\n');
    size_t len = nl ? (size_t)(nl - l) + 1 : strlen(l);
    memcpy(w, l, len);
    w[len] = 0;
    char *h = strstr(w, "schema version 3;");
    if (!strncmp(w, "INSERT INTO problems ", 21)) {
      char *c = strstr(w, lengths_col), *v = strstr(w, lengths_val);
      REQUIRE_EXIT(c && v);
      memmove(v, v + 4, strlen(v + 4) + 1);  /* ", '');" -> ");" */
      memmove(c, c + strlen(lengths_col), strlen(c + strlen(lengths_col)) + 1);
      if (version == 1) {
        c = strstr(w, window_cols), v = strstr(w, window_vals);
        REQUIRE_EXIT(c && v);
        memmove(v, v + 6, strlen(v + 6) + 1);  /* ", 0, 0);" -> ");" */
        memmove(c, c + strlen(window_cols), strlen(c + strlen(window_cols)) + 1);
      }
    }
    if (h) h[strlen("schema version ")] = (char)('0' + version);
    w += strlen(w);
    l += len;
  }
  return out;
}

/* A database of schema VERSION (1 or 2) at PATH holding the rows of TEXT,
 * a table of that version (its INSERTs run as they are, as that fatune's
 * own import would have). */
static void make_old_db(const char *path, int version, const char *text) {
  char schema_path[4096], *schema = NULL;
  const char *src = getenv("FATUNE_SOURCE_DIR");
  REQUIRE_EXIT(src);
  snprintf(schema_path, sizeof schema_path, "%s/tests/data/schema_v%d.sql", src, version);
  FILE *f = fopen(schema_path, "rb");
  size_t n = 0;
  REQUIRE_EXIT(f && (schema = calloc(1, 1 << 20)) && (n = fread(schema, 1, (1 << 20) - 1, f)) > 0);
  fclose(f);
  sqlite3 *h = NULL;
  char *msg = NULL;
  REQUIRE_EXIT(sqlite3_open(path, &h) == SQLITE_OK);
  int rc = sqlite3_exec(h, schema, NULL, NULL, &msg);
  if (rc == SQLITE_OK) rc = sqlite3_exec(h, text, NULL, NULL, &msg);
  if (rc) fprintf(stderr, "schema-%d database: %s\n", version, msg);
  REQUIRE_EXIT(rc == SQLITE_OK);
  sqlite3_close(h);
  free(schema);
}

static int count_lines(const char *s, const char *prefix) {
  int n = 0;
  for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    n += !strncmp(l, prefix, strlen(prefix));
  return n;
}

/* A backward winner timed twice, whose earlier timing is the faster: the
 * winner's timing and the deterministic pick (the fastest) are two timings
 * of one variant, and its checks (two rounds of the same shapes) go out
 * once each. */
static void one_variant_timed_twice(const char *dir) {
  char path[300], path2[300], err[1024];
  fat_db *db = NULL;
  const fat_variant *sep = real_variant(FAT_BWD, FAT_MASK_NONE, "DQ_MODE=separate", 0);
  snprintf(path, sizeof path, "%s/twice.db", dir);
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  put_variant(db, H200, sep, 2048, 2.0, 1, 0);
  put_variant(db, H200, sep, 2048, 3.0, 1, 1);
  fat_db_close(db);
  char *text = export_text(path, H200);
  CHECK_INT(count_lines(text, "INSERT INTO variants "), 1);
  CHECK_INT(count_lines(text, "INSERT INTO timings "), 2);
  CHECK_INT(count_lines(text, "INSERT INTO checks "), 4);
  CHECK_INT(count_lines(text, "INSERT INTO winners (gpu_id, problem_id, variant_id, timing_id, "
                              "chosen_at) VALUES (1, 1, 1, 2, "), 1);
  snprintf(path2, sizeof path2, "%s/twice-imported.db", dir);
  CHECK(import_text(path2, text, err, sizeof err) > 0);
  char *again = export_text(path2, H200);
  CHECK_STR(again, text);
  free(again), free(text);
}

int main(void) {
  char dir[] = "/tmp/fatune-tables-XXXXXX", a[256], b[256], c[256], err[1024];
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(a, sizeof a, "%s/a.db", dir);
  snprintf(b, sizeof b, "%s/b.db", dir);
  snprintf(c, sizeof c, "%s/c.db", dir);
  fat_db *db = NULL;
  REQUIRE_EXIT((gen = fat_gen_open(NULL, err, sizeof err)) && (trust = fat_trust_open(gen)));
  REQUIRE_EXIT(fat_db_open(a, &db, err, sizeof err) == 0);
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 0), 1024, 0.123456789);
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_NONE, "", 0), 2048, 1.5);
  const fat_variant *on_a100 = real_variant(FAT_FWD, FAT_MASK_NONE, "", 1);
  put_winner(db, "NVIDIA A100-SXM4-80GB", on_a100, 2048, 2.5);
  fat_db_close(db);

  /* Export: one GPU's rows, one INSERT per line, a header naming fatune. */
  char *first = export_text(a, H200);
  CHECK(!strncmp(first, FAT_TABLES_MAGIC ": the tuned winners for NVIDIA H200\n",
                 strlen(FAT_TABLES_MAGIC ": the tuned winners for NVIDIA H200\n")));
  CHECK(strstr(first, "-- Generated by fatune " FAT_VERSION " (fatune export)") != NULL);
  CHECK_INT(count_lines(first, "INSERT INTO gpus "), 1);
  CHECK_INT(count_lines(first, "INSERT INTO variants "), 2);
  CHECK_INT(count_lines(first, "INSERT INTO builds "), 2);
  CHECK_INT(count_lines(first, "INSERT INTO build_hashes "), 2);
  CHECK_INT(count_lines(first, "INSERT INTO checks "), 4);
  CHECK_INT(count_lines(first, "INSERT INTO timings "), 2);
  CHECK_INT(count_lines(first, "INSERT INTO winners "), 2);
  CHECK_INT(count_lines(first, "INSERT"), 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
  CHECK(strstr(first, "X'7f454c460001ff'") != NULL);
  CHECK(strstr(first, "' || char(10) || '") != NULL);
  CHECK(strstr(first, "A100") == NULL);
  CHECK(strstr(first, on_a100->name) == NULL);

  /* Round trip: byte-identical. */
  CHECK_INT(import_text(b, first, err, sizeof err), 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
  char *second = export_text(b, H200);
  CHECK_STR(second, first);
  /* Importing again adds nothing. */
  CHECK_INT(import_text(b, first, err, sizeof err), 0);
  char *third = export_text(b, H200);
  CHECK_STR(third, first);

  /* Merge another machine's database: the A100 comes in once. */
  REQUIRE_EXIT(fat_db_open(b, &db, err, sizeof err) == 0);
  long long added = -1;
  CHECK_INT(merge(db, a, &added, err, sizeof err), 0);
  CHECK_INT(added, 8); /* the A100's gpu, variant, build, its hash, problem, 2 checks, timing... */
  CHECK_INT(merge(db, a, &added, err, sizeof err), 0);
  CHECK_INT(added, 0);
  CHECK_INT(merge(db, c, &added, err, sizeof err), -1);
  char want[512];
  snprintf(want, sizeof want, "cannot read %s: No such file or directory", c);
  CHECK_STR(err, want);
  fat_db_close(db);
  char *a100 = export_text(b, "NVIDIA A100-SXM4-80GB");
  CHECK_INT(count_lines(a100, "INSERT INTO winners "), 1);
  REQUIRE_EXIT(fat_db_open(b, &db, err, sizeof err) == 0);
  FILE *devnull = fopen("/dev/null", "w");
  CHECK_INT(fat_tables_export(db, "NVIDIA B200", devnull, err, sizeof err), -1);
  CHECK_STR(err, "no winners for GPU 'NVIDIA B200' in the database");
  fclose(devnull);
  fat_db_close(db);

  /* Import executes nothing but INSERTs into fatune's tables. */
  CHECK_INT(import_text(c, "-- fatune tables 1\nDROP TABLE winners;\n-- end of fatune tables\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql:2: refused DELETE FROM 'sqlite_master': a table may only INSERT into fatune's tables");
  CHECK_INT(import_text(c, "-- fatune tables 1\nINSERT INTO sqlite_master VALUES (1);\n-- end of fatune tables\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql:2: refused INSERT INTO 'sqlite_master': a table may only INSERT into fatune's tables");
  CHECK_INT(import_text(c, "-- fatune tables 1\nATTACH '/tmp/x.db' AS x;\n-- end of fatune tables\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql:2: refused ATTACH '/tmp/x.db': a table may only INSERT into fatune's tables");
  CHECK_INT(import_text(c, "-- fatune tables 1\nINSERT INTO gpus (name) SELECT load_extension('x');\n-- end of fatune tables\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql:2: refused SELECT: a table may only INSERT into fatune's tables");
  CHECK_INT(import_text(c, "INSERT INTO gpus VALUES (1);\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql: not a fatune table (first line must start '-- fatune tables 1')");
  REQUIRE_EXIT(fat_db_open(c, &db, err, sizeof err) == 0);
  sqlite3_stmt *s = NULL;
  REQUIRE_EXIT(sqlite3_prepare_v2(fat_db_handle(db), "SELECT count(*) FROM winners", -1, &s, NULL) == SQLITE_OK);
  REQUIRE_EXIT(sqlite3_step(s) == SQLITE_ROW);
  CHECK_INT(sqlite3_column_int(s, 0), 0);
  sqlite3_finalize(s);
  fat_db_close(db);

  /* A backward problem exports its winner and, for deterministic
   * gradients, its fastest passed variant without atomics: not a slower
   * one, not a faster one that failed a check. */
  char d[256];
  const fat_variant *atomic = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=atomic", 0);
  const fat_variant *sep_slow = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=separate", 0);
  const fat_variant *sep_fast = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=separate", 1);
  const fat_variant *sep_failed = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=separate", 2);
  snprintf(d, sizeof d, "%s/d.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_variant(db, H200, atomic, 4096, 2.0, 1, 1);
  put_variant(db, H200, sep_slow, 4096, 3.5, 1, 0);
  put_variant(db, H200, sep_fast, 4096, 3.0, 1, 0);
  put_variant(db, H200, sep_failed, 4096, 2.5, 0, 0);
  fat_db_close(db);
  char *bwd = export_text(d, H200), quoted[256];
  CHECK_INT(count_lines(bwd, "INSERT INTO variants "), 2);
  CHECK_INT(count_lines(bwd, "INSERT INTO timings "), 2);
  CHECK_INT(count_lines(bwd, "INSERT INTO winners "), 1);
  snprintf(quoted, sizeof quoted, "'%s'", atomic->name);
  CHECK(strstr(bwd, quoted) != NULL);
  snprintf(quoted, sizeof quoted, "'%s'", sep_fast->name);
  CHECK(strstr(bwd, quoted) != NULL);
  snprintf(quoted, sizeof quoted, "'%s'", sep_slow->name);
  CHECK(strstr(bwd, quoted) == NULL);
  snprintf(quoted, sizeof quoted, "'%s'", sep_failed->name);
  CHECK(strstr(bwd, quoted) == NULL);
  snprintf(d, sizeof d, "%s/e.db", dir);
  CHECK_INT(import_text(d, bwd, err, sizeof err), 1 + 2 + 2 + 2 + 1 + 4 + 2 + 1);
  char *bwd2 = export_text(d, H200);
  CHECK_STR(bwd2, bwd);
  free(bwd);
  free(bwd2);

  /* A source of thousands of lines (an inlined backward kernel) stays one
   * INSERT line that SQLite can parse: its concatenation is chunked, not
   * one chain deeper than SQLite's expression limit of 1000. The backward
   * above (over a thousand lines) came back whole; so does this stand-in of
   * 5000, as far as an import goes with it: parsed and stored, then refused
   * by the generator check, which no stand-in passes. A stand-in with a
   * quote, a tab and CR LF is written as SQL that gives them back. */
  size_t long_len = 5000 * 8 + 1;
  char *long_src = malloc(long_len), *w = long_src;
  for (int i = 0; i < 5000; i++) w += sprintf(w, "l%04d%s", i, i % 2 ? "\n" : "\r\n");
  snprintf(d, sizeof d, "%s/f.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_stand_in(db, "fwd.long", long_src);
  fat_db_close(db);
  char *long_sql = export_text(d, H200);
  CHECK_INT(count_lines(long_sql, "INSERT INTO variants "), 1);
  snprintf(d, sizeof d, "%s/g.db", dir);
  CHECK_INT(import_text(d, long_sql, err, sizeof err), -1);
  CHECK_STR(err, "t.sql: variant fwd.long: the generator does not produce this variant; refusing "
                 "the table");
  free(long_sql), free(long_src);
  snprintf(d, sizeof d, "%s/quotes.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_stand_in(db, "fwd.quoted", NULL);
  fat_db_close(db);
  char *quotes = export_text(d, H200);
  CHECK(strstr(quotes, "'// ''fwd.quoted''' || char(10) || '\textern \"C\" __global__ void f() {}'"
                       " || char(13) || '' || char(10) || ''") != NULL);
  free(quotes);

  /* Local windows travel: two windows of one shape are two problems,
   * exported with their windows, and come back the same. */
  static const int w256[2] = {256, 0}, w1024[2] = {1024, -1};
  snprintf(d, sizeof d, "%s/local.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  window_override = w256;
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_LOCAL, "", 0), 4096, 0.4);
  window_override = w1024;
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_LOCAL, "", 1), 4096, 0.9);
  window_override = NULL;
  fat_db_close(db);
  char *local = export_text(d, H200);
  CHECK(strstr(local, "database schema version 3;") != NULL);
  CHECK_INT(count_lines(local, "INSERT INTO problems "), 2);
  CHECK(strstr(local, "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads, "
                      "heads_k, seqlen_q, seqlen_k, window_left, window_right, lengths) VALUES (1, "
                      "'fwd', 'bf16', 'local', 128, 4, 16, 16, 4096, 4096, 256, 0, '');\n") != NULL);
  CHECK(strstr(local, "VALUES (2, 'fwd', 'bf16', 'local', 128, 4, 16, 16, 4096, 4096, 1024, -1, '');\n")
        != NULL);
  snprintf(d, sizeof d, "%s/local2.db", dir);
  CHECK_INT(import_text(d, local, err, sizeof err), 1 + 2 + 2 + 2 + 2 + 4 + 2 + 2);
  char *local2 = export_text(d, H200);
  CHECK_STR(local2, local);
  free(local), free(local2);

  /* Variable-length profiles travel: a profile is a problem of its own
   * beside the dense one of its batch and longest length, exported with
   * its lengths, and comes back the same (merged too). */
  snprintf(d, sizeof d, "%s/varlen.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 0), 3976, 0.8);
  lengths_override = "538,3976,2092";
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 1), 3976, 0.5);
  lengths_override = NULL;
  fat_db_close(db);
  char *varlen = export_text(d, H200);
  CHECK_INT(count_lines(varlen, "INSERT INTO problems "), 2);
  CHECK(strstr(varlen, "'bf16', 'causal', 128, 3, 16, 16, 3976, 3976, 0, 0, '538,3976,2092');\n")
        != NULL);
  snprintf(d, sizeof d, "%s/varlen2.db", dir);
  CHECK(import_text(d, varlen, err, sizeof err) > 0);
  char *varlen2 = export_text(d, H200);
  CHECK_STR(varlen2, varlen);
  char src_path[256];
  snprintf(src_path, sizeof src_path, "%s/varlen.db", dir);
  snprintf(d, sizeof d, "%s/varlen3.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  CHECK_INT(merge(db, src_path, &added, err, sizeof err), 0);
  fat_db_close(db);
  char *varlen3 = export_text(d, H200);
  CHECK_STR(varlen3, varlen);
  /* A profile whose longest is not its seqlen is refused at import. */
  char *at = strstr(varlen, "'538,3976,2092'");
  REQUIRE_EXIT(at);
  memcpy(at, "'538,3977,2092'", 15);
  snprintf(d, sizeof d, "%s/varlen4.db", dir);
  CHECK_INT(import_text(d, varlen, err, sizeof err), -1);
  CHECK(strstr(err, "seqlen_q 3976 is not its profile's longest, 3977") != NULL);
  free(varlen), free(varlen2), free(varlen3);

  /* A table exported by a fatune of schema 2 (no lengths: every problem
   * dense) or 1 (no windows either: every window 0, 0) imports, and
   * today's export of the result is today's format; so does a database of
   * that schema merge, read as it is and left at its version. */
  for (int version = 2; version >= 1; version--) {
    char *old = as_old_export(first, version), old_db[256], vname[32];
    /* (the kernel sources say "window" and "lengths": only the problems' columns count) */
    CHECK(strstr(old, ", lengths)") == NULL && strstr(old, ", '');\n") == NULL);
    CHECK(version > 1 || strstr(old, ", window_left, window_right)") == NULL);
    snprintf(vname, sizeof vname, "schema version %d;", version);
    CHECK(strstr(old, vname) != NULL);
    CHECK_INT(count_lines(old, "INSERT INTO problems "), 2);
    snprintf(d, sizeof d, "%s/from-v%d-table.db", dir, version);
    CHECK_INT(import_text(d, old, err, sizeof err), 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
    char *again = export_text(d, H200);
    CHECK_STR(again, first);
    free(again);
    snprintf(old_db, sizeof old_db, "%s/schema%d.db", dir, version);
    make_old_db(old_db, version, old);
    snprintf(d, sizeof d, "%s/from-v%d-db.db", dir, version);
    REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
    CHECK_INT(merge(db, old_db, &added, err, sizeof err), 0);
    CHECK_INT(added, 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
    fat_db_close(db);
    again = export_text(d, H200);
    CHECK_STR(again, first);
    free(again), free(old);
    sqlite3 *oh = NULL;
    REQUIRE_EXIT(sqlite3_open_v2(old_db, &oh, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    REQUIRE_EXIT(sqlite3_prepare_v2(oh, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK);
    REQUIRE_EXIT(sqlite3_step(s) == SQLITE_ROW);
    CHECK_INT(sqlite3_column_int(s, 0), version);
    sqlite3_finalize(s);
    sqlite3_close(oh);
  }

  /* The command line. */
  char *bad[] = {"export", "--db", b};
  CHECK_INT(fat_tables_main(3, bad), 2);
  char *unknown[] = {"frobnicate"};
  CHECK_INT(fat_tables_main(1, unknown), 2);
  char out_path[300];
  snprintf(out_path, sizeof out_path, "%s/h200.sql", dir);
  char *exp[] = {"export", "--db", b, "--gpu-name", H200, "-o", out_path};
  CHECK_INT(fat_tables_main(7, exp), 0);
  FILE *f = fopen(out_path, "r");
  REQUIRE_EXIT(f);
  char *from_cli = calloc(1, strlen(first) + 2);
  CHECK_INT((long long)fread(from_cli, 1, strlen(first) + 1, f), (long long)strlen(first));
  fclose(f);
  CHECK_STR(from_cli, first);
  /* Its temporary file is its own: a link planted at the name an export
   * once wrote through (PATH.tmp) is neither followed nor replaced, and
   * none is left behind, whether the export succeeds or fails. */
  char victim[300], planted[320], find[1024];
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(planted, sizeof planted, "%s.tmp", out_path);
  f = fopen(victim, "w");
  REQUIRE_EXIT(f && fputs("keep\n", f) >= 0 && fclose(f) == 0);
  REQUIRE_EXIT(symlink(victim, planted) == 0);
  CHECK_INT(fat_tables_main(7, exp), 0);
  char *kept = check_read_file(victim);
  CHECK_STR(kept, "keep\n");
  free(kept);
  char *again = check_read_file(out_path);
  CHECK_STR(again, first);
  free(again);
  char *unknown_gpu[] = {"export", "--db", b, "--gpu-name", "NVIDIA B200", "-o", out_path};
  CHECK_INT(fat_tables_main(7, unknown_gpu), 1);
  unlink(planted);
  snprintf(find, sizeof find, "test -z \"$(find %s -name '*.tmp')\"", dir);
  CHECK_INT(system(find), 0);
  /* `fatune import` checks each variant against the generator (these are
   * today's) and keeps no cubin: the runtime compiles the sources. */
  char *imp[] = {"import", "--db", c, out_path};
  CHECK_INT(fat_tables_main(4, imp), 0);
  REQUIRE_EXIT(fat_db_open(c, &db, err, sizeof err) == 0);
  REQUIRE_EXIT(sqlite3_prepare_v2(fat_db_handle(db), "SELECT (SELECT count(*) FROM winners) || ' '"
                                  " || (SELECT count(*) FROM builds)", -1, &s, NULL) == SQLITE_OK);
  REQUIRE_EXIT(sqlite3_step(s) == SQLITE_ROW);
  CHECK_STR((const char *)sqlite3_column_text(s, 0), "2 0");
  sqlite3_finalize(s);
  fat_db_close(db);
  char *fourth = export_text(b, H200);
  CHECK_STR(fourth, first);

  one_variant_timed_twice(dir);

  free(first), free(second), free(third), free(fourth), free(a100), free(from_cli);
  fat_trust_close(trust);
  fat_gen_close(gen);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_summary("test_tables");
}
