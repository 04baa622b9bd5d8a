/* SPDX-License-Identifier: MIT */
/* The e4m3 forward's CPU side, without a GPU: the e4m3 format the tuner's
 * fill and reference share (templates/fat_e4m3.h), every byte decoded and
 * re-encoded, ties to even and saturation; and the e4m3 tolerances of
 * tuner/measure/tolerance.h against a model of the kernel's roundings. The
 * model takes random heads whose inputs are quantised to e4m3 with a
 * descale that maps the amax to 448, and computes the forward as the
 * kernel does -- S = Q8·K8ᵀ summed in fp32, the scale and both descales
 * folded into one fp32 factor, an online softmax over key blocks of
 * MODEL_BLOCK_N with P = exp2(...) offset by 2^8 and rounded to e4m3,
 * acc += P8·V8 in fp32, O = acc · v_descale / l rounded to bf16 -- against
 * the fp64 forward of the dequantised inputs, at short and long shapes (16k
 * keys), with and without the causal mask. The measured errors stay well
 * inside the bounds (they print, for tolerance.h's comment), and the
 * kernel's likely mistakes -- a dropped mask, a missed rescale, a descale
 * forgotten -- land far outside them. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fat_e4m3.h"
#include "fwd_compare.h"
#include "gpu_run.h"
#include "tolerance.h"
#include "check.h"

#define MODEL_SEED 20261206u
#define MODEL_BLOCK_N 128        /* keys of one block of the kernel's online softmax */
#define P_OFFSET_LOG2 8.0        /* P = exp2(s - m + 8): P in (0, 256] */
#define LOG2E 1.4426950408889634
#define WRONG_MIN_REL_L2 0.2     /* a mistake must land at least this far out */

/* ---- the format ------------------------------------------------------- */

static void test_decode_known(void) {
  CHECK(fat_e4m3_decode(0x00) == 0.0);
  CHECK(fat_e4m3_decode(0x38) == 1.0);   /* exponent 7 = bias */
  CHECK(fat_e4m3_decode(0xb8) == -1.0);
  CHECK(fat_e4m3_decode(0x3c) == 1.5);
  CHECK(fat_e4m3_decode(0x7e) == 448.0);
  CHECK(fat_e4m3_decode(0xfe) == -448.0);
  CHECK(fat_e4m3_decode(0x08) == ldexp(1, -6));   /* the smallest normal */
  CHECK(fat_e4m3_decode(0x07) == 7 * ldexp(1, -9));  /* the largest subnormal */
  CHECK(fat_e4m3_decode(0x01) == ldexp(1, -9));   /* the smallest subnormal */
  CHECK(fat_e4m3_decode(0x81) == -ldexp(1, -9));
  CHECK(fat_e4m3_decode(0x78) == 256.0);
  CHECK(fat_e4m3_decode(0x77) == 240.0);
  CHECK(isnan(fat_e4m3_decode(0x7f)));
  CHECK(isnan(fat_e4m3_decode(0xff)));
  /* Every other byte is finite, and the positive ones increase. */
  int nans = 0;
  for (int b = 0; b < 256; b++) nans += isnan(fat_e4m3_decode((unsigned char)b));
  CHECK_INT(nans, 2);
  for (int b = 1; b < 0x7f; b++) CHECK(fat_e4m3_decode((unsigned char)b) > fat_e4m3_decode((unsigned char)(b - 1)));
}

static void test_encode(void) {
  /* Every finite byte is its value's encoding (-0 encodes as +0). */
  for (int b = 0; b < 256; b++) {
    if (b == 0x7f || b == 0xff) continue;
    const double v = fat_e4m3_decode((unsigned char)b);
    CHECK_INT(fat_e4m3_encode(v), b == 0x80 ? 0x00 : b);
  }
  /* Between neighbours: below the midpoint down, above it up, on it to
   * the even mantissa. */
  for (int b = 0; b < 0x7e; b++) {
    const double lo = fat_e4m3_decode((unsigned char)b), hi = fat_e4m3_decode((unsigned char)(b + 1));
    const double mid = 0.5 * (lo + hi), even = (b & 1) ? b + 1 : b;
    CHECK_INT(fat_e4m3_encode(mid - (hi - lo) * 1e-3), b);
    CHECK_INT(fat_e4m3_encode(mid + (hi - lo) * 1e-3), b + 1);
    CHECK_INT(fat_e4m3_encode(mid), (int)even);
    CHECK_INT(fat_e4m3_encode(-mid), 0x80 | (int)even);
  }
  CHECK_INT(fat_e4m3_encode(1.0625), 0x38);     /* 1 + 1/16: a tie, to 1.0 */
  CHECK_INT(fat_e4m3_encode(1.1875), 0x3a);     /* 1.125 + 1/16: a tie, to 1.25 */
  CHECK_INT(fat_e4m3_encode(ldexp(1, -10)), 0x00);     /* half the smallest subnormal: to 0 */
  CHECK_INT(fat_e4m3_encode(3 * ldexp(1, -10)), 0x02); /* 1.5 subnormal steps: to 2 */
  CHECK_INT(fat_e4m3_encode(15 * ldexp(1, -10)), 0x08); /* 7.5 steps: up into the normals */
  CHECK_INT(fat_e4m3_encode(1e-30), 0x00);
  /* Saturation, not infinity or NaN: cvt's satfinite. */
  CHECK_INT(fat_e4m3_encode(464.0), 0x7e);
  CHECK_INT(fat_e4m3_encode(480.0), 0x7e);
  CHECK_INT(fat_e4m3_encode(1e30), 0x7e);
  CHECK_INT(fat_e4m3_encode(-1e30), 0xfe);
  CHECK_INT(fat_e4m3_encode(INFINITY), 0x7e);
  CHECK_INT(fat_e4m3_encode(NAN), 0x7f);
}

/* ---- the kernel's roundings, modelled ------------------------------------ */

static uint64_t rng_state;
static double uniform(void) {  /* (0, 1] */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return ((double)(rng_state >> 11) + 1.0) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform()); }

static double round_bf16(double x) {
  float f = (float)x;
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return fat_half_to_double((uint16_t)(bits >> 16), FAT_BF16);
}

/* N values of N(0, sigma²) quantised as an fp8 user does: descale = amax /
 * 448, each byte the value / descale rounded. */
static float quantise(unsigned char *q8, size_t n, double sigma) {
  double *x = malloc(n * sizeof *x), amax = 0;
  REQUIRE_EXIT(x);
  for (size_t i = 0; i < n; i++) {
    x[i] = sigma * normal();
    if (fabs(x[i]) > amax) amax = fabs(x[i]);
  }
  const float descale = (float)(amax / FAT_E4M3_MAX);
  for (size_t i = 0; i < n; i++) q8[i] = fat_e4m3_encode((float)x[i] / descale);
  free(x);
  return descale;
}

/* What the model can get wrong on purpose, to show the bounds catch it. */
enum { MODEL_RIGHT, MODEL_NO_MASK, MODEL_NO_RESCALE, MODEL_NO_V_DESCALE };

typedef struct head {
  int sq, sk, d, causal;
  unsigned char *q, *k, *v;
  float qd, kd, vd;
} head;

/* The fp64 forward of the dequantised head into REF (sq x d). */
static void reference(const head *h, double *ref) {
  const double scale = 1.0 / sqrt(h->d);
  double *s = malloc((size_t)h->sk * sizeof *s);
  REQUIRE_EXIT(s);
  for (int i = 0; i < h->sq; i++) {
    const int last = h->causal ? i + h->sk - h->sq : h->sk - 1;  /* bottom-right aligned */
    double m = -INFINITY, l = 0;
    for (int j = 0; j <= last; j++) {
      double acc = 0;
      for (int c = 0; c < h->d; c++)
        acc += fat_e4m3_decode(h->q[i * h->d + c]) * h->qd * fat_e4m3_decode(h->k[j * h->d + c]) * h->kd;
      s[j] = acc * scale;
      if (s[j] > m) m = s[j];
    }
    for (int c = 0; c < h->d; c++) ref[i * h->d + c] = 0;
    for (int j = 0; j <= last; j++) {
      const double p = exp(s[j] - m);
      l += p;
      for (int c = 0; c < h->d; c++) ref[i * h->d + c] += p * fat_e4m3_decode(h->v[j * h->d + c]) * h->vd;
    }
    for (int c = 0; c < h->d; c++) ref[i * h->d + c] /= l;
  }
  free(s);
}

/* The kernel's forward as modelled (the file's comment), WHAT its mistake,
 * into O (bf16 values). */
static void kernel_model(const head *h, int what, double *o) {
  const float scale_log2 = (float)(1.0 / sqrt(h->d) * LOG2E) * h->qd * h->kd;
  float *s = malloc(MODEL_BLOCK_N * sizeof *s), *acc = malloc((size_t)h->d * sizeof *acc);
  float *vf = malloc((size_t)h->sk * h->d * sizeof *vf), *kf = malloc((size_t)h->sk * h->d * sizeof *kf);
  REQUIRE_EXIT(s && acc && vf && kf);
  for (size_t i = 0; i < (size_t)h->sk * h->d; i++) {
    vf[i] = (float)fat_e4m3_decode(h->v[i]);
    kf[i] = (float)fat_e4m3_decode(h->k[i]);
  }
  for (int i = 0; i < h->sq; i++) {
    const int last = h->causal && what != MODEL_NO_MASK ? i + h->sk - h->sq : h->sk - 1;
    float qf[256];
    for (int c = 0; c < h->d; c++) qf[c] = (float)fat_e4m3_decode(h->q[i * h->d + c]);
    float m = -INFINITY, l = 0;
    for (int c = 0; c < h->d; c++) acc[c] = 0;
    for (int j0 = 0; j0 <= last; j0 += MODEL_BLOCK_N) {
      const int n = last + 1 - j0 < MODEL_BLOCK_N ? last + 1 - j0 : MODEL_BLOCK_N;
      float m_new = m;
      for (int j = 0; j < n; j++) {
        float dot = 0;  /* products of e4m3 values are exact in fp32; the sum rounds */
        for (int c = 0; c < h->d; c++) dot += qf[c] * kf[(size_t)(j0 + j) * h->d + c];
        s[j] = dot * scale_log2;
        if (s[j] > m_new) m_new = s[j];
      }
      /* alpha = exp2(m_old - m_new) rescales l and acc (fp32). */
      const float alpha = what == MODEL_NO_RESCALE || m == -INFINITY ? 1.0f : exp2f(m - m_new);
      l *= alpha;
      for (int c = 0; c < h->d; c++) acc[c] *= alpha;
      m = m_new;
      for (int j = 0; j < n; j++) {
        const float p = exp2f(s[j] - m + (float)P_OFFSET_LOG2);  /* (0, 256] */
        l += p;                                                  /* l sums P before rounding */
        const float p8 = (float)fat_e4m3_decode(fat_e4m3_encode(p));
        for (int c = 0; c < h->d; c++) acc[c] += p8 * vf[(size_t)(j0 + j) * h->d + c];
      }
    }
    const float vd = what == MODEL_NO_V_DESCALE ? 1.0f : h->vd;
    for (int c = 0; c < h->d; c++) o[i * h->d + c] = round_bf16(acc[c] * vd / l);
  }
  free(s), free(acc), free(vf), free(kf);
}

typedef struct errors {
  double rel_l2, max_abs_rel;
} errors;

static errors compare(const double *o, const double *ref, size_t n) {
  double d2 = 0, r2 = 0, max_abs = 0, max_ref = 0;
  for (size_t i = 0; i < n; i++) {
    const double e = fabs(o[i] - ref[i]);
    d2 += e * e, r2 += ref[i] * ref[i];
    if (e > max_abs) max_abs = e;
    if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
  }
  return (errors){sqrt(d2 / r2), max_abs / max_ref};
}

/* One random head of shape (SQ, SK, D) modelled right and wrong: the right
 * one within the e4m3 bounds, each mistake (where it changes anything)
 * far outside. WORST collects the right one's largest errors. */
static void model_head(int sq, int sk, int d, int causal, double sigma, errors *worst) {
  head h = {.sq = sq, .sk = sk, .d = d, .causal = causal};
  h.q = malloc((size_t)sq * d), h.k = malloc((size_t)sk * d), h.v = malloc((size_t)sk * d);
  double *ref = malloc((size_t)sq * d * sizeof *ref), *o = malloc((size_t)sq * d * sizeof *o);
  REQUIRE_EXIT(h.q && h.k && h.v && ref && o);
  h.qd = quantise(h.q, (size_t)sq * d, sigma);
  h.kd = quantise(h.k, (size_t)sk * d, sigma);
  h.vd = quantise(h.v, (size_t)sk * d, 1.0);
  const fat_tolerance tol = fat_tolerance_for(FAT_E4M3);
  reference(&h, ref);
  kernel_model(&h, MODEL_RIGHT, o);
  const errors e = compare(o, ref, (size_t)sq * d);
  printf("  e4m3 model sq %5d sk %5d d%-3d %-6s sigma %.1f: rel_l2 %.2e max_abs_rel %.2e\n", sq, sk,
         d, causal ? "causal" : "none", sigma, e.rel_l2, e.max_abs_rel);
  CHECK(e.rel_l2 < tol.rel_l2);
  CHECK(e.max_abs_rel < tol.max_abs_rel);
  if (e.rel_l2 > worst->rel_l2) worst->rel_l2 = e.rel_l2;
  if (e.max_abs_rel > worst->max_abs_rel) worst->max_abs_rel = e.max_abs_rel;
  static const char *const names[] = {"", "dropped mask", "missed rescale", "no v_descale"};
  for (int what = MODEL_NO_MASK; what <= MODEL_NO_V_DESCALE; what++) {
    if (what == MODEL_NO_MASK && (!causal || sq != sk)) continue;  /* else few keys change */
    if (what == MODEL_NO_RESCALE && sk <= MODEL_BLOCK_N) continue;  /* one block: nothing to rescale */
    kernel_model(&h, what, o);
    const errors w = compare(o, ref, (size_t)sq * d);
    printf("    %-14s: rel_l2 %.2e\n", names[what], w.rel_l2);
    /* Caught always; by a wide margin except a missed rescale on flat rows
     * (sigma 0.5), where the running max barely moves after the first block. */
    CHECK(w.rel_l2 > tol.rel_l2);
    CHECK(w.rel_l2 > WRONG_MIN_REL_L2 || (what == MODEL_NO_RESCALE && sigma < 1));
  }
  free(h.q), free(h.k), free(h.v), free(ref), free(o);
}

static void test_model(void) {
  errors worst = {0, 0};
  rng_state = MODEL_SEED;
  model_head(128, 128, 64, 1, 1.0, &worst);
  model_head(128, 128, 128, 0, 1.0, &worst);
  model_head(128, 1024, 128, 1, 1.0, &worst);
  model_head(96, 1024, 256, 0, 1.0, &worst);
  model_head(128, 1024, 128, 0, 2.0, &worst);   /* sharper rows: scores of std 4 */
  model_head(128, 1024, 128, 0, 0.5, &worst);   /* flatter ones */
  model_head(32, 16384, 128, 0, 1.0, &worst);   /* long: 16k keys, 128 blocks */
  model_head(32, 16384, 128, 1, 1.0, &worst);
  printf("  e4m3 model, worst: rel_l2 %.2e max_abs_rel %.2e (bounds %.1e, %.1e)\n", worst.rel_l2,
         worst.max_abs_rel, FAT_TOL_E4M3_REL_L2, FAT_TOL_E4M3_MAX_ABS_REL);
  /* The bounds are a few times the model's error, no more. */
  CHECK(FAT_TOL_E4M3_REL_L2 < 6 * worst.rel_l2);
  CHECK(FAT_TOL_E4M3_MAX_ABS_REL < 6 * worst.max_abs_rel);
}

/* fat_compare_fwd reads an e4m3 variant's O as bf16 and judges it by the
 * e4m3 bounds: an error of 2e-2 passes e4m3 and fails bf16. */
static void test_compare_e4m3(void) {
  enum { N = 64 };
  uint16_t o[N];
  double ref[N];
  float lse[1] = {0.5f};
  const double ref_lse[1] = {0.5};
  for (int i = 0; i < N; i++) {
    ref[i] = (i % 2 ? 1.0 : -1.0) * (1 + i / 64.0);
    const double x = ref[i] * (1 + 0.02 * (i % 3 ? 1 : -1));
    float f = (float)x;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    o[i] = (uint16_t)(bits >> 16);
  }
  fat_check c;
  fat_compare_fwd(FAT_E4M3, o, ref, N, lse, ref_lse, 1, &c);
  CHECK_STR(c.reason, "ok");
  CHECK_INT(c.passed, 1);
  fat_compare_fwd(FAT_BF16, o, ref, N, lse, ref_lse, 1, &c);
  CHECK_INT(c.passed, 0);
  CHECK(!strncmp(c.reason, "rel_l2 ", 7));
  /* NaN never passes: e4m3's O is poisoned with bf16 NaN. */
  o[3] = 0xffff;
  fat_compare_fwd(FAT_E4M3, o, ref, N, lse, ref_lse, 1, &c);
  CHECK_STR(c.reason, "1 non-finite output");
}

/* The support kernels compile with the e4m3 format in them (NVRTC, no GPU):
 * the fill's fat_fill_e4m3_amax and fat_fill_e4m3, and the reference,
 * which takes the descale factors as its last argument. */
static void test_support_compiles(void) {
  static const char *const archs[] = {"sm_80", "sm_90a"};
  char err[4096];
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    fat_build util, ref;
    const int rc = fat_gpu_compile_support(archs[a], &util, &ref, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK_INT(rc, 0);
    if (rc) continue;
    CHECK(util.log && strstr(util.log, "fat_fill_e4m3_amax"));
    CHECK(util.log && strstr(util.log, "'fat_fill_e4m3'"));
    CHECK(util.log && strstr(util.log, "'fat_diff_sums'") && strstr(util.log, "'fat_count_diff'"));
    CHECK(util.log && strstr(util.log, "'fat_fingerprint'"));
    CHECK(ref.log && strstr(ref.log, "fat_reference_fwd"));
    fat_build_free(&util);
    fat_build_free(&ref);
  }
}

int main(void) {
  test_support_compiles();
  test_decode_known();
  test_encode();
  test_compare_e4m3();
  test_model();
  return check_summary("test_fp8_cpu");
}
