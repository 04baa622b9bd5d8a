/* Shipped tables (tuner/tables.c) on databases built here: export -> import
 * -> export is byte-identical; importing or merging twice adds nothing; the
 * exported text is one INSERT per line with blobs as X'hex'; an import that
 * tries anything but INSERT into fatune's tables is refused with its reason;
 * the command line's usage errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "db.h"
#include "sha256.h"
#include "tables.h"
#include "tune.h"

static int failures;
#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);     \
      failures++;                                                             \
    }                                                                         \
  } while (0)
#define EXPECT_INT(got, want)                                                 \
  do {                                                                        \
    long long g_ = (got), w_ = (want);                                        \
    if (g_ != w_) {                                                           \
      fprintf(stderr, "%s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #got, g_, w_); \
      failures++;                                                             \
    }                                                                         \
  } while (0)
#define EXPECT_STR(got, want)                                                 \
  do {                                                                        \
    const char *g_ = (got), *w_ = (want);                                     \
    if (strcmp(g_, w_)) {                                                     \
      fprintf(stderr, "%s:%d: %s = \"%s\", want \"%s\"\n", __FILE__, __LINE__, #got, g_, w_); \
      failures++;                                                             \
    }                                                                         \
  } while (0)
#define REQUIRE(cond)                                                         \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: required %s\n", __FILE__, __LINE__, #cond);     \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

#define H200 "NVIDIA H200"

/* A winner with a cubin build, a source with quotes and newlines, two
 * checks and a fractional timing: everything export must carry exactly. */
static void put_winner(fat_db *db, const char *gpu, const char *vname, fat_mask mk, int seqlen,
                       double ms) {
  char source[256];
  fat_gpu_info g = {0};
  snprintf(g.name, sizeof g.name, "%s", gpu);
  g.cc_major = 9, g.sm_count = 132, g.driver_version = 13000, g.nvrtc_major = 13;
  g.mem_bytes = 150ull << 30, g.smem_per_block_optin = 232448;
  fat_problem p;
  fat_bench_problem(FAT_BF16, mk, 128, seqlen, &p);
  fat_variant v = {0};
  snprintf(source, sizeof source, "// '%s'\n\textern \"C\" __global__ void f() {}\r\n", vname);
  v.name = (char *)vname, v.family = "mma80", v.entry = "f", v.source = source;
  v.params = "BLOCK_M=64 BLOCK_N=32 STAGES=2 WARPS=4";
  fat_sha256_hex(source, strlen(source), v.hash);
  v.direction = FAT_FWD, v.dtype = FAT_BF16, v.mask = mk, v.head_dim = 128;
  v.block_m = 64, v.threads = 128, v.smem_bytes = 40960;
  unsigned char cubin[] = {0x7f, 'E', 'L', 'F', 0, 1, 0xff};
  fat_build b = {0};
  snprintf(b.arch, sizeof b.arch, "sm_90a");
  fat_sha256_hex(vname, strlen(vname), b.key);
  b.ok = 1, b.cubin = cubin, b.cubin_size = sizeof cubin, b.registers = 168, b.compile_ms = 812.25;
  b.log = "ptxas info";
  fat_check c1 = {1, 2, 256, 256, 0.0021, 0.0123, 1e-5, 0, 1, "ok"};
  fat_check c2 = {1, 2, 203, 203, 1.0 / 3.0, 0.1, 2e-6, 0, 1, "ok"};
  c2.rel_l2 = 0.0019999999999999999;
  fat_timing t = {20, ms, ms * 0.9, ms * 1.2, ms * 0.95, ms * 1.05, 1.0 / ms, 1755};
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE(fat_db_put_variant(db, &v, &vid) == 0);
  REQUIRE(fat_db_put_build(db, vid, &b, "--std=c++17", "13.0") == 0);
  REQUIRE(fat_db_put_check(db, vid, gid, pid, &c1) == 0);
  REQUIRE(fat_db_put_check(db, vid, gid, pid, &c2) == 0);
  REQUIRE(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  REQUIRE(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
}

static char *export_text(const char *path, const char *gpu) {
  char err[1024];
  fat_db *db = NULL;
  char *buf = NULL;
  size_t len = 0;
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  FILE *f = open_memstream(&buf, &len);
  int rc = fat_tables_export(db, gpu, f, err, sizeof err);
  fclose(f);
  if (rc) fprintf(stderr, "export: %s\n", err);
  REQUIRE(rc == 0);
  fat_db_close(db);
  return buf;
}

static long long import_text(const char *path, const char *text, char *err, size_t errlen) {
  fat_db *db = NULL;
  long long added = -1;
  REQUIRE(fat_db_open(path, &db, err, errlen) == 0);
  if (fat_tables_import(db, text, "t.sql", &added, err, errlen)) added = -1;
  fat_db_close(db);
  return added;
}

static int count_lines(const char *s, const char *prefix) {
  int n = 0;
  for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    n += !strncmp(l, prefix, strlen(prefix));
  return n;
}

int main(void) {
  char dir[] = "/tmp/fatune-tables-XXXXXX", a[256], b[256], c[256], err[1024];
  REQUIRE(mkdtemp(dir));
  snprintf(a, sizeof a, "%s/a.db", dir);
  snprintf(b, sizeof b, "%s/b.db", dir);
  snprintf(c, sizeof c, "%s/c.db", dir);
  fat_db *db = NULL;
  REQUIRE(fat_db_open(a, &db, err, sizeof err) == 0);
  put_winner(db, H200, "fwd.mma80.bf16.d128.causal.m64n32w4s2", FAT_MASK_CAUSAL, 1024, 0.123456789);
  put_winner(db, H200, "fwd.mma80.bf16.d128.none.m64n32w4s2", FAT_MASK_NONE, 2048, 1.5);
  put_winner(db, "NVIDIA A100-SXM4-80GB", "fwd.mma80.bf16.d128.none.m64n32w4s3", FAT_MASK_NONE, 2048, 2.5);
  fat_db_close(db);

  /* Export: one GPU's rows, one INSERT per line, a header naming fatune. */
  char *first = export_text(a, H200);
  EXPECT(!strncmp(first, FAT_TABLES_MAGIC ": the tuned winners for NVIDIA H200\n",
                  strlen(FAT_TABLES_MAGIC ": the tuned winners for NVIDIA H200\n")));
  EXPECT(strstr(first, "-- Generated by fatune " FAT_VERSION " (fatune export)") != NULL);
  EXPECT_INT(count_lines(first, "INSERT INTO gpus "), 1);
  EXPECT_INT(count_lines(first, "INSERT INTO variants "), 2);
  EXPECT_INT(count_lines(first, "INSERT INTO builds "), 2);
  EXPECT_INT(count_lines(first, "INSERT INTO build_hashes "), 2);
  EXPECT_INT(count_lines(first, "INSERT INTO checks "), 4);
  EXPECT_INT(count_lines(first, "INSERT INTO timings "), 2);
  EXPECT_INT(count_lines(first, "INSERT INTO winners "), 2);
  EXPECT_INT(count_lines(first, "INSERT"), 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
  EXPECT(strstr(first, "X'7f454c460001ff'") != NULL);
  EXPECT(strstr(first, "'// ''fwd.mma80.bf16.d128.causal.m64n32w4s2''' || char(10) || '\textern") != NULL);
  EXPECT(strstr(first, "A100") == NULL);

  /* Round trip: byte-identical. */
  EXPECT_INT(import_text(b, first, err, sizeof err), 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
  char *second = export_text(b, H200);
  EXPECT_STR(second, first);
  /* Importing again adds nothing. */
  EXPECT_INT(import_text(b, first, err, sizeof err), 0);
  char *third = export_text(b, H200);
  EXPECT_STR(third, first);

  /* Merge another machine's database: the A100 comes in once. */
  REQUIRE(fat_db_open(b, &db, err, sizeof err) == 0);
  long long added = -1;
  EXPECT_INT(fat_tables_merge(db, a, &added, err, sizeof err), 0);
  EXPECT_INT(added, 8); /* the A100's gpu, variant, build, its hash, problem, 2 checks, timing... */
  EXPECT_INT(fat_tables_merge(db, a, &added, err, sizeof err), 0);
  EXPECT_INT(added, 0);
  EXPECT_INT(fat_tables_merge(db, c, &added, err, sizeof err), -1);
  char want[512];
  snprintf(want, sizeof want, "cannot read %s: No such file or directory", c);
  EXPECT_STR(err, want);
  fat_db_close(db);
  char *a100 = export_text(b, "NVIDIA A100-SXM4-80GB");
  EXPECT_INT(count_lines(a100, "INSERT INTO winners "), 1);
  REQUIRE(fat_db_open(b, &db, err, sizeof err) == 0);
  FILE *devnull = fopen("/dev/null", "w");
  EXPECT_INT(fat_tables_export(db, "NVIDIA B200", devnull, err, sizeof err), -1);
  EXPECT_STR(err, "no winners for GPU 'NVIDIA B200' in the database");
  fclose(devnull);
  fat_db_close(db);

  /* Import executes nothing but INSERTs into fatune's tables. */
  EXPECT_INT(import_text(c, "-- fatune tables 1\nDROP TABLE winners;\n", err, sizeof err), -1);
  EXPECT_STR(err, "t.sql: refused DELETE FROM 'sqlite_master': a table may only INSERT into fatune's tables");
  EXPECT_INT(import_text(c, "-- fatune tables 1\nINSERT INTO sqlite_master VALUES (1);\n", err, sizeof err), -1);
  EXPECT_STR(err, "t.sql: refused INSERT INTO 'sqlite_master': a table may only INSERT into fatune's tables");
  EXPECT_INT(import_text(c, "-- fatune tables 1\nATTACH '/tmp/x.db' AS x;\n", err, sizeof err), -1);
  EXPECT_STR(err, "t.sql: refused ATTACH '/tmp/x.db': a table may only INSERT into fatune's tables");
  EXPECT_INT(import_text(c, "-- fatune tables 1\nINSERT INTO gpus (name) SELECT load_extension('x');\n", err, sizeof err), -1);
  EXPECT_STR(err, "t.sql: refused SELECT: a table may only INSERT into fatune's tables");
  EXPECT_INT(import_text(c, "INSERT INTO gpus VALUES (1);\n", err, sizeof err), -1);
  EXPECT_STR(err, "t.sql: not a fatune table (first line must start '-- fatune tables 1')");
  REQUIRE(fat_db_open(c, &db, err, sizeof err) == 0);
  sqlite3_stmt *s = NULL;
  REQUIRE(sqlite3_prepare_v2(fat_db_handle(db), "SELECT count(*) FROM winners", -1, &s, NULL) == SQLITE_OK);
  REQUIRE(sqlite3_step(s) == SQLITE_ROW);
  EXPECT_INT(sqlite3_column_int(s, 0), 0);
  sqlite3_finalize(s);
  fat_db_close(db);

  /* The command line. */
  char *bad[] = {"export", "--db", b};
  EXPECT_INT(fat_tables_main(3, bad), 2);
  char *unknown[] = {"frobnicate"};
  EXPECT_INT(fat_tables_main(1, unknown), 2);
  char out_path[300];
  snprintf(out_path, sizeof out_path, "%s/h200.sql", dir);
  char *exp[] = {"export", "--db", b, "--gpu-name", H200, "-o", out_path};
  EXPECT_INT(fat_tables_main(7, exp), 0);
  FILE *f = fopen(out_path, "r");
  REQUIRE(f);
  char *from_cli = calloc(1, strlen(first) + 2);
  EXPECT_INT((long long)fread(from_cli, 1, strlen(first) + 1, f), (long long)strlen(first));
  fclose(f);
  EXPECT_STR(from_cli, first);
  /* `fatune import` regenerates each variant: these stand-in sources are
   * not what the generator produces, so the file is refused whole. */
  char *imp[] = {"import", "--db", c, out_path};
  EXPECT_INT(fat_tables_main(4, imp), 1);
  char *fourth = export_text(b, H200);
  EXPECT_STR(fourth, first);

  free(first), free(second), free(third), free(fourth), free(a100), free(from_cli);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
