/* SPDX-License-Identifier: MIT */
/* Tests of the worker's GPU building blocks in this process (no fork): the
 * fp64 reference kernel against a plain CPU implementation in double on
 * small random shapes (causal and not, seqlen_q != seqlen_k, grouped-query
 * heads, rows that see no key, head dims that shrink the reference's tiles),
 * the random-input kernel (deterministic per seed, N(0,1)-like, never all
 * zeros), the clock probe, and the reference's speed on a long problem.
 * Exits 77 (skipped) when no CUDA driver or device is present. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compile.h"
#include "fwd_compare.h"
#include "gpu_run.h"
#include "check.h"
#include "gpu_test.h"

#define ERRLEN 4096
#define AGREE 1e-12         /* GPU and CPU both accumulate in double */
#define MEAN_TOL 0.1        /* of a few thousand N(0,1) draws */
#define STD_TOL 0.1
#define MIN_MHZ 100
#define MAX_MHZ 5000
#define BIG_SEQ 16384
#define BIG_DIM 256
#define BIG_BUDGET_S 1.0    /* the brief: well under a second on an H200 */

#define MUST(call)                                                  \
  do {                                                              \
    if ((call) != 0) {                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, err); \
      exit(1);                                                      \
    }                                                               \
  } while (0)

static char err[ERRLEN];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Attention in double, the obvious way, from the same 16-bit inputs. */
static void cpu_reference(const fat_check_shape *s, int d, fat_dtype dt, int causal,
                          const uint16_t *q, const uint16_t *k, const uint16_t *v, double *o,
                          double *lse) {
  double scale = (double)(float)(1.0 / sqrt((double)d)); /* the float the kernels get */
  double *sc = malloc(s->seqlen_k * sizeof *sc);
  int group = s->heads / s->heads_k;
  for (int b = 0; b < s->batch; b++)
    for (int h = 0; h < s->heads; h++)
      for (int i = 0; i < s->seqlen_q; i++) {
        const uint16_t *qi = q + (((size_t)b * s->seqlen_q + i) * s->heads + h) * d;
        double *oi = o + (((size_t)b * s->seqlen_q + i) * s->heads + h) * d;
        double m = -INFINITY;
        for (int j = 0; j < s->seqlen_k; j++) {
          sc[j] = -INFINITY;
          if (causal && j > i + s->seqlen_k - s->seqlen_q) continue;
          const uint16_t *kj = k + (((size_t)b * s->seqlen_k + j) * s->heads_k + h / group) * d;
          double acc = 0;
          for (int c = 0; c < d; c++) acc += fat_half_to_double(qi[c], dt) * fat_half_to_double(kj[c], dt);
          sc[j] = acc * scale;
          if (sc[j] > m) m = sc[j];
        }
        for (int c = 0; c < d; c++) oi[c] = 0;
        double l = 0;
        if (m != -INFINITY) {
          for (int j = 0; j < s->seqlen_k; j++) {
            if (sc[j] == -INFINITY) continue;
            double p = exp(sc[j] - m);
            const uint16_t *vj = v + (((size_t)b * s->seqlen_k + j) * s->heads_k + h / group) * d;
            l += p;
            for (int c = 0; c < d; c++) oi[c] += p * fat_half_to_double(vj[c], dt);
          }
          for (int c = 0; c < d; c++) oi[c] /= l;
        }
        lse[((size_t)b * s->heads + h) * s->seqlen_q + i] = l > 0 ? m + log(l) : -INFINITY;
      }
  free(sc);
}

typedef struct host_set {
  uint16_t *q, *k, *v;
  double *ref_o, *ref_lse;
} host_set;

static void download_set(fat_gpu *g, fat_gpu_tensors *t, host_set *h) {
  h->q = malloc(t->n_q * 2);
  h->k = malloc(t->n_kv * 2);
  h->v = malloc(t->n_kv * 2);
  h->ref_o = malloc(t->n_q * sizeof(double));
  h->ref_lse = malloc(t->n_rows * sizeof(double));
  MUST(fat_gpu_download(g, h->q, t->q, t->n_q * 2, err, sizeof err));
  MUST(fat_gpu_download(g, h->k, t->k, t->n_kv * 2, err, sizeof err));
  MUST(fat_gpu_download(g, h->v, t->v, t->n_kv * 2, err, sizeof err));
  MUST(fat_gpu_download(g, h->ref_o, t->ref_o, t->n_q * sizeof(double), err, sizeof err));
  MUST(fat_gpu_download(g, h->ref_lse, t->ref_lse, t->n_rows * sizeof(double), err, sizeof err));
}

static void free_set(host_set *h) {
  free(h->q);
  free(h->k);
  free(h->v);
  free(h->ref_o);
  free(h->ref_lse);
}

/* Returns the number of rows that see no key (checked to be 0 and -inf). */
static int compare_shape(fat_gpu *g, fat_check_shape s, int d, fat_dtype dt, fat_mask mask,
                         uint64_t seed) {
  fat_gpu_tensors t;
  host_set h;
  MUST(fat_gpu_tensors_alloc(g, &s, d, dt, 1, &t, err, sizeof err));
  MUST(fat_gpu_fill_random(g, &t, seed, err, sizeof err));
  MUST(fat_gpu_reference(g, &t, mask, err, sizeof err));
  download_set(g, &t, &h);
  double *o = malloc(t.n_q * sizeof *o), *lse = malloc(t.n_rows * sizeof *lse);
  cpu_reference(&s, d, dt, mask == FAT_MASK_CAUSAL, h.q, h.k, h.v, o, lse);
  double max_ref = 0, max_diff = 0, lse_diff = 0;
  int empty = 0, empty_ok = 1, lse_inf_match = 1;
  for (size_t i = 0; i < t.n_q; i++) {
    if (fabs(o[i]) > max_ref) max_ref = fabs(o[i]);
    double e = fabs(o[i] - h.ref_o[i]);
    if (!(e <= max_diff)) max_diff = e; /* NaN sticks */
  }
  for (size_t r = 0; r < t.n_rows; r++) {
    if (isinf(lse[r])) {
      lse_inf_match &= isinf(h.ref_lse[r]) && h.ref_lse[r] < 0;
      /* Row r of (b, h) → its O row must be all zeros. */
      size_t b = r / ((size_t)s.heads * s.seqlen_q), hh = r / s.seqlen_q % s.heads, i = r % s.seqlen_q;
      const double *orow = h.ref_o + ((b * s.seqlen_q + i) * s.heads + hh) * d;
      for (int c = 0; c < d; c++) empty_ok &= orow[c] == 0.0;
      empty++;
    } else {
      double e = fabs(lse[r] - h.ref_lse[r]) / fmax(1.0, fabs(lse[r]));
      if (!(e <= lse_diff)) lse_diff = e;
    }
  }
  printf("  %dx%d(%d)x%dx%d d%d %s %s: max|diff|/max|ref| %.2e, lse %.2e, %d empty rows\n",
         s.batch, s.heads, s.heads_k, s.seqlen_q, s.seqlen_k, d, fat_dtype_name(dt),
         fat_mask_name(mask), max_diff / max_ref, lse_diff, empty);
  CHECK(max_ref > 0);
  CHECK(max_diff / max_ref < AGREE);
  CHECK(lse_diff < AGREE);
  CHECK(lse_inf_match);
  CHECK(empty_ok);
  free(o);
  free(lse);
  free_set(&h);
  fat_gpu_tensors_free(g, &t);
  return empty;
}

static void test_reference(fat_gpu *g) {
  const fat_check_shape small = {FAT_SHAPE_DIMS(1, 2, 2, 37, 53)},
                        taller = {FAT_SHAPE_DIMS(1, 2, 2, 53, 37)},
                        gqa = {FAT_SHAPE_DIMS(2, 4, 2, 33, 65)},
                        wide = {FAT_SHAPE_DIMS(1, 1, 1, 20, 70)};
  CHECK(compare_shape(g, small, 64, FAT_BF16, FAT_MASK_NONE, 1) == 0);
  CHECK(compare_shape(g, small, 64, FAT_FP16, FAT_MASK_CAUSAL, 2) == 0);
  /* seqlen_q 53 > seqlen_k 37, bottom-right causal: query i sees keys
   * j <= i - 16, so rows 0..15 of each head see nothing. */
  CHECK(compare_shape(g, taller, 64, FAT_BF16, FAT_MASK_CAUSAL, 3) == 2 * 16);
  CHECK(compare_shape(g, taller, 64, FAT_FP16, FAT_MASK_NONE, 4) == 0);
  CHECK(compare_shape(g, gqa, 128, FAT_FP16, FAT_MASK_CAUSAL, 5) == 0);
  CHECK(compare_shape(g, wide, 256, FAT_BF16, FAT_MASK_CAUSAL, 6) == 0);
  CHECK(compare_shape(g, wide, 512, FAT_FP16, FAT_MASK_NONE, 7) == 0); /* shrunk tiles */
}

static void test_random_inputs(fat_gpu *g) {
  const fat_check_shape s = {FAT_SHAPE_DIMS(1, 2, 2, 37, 53)};
  fat_gpu_tensors t;
  size_t n;
  MUST(fat_gpu_tensors_alloc(g, &s, 64, FAT_BF16, 0, &t, err, sizeof err));
  n = t.n_q;
  uint16_t *a = malloc(n * 2), *b = malloc(n * 2), *c = malloc(n * 2), *kk = malloc(n * 2);
  MUST(fat_gpu_fill_random(g, &t, 99, err, sizeof err));
  MUST(fat_gpu_download(g, a, t.q, n * 2, err, sizeof err));
  MUST(fat_gpu_download(g, kk, t.k, n * 2, err, sizeof err));
  MUST(fat_gpu_fill_random(g, &t, 99, err, sizeof err));
  MUST(fat_gpu_download(g, b, t.q, n * 2, err, sizeof err));
  MUST(fat_gpu_fill_random(g, &t, 100, err, sizeof err));
  MUST(fat_gpu_download(g, c, t.q, n * 2, err, sizeof err));
  CHECK(memcmp(a, b, n * 2) == 0);  /* same seed, same tensor */
  CHECK(memcmp(a, c, n * 2) != 0);  /* next seed, another */
  CHECK(memcmp(a, kk, n * 2) != 0); /* Q and K differ */
  double sum = 0, sum2 = 0;
  size_t zeros = 0;
  for (size_t i = 0; i < n; i++) {
    double x = fat_half_to_double(a[i], FAT_BF16);
    sum += x;
    sum2 += x * x;
    zeros += x == 0;
  }
  double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
  printf("  random bf16: mean %.3f, sd %.3f, %zu zeros of %zu\n", mean, sd, zeros, n);
  CHECK(fabs(mean) < MEAN_TOL);
  CHECK(fabs(sd - 1) < STD_TOL);
  CHECK(zeros < n / 100);
  free(a);
  free(b);
  free(c);
  free(kk);
  fat_gpu_tensors_free(g, &t);
}

static void test_clock(fat_gpu *g, const fat_gpu_info *info) {
  int mhz = 0;
  MUST(fat_gpu_clock_mhz(g, &mhz, err, sizeof err));
  printf("  SM clock %d MHz (max %d MHz)\n", mhz, info->clock_khz / 1000);
  CHECK(mhz > MIN_MHZ && mhz < MAX_MHZ);
}

static void test_reference_speed(fat_gpu *g) {
  const fat_check_shape s = {FAT_SHAPE_DIMS(1, 2, 2, BIG_SEQ, BIG_SEQ)};
  fat_gpu_tensors t;
  MUST(fat_gpu_tensors_alloc(g, &s, BIG_DIM, FAT_BF16, 1, &t, err, sizeof err));
  MUST(fat_gpu_fill_random(g, &t, 11, err, sizeof err));
  MUST(fat_gpu_reference(g, &t, FAT_MASK_NONE, err, sizeof err)); /* warm */
  double t0 = now_s();
  MUST(fat_gpu_reference(g, &t, FAT_MASK_NONE, err, sizeof err));
  double dt = now_s() - t0;
  printf("  reference 1x2x%dx%d d%d: %.3f s\n", BIG_SEQ, BIG_SEQ, BIG_DIM, dt);
  CHECK(dt < BIG_BUDGET_S);
  fat_gpu_tensors_free(g, &t);
}

int main(void) {
  fat_gpu *g = NULL;
  fat_gpu_info info;
  fat_build util, ref;
  char arch[16];
  int opened = fat_gpu_open(0, &g, &info, err, sizeof err);
  if (opened != FAT_GPU_OPENED) return gpu_open_failed(opened, err);
  printf("%s, sm_%d%d, %d SMs\n", info.name, info.cc_major, info.cc_minor, info.sm_count);
  fat_arch_for_cc(info.cc_major, info.cc_minor, arch);
  MUST(fat_gpu_compile_support(arch, &util, &ref, err, sizeof err));
  MUST(fat_gpu_load_support(g, util.cubin, ref.cubin, err, sizeof err));
  test_reference(g);
  test_random_inputs(g);
  test_clock(g, &info);
  test_reference_speed(g);
  fat_build_free(&util);
  fat_build_free(&ref);
  fat_gpu_close(g);
  return check_summary("test_gpu_reference");
}
