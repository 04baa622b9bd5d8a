/* SPDX-License-Identifier: MIT */
/* The trust model of issue 21 (tuner/tables/trust.h, db/tables/README.md "Trust"):
 * each hole the issue found, made again here with today's variants, and
 * refused with its exact message by import and merge alike, leaving the
 * target without a new row:
 *   1. a winner whose problem is not its variant's (fp16 none d64 edited to
 *      bf16 causal d128, a padded head dim on the wrong template);
 *   2. launch metadata edited away from the generator's (a split-KV
 *      variant's SPLITS, block_m, threads, shared memory), and a variant
 *      row's family, direction, dtype, mask or head dim not its name's;
 *   3. a merge source with an altered source under its old hash, edited
 *      rows, tables, views or triggers not fatune's, or no regular file;
 *      a source merged is opened read-only and left as it was;
 *   4. cubins: none comes in by default, the build's own tables keep
 *      theirs, and --keep-cubins keeps one only where this machine's NVRTC
 *      compiles it byte for byte;
 *   5. a failed build never comes in, so no tune takes it from the cache;
 * what the build's tables do with a stale variant (left out, or kept for
 * rehash); and, for a database written by hand, the runtime: it serves no
 * winner whose variant is not its problem's, and compiles no stored source
 * that does not hash to its source_hash (passed over, with a note), which
 * stale, retire-stale and rehash count stale. The GPU's measured ceilings
 * travel with its table (export, import, merge), each judged as a
 * measurement: a known name in its unit, finite, positive and no more than
 * any GPU reaches. A table carries no sources: import and merge fill in
 * the generator's, and a stale variant kept without one is named by the
 * stale check, retired, or filled in by rehash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "build_key.h"
#include "compile.h"
#include "db.h"
#include "fatune.h"
#include "gen.h"
#include "nvrtc_api.h"
#include "sha256.h"
#include "tables.h"
#include "problems.h"
#include "check.h"

#define H200 "NVIDIA H200"
#define H200_SMS 132
#define ERRLEN 1024
#define CUBIN_BYTES 7

static const unsigned char CUBIN[CUBIN_BYTES] = {0x7f, 'E', 'L', 'F', 0, 1, 0xff};
static char dir[] = "/tmp/fatune-trust-XXXXXX";
static int n_db;
static fat_gen *gen;
static fat_import_options checked;  /* what `fatune import` and `merge` use */

static const char *new_db(char *path, size_t cap) {
  snprintf(path, cap, "%s/db%d.db", dir, n_db++);
  return path;
}

/* Today's variants of (DIR, DT, MK, HD) on sm_90a (*N of them; kept). */
static fat_variant *space_of(fat_direction dir, fat_dtype dt, fat_mask mk, int hd, size_t *n) {
  char err[ERRLEN];
  fat_variant *v = NULL;
  fat_gen_query q = {.direction = dir, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
  REQUIRE_EXIT(fat_gen_variants(gen, &q, &v, n, NULL, NULL, err, sizeof err) == 0 && *n > 0);
  return v;
}

/* A stand-in build of V for sm_90a: seven bytes of cubin, hashed. */
static fat_build stand_in_build(const fat_variant *v) {
  fat_build b = {0};
  char keytext[512];
  snprintf(b.arch, sizeof b.arch, "sm_90a");
  snprintf(keytext, sizeof keytext, "%s/sm_90a", v->name);
  fat_sha256_hex(keytext, strlen(keytext), b.key);
  b.ok = 1, b.cubin = (unsigned char *)CUBIN, b.cubin_size = CUBIN_BYTES, b.registers = 96;
  b.compile_ms = 500, b.log = "";
  return b;
}

/* V as the checked, timed winner of its problem at seqlen 1024 on the
 * H200, with build B (NULL: none) made with OPTIONS and NVRTC_VERSION. */
static void put_result(fat_db *db, const fat_variant *v, const fat_build *b, const char *options,
                       const char *nvrtc_version) {
  fat_gpu_info g = {0};
  snprintf(g.name, sizeof g.name, H200);
  g.cc_major = 9, g.sm_count = H200_SMS, g.driver_version = 13000, g.nvrtc_major = 13;
  g.smem_per_block_optin = 232448;
  fat_problem p;
  fat_bench_problem(v->dtype, v->mask, v->head_dim, 1024, &p);
  p.direction = v->direction;
  fat_check c = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256, .rel_l2 = 0.002,
                 .max_abs = 0.01, .lse_max_abs = 1e-5, .nonfinite = 0, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 20, .median_ms = 1.0, .min_ms = 0.9, .max_ms = 1.2, .p10_ms = 0.95,
                  .p90_ms = 1.05, .tflops = 1.0, .sm_clock_mhz = 1755};
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE_EXIT(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE_EXIT(fat_db_put_variant(db, v, &vid) == 0);
  if (b) REQUIRE_EXIT(fat_db_put_build(db, vid, b, options, nvrtc_version) == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
}

/* A fresh database at PATH holding V's result with a stand-in cubin. */
static void db_of(const char *path, const fat_variant *v) {
  char err[ERRLEN];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  const fat_build b = stand_in_build(v);
  put_result(db, v, &b, "--std=c++17", "13.0");
  fat_db_close(db);
}

/* The exported text of the database at PATH. */
static char *export_of(const char *path) {
  char err[ERRLEN], *buf = NULL;
  size_t len = 0;
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  FILE *f = open_memstream(&buf, &len);
  REQUIRE_EXIT(fat_tables_export(db, H200, NULL, f, err, sizeof err) == 0);
  fclose(f);
  fat_db_close(db);
  return buf;
}

/* The table of V's result (with a stand-in cubin). */
static char *table_of(const fat_variant *v) {
  char path[256];
  db_of(new_db(path, sizeof path), v);
  return export_of(path);
}

/* The value of SQL on the database at PATH, as text ("" for no row). */
static void query(const char *path, const char *sql, char *out, size_t cap) {
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  out[0] = 0;
  REQUIRE_EXIT(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
  REQUIRE_EXIT(sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK);
  if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
    snprintf(out, cap, "%s", (const char *)sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  sqlite3_close(h);
}

/* SQL run on the database at PATH as it is (no fatune checks), as a hand
 * editing another machine's database would. */
static void tamper(const char *path, const char *sql) {
  sqlite3 *h = NULL;
  char *msg = NULL;
  REQUIRE_EXIT(sqlite3_open(path, &h) == SQLITE_OK);
  int rc = sqlite3_exec(h, sql, NULL, NULL, &msg);
  if (rc) fprintf(stderr, "tamper: %s\n", msg);
  REQUIRE_EXIT(rc == SQLITE_OK);
  sqlite3_close(h);
}

static const char *const ROWS_SQL =
    "SELECT (SELECT count(*) FROM gpus) + (SELECT count(*) FROM variants) + (SELECT count(*)"
    " FROM builds) + (SELECT count(*) FROM build_hashes) + (SELECT count(*) FROM problems) +"
    " (SELECT count(*) FROM checks) + (SELECT count(*) FROM timings) + (SELECT count(*) FROM"
    " winners)";

/* Expects TEXT (a table, or with MERGE the path of a database) refused
 * with WANT, and the fresh target left without a row. */
static void expect_refused(int line, int merge, const char *text, const char *want) {
  char path[256], err[ERRLEN] = "", rows[32];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  const int rc = merge ? fat_tables_merge(db, text, &checked, NULL, err, sizeof err)
                       : fat_tables_import(db, text, "t.sql", &checked, NULL, err, sizeof err);
  fat_db_close(db);
  if (!check_record(rc == -1 && !strcmp(err, want)))
    fprintf(stderr, "%s:%d: %s gave %d \"%s\",\n  want -1 \"%s\"\n", __FILE__, line,
            merge ? "merge" : "import", rc, err, want);
  query(path, ROWS_SQL, rows, sizeof rows);
  if (!check_record(!strcmp(rows, "0")))
    fprintf(stderr, "%s:%d: a refused %s left %s rows, want 0\n", __FILE__, line,
            merge ? "merge" : "import", rows);
}
#define IMPORT_REFUSED(text, want) expect_refused(__LINE__, 0, text, want)
#define MERGE_REFUSED(path, want) expect_refused(__LINE__, 1, path, want)

/* Imports TEXT into a fresh database (its path in PATH) with OPTS; 0 or -1. */
static int import_into(char *path, size_t cap, const char *text, const fat_import_options *opts,
                       fat_tables_report *r, char *err) {
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(new_db(path, cap), &db, err, ERRLEN) == 0);
  const int rc = fat_tables_import(db, text, "t.sql", opts, r, err, ERRLEN);
  fat_db_close(db);
  return rc;
}

/* TEXT with FROM replaced by TO in the first line starting LINE (heap). */
static char *edited(const char *text, const char *line, const char *from, const char *to) {
  const char *l = strstr(text, line);
  REQUIRE_EXIT(l);
  const char *at = strstr(l, from), *eol = strchr(l, '\n');
  REQUIRE_EXIT(at && eol && at < eol);
  size_t head = (size_t)(at - text);
  char *out = malloc(strlen(text) - strlen(from) + strlen(to) + 1);
  REQUIRE_EXIT(out);
  memcpy(out, text, head);
  strcpy(out + head, to);
  strcat(out, at + strlen(from));
  return out;
}

/* What an offline H200 context over the user database USER_DB (no tables)
 * would run for a forward of (DT, MK, HD) at seqlen 1024. */
static fat_choice offline_choice(const char *user_db, fat_attn_dtype dt, fat_attn_mask mk, int hd) {
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  fat_choice ch = FAT_CHOICE_INIT;
  const char *no_tables[1] = {""};
  o.user_db = user_db, o.tables = no_tables, o.n_tables = 1;
  o.gpu_name = H200, o.gpu_cc_major = 9, o.gpu_cc_minor = 0, o.gpu_sm_count = H200_SMS;
  REQUIRE_EXIT(fat_context_open(&c, &o) == FAT_OK);
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = 16, a.heads = a.heads_k = 2048 / hd, a.seqlen_q = a.seqlen_k = 1024, a.head_dim = hd;
  a.dtype = dt, a.mask = mk;
  if (fat_attention_select(c, &a, &ch)) fprintf(stderr, "select: %s\n", fat_context_error(c));
  fat_context_close(c);
  return ch;
}

/* ---- 1. a winner on a problem its variant does not serve ------------------- */

static void winner_on_another_problem(void) {
  char want[ERRLEN], err[ERRLEN], path[256];
  size_t n;
  fat_variant *v = space_of(FAT_FWD, FAT_FP16, FAT_MASK_NONE, 64, &n);
  char *good = table_of(&v[0]), *t;
  const char *problems = "INSERT INTO problems ", *row = "VALUES (1, 'fwd', 'fp16', 'none', 64,";
  /* The edit: the problem row of fp16 none d64 made bf16 causal
   * d128 (the variant row left as it was). */
  t = edited(good, problems, row, "VALUES (1, 'fwd', 'bf16', 'causal', 128,");
  snprintf(want, sizeof want, "t.sql: winners row 1: variant %s has dtype fp16, its problem 1 has"
           " bf16", v[0].name);
  IMPORT_REFUSED(t, want);
  free(t);
  t = edited(good, problems, row, "VALUES (1, 'fwd', 'fp16', 'causal', 64,");
  snprintf(want, sizeof want, "t.sql: winners row 1: variant %s has mask none, its problem 1 has"
           " causal", v[0].name);
  IMPORT_REFUSED(t, want);
  free(t);
  t = edited(good, problems, row, "VALUES (1, 'bwd', 'fp16', 'none', 64,");
  snprintf(want, sizeof want, "t.sql: winners row 1: variant %s has direction fwd, its problem 1"
           " has bwd", v[0].name);
  IMPORT_REFUSED(t, want);
  free(t);
  t = edited(good, problems, row, "VALUES (1, 'fwd', 'fp16', 'none', 128,");
  snprintf(want, sizeof want, "t.sql: winners row 1: variant %s has head_dim 64, its problem 1 has"
           " 128", v[0].name);
  IMPORT_REFUSED(t, want);
  free(t);
  /* A padded head dim runs on the next template up, by the generator's
   * list: 56 on d64 is served, 72 (on d96) is not d64's. */
  t = edited(good, problems, row, "VALUES (1, 'fwd', 'fp16', 'none', 72,");
  snprintf(want, sizeof want, "t.sql: winners row 1: variant %s has head_dim 64, its problem 1 has"
           " 72, which runs on the head_dim 96 template", v[0].name);
  IMPORT_REFUSED(t, want);
  free(t);
  t = edited(good, problems, row, "VALUES (1, 'fwd', 'fp16', 'none', 56,");
  CHECK_WHY(import_into(path, sizeof path, t, &checked, NULL, err) == 0, "%s", err);
  free(t);
  /* The runtime, asked for bf16 causal d128, is not served the d64 kernel. */
  t = edited(good, problems, row, "VALUES (1, 'fwd', 'bf16', 'causal', 128,");
  CHECK_INT(import_into(path, sizeof path, t, &checked, NULL, err), -1);
  fat_choice ch = offline_choice(path, FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK(strcmp(ch.variant, v[0].name) != 0);
  free(t);
  free(good);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* ---- 2. launch metadata not the generator's ------------------------------- */

static void metadata_not_the_generators(void) {
  char want[ERRLEN], from[1024], to[1024];
  size_t n;
  fat_variant *v = space_of(FAT_FWD, FAT_FP16, FAT_MASK_NONE, 64, &n);
  const fat_variant *k = NULL;
  int splits = 1, pack = 0;
  char why[256];
  /* A split-KV variant: the first whose parameters split the keys. */
  for (size_t i = 0; i < n && !k; i++)
    if (fat_fwd_params_parse(v[i].params, &pack, &splits, why, sizeof why) == 0 && splits > 1)
      k = &v[i];
  REQUIRE_EXIT(k);
  char *good = table_of(k), *t;
  const char *variants = "INSERT INTO variants ";
  snprintf(from, sizeof from, "'%s', '%s', %d, %d, %d, '%s'", k->params, k->entry, k->block_m,
           k->threads, k->smem_bytes, k->hash);
  /* The edit: SPLITS down to 1, block_m 16, threads 1024, no
   * shared memory; the first field named. */
  char one_split[512], split_text[32];
  snprintf(split_text, sizeof split_text, "SPLITS=%d", splits);
  const char *at = strstr(k->params, split_text);
  REQUIRE_EXIT(at);
  snprintf(one_split, sizeof one_split, "%.*sSPLITS=1%s", (int)(at - k->params), k->params,
           at + strlen(split_text));
  snprintf(to, sizeof to, "'%s', '%s', 16, 1024, 0, '%s'", one_split, k->entry, k->hash);
  t = edited(good, variants, from, to);
  snprintf(want, sizeof want, "t.sql: variant %s: params '%s' is not the generator's '%s'; "
           "refusing the table", k->name, one_split, k->params);
  IMPORT_REFUSED(t, want);
  free(t);
  static const char *const fields[3] = {"block_m", "threads", "smem_bytes"};
  const int edits[3] = {16, 1024, 0}, real[3] = {k->block_m, k->threads, k->smem_bytes};
  for (int f = 0; f < 3; f++) {
    int vals[3] = {k->block_m, k->threads, k->smem_bytes};
    vals[f] = edits[f];
    REQUIRE_EXIT(edits[f] != real[f]);
    snprintf(to, sizeof to, "'%s', '%s', %d, %d, %d, '%s'", k->params, k->entry, vals[0], vals[1],
             vals[2], k->hash);
    t = edited(good, variants, from, to);
    snprintf(want, sizeof want, "t.sql: variant %s: %s %d is not the generator's %d; refusing the "
             "table", k->name, fields[f], edits[f], real[f]);
    IMPORT_REFUSED(t, want);
    free(t);
  }
  snprintf(to, sizeof to, "'%s', 'fat_other_entry', %d, %d, %d, '%s'", k->params, k->block_m,
           k->threads, k->smem_bytes, k->hash);
  t = edited(good, variants, from, to);
  snprintf(want, sizeof want, "t.sql: variant %s: entry 'fat_other_entry' is not the generator's "
           "'%s'; refusing the table", k->name, k->entry);
  IMPORT_REFUSED(t, want);
  free(t);
  /* The family and the key fields, on the variant row itself. */
  snprintf(from, sizeof from, "'%s', '%s', 'fwd', 'fp16', 'none', 64,", k->name, k->family);
  snprintf(to, sizeof to, "'%s', 'other', 'fwd', 'fp16', 'none', 64,", k->name);
  t = edited(good, variants, from, to);
  snprintf(want, sizeof want, "t.sql: variant %s: family 'other' is not the generator's '%s'; "
           "refusing the table", k->name, k->family);
  IMPORT_REFUSED(t, want);
  free(t);
  /* A row claiming another key than its name's: the first wrong field
   * named, whether the generator has the claimed group (bwd, bf16, e4m3 --
   * sm_90a's alone --, causal, d128) or refuses it (d72, no template's). */
  static const struct { const char *key, *field, *claimed, *real; } keys[] = {
      {"'bwd', 'fp16', 'none', 64,", "direction", "'bwd'", "'fwd'"},
      {"'fwd', 'bf16', 'none', 64,", "dtype", "'bf16'", "'fp16'"},
      {"'fwd', 'e4m3', 'none', 64,", "dtype", "'e4m3'", "'fp16'"},
      {"'fwd', 'fp16', 'causal', 64,", "mask", "'causal'", "'none'"},
      {"'fwd', 'fp16', 'none', 128,", "head_dim", "128", "64"},
      {"'fwd', 'fp16', 'none', 72,", "head_dim", "72", "64"},
  };
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    snprintf(to, sizeof to, "'%s', '%s', %s", k->name, k->family, keys[i].key);
    t = edited(good, variants, from, to);
    snprintf(want, sizeof want, "t.sql: variant %s: %s %s is not the generator's %s; refusing the "
             "table", k->name, keys[i].field, keys[i].claimed, keys[i].real);
    IMPORT_REFUSED(t, want);
    free(t);
  }
  free(good);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* ---- 3. merge: the same rule, a read-only source, fatune's schema only ----- */

/* The sha256 of the file at PATH. */
static void file_hash(const char *path, char out[65]) {
  char *text = NULL;
  FILE *f = fopen(path, "rb");
  REQUIRE_EXIT(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  REQUIRE_EXIT(n >= 0 && (text = malloc((size_t)n + 1)) && fread(text, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  fat_sha256_hex(text, (size_t)n, out);
  free(text);
}

static void merge_checks_as_import_does(void) {
  char want[ERRLEN], err[ERRLEN], src[256], path[256], hash_before[65], hash_after[65], got[256];
  size_t n;
  fat_variant *v = space_of(FAT_FWD, FAT_FP16, FAT_MASK_NONE, 64, &n);
  /* The database: code appended to a source under its old hash,
   * and a broken cubin. */
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "UPDATE variants SET source = source || '__global__ void steal() {}'");
  tamper(src, "UPDATE builds SET cubin = X'00'");
  char altered[65];
  size_t len = strlen(v[0].source) + 64;
  char *text = malloc(len);
  REQUIRE_EXIT(text);
  snprintf(text, len, "%s__global__ void steal() {}", v[0].source);
  fat_sha256_hex(text, strlen(text), altered);
  free(text);
  snprintf(want, sizeof want, "%s: variant %s: source_hash %s is not the hash of its source (%s)",
           src, v[0].name, v[0].hash, altered);
  MERGE_REFUSED(src, want);
  /* Edited rows: the messages import gives, naming the database. */
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "UPDATE variants SET block_m = 16");
  snprintf(want, sizeof want, "%s: variant %s: block_m 16 is not the generator's %d; refusing the "
           "table", src, v[0].name, v[0].block_m);
  MERGE_REFUSED(src, want);
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "UPDATE problems SET dtype = 'bf16', mask = 'causal', head_dim = 128");
  snprintf(want, sizeof want, "%s: winners row 1: variant %s has dtype fp16, its problem 1 has "
           "bf16", src, v[0].name);
  MERGE_REFUSED(src, want);
  /* Anything in its schema that is not fatune's, and a view where fatune
   * has a table (the recursive view never runs: it is refused). */
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "CREATE TABLE extra (x)");
  snprintf(want, sizeof want, "%s: table 'extra' is not fatune's: refusing the database", src);
  MERGE_REFUSED(src, want);
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "CREATE TRIGGER evil AFTER INSERT ON gpus BEGIN DELETE FROM winners; END");
  snprintf(want, sizeof want, "%s: trigger 'evil' is not fatune's: refusing the database", src);
  MERGE_REFUSED(src, want);
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "CREATE VIEW spy AS SELECT * FROM gpus");
  snprintf(want, sizeof want, "%s: view 'spy' is not fatune's: refusing the database", src);
  MERGE_REFUSED(src, want);
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "PRAGMA foreign_keys = OFF; DROP TABLE winners; CREATE VIEW winners AS WITH RECURSIVE"
              " r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x AS gpu_id, x AS problem_id,"
              " x AS variant_id, x AS timing_id, '' AS chosen_at FROM r");
  snprintf(want, sizeof want, "%s: 'winners' is a view, fatune's is a table: refusing the database",
           src);
  MERGE_REFUSED(src, want);
  /* Values that are no bytes of the file: a generated column (computed as
   * it is read, a 60 MB string a row), a virtual table (read by module
   * code). */
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "PRAGMA foreign_keys = OFF; PRAGMA legacy_alter_table = ON;"
              " ALTER TABLE gpus RENAME TO gpus_old;"
              " CREATE TABLE gpus (id INTEGER PRIMARY KEY, name TEXT GENERATED ALWAYS AS"
              " (printf('%.*c', 60000000, 'x')) VIRTUAL, cc_major INTEGER, cc_minor INTEGER,"
              " sm_count INTEGER, driver_version INTEGER, nvrtc_major INTEGER, nvrtc_minor INTEGER,"
              " mem_bytes INTEGER, smem_per_block_optin INTEGER, l2_bytes INTEGER, clock_khz"
              " INTEGER, mem_clock_khz INTEGER, first_seen TEXT);"
              " INSERT INTO gpus (id, cc_major, cc_minor, sm_count, driver_version, nvrtc_major,"
              " nvrtc_minor, mem_bytes, smem_per_block_optin, l2_bytes, clock_khz, mem_clock_khz,"
              " first_seen) SELECT id, cc_major, cc_minor, sm_count, driver_version, nvrtc_major,"
              " nvrtc_minor, mem_bytes, smem_per_block_optin, l2_bytes, clock_khz, mem_clock_khz,"
              " first_seen FROM gpus_old; DROP TABLE gpus_old;");
  snprintf(want, sizeof want, "%s: column 'name' of gpus is generated, not stored: refusing the "
           "database", src);
  MERGE_REFUSED(src, want);
  db_of(new_db(src, sizeof src), &v[0]);
  {
    sqlite3 *h = NULL;
    REQUIRE_EXIT(sqlite3_open(src, &h) == SQLITE_OK);
    const int have_fts5 = sqlite3_exec(h, "PRAGMA foreign_keys = OFF; DROP TABLE winners;"
                                       " CREATE VIRTUAL TABLE winners USING fts5(gpu_id, problem_id,"
                                       " variant_id, timing_id, chosen_at)", NULL, NULL, NULL) == SQLITE_OK;
    sqlite3_close(h);
    snprintf(want, sizeof want, "%s: 'winners' is a virtual table: refusing the database", src);
    if (have_fts5) MERGE_REFUSED(src, want);
  }
  /* No regular file: a FIFO would block the open forever. */
  snprintf(src, sizeof src, "%s/fifo", dir);
  REQUIRE_EXIT(mkfifo(src, 0600) == 0);
  snprintf(want, sizeof want, "%s: not a regular file", src);
  MERGE_REFUSED(src, want);
  /* A good source merges read-only: from a file nobody may write, left
   * byte for byte as it was. */
  db_of(new_db(src, sizeof src), &v[0]);
  REQUIRE_EXIT(chmod(src, 0444) == 0);
  file_hash(src, hash_before);
  fat_db *db = NULL;
  fat_tables_report r;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  CHECK_WHY(fat_tables_merge(db, src, &checked, &r, err, sizeof err) == 0, "%s", err);
  fat_db_close(db);
  file_hash(src, hash_after);
  CHECK_STR(hash_after, hash_before);
  CHECK_INT(r.added, 6);  /* gpu, variant, problem, check, timing, winner: no build */
  query(path, "SELECT v.name FROM winners w JOIN variants v ON v.id = w.variant_id", got, sizeof got);
  CHECK_STR(got, v[0].name);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* ---- 4. cubins by provenance, 5. no failed build --------------------------- */

static void cubins_by_provenance(void) {
  char err[ERRLEN], path[256], src[256], got[256], want[ERRLEN];
  size_t n;
  fat_variant *v = space_of(FAT_FWD, FAT_FP16, FAT_MASK_NONE, 64, &n);
  fat_tables_report r;
  /* A cubin that vouches for itself (its own hash beside it) does not come
   * in: the runtime compiles the checked source instead. */
  char *t = table_of(&v[0]);
  REQUIRE_EXIT(import_into(path, sizeof path, t, &checked, &r, err) == 0);
  CHECK_INT(r.trust.builds_dropped, 1);
  CHECK_INT(r.trust.builds_kept, 0);
  query(path, "SELECT (SELECT count(*) FROM builds) || ' ' || (SELECT count(*) FROM build_hashes)",
        got, sizeof got);
  CHECK_STR(got, "0 0");
  fat_choice ch = offline_choice(path, FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 64);
  CHECK_STR(ch.variant, v[0].name);
  CHECK_INT(ch.load, FAT_LOAD_COMPILED);
  snprintf(want, sizeof want, "no stored cubin of %s for sm_90a; compiling from source", v[0].name);
  CHECK_STR(ch.note, want);
  db_of(new_db(src, sizeof src), &v[0]);
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  CHECK_WHY(fat_tables_merge(db, src, &checked, &r, err, sizeof err) == 0, "%s", err);
  fat_db_close(db);
  CHECK_INT(r.trust.builds_dropped, 1);
  query(path, "SELECT count(*) FROM builds", got, sizeof got);
  CHECK_STR(got, "0");
  /* The release's own tables (build_tables) keep theirs. */
  const fat_import_options shipped = {.trust = checked.trust, .cubins = FAT_CUBINS_SHIPPED};
  REQUIRE_EXIT(import_into(path, sizeof path, t, &shipped, &r, err) == 0);
  CHECK_INT(r.trust.builds_kept, 1);
  query(path, "SELECT count(*) FROM builds b JOIN build_hashes h ON h.build_key = b.key", got,
        sizeof got);
  CHECK_STR(got, "1");
  free(t);

  /* 5. A failed build under the variant's real cache key: never imported,
   * whatever the policy, so no tune finds it in the cache. */
  fat_build failed = {0};
  snprintf(failed.arch, sizeof failed.arch, "sm_90a");
  fat_build_key_of(v[0].source, "sm_90a", fat_compile_options(), "nvrtc 13.0", failed.key);
  failed.ok = 0, failed.log = "error: poisoned";
  REQUIRE_EXIT(fat_db_open(new_db(src, sizeof src), &db, err, sizeof err) == 0);
  put_result(db, &v[0], &failed, fat_compile_options(), "13.0");
  fat_db_close(db);
  for (int policy = 0; policy < 2; policy++) {
    const fat_import_options *o = policy ? &shipped : &checked;
    REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
    CHECK_WHY(fat_tables_merge(db, src, o, &r, err, sizeof err) == 0, "%s", err);
    CHECK_INT(r.trust.builds_dropped, 1);
    CHECK_INT(r.trust.builds_kept, 0);
    fat_build cached;
    int found = -1;
    CHECK_INT(fat_db_find_build(db, failed.key, &cached, &found), 0);
    CHECK_INT(found, 0);
    fat_db_close(db);
  }

  /* --keep-cubins: a cubin this machine's NVRTC makes byte for byte is
   * kept as this machine's build; other bytes, or another NVRTC, are not. */
  char nvrtc_err[ERRLEN];
  const fat_nvrtc *nv = fat_nvrtc_get(nvrtc_err, sizeof nvrtc_err);
  if (!nv) {
    printf("--keep-cubins not tried: %s\n", nvrtc_err);
  } else {
    char version[32], key[65];
    snprintf(version, sizeof version, "%d.%d", nv->major, nv->minor);
    const fat_variant *small = &v[0];  /* the shortest source compiles soonest */
    for (size_t i = 1; i < n; i++)
      if (strlen(v[i].source) < strlen(small->source)) small = &v[i];
    fat_build b;
    REQUIRE_EXIT(fat_compile_one(small->name, small->source, "sm_90a", &b, err, sizeof err) == 0 &&
                 b.ok);
    REQUIRE_EXIT(fat_build_key(small->source, "sm_90a", b.key, err, sizeof err) == 0);
    snprintf(key, sizeof key, "%s", b.key);
    const fat_import_options keep = {.trust = checked.trust, .cubins = FAT_CUBINS_RECOMPILE};
    for (int variant = 0; variant < 3; variant++) {
      /* 0: the very bytes; 1: one byte changed (its hash with it); 2: made
       * by another NVRTC version */
      char *cubin = malloc(b.cubin_size);
      REQUIRE_EXIT(cubin);
      memcpy(cubin, b.cubin, b.cubin_size);
      if (variant == 1) cubin[b.cubin_size / 2] ^= 1;
      fat_build stored = b;
      stored.cubin = (unsigned char *)cubin;
      REQUIRE_EXIT(fat_db_open(new_db(src, sizeof src), &db, err, sizeof err) == 0);
      put_result(db, small, &stored, fat_compile_options(), variant == 2 ? "12.0" : version);
      fat_db_close(db);
      free(cubin);
      t = export_of(src);
      REQUIRE_EXIT(import_into(path, sizeof path, t, &keep, &r, err) == 0);
      free(t);
      CHECK_INT(r.trust.builds_kept, variant == 0);
      CHECK_INT(r.trust.builds_dropped, variant != 0);
      query(path, "SELECT b.key FROM builds b JOIN build_hashes h ON h.build_key = b.key", got,
            sizeof got);
      CHECK_STR(got, variant == 0 ? key : "");
    }
    fat_build_free(&b);
  }
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* ---- the build's tables and a stale variant -------------------------------- */

static void stale_in_the_build(void) {
  char err[ERRLEN], path[256], got[256], want[ERRLEN];
  size_t n;
  fat_variant *v = space_of(FAT_FWD, FAT_FP16, FAT_MASK_NONE, 64, &n);
  fat_variant old = v[0];
  char old_hash[65];
  size_t len = strlen(v[0].source) + 64;
  old.source = malloc(len);
  REQUIRE_EXIT(old.source);
  snprintf(old.source, len, "%s// an older template\n", v[0].source);
  fat_sha256_hex(old.source, strlen(old.source), old_hash);
  memcpy(old.hash, old_hash, sizeof old.hash);
  char *t = table_of(&old);
  snprintf(want, sizeof want, "t.sql: variant %s: table source_hash %s, generator gives %s; "
           "refusing a stale table", v[0].name, old_hash, v[0].hash);
  IMPORT_REFUSED(t, want);
  fat_tables_report r;
  fat_import_options o = {.trust = checked.trust, .cubins = FAT_CUBINS_SHIPPED,
                          .stale = FAT_STALE_LEAVE_OUT};
  CHECK_WHY(import_into(path, sizeof path, t, &o, &r, err) == 0, "%s", err);
  CHECK_INT(r.trust.stale, 1);
  snprintf(want, sizeof want, "stale: %s: table source_hash %s, generator gives %s\n", v[0].name,
           old_hash, v[0].hash);
  CHECK_STR(r.trust.stale_lines, want);
  query(path, "SELECT (SELECT count(*) FROM variants) || ' ' || (SELECT count(*) FROM winners)"
        " || ' ' || (SELECT count(*) FROM builds)", got, sizeof got);
  CHECK_STR(got, "0 0 0");
  o.stale = FAT_STALE_KEEP;
  CHECK_WHY(import_into(path, sizeof path, t, &o, &r, err) == 0, "%s", err);
  CHECK_INT(r.trust.stale, 1);
  query(path, "SELECT (SELECT count(*) FROM variants) || ' ' || (SELECT count(*) FROM winners)"
        " || ' ' || (SELECT count(*) FROM builds)", got, sizeof got);
  CHECK_STR(got, "1 1 1");
  /* Kept without a source (its table had none, the generator gives
   * another): nothing serves it, the stale check names it, rehash finds
   * its stand-in cubin is not today's source's machine code, and
   * retire-stale retires it. */
  query(path, "SELECT count(*) FROM variants WHERE source IS NULL", got, sizeof got);
  CHECK_STR(got, "1");
  fat_choice ch = offline_choice(path, FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 64);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  fat_db *db = NULL;
  char report[4096];
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  CHECK_INT(fat_tables_stale(db, gen, report, sizeof report, err, sizeof err), 1);
  snprintf(want, sizeof want, "stale: %s: table source_hash %s, generator gives %s\n", v[0].name,
           old_hash, v[0].hash);
  CHECK_STR(report, want);
  long long carried = -1, left = -1, retired = -1, winners = -1;
  if (fat_nvrtc_get(NULL, 0)) {
    CHECK_INT(fat_tables_rehash(db, gen, &carried, &left, err, sizeof err), 0);
    CHECK_INT(carried, 0);
    CHECK_INT(left, 1);
  }
  CHECK_INT(fat_tables_retire_stale(db, gen, &retired, &winners, err, sizeof err), 0);
  CHECK_INT(retired, 1);
  CHECK_INT(winners, 1);
  fat_db_close(db);
  /* --keep-cubins cannot compile what has no source: its build is dropped. */
  if (fat_nvrtc_get(NULL, 0)) {
    o.cubins = FAT_CUBINS_RECOMPILE;
    CHECK_WHY(import_into(path, sizeof path, t, &o, &r, err) == 0, "%s", err);
    CHECK_INT(r.trust.builds_kept, 0);
    CHECK_INT(r.trust.builds_dropped, 1);
  }
  free(t);
  free(old.source);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* ---- the runtime and the stale check, on a database altered in place ------ */

static void altered_in_place(void) {
  char path[256], want[ERRLEN], err[ERRLEN], report[4096];
  size_t n;
  fat_variant *v = space_of(FAT_FWD, FAT_FP16, FAT_MASK_NONE, 64, &n);
  /* As tuned: served, its cubin loaded. */
  db_of(new_db(path, sizeof path), &v[0]);
  fat_choice ch = offline_choice(path, FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 64);
  CHECK_STR(ch.variant, v[0].name);
  CHECK_INT(ch.load, FAT_LOAD_STORED_CUBIN);
  /* The problem edit, made in the database itself: the bf16 causal
   * d128 call is not served the fp16 none d64 kernel. */
  tamper(path, "UPDATE problems SET dtype = 'bf16', mask = 'causal', head_dim = 128");
  ch = offline_choice(path, FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK(strcmp(ch.variant, v[0].name) != 0);
  /* Code appended to the source under its old hash: passed over, and said. */
  db_of(new_db(path, sizeof path), &v[0]);
  tamper(path, "UPDATE variants SET source = source || '__global__ void steal() {}'");
  ch = offline_choice(path, FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 64);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK(strcmp(ch.variant, v[0].name) != 0);
  snprintf(want, sizeof want, "%s: variant %s: its source does not hash to its source_hash; passed"
           " over; ", path, v[0].name);
  CHECK_WHY(!strncmp(ch.note, want, strlen(want)), "note \"%s\"", ch.note);
  /* ... and the stale check, retire-stale and rehash see it. */
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  CHECK_INT(fat_tables_stale(db, gen, report, sizeof report, err, sizeof err), 1);
  snprintf(want, sizeof want, "stale: %s: its source does not hash to its source_hash %s\n",
           v[0].name, v[0].hash);
  CHECK_STR(report, want);
  long long carried = -1, left = -1, retired = -1, winners = -1;
  if (fat_nvrtc_get(NULL, 0)) {
    CHECK_INT(fat_tables_rehash(db, gen, &carried, &left, err, sizeof err), 0);
    CHECK_INT(carried, 0);
    CHECK_INT(left, 1);
  }
  CHECK_INT(fat_tables_retire_stale(db, gen, &retired, &winners, err, sizeof err), 0);
  CHECK_INT(retired, 1);
  CHECK_INT(winners, 1);
  fat_db_close(db);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* ---- a table without sources ------------------------------------------------ */

/* A table carries each variant's hash, not its source: import fills the
 * generator's in (what the runtime compiles), a merge fills in a
 * database's sourceless variant too, and the stale check names one stored
 * sourceless, which rehash fills in where the generator gives its hash
 * (stale_in_the_build: one it gives with another). */
static void sourceless_variants(void) {
  char err[ERRLEN], path[256], src[256], got[256], want[ERRLEN], report[4096];
  size_t n;
  fat_variant *v = space_of(FAT_FWD, FAT_FP16, FAT_MASK_NONE, 64, &n);
  char *t = table_of(&v[0]);
  CHECK(strstr(t, "source_hash, is_default") != NULL);
  CHECK(strstr(t, "extern \"C\"") == NULL);
  fat_tables_report r;
  CHECK_WHY(import_into(path, sizeof path, t, &checked, &r, err) == 0, "%s", err);
  query(path, "SELECT count(*) FROM variants WHERE source IS NULL", got, sizeof got);
  CHECK_STR(got, "0");
  query(path, "SELECT source FROM variants", got, sizeof got);
  CHECK(!strncmp(got, v[0].source, strlen(got)) && strlen(got) > 0);
  fat_choice ch = offline_choice(path, FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 64);
  CHECK_STR(ch.variant, v[0].name);
  free(t);

  /* A database whose variant lost its source (stored sourceless), merged:
   * the generator's comes in; the source database is left as it was. */
  db_of(new_db(src, sizeof src), &v[0]);
  tamper(src, "UPDATE variants SET source = NULL");
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  CHECK_WHY(fat_tables_merge(db, src, &checked, NULL, err, sizeof err) == 0, "%s", err);
  fat_db_close(db);
  query(path, "SELECT count(*) FROM variants WHERE source IS NOT NULL", got, sizeof got);
  CHECK_STR(got, "1");
  query(src, "SELECT count(*) FROM variants WHERE source IS NULL", got, sizeof got);
  CHECK_STR(got, "1");
  /* The same, in place: the stale check names it, rehash fills it in. */
  REQUIRE_EXIT(fat_db_open(src, &db, err, sizeof err) == 0);
  CHECK_INT(fat_tables_stale(db, gen, report, sizeof report, err, sizeof err), 1);
  snprintf(want, sizeof want, "stale: %s: no stored source (fatune rehash fills it in)\n", v[0].name);
  CHECK_STR(report, want);
  long long carried = -1, left = -1;
  if (fat_nvrtc_get(NULL, 0)) {
    CHECK_INT(fat_tables_rehash(db, gen, &carried, &left, err, sizeof err), 0);
    CHECK_INT(carried, 1);
    CHECK_INT(left, 0);
    CHECK_INT(fat_tables_stale(db, gen, report, sizeof report, err, sizeof err), 0);
  }
  fat_db_close(db);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* ---- the GPU's ceilings, a measurement each ---------------------------------- */

static void ceilings_travel_and_are_judged(void) {
  char src[256], path[256], err[ERRLEN], got[256];
  size_t n;
  fat_variant *v = space_of(FAT_FWD, FAT_FP16, FAT_MASK_NONE, 64, &n);
  db_of(new_db(src, sizeof src), &v[0]);
  /* As the tuner stores them (tune.c), for the GPU of the result. */
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(src, &db, err, sizeof err) == 0);
  REQUIRE_EXIT(fat_db_put_ceiling(db, 1, FAT_CEILING_COPY_BANDWIDTH, 3.7e12, "B/s") == 0);
  REQUIRE_EXIT(fat_db_put_ceiling(db, 1, FAT_CEILING_PEAK_BF16, 6.0e14, "FLOP/s") == 0);
  /* Hopper's: the wgmma peaks beside mma.sync's. */
  REQUIRE_EXIT(fat_db_put_ceiling(db, 1, FAT_CEILING_WGMMA_PEAK_BF16, 8.0e14, "FLOP/s") == 0);
  REQUIRE_EXIT(fat_db_put_ceiling(db, 1, FAT_CEILING_WGMMA_RS_PEAK_BF16, 8.25e14, "FLOP/s") == 0);
  fat_db_close(db);
  char *good = export_of(src), *t;
  CHECK(strstr(good, "INSERT INTO ceilings (id, gpu_id, name, value, unit, measured_at) VALUES (1, 1,"
                     " 'copy_bandwidth', 3700000000000,") != NULL);
  fat_tables_report r = {0};
  CHECK(import_into(path, sizeof path, good, &checked, &r, err) == 0);
  query(path, "SELECT group_concat(name || '=' || value, ' ') FROM (SELECT * FROM ceilings ORDER BY name)",
        got, sizeof got);
  CHECK_STR(got, "copy_bandwidth=3700000000000.0 matrix_peak_bf16=600000000000000.0 "
                 "wgmma_peak_bf16=800000000000000.0 wgmma_rs_peak_bf16=825000000000000.0");
  /* Merged into a database with its own measurement of one of them: that
   * one stays, the other comes in. */
  char target[256];
  db_of(new_db(target, sizeof target), &v[0]);
  REQUIRE_EXIT(fat_db_open(target, &db, err, sizeof err) == 0);
  REQUIRE_EXIT(fat_db_put_ceiling(db, 1, FAT_CEILING_COPY_BANDWIDTH, 3.5e12, "B/s") == 0);
  CHECK(fat_tables_merge(db, src, &checked, NULL, err, sizeof err) == 0);
  fat_db_close(db);
  query(target, "SELECT group_concat(name || '=' || value, ' ') FROM (SELECT * FROM ceilings ORDER BY name)",
        got, sizeof got);
  CHECK_STR(got, "copy_bandwidth=3500000000000.0 matrix_peak_bf16=600000000000000.0 "
                 "wgmma_peak_bf16=800000000000000.0 wgmma_rs_peak_bf16=825000000000000.0");
  /* What no GPU measures is refused, naming the row. */
  const char *row = "INSERT INTO ceilings ", *copy = "'copy_bandwidth', 3700000000000,";
  t = edited(good, row, copy, "'copy_bandwidth', 1e300,");
  IMPORT_REFUSED(t, "t.sql: ceilings row 1: copy_bandwidth 1e+300 B/s is outside (0, 1e+14]");
  free(t);
  t = edited(good, row, copy, "'copy_bandwidth', -1,");
  IMPORT_REFUSED(t, "t.sql:7: CHECK constraint failed: value > 0");  /* the schema's own rule */
  free(t);
  t = edited(good, row, "'B/s'", "'GB/s'");
  IMPORT_REFUSED(t, "t.sql: ceilings row 1: copy_bandwidth in 'GB/s', not B/s");
  free(t);
  t = edited(good, row, "'copy_bandwidth'", "'tensor_peak'");
  IMPORT_REFUSED(t, "t.sql: ceilings row 1: 'tensor_peak' is no ceiling the tuner measures");
  free(t);
  t = edited(good, "VALUES (3, 1, 'wgmma_peak_bf16', ", "800000000000000,", "8e16,");
  IMPORT_REFUSED(t, "t.sql: ceilings row 3: wgmma_peak_bf16 8e+16 FLOP/s is outside (0, 1e+16]");
  free(t);
  t = edited(good, row, "VALUES (1, 1,", "VALUES (1, 7,");
  IMPORT_REFUSED(t, "t.sql:7: FOREIGN KEY constraint failed");
  free(t);
  /* A merge source is judged by the same rule. */
  tamper(src, "UPDATE ceilings SET value = 1e30 WHERE name = 'matrix_peak_bf16'");
  char want[ERRLEN];
  snprintf(want, sizeof want, "%s: ceilings row 2: matrix_peak_bf16 1e+30 FLOP/s is outside (0, 1e+16]", src);
  MERGE_REFUSED(src, want);
  free(good);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

int main(void) {
  char err[ERRLEN];
  REQUIRE_EXIT(mkdtemp(dir));
  REQUIRE_EXIT((gen = fat_gen_open(NULL, err, sizeof err)) != NULL);
  REQUIRE_EXIT((checked.trust = fat_trust_open(gen)) != NULL);
  winner_on_another_problem();
  metadata_not_the_generators();
  merge_checks_as_import_does();
  cubins_by_provenance();
  stale_in_the_build();
  altered_in_place();
  sourceless_variants();
  ceilings_travel_and_are_judged();
  fat_trust_close(checked.trust);
  fat_gen_close(gen);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", dir, dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_summary("test_tables_trust");
}
