/* SPDX-License-Identifier: MIT */
/* Proves --json's summary (summary.h) byte for byte on a fixture database
 * (winners_fixture.h): every field of the run, every winner's row as the
 * end-of-run table reads it (fat_db_summary), numbers in their shortest
 * exact form and null where there is no figure, strings escaped; the
 * outcome of each exit status; a summary saved whole through a temporary
 * and a path that cannot take one refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "summary.h"
#include "winners_fixture.h"

#define ERRLEN 512

static char tmpdir[] = "/tmp/fatune_test_summary_json.XXXXXX";

static const char WANT_JSON[] =
    "{\n"
    "  \"format\": 1,\n"
    "  \"fatune\": \"" FAT_VERSION "\",\n"
    "  \"status\": 0,\n"
    "  \"outcome\": \"done\",\n"
    "  \"database\": \"/tmp/a \\\"b\\\"\\\\c\\n.db\",\n"
    "  \"arch\": \"sm_90a\",\n"
    "  \"gpu\": {\"name\": \"NVIDIA H200\", \"compute_capability\": \"9.0\", \"sm_count\": 132,"
    " \"driver\": 13000, \"nvrtc\": \"13.0\"},\n"
    "  \"no_gpu\": null,\n"
    "  \"shard\": {\"index\": 2, \"count\": 3},\n"
    "  \"problems\": {\"total\": 2, \"done\": 2},\n"
    "  \"variants\": {\"generated\": 6, \"compiled\": 4, \"from_cache\": 2, \"failed\": 0},\n"
    "  \"evaluations\": {\"checked\": 6, \"timed\": 5, \"failed\": 1, \"resumed\": 0},\n"
    "  \"seconds\": {\"generate\": 0.25, \"compile\": 12.9, \"ceilings\": 0.001, \"tune\": 198,"
    " \"total\": 213.123},\n"
    "  \"winners\": [\n"
    "    {\"problem\": \"fwd bf16 d128 causal s4096\", \"direction\": \"fwd\", \"dtype\": \"bf16\","
    " \"mask\": \"causal\", \"head_dim\": 128, \"batch\": 4, \"heads\": 16, \"heads_k\": 16,"
    " \"seqlen_q\": 4096, \"seqlen_k\": 4096, \"window\": [0, 0], \"lengths\": \"\", \"page_size\": 0,"
    " \"winner\": \"fwd.mma80.bf16.d128.causal.m128n128w8s2\", \"median_ms\": 1.5,"
    " \"tflops\": 0.6666666666666666, \"rel_l2\": 0.004, \"max_abs\": 0.016, \"slowest_ms\": 2,"
    " \"default\": \"fwd.mma80.bf16.d128.causal.m128n64w4s1\", \"default_ms\": 2,"
    " \"materialize_ms\": 8, \"passed\": 3, \"failed\": 1},\n"
    "    {\"problem\": \"fwd fp16 d64 none s1024\", \"direction\": \"fwd\", \"dtype\": \"fp16\","
    " \"mask\": \"none\", \"head_dim\": 64, \"batch\": 16, \"heads\": 32, \"heads_k\": 32,"
    " \"seqlen_q\": 1024, \"seqlen_k\": 1024, \"window\": [0, 0], \"lengths\": \"\", \"page_size\": 0,"
    " \"winner\": \"fwd.mma80.fp16.d64.none.m128n64w4s1\", \"median_ms\": 0.5, \"tflops\": 2,"
    " \"rel_l2\": 0.001, \"max_abs\": 0.004, \"slowest_ms\": 0.75,"
    " \"default\": \"fwd.mma80.fp16.d64.none.m128n64w4s1\", \"default_ms\": 0.5,"
    " \"materialize_ms\": null, \"passed\": 2, \"failed\": 0}\n"
    "  ]\n"
    "}\n";

/* Without a GPU: its reason, the stages not reached null, no winners. */
static const char WANT_NO_GPU_TAIL[] =
    "  \"gpu\": null,\n"
    "  \"no_gpu\": \"no CUDA driver: \\tgone\",\n"
    "  \"shard\": {\"index\": 1, \"count\": 1},\n"
    "  \"problems\": {\"total\": 2, \"done\": 0},\n"
    "  \"variants\": {\"generated\": 6, \"compiled\": 6, \"from_cache\": 0, \"failed\": 1},\n"
    "  \"evaluations\": {\"checked\": 0, \"timed\": 0, \"failed\": 0, \"resumed\": 0},\n"
    "  \"seconds\": {\"generate\": 0.02, \"compile\": 3.5, \"ceilings\": null, \"tune\": null,"
    " \"total\": 3.6},\n"
    "  \"winners\": []\n"
    "}\n";

/* The summary of S and ROWS as text (heap), or NULL. */
static char *json_of(const fat_run_summary *s, const fat_db_summary_row *rows, size_t n) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  int rc = fat_summary_write_json(f, s, rows, n);
  fclose(f);
  if (rc) {
    free(buf);
    return NULL;
  }
  return buf;
}

static void test_fixture_summary(void) {
  char err[ERRLEN], path[256];
  fat_db *db = NULL;
  fixture fx;
  fat_db_summary_row *rows = NULL;
  size_t n = 0;
  char *got = NULL;
  snprintf(path, sizeof path, "%s/fixture.db", tmpdir);
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE(fixture_fill(db, &fx) == 0);
  for (int k = 0; k < FIX_N_PROBLEMS; k++) {
    fat_db_choice best;
    int found = 0;
    REQUIRE(fat_db_decide_winner(db, fx.gpu_id, fx.problem_ids[k], &best, &found, NULL) == 0 && found);
  }
  REQUIRE(fat_db_summary(db, fx.gpu_id, &rows, &n) == 0);
  CHECK_INT(n, FIX_N_PROBLEMS);
  const fat_gpu_info g = fixture_gpu();
  fat_run_summary s = {.status = 0, .db_path = "/tmp/a \"b\"\\c\n.db", .arch = "sm_90a",
                       .gpu = &g, .no_gpu = "", .shard_index = 2, .shard_count = 3,
                       .problems = 2, .problems_done = 2, .variants = 6, .compiled = 4,
                       .cached = 2, .compile_failed = 0, .checked = 6, .timed = 5,
                       .check_failed = 1, .resumed = 0,
                       .stage_s = {0.25, 12.9, 0.0012, 198.0004}, .total_s = 213.1234};
  got = json_of(&s, rows, n);
  CHECK_STR(got, WANT_JSON);
  free(got);
  /* One device listed is none: the single-GPU run's JSON as it was. */
  const fat_summary_device one = {.index = 0, .gpu = &g};
  s.devices = &one, s.n_devices = 1;
  got = json_of(&s, rows, n);
  CHECK_STR(got, WANT_JSON);
  free(got);
  /* Several GPUs: each listed after the first model's; with several models
   * each winner names its GPU. */
  fat_gpu_info a100 = g;
  snprintf(a100.name, sizeof a100.name, "NVIDIA A100-SXM4-80GB");
  a100.cc_major = 8, a100.sm_count = 108;
  const fat_summary_device devices[3] = {{.index = 0, .gpu = &g}, {.index = 1, .gpu = &g},
                                         {.index = 3, .gpu = &a100}};
  const char *row_gpus[FIX_N_PROBLEMS];
  for (int k = 0; k < FIX_N_PROBLEMS; k++) row_gpus[k] = k ? a100.name : g.name;
  s.devices = devices, s.n_devices = 3, s.row_gpus = row_gpus;
  got = json_of(&s, rows, n);
  char want[2048];
  snprintf(want, sizeof want, "  \"gpu\": {\"name\": \"%s\", \"compute_capability\": \"9.0\","
           " \"sm_count\": 132, \"driver\": 13000, \"nvrtc\": \"13.0\"},\n  \"devices\": [{\"index\": 0,"
           " \"gpu\": {\"name\": \"%s\", \"compute_capability\": \"9.0\", \"sm_count\": 132, \"driver\":"
           " 13000, \"nvrtc\": \"13.0\"}}, {\"index\": 1, \"gpu\": {\"name\": \"%s\","
           " \"compute_capability\": \"9.0\", \"sm_count\": 132, \"driver\": 13000, \"nvrtc\": \"13.0\"}},"
           " {\"index\": 3, \"gpu\": {\"name\": \"NVIDIA A100-SXM4-80GB\", \"compute_capability\": \"8.0\","
           " \"sm_count\": 108, \"driver\": 13000, \"nvrtc\": \"13.0\"}}],\n  \"no_gpu\": null,\n",
           g.name, g.name, g.name);
  CHECK_CONTAINS(got, want);
  snprintf(want, sizeof want, "  \"winners\": [\n    {\"gpu\": \"%s\", \"problem\": ", g.name);
  CHECK_CONTAINS(got, want);
  CHECK_CONTAINS(got, "\n    {\"gpu\": \"NVIDIA A100-SXM4-80GB\", \"problem\": ");
  free(got);
  s.devices = NULL, s.n_devices = 0, s.row_gpus = NULL;
  /* Where the tune stage went, each phase by its key, after the stages. */
  fat_run_summary phased = s;
  phased.tune_measured = 1;
  for (int i = 0; i < FAT_PHASE_COUNT; i++) phased.tune_phase_s[i] = 1.5 + i;
  phased.tune_messages_s = 0.0004, phased.tune_build_wait_s = 12.25;
  got = json_of(&phased, rows, n);
  CHECK_CONTAINS(got, " \"total\": 213.123},\n  \"tune_seconds\": {\"load\": 1.5, \"check_buffers\": 2.5,"
                 " \"reference\": 3.5, \"check_run\": 4.5, \"compare\": 5.5, \"time_buffers\": 6.5,"
                 " \"timed_runs\": 7.5, \"messages\": 0, \"build_wait\": 12.25},\n  \"winners\": [\n");
  free(got);

  fat_run_summary none = {.status = 3, .db_path = "x.db", .arch = "sm_80", .gpu = NULL,
                          .no_gpu = "no CUDA driver: \tgone", .shard_index = 1, .shard_count = 1,
                          .problems = 2, .variants = 6, .compiled = 6, .compile_failed = 1,
                          .stage_s = {0.02, 3.5, -1, -1}, .total_s = 3.6};
  got = json_of(&none, NULL, 0);
  CHECK(got && strstr(got, "  \"outcome\": \"no_gpu\",\n  \"database\": \"x.db\",\n"));
  CHECK(got && strlen(got) > strlen(WANT_NO_GPU_TAIL) &&
        !strcmp(got + strlen(got) - strlen(WANT_NO_GPU_TAIL), WANT_NO_GPU_TAIL));
  if (got && !strstr(got, WANT_NO_GPU_TAIL)) fprintf(stderr, "got:\n%s", got);
  free(got);
  got = NULL;

  /* Saved whole, through a temporary that does not stay. */
  char out_path[300];
  snprintf(out_path, sizeof out_path, "%s/summary.json", tmpdir);
  CHECK(fat_summary_check_path(out_path, err, sizeof err) == 0);
  CHECK(fat_summary_save_json(out_path, &s, rows, n, err, sizeof err) == 0);
  char *file = check_read_file(out_path);
  CHECK_STR(file, WANT_JSON);
  free(file);
  unlink(out_path);
out:
  free(got);
  free(rows);
  fat_db_close(db);
  unlink(path);
  char side[300];
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}

static void test_outcomes(void) {
  CHECK_STR(fat_summary_outcome(0), "done");
  CHECK_STR(fat_summary_outcome(1), "failed");
  CHECK_STR(fat_summary_outcome(2), "usage");
  CHECK_STR(fat_summary_outcome(3), "no_gpu");
  CHECK_STR(fat_summary_outcome(130), "interrupted");
  CHECK_STR(fat_summary_outcome(143), "terminated");
  CHECK_STR(fat_stage_name(FAT_STAGE_GENERATE), "generate");
  CHECK_STR(fat_stage_name(FAT_STAGE_TUNE), "tune");
}

static void test_refused_paths(void) {
  char err[ERRLEN], dir[300];
  const fat_run_summary s = {.status = 0, .shard_index = 1, .shard_count = 1};
  CHECK(fat_summary_check_path("/nonexistent-dir/x.json", err, sizeof err) == -1);
  CHECK_STR(err, "cannot write /nonexistent-dir/x.json: No such file or directory");
  snprintf(dir, sizeof dir, "%s/sub", tmpdir);
  CHECK(mkdir(dir, 0755) == 0);
  char want[400];
  snprintf(want, sizeof want, "cannot write %s: it exists and is not a regular file", dir);
  CHECK(fat_summary_check_path(dir, err, sizeof err) == -1);
  CHECK_STR(err, want);
  CHECK(fat_summary_save_json(dir, &s, NULL, 0, err, sizeof err) == -1);
  CHECK_STR(err, want);
  rmdir(dir);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_outcomes();
  test_fixture_summary();
  test_refused_paths();
  rmdir(tmpdir);
  return check_summary("test_summary_json");
}
