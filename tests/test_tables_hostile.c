/* SPDX-License-Identifier: MIT */
/* Hostile table files and stored cubins (issue 6, "untrusted tables"): each
 * file below is what an attacker or a damaged download could hand `fatune
 * import`, and each is refused whole with its exact message, leaving the
 * target database without a single new row. Then the runtime's integrity
 * check (fat_verify_cubin) directly, and through an offline context: a
 * cubin is chosen only when it hashes to its recorded sha256 and was built
 * for this GPU's architecture, and the choice says why when it is not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "db.h"
#include "fatune.h"
#include "gen.h"
#include "sha256.h"
#include "tables.h"
#include "tables_int.h"
#include "problems.h"
#include "check.h"
#include "fat_abi.h"

/* The ABI line every generated source carries (the runtime requires it). */
#define STR2(x) #x
#define STR(x) STR2(x)
#define ABI_LINE "#define FAT_ABI_VERSION " STR(FAT_ABI_VERSION) "\n"

static int n_hostile;

#define H200 "NVIDIA H200"
#define H200_SMS 132
#define ERRLEN 1024
#define CUBIN_BYTES 7

/* The longest cubin_text below writes: a 7-byte cubin deflated is 15 bytes. */
#define CUBIN_TEXT_CAP 256

/* CUBIN (N bytes) as export spells it: fat_inflate(X'<zlib stream>', N),
 * into OUT (CUBIN_TEXT_CAP bytes); returns the stream's bytes. */
static size_t cubin_text(const unsigned char *cubin, size_t n, char *out) {
  unsigned char *z = NULL;
  size_t zn = 0;
  REQUIRE_EXIT(cubin_deflate(cubin, n, &z, &zn) == 0 && 2 * zn + 64 < CUBIN_TEXT_CAP);
  char *o = out + sprintf(out, "fat_inflate(X'");
  for (size_t i = 0; i < zn; i++) o += sprintf(o, "%02x", z[i]);
  sprintf(o, "', %zu)", n);
  free(z);
  return zn;
}

static long long imported(const char *text, char *err, size_t errlen);

static const unsigned char CUBIN[CUBIN_BYTES] = {0x7f, 'E', 'L', 'F', 0, 1, 0xff};
static char dir[] = "/tmp/fatune-hostile-XXXXXX";
static int n_db;

/* V as the checked, timed winner of its (dtype, mask, head dim) at seqlen
 * 1024 on the H200, with a cubin built for ARCH. */
static void put_result(fat_db *db, const fat_variant *vp, const char *arch) {
  fat_gpu_info g = {0};
  snprintf(g.name, sizeof g.name, H200);
  g.cc_major = 9, g.sm_count = H200_SMS, g.driver_version = 13000, g.nvrtc_major = 13;
  g.smem_per_block_optin = 232448;
  fat_problem p;
  fat_bench_problem(vp->dtype, vp->mask, vp->head_dim, 1024, &p);
  p.direction = vp->direction;
  fat_variant v = *vp;
  fat_build b = {0};
  snprintf(b.arch, sizeof b.arch, "%s", arch);
  char keytext[512];
  snprintf(keytext, sizeof keytext, "%s/%s", v.name, arch);
  fat_sha256_hex(keytext, strlen(keytext), b.key);
  b.ok = 1, b.cubin = (unsigned char *)CUBIN, b.cubin_size = CUBIN_BYTES, b.registers = 96;
  b.compile_ms = 500, b.log = "";
  fat_check c = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256, .rel_l2 = 0.002,
                 .max_abs = 0.01, .lse_max_abs = 1e-5, .nonfinite = 0, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 20, .median_ms = 1.0, .min_ms = 0.9, .max_ms = 1.2, .p10_ms = 0.95,
                  .p90_ms = 1.05, .tflops = 1.0, .sm_clock_mhz = 1755};
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE_EXIT(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE_EXIT(fat_db_put_variant(db, &v, &vid) == 0);
  REQUIRE_EXIT(fat_db_put_build(db, vid, &b, "--std=c++17", "13.0") == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
}

/* VNAME (source SOURCE, NULL: a stand-in) as the checked, timed winner of
 * fp16 none d64 at seqlen 1024 on the H200, with a cubin built for ARCH. */
static void put_winner(fat_db *db, const char *vname, const char *source, const char *arch) {
  char stand_in[256];
  fat_variant v = {0};
  snprintf(stand_in, sizeof stand_in, "// stand-in source of %s\n" ABI_LINE, vname);
  v.name = (char *)vname, v.family = "mma80", v.entry = "fat_fwd_mma80";
  v.source = (char *)(source ? source : stand_in);
  v.params = "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4";
  fat_sha256_hex(v.source, strlen(v.source), v.hash);
  v.direction = FAT_FWD, v.dtype = FAT_FP16, v.mask = FAT_MASK_NONE, v.head_dim = 64;
  v.block_m = 64, v.threads = 128, v.smem_bytes = 40960;
  put_result(db, &v, arch);
}

static const char *new_db(char *path, size_t cap) {
  snprintf(path, cap, "%s/db%d.db", dir, n_db++);
  return path;
}

/* The exported text of database DB (closed here). */
static char *export_of(fat_db *db) {
  char err[ERRLEN];
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  REQUIRE_EXIT(fat_tables_export(db, H200, NULL, f, err, sizeof err) == 0);
  fclose(f);
  fat_db_close(db);
  return buf;
}

/* The exported text of a fresh database holding one winner. */
static char *table_of(const char *vname, const char *source, const char *arch) {
  char path[256], err[ERRLEN];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  put_winner(db, vname, source, arch);
  return export_of(db);
}

/* The same of today's variant V. */
static char *table_of_real(const fat_variant *v) {
  char path[256], err[ERRLEN];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  put_result(db, v, "sm_90a");
  return export_of(db);
}

static long long rows_in(const char *path) {
  fat_db *db = NULL;
  char err[ERRLEN];
  sqlite3_stmt *s = NULL;
  long long n = -1;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  if (sqlite3_prepare_v2(fat_db_handle(db),
                         "SELECT (SELECT count(*) FROM gpus) + (SELECT count(*) FROM variants) +"
                         " (SELECT count(*) FROM builds) + (SELECT count(*) FROM build_hashes) +"
                         " (SELECT count(*) FROM problems) + (SELECT count(*) FROM checks) +"
                         " (SELECT count(*) FROM timings) + (SELECT count(*) FROM winners)",
                         -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  fat_db_close(db);
  return n;
}

/* What every import here is checked against: today's generator. */
static fat_import_options checked;

/* Imports TEXT as "t.sql" into a fresh database with OPTS (NULL: CHECKED);
 * expects the refusal WANT and a database left empty. */
static void expect_refused(int line, const char *text, const fat_import_options *opts,
                           const char *want) {
  char path[256], err[ERRLEN] = "";
  fat_db *db = NULL;
  n_hostile++;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  int rc = fat_tables_import(db, text, "t.sql", opts ? opts : &checked, NULL, err, sizeof err);
  fat_db_close(db);
  /* check_record rather than CHECK: a failure names the caller's LINE. */
  if (!check_record(rc == -1 && !strcmp(err, want)))
    fprintf(stderr, "%s:%d: import gave %d \"%s\",\n  want -1 \"%s\"\n", __FILE__, line, rc, err, want);
  long long left = rows_in(path);
  if (!check_record(left == 0))
    fprintf(stderr, "%s:%d: a refused import left %lld rows, want 0\n", __FILE__, line, left);
}
#define REFUSED(text, opts, want) expect_refused(__LINE__, text, opts, want)

/* TEXT with the first occurrence of FROM replaced by TO (heap). */
static char *replaced(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  REQUIRE_EXIT(at);
  size_t head = (size_t)(at - text), n = strlen(text) - strlen(from) + strlen(to) + 1;
  char *out = malloc(n);
  REQUIRE_EXIT(out);
  memcpy(out, text, head);
  strcpy(out + head, to);
  strcat(out, at + strlen(from));
  return out;
}

/* FAT_TABLES_MAGIC "\n" BODY FAT_TABLES_END (heap). */
static char *table_text(const char *body) {
  size_t n = strlen(FAT_TABLES_MAGIC) + strlen(body) + strlen(FAT_TABLES_END) + 2;
  char *t = malloc(n);
  REQUIRE_EXIT(t);
  snprintf(t, n, "%s\n%s%s", FAT_TABLES_MAGIC, body, FAT_TABLES_END);
  return t;
}

static void hostile_sql(fat_gen *g) {
  char want[ERRLEN], key[65];
  const char *guard = ": a table may only INSERT into fatune's tables";
  const char *problem_row =
      "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads, heads_k,"
      " seqlen_q, seqlen_k) VALUES (1, 'fwd', 'fp16', 'none', 64, 1, 1, 1, 64, 64);";
  char body[1024], *t;

  /* SQL injection, unquoted: the file closes the string itself. */
  snprintf(body, sizeof body, "%s DROP TABLE winners; --');\n", problem_row);
  t = table_text(body);
  snprintf(want, sizeof want, "t.sql:2: refused DELETE FROM 'sqlite_master'%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  /* ATTACH of another path: refused, and nothing is created there. */
  char other[300];
  snprintf(other, sizeof other, "%s/x", dir);
  snprintf(body, sizeof body, "ATTACH DATABASE '%s' AS y;\n", other);
  t = table_text(body);
  snprintf(want, sizeof want, "t.sql:2: refused ATTACH '%s'%s", other, guard);
  REFUSED(t, NULL, want);
  CHECK(access(other, F_OK) != 0);
  free(t);
  /* Schema tampering. */
  t = table_text("PRAGMA writable_schema = 1;\n");
  snprintf(want, sizeof want, "t.sql:2: refused PRAGMA 'writable_schema'%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  t = table_text("CREATE TRIGGER evil AFTER INSERT ON gpus BEGIN DELETE FROM winners; END;\n");
  snprintf(want, sizeof want, "t.sql:2: refused CREATE TRIGGER 'evil'%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  t = table_text("INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES"
                 " ('table', 'x', 'x', 0, 'CREATE TABLE x (a)');\n");
  snprintf(want, sizeof want, "t.sql:2: refused INSERT INTO 'sqlite_master'%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  /* The tuning run's own records (db/tables/README.md: what stays in the
   * tuning database) come in from no table: its eliminations, its jobs. */
  t = table_text("INSERT INTO eliminations (gpu_id, problem_id, variant_id, timing_id,"
                 " best_timing_id, ratio, reps) VALUES (1, 1, 1, 1, 1, 1.5, 5);\n");
  snprintf(want, sizeof want, "t.sql:2: refused INSERT INTO 'eliminations'%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  t = table_text("INSERT INTO timing_jobs (timing_id, job) VALUES (1, 1);\n");
  snprintf(want, sizeof want, "t.sql:2: refused INSERT INTO 'timing_jobs'%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  /* Writes outside the scratch database's own tables: a temp table cannot
   * be made, so there is none to write to; copying rows is a SELECT. */
  t = table_text("CREATE TEMP TABLE problems (a);\n");
  snprintf(want, sizeof want, "t.sql:2: refused INSERT INTO 'sqlite_temp_master'%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  snprintf(body, sizeof body, "%s\nINSERT INTO temp.problems VALUES (1);\n", problem_row);
  t = table_text(body);
  REFUSED(t, NULL, "t.sql:3: no such table: temp.problems");
  free(t);
  snprintf(body, sizeof body, "%s\nINSERT INTO problems SELECT * FROM problems;\n", problem_row);
  t = table_text(body);
  snprintf(want, sizeof want, "t.sql:3: refused SELECT%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  /* An upsert is an UPDATE in disguise. */
  snprintf(body, sizeof body, "%s\n%.*s ON CONFLICT DO UPDATE SET batch = 2;\n", problem_row,
           (int)strlen(problem_row) - 1, problem_row);
  t = table_text(body);
  snprintf(want, sizeof want, "t.sql:3: refused UPDATE 'problems'%s", guard);
  REFUSED(t, NULL, want);
  free(t);
  /* A transaction of its own (COMMIT would escape the rollback). */
  t = table_text("COMMIT;\n");
  snprintf(want, sizeof want, "t.sql:2: refused transaction 'COMMIT'%s", guard);
  REFUSED(t, NULL, want);
  free(t);

  /* Rows of the wrong type or out of range. A valid table to bend, and
   * its cubin as export spells it: */
  char *good = table_of("fwd.mma80.fp16.d64.none.m64n64w4s2", NULL, "sm_90a");
  fat_sha256_hex("fwd.mma80.fp16.d64.none.m64n64w4s2/sm_90a", strlen("fwd.mma80.fp16.d64.none.m64n64w4s2/sm_90a"), key);
  char deflated[CUBIN_TEXT_CAP], from[CUBIN_TEXT_CAP + 64], to[CUBIN_TEXT_CAP + 64];
  size_t deflated_bytes = cubin_text(CUBIN, CUBIN_BYTES, deflated);
  CHECK(strstr(good, deflated) != NULL);
  /* text in an INTEGER column that every CHECK lets through ('many' >= 0) */
  snprintf(from, sizeof from, "'13.0', 1, %s, 96,", deflated);
  snprintf(to, sizeof to, "'13.0', 1, %s, 'many',", deflated);
  t = replaced(good, from, to);
  REFUSED(t, NULL, "t.sql: builds row 1: registers holds text, declared INTEGER");
  free(t);
  /* a cubin given as text, and an empty one */
  t = replaced(good, deflated, "X''");
  REFUSED(t, NULL, "t.sql:8: CHECK constraint failed: (ok = 1) = (cubin IS NOT NULL AND length(cubin) > 0)");
  free(t);
  t = replaced(good, from, "'13.0', 1, '7f454c460001ff', 96,");
  REFUSED(t, NULL, "t.sql: builds row 1: cubin holds text, declared BLOB");
  free(t);
  /* a cubin as plain hex (format 1's spelling) loads as the same bytes:
   * the table goes as far as the deflated one (the generator's check,
   * which no stand-in source passes) */
  char err_plain[ERRLEN], err_good[ERRLEN];
  t = replaced(good, deflated, "X'7f454c460001ff'");
  CHECK_INT(imported(t, err_plain, sizeof err_plain), imported(good, err_good, sizeof err_good));
  CHECK_STR(err_plain, err_good);
  CHECK(strstr(err_good, "refusing a stale table") != NULL);
  free(t);
  /* a negative size */
  t = replaced(good, ", 64, 128, 40960, '", ", 64, 128, -40960, '");
  REFUSED(t, NULL, "t.sql:7: CHECK constraint failed: smem_bytes >= 0");
  free(t);
  /* truncated in the middle of a statement, and between two */
  const char *cut = strstr(good, "INSERT INTO winners");
  REQUIRE_EXIT(cut);
  size_t at = (size_t)(cut - good) + strlen("INSERT INTO winners (gpu_id, problem_id");
  t = strndup(good, at);
  REFUSED(t, NULL, "t.sql: truncated: the file does not end with the line '-- end of fatune tables'");
  free(t);
  t = strndup(good, (size_t)(cut - good));
  REFUSED(t, NULL, "t.sql: truncated: the file does not end with the line '-- end of fatune tables'");
  free(t);
  /* a source that is not what its hash names (the runtime compiles it): a
   * table of format 1 carries sources, each checked against its hash */
  char src_hash[65], good_hash[65], src_from[80], src_to[512];
  const char *src = "__global__ void steal() {} // stand-in source of fwd.mma80.fp16.d64.none.m64n64w4s2\n" ABI_LINE;
  const char *good_src = "// stand-in source of fwd.mma80.fp16.d64.none.m64n64w4s2\n" ABI_LINE;
  fat_sha256_hex(src, strlen(src), src_hash);
  fat_sha256_hex(good_src, strlen(good_src), good_hash);
  snprintf(src_from, sizeof src_from, "'%s', ", good_hash);
  snprintf(src_to, sizeof src_to, "'%s', '%s', ", good_hash, src);  /* no quote in it; a raw newline */
  char *v1 = replaced(good, FAT_TABLES_MAGIC, FAT_TABLES_MAGIC_V1);
  char *with_col = replaced(v1, "source_hash, is_default", "source_hash, source, is_default");
  t = replaced(with_col, src_from, src_to);
  snprintf(want, sizeof want, "t.sql: variant fwd.mma80.fp16.d64.none.m64n64w4s2: source_hash %s"
           " is not the hash of its source (%s)", good_hash, src_hash);
  REFUSED(t, NULL, want);
  free(t), free(with_col), free(v1);
  /* a cubin swapped for other bytes, its recorded hash left as it was */
  char cubin_hash[65], evil_hash[65];
  const unsigned char evil[CUBIN_BYTES] = {0x7f, 'E', 'L', 'F', 0, 1, 0xfe};
  fat_sha256_hex(CUBIN, CUBIN_BYTES, cubin_hash);
  fat_sha256_hex(evil, CUBIN_BYTES, evil_hash);
  t = replaced(good, deflated, "X'7f454c460001fe'");
  snprintf(want, sizeof want, "t.sql: build %s: cubin sha256 %s does not match its stored hash %s",
           key, evil_hash, cubin_hash);
  REFUSED(t, NULL, want);
  free(t);
  const char *cubin_hash_of_good = cubin_hash;
  /* a cubin's stream that is not what it says: a size over the cap or
   * under one byte, a stream that inflates to more or fewer bytes than
   * named, no zlib stream at all, a text where the blob goes */
  struct {
    const char *to, *why;
  } bad_streams[] = {
      {"fat_inflate(X'00', 7)", "fat_inflate: the 1-byte stream does not inflate to 7 bytes (not a"
                                " zlib stream, or damaged)"},
      {"fat_inflate('7f454c460001ff', 7)", "fat_inflate: takes a blob and its inflated size in bytes"},
      {"fat_inflate(X'7f', '7')", "fat_inflate: takes a blob and its inflated size in bytes"},
      {"fat_inflate(X'')", "wrong number of arguments to function fat_inflate()"},
  };
  for (size_t i = 0; i < sizeof bad_streams / sizeof bad_streams[0]; i++) {
    t = replaced(good, deflated, bad_streams[i].to);
    snprintf(want, sizeof want, "t.sql:8: %s", bad_streams[i].why);
    REFUSED(t, NULL, want);
    free(t);
  }
  const long long sizes[] = {6, 8, 0, FAT_TABLES_MAX_CUBIN_BYTES + 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char to[CUBIN_TEXT_CAP];
    snprintf(to, sizeof to, "%.*s%lld)", (int)(strrchr(deflated, ',') + 2 - deflated), deflated,
             sizes[i]);
    t = replaced(good, deflated, to);
    if (sizes[i] < 1 || sizes[i] > FAT_TABLES_MAX_CUBIN_BYTES)
      snprintf(want, sizeof want, "t.sql:8: fat_inflate: size %lld is outside 1 to %lld bytes",
               sizes[i], (long long)FAT_TABLES_MAX_CUBIN_BYTES);
    else
      snprintf(want, sizeof want, "t.sql:8: fat_inflate: the %zu-byte stream does not inflate to"
               " %lld bytes (it holds %s)", deflated_bytes, sizes[i], sizes[i] < 7 ? "more" : "fewer");
    REFUSED(t, NULL, want);
    free(t);
  }
  /* a stream of a megabyte of zeros (a kilobyte deflated) is no bomb: its
   * size is named, and it is a cubin as the checks judge one (its hash) */
  {
    unsigned char *zeros = calloc(1, 1 << 20), *z = NULL;
    size_t zn = 0;
    REQUIRE_EXIT(zeros && cubin_deflate(zeros, 1 << 20, &z, &zn) == 0);
    CHECK(zn < 2048);
    char *to = malloc(2 * zn + 64), *o = to;
    REQUIRE_EXIT(to);
    o += sprintf(o, "fat_inflate(X'");
    for (size_t i = 0; i < zn; i++) o += sprintf(o, "%02x", z[i]);
    sprintf(o, "', %d)", 1 << 20);
    t = replaced(good, deflated, to);
    char zeros_hash[65];
    fat_sha256_hex(zeros, 1 << 20, zeros_hash);
    snprintf(want, sizeof want, "t.sql: build %s: cubin sha256 %s does not match its stored hash %s",
             key, zeros_hash, cubin_hash_of_good);
    REFUSED(t, NULL, want);
    free(t), free(to), free(z), free(zeros);
  }

  /* a hash for a build the file does not have */
  snprintf(body, sizeof body, "INSERT INTO build_hashes (build_key, cubin_sha256) VALUES ('%s', '%s');\n",
           cubin_hash, cubin_hash);
  t = table_text(body);
  REFUSED(t, NULL, "t.sql:2: FOREIGN KEY constraint failed");
  free(t);
  /* an oversized cubin: one byte over the cap, in a build of its own */
  size_t n_hex = (size_t)FAT_TABLES_MAX_CUBIN_BYTES * 2 + 2;
  char huge_key[65];
  fat_sha256_hex("huge", 4, huge_key);
  const char *prefix_fmt = "INSERT INTO builds (id, key, variant_id, arch, options, nvrtc_version,"
                           " ok, cubin, registers, smem_static, stack_frame, spill_stores,"
                           " spill_loads, compile_ms, log, created_at) VALUES (2, '%s', 1,"
                           " 'sm_90a', '', '13.0', 1, X'";
  char prefix[512];
  snprintf(prefix, sizeof prefix, prefix_fmt, huge_key);
  const char *suffix = "', 0, 0, 0, 0, 0, 0, '', '2026-01-01');\n";
  char *tail = strstr(good, FAT_TABLES_END);
  REQUIRE_EXIT(tail);
  size_t head = (size_t)(tail - good);
  char *big = malloc(head + strlen(prefix) + n_hex + strlen(suffix) + strlen(FAT_TABLES_END) + 1);
  REQUIRE_EXIT(big);
  memcpy(big, good, head);
  char *w = big + head;
  w = stpcpy(w, prefix);
  memset(w, '0', n_hex);
  w += n_hex;
  w = stpcpy(w, suffix);
  strcpy(w, FAT_TABLES_END);
  snprintf(want, sizeof want, "t.sql: build %s: cubin of %lld bytes is over the %lld-byte cap",
           huge_key, (long long)FAT_TABLES_MAX_CUBIN_BYTES + 1, (long long)FAT_TABLES_MAX_CUBIN_BYTES);
  REFUSED(big, NULL, want);
  free(big);

  /* Parsed and stored, the good table is refused only by the generator
   * check: a stand-in source is not today's of its variant. */
  int hd = 64;
  fat_dtype dt = FAT_FP16;
  fat_mask mk = FAT_MASK_NONE;
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
  fat_variant *v = NULL;
  size_t n = 0;
  char err[ERRLEN];
  const char *today = NULL;
  REQUIRE_EXIT(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == 0);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].name, "fwd.mma80.fp16.d64.none.m64n64w4s2")) today = v[i].hash;
  REQUIRE_EXIT(today);
  snprintf(want, sizeof want, "t.sql: variant fwd.mma80.fp16.d64.none.m64n64w4s2: table "
           "source_hash %s, generator gives %s; refusing a stale table", good_hash, today);
  REFUSED(good, NULL, want);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
  free(good);
}

/* Injection in a quoted string field is data; the generator check then
 * refuses it (no template makes that name), as it refuses a stale source. */
static void hostile_names_and_sources(fat_gen *g) {
  char want[ERRLEN], path[256], err[ERRLEN];
  const char *evil = "x'); DROP TABLE winners; --";
  char *t = table_of(evil, NULL, "sm_90a");
  CHECK(strstr(t, "'x''); DROP TABLE winners; --'") != NULL);
  fat_db *db = NULL;
  long long added = -1;
  /* The name came through as the string it is, to be named in the refusal. */
  snprintf(want, sizeof want, "t.sql: variant %s: the generator does not produce this variant; "
           "refusing the table", evil);
  REFUSED(t, NULL, want);
  free(t);

  /* A real variant of today with its source edited (hash recomputed). */
  int hd = 64;
  fat_dtype dt = FAT_FP16;
  fat_mask mk = FAT_MASK_NONE;
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
  fat_variant *v = NULL;
  size_t n = 0;
  REQUIRE_EXIT(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == 0 && n >= 1);
  t = table_of_real(&v[0]);
  /* An empty file is refused before any database is touched. */
  CHECK_INT(fat_tables_import(NULL, "", "x", &checked, NULL, err, sizeof err), -1);
  CHECK_STR(err, "x: not a fatune table (first line must start '-- fatune tables 2')");
  /* Today's variant itself imports, and no build of it comes in. */
  fat_tables_report r;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  CHECK_INT(fat_tables_import(db, t, "t.sql", &checked, &r, err, sizeof err), 0);
  added = r.added;
  CHECK_INT(added, 1 + 1 + 1 + 1 + 1 + 1); /* gpu, variant, problem, check, timing, winner */
  CHECK_INT(r.trust.builds_dropped, 1);
  fat_db_close(db);
  free(t);
  size_t len = strlen(v[0].source);
  char *edited = malloc(len + 64);
  REQUIRE_EXIT(edited);
  snprintf(edited, len + 64, "%s// an older template\n", v[0].source);
  char edited_hash[65];
  fat_sha256_hex(edited, strlen(edited), edited_hash);
  t = table_of(v[0].name, edited, "sm_90a");
  snprintf(want, sizeof want, "t.sql: variant %s: table source_hash %s, generator gives %s; "
           "refusing a stale table", v[0].name, edited_hash, v[0].hash);
  REFUSED(t, NULL, want);
  free(t);
  free(edited);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* fat_verify_cubin on its own: every refusal with its message. */
static void verify_cubin(void) {
  char err[ERRLEN], good[65], bad[65];
  fat_sha256_hex(CUBIN, CUBIN_BYTES, good);
  snprintf(bad, sizeof bad, "%s", good);
  bad[0] = bad[0] == '0' ? '1' : '0';
  CHECK_INT(fat_verify_cubin(CUBIN, CUBIN_BYTES, good, "sm_90a", "sm_90a", err, sizeof err), FAT_OK);
  CHECK_STR(err, "");
  char want[ERRLEN];
  CHECK_INT(fat_verify_cubin(CUBIN, CUBIN_BYTES, bad, "sm_90a", "sm_90a", err, sizeof err), FAT_ERR_INTEGRITY);
  snprintf(want, sizeof want, "the cubin's sha256 %s does not match its recorded %s", good, bad);
  CHECK_STR(err, want);
  CHECK_INT(fat_verify_cubin(CUBIN, CUBIN_BYTES, good, "sm_80", "sm_90a", err, sizeof err), FAT_ERR_UNSUPPORTED);
  CHECK_STR(err, "the cubin was built for sm_80, this GPU is sm_90a");
  CHECK_INT(fat_verify_cubin(CUBIN, CUBIN_BYTES, NULL, "sm_90a", "sm_90a", err, sizeof err), FAT_ERR_INTEGRITY);
  CHECK_STR(err, "the cubin has no recorded sha256: not trusted");
  CHECK_INT(fat_verify_cubin(CUBIN, CUBIN_BYTES, "", "sm_90a", "sm_90a", err, sizeof err), FAT_ERR_INTEGRITY);
  CHECK_STR(err, "the cubin has no recorded sha256: not trusted");
  CHECK_INT(fat_verify_cubin(NULL, 0, good, "sm_90a", "sm_90a", err, sizeof err), FAT_ERR_INTEGRITY);
  CHECK_STR(err, "the cubin is empty");
  /* The size is refused before a byte is read. */
  CHECK_INT(fat_verify_cubin(CUBIN, (size_t)FAT_TABLES_MAX_CUBIN_BYTES + 1, good, "sm_90a", "sm_90a",
                             err, sizeof err), FAT_ERR_INTEGRITY);
  CHECK_STR(err, "the cubin of 67108865 bytes is over the 67108864-byte cap");
  CHECK_INT(fat_verify_cubin(CUBIN, CUBIN_BYTES, good, NULL, "sm_90a", err, sizeof err), FAT_ERR_UNSUPPORTED);
  CHECK_STR(err, "the cubin was built for (no architecture), this GPU is sm_90a");
  CHECK_INT(fat_verify_cubin(CUBIN, CUBIN_BYTES, bad, "sm_90a", "sm_90a", NULL, 0), FAT_ERR_INTEGRITY);
}

/* What an offline H200 context would load for the one winner of TABLE. */
static fat_choice offline_choice(const char *table) {
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  fat_choice ch = FAT_CHOICE_INIT;
  const char *tables[1] = {table};
  o.user_db = "", o.tables = tables, o.n_tables = 1;
  o.gpu_name = H200, o.gpu_cc_major = 9, o.gpu_cc_minor = 0, o.gpu_sm_count = H200_SMS;
  REQUIRE_EXIT(fat_context_open(&c, &o) == FAT_OK);
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = 1, a.heads = a.heads_k = 16, a.seqlen_q = a.seqlen_k = 1024, a.head_dim = 64;
  a.dtype = FAT_ATTN_FP16, a.mask = FAT_ATTN_MASK_NONE;
  if (fat_attention_select(c, &a, &ch)) fprintf(stderr, "select: %s\n", fat_context_error(c));
  fat_context_close(c);
  return ch;
}

static void runtime_cubin_choice(void) {
  char path[256], err[ERRLEN], want[ERRLEN], key[65];
  const char *vname = "fwd.mma80.fp16.d64.none.m64n64w4s2";
  fat_db *db = NULL;
  /* A build for this architecture with its hash: loaded as stored. */
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  put_winner(db, vname, NULL, "sm_90a");
  fat_db_close(db);
  fat_choice ch = offline_choice(path);
  CHECK_STR(ch.variant, vname);
  CHECK_INT(ch.loaded, 0);
  CHECK_INT(ch.load, FAT_LOAD_STORED_CUBIN);
  CHECK_STR(ch.note, "");
  /* The same cubin bytes altered in place: refused, compiled instead. */
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE_EXIT(sqlite3_exec(fat_db_handle(db), "UPDATE builds SET cubin = X'7f454c460001fe'", NULL,
                            NULL, NULL) == SQLITE_OK);
  fat_db_close(db);
  ch = offline_choice(path);
  char good[65], evil[65];
  const unsigned char evil_bytes[CUBIN_BYTES] = {0x7f, 'E', 'L', 'F', 0, 1, 0xfe};
  fat_sha256_hex(CUBIN, CUBIN_BYTES, good);
  fat_sha256_hex(evil_bytes, CUBIN_BYTES, evil);
  snprintf(key, sizeof key, "%s/sm_90a", vname);
  fat_sha256_hex(key, strlen(key), key);
  CHECK_INT(ch.load, FAT_LOAD_COMPILED);
  snprintf(want, sizeof want, "%s: build %.12s: the cubin's sha256 %s does not match its recorded "
           "%s; compiling from source", path, key, evil, good);
  want[sizeof ch.note - 1] = 0;
  CHECK_STR(ch.note, want);
  /* A cubin for another architecture (sm_80 offered to an sm_90a GPU). */
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  put_winner(db, vname, NULL, "sm_80");
  fat_db_close(db);
  ch = offline_choice(path);
  snprintf(key, sizeof key, "%s/sm_80", vname);
  fat_sha256_hex(key, strlen(key), key);
  CHECK_INT(ch.load, FAT_LOAD_COMPILED);
  snprintf(want, sizeof want, "%s: build %.12s: the cubin was built for sm_80, this GPU is sm_90a;"
           " compiling from source", path, key);
  CHECK_STR(ch.note, want);
  /* A build whose hash row is missing (an older fatune stored it). */
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  put_winner(db, vname, NULL, "sm_90a");
  REQUIRE_EXIT(sqlite3_exec(fat_db_handle(db), "DELETE FROM build_hashes", NULL, NULL, NULL) == SQLITE_OK);
  fat_db_close(db);
  ch = offline_choice(path);
  snprintf(key, sizeof key, "%s/sm_90a", vname);
  fat_sha256_hex(key, strlen(key), key);
  CHECK_INT(ch.load, FAT_LOAD_COMPILED);
  snprintf(want, sizeof want, "%s: build %.12s: the cubin has no recorded sha256: not trusted;"
           " compiling from source", path, key);
  CHECK_STR(ch.note, want);
}

/* TEXT with every "\n" made "\r\n" (heap). */
static char *crlf(const char *text) {
  size_t n = 0;
  for (const char *c = text; *c; c++) n += 1 + (*c == '\n');
  char *out = malloc(n + 1), *w = out;
  REQUIRE_EXIT(out);
  for (const char *c = text; *c; c++) {
    if (*c == '\n') *w++ = '\r';
    *w++ = *c;
  }
  *w = 0;
  return out;
}

/* Imports TEXT into a fresh database; the rows it added, or -1 with ERR. */
static long long imported(const char *text, char *err, size_t errlen) {
  char path[256];
  fat_db *db = NULL;
  fat_tables_report r;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, errlen) == 0);
  const int rc = fat_tables_import(db, text, "t.sql", &checked, &r, err, errlen);
  fat_db_close(db);
  return rc ? -1 : r.added;
}

/* What editors and transfers do to a text file is no refusal: CR LF line
 * ends, a byte order mark, blank lines after the end line. A file that is
 * cut, or holds a statement SQLite cannot read, is refused naming its line,
 * and a mangled blob is quoted at its start, not whole. */
static void table_text_forms(fat_gen *g) {
  char err[ERRLEN], want[ERRLEN];
  int hd = 64;
  fat_dtype dt = FAT_FP16;
  fat_mask mk = FAT_MASK_NONE;
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
  fat_variant *v = NULL;
  size_t n = 0;
  REQUIRE_EXIT(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == 0 && n >= 1);
  char *good = table_of_real(&v[0]);
  const long long rows = imported(good, err, sizeof err);
  CHECK_WHY(rows == 6, "the table as exported: %lld rows (%s)", rows, err);
  char *t = crlf(good);
  CHECK_WHY(imported(t, err, sizeof err) == rows, "CR LF: %s", err);
  free(t);
  size_t len = strlen(good);
  t = malloc(len + 16);
  REQUIRE_EXIT(t);
  snprintf(t, len + 16, "%s\n\n", good);
  CHECK_WHY(imported(t, err, sizeof err) == rows, "blank lines after the end: %s", err);
  snprintf(t, len + 16, "\xef\xbb\xbf%s", good);
  CHECK_WHY(imported(t, err, sizeof err) == rows, "byte order mark: %s", err);
  free(t);
  /* A statement SQLite cannot parse: its line. */
  t = replaced(good, "INSERT INTO timings", "INSERT INTO timings VALUES (;\nINSERT INTO timings");
  long line = 1;
  for (const char *c = t; c < strstr(t, "VALUES (;"); c++) line += *c == '\n';
  snprintf(want, sizeof want, "t.sql:%ld: near \";\": syntax error", line);
  REFUSED(t, NULL, want);
  free(t);
  /* A blob of 301 hex digits (one cut off): the message quotes its start. */
  char blob[400] = "X'";
  memset(blob + 2, 'a', 301);
  strcpy(blob + 303, "'");
  char *u = replaced(good, "VALUES (", blob);
  line = 1;
  for (const char *c = u; c < strstr(u, blob); c++) line += *c == '\n';
  char msg[512];
  snprintf(msg, sizeof msg, "unrecognized token: \"%s\"", blob);
  snprintf(want, sizeof want, "t.sql:%ld: %.160s... (%zu more characters)", line, msg,
           strlen(msg) - 160);
  REFUSED(u, NULL, want);
  free(u);
  free(good);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* Rows that are well-formed and false, refused by their bounds: a passed
 * check with an infinite or out-of-tolerance error, timings no GPU can
 * make (which would win every merge), reps past the tuner's, a compute
 * capability or a GPU name no GPU has (a newline would add lines to an
 * export's header, a NUL cut the name). A GPU row nothing refers to is
 * left out, not merged. The exported header cannot gain a line either. */
static void hostile_measurements(fat_gen *g) {
  char err[ERRLEN];
  int hd = 64;
  fat_dtype dt = FAT_FP16;
  fat_mask mk = FAT_MASK_NONE;
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
  fat_variant *v = NULL;
  size_t n = 0;
  REQUIRE_EXIT(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == 0 && n >= 1);
  char *good = table_of_real(&v[0]);
  static const char *const check_values = "256, 256, 0.002, 0.01, 1.0000000000000001e-05, 0, 1, 'ok'";
  static const char *const timing_values =
      "20, 1, 0.90000000000000002, 1.2, 0.94999999999999996, 1.05, 1, 1755";
  REQUIRE_EXIT(strstr(good, check_values) && strstr(good, timing_values) &&
               strstr(good, "'NVIDIA H200', 9, 0, 132,"));
  const struct { const char *from, *to, *want; } cases[] = {
      {check_values, "256, 256, 1e999, 0.01, 1.0000000000000001e-05, 0, 1, 'ok'",
       "t.sql: checks row 1: passed with rel_l2 inf over the fwd fp16 tolerance 0.002"},
      {check_values, "256, 256, 0.5, 0.01, 1.0000000000000001e-05, 0, 1, 'ok'",
       "t.sql: checks row 1: passed with rel_l2 0.5 over the fwd fp16 tolerance 0.002"},
      {check_values, "256, 256, 0.002, 1e999, 1.0000000000000001e-05, 0, 1, 'ok'",
       "t.sql: checks row 1: passed with max_abs is not finite"},
      {check_values, "256, 256, 0.002, 0.01, 0.5, 0, 1, 'ok'",
       "t.sql: checks row 1: passed with lse_max_abs 0.5 over the tolerance 0.002"},
      {timing_values, "20, 1e-300, 1e-300, 1e-300, 1e-300, 1e-300, 1, 1755",
       "t.sql: timings row 1: median_ms 1e-300 is outside [0.001, 3.6e+06]"},
      {timing_values, "20, 0.001, 0.001, 0.001, 0.001, 0.001, 1, 1755",
       "t.sql: timings row 1: median_ms 0.001 puts its problem at 1.37e+05 TFLOP/s, more than "
       "10000"},
      {timing_values, "9223372036854775807, 1, 0.90000000000000002, 1.2, 0.94999999999999996, "
       "1.05, 1, 1755", "t.sql: timings row 1: reps 9223372036854775807 is outside [20, 10000]: a"
       " winner's timing is a full one"},
      /* A screening's few repetitions are no winner's timing, nor a drop's one. */
      {timing_values, "5, 1, 0.90000000000000002, 1.2, 0.94999999999999996, 1.05, 1, 1755",
       "t.sql: timings row 1: reps 5 is outside [20, 10000]: a winner's timing is a full one"},
      {timing_values, "1, 1, 1, 1, 1, 1, 1, 1755",
       "t.sql: timings row 1: reps 1 is outside [20, 10000]: a winner's timing is a full one"},
      {timing_values, "20, 1, 0.90000000000000002, 1.2, 0.94999999999999996, 1.05, 1e999, 1755",
       "t.sql: timings row 1: tflops inf is more than 10000"},
      {"'NVIDIA H200', 9, 0, 132,", "'NVIDIA H200', 2147483648, 0, 132,",
       "t.sql: gpus row 1: cc_major 2147483648 is outside [1, 99]"},
      {"'NVIDIA H200', 9, 0, 132,", "'NVIDIA H200', 9, -5, 132,",
       "t.sql: CHECK constraint failed: cc_minor >= 0"},
      {"'NVIDIA H200', 9, 0, 132,", "'NVIDIA H200', 9, 12, 132,",
       "t.sql: gpus row 1: cc_minor 12 is outside [0, 9]"},
      {"'NVIDIA H200', 9, 0, 132,", "'NVIDIA' || char(10) || '-- H200', 9, 0, 132,",
       "t.sql: gpus row 1: byte 7 of the name is 0x0a, a control character"},
      {"'NVIDIA H200', 9, 0, 132,", "'NVIDIA' || char(0) || 'H200', 9, 0, 132,",
       "t.sql: gpus row 1: byte 7 of the name is 0x00, a control character"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *t = replaced(good, cases[i].from, cases[i].to);
    /* The CHECK constraint's refusal names its line (the gpus row's, 6). */
    if (strstr(cases[i].want, "CHECK constraint")) {
      char want[ERRLEN];
      snprintf(want, sizeof want, "t.sql:6: %s", cases[i].want + strlen("t.sql: "));
      REFUSED(t, NULL, want);
    } else {
      REFUSED(t, NULL, cases[i].want);
    }
    free(t);
  }
  /* A timing of fewer repetitions than a screening's beside the winner's is
   * a drop (a screening stopped after one, db.h's FAT_DROP_FACTOR): taken
   * where its median is more than 1.5x its problem's best of at least a
   * screening's (the winner's 1 ms here) -- 1.6 -- and refused, naming
   * both numbers, where it is not -- 1.4 -- or where no such best is. */
  {
    const char *line = strstr(good, "INSERT INTO timings ");
    REQUIRE_EXIT(line);
    const char *eol = strchr(line, '\n');
    REQUIRE_EXIT(eol);
    char *first = strndup(line, (size_t)(eol - line + 1));
    REQUIRE_EXIT(first && strstr(first, "VALUES (1, "));
    static const struct { const char *values, *want; } drops[] = {
        {"1, 1.6000000000000001, 1.6000000000000001, 1.6000000000000001, 1.6000000000000001,"
         " 1.6000000000000001, 1, 1755", NULL},
        {"1, 1.3999999999999999, 1.3999999999999999, 1.3999999999999999, 1.3999999999999999,"
         " 1.3999999999999999, 1, 1755",
         "t.sql: timings row 2: reps 1 is fewer than a screening's 5, and median_ms 1.4 is not"
         " more than 1.5x its problem's best of at least 5 reps (1)"},
    };
    for (size_t i = 0; i < sizeof drops / sizeof drops[0]; i++) {
      char *two = replaced(first, "VALUES (1, ", "VALUES (2, ");
      char *second = replaced(two, timing_values, drops[i].values);
      size_t cut = (size_t)(eol + 1 - good);
      char *t2 = malloc(strlen(good) + strlen(second) + 1);
      REQUIRE_EXIT(t2);
      memcpy(t2, good, cut);
      strcpy(t2 + cut, second);
      strcat(t2, good + cut);
      if (drops[i].want) {
        REFUSED(t2, NULL, drops[i].want);
      } else {
        char path[256];
        fat_db *db = NULL;
        REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
        CHECK_INT(fat_tables_import(db, t2, "t.sql", &checked, NULL, err, sizeof err), 0);
        fat_db_close(db);
        /* The winner's timing made a drop too: no best is left to be behind. */
        char *alone = replaced(t2, timing_values, "1, 1, 1, 1, 1, 1, 1, 1755");
        REFUSED(alone, NULL, "t.sql: timings row 1: reps 1 is outside [20, 10000]: a winner's"
                             " timing is a full one");
        free(alone);
      }
      free(t2), free(second), free(two);
    }
    free(first);
  }
  /* An e4m3 check is held to the e4m3 tolerance (tolerance.h), looser than
   * the 16-bit ones but not past it: the rows made e4m3 (variant and
   * problem alike), 0.08 is over its 0.07. */
  {
    char *e4m3 = strdup(good), *at;
    REQUIRE_EXIT(e4m3);
    while ((at = strstr(e4m3, "'fp16'")) != NULL) memcpy(at, "'e4m3'", 6);
    char *t8 = replaced(e4m3, check_values, "256, 256, 0.08, 0.01, 1.0000000000000001e-05, 0, 1, 'ok'");
    REFUSED(t8, NULL, "t.sql: checks row 1: passed with rel_l2 0.08 over the fwd e4m3 tolerance 0.07");
    free(t8);
    free(e4m3);
  }
  /* An fp8 K/V cache's check is held to its Q's 16-bit tolerance, not
   * e4m3's: the rows made fp16-e4m3kv, 0.003 is over fp16's 0.002;
   * made bf16-e4m3kv, 0.02 over bf16's 0.01. */
  static const struct { const char *dtype, *values, *want; } kv8[] = {
      {"'fp16-e4m3kv'", "256, 256, 0.003, 0.01, 1.0000000000000001e-05, 0, 1, 'ok'",
       "t.sql: checks row 1: passed with rel_l2 0.003 over the fwd fp16-e4m3kv tolerance 0.002"},
      {"'bf16-e4m3kv'", "256, 256, 0.02, 0.01, 1.0000000000000001e-05, 0, 1, 'ok'",
       "t.sql: checks row 1: passed with rel_l2 0.02 over the fwd bf16-e4m3kv tolerance 0.01"},
  };
  for (size_t i = 0; i < sizeof kv8 / sizeof kv8[0]; i++) {
    char *rows = strdup(good), *next;
    REQUIRE_EXIT(rows);
    while (strstr(rows, "'fp16'")) {
      next = replaced(rows, "'fp16'", kv8[i].dtype);
      free(rows);
      rows = next;
    }
    char *t = replaced(rows, check_values, kv8[i].values);
    REFUSED(t, NULL, kv8[i].want);
    free(t);
    free(rows);
  }
  /* A name longer than any GPU's. */
  char long_name[400] = "'";
  memset(long_name + 1, 'x', 300);
  strcpy(long_name + 301, "', 9, 0, 132,");
  char *t = replaced(good, "'NVIDIA H200', 9, 0, 132,", long_name);
  REFUSED(t, NULL, "t.sql: gpus row 1: a name of 300 bytes, more than 255");
  free(t);
  /* A second GPU row that nothing refers to: left out. */
  const char *gpu_row = strstr(good, "INSERT INTO gpus ");
  REQUIRE_EXIT(gpu_row);
  const char *eol = strchr(gpu_row, '\n');
  char *idle = strndup(gpu_row, (size_t)(eol - gpu_row + 1));
  REQUIRE_EXIT(idle);
  char *idle2 = replaced(idle, "VALUES (1, 'NVIDIA H200'", "VALUES (2, 'NVIDIA B200'");
  size_t len = strlen(good) + strlen(idle2) + 1;
  t = malloc(len);
  REQUIRE_EXIT(t);
  snprintf(t, len, "%.*s%s%s", (int)(eol + 1 - good), good, idle2, eol + 1);
  CHECK_WHY(imported(t, err, sizeof err) == 6, "an idle GPU row: %s", err);
  free(t), free(idle), free(idle2);
  free(good);
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
  /* Export writes a control character of a name as \xNN: its header gains
   * no line. */
  char path[256];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(new_db(path, sizeof path), &db, err, sizeof err) == 0);
  put_winner(db, "fwd.mma80.fp16.d64.none.m64n64w4s2", NULL, "sm_90a");
  REQUIRE_EXIT(sqlite3_exec(fat_db_handle(db), "UPDATE gpus SET name = 'NVIDIA' || char(10) ||"
                            " 'INSERT INTO winners'", NULL, NULL, NULL) == SQLITE_OK);
  char *buf = NULL;
  size_t blen = 0;
  FILE *f = open_memstream(&buf, &blen);
  REQUIRE_EXIT(f);
  CHECK_INT(fat_tables_export(db, "NVIDIA\nINSERT INTO winners", NULL, f, err, sizeof err), 0);
  fclose(f);
  const char *header = FAT_TABLES_MAGIC ": the tuned winners for NVIDIA\\x0aINSERT INTO winners\n"
                       "-- Generated by fatune ";
  CHECK(buf && !strncmp(buf, header, strlen(header)));
  free(buf);
  fat_db_close(db);
}

int main(void) {
  char err[ERRLEN];
  REQUIRE_EXIT(mkdtemp(dir));
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  REQUIRE_EXIT(g);
  checked.trust = fat_trust_open(g);
  REQUIRE_EXIT(checked.trust);
  hostile_sql(g);
  hostile_names_and_sources(g);
  table_text_forms(g);
  hostile_measurements(g);
  verify_cubin();
  runtime_cubin_choice();
  fat_trust_close(checked.trust);
  fat_gen_close(g);
  printf("%d hostile table files refused with their messages\n", n_hostile);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_summary("test_tables_hostile");
}
