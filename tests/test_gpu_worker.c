/* SPDX-License-Identifier: MIT */
/* Tests of the GPU worker process end to end: a correct naive forward kernel
 * (written here to the launch contract, block_m 1, 32 threads) passes every
 * check and gets timed; wrong kernels fail the check with the right reason
 * (wrong scale → rel_l2, no writes → the exact count of non-finite
 * outputs, a refused launch, a cubin that does not load) and leave the
 * worker running; a kernel that writes through a null pointer, one that
 * traps and one that never ends are reported as fault / fault / timeout,
 * and after each (and after the worker is killed by a signal) a restarted
 * worker checks the correct kernel again. Close contenders are timed
 * interleaved. A screening stops after its first repetition where that is
 * past the cutoff it is given, and only a screening does. Exits 77 (skipped) when no CUDA driver or device is present. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "compile.h"
#include "cuda_api.h"
#include "embedded.h"
#include "worker.h"
#include "check.h"
#include "gpu_test.h"

#define ERRLEN 4096
#define HEAD_DIM 64
#define N_SHAPES 3
#define TEST_TIMEOUT_S 5.0   /* the watchdog, short for the test */
#define TEST_REPS 5
#define SCREEN_REPS 3        /* a screening of fewer, as db.h's FAT_SCREEN_REPS is */
#define HANG_MAX_S 20.0      /* watchdog + kill + reap must be done by then */
#define NONFINITE_37x53 "4736 non-finite outputs" /* 1 x 2 heads x 37 rows x 64 */


/* What the test kernel does besides (or instead of) attention. */
enum mode { GOOD, WRONG_SCALE, NO_WRITES, NULL_WRITE, TRAP, HANG };

/* One query row per block, one warp: lanes split the head dimension; the
 * online softmax runs in fp32 over the row's visible keys. fat_abi.h is
 * prepended, as for every variant. */
static const char naive_body[] =
    "typedef unsigned short elem_t;\n"
    "constexpr int kPerLane = HEAD_DIM / 32;\n"
    "__device__ volatile int never_set;\n"
    "__device__ float ld(const elem_t *p) {\n"
    "  elem_t b = *p;\n"
    "  if (IS_BF16) return __uint_as_float((unsigned)b << 16);\n"
    "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(b)); return f;\n"
    "}\n"
    "__device__ elem_t st(float x) {\n"
    "  if (IS_BF16) { unsigned u = __float_as_uint(x); u += 0x7fffu + ((u >> 16) & 1u); return (elem_t)(u >> 16); }\n"
    "  elem_t h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(x)); return h;\n"
    "}\n"
    "extern \"C\" __global__ void naive_fwd(const fat_fwd_params p) {\n"
    "  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, lane = threadIdx.x;\n"
    "  if (MODE == 3) *(volatile int *)p.lse_accum = 1; /* lse_accum is NULL here */\n"
    "  if (MODE == 4) asm volatile(\"trap;\");\n"
    "  if (MODE == 5) while (!never_set) {}\n"
    "  if (MODE == 2 || i >= p.seqlen_q) return;\n"
    "  const int kh = h / (p.heads / p.heads_k);\n"
    "  const elem_t *q = (const elem_t *)p.q + b * p.q_batch_stride + i * p.q_row_stride + h * p.q_head_stride;\n"
    "  float qv[kPerLane], o[kPerLane];\n"
    "  for (int c = 0; c < kPerLane; c++) { qv[c] = ld(q + lane + 32 * c); o[c] = 0.f; }\n"
    "  const float scale = MODE == 1 ? 1.f : p.softmax_scale;\n"
    "  float m = -__int_as_float(0x7f800000), l = 0.f;\n"
    "  int last = p.seqlen_k - 1;\n"
    "  if (IS_CAUSAL && i + p.seqlen_k - p.seqlen_q < last) last = i + p.seqlen_k - p.seqlen_q;\n"
    "  for (int j = 0; j <= last; j++) {\n"
    "    const elem_t *k = (const elem_t *)p.k + b * p.k_batch_stride + j * p.k_row_stride + kh * p.k_head_stride;\n"
    "    const elem_t *v = (const elem_t *)p.v + b * p.v_batch_stride + j * p.v_row_stride + kh * p.v_head_stride;\n"
    "    float s = 0.f;\n"
    "    for (int c = 0; c < kPerLane; c++) s += qv[c] * ld(k + lane + 32 * c);\n"
    "    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);\n"
    "    s *= scale;\n"
    "    float m_new = fmaxf(m, s), alpha = expf(m - m_new), pj = expf(s - m_new);\n"
    "    l = l * alpha + pj;\n"
    "    for (int c = 0; c < kPerLane; c++) o[c] = o[c] * alpha + pj * ld(v + lane + 32 * c);\n"
    "    m = m_new;\n"
    "  }\n"
    "  elem_t *out = (elem_t *)p.o + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;\n"
    "  for (int c = 0; c < kPerLane; c++) out[lane + 32 * c] = st(l > 0.f ? o[c] / l : 0.f);\n"
    "  if (lane == 0) p.lse[((long long)b * p.heads + h) * p.seqlen_q + i] = l > 0.f ? m + logf(l) : -__int_as_float(0x7f800000);\n"
    "}\n";

static char arch[16];
static char err[ERRLEN];

typedef struct test_variant {
  fat_variant v;
  fat_build b;
  char name[128];
} test_variant;

static void make_variant(test_variant *t, enum mode mode, fat_dtype dt, fat_mask mask) {
  static const char *const mode_names[] = {"good", "wrongscale", "nowrites", "nullwrite", "trap", "hang"};
  const fat_embedded_file *abi = fat_embedded_find("templates/fat_abi.h");
  size_t n = strlen(abi->data) + sizeof naive_body + 256;
  char *src = malloc(n);
  snprintf(src, n, "%s\n#define HEAD_DIM %d\n#define IS_BF16 %d\n#define IS_CAUSAL %d\n#define MODE %d\n%s",
           abi->data, HEAD_DIM, dt == FAT_BF16, mask == FAT_MASK_CAUSAL, (int)mode, naive_body);
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "test.naive.%s.%s.d%d.%s", mode_names[mode], fat_dtype_name(dt),
           HEAD_DIM, fat_mask_name(mask));
  t->v.name = t->name;
  /* A family of the test's own, as a template folder adds one: launched
   * as a fused kernel (fat_family_of_template). */
  t->v.family = "naive";
  t->v.entry = "naive_fwd";
  t->v.source = src;
  t->v.direction = FAT_FWD;
  t->v.dtype = dt;
  t->v.mask = mask;
  t->v.head_dim = HEAD_DIM;
  t->v.block_m = 1;
  t->v.threads = 32;
  t->v.smem_bytes = 0;
  if (fat_compile_one(t->name, src, arch, &t->b, err, sizeof err) || !t->b.ok) {
    fprintf(stderr, "compiling %s: %s\n%s\n", t->name, err, t->b.log ? t->b.log : "");
    exit(1);
  }
}

static void free_variant(test_variant *t) {
  free(t->v.source);
  fat_build_free(&t->b);
}

static const fat_check_shape shapes[N_SHAPES] = {
    {FAT_SHAPE_DIMS(1, 2, 2, 37, 53)},  /* seqlen_q < seqlen_k, odd lengths */
    {FAT_SHAPE_DIMS(2, 4, 2, 64, 64)},  /* grouped-query heads */
    {FAT_SHAPE_DIMS(1, 2, 2, 53, 37)},  /* causal: the first 16 rows see no key */
};

static fat_problem problem_for(const test_variant *t) {
  fat_problem p = {.direction = FAT_FWD, .dtype = t->v.dtype, .mask = t->v.mask,
                   .head_dim = HEAD_DIM, .batch = 2, .heads = 4, .heads_k = 4, .seqlen_q = 256,
                   .seqlen_k = 256};
  return p;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Evaluates T; returns the status, REASON and the checks filled. */
static int evaluate(fat_worker *w, const test_variant *t, int timed_problem, fat_check *checks,
                    fat_timing *timing, int *timed, char *reason, size_t reasonlen) {
  fat_problem p = problem_for(t);
  memset(checks, 0, N_SHAPES * sizeof *checks);
  int st = fat_worker_evaluate(w, &t->v, &t->b, shapes, N_SHAPES, timed_problem ? &p : NULL, 0,
                               checks, timing, timed, reason, reasonlen);
  printf("  %-40s status %d: %s", t->name, st, reason);
  if (st == FAT_WORKER_OK)
    printf(" | rel_l2 %.1e %.1e %.1e | %s", checks[0].rel_l2, checks[1].rel_l2, checks[2].rel_l2,
           checks[0].reason);
  printf("\n");
  return st;
}

/* The correct kernel passes all checks and is timed. */
static void expect_good(fat_worker *w, const test_variant *t) {
  fat_check c[N_SHAPES];
  fat_timing tm;
  int timed = 0;
  char reason[ERRLEN];
  CHECK(evaluate(w, t, 1, c, &tm, &timed, reason, sizeof reason) == FAT_WORKER_OK);
  CHECK_STR(reason, "ok");
  for (int i = 0; i < N_SHAPES; i++) {
    CHECK(c[i].passed == 1);
    CHECK_STR(c[i].reason, "ok");
    CHECK(c[i].nonfinite == 0 && c[i].rel_l2 < 1e-2 && c[i].lse_max_abs < 1e-4);
    CHECK(c[i].batch == shapes[i].batch && c[i].seqlen_q == shapes[i].seqlen_q &&
          c[i].seqlen_k == shapes[i].seqlen_k);
  }
  CHECK(timed == 1);
  CHECK(tm.reps == TEST_REPS);
  CHECK(tm.min_ms > 0 && tm.min_ms <= tm.p10_ms && tm.p10_ms <= tm.median_ms &&
        tm.median_ms <= tm.p90_ms && tm.p90_ms <= tm.max_ms);
  CHECK(tm.tflops > 0 && tm.sm_clock_mhz > 0);
  printf("    timing: median %.4f ms [%.4f .. %.4f], %.3f TFLOP/s at %d MHz\n", tm.median_ms, tm.min_ms,
         tm.max_ms, tm.tflops, tm.sm_clock_mhz);
}

/* A kernel that kills the worker: reported as KIND with the reason
 * starting WANT, then the worker restarts and the good kernel passes. */
static void expect_death(fat_worker *w, const test_variant *bad, const test_variant *good, int kind,
                         const char *want) {
  fat_check c[N_SHAPES];
  fat_timing tm;
  int timed = 1;
  char reason[ERRLEN];
  double t0 = now_s();
  CHECK(evaluate(w, bad, 1, c, &tm, &timed, reason, sizeof reason) == kind);
  CHECK_PREFIX(reason, want);
  CHECK(timed == 0);
  CHECK(!fat_worker_alive(w));
  if (kind == FAT_WORKER_TIMEOUT) {
    double dt = now_s() - t0;
    printf("    watchdog fired after %.1f s\n", dt);
    CHECK(dt >= TEST_TIMEOUT_S && dt < HANG_MAX_S);
  }
  /* The one restart policy: a lost worker comes back, a running one stays. */
  CHECK(fat_worker_recover(w, err, sizeof err) == 0);
  CHECK(fat_worker_alive(w));
  int pid = fat_worker_pid(w);
  CHECK(fat_worker_recover(w, err, sizeof err) == 0);
  CHECK(fat_worker_pid(w) == pid);
  expect_good(w, good);
}

int main(void) {
  fat_worker *w = NULL;
  fat_gpu_info info;
  fat_worker_options opts;
  fat_check c[N_SHAPES];
  fat_timing tm;
  int timed;
  char reason[ERRLEN];

  fat_worker_options_default(&opts);
  opts.timeout_base_s = TEST_TIMEOUT_S;
  opts.time.reps = TEST_REPS;
  int started = fat_worker_start(0, &opts, &w, &info, err, sizeof err);
  if (started != FAT_GPU_OPENED) return gpu_open_failed(started, err);
  printf("%s: sm_%d%d, %d SMs, driver %d, L2 %d bytes, smem opt-in %d, clock %d kHz\n", info.name,
         info.cc_major, info.cc_minor, info.sm_count, info.driver_version, info.l2_bytes,
         info.smem_per_block_optin, info.clock_khz);
  CHECK(info.name[0] && info.cc_major >= 8 && info.sm_count > 0 && info.l2_bytes > 0 &&
        info.mem_bytes > 0 && info.driver_version > 0 && info.smem_per_block_optin > 0);
  CHECK(info.nvrtc_major == 0); /* the parent's to fill */
  fat_arch_for_cc(info.cc_major, info.cc_minor, arch);

  fat_worker *w99 = NULL;
  CHECK(fat_worker_start(99, &opts, &w99, NULL, err, sizeof err) == FAT_GPU_BAD_INDEX && w99 == NULL);
  CHECK_PREFIX(err, "GPU index 99 out of range: ");

  test_variant good, good16, wrong, nowrites, nullw, trap, hang;
  make_variant(&good, GOOD, FAT_BF16, FAT_MASK_CAUSAL);
  make_variant(&good16, GOOD, FAT_FP16, FAT_MASK_NONE);
  make_variant(&wrong, WRONG_SCALE, FAT_BF16, FAT_MASK_CAUSAL);
  make_variant(&nowrites, NO_WRITES, FAT_BF16, FAT_MASK_CAUSAL);
  make_variant(&nullw, NULL_WRITE, FAT_BF16, FAT_MASK_CAUSAL);
  make_variant(&trap, TRAP, FAT_BF16, FAT_MASK_CAUSAL);
  make_variant(&hang, HANG, FAT_BF16, FAT_MASK_CAUSAL);

  printf("correct kernels\n");
  expect_good(w, &good);
  expect_good(w, &good16);

  printf("wrong kernels: failed checks, worker still running, nothing timed\n");
  timed = 1;
  CHECK(evaluate(w, &wrong, 1, c, &tm, &timed, reason, sizeof reason) == FAT_WORKER_OK);
  CHECK(c[0].passed == 0 && c[1].passed == 0 && timed == 0);
  CHECK_PREFIX(c[0].reason, "rel_l2 ");
  CHECK(evaluate(w, &nowrites, 1, c, &tm, &timed, reason, sizeof reason) == FAT_WORKER_OK);
  CHECK(c[0].passed == 0 && c[0].nonfinite == 4736 && timed == 0);
  CHECK_STR(c[0].reason, NONFINITE_37x53);
  /* 2048 threads per block: the driver refuses the launch. */
  good.v.threads = 2048;
  CHECK(evaluate(w, &good, 1, c, &tm, &timed, reason, sizeof reason) == FAT_WORKER_OK);
  CHECK(c[0].passed == 0 && c[2].passed == 0 && timed == 0);
  CHECK_PREFIX(c[0].reason, "launch: CUDA_ERROR_INVALID_VALUE: ");
  good.v.threads = 32;
  /* A cubin that is not one. */
  unsigned char *real = good.b.cubin;
  unsigned char junk[64];
  memset(junk, 0x5a, sizeof junk);
  good.b.cubin = junk;
  good.b.cubin_size = sizeof junk;
  CHECK(evaluate(w, &good, 1, c, &tm, &timed, reason, sizeof reason) == FAT_WORKER_OK);
  CHECK(c[0].passed == 0 && c[1].passed == 0 && timed == 0);
  CHECK_PREFIX(c[0].reason, "load: CUDA_ERROR_");
  good.b.cubin = real; /* freed with the build below */
  CHECK(fat_worker_alive(w));
  free_variant(&good);
  make_variant(&good, GOOD, FAT_BF16, FAT_MASK_CAUSAL);
  expect_good(w, &good);

  printf("kernels that kill the worker\n");
  expect_death(w, &nullw, &good, FAT_WORKER_FAULT,
               "fault: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered");
  expect_death(w, &trap, &good, FAT_WORKER_FAULT,
               "fault: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure");
  expect_death(w, &hang, &good, FAT_WORKER_TIMEOUT, "timeout: no answer in 5 s");

  printf("a worker killed from outside\n");
  /* Never kill(0, ...): that would signal this whole process group. */
  int pid = fat_worker_pid(w);
  CHECK(pid > 0);
  if (pid > 0) kill(pid, SIGSEGV);
  CHECK(evaluate(w, &good, 1, c, &tm, &timed, reason, sizeof reason) == FAT_WORKER_FAULT);
  CHECK_STR(reason, "fault: worker killed by signal 11 (Segmentation fault)");
  CHECK(fat_worker_evaluate(w, &good.v, &good.b, shapes, N_SHAPES, NULL, 0, c, &tm, &timed, reason,
                            sizeof reason) == FAT_WORKER_ERROR);
  CHECK_STR(reason, "no worker running (restart it after a fault or timeout)");
  CHECK(fat_worker_restart(w, err, sizeof err) == 0);

  printf("interleaved timing of close contenders\n");
  test_variant twin;
  make_variant(&twin, GOOD, FAT_BF16, FAT_MASK_CAUSAL);
  snprintf(twin.name, sizeof twin.name, "test.naive.good.bf16.d64.causal.twin");
  const fat_variant *vs[2] = {&good.v, &twin.v};
  const fat_build *bs[2] = {&good.b, &twin.b};
  fat_timing ts[2];
  fat_problem p = problem_for(&good);
  CHECK(fat_worker_time_interleaved(w, vs, bs, 2, &p, ts, reason, sizeof reason) == FAT_WORKER_OK);
  CHECK_STR(reason, "ok");
  for (int i = 0; i < 2; i++) {
    printf("    %s: median %.4f ms, p10 %.4f, p90 %.4f, %d MHz\n", vs[i]->name, ts[i].median_ms,
           ts[i].p10_ms, ts[i].p90_ms, ts[i].sm_clock_mhz);
    CHECK(ts[i].reps == TEST_REPS && ts[i].median_ms > 0 && ts[i].sm_clock_mhz > 0);
  }
  /* The same kernel twice: the medians agree to well within 2x. */
  CHECK(ts[0].median_ms < 2 * ts[1].median_ms && ts[1].median_ms < 2 * ts[0].median_ms);
  /* A mismatched variant is refused before anything is sent. */
  vs[1] = &good16.v;
  bs[1] = &good16.b;
  CHECK(fat_worker_time_interleaved(w, vs, bs, 2, &p, ts, reason, sizeof reason) == FAT_WORKER_ERROR);
  CHECK_STR(reason, "test.naive.good.fp16.d64.none (d64 fp16 none) cannot run the problem fwd d64 bf16 causal");
  CHECK(fat_worker_alive(w));

  printf("a screening's cutoff\n");
  {
    /* A worker that screens (as the tuner's unless --exhaustive): a first
     * repetition past the cutoff is the whole timing; one within it, or no
     * cutoff, gives the screening's repetitions; a full timing (the default
     * variant's) ignores it. */
    fat_worker *sw = NULL;
    fat_worker_options so = opts;
    so.screen_reps = SCREEN_REPS;
    CHECK(fat_worker_start(0, &so, &sw, NULL, err, sizeof err) == FAT_GPU_OPENED);
    const double cutoffs[] = {1e-6, 1e6, 0};
    const int want[] = {1, SCREEN_REPS, SCREEN_REPS};
    for (int i = 0; sw && i < 3; i++) {
      timed = 0;
      CHECK(fat_worker_evaluate(sw, &good.v, &good.b, shapes, N_SHAPES, &p, cutoffs[i], c, &tm,
                                &timed, reason, sizeof reason) == FAT_WORKER_OK);
      CHECK(timed == 1);
      CHECK_WHY(tm.reps == want[i], "cutoff %g ms: %d repetitions, want %d", cutoffs[i], tm.reps,
                want[i]);
      printf("    cutoff %g ms: %d repetitions, median %.4f ms\n", cutoffs[i], tm.reps, tm.median_ms);
    }
    CHECK(tm.median_ms > 0 && tm.min_ms <= tm.median_ms);
    good.v.is_default = 1;
    CHECK(sw && fat_worker_evaluate(sw, &good.v, &good.b, shapes, N_SHAPES, &p, 1e-6, c, &tm,
                                    &timed, reason, sizeof reason) == FAT_WORKER_OK);
    CHECK(timed == 1 && tm.reps == TEST_REPS);
    good.v.is_default = 0;
    fat_worker_stop(sw);
  }

  fat_worker_stop(w);
  test_variant *all[] = {&good, &good16, &wrong, &nowrites, &nullw, &trap, &hang, &twin};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free_variant(all[i]);
  return check_summary("test_gpu_worker");
}
