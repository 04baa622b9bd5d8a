/* SPDX-License-Identifier: MIT */
/* Proves `fatune explain` counts what the issue says it counts: for one head
 * at N = 8192, d = 128, fp16 the exact score elements, bytes, materialising
 * traffic, lower bound, ratio and FLOPs, both in the computed struct and in
 * the printed lines; hand-computed causal (square and not) and grouped-query
 * cases; floors and the measured winner from a database built here, with
 * ceilings by hand overriding none, each winner against the measured peak
 * of the instruction its family issues (mma.sync's for mma80, wgmma's for
 * ws90, which a database from before the wgmma ceiling says it lacks); and
 * every refusal of bad input with its exact message and exit status 2.
 * Files live in a fresh /tmp folder. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "explain.h"
#include "check.h"

/* HAY contains the whole line NEEDLE (newline-terminated in HAY). */
#define CHECK_LINE(hay, needle) \
  CHECK_WHY(has_line((hay), (needle)), "no line \"%s\" in:\n%s", (needle), (hay))

#define ERRLEN 512
#define MAX_ARGS 32
#define TERA 1e12

static char tmpdir[] = "/tmp/fatune_test_explain.XXXXXX";
static char db_path[256], missing_path[256];

static int has_line(const char *hay, const char *line) {
  size_t n = strlen(line);
  for (const char *p = hay; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (!strncmp(p, line, n) && (p[n] == '\n' || p[n] == '\0')) return 1;
  return 0;
}

/* The captured result of one `fatune explain` run. */
typedef struct run_result {
  int status;
  char *out, *err;  /* heap, whole stdout and stderr text */
} run_result;

/* Runs fat_explain_run on the space-separated words of LINE. */
static run_result run(const char *line) {
  char buf[2048], *argv[MAX_ARGS] = {"explain"}, *save = NULL;
  int argc = 1;
  size_t n_out = 0, n_err = 0;
  run_result r = {0};
  snprintf(buf, sizeof buf, "%s", line);
  for (char *w = strtok_r(buf, " ", &save); w && argc < MAX_ARGS; w = strtok_r(NULL, " ", &save))
    argv[argc++] = w;
  FILE *out = open_memstream(&r.out, &n_out), *err = open_memstream(&r.err, &n_err);
  r.status = fat_explain_run(argc, argv, out, err);
  fclose(out);
  fclose(err);
  return r;
}

static void run_free(run_result *r) {
  free(r->out);
  free(r->err);
}

static fat_problem shape(int batch, int heads, int heads_k, int sq, int sk, int d, fat_mask mask) {
  fat_problem p = {.direction = FAT_FWD, .dtype = FAT_FP16, .mask = mask, .head_dim = d,
                   .batch = batch, .heads = heads, .heads_k = heads_k, .seqlen_q = sq,
                   .seqlen_k = sk};
  return p;
}

/* The example, number by number, in the computed struct. */
static void test_model_one_head_8192(void) {
  char err[ERRLEN] = "";
  fat_io_model m;
  fat_problem p = shape(1, 1, 1, 8192, 8192, 128, FAT_MASK_NONE);
  REQUIRE(fat_io_model_compute(&p, &m, err, sizeof err) == 0);
  CHECK_INT(m.elem_bytes, 2);
  CHECK_INT(m.score_elements, 67108864);
  CHECK_INT(m.score_bytes, 134217728);           /* 128 MiB */
  CHECK_INT(m.row_bytes, 16384);                 /* 16 KiB */
  CHECK_INT(m.scores_traffic, 536870912);        /* 4 x 128 MiB */
  CHECK_INT(m.q_bytes, 2097152);
  CHECK_INT(m.k_bytes, 2097152);
  CHECK_INT(m.v_bytes, 2097152);
  CHECK_INT(m.o_bytes, 2097152);
  CHECK_INT(m.lower_bound_bytes, 8388608);       /* 8 MiB */
  CHECK_INT(m.materialise_bytes, 545259520);     /* 520 MiB */
  CHECK_DBL(m.ratio, 65.0);
  CHECK_INT(m.flops, 34359738368LL);             /* 34.36 GFLOP */
  CHECK_DBL((double)m.flops, fat_problem_flops(&p));
  CHECK_DBL(m.intensity, 4096.0);
out:;
}

/* e4m3: Q, K and V one byte an element, O (and the scores a materialising
 * implementation stores) bf16's two; the FLOPs are the same. */
static void test_model_e4m3(void) {
  char err[ERRLEN] = "";
  fat_io_model m;
  fat_problem p = shape(1, 1, 1, 8192, 8192, 128, FAT_MASK_NONE);
  p.dtype = FAT_E4M3;
  REQUIRE(fat_io_model_compute(&p, &m, err, sizeof err) == 0);
  CHECK_INT(m.elem_bytes, 1);
  CHECK_INT(m.out_bytes, 2);
  CHECK_INT(m.score_bytes, 134217728);
  CHECK_INT(m.q_bytes, 1048576);
  CHECK_INT(m.k_bytes, 1048576);
  CHECK_INT(m.v_bytes, 1048576);
  CHECK_INT(m.o_bytes, 2097152);
  CHECK_INT(m.lower_bound_bytes, 5242880);       /* 5 MiB */
  CHECK_INT(m.flops, 34359738368LL);
  CHECK_DBL(m.intensity, 34359738368.0 / 5242880);
  run_result r = run("--seqlen 8192 --head-dim 128 --dtype e4m3 --bandwidth 4");
  CHECK_INT(r.status, 0);
  CHECK(strstr(r.out, "Attention forward, e4m3, batch 1,") != NULL);
  CHECK(strstr(r.out, "Q, K and V in e4m3 (1 byte each), O, S and P in bf16 (2 bytes)\n") != NULL);
  CHECK(strstr(r.out, "Q, K, V read and O written once: 5,242,880 bytes") != NULL);
  run_free(&r);
out:;
}

/* An fp8 K/V cache decoding: Q and O two bytes an element, K and V one;
 * the K/V reads, nearly all of a decoding step's bytes, halve against
 * bf16's, the FLOPs do not move, and the intensity nearly doubles. */
static void test_model_kv8(void) {
  char err[ERRLEN] = "";
  fat_io_model m, m16;
  fat_problem p = shape(8, 32, 8, 1, 8192, 128, FAT_MASK_NONE);
  p.dtype = FAT_BF16;
  REQUIRE(fat_io_model_compute(&p, &m16, err, sizeof err) == 0);
  p.dtype = FAT_BF16_E4M3KV;
  REQUIRE(fat_io_model_compute(&p, &m, err, sizeof err) == 0);
  CHECK_INT(m.elem_bytes, 2);
  CHECK_INT(m.kv_elem_bytes, 1);
  CHECK_INT(m.out_bytes, 2);
  CHECK_INT(m.q_bytes, 8 * 32 * 1 * 128 * 2);            /* 65,536 */
  CHECK_INT(m.k_bytes, 8 * 8 * 8192 * 128 * 1);          /* 67,108,864 */
  CHECK_INT(m.v_bytes, m.k_bytes);
  CHECK_INT(m16.k_bytes, 2 * m.k_bytes);
  CHECK_INT(m.o_bytes, 8 * 32 * 1 * 128 * 2);
  CHECK_INT(m.lower_bound_bytes, 65536 + 2 * 67108864LL + 65536);
  CHECK_INT(m.flops, m16.flops);
  CHECK_DBL(m.intensity, (double)m.flops / (65536 + 2 * 67108864.0 + 65536));
  run_result r = run("--seqlen-q 1 --seqlen-k 8192 --batch 8 --heads 32 --heads-k 8 --head-dim 128"
                     " --dtype fp16-e4m3kv --bandwidth 4");
  CHECK_INT(r.status, 0);
  CHECK(strstr(r.out, "Attention forward, fp16-e4m3kv, batch 8,") != NULL);
  CHECK(strstr(r.out, "Q, O, S and P in fp16 (2 bytes), K and V in e4m3 (1 byte each) with descale "
                      "factors\n") != NULL);
  CHECK(strstr(r.out, "Q, K, V read and O written once: 134,348,800 bytes") != NULL);
  run_free(&r);
out:;
}

/* The printed text of the same shape, whole, without a database. */
static void test_print_one_head_8192(void) {
  char want[4096];
  run_result r = run("--seqlen 8192 --head-dim 128 --db");
  CHECK_INT(r.status, 2); /* --db without its value */
  CHECK_STR(r.err, "fatune explain: --db needs a value\n");
  run_free(&r);
  char line[512];
  snprintf(line, sizeof line, "--seqlen 8192 --head-dim 128 --db %s", missing_path);
  r = run(line);
  snprintf(want, sizeof want,
           "Attention forward, fp16, batch 1, heads 1 (K/V heads 1), seqlen_q 8192, seqlen_k 8192, "
           "head dim 128, no mask\n"
           "\n"
           "Score matrix S = Q·Kᵀ (P = softmax(S) is the same size)\n"
           "  67,108,864 score elements, 128 MiB at 2 bytes each\n"
           "  one row: 8,192 scores, a 16 KiB row\n"
           "\n"
           "Bytes a materialising implementation moves\n"
           "  S written, read for softmax, P written, read for P·V: 536,870,912 bytes (512 MiB)\n"
           "  Q, K, V read and O written once: 8,388,608 bytes (8 MiB)\n"
           "  536,870,912 + 8,388,608 = 545,259,520 bytes (520 MiB)\n"
           "\n"
           "Input/output lower bound: 8,388,608 bytes (8 MiB minimum: Q, K, V read once, O written "
           "once)\n"
           "  materialising / lower bound: 65×\n"
           "\n"
           "FLOPs: 34,359,738,368 (34.36 GFLOP: 4·seqlen_q·seqlen_k·head dim per head)\n"
           "Arithmetic intensity over the lower bound: 4096 FLOP/byte\n"
           "\n"
           "The lower bound is what any exact implementation must read and write once.\n"
           "It is not FlashAttention's actual traffic: K and V tiles are re-read by every\n"
           "query tile, so a tiled kernel moves more. The ratio compares byte counts; it\n"
           "is not a predicted speedup.\n"
           "\n"
           "no measured ceilings for this GPU in %s; run fatune on a GPU (or give --bandwidth "
           "TB/s and --peak TFLOP/s)\n",
           missing_path);
  CHECK_INT(r.status, 0);
  CHECK_STR(r.out, want);
  CHECK_STR(r.err, "");
  /* explain never creates a database. */
  CHECK(access(missing_path, F_OK) != 0);
  run_free(&r);
}

/* Causal, square: 2 x 8 heads at N = 4096, d = 64. Scores 2·8·4096² =
 * 268,435,456 (512 MiB); Q = K = V = O = 2·8·4096·64·2 = 8 MiB each; FLOPs
 * 4·268,435,456·64 / 2. The materialising bytes are not halved. */
static void test_causal_square(void) {
  char err[ERRLEN] = "", line[512];
  fat_io_model m;
  fat_problem p = shape(2, 8, 8, 4096, 4096, 64, FAT_MASK_CAUSAL);
  REQUIRE(fat_io_model_compute(&p, &m, err, sizeof err) == 0);
  CHECK_INT(m.score_elements, 268435456);
  CHECK_INT(m.score_bytes, 536870912);
  CHECK_INT(m.row_bytes, 8192);
  CHECK_INT(m.scores_traffic, 2147483648LL);
  CHECK_INT(m.lower_bound_bytes, 33554432);
  CHECK_INT(m.materialise_bytes, 2181038080LL);
  CHECK_DBL(m.ratio, 65.0);
  CHECK_INT(m.flops, 34359738368LL);
  CHECK_DBL((double)m.flops, fat_problem_flops(&p));
  CHECK_DBL(m.intensity, 1024.0);
  snprintf(line, sizeof line, "--batch 2 --heads 8 --seqlen 4096 --head-dim 64 --causal --db %s",
           missing_path);
  run_result r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "Attention forward, fp16, batch 2, heads 8 (K/V heads 8), seqlen_q 4096, "
                     "seqlen_k 4096, head dim 64, causal");
  CHECK_LINE(r.out, "  268,435,456 score elements, 512 MiB at 2 bytes each");
  CHECK_LINE(r.out, "  one row: 4,096 scores, a 8 KiB row");
  CHECK_LINE(r.out, "  2,147,483,648 + 33,554,432 = 2,181,038,080 bytes (2.03 GiB)");
  CHECK_LINE(r.out, "FLOPs: 34,359,738,368 (34.36 GFLOP: 4·seqlen_q·seqlen_k·head dim per head, "
                     "halved for causal)");
  CHECK_LINE(r.out, "Causal: the FLOPs are halved (seqlen_q = seqlen_k).");
  CHECK_LINE(r.out, "The materialising bytes still count the full seqlen_q × seqlen_k matrix: a");
  run_free(&r);
out:;
}

/* Causal with Sq != Sk: the FLOPs are not halved (the papers' convention). */
static void test_causal_rectangular(void) {
  char err[ERRLEN] = "", line[512];
  fat_io_model m;
  fat_problem p = shape(1, 1, 1, 1024, 4096, 128, FAT_MASK_CAUSAL);
  REQUIRE(fat_io_model_compute(&p, &m, err, sizeof err) == 0);
  CHECK_INT(m.score_elements, 4194304);
  CHECK_INT(m.row_bytes, 8192);
  CHECK_INT(m.lower_bound_bytes, 2621440);  /* (1024 + 4096 + 4096 + 1024)·128·2 */
  CHECK_INT(m.flops, 2147483648LL);          /* 4·1024·4096·128, not halved */
  CHECK_DBL((double)m.flops, fat_problem_flops(&p));
  snprintf(line, sizeof line, "--seqlen-q 1024 --seqlen-k 4096 --head-dim 128 --causal --db %s",
           missing_path);
  run_result r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "FLOPs: 2,147,483,648 (2.15 GFLOP: 4·seqlen_q·seqlen_k·head dim per head)");
  CHECK_LINE(r.out, "Causal with seqlen_q != seqlen_k: the FLOPs are not halved (the");
  run_free(&r);
out:;
}

/* A local window (the report's roofline places tuned local problems):
 * the FLOPs count the pairs it lets through, 1 + 2 + ... + 100 for the
 * first 100 rows and 101 for each of the other 900: 95,950 pairs. The
 * bytes are those of the full problem. */
static void test_local_window(void) {
  char err[ERRLEN] = "";
  fat_io_model m;
  fat_problem p = shape(1, 1, 1, 1000, 1000, 64, FAT_MASK_LOCAL);
  p.window_left = 100, p.window_right = 0;
  REQUIRE(fat_io_model_compute(&p, &m, err, sizeof err) == 0);
  CHECK_INT(m.flops, 4LL * 95950 * 64);
  CHECK_DBL((double)m.flops, fat_problem_flops(&p));
  CHECK_INT(m.lower_bound_bytes, 4LL * 1000 * 64 * 2);
  CHECK_DBL(m.intensity, 4.0 * 95950 * 64 / (4.0 * 1000 * 64 * 2));
out:;
}

/* Grouped-query: 32 query heads, 8 K/V heads, N = 2048, d = 128. Q and O
 * are 32·2048·128·2 = 16 MiB each, K and V 8·2048·128·2 = 4 MiB each. */
static void test_gqa(void) {
  char err[ERRLEN] = "", line[512];
  fat_io_model m;
  fat_problem p = shape(1, 32, 8, 2048, 2048, 128, FAT_MASK_NONE);
  REQUIRE(fat_io_model_compute(&p, &m, err, sizeof err) == 0);
  CHECK_INT(m.score_elements, 134217728);
  CHECK_INT(m.scores_traffic, 1073741824);
  CHECK_INT(m.q_bytes, 16777216);
  CHECK_INT(m.o_bytes, 16777216);
  CHECK_INT(m.k_bytes, 4194304);
  CHECK_INT(m.v_bytes, 4194304);
  CHECK_INT(m.lower_bound_bytes, 41943040);
  CHECK_INT(m.materialise_bytes, 1115684864);
  CHECK_DBL(m.ratio, 1115684864.0 / 41943040.0);
  CHECK_INT(m.flops, 68719476736LL);
  snprintf(line, sizeof line, "--heads 32 --heads-k 8 --seqlen=2048 --head-dim=128 --db %s",
           missing_path);
  run_result r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "  Q, K, V read and O written once: 41,943,040 bytes (40 MiB)");
  CHECK_LINE(r.out, "  1,073,741,824 + 41,943,040 = 1,115,684,864 bytes (1.04 GiB)");
  CHECK_LINE(r.out, "  materialising / lower bound: 26.6×");
  CHECK_LINE(r.out, "FLOPs: 68,719,476,736 (68.72 GFLOP: 4·seqlen_q·seqlen_k·head dim per head)");
  CHECK_LINE(r.out, "Grouped-query attention: K and V are counted with 8 heads (4 query heads");
  run_free(&r);
  /* heads_k must divide heads, here and in the struct API. */
  p = shape(1, 6, 4, 128, 128, 64, FAT_MASK_NONE);
  CHECK_INT(fat_io_model_compute(&p, &m, err, sizeof err), -1);
  CHECK_STR(err, "heads (6) must be a multiple of heads_k (4)");
out:;
}

/* Floors by hand (no database): 8 MiB at 4 TB/s = 2.10 µs; 34.36 GFLOP at
 * 800 TFLOP/s = 42.9 µs; 520 MiB at 4 TB/s = 136 µs. */
static void test_floors_by_hand(void) {
  char line[512];
  snprintf(line, sizeof line, "--seqlen 8192 --head-dim 128 --bandwidth 4 --peak 800 --db %s",
           missing_path);
  run_result r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "Floors: copy bandwidth 4 TB/s (given), fp16 matrix peak 800 TFLOP/s (given)");
  CHECK_LINE(r.out, "  bandwidth floor: 2.1 µs (lower-bound bytes at the copy bandwidth)");
  CHECK_LINE(r.out, "  the materialising bytes alone at the copy bandwidth: 136 µs");
  CHECK_LINE(r.out, "  compute floor: 42.9 µs (FLOPs at the matrix peak)");
  /* The hint about the flags is left out once they are given. */
  snprintf(line, sizeof line, "no measured ceilings for this GPU in %s; run fatune on a GPU",
           missing_path);
  CHECK_LINE(r.out, line);
  run_free(&r);
}

/* A variant that passed its check and was timed at MEDIAN_MS, made the
 * winner of PROBLEM on GPU. */
static int store_winner(fat_db *db, sqlite3_int64 gpu, const fat_problem *problem,
                        const char *name, const char *family, double median_ms) {
  char hash[65];
  sqlite3_int64 vid, pid, tid;
  for (int i = 0; i < 64; i++) hash[i] = "0123456789abcdef"[(name[i % strlen(name)] + i) % 16];
  hash[64] = '\0';
  fat_variant v = {.name = (char *)name, .family = (char *)family,
                   .params = "BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4", .entry = "fat_fwd",
                   .source = "// source", .direction = FAT_FWD, .dtype = problem->dtype,
                   .mask = problem->mask, .head_dim = problem->head_dim, .block_m = 128,
                   .threads = 128};
  memcpy(v.hash, hash, sizeof hash);
  fat_check c = {.batch = 1, .heads = 1, .seqlen_q = 128, .seqlen_k = 128, .rel_l2 = 1e-3,
                 .max_abs = 2e-3, .lse_max_abs = 1e-4, .nonfinite = 0, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 100, .median_ms = median_ms, .min_ms = median_ms, .max_ms = median_ms,
                  .p10_ms = median_ms, .p90_ms = median_ms,
                  .tflops = fat_problem_flops(problem) / (median_ms * 1e-3) / TERA};
  if (fat_db_put_variant(db, &v, &vid) || fat_db_put_problem(db, problem, &pid) ||
      fat_db_put_check(db, vid, gpu, pid, &c) || fat_db_put_timing(db, vid, gpu, pid, &t, &tid) ||
      fat_db_set_winner(db, gpu, pid, vid, tid)) {
    fprintf(stderr, "fixture: %s\n", fat_db_errmsg(db));
    return -1;
  }
  return 0;
}

/* A variant that passed its check and was timed at MEDIAN_MS by REPS
 * repetitions on PROBLEM on GPU: a candidate the winner rule compares. */
static int store_candidate(fat_db *db, sqlite3_int64 gpu, const fat_problem *problem,
                           const char *name, double median_ms, int reps) {
  char hash[65];
  sqlite3_int64 vid, pid;
  for (int i = 0; i < 64; i++) hash[i] = "0123456789abcdef"[(name[i % strlen(name)] * 7 + i) % 16];
  hash[64] = '\0';
  fat_variant v = {.name = (char *)name, .family = "mma80",
                   .params = "BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4", .entry = "fat_fwd",
                   .source = "// source", .direction = FAT_FWD, .dtype = problem->dtype,
                   .mask = problem->mask, .head_dim = problem->head_dim, .block_m = 128,
                   .threads = 128};
  memcpy(v.hash, hash, sizeof hash);
  fat_check c = {.batch = 1, .heads = 1, .seqlen_q = 128, .seqlen_k = 128, .rel_l2 = 1e-3,
                 .max_abs = 2e-3, .lse_max_abs = 1e-4, .nonfinite = 0, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = reps, .median_ms = median_ms, .min_ms = median_ms, .max_ms = median_ms,
                  .p10_ms = median_ms, .p90_ms = median_ms,
                  .tflops = fat_problem_flops(problem) / (median_ms * 1e-3) / TERA};
  if (fat_db_put_variant(db, &v, &vid) || fat_db_put_problem(db, problem, &pid) ||
      fat_db_put_check(db, vid, gpu, pid, &c) || fat_db_put_timing(db, vid, gpu, pid, &t, NULL)) {
    fprintf(stderr, "fixture: %s\n", fat_db_errmsg(db));
    return -1;
  }
  return 0;
}

/* With a database: the measured ceilings give the floors, the winner of the
 * exact shape its time and the fraction of each floor; another batch finds
 * only the stored shapes listed; flags override a measured ceiling. */
static void test_with_database(void) {
  char err[ERRLEN] = "", line[640], want[640];
  fat_db *db = NULL;
  sqlite3_int64 gpu = 0;
  fat_gpu_info g = {.name = "NVIDIA Test GPU", .cc_major = 9, .cc_minor = 0, .sm_count = 132,
                    .driver_version = 13000, .nvrtc_major = 13, .nvrtc_minor = 0};
  fat_problem p = shape(1, 1, 1, 8192, 8192, 128, FAT_MASK_NONE);
  REQUIRE(fat_db_open(db_path, &db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_gpu(db, &g, &gpu) == 0);

  /* A GPU but no ceilings yet: the notice names it. */
  snprintf(line, sizeof line, "--seqlen 8192 --head-dim 128 --db %s", db_path);
  run_result r = run(line);
  CHECK_INT(r.status, 0);
  snprintf(want, sizeof want,
           "no measured ceilings for NVIDIA Test GPU in %s; run fatune on a GPU (or give "
           "--bandwidth TB/s and --peak TFLOP/s)",
           db_path);
  CHECK_LINE(r.out, want);
  snprintf(want, sizeof want,
           "no tuned winner on NVIDIA Test GPU in %s for fp16, head dim 128, none, seqlen_q 8192, "
           "seqlen_k 8192",
           db_path);
  CHECK_LINE(r.out, want);
  run_free(&r);

  REQUIRE(fat_db_put_ceiling(db, gpu, FAT_CEILING_COPY_BANDWIDTH, 4e12,
                             FAT_CEILING_UNIT_BANDWIDTH) == 0);
  REQUIRE(fat_db_put_ceiling(db, gpu, FAT_CEILING_PEAK_FP16, 900e12, FAT_CEILING_UNIT_FLOPS) == 0);
  /* A re-measurement replaces the value. */
  REQUIRE(fat_db_put_ceiling(db, gpu, FAT_CEILING_PEAK_FP16, 800e12, FAT_CEILING_UNIT_FLOPS) == 0);
  REQUIRE(store_winner(db, gpu, &p, "fwd.mma80.fp16.d128.none.m128n64w4s2", "mma80", 0.1) == 0);
  {
    double v = 0;
    char unit[16] = "";
    int found = -1;
    CHECK_INT(fat_db_get_ceiling(db, gpu, FAT_CEILING_PEAK_FP16, &v, unit, sizeof unit, &found), 0);
    CHECK_INT(found, 1);
    CHECK_DBL(v, 800e12);
    CHECK_STR(unit, "FLOP/s");
    CHECK_INT(fat_db_get_ceiling(db, gpu, FAT_CEILING_PEAK_BF16, &v, NULL, 0, &found), 0);
    CHECK_INT(found, 0);
    CHECK_INT(fat_db_put_ceiling(db, gpu, FAT_CEILING_PEAK_BF16, -1, "FLOP/s"), -1);
    CHECK_STR(fat_db_errmsg(db), "cannot store ceiling 'matrix_peak_bf16' = -1 FLOP/s of gpu 1: "
                                  "value must be positive and finite");
  }

  /* 34.36 GFLOP in 0.1 ms = 343.6 TFLOP/s; the compute floor 42.9 µs is
   * 42.9% of it, the bandwidth floor 2.1 µs 2.1%. */
  r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_STR(r.err, "");
  CHECK(strstr(r.out, "no measured ceilings") == NULL);
  CHECK_LINE(r.out, "Floors on NVIDIA Test GPU: copy bandwidth 4 TB/s (measured), fp16 mma.sync "
                     "peak 800 TFLOP/s (measured)");
  CHECK_LINE(r.out, "  bandwidth floor: 2.1 µs (lower-bound bytes at the copy bandwidth)");
  CHECK_LINE(r.out, "  compute floor: 42.9 µs (FLOPs at the mma.sync peak)");
  CHECK_LINE(r.out, "Measured on NVIDIA Test GPU: winner fwd.mma80.fp16.d128.none.m128n64w4s2");
  CHECK_LINE(r.out, "  time 100 µs, 343.6 TFLOP/s");
  CHECK_LINE(r.out, "  compute floor / measured time: 42.9% of the mma.sync peak (mma80 issues "
                     "mma.sync)");
  CHECK_LINE(r.out, "  bandwidth floor / measured time: 2.1% of the copy bandwidth");
  CHECK(strstr(r.out, "eliminated") == NULL);  /* none recorded: nothing said */
  run_free(&r);

  /* Why the others lost, once the winner is decided among screened
   * candidates: 16 within 10 % of the winner (0.1 ms, a full timing) --
   * the first 15 its contenders, the 16th cut by the number a job compares
   * -- one screened 1.25x behind, and one dropped after 1 repetition at
   * 1.6x. The winner stands (the contenders' job is the tuner's). */
  {
    char name[96];
    for (int i = 1; i <= 16; i++) {
      snprintf(name, sizeof name, "fwd.mma80.fp16.d128.none.c%02d", i);
      REQUIRE(store_candidate(db, gpu, &p, name, 0.1 + 0.0005 * i, 5) == 0);
    }
    REQUIRE(store_candidate(db, gpu, &p, "fwd.mma80.fp16.d128.none.slow", 0.125, 5) == 0);
    REQUIRE(store_candidate(db, gpu, &p, "fwd.mma80.fp16.d128.none.drop", 0.16, 1) == 0);
    sqlite3_int64 pid = 0;
    REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
    fat_db_choice w;
    int found = 0;
    REQUIRE(fat_db_decide_winner(db, gpu, pid, &w, &found, NULL) == 0 && found);
    CHECK_STR(w.name, "fwd.mma80.fp16.d128.none.m128n64w4s2");
  }
  r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "  eliminated without a full timing: 3 candidates, 1 of them after 1 repetition"
                    " (more than 1.5x the best so far)");
  CHECK_LINE(r.out, "  the closest, against the fastest timed alone,"
                    " fwd.mma80.fp16.d128.none.m128n64w4s2 (100 µs):");
  CHECK_LINE(r.out, "    fwd.mma80.fp16.d128.none.c16  1.08x the best after 5 repetitions (within"
                    " 10%, but not among the 16 fastest)");
  CHECK_LINE(r.out, "    fwd.mma80.fp16.d128.none.slow  1.25x the best after 5 repetitions");
  CHECK_LINE(r.out, "    fwd.mma80.fp16.d128.none.drop  1.60x the best after 1 repetition");
  run_free(&r);

  /* --peak by hand overrides the measured peak; the bandwidth stays measured. */
  snprintf(line, sizeof line, "--seqlen 8192 --head-dim 128 --peak 400 --db %s --gpu-name "
           "NVIDIA", db_path);
  r = run(line);
  CHECK_INT(r.status, 2);
  snprintf(want, sizeof want, "fatune explain: --gpu-name: no GPU named 'NVIDIA' in the database "
           "(it holds: NVIDIA Test GPU)\n");
  CHECK_STR(r.err, want);
  run_free(&r);
  {
    char *argv[] = {"explain", "--seqlen", "8192", "--head-dim", "128", "--peak", "400",
                    "--db", db_path, "--gpu-name", "NVIDIA Test GPU"};
    size_t n_out = 0, n_err = 0;
    r.out = r.err = NULL;
    FILE *out = open_memstream(&r.out, &n_out), *errf = open_memstream(&r.err, &n_err);
    r.status = fat_explain_run((int)(sizeof argv / sizeof argv[0]), argv, out, errf);
    fclose(out);
    fclose(errf);
  }
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "Floors on NVIDIA Test GPU: copy bandwidth 4 TB/s (measured), fp16 matrix "
                     "peak 400 TFLOP/s (given)");
  CHECK_LINE(r.out, "  compute floor / measured time: 85.9% of the matrix peak");
  run_free(&r);

  /* Another batch: the stored shapes are named, and the first one's
   * measured time shown at its own shape. */
  snprintf(line, sizeof line, "--batch 2 --heads 16 --seqlen 8192 --head-dim 128 --db %s", db_path);
  r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "  (at the stored shape: batch 1, heads 1, K/V heads 1)");
  snprintf(want, sizeof want,
           "no tuned winner on NVIDIA Test GPU in %s for fp16, head dim 128, none, seqlen_q 8192, "
           "seqlen_k 8192 with batch 2, heads 16 (K/V heads 16); stored: batch 1, heads 1 (K/V "
           "heads 1)",
           db_path);
  CHECK_LINE(r.out, want);
  run_free(&r);

  /* bf16 has no measured peak: only the bandwidth floor. */
  snprintf(line, sizeof line, "--seqlen 8192 --head-dim 128 --dtype bf16 --db %s", db_path);
  r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "Floors on NVIDIA Test GPU: copy bandwidth 4 TB/s (measured)");
  CHECK(strstr(r.out, "compute floor") == NULL);
  run_free(&r);

  /* A Hopper winner (ws90 issues wgmma) on a database from before the
   * tuner measured wgmma's peak: mma.sync's floor, and the winner's own
   * peak said to be missing rather than mma.sync's put in its place. */
  fat_problem p4 = shape(1, 1, 1, 4096, 4096, 128, FAT_MASK_NONE);
  REQUIRE(store_winner(db, gpu, &p4, "fwd.ws90.fp16.d128.none.m64n128s2o1p0q0", "ws90", 0.02) == 0);
  snprintf(line, sizeof line, "--seqlen 4096 --head-dim 128 --db %s", db_path);
  r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "Floors on NVIDIA Test GPU: copy bandwidth 4 TB/s (measured), fp16 mma.sync "
                     "peak 800 TFLOP/s (measured)");
  CHECK_LINE(r.out, "  time 20 µs, 429.5 TFLOP/s");
  CHECK_LINE(r.out, "  wgmma peak: not measured (ws90 issues wgmma)");
  CHECK(strstr(r.out, "% of the mma.sync peak") == NULL);
  run_free(&r);
  /* Measured (the RS figure beside it is not a floor): both compute floors,
   * 8.59 GFLOP at 800 and at 900 TFLOP/s, and the winner's 20 µs against
   * wgmma's 9.54. */
  REQUIRE(fat_db_put_ceiling(db, gpu, FAT_CEILING_WGMMA_PEAK_FP16, 900e12, FAT_CEILING_UNIT_FLOPS) == 0);
  REQUIRE(fat_db_put_ceiling(db, gpu, FAT_CEILING_WGMMA_RS_PEAK_FP16, 950e12, FAT_CEILING_UNIT_FLOPS) == 0);
  r = run(line);
  CHECK_INT(r.status, 0);
  CHECK_LINE(r.out, "Floors on NVIDIA Test GPU: copy bandwidth 4 TB/s (measured), fp16 mma.sync "
                     "peak 800 TFLOP/s (measured), fp16 wgmma peak 900 TFLOP/s (measured)");
  CHECK_LINE(r.out, "  compute floor: 10.7 µs (FLOPs at the mma.sync peak)");
  CHECK_LINE(r.out, "  compute floor: 9.54 µs (FLOPs at the wgmma peak)");
  CHECK_LINE(r.out, "Measured on NVIDIA Test GPU: winner fwd.ws90.fp16.d128.none.m64n128s2o1p0q0");
  CHECK_LINE(r.out, "  compute floor / measured time: 47.7% of the wgmma peak (ws90 issues wgmma)");
  CHECK(strstr(r.out, "950") == NULL);
  run_free(&r);
  /* The mma.sync winner stays against mma.sync's peak. */
  snprintf(line, sizeof line, "--seqlen 8192 --head-dim 128 --db %s", db_path);
  r = run(line);
  CHECK_LINE(r.out, "  compute floor / measured time: 42.9% of the mma.sync peak (mma80 issues "
                     "mma.sync)");
  run_free(&r);
out:
  fat_db_close(db);
}

/* Two GPU names and no --gpu-name: the choice is the user's. */
static void test_several_gpus(void) {
  char err[ERRLEN] = "", line[640], want[640];
  fat_db *db = NULL;
  sqlite3_int64 gpu = 0;
  fat_gpu_info g = {.name = "Another GPU", .cc_major = 8, .cc_minor = 0, .sm_count = 108,
                    .driver_version = 13000, .nvrtc_major = 13, .nvrtc_minor = 0};
  REQUIRE(fat_db_open(db_path, &db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_gpu(db, &g, &gpu) == 0);
  snprintf(line, sizeof line, "--seqlen 8192 --head-dim 128 --db %s", db_path);
  run_result r = run(line);
  CHECK_INT(r.status, 2);
  snprintf(want, sizeof want,
           "fatune explain: the database holds results of several GPUs (Another GPU, NVIDIA Test "
           "GPU): choose one with --gpu-name\n");
  CHECK_STR(r.err, want);
  CHECK_STR(r.out, "");
  run_free(&r);
out:
  fat_db_close(db);
}

/* Each refusal: exit status 2, one line on stderr naming the bad value,
 * nothing on stdout. */
static void test_bad_input(void) {
  static const struct {
    const char *args, *message;
  } cases[] = {
      {"--seqlen 8192 --head-dim 0", "--head-dim: 0 is out of range [1, 1024]"},
      {"--seqlen -1 --head-dim 128", "--seqlen: -1 is out of range [1, 1048576]"},
      {"--seqlen 8192 --head-dim 128 --frobnicate", "unknown option '--frobnicate' (see fatune "
                                                    "explain --help)"},
      {"--seqlen 8k --head-dim 128", "--seqlen: '8k' is not a number"},
      {"--seqlen 8192 --head-dim 128 --dtype fp32", "--dtype: unknown dtype 'fp32' (fp16, bf16, e4m3, fp16-e4m3kv, "
                                                    "bf16-e4m3kv)"},
      {"--seqlen 8192 --head-dim 128 --heads 6 --heads-k 4", "--heads-k: 4 does not divide "
                                                             "--heads 6"},
      {"--seqlen 8192 --head-dim 128 --bandwidth 0", "--bandwidth: '0' is not a positive number "
                                                     "of TB/s"},
      {"--seqlen 8192 --head-dim 128 --peak nan", "--peak: 'nan' is not a positive number of "
                                                  "TFLOP/s"},
      {"--seqlen 8192 --head-dim 128 --batch 0", "--batch: 0 is out of range [1, 65536]"},
      {"--seqlen 8192 --seqlen 4096 --head-dim 128", "--seqlen given twice"},
      {"--causal --causal --seqlen 8 --head-dim 8", "--causal given twice"},
      {"--seqlen 8192 --seqlen-q 4096 --head-dim 128", "--seqlen sets both lengths: give it or "
                                                      "--seqlen-q/--seqlen-k, not both"},
      {"--seqlen-q 4096 --head-dim 128", "--seqlen-q given without --seqlen-k"},
      {"--head-dim 128", "no sequence length: give --seqlen N (or --seqlen-q and --seqlen-k)"},
      {"--seqlen 8192", "no head dim: give --head-dim D"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char want[512];
    run_result r = run(cases[i].args);
    snprintf(want, sizeof want, "fatune explain: %s\n", cases[i].message);
    CHECK_INT(r.status, 2);
    CHECK_STR(r.err, want);
    CHECK_STR(r.out, "");
    run_free(&r);
  }
  /* Help goes to stdout with status 0. */
  run_result r = run("--seqlen 8 --help");
  CHECK_INT(r.status, 0);
  CHECK_STR(r.out, fat_explain_usage());
  CHECK_STR(r.err, "");
  run_free(&r);
  /* A file that is not a database is refused, and left alone. */
  char path[300], line[400];
  snprintf(path, sizeof path, "%s/not_a_db", tmpdir);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("hello, this is text and not SQLite, long enough to have a header of 100 bytes......"
          "...................................................\n", f);
    fclose(f);
  }
  snprintf(line, sizeof line, "--seqlen 8 --head-dim 8 --db %s", path);
  r = run(line);
  char want[600];
  snprintf(want, sizeof want, "fatune explain: --db: not a fatune database: %s: file is not a "
           "database\n", path);
  CHECK_INT(r.status, 2);
  CHECK_STR(r.err, want);
  run_free(&r);
  remove(path);
}

/* Thousands separators and unit choice at their edges. */
static void test_formatting(void) {
  char b[64];
  CHECK_STR(fat_fmt_thousands(0, b, sizeof b), "0");
  CHECK_STR(fat_fmt_thousands(999, b, sizeof b), "999");
  CHECK_STR(fat_fmt_thousands(1000, b, sizeof b), "1,000");
  CHECK_STR(fat_fmt_thousands(18446744073709551615ULL, b, sizeof b),
            "18,446,744,073,709,551,615");
  CHECK_STR(fat_fmt_bytes(1023, b, sizeof b), "1023 bytes");
  CHECK_STR(fat_fmt_bytes(1536, b, sizeof b), "1.5 KiB");
  CHECK_STR(fat_fmt_bytes(545259520, b, sizeof b), "520 MiB");
  CHECK_STR(fat_fmt_flops(34359738368.0, b, sizeof b), "34.36 GFLOP");
  CHECK_STR(fat_fmt_flops(999, b, sizeof b), "999.00 FLOP");
  /* Past every unit: %g, never a number cut short by the buffer. */
  CHECK_STR(fat_fmt_bytes(18446744073709551615.0, b, sizeof b), "16 EiB");
  CHECK_STR(fat_fmt_bytes(1e300, b, sizeof b), "8.67e+281 EiB");
  CHECK_STR(fat_fmt_flops(1e300, b, sizeof b), "1e+282 EFLOP");
  CHECK_STR(fat_fmt_bytes(NAN, b, sizeof b), "nan bytes");
  CHECK_STR(fat_fmt_flops(-INFINITY, b, sizeof b), "-inf EFLOP");
  /* The widest fixed number (below 10^15 EiB) and the first past it, in a
   * buffer of FAT_FMT_CAP. */
  char small[FAT_FMT_CAP];
  CHECK_STR(fat_fmt_bytes(-ldexp(ldexp(1, 49) - 1, 60), small, sizeof small),
            "-562949953421311 EiB");
  CHECK_STR(fat_fmt_bytes(ldexp(1, 110), small, sizeof small), "1.13e+15 EiB");
}

static void remove_db(const char *path) {
  char p[300];
  remove(path);
  snprintf(p, sizeof p, "%s-wal", path);
  remove(p);
  snprintf(p, sizeof p, "%s-shm", path);
  remove(p);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(db_path, sizeof db_path, "%s/explain.db", tmpdir);
  snprintf(missing_path, sizeof missing_path, "%s/missing.db", tmpdir);
  test_model_one_head_8192();
  test_model_e4m3();
  test_model_kv8();
  test_print_one_head_8192();
  test_causal_square();
  test_causal_rectangular();
  test_local_window();
  test_gqa();
  test_floors_by_hand();
  test_with_database();
  test_several_gpus();
  test_bad_input();
  test_formatting();
  remove_db(db_path);
  rmdir(tmpdir);
  return check_summary("test_explain");
}
