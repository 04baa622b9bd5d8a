/* SPDX-License-Identifier: MIT */
/* The tune stage (tuner/tune_problem.c) on fake GPUs, no GPU: the lanes'
 * measurers answer from a script, the database is real. One lane tunes the
 * problems in order with today's log lines, every result and winner
 * stored, and a rerun resumes without measuring; two lanes on two devices
 * of one GPU key write into one connection from two threads -- every
 * (variant, problem) checked and timed once, each problem measured on one
 * device, its close contenders re-timed together there (one job), one
 * winner each, the file intact; two GPU models tune every problem each,
 * under their own keys; a lane whose worker will not restart drops out,
 * its problem finished by the other (--retune retiring nothing the lost
 * lane measured in this run), and with every lane of a model lost the
 * stage fails, saying so, after the other model has finished; beside a
 * compile (a fake one), no variant is measured before its build is final,
 * a failed build never, and the compile's failure or ^C ends the stage; a
 * screening far behind its problem's best so far stops after its first
 * repetition (the backward's deterministic variants against their own
 * kind's best), is never a contender, and the decision records why each
 * candidate not timed in full lost; a problem measures the last winner of
 * its key first, else its default. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "db.h"
#include "problems.h"
#include "tune_problem.h"
#include "check.h"

#define ERRLEN 1024
#define N_VARIANTS 4
#define FAILING_VARIANT 3     /* fails its checks on every problem */
#define MAX_PROBLEMS 16
#define MAX_LANES 3            /* two H200s (GPU 0 and 1) and an H100 (GPU 2) */
#define H100_LANE 2
#define LOG_CAP (1 << 16)
#define BARRIER_WAIT_S 10     /* the most a lane waits for the other's first call */
#define HOST "testhost"

static char tmpdir[] = "/tmp/fatune_test_tune_problem.XXXXXX";

/* ---- a fake GPU per lane ---- */

typedef struct fake_gpu {
  int lane;
  int evaluations;     /* evaluate calls */
  int interleaved;     /* time_interleaved calls */
  int cutoffs;         /* evaluate calls that came with a cutoff */
  int fault_at;        /* the evaluate call (1, 2, ...) that kills the worker; 0 never */
  int restart_fails;   /* the worker will not restart after that */
  int alive;
} fake_gpu;

/* What every fake saw, and how far apart the variants' times are. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t first_calls;
  int lanes_waited_for;  /* lanes whose first evaluate waits for the others' (0: none) */
  int lanes_arrived;
  double step;           /* variant j's median: 1 + STEP * j ms */
  int alone_reps;        /* a timing after the checks: this many repetitions (0: 20) */
  int interleave_faults; /* time_interleaved kills the worker */
} world = {.lock = PTHREAD_MUTEX_INITIALIZER, .first_calls = PTHREAD_COND_INITIALIZER};

/* A compile beside the stage (fat_build_feed), faked: a thread that makes
 * the builds one by one under the feed's lock. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int ended;
  unsigned char built[N_VARIANTS];
  int on;                    /* bench_run hands the feed to the stage */
  int early;                 /* evaluations of a variant whose build was not final */
  const int *order;          /* the builds in this order ... */
  int n_order;               /* ... this many of them, then the end */
  int end_as;                /* what ended says then: 1 done (or ^C), -1 failed */
  int broken;                /* this variant's build fails (-1: none) */
  fat_build *builds;
} feed = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER, .broken = -1};

static int variant_number(const fat_variant *v) { return v->name[strlen(v->name) - 1] - '0'; }

static void *fake_compile(void *arg) {
  (void)arg;
  for (int k = 0; k < feed.n_order; k++) {
    usleep(20000);
    pthread_mutex_lock(&feed.lock);
    const int i = feed.order[k];
    feed.builds[i].ok = i != feed.broken;
    feed.built[i] = 1;
    pthread_cond_broadcast(&feed.changed);
    pthread_mutex_unlock(&feed.lock);
  }
  usleep(20000);
  pthread_mutex_lock(&feed.lock);
  feed.ended = feed.end_as;
  pthread_cond_broadcast(&feed.changed);
  pthread_mutex_unlock(&feed.lock);
  return NULL;
}

static fat_timing timing_of(double median_ms) {
  fat_timing t = {.reps = 20, .median_ms = median_ms, .min_ms = median_ms * 0.99,
                  .max_ms = median_ms * 1.01, .p10_ms = median_ms * 0.995,
                  .p90_ms = median_ms * 1.005, .tflops = 100 / median_ms, .sm_clock_mhz = 1980};
  return t;
}

/* Both lanes in their first job before either goes on: each gets a problem. */
static void meet_the_other_lane(void) {
  pthread_mutex_lock(&world.lock);
  world.lanes_arrived++;
  pthread_cond_broadcast(&world.first_calls);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += BARRIER_WAIT_S;
  while (world.lanes_arrived < world.lanes_waited_for &&
         pthread_cond_timedwait(&world.first_calls, &world.lock, &until) == 0) {
  }
  pthread_mutex_unlock(&world.lock);
}

static int fake_evaluate(void *self, const fat_variant *v, const fat_build *b,
                         const fat_check_shape *shapes, int n_shapes, const fat_problem *problem,
                         double cutoff_ms, fat_check *checks, fat_timing *timing, int *timed,
                         char *reason, size_t reasonlen) {
  fake_gpu *g = self;
  (void)b;
  if (feed.on) {
    pthread_mutex_lock(&feed.lock);
    feed.early += !feed.built[variant_number(v)] || !b->ok;
    pthread_mutex_unlock(&feed.lock);
  }
  if (g->evaluations++ == 0 && world.lanes_waited_for) meet_the_other_lane();
  if (!g->alive) {
    snprintf(reason, reasonlen, "no worker running (restart it after a fault or timeout)");
    return FAT_WORKER_ERROR;
  }
  if (g->evaluations == g->fault_at) {
    g->alive = 0;
    snprintf(reason, reasonlen, "fault: worker killed by signal 11 (Segmentation fault)");
    return FAT_WORKER_FAULT;
  }
  const int fails = variant_number(v) == FAILING_VARIANT;
  for (int i = 0; i < n_shapes; i++) {
    checks[i] = (fat_check){.batch = shapes[i].batch, .heads = shapes[i].heads,
                            .seqlen_q = shapes[i].seqlen_q, .seqlen_k = shapes[i].seqlen_k,
                            .rel_l2 = fails ? 3e-2 : 1e-3, .max_abs = 1e-2, .lse_max_abs = 1e-5,
                            .passed = !fails};
    snprintf(checks[i].reason, sizeof checks[i].reason, "%s", fails ? "rel_l2 0.03 > 0.01" : "ok");
  }
  *timed = !fails && problem;
  if (*timed) *timing = timing_of(1 + world.step * variant_number(v));
  if (*timed && world.alone_reps) timing->reps = world.alone_reps;
  /* As the worker: a screening (alone_reps) whose first repetition is past
   * the cutoff stops there; a full timing runs whatever the cutoff. */
  if (*timed && world.alone_reps && cutoff_ms > 0 && timing->median_ms > cutoff_ms) {
    timing->reps = 1;
    timing->min_ms = timing->max_ms = timing->p10_ms = timing->p90_ms = timing->median_ms;
  }
  g->cutoffs += cutoff_ms > 0;
  snprintf(reason, reasonlen, "ok");
  return FAT_WORKER_OK;
}

static int fake_interleave(void *self, const fat_variant *const *v, const fat_build *const *b,
                           int n, const fat_problem *problem, fat_timing *timings, char *reason,
                           size_t reasonlen) {
  fake_gpu *g = self;
  (void)b, (void)problem;
  g->interleaved++;
  if (world.interleave_faults) {
    g->alive = 0;
    snprintf(reason, reasonlen, "fault: worker killed by signal 11 (Segmentation fault)");
    return FAT_WORKER_FAULT;
  }
  /* Re-timed, the order holds: the same medians. */
  for (int i = 0; i < n; i++) timings[i] = timing_of(1 + world.step * variant_number(v[i]));
  snprintf(reason, reasonlen, "ok");
  return FAT_WORKER_OK;
}

static int fake_recover(void *self, char *err, size_t errlen) {
  fake_gpu *g = self;
  if (g->alive) return 0;
  if (g->restart_fails) {
    snprintf(err, errlen, "worker for GPU %d failed to start: fake restart refused", g->lane);
    return -1;
  }
  g->alive = 1;
  return 0;
}

/* ---- the run's inputs ---- */

typedef struct bench {
  fat_db *db;
  char path[256];
  fat_variant variants[N_VARIANTS];
  char names[N_VARIANTS][64], sources[N_VARIANTS][32];
  fat_build builds[N_VARIANTS];
  sqlite3_int64 variant_ids[N_VARIANTS];
  fat_problem problems[MAX_PROBLEMS];
  size_t n_problems;
  sqlite3_int64 h200_id, h100_id, device_ids[MAX_LANES];
  fake_gpu gpus[MAX_LANES];
  fat_lane lanes[MAX_LANES];
  fat_model models[2];     /* the H200s', then the H100's when it runs */
  sqlite3_int64 done_ids[2][MAX_PROBLEMS];
  fat_progress pr;
  FILE *log;
  char text[LOG_CAP];  /* what the stage wrote on its log */
} bench;

/* 1: bench_open makes backward variants and problems, the odd variants of a
 * deterministic dQ mode (bench_det_params: separate, or ws90's ordered),
 * the even ones atomic. */
static int bench_bwd;
static const char *bench_det_params = "BLOCK_M=64 BLOCK_N=64 DQ_MODE=separate WARPS=4";

/* A database NAME holding N_VARIANTS variants of fwd fp16 none d64 (bwd
 * with bench_bwd), one H200 key with two devices and one H100 key with
 * one; N_PROBLEMS problems of that key. */
static int bench_open(bench *b, const char *name, size_t n_problems) {
  char err[ERRLEN];
  memset(b, 0, sizeof *b);
  snprintf(b->path, sizeof b->path, "%s/%s", tmpdir, name);
  if (fat_db_open(b->path, &b->db, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  fat_gpu_info g = {.cc_major = 9, .sm_count = 132, .driver_version = 13000, .nvrtc_major = 13,
                    .mem_bytes = 150ull << 30, .clock_khz = 1980000, .mem_clock_khz = 3201000};
  snprintf(g.name, sizeof g.name, "NVIDIA H200");
  fat_gpu_info h = g;
  snprintf(h.name, sizeof h.name, "NVIDIA H100 80GB HBM3");
  h.sm_count = 132, h.mem_bytes = 80ull << 30, h.mem_clock_khz = 2619000;
  h.driver_version = 12080;  /* the same chip under another driver: another key as well */
  if (fat_db_put_gpu(b->db, &g, &b->h200_id) || fat_db_put_gpu(b->db, &h, &b->h100_id)) return -1;
  for (int l = 0; l < H100_LANE; l++)
    if (fat_db_put_device(b->db, b->h200_id, HOST, l, &g, &b->device_ids[l])) return -1;
  if (fat_db_put_device(b->db, b->h100_id, HOST, H100_LANE, &h, &b->device_ids[H100_LANE]))
    return -1;
  for (int j = 0; j < N_VARIANTS; j++) {
    fat_variant *v = &b->variants[j];
    snprintf(b->names[j], sizeof b->names[j], "%s.mma80.fp16.d64.none.v%d",
             bench_bwd ? "bwd" : "fwd", j);
    snprintf(b->sources[j], sizeof b->sources[j], "source %d", j);
    v->name = b->names[j], v->family = "mma80", v->entry = "fat_fwd_mma80";
    v->params = "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4", v->source = b->sources[j];
    if (bench_bwd)
      v->params = j % 2 ? (char *)bench_det_params : "BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic WARPS=4";
    memset(v->hash, 'a' + j, 64);
    v->direction = bench_bwd ? FAT_BWD : FAT_FWD, v->dtype = FAT_FP16, v->mask = FAT_MASK_NONE;
    v->head_dim = 64;
    v->block_m = 64, v->threads = 128, v->smem_bytes = 40960;
    b->builds[j].ok = 1;
    if (fat_db_put_variant(b->db, v, &b->variant_ids[j])) return -1;
  }
  b->n_problems = n_problems;
  for (size_t k = 0; k < n_problems; k++)
    b->problems[k] = (fat_problem){.direction = bench_bwd ? FAT_BWD : FAT_FWD, .dtype = FAT_FP16,
                                   .mask = FAT_MASK_NONE, .head_dim = 64, .batch = 4,
                                   .heads = 32, .heads_k = 32, .seqlen_q = 256 * (int)(k + 1),
                                   .seqlen_k = 256 * (int)(k + 1)};
  return 0;
}

/* Runs the stage on the first H200_LANES lanes (the H200s, one model) and,
 * with H100, the H100 as a model of its own; the log lands in b->text. */
static int bench_run(bench *b, int h200_lanes, int h100, int retune, int *stopped) {
  int n_models = 0;
  b->log = tmpfile();
  if (!b->log) return -2;
  fat_progress_init(&b->pr, b->log, 0);
  for (int l = 0; l < MAX_LANES; l++) {
    b->gpus[l].lane = l;
    b->gpus[l].alive = 1;
    b->lanes[l] = (fat_lane){.gpu = l, .device_id = b->device_ids[l],
                             .m = {.self = &b->gpus[l], .evaluate = fake_evaluate,
                                   .time_interleaved = fake_interleave, .recover = fake_recover}};
  }
  const fat_model common = {.variants = b->variants, .builds = b->builds,
                            .variant_ids = b->variant_ids, .n_variants = N_VARIANTS};
  if (h200_lanes > 0) {
    b->models[n_models] = common;
    b->models[n_models].name = "NVIDIA H200", b->models[n_models].gpu_id = b->h200_id;
    b->models[n_models].lanes = b->lanes, b->models[n_models].n_lanes = h200_lanes;
    b->models[n_models].problem_ids = b->done_ids[n_models];
    n_models++;
  }
  if (h100) {
    b->models[n_models] = common;
    b->models[n_models].name = "NVIDIA H100 80GB HBM3", b->models[n_models].gpu_id = b->h100_id;
    b->models[n_models].lanes = &b->lanes[H100_LANE], b->models[n_models].n_lanes = 1;
    b->models[n_models].problem_ids = b->done_ids[n_models];
    n_models++;
  }
  fat_tuning t = {.db = b->db, .log = b->log, .retune = retune, .models = b->models,
                  .n_models = n_models, .progress = &b->pr};
  const fat_build_feed f = {.lock = &feed.lock, .changed = &feed.changed, .ended = &feed.ended};
  pthread_t compiler;
  int compiling = 0;
  if (feed.on) {
    t.compile = &f;
    for (int k = 0; k < n_models; k++) b->models[k].built = feed.built;
    feed.builds = b->builds;
    compiling = !pthread_create(&compiler, NULL, fake_compile, NULL);
    if (!compiling) return -2;
  }
  int rc = fat_tuning_run(&t, b->problems, b->n_problems, stopped);
  if (compiling) pthread_join(compiler, NULL);
  rewind(b->log);
  size_t got = fread(b->text, 1, sizeof b->text - 1, b->log);
  b->text[got] = 0;
  fclose(b->log);
  return rc;
}

static void bench_close(bench *b) { fat_db_close(b->db); }

/* One integer from SQL on the run's connection (-1 when it fails). */
static long long count_of(bench *b, const char *sql) {
  sqlite3_stmt *s = NULL;
  long long v = -1;
  if (sqlite3_prepare_v2(fat_db_handle(b->db), sql, -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  else
    fprintf(stderr, "count_of(%s): %s\n", sql, sqlite3_errmsg(fat_db_handle(b->db)));
  sqlite3_finalize(s);
  return v;
}

static void text_of(bench *b, const char *sql, char *out, size_t cap) {
  sqlite3_stmt *s = NULL;
  snprintf(out, cap, "(failed)");
  if (sqlite3_prepare_v2(fat_db_handle(b->db), sql, -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    snprintf(out, cap, "%s", sqlite3_column_text(s, 0) ? (const char *)sqlite3_column_text(s, 0) : "NULL");
  sqlite3_finalize(s);
}

/* The file is whole, every reference holds, and on GPU key GPU_ID no
 * (variant, problem) was checked twice on a shape or timed twice by its
 * first timing: checks come in sets of the problem's shapes (or one, a
 * fault), and each passing variant has one timing per problem plus one per
 * re-timing (RETIMED, every one in a job); every timing names a device of
 * that key; one winner a problem, the fastest variant, v0. */
static void check_file(bench *b, sqlite3_int64 gpu_id, long long retimed) {
  char text[512];
  const long long shapes = FAT_TUNE_CHECK_SHAPES, g = gpu_id;
  text_of(b, "PRAGMA integrity_check", text, sizeof text);
  CHECK_STR(text, "ok");
  CHECK_INT(count_of(b, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
  snprintf(text, sizeof text, "SELECT count(*) FROM (SELECT count(*) AS n FROM checks WHERE"
           " retired = 0 AND gpu_id = %lld GROUP BY variant_id, problem_id, seqlen_q HAVING n > 1)",
           g);
  CHECK_INT(count_of(b, text), 0);
  snprintf(text, sizeof text, "SELECT count(*) FROM (SELECT count(*) AS n FROM checks WHERE"
           " retired = 0 AND gpu_id = %lld GROUP BY variant_id, problem_id HAVING n NOT IN (1, %lld))",
           g, shapes);
  CHECK_INT(count_of(b, text), 0);
  snprintf(text, sizeof text, "SELECT count(*) FROM timings WHERE retired = 0 AND gpu_id = %lld", g);
  CHECK_INT(count_of(b, text), (long long)b->n_problems * (N_VARIANTS - 1) + retimed);
  snprintf(text, sizeof text, "SELECT count(*) FROM timings t JOIN timing_jobs j ON j.timing_id ="
           " t.id WHERE t.retired = 0 AND t.gpu_id = %lld", g);
  CHECK_INT(count_of(b, text), retimed);
  snprintf(text, sizeof text, "SELECT count(*) FROM timings t WHERE t.gpu_id = %lld AND NOT EXISTS"
           " (SELECT 1 FROM devices d WHERE d.id = t.device_id AND d.gpu_id = t.gpu_id)", g);
  CHECK_INT(count_of(b, text), 0);
  snprintf(text, sizeof text, "SELECT count(*) FROM winners WHERE gpu_id = %lld", g);
  CHECK_INT(count_of(b, text), (long long)b->n_problems);
  /* The fastest passing variant, v0, wins everywhere. */
  snprintf(text, sizeof text, "SELECT count(*) FROM winners w JOIN variants v ON v.id = w.variant_id"
           " WHERE v.name LIKE '%%.v0' AND w.gpu_id = %lld", g);
  CHECK_INT(count_of(b, text), (long long)b->n_problems);
}

/* One lane: the problems in order, today's lines, everything stored; the
 * rerun measures nothing and keeps the winners. */
static void test_one_lane(void) {
  bench b;
  int stopped = -1;
  REQUIRE(bench_open(&b, "one.db", 3) == 0);
  world.step = 0.1;  /* no close contenders: 10% apart */
  world.lanes_waited_for = 0;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.models[0].n_done, 3);
  CHECK_INT(b.models[0].all_lost, 0);
  CHECK_INT(stopped, 0);
  CHECK_STR(b.text, "fatune: tuning fwd fp16 d64 none s256\n"
                    "fatune: tuning fwd fp16 d64 none s512\n"
                    "fatune: tuning fwd fp16 d64 none s768\n");
  CHECK_INT(b.gpus[0].evaluations, 3 * N_VARIANTS);
  CHECK_INT(b.gpus[0].interleaved, 0);
  CHECK_INT(b.pr.evals_done, 12);
  CHECK_INT(b.pr.evals_timed, 9);
  CHECK_INT(b.pr.eval_failed, 3);
  CHECK_INT(b.pr.evals_total, 12);
  CHECK_INT(b.lanes[0].problems, 3);
  CHECK_INT(b.lanes[0].checked, 12);
  CHECK_INT(b.lanes[0].timed, 9);
  CHECK_INT(b.lanes[0].failed, 3);
  check_file(&b, b.h200_id, 0);
  /* The problems tuned to the end, in tuning order. */
  for (size_t k = 0; k < 3; k++) {
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT seqlen_q FROM problems WHERE id = %lld",
             (long long)b.done_ids[0][k]);
    CHECK_INT(count_of(&b, sql), 256 * (long long)(k + 1));
  }
  char want[128];
  snprintf(want, sizeof want, "SELECT count(*) FROM timings WHERE device_id = %lld",
           (long long)b.device_ids[0]);
  CHECK_INT(count_of(&b, want), 9);
  /* Rerun: all resumed, nothing measured, the winners stand. */
  b.gpus[0].evaluations = 0;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.models[0].n_done, 3);
  CHECK_INT(b.gpus[0].evaluations, 0);
  CHECK_INT(b.pr.evals_skipped, 12);
  CHECK_INT(b.lanes[0].resumed, 12);
  check_file(&b, b.h200_id, 0);
out:
  bench_close(&b);
}

/* Two lanes of one key from two threads into one connection, with close
 * contenders: every problem measured and re-timed on one device. */
static void test_two_lanes(void) {
  bench b;
  int stopped = -1;
  REQUIRE(bench_open(&b, "two.db", 12) == 0);
  world.step = 0.01;  /* v0, v1 and v2 within 3% of v0: re-timed together */
  world.lanes_waited_for = 2, world.lanes_arrived = 0;
  CHECK_INT(bench_run(&b, 2, 0, 0, &stopped), 0);
  CHECK_INT(b.models[0].n_done, 12);
  CHECK_INT(b.lanes[0].problems + b.lanes[1].problems, 12);
  CHECK(b.lanes[0].problems > 0 && b.lanes[1].problems > 0);
  CHECK_INT(b.gpus[0].evaluations + b.gpus[1].evaluations, 12 * N_VARIANTS);
  CHECK_INT(b.gpus[0].interleaved + b.gpus[1].interleaved, 12);
  CHECK_INT(b.pr.evals_done, 48);
  check_file(&b, b.h200_id, 12 * 3);
  /* Each problem's timings, re-timings included, from one device, and one
   * job a problem. */
  CHECK_INT(count_of(&b, "SELECT count(*) FROM (SELECT problem_id FROM timings GROUP BY problem_id"
                         " HAVING count(DISTINCT device_id) > 1)"), 0);
  CHECK_INT(count_of(&b, "SELECT count(DISTINCT job) FROM timing_jobs"), 12);
  char sql[256];
  for (int l = 0; l < 2; l++) {
    snprintf(sql, sizeof sql, "SELECT count(DISTINCT problem_id) FROM timings WHERE device_id = %lld",
             (long long)b.device_ids[l]);
    CHECK_INT(count_of(&b, sql), (long long)b.lanes[l].problems);
  }
  CHECK_CONTAINS(b.text, "fatune: GPU 0: tuning fwd fp16 d64 none s");
  CHECK_CONTAINS(b.text, "fatune: GPU 1: tuning fwd fp16 d64 none s");
out:
  bench_close(&b);
}

/* Two GPU models, the two H200s and the H100: each tunes every problem,
 * under its own key, on its own devices; a problem's winner on one key
 * says nothing of the other's. */
static void test_two_models(void) {
  bench b;
  int stopped = -1;
  REQUIRE(bench_open(&b, "models.db", 6) == 0);
  world.step = 0.1;
  world.lanes_waited_for = 3, world.lanes_arrived = 0;
  CHECK_INT(bench_run(&b, 2, 1, 0, &stopped), 0);
  CHECK_INT(stopped, 0);
  CHECK_INT(b.models[0].n_done, 6);
  CHECK_INT(b.models[1].n_done, 6);
  CHECK_INT(b.lanes[0].problems + b.lanes[1].problems, 6);
  CHECK_INT(b.lanes[H100_LANE].problems, 6);
  CHECK_INT(b.gpus[H100_LANE].evaluations, 6 * N_VARIANTS);
  CHECK_INT(b.pr.evals_total, 2 * 6 * N_VARIANTS);
  CHECK_INT(b.pr.evals_done, 2 * 6 * N_VARIANTS);
  check_file(&b, b.h200_id, 0);
  check_file(&b, b.h100_id, 0);
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM timings WHERE gpu_id = %lld AND device_id = %lld",
           (long long)b.h100_id, (long long)b.device_ids[H100_LANE]);
  CHECK_INT(count_of(&b, sql), 6 * (N_VARIANTS - 1));
  CHECK_CONTAINS(b.text, "fatune: GPU 2: tuning fwd fp16 d64 none s1536\n");
  /* A rerun of the H100 alone resumes all of it. */
  b.gpus[H100_LANE].evaluations = 0;
  world.lanes_waited_for = 0;
  CHECK_INT(bench_run(&b, 0, 1, 0, &stopped), 0);
  CHECK_INT(b.models[0].n_done, 6);
  CHECK_INT(b.gpus[H100_LANE].evaluations, 0);
  CHECK_INT(b.pr.evals_skipped, 6 * N_VARIANTS);
out:
  bench_close(&b);
}

/* GPU 1's worker dies on its second job and will not restart: it drops
 * out, GPU 0 finishes its problem (resuming what GPU 1 stored) and the
 * rest. Under --retune the second time: what GPU 1 measured of that
 * problem in this run is not retired when GPU 0 takes it up. */
static void test_lane_lost(void) {
  bench b;
  int stopped = -1;
  REQUIRE(bench_open(&b, "lost.db", 6) == 0);
  world.step = 0.1;
  for (int retune = 0; retune <= 1; retune++) {
    world.lanes_waited_for = 2, world.lanes_arrived = 0;
    memset(b.gpus, 0, sizeof b.gpus);
    b.gpus[1].fault_at = 2;
    b.gpus[1].restart_fails = 1;
    CHECK_INT(bench_run(&b, 2, 0, retune, &stopped), 0);
    CHECK_INT(b.models[0].n_done, 6);
    CHECK_INT(b.models[0].all_lost, 0);
    CHECK_INT(stopped, 0);
    CHECK_INT(b.lanes[1].lost, 1);
    CHECK_INT(b.lanes[0].lost, 0);
    CHECK_INT(b.lanes[0].problems, 6);
    CHECK_INT(b.lanes[1].problems, 0);
    CHECK_INT(b.gpus[1].evaluations, 2);
    CHECK_INT(b.gpus[0].evaluations, 6 * N_VARIANTS - 2);
    /* The fault GPU 0 resumes was counted once, when GPU 1 measured it. */
    CHECK_INT(b.pr.evals_skipped, 0);
    CHECK_INT(b.pr.evals_done, b.pr.evals_total);
    CHECK_CONTAINS(b.text, "fatune: GPU 1 drops out: restarting its worker: worker for GPU 1 failed"
                           " to start: fake restart refused; fwd fp16 d64 none s");
    CHECK_CONTAINS(b.text, " goes back to the other GPUs\n");
    /* v1 of GPU 1's problem is the fault, one failed check; v0 GPU 1's timing. */
    CHECK_INT(count_of(&b, "SELECT count(*) FROM checks WHERE retired = 0 AND reason LIKE 'fault:%'"), 1);
    CHECK_INT(count_of(&b, "SELECT count(*) FROM (SELECT problem_id FROM timings WHERE retired = 0"
                           " GROUP BY problem_id HAVING count(DISTINCT device_id) > 1)"), 1);
    CHECK_INT(count_of(&b, "SELECT count(*) FROM checks WHERE retired = 0"),
              6 * N_VARIANTS * FAT_TUNE_CHECK_SHAPES - FAT_TUNE_CHECK_SHAPES + 1);
    CHECK_INT(count_of(&b, "SELECT count(*) FROM timings WHERE retired = 0"), 6 * 3 - 1);
    CHECK_INT(count_of(&b, "SELECT count(*) FROM winners"), 6);
    char text[64];
    text_of(&b, "PRAGMA integrity_check", text, sizeof text);
    CHECK_STR(text, "ok");
  }
out:
  bench_close(&b);
}

/* Every lane lost: the stage fails and says how much is left; one lane
 * alone says what the single-GPU run always said; every lane of one model
 * lost, the other model finishes first. */
static void test_every_lane_lost(void) {
  bench b;
  int stopped = -1;
  REQUIRE(bench_open(&b, "all_lost.db", 4) == 0);
  world.step = 0.1;
  world.lanes_waited_for = 2, world.lanes_arrived = 0;
  memset(b.gpus, 0, sizeof b.gpus);
  for (int l = 0; l < 2; l++) b.gpus[l].fault_at = 1, b.gpus[l].restart_fails = 1;
  CHECK_INT(bench_run(&b, 2, 0, 0, &stopped), -1);
  CHECK_INT(b.models[0].n_done, 0);
  CHECK_INT(b.models[0].all_lost, 1);
  CHECK_CONTAINS(b.text, "goes back, but no GPU is left\n");
  CHECK_CONTAINS(b.text, "fatune: every GPU has dropped out: 4 of 4 problems not tuned\n");
  bench_close(&b);
  REQUIRE(bench_open(&b, "one_lost.db", 4) == 0);
  world.lanes_waited_for = 0;
  memset(b.gpus, 0, sizeof b.gpus);
  b.gpus[0].fault_at = 1, b.gpus[0].restart_fails = 1;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), -1);
  CHECK_STR(b.text, "fatune: tuning fwd fp16 d64 none s256\n"
                    "\nfatune: restarting the GPU worker: worker for GPU 0 failed to start: fake"
                    " restart refused\n");
  bench_close(&b);
  REQUIRE(bench_open(&b, "model_lost.db", 4) == 0);
  world.lanes_waited_for = 3, world.lanes_arrived = 0;
  memset(b.gpus, 0, sizeof b.gpus);
  for (int l = 0; l < 2; l++) b.gpus[l].fault_at = 1, b.gpus[l].restart_fails = 1;
  CHECK_INT(bench_run(&b, 2, 1, 0, &stopped), -1);
  CHECK_INT(b.models[0].all_lost, 1);
  CHECK_INT(b.models[1].all_lost, 0);
  CHECK_INT(b.models[1].n_done, 4);
  CHECK_CONTAINS(b.text, "goes back, but no NVIDIA H200 is left\n");
  CHECK_CONTAINS(b.text, "fatune: every NVIDIA H200 has dropped out: 4 of 4 problems not tuned on it\n");
  check_file(&b, b.h100_id, 0);
out:
  bench_close(&b);
}

/* The compile beside the stage: builds arriving last first, one failing;
 * no variant evaluated before its build is final, the failed one never,
 * every problem finished on two lanes and the ETA's count corrected. Then
 * a compile that fails, and one stopped by ^C, before the builds a lane
 * waits for: the stage fails, or stops with the problem unfinished. */
static void test_builds_beside(void) {
  bench b;
  int stopped = -1;
  static const int last_first[N_VARIANTS] = {3, 2, 1, 0};
  REQUIRE(bench_open(&b, "beside.db", 6) == 0);
  world.step = 0.1;
  world.lanes_waited_for = 0;
  memset(feed.built, 0, sizeof feed.built);
  for (int j = 0; j < N_VARIANTS; j++) b.builds[j].ok = 0;
  feed.on = 1, feed.early = 0, feed.ended = 0, feed.order = last_first, feed.n_order = N_VARIANTS;
  feed.end_as = 1, feed.broken = 1;
  CHECK_INT(bench_run(&b, 2, 0, 0, &stopped), 0);
  CHECK_INT(stopped, 0);
  CHECK_INT(feed.early, 0);
  CHECK_INT(b.models[0].n_done, 6);
  CHECK_INT(b.gpus[0].evaluations + b.gpus[1].evaluations, 6 * (N_VARIANTS - 1));
  CHECK_INT(b.pr.evals_total, 6 * (N_VARIANTS - 1));
  CHECK_INT(b.pr.evals_done, 6 * (N_VARIANTS - 1));
  CHECK_INT(count_of(&b, "SELECT count(*) FROM checks c JOIN variants v ON v.id = c.variant_id"
                         " WHERE v.name LIKE '%.v1'"), 0);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners w JOIN variants v ON v.id = w.variant_id"
                         " WHERE v.name LIKE '%.v0'"), 6);
  bench_close(&b);

  static const int first_only[1] = {3};
  REQUIRE(bench_open(&b, "beside_failed.db", 4) == 0);
  memset(feed.built, 0, sizeof feed.built);
  for (int j = 0; j < N_VARIANTS; j++) b.builds[j].ok = 0;
  feed.early = 0, feed.ended = 0, feed.order = first_only, feed.n_order = 1;
  feed.end_as = -1, feed.broken = -1;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), -1);
  CHECK_INT(stopped, 0);
  CHECK_INT(feed.early, 0);
  CHECK_INT(b.models[0].n_done, 0);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners"), 0);
  bench_close(&b);

  REQUIRE(bench_open(&b, "beside_stopped.db", 4) == 0);
  memset(feed.built, 0, sizeof feed.built);
  for (int j = 0; j < N_VARIANTS; j++) b.builds[j].ok = 0;
  feed.early = 0, feed.ended = 0, feed.end_as = 1;
  CHECK_INT(bench_run(&b, 2, 0, 0, &stopped), 0);
  CHECK_INT(stopped, 1);
  CHECK_INT(feed.early, 0);
  CHECK_INT(b.models[0].n_done, 0);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners"), 0);
  feed.on = 0;
out:
  bench_close(&b);
}

/* A Hopper forward kernel (ws90) whose build keeps local memory is
 * refused before it is checked: one failed check saying why, per problem,
 * never measured, and a rerun does not ask again; an mma80 build with a
 * stack frame runs as before. */
static void test_local_memory_refused(void) {
  bench b;
  int stopped = -1;
  REQUIRE(bench_open(&b, "local.db", 3) == 0);
  world.step = 0.1;
  world.lanes_waited_for = 0;
  b.variants[2].family = "ws90";
  b.builds[2].stack_frame = 8;
  b.builds[1].stack_frame = 16;  /* mma80: allowed */
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].evaluations, 3 * (N_VARIANTS - 1));
  CHECK_INT(b.pr.evals_done, 3 * N_VARIANTS);
  CHECK_INT(b.pr.eval_failed, 3 * 2);  /* v2 refused, v3 fails its checks */
  CHECK_INT(count_of(&b, "SELECT count(*) FROM checks c JOIN variants v ON v.id = c.variant_id"
                         " WHERE v.name LIKE '%.v2' AND c.passed = 0 AND c.reason ="
                         " 'refused: local memory (stack frame 8 B, spill stores 0 B, loads 0 B):"
                         " a shipped Hopper forward kernel keeps none'"), 3);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings t JOIN variants v ON v.id = t.variant_id"
                         " WHERE v.name LIKE '%.v2'"), 0);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings t JOIN variants v ON v.id = t.variant_id"
                         " WHERE v.name LIKE '%.v1'"), 3);
  b.gpus[0].evaluations = 0;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].evaluations, 0);
out:
  bench_close(&b);
}

/* Screened timings (a few repetitions, as the worker takes them unless
 * --exhaustive): the candidates within the screening margin (10 %) of the
 * best are timed in full together, a lone one too, and every winner is
 * served by its full timing from that job. */
static void test_screening(void) {
  bench b;
  int stopped = -1;
  const long long n = 3;
  const fat_db_choice full = {.reps = 20}, screen = {.reps = FAT_SCREEN_REPS};
  CHECK(fat_db_contender_margin(&full, &full) == FAT_CLOSE_CONTENDER);
  CHECK(fat_db_contender_margin(&full, &screen) == FAT_SCREEN_CONTENDER);
  CHECK(fat_db_contender_margin(&screen, &full) == FAT_SCREEN_CONTENDER);
  REQUIRE(bench_open(&b, "screen.db", (size_t)n) == 0);
  world.step = 0.07;  /* v0 1.00, v1 1.07 within 10 %; v2 1.14 not; v3 fails */
  world.lanes_waited_for = 0;
  world.alone_reps = FAT_SCREEN_REPS;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].interleaved, (int)n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timing_jobs"), 2 * n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners w JOIN timings t ON t.id = w.timing_id"
                         " JOIN timing_jobs j ON j.timing_id = t.id JOIN variants v ON"
                         " v.id = w.variant_id WHERE t.reps = 20 AND v.name LIKE '%.v0'"), n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings WHERE reps = 5"), 3 * n);
  bench_close(&b);
  REQUIRE(bench_open(&b, "screen_lone.db", (size_t)n) == 0);
  world.step = 0.2;  /* v0 alone within 10 % */
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].interleaved, (int)n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timing_jobs"), n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners w JOIN timings t ON t.id = w.timing_id"
                         " JOIN timing_jobs j ON j.timing_id = t.id WHERE t.reps = 20"), n);
  bench_close(&b);
  /* The full timing fails: no winner by a screening; the rerun times the
   * contenders in full and decides. */
  REQUIRE(bench_open(&b, "screen_fault.db", (size_t)n) == 0);
  world.interleave_faults = 1;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  world.interleave_faults = 0;
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners"), 0);
  CHECK_CONTAINS(b.text, "fatune: no winner for fwd fp16 d64 none s256 yet: its screened contenders"
                         " were not timed in full; a rerun times them again\n");
  b.gpus[0].interleaved = 0;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].interleaved, (int)n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners w JOIN timings t ON t.id = w.timing_id"
                         " WHERE t.reps = 20"), n);
  world.alone_reps = 0;
out:
  bench_close(&b);
}

/* A screening far behind stops after its first repetition: each after the
 * first variant gets FAT_DROP_FACTOR times its problem's best so far as its
 * cutoff, and v2 (1.6 ms against v0's 1.0) is timed by 1 repetition, v1
 * (1.3) within it by all of a screening's; neither is a contender (10 %),
 * and the decision records why each lost -- v1 1.3x after 5 repetitions,
 * v2 1.6x after 1 -- against v0, which wins by its full timing. A rerun
 * measures nothing again and keeps it all. Timed in full (--exhaustive's
 * worker), the same cutoffs stop nothing: no drop, no elimination. */
static void test_drops(void) {
  bench b;
  int stopped = -1;
  const long long n = 2;
  char text[256];
  REQUIRE(bench_open(&b, "drops.db", (size_t)n) == 0);
  world.step = 0.3;  /* v0 1.0, v1 1.3, v2 1.6; v3 fails */
  world.lanes_waited_for = 0;
  world.alone_reps = FAT_SCREEN_REPS;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].cutoffs, 3 * (int)n);  /* all but each problem's first */
  CHECK_INT(b.pr.evals_dropped, n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings t JOIN variants v ON v.id = t.variant_id"
                         " WHERE t.reps = 1 AND v.name LIKE '%.v2' AND t.median_ms = 1.6"), n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings t JOIN variants v ON v.id = t.variant_id"
                         " WHERE t.reps = 5 AND v.name LIKE '%.v1'"), n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners w JOIN variants v ON v.id = w.variant_id"
                         " JOIN timings t ON t.id = w.timing_id WHERE v.name LIKE '%.v0'"
                         " AND t.reps = 20"), n);
  text_of(&b, "SELECT group_concat(x, ' ') FROM (SELECT substr(v.name, -2) || ':' ||"
              " printf('%.2f', e.ratio) || 'x' || e.reps || ':' || bv.name AS x FROM eliminations e"
              " JOIN variants v ON v.id = e.variant_id JOIN timings bt ON bt.id = e.best_timing_id"
              " JOIN variants bv ON bv.id = bt.variant_id JOIN problems p ON p.id = e.problem_id"
              " ORDER BY p.seqlen_q, e.ratio)", text, sizeof text);
  CHECK_STR(text, "v1:1.30x5:fwd.mma80.fp16.d64.none.v0 v2:1.60x1:fwd.mma80.fp16.d64.none.v0 "
                  "v1:1.30x5:fwd.mma80.fp16.d64.none.v0 v2:1.60x1:fwd.mma80.fp16.d64.none.v0");
  fat_db_elimination e[2];
  size_t got = 0, total = 0, drops = 0;
  CHECK_INT(fat_db_eliminations(b.db, b.h200_id, b.done_ids[0][0], e, 2, &got, &total, &drops), 0);
  CHECK_INT(total, 2);
  CHECK_INT(drops, 1);
  CHECK(got == 2 && e[1].reps == 1 && e[1].median_ms == 1.6 && e[1].best_ms == 1.0);
  /* The rerun: nothing screened again, the same decision and reasons. */
  b.gpus[0].evaluations = b.gpus[0].interleaved = 0;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].evaluations, 0);
  CHECK_INT(b.gpus[0].interleaved, 0);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM eliminations"), 2 * n);
  /* A problem resumed with v2 still to measure (its results gone, as a
   * variant new to the space has none): its cutoff comes from the best the
   * database holds, v0's, and it is dropped again; the decision is taken
   * again, its reasons with it. */
  char sql[512];
  snprintf(sql, sizeof sql,
           "DELETE FROM eliminations WHERE problem_id = %lld;"
           " DELETE FROM checks WHERE problem_id = %lld AND variant_id = %lld;"
           " DELETE FROM timings WHERE problem_id = %lld AND variant_id = %lld",
           (long long)b.done_ids[0][0], (long long)b.done_ids[0][0], (long long)b.variant_ids[2],
           (long long)b.done_ids[0][0], (long long)b.variant_ids[2]);
  REQUIRE(sqlite3_exec(fat_db_handle(b.db), sql, NULL, NULL, NULL) == SQLITE_OK);
  b.gpus[0].cutoffs = 0;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].evaluations, 1);
  CHECK_INT(b.gpus[0].cutoffs, 1);
  CHECK_INT(b.pr.evals_dropped, 1);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM eliminations"), 2 * n);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings WHERE reps = 1"), n);
  bench_close(&b);
  /* Full timings: the cutoffs come, nothing stops. */
  REQUIRE(bench_open(&b, "drops_full.db", (size_t)n) == 0);
  world.alone_reps = 0;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].cutoffs, 3 * (int)n);
  CHECK_INT(b.pr.evals_dropped, 0);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings WHERE reps < 20"), 0);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM eliminations"), 0);
out:
  world.alone_reps = 0;
  bench_close(&b);
}

/* The backward's deterministic variants (dQ mode separate or ordered) are
 * cut against the best of their own kind, one of them being served for
 * deterministic gradients: v1 (DET_PARAMS' mode, 1.6 ms, 1.6x the atomic
 * v0) is the first of its kind and screened in full, then timed in full
 * with the winner as the deterministic pick; v2 (atomic, 2.2) is dropped
 * after 1 repetition against v0, and eliminated. An ordered v1 not taken
 * for deterministic would be cut against v0 and dropped too. */
static void test_drops_deterministic(const char *db_name, const char *det_params) {
  bench b;
  int stopped = -1;
  const long long n = 1;
  char text[256];
  bench_bwd = 1;
  bench_det_params = det_params;
  REQUIRE(bench_open(&b, db_name, (size_t)n) == 0);
  bench_bwd = 0;
  world.step = 0.6;  /* v0 1.0 atomic, v1 1.6 deterministic, v2 2.2 atomic; v3 fails */
  world.lanes_waited_for = 0;
  world.alone_reps = FAT_SCREEN_REPS;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  text_of(&b, "SELECT group_concat(substr(v.name, -2) || ':' || t.reps, ' ') FROM timings t"
              " JOIN variants v ON v.id = t.variant_id WHERE NOT EXISTS (SELECT 1 FROM timing_jobs j"
              " WHERE j.timing_id = t.id) ORDER BY t.id", text, sizeof text);
  CHECK_STR(text, "v0:5 v1:5 v2:1");
  CHECK_INT(b.gpus[0].interleaved, 1);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timing_jobs"), 2);  /* v0, and v1 the pick */
  text_of(&b, "SELECT group_concat(substr(v.name, -2) || ':' || printf('%.1f', e.ratio) || 'x' ||"
              " e.reps, ' ') FROM eliminations e JOIN variants v ON v.id = e.variant_id", text,
          sizeof text);
  CHECK_STR(text, "v2:2.2x1");
out:
  world.alone_reps = 0;
  bench_close(&b);
}

/* The best so far is a good one from a problem's first variant: the winner
 * of the problem before (of the same key) is measured first, else the
 * default variant. v2 is the fastest (0.6 ms), last in the generator's
 * order: the first problem measures v0 (1.0) and v1 (0.8) before it and
 * drops nothing; the second leads with v2, the winner, and drops v0 (past
 * 0.9) -- v1 (0.8) stays within. With v2 the default, the first problem
 * leads with it too. Every variant is measured either way. */
static void test_drops_lead(void) {
  bench b;
  int stopped = -1;
  REQUIRE(bench_open(&b, "lead.db", 2) == 0);
  world.step = -0.2;  /* v0 1.0, v1 0.8, v2 0.6; v3 fails */
  world.lanes_waited_for = 0;
  world.alone_reps = FAT_SCREEN_REPS;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].evaluations, 2 * N_VARIANTS);
  CHECK_INT(b.pr.evals_dropped, 1);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings t JOIN variants v ON v.id = t.variant_id"
                         " JOIN problems p ON p.id = t.problem_id WHERE t.reps = 1"
                         " AND v.name LIKE '%.v0' AND p.seqlen_q = 512"), 1);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM winners w JOIN variants v ON v.id = w.variant_id"
                         " WHERE v.name LIKE '%.v2'"), 2);
  bench_close(&b);
  REQUIRE(bench_open(&b, "lead_default.db", 1) == 0);
  b.variants[2].is_default = 1;
  CHECK_INT(bench_run(&b, 1, 0, 0, &stopped), 0);
  CHECK_INT(b.gpus[0].evaluations, N_VARIANTS);
  CHECK_INT(b.pr.evals_dropped, 1);
  CHECK_INT(count_of(&b, "SELECT count(*) FROM timings t JOIN variants v ON v.id = t.variant_id"
                         " WHERE t.reps = 1 AND v.name LIKE '%.v0'"), 1);
out:
  world.alone_reps = 0;
  bench_close(&b);
}

int main(void) {
  REQUIRE_EXIT(mkdtemp(tmpdir));
  test_one_lane();
  test_two_lanes();
  test_two_models();
  test_lane_lost();
  test_every_lane_lost();
  test_builds_beside();
  test_local_memory_refused();
  test_screening();
  test_drops();
  test_drops_deterministic("drops_bwd.db", "BLOCK_M=64 BLOCK_N=64 DQ_MODE=separate WARPS=4");
  test_drops_deterministic("drops_bwd_ordered.db", "BLOCK_M=64 BLOCK_N=128 DQ_MODE=ordered STAGES=2");
  test_drops_lead();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return check_summary("test_tune_problem");
}
