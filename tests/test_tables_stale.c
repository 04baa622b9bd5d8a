/* A shipped table must never drift from the templates: every winner in
 * shipped table (db/tables, one .sql per GPU model) must have the source hash the generator gives its
 * variant today. The detector itself is shown to fire first, on a database
 * built here with one current, one changed and one vanished variant. */
#include <dirent.h>
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

#define REPORT_CAP 65536

/* V as the winner of its (dtype, mask, head dim) at seqlen 1024 on a GPU. */
static void put_winner(fat_db *db, const fat_variant *v) {
  fat_gpu_info g = {0};
  snprintf(g.name, sizeof g.name, "NVIDIA H200");
  g.cc_major = 9, g.sm_count = 132, g.driver_version = 13000, g.nvrtc_major = 13;
  fat_problem p;
  fat_bench_problem(v->dtype, v->mask, v->head_dim, 1024, &p);
  fat_check c = {1, 2, 256, 256, 0.002, 0.01, 1e-5, 0, 1, "ok"};
  fat_timing t = {20, 1.0, 0.9, 1.2, 0.95, 1.05, 1.0, 1755};
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE_EXIT(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE_EXIT(fat_db_put_variant(db, v, &vid) == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  REQUIRE_EXIT(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  REQUIRE_EXIT(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

int main(void) {
  char dir[] = "/tmp/fatune-stale-XXXXXX", path[256], err[1024], want[1024];
  char *report = malloc(REPORT_CAP);
  const char *src = getenv("FATUNE_SOURCE_DIR");
  REQUIRE_EXIT(report && src && mkdtemp(dir));
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  REQUIRE_EXIT(g);

  /* The detector: three d64 fp16 variants of today, one left as it is, one
   * with a changed source, one renamed to a configuration that does not exist. */
  int hd = 64;
  fat_dtype dt = FAT_FP16;
  fat_mask mk = FAT_MASK_NONE;
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
  fat_variant *v = NULL;
  size_t n = 0;
  REQUIRE_EXIT(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == 0 && n >= 3);
  char old_hash[65];
  snprintf(old_hash, sizeof old_hash, "%s", v[1].hash);
  char *changed = malloc(strlen(v[1].source) + 32);
  sprintf(changed, "%s// an older template\n", v[1].source);
  free(v[1].source);
  v[1].source = changed;
  fat_sha256_hex(changed, strlen(changed), v[1].hash);
  free(v[2].name);
  v[2].name = strdup("fwd.mma80.fp16.d64.none.m999n64w4s1");
  /* One database per case, each with that variant as its only winner. */
  for (int i = 0; i < 3; i++) {
    fat_db *d = NULL;
    snprintf(path, sizeof path, "%s/made%d.db", dir, i);
    REQUIRE_EXIT(fat_db_open(path, &d, err, sizeof err) == 0);
    put_winner(d, &v[i]);
    int stale = fat_tables_stale(d, g, report, REPORT_CAP, err, sizeof err);
    fat_db_close(d);
    if (i == 0) {
      CHECK_INT(stale, 0);
      CHECK_STR(report, "");
    } else if (i == 1) {
      CHECK_INT(stale, 1);
      snprintf(want, sizeof want, "stale: %s: table source_hash %s, generator gives %s\n",
               v[1].name, v[1].hash, old_hash);
      CHECK_STR(report, want);
    } else {
      CHECK_INT(stale, 1);
      CHECK_STR(report, "stale: fwd.mma80.fp16.d64.none.m999n64w4s1: the generator no longer "
                        "produces this variant\n");
    }
  }
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);

  /* The shipped tables. */
  char tables_dir[4096];
  snprintf(tables_dir, sizeof tables_dir, "%s/db/tables", src);
  DIR *d = opendir(tables_dir);
  int n_tables = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".sql")) continue;
    char file[8192], dbp[300];
    snprintf(file, sizeof file, "%s/%s", tables_dir, e->d_name);
    snprintf(dbp, sizeof dbp, "%s/shipped%d.db", dir, n_tables);
    char *text = read_all(file);
    fat_db *sdb = NULL;
    REQUIRE_EXIT(fat_db_open(dbp, &sdb, err, sizeof err) == 0);
    long long added = 0;
    int rc = fat_tables_import(sdb, text, e->d_name, &added, err, sizeof err);
    CHECK_WHY(rc == 0, "import gave %d: %s", rc, err);
    int stale = fat_tables_stale(sdb, g, report, REPORT_CAP, err, sizeof err);
    CHECK_WHY(stale == 0, "%s: %d stale entries (re-tune and re-export):\n%s", e->d_name, stale, report);
    if (stale == 0) printf("%s: %lld rows, every winner current\n", e->d_name, added);
    fat_db_close(sdb);
    free(text);
    n_tables++;
  }
  if (d) closedir(d);
  printf("%d shipped table(s) checked\n", n_tables);

  fat_gen_close(g);
  free(report);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_summary("test_tables_stale");
}
