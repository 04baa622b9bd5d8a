/* SPDX-License-Identifier: MIT */
/* The host time of fat_attention_fwd over a decoding loop (issue 24: a
 * step whose seqlen_k grows by one costs no database query and no new
 * allocation, and step N costs what step 1 does). Batch 1, 32 query heads
 * over 8 K/V heads, head dim 128, bf16, causal, seqlen_q 1, seqlen_k from
 * 4096 one longer a step; each call timed on the host alone
 * (CLOCK_MONOTONIC around fat_attention_fwd), the stream not synchronised
 * between steps but every SYNC_EVERY of them, outside the timing, so that
 * the launch queue stays short. One untimed call at seqlen_k 4095 first
 * (the prefill's step: the database read and the module load), reported
 * apart. Prints, for steps 1-10, 11-100, 101-1000 and each thousand after,
 * the median and p90 host microseconds a call; the variants that ran; the
 * lookup's counters over the timed steps (libfatune's sel_stats: shapes
 * selected from memory, records made -- its only allocations --, database
 * opens, modules loaded, memo evictions); then a repeated shape's calls,
 * which the memo serves, for comparison.
 *
 * Run on a GPU machine from the build folder (the shipped tables are found
 * beside libfatune; FATUNE_DB and FATUNE_TABLES as for any program):
 *   build/bench/bench_decode_steps [--steps N] [--device D]
 * With scripts/gpu_pack.sh's pack (which carries it), on the device:
 *   build-gpu/bench/bench_decode_steps > "$OUT/decode_steps.txt"
 * Without a CUDA driver or device it says so and exits 0. Against the
 * stand-in driver (FATUNE_LIBCUDA=build/tests/libstand_in_cuda.so; ctest's
 * test_bench_decode_steps) it runs on the CPU: the launches are recorded,
 * not run, and the times are libfatune's own. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda_api.h"
#include "fatune.h"
#include "runtime_int.h"

#define BATCH 1
#define HEADS 32
#define HEADS_K 8
#define HEAD_DIM 128
#define FIRST_SEQLEN_K 4096
#define DEFAULT_STEPS 10000
#define SYNC_EVERY 256          /* steps between synchronisations: the queue stays bounded */
#define HOT_CALLS 1000          /* calls of the repeated shape */
#define WORKSPACE_BYTES (64u << 20)  /* more than any split-KV variant asks at this shape */
#define ELEMENT_BYTES 2         /* bf16 */
#define MAX_VARIANTS 16         /* distinct variants reported */

static fat_cuda cu;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *x, const void *y) {
  const double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* The median and the 90th percentile (nearest rank) of the N times at T,
 * which are sorted in place. */
static void quantiles(double *t, int n, double *median, double *p90) {
  qsort(t, (size_t)n, sizeof *t, by_value);
  *median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  int rank = (int)((9L * n + 9) / 10);  /* ceil(0.9 n) */
  *p90 = t[rank - 1];
}

/* A positive int from TEXT, for flag NAME; exits 2 naming it otherwise. */
static int parse_count(const char *name, const char *text, int min) {
  char *end = NULL;
  errno = 0;
  long v = text ? strtol(text, &end, 10) : 0;
  if (!text || !*text || *end || errno == ERANGE || v < min || v > INT_MAX) {
    fprintf(stderr, "bench_decode_steps: %s: '%s' is not a whole number from %d to %d\n", name,
            text ? text : "", min, INT_MAX);
    exit(2);
  }
  return (int)v;
}

/* Device memory of BYTES, zeroed; exits 1 on failure. */
static CUdeviceptr device_zeros(size_t bytes) {
  CUdeviceptr d = 0;
  char t[256];
  CUresult r = cu.cuMemAlloc(&d, bytes);
  if (r == CUDA_SUCCESS) r = cu.cuMemsetD8(d, 0, bytes);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "bench_decode_steps: %zu bytes of device memory: %s\n", bytes,
            fat_cuda_result_text(&cu, r, t, sizeof t));
    exit(1);
  }
  return d;
}

static void must(fat_context *c, fat_status st, const char *what) {
  if (st == FAT_OK) return;
  fprintf(stderr, "bench_decode_steps: %s: %s: %s\n", what, fat_strerror(st), fat_context_error(c));
  exit(1);
}

static void must_cu(CUresult r, const char *what) {
  char t[256];
  if (r == CUDA_SUCCESS) return;
  fprintf(stderr, "bench_decode_steps: %s: %s\n", what, fat_cuda_result_text(&cu, r, t, sizeof t));
  exit(1);
}

int main(int argc, char **argv) {
  int steps = DEFAULT_STEPS, device = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = parse_count("--steps", argv[++i], 1);
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      device = parse_count("--device", argv[++i], 0);
    } else if (!strcmp(argv[i], "--help")) {
      printf("usage: bench_decode_steps [--steps N] [--device D]\n"
             "  the host time of fat_attention_fwd over N decoding steps (default %d)\n",
             DEFAULT_STEPS);
      return 0;
    } else {
      fprintf(stderr, "bench_decode_steps: unknown argument '%s' (--help lists them)\n", argv[i]);
      return 2;
    }
  }
  /* No driver or no device: nothing to measure here. */
  char err[1024];
  int count = 0;
  if (fat_cuda_load(&cu, err, sizeof err)) {
    printf("bench_decode_steps: skipped: %s\n", err);
    return 0;
  }
  CUresult r = cu.cuInit(0);
  if (r != CUDA_SUCCESS || cu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= device) {
    printf("bench_decode_steps: skipped: no CUDA device %d (cuInit: %d, %d devices)\n", device, (int)r,
           count);
    return 0;
  }
  /* The tensors live in the device's primary context, where libfatune
   * launches: a KV cache of the last step's length, the lengths set per step. */
  CUdevice dev;
  CUcontext primary = NULL;
  must_cu(cu.cuDeviceGet(&dev, device), "cuDeviceGet");
  must_cu(cu.cuDevicePrimaryCtxRetain(&primary, dev), "cuDevicePrimaryCtxRetain");
  must_cu(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  const int last_k = FIRST_SEQLEN_K + steps - 1;
  const size_t q_bytes = (size_t)BATCH * HEADS * HEAD_DIM * ELEMENT_BYTES;
  const size_t kv_bytes = (size_t)BATCH * last_k * HEADS_K * HEAD_DIM * ELEMENT_BYTES;
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = BATCH, a.heads = HEADS, a.heads_k = HEADS_K, a.seqlen_q = 1, a.seqlen_k = last_k;
  a.head_dim = HEAD_DIM, a.dtype = FAT_ATTN_BF16, a.mask = FAT_ATTN_MASK_CAUSAL;
  a.q = (void *)(uintptr_t)device_zeros(q_bytes);
  a.k = (void *)(uintptr_t)device_zeros(kv_bytes);
  a.v = (void *)(uintptr_t)device_zeros(kv_bytes);
  a.o = (void *)(uintptr_t)device_zeros(q_bytes);
  a.lse = (float *)(uintptr_t)device_zeros((size_t)BATCH * HEADS * sizeof(float));
  a.workspace = (void *)(uintptr_t)device_zeros(WORKSPACE_BYTES);
  a.workspace_bytes = WORKSPACE_BYTES;
  fat_attn_args_contiguous(&a);  /* the strides of the cache's capacity */

  fat_context *c = NULL;
  fat_context_options opts = FAT_CONTEXT_OPTIONS_INIT;
  opts.device = device;
  fat_status st = fat_context_open(&c, &opts);
  if (st == FAT_ERR_NO_DRIVER) {
    printf("bench_decode_steps: skipped: %s\n", fat_context_error(c));
    fat_context_close(c);
    return 0;
  }
  must(c, st, "fat_context_open");

  /* The prefill's step, untimed in the table: the first call of the key. */
  a.seqlen_k = FIRST_SEQLEN_K - 1;
  double t0 = now_us();
  must(c, fat_attention_fwd(c, &a, NULL, NULL), "the first call");
  const double first_us = now_us() - t0;
  must_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  fat_choice ch = FAT_CHOICE_INIT;
  must(c, fat_context_last_choice(c, &ch), "fat_context_last_choice");
  printf("GPU %s; batch %d, %d heads over %d K/V heads, d%d, bf16, causal, seqlen_q 1\n",
         c->gpu_name, BATCH, HEADS, HEADS_K, HEAD_DIM);
  printf("first call (seqlen_k %d: database read, module load): %.0f us, %s (%s, %s, %s)\n",
         a.seqlen_k, first_us, ch.variant, fat_origin_name(ch.origin), fat_match_name(ch.match),
         fat_load_name(ch.load));

  /* The timed steps. */
  double *host_us = malloc((size_t)steps * sizeof *host_us);
  char variants[MAX_VARIANTS][sizeof ch.variant];
  int variant_steps[MAX_VARIANTS] = {0}, n_variants = 0, other_steps = 0;
  if (!host_us) return 1;
  const sel_stats before = c->stats;
  for (int i = 0; i < steps; i++) {
    a.seqlen_k = FIRST_SEQLEN_K + i;
    t0 = now_us();
    st = fat_attention_fwd(c, &a, NULL, NULL);
    host_us[i] = now_us() - t0;
    must(c, st, "a decoding step");
    if ((i + 1) % SYNC_EVERY == 0) must_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    must(c, fat_context_last_choice(c, &ch), "fat_context_last_choice");
    int v = 0;
    while (v < n_variants && strcmp(variants[v], ch.variant)) v++;
    if (v == n_variants && n_variants < MAX_VARIANTS)
      snprintf(variants[n_variants++], sizeof variants[0], "%s", ch.variant);
    if (v < n_variants) variant_steps[v]++;
    else other_steps++;
  }
  must_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  const sel_stats after = c->stats;

  printf("\n%-13s %6s %10s %10s\n", "steps", "calls", "median us", "p90 us");
  for (int lo = 1, hi = 10; lo <= steps; lo = hi + 1, hi = hi < 1000 ? hi * 10 : hi + 1000) {
    const int top = hi < steps ? hi : steps;
    double median, p90;
    char label[32];
    quantiles(host_us + lo - 1, top - lo + 1, &median, &p90);
    snprintf(label, sizeof label, "%d-%d", lo, top);
    printf("%-13s %6d %10.2f %10.2f\n", label, top - lo + 1, median, p90);
  }
  printf("\nvariants that ran:\n");
  for (int v = 0; v < n_variants; v++) printf("  %6d steps  %s\n", variant_steps[v], variants[v]);
  if (other_steps) printf("  %6d steps  of other variants\n", other_steps);
  printf("\nthe lookup over the %d timed steps (memo of %d shapes):\n", steps,
         SEL_MEMO_SETS * SEL_MEMO_WAYS);
  printf("  %lu shapes selected from memory, %lu memo evictions\n", after.shapes - before.shapes,
         after.evictions - before.evictions);
  printf("  %lu selection records made (the lookup's allocations), %lu candidate sets read, "
         "%lu modules loaded, %lu database opens\n", after.records - before.records,
         after.rows_read - before.rows_read, after.kernels - before.kernels,
         after.db_opens - before.db_opens);

  /* The last step's shape again and again: served by the memo. */
  double hot[HOT_CALLS], median, p90;
  for (int i = 0; i < HOT_CALLS; i++) {
    t0 = now_us();
    st = fat_attention_fwd(c, &a, NULL, NULL);
    hot[i] = now_us() - t0;
    must(c, st, "a repeated shape");
    if ((i + 1) % SYNC_EVERY == 0) must_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  }
  must_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  quantiles(hot, HOT_CALLS, &median, &p90);
  printf("\nseqlen_k %d repeated (the memo's), %d calls: median %.2f us, p90 %.2f us\n", a.seqlen_k,
         HOT_CALLS, median, p90);

  free(host_us);
  fat_context_close(c);
  cu.cuDevicePrimaryCtxRelease(dev);
  fat_cuda_unload(&cu);
  return 0;
}
