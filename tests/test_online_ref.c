/* SPDX-License-Identifier: MIT */
/* Tests of the CPU online softmax reference (tuner/measure/online_ref.c): that the
 * tile-by-tile recurrence equals a direct, stable softmax for every tile size,
 * survives extreme score offsets, honours masks given by absolute positions
 * (a tile boundary never changes the answer), follows the empty-row policy,
 * and rejects bad input with exact messages. Random inputs come from a seeded
 * splitmix64; the seed is printed and FATUNE_TEST_SEED overrides it. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "online_ref.h"
#include "check.h"

/* Tolerance of every comparison in double precision: relative to the value
 * scale for outputs (a softmax output is a convex combination of the value
 * rows), relative to max(1, |lse|) for the log-sum-exp. */
#define TOL 1e-12
#define DEFAULT_SEED UINT64_C(0x5eed0f5a17a11ce5)
#define MAX_KEYS 256
#define MAX_DIM 8
#define ERRLEN 160
#define RANDOM_TRIALS 40

/* Failures counted when the current group of checks began. */
static int group_start;

static void group_done(const char *name) {
  printf("%-28s %s\n", name, check_failed != group_start ? "FAILED" : "ok");
  group_start = check_failed;
}

/* splitmix64: small, seedable and identical everywhere. */
static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}
/* Uniform in [lo, hi). */
static double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(rng_next() >> 11) / 9007199254740992.0); /* 2^53 */
}
static int rng_int(int lo, int hi) { /* inclusive */
  return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
}

/* The direct reference: subtract the max over unmasked scores, exponentiate,
 * normalise, weight the values. Zeros and lse = -inf when nothing is visible. */
static void direct_softmax(const double *s, const double *v, int n, int d, double *out,
                           double *lse) {
  double mx = -INFINITY, sum = 0.0;
  for (int j = 0; j < n; j++)
    if (s[j] > mx) mx = s[j];
  for (int c = 0; c < d; c++) out[c] = 0.0;
  if (mx == -INFINITY) {
    *lse = -INFINITY;
    return;
  }
  for (int j = 0; j < n; j++) {
    if (s[j] == -INFINITY) continue;
    double p = exp(s[j] - mx);
    sum += p;
    for (int c = 0; c < d; c++) out[c] += p * v[j * d + c];
  }
  for (int c = 0; c < d; c++) out[c] /= sum;
  *lse = mx + log(sum);
}

static double max_abs(const double *x, int n) {
  double m = 0.0;
  for (int i = 0; i < n; i++)
    if (fabs(x[i]) > m) m = fabs(x[i]);
  return m;
}

/* |got - want| within TOL relative to max(1, |want|), for finite want. */
static int lse_close(double got, double want) {
  double scale = fabs(want) > 1.0 ? fabs(want) : 1.0;
  return isfinite(got) && fabs(got - want) <= TOL * scale;
}

/* Runs the row at tile size TILE and checks it against the direct softmax.
 * Returns 1 when everything matched, so callers can stop at the first miss. */
static int matches_direct(const double *s, const double *v, int n, int d, int tile,
                          const char *label) {
  double out[MAX_DIM], ref[MAX_DIM], lse, ref_lse;
  char err[ERRLEN] = "";
  int before = check_failed;
  int rc = fat_online_row(s, v, n, d, tile, out, &lse, err, sizeof err);
  CHECK(rc == 0);
  direct_softmax(s, v, n, d, ref, &ref_lse);
  double scale = max_abs(v, n * d) > 1.0 ? max_abs(v, n * d) : 1.0;
  for (int c = 0; c < d; c++) {
    CHECK(isfinite(out[c]));
    CHECK(fabs(out[c] - ref[c]) <= TOL * scale);
  }
  if (ref_lse == -INFINITY) {
    CHECK(lse == -INFINITY);
  } else {
    CHECK(lse_close(lse, ref_lse));
  }
  if (check_failed != before)
    fprintf(stderr, "  in %s: n=%d d=%d tile=%d (%s)\n", label, n, d, tile, err);
  return check_failed == before;
}

/* The tile sizes every comparison runs over: small, odd, and larger than n. */
static int tile_sizes(int n, int *tiles) {
  static const int fixed[] = {1, 2, 3, 7, 16};
  int k = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) tiles[k++] = fixed[i];
  tiles[k++] = n > 0 ? n : 1;
  tiles[k++] = n + 5;
  return k;
}

static void fill_values(double *v, int n, int d) {
  for (int i = 0; i < n * d; i++) v[i] = rng_uniform(-1.0, 1.0);
}

/* The example: scores [0, ln 2], values [10, 20], tile 1. */
static void test_worked_example(void) {
  const double s[2] = {0.0, log(2.0)};
  const double v[2] = {10.0, 20.0};
  double o[1], out[1], lse;
  char err[ERRLEN] = "";
  fat_online_state st;

  CHECK(fat_online_init(&st, o, 1, err, sizeof err) == 0);
  CHECK(st.m == -INFINITY && st.l == 0.0 && o[0] == 0.0);

  CHECK(fat_online_tile(&st, &s[0], &v[0], 1, err, sizeof err) == 0);
  CHECK(st.m == 0.0);
  CHECK(fabs(st.l - 1.0) <= TOL);
  CHECK(fabs(o[0] - 10.0) <= TOL);
  CHECK(st.alpha == 0.0); /* nothing accumulated before: nothing rescaled */

  CHECK(fat_online_tile(&st, &s[1], &v[1], 1, err, sizeof err) == 0);
  CHECK(fabs(st.m - log(2.0)) <= TOL);
  CHECK(fabs(st.alpha - 0.5) <= TOL);
  CHECK(fabs(st.l - 1.5) <= TOL);
  CHECK(fabs(o[0] - 25.0) <= TOL); /* 30 if only l were rescaled */
  CHECK(st.tiles == 2 && st.skipped == 0 && st.seen == 2);

  fat_online_finish(&st, out, &lse);
  CHECK(fabs(out[0] - 50.0 / 3.0) <= TOL);
  CHECK(fabs(lse - log(3.0)) <= TOL);

  /* One call, both tilings. */
  for (int tile = 1; tile <= 2; tile++) {
    CHECK(fat_online_row(s, v, 2, 1, tile, out, &lse, err, sizeof err) == 0);
    CHECK(fabs(out[0] - 50.0 / 3.0) <= TOL);
    CHECK(fabs(lse - log(3.0)) <= TOL);
  }
  group_done("worked_example");
}

/* A max that does not rise leaves alpha at exactly 1. */
static void test_alpha_when_max_falls(void) {
  const double s[2] = {1.0, -1.0};
  const double v[2] = {3.0, 5.0};
  double o[1], out[1], lse;
  char err[ERRLEN] = "";
  fat_online_state st;
  CHECK(fat_online_init(&st, o, 1, err, sizeof err) == 0);
  CHECK(fat_online_tile(&st, &s[0], &v[0], 1, err, sizeof err) == 0);
  CHECK(fat_online_tile(&st, &s[1], &v[1], 1, err, sizeof err) == 0);
  CHECK(st.m == 1.0);
  CHECK(st.alpha == 1.0);
  CHECK(fabs(st.l - (1.0 + exp(-2.0))) <= TOL);
  fat_online_finish(&st, out, &lse);
  CHECK(fabs(out[0] - (3.0 + 5.0 * exp(-2.0)) / (1.0 + exp(-2.0))) <= TOL);
  group_done("alpha_when_max_falls");
}

static void test_random_finite(void) {
  double s[MAX_KEYS], v[MAX_KEYS * MAX_DIM];
  int tiles[8];
  static const int dims[] = {1, 3, MAX_DIM};
  for (int t = 0; t < RANDOM_TRIALS; t++) {
    int n = rng_int(1, 100);
    int d = dims[t % 3];
    double spread = t % 2 ? 30.0 : 3.0; /* wide spreads make the max rise steeply */
    for (int j = 0; j < n; j++) s[j] = rng_uniform(-spread, spread);
    fill_values(v, n, d);
    int k = tile_sizes(n, tiles);
    for (int i = 0; i < k; i++)
      matches_direct(s, v, n, d, tiles[i], "random finite");
  }
  /* Rising scores force a rescale at every tile of size 1. */
  int n = 64;
  for (int j = 0; j < n; j++) s[j] = 0.5 * j;
  fill_values(v, n, 2);
  int k = tile_sizes(n, tiles);
  for (int i = 0; i < k; i++) matches_direct(s, v, n, 2, tiles[i], "rising");
  group_done("random_finite");
}

static void test_extreme_offsets(void) {
  static const double shifts[] = {1e4, -1e4, 1e6, -1e6, 1e15, -1e15, 1e300, -1e300};
  double s[MAX_KEYS], v[MAX_KEYS * MAX_DIM], out[MAX_DIM], lse;
  char err[ERRLEN] = "";
  int tiles[8];
  int n = 50, d = 3;
  for (size_t i = 0; i < sizeof shifts / sizeof shifts[0]; i++) {
    for (int j = 0; j < n; j++) s[j] = shifts[i] + rng_uniform(-10.0, 10.0);
    fill_values(v, n, d);
    int k = tile_sizes(n, tiles);
    for (int t = 0; t < k; t++) matches_direct(s, v, n, d, tiles[t], "shifted");
  }

  /* Mixed magnitudes: exp(-2e4) underflows to 0, so the answer is the value
   * at the max exactly, whichever side of the tile boundary the max is on. */
  const double lo_hi[2] = {-1e4, 1e4}, hi_lo[2] = {1e4, -1e4};
  const double v2[2] = {7.0, 9.0};
  for (int tile = 1; tile <= 2; tile++) {
    CHECK(fat_online_row(lo_hi, v2, 2, 1, tile, out, &lse, err, sizeof err) == 0);
    CHECK(out[0] == 9.0 && lse == 1e4);
    CHECK(fat_online_row(hi_lo, v2, 2, 1, tile, out, &lse, err, sizeof err) == 0);
    CHECK(out[0] == 7.0 && lse == 1e4);
  }
  /* The widest finite gap: m_old - m_new is -inf, alpha must be 0, not NaN. */
  const double widest[2] = {-DBL_MAX, DBL_MAX};
  double o[1];
  fat_online_state st;
  CHECK(fat_online_init(&st, o, 1, err, sizeof err) == 0);
  CHECK(fat_online_tile(&st, &widest[0], &v2[0], 1, err, sizeof err) == 0);
  CHECK(fat_online_tile(&st, &widest[1], &v2[1], 1, err, sizeof err) == 0);
  CHECK(st.alpha == 0.0 && st.l == 1.0 && o[0] == 9.0);
  fat_online_finish(&st, out, &lse);
  CHECK(out[0] == 9.0 && lse == DBL_MAX);

  /* Scores spread over the whole finite range, and rising by 1000 per key
   * (every rescale underflows alpha to 0). */
  for (int j = 0; j < n; j++) s[j] = rng_uniform(-1e300, 1e300);
  fill_values(v, n, d);
  int k = tile_sizes(n, tiles);
  for (int t = 0; t < k; t++) matches_direct(s, v, n, d, tiles[t], "full range");
  for (int j = 0; j < n; j++) s[j] = 1000.0 * j;
  for (int t = 0; t < k; t++) matches_direct(s, v, n, d, tiles[t], "rising by 1000");
  group_done("extreme_offsets");
}

static void test_masks(void) {
  double s[MAX_KEYS], v[MAX_KEYS * MAX_DIM];
  int tiles[8];
  int n = 40, d = 4;

  /* Random masked positions, about 30% of keys. */
  for (int trial = 0; trial < RANDOM_TRIALS; trial++) {
    for (int j = 0; j < n; j++) s[j] = rng_uniform(0.0, 1.0) < 0.3 ? -INFINITY : rng_uniform(-8, 8);
    fill_values(v, n, d);
    int k = tile_sizes(n, tiles);
    for (int t = 0; t < k; t++) matches_direct(s, v, n, d, tiles[t], "random mask");
  }

  /* Whole tiles masked, the first one included, at tile size 4. */
  const int tile = 4;
  for (int j = 0; j < n; j++) {
    int which = j / tile;
    s[j] = (which == 0 || which == 3 || which == 4) ? -INFINITY : rng_uniform(-5, 5);
  }
  fill_values(v, n, d);
  matches_direct(s, v, n, d, tile, "masked tiles");

  double o[MAX_DIM], saved_o[MAX_DIM];
  char err[ERRLEN] = "";
  fat_online_state st;
  CHECK(fat_online_init(&st, o, d, err, sizeof err) == 0);
  CHECK(fat_online_tile(&st, s, v, tile, err, sizeof err) == 0);
  /* First tile masked: m still -inf, nothing accumulated. */
  CHECK(st.m == -INFINITY && st.l == 0.0 && st.skipped == 1 && max_abs(o, d) == 0.0);
  CHECK(fat_online_tile(&st, s + tile, v + tile * d, tile, err, sizeof err) == 0);
  CHECK(isfinite(st.m) && st.l >= 1.0 && st.alpha == 0.0);
  CHECK(fat_online_tile(&st, s + 2 * tile, v + 2 * tile * d, tile, err, sizeof err) == 0);
  /* A masked tile mid-row leaves m, l and o bit for bit as they were. */
  fat_online_state saved = st;
  memcpy(saved_o, o, sizeof o);
  CHECK(fat_online_tile(&st, s + 3 * tile, v + 3 * tile * d, tile, err, sizeof err) == 0);
  CHECK(st.m == saved.m && st.l == saved.l && memcmp(o, saved_o, sizeof o) == 0);
  CHECK(st.skipped == 2 && st.tiles == 4 && st.alpha == 1.0);
  group_done("masks");
}

static void test_empty_rows(void) {
  double s[MAX_KEYS], v[MAX_KEYS * MAX_DIM], out[MAX_DIM], lse;
  char err[ERRLEN] = "";
  int d = 3, n = 20;

  /* n = 0: no scores at all, NULL pointers allowed. */
  for (int c = 0; c < d; c++) out[c] = 123.0;
  CHECK(fat_online_row(NULL, NULL, 0, d, 4, out, &lse, err, sizeof err) == 0);
  CHECK(max_abs(out, d) == 0.0 && lse == -INFINITY);

  /* Every key masked, at every tile size: zeros, lse -inf, never NaN. */
  for (int j = 0; j < n; j++) s[j] = -INFINITY;
  fill_values(v, n, d);
  for (int tile = 1; tile <= n + 1; tile++) {
    for (int c = 0; c < d; c++) out[c] = NAN;
    CHECK(fat_online_row(s, v, n, d, tile, out, &lse, err, sizeof err) == 0);
    CHECK(out[0] == 0.0 && out[1] == 0.0 && out[2] == 0.0 && !signbit(out[0]));
    CHECK(lse == -INFINITY);
  }
  double o[MAX_DIM];
  fat_online_state st;
  CHECK(fat_online_init(&st, o, d, err, sizeof err) == 0);
  CHECK(fat_online_tile(&st, s, v, n, err, sizeof err) == 0);
  CHECK(st.skipped == 1 && st.m == -INFINITY && st.l == 0.0);
  fat_online_finish(&st, out, NULL); /* lse is optional */
  CHECK(max_abs(out, d) == 0.0);
  group_done("empty_rows");
}

static void test_errors(void) {
  double s[6] = {0.0, 1.0, 2.0, 3.0, 4.0, 5.0};
  double v[6 * 2] = {0};
  double out[2], lse;
  char err[ERRLEN] = "";

  CHECK(fat_online_row(s, v, 6, 2, 0, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "tile size must be positive, got 0");
  CHECK(out[0] == 0.0 && out[1] == 0.0 && isnan(lse)); /* never a plausible answer */
  CHECK(fat_online_row(s, v, 6, 2, -3, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "tile size must be positive, got -3");
  CHECK(fat_online_row(s, v, 6, 0, 2, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "head dimension must be positive, got 0");
  CHECK(fat_online_row(s, v, -1, 2, 2, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "key count must be non-negative, got -1");

  /* Keys are named by row index even when they sit inside a later tile. */
  s[3] = NAN;
  CHECK(fat_online_row(s, v, 6, 2, 2, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "score 3 is NaN");
  CHECK(isnan(lse));
  s[3] = INFINITY;
  CHECK(fat_online_row(s, v, 6, 2, 2, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "score 3 is +inf");
  s[3] = -INFINITY; /* a mask, not an error */
  CHECK(fat_online_row(s, v, 6, 2, 2, out, &lse, err, sizeof err) == 0);

  v[2 * 2 + 1] = INFINITY;
  CHECK(fat_online_row(s, v, 6, 2, 2, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "value [2][1] is not finite");
  v[2 * 2 + 1] = NAN;
  CHECK(fat_online_row(s, v, 6, 2, 4, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "value [2][1] is not finite");
  /* A masked key's value is multiplied by 0 in a kernel: 0 * NaN is NaN. */
  s[2] = -INFINITY;
  CHECK(fat_online_row(s, v, 6, 2, 1, out, &lse, err, sizeof err) == -1);
  CHECK_STR(err, "value [2][1] is not finite");
  v[2 * 2 + 1] = 0.0;

  /* A rejected tile leaves the state as it was, even if its valid scores
   * would have raised the max. */
  double o[2];
  fat_online_state st;
  const double good[2] = {0.5, 1.0}, bad[2] = {100.0, NAN};
  CHECK(fat_online_init(&st, o, 2, err, sizeof err) == 0);
  CHECK(fat_online_tile(&st, good, v, 2, err, sizeof err) == 0);
  fat_online_state saved = st;
  double saved_o[2] = {o[0], o[1]};
  CHECK(fat_online_tile(&st, bad, v, 2, err, sizeof err) == -1);
  CHECK_STR(err, "score 3 is NaN");
  CHECK(st.m == saved.m && st.l == saved.l && st.seen == 2 && st.tiles == 1);
  CHECK(o[0] == saved_o[0] && o[1] == saved_o[1]);
  CHECK(fat_online_init(&st, NULL, 2, err, sizeof err) == -1);
  CHECK_STR(err, "output buffer is NULL");
  group_done("errors");
}

/* Visible keys of query I as a bit string "0110" for exact comparison. */
static void visible_string(const fat_online_mask_spec *m, int i, char *buf) {
  double s[MAX_KEYS];
  char err[ERRLEN] = "";
  for (int j = 0; j < m->seqlen_k; j++) s[j] = 1.0;
  if (fat_online_mask_row(m, i, s, err, sizeof err)) {
    snprintf(buf, MAX_KEYS, "error: %s", err);
    return;
  }
  for (int j = 0; j < m->seqlen_k; j++) {
    CHECK(s[j] == 1.0 || s[j] == -INFINITY); /* visible scores untouched */
    CHECK((s[j] == 1.0) == fat_online_key_visible(m, i, j));
    buf[j] = s[j] == 1.0 ? '1' : '0';
  }
  buf[m->seqlen_k] = '\0';
}

#define CHECK_ROW(spec, i, want)            \
  do {                                      \
    char got_[MAX_KEYS + 1];                \
    visible_string(&(spec), (i), got_);     \
    CHECK_STR(got_, want);                  \
  } while (0)

static void test_mask_helper(void) {
  char err[ERRLEN] = "";
  /* Square causal: the lower triangle. */
  fat_online_mask_spec sq = {.seqlen_q = 4, .seqlen_k = 4, .causal = 1, .window_left = -1,
                             .window_right = -1};
  CHECK_ROW(sq, 0, "1000");
  CHECK_ROW(sq, 3, "1111");
  /* More queries than keys, aligned bottom right: queries 0..2 see nothing. */
  fat_online_mask_spec tall = {.seqlen_q = 5, .seqlen_k = 2, .causal = 1, .window_left = -1,
                               .window_right = -1};
  CHECK_ROW(tall, 0, "00");
  CHECK_ROW(tall, 2, "00");
  CHECK_ROW(tall, 3, "10");
  CHECK_ROW(tall, 4, "11");
  /* More keys than queries: query 0 sits at key position 3. */
  fat_online_mask_spec wide = {.seqlen_q = 2, .seqlen_k = 5, .causal = 1, .window_left = -1,
                               .window_right = -1};
  CHECK_ROW(wide, 0, "11110");
  CHECK_ROW(wide, 1, "11111");
  /* Sliding window, not causal: 2 keys left, 1 right. */
  fat_online_mask_spec win = {.seqlen_q = 8, .seqlen_k = 8, .causal = 0, .window_left = 2,
                              .window_right = 1};
  CHECK_ROW(win, 0, "11000000");
  CHECK_ROW(win, 4, "00111100");
  CHECK_ROW(win, 7, "00000111");
  /* Causal with a left window; window 0 keeps only the diagonal. */
  fat_online_mask_spec cwin = {.seqlen_q = 8, .seqlen_k = 8, .causal = 1, .window_left = 2,
                               .window_right = -1};
  CHECK_ROW(cwin, 4, "00111000");
  fat_online_mask_spec diag = {.seqlen_q = 4, .seqlen_k = 4, .causal = 1, .window_left = 0,
                               .window_right = 0};
  CHECK_ROW(diag, 2, "0010");
  /* Window with seqlen_q != seqlen_k keeps the bottom-right alignment. */
  fat_online_mask_spec wwin = {.seqlen_q = 2, .seqlen_k = 6, .causal = 0, .window_left = 1,
                               .window_right = 0};
  CHECK_ROW(wwin, 0, "000110");
  /* No mask at all. */
  fat_online_mask_spec none = {.seqlen_q = 3, .seqlen_k = 5, .causal = 0, .window_left = -1,
                               .window_right = -1};
  CHECK_ROW(none, 1, "11111");

  /* A row that sees no key is the empty-row policy through the helper. */
  double s[2] = {0.3, 0.7}, v[2] = {1.0, 2.0}, out[1], lse;
  CHECK(fat_online_mask_row(&tall, 1, s, err, sizeof err) == 0);
  CHECK(fat_online_row(s, v, 2, 1, 1, out, &lse, err, sizeof err) == 0);
  CHECK(out[0] == 0.0 && lse == -INFINITY);

  fat_online_mask_spec bad = {.seqlen_q = 4, .seqlen_k = 4, .causal = 0, .window_left = -2,
                              .window_right = -1};
  CHECK(fat_online_mask_row(&bad, 0, s, err, sizeof err) == -1);
  CHECK_STR(err, "window_left must be -1 (unbounded) or >= 0, got -2");
  bad = (fat_online_mask_spec){.seqlen_q = 4, .seqlen_k = 4, .causal = 0, .window_left = -1,
                               .window_right = -5};
  CHECK(fat_online_mask_check(&bad, err, sizeof err) == -1);
  CHECK_STR(err, "window_right must be -1 (unbounded) or >= 0, got -5");
  bad = (fat_online_mask_spec){.seqlen_q = 4, .seqlen_k = 4, .causal = 1, .window_left = -1,
                               .window_right = 1};
  CHECK(fat_online_mask_check(&bad, err, sizeof err) == -1);
  CHECK_STR(err, "causal mask cannot have window_right 1 > 0");
  bad = (fat_online_mask_spec){.seqlen_q = 4, .seqlen_k = -1, .causal = 0, .window_left = -1,
                               .window_right = -1};
  CHECK(fat_online_mask_check(&bad, err, sizeof err) == -1);
  CHECK_STR(err, "seqlen_k must be non-negative, got -1");
  CHECK(fat_online_mask_row(&sq, 4, s, err, sizeof err) == -1);
  CHECK_STR(err, "query 4 is out of range: seqlen_q is 4");
  CHECK(fat_online_mask_row(&sq, -1, s, err, sizeof err) == -1);
  CHECK_STR(err, "query -1 is out of range: seqlen_q is 4");
  group_done("mask_helper");
}

/* Every row of masked problems, at every tile size 1..seqlen_k: the answer
 * matches the direct softmax and the tile-1 answer, so tile boundaries that
 * cut through the mask edge never change it. */
static void test_tile_boundary_invariance(void) {
  static const fat_online_mask_spec specs[] = {
      /* square causal */
      {.seqlen_q = 37, .seqlen_k = 37, .causal = 1, .window_left = -1, .window_right = -1},
      /* short queries, long keys */
      {.seqlen_q = 13, .seqlen_k = 37, .causal = 1, .window_left = -1, .window_right = -1},
      /* first 24 queries see nothing */
      {.seqlen_q = 37, .seqlen_k = 13, .causal = 1, .window_left = -1, .window_right = -1},
      /* causal sliding window */
      {.seqlen_q = 29, .seqlen_k = 29, .causal = 1, .window_left = 5, .window_right = -1},
      /* two-sided window */
      {.seqlen_q = 29, .seqlen_k = 31, .causal = 0, .window_left = 3, .window_right = 4},
  };
  double s[MAX_KEYS], v[MAX_KEYS * MAX_DIM], first[MAX_DIM], out[MAX_DIM], lse, first_lse;
  char err[ERRLEN] = "";
  int d = 2;
  for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
    const fat_online_mask_spec *m = &specs[k];
    int nk = m->seqlen_k;
    fill_values(v, nk, d);
    for (int i = 0; i < m->seqlen_q; i++) {
      for (int j = 0; j < nk; j++) s[j] = rng_uniform(-6.0, 6.0);
      CHECK(fat_online_mask_row(m, i, s, err, sizeof err) == 0);
      CHECK(fat_online_row(s, v, nk, d, 1, first, &first_lse, err, sizeof err) == 0);
      for (int tile = 1; tile <= nk; tile++) {
        if (!matches_direct(s, v, nk, d, tile, "tile invariance")) break;
        CHECK(fat_online_row(s, v, nk, d, tile, out, &lse, err, sizeof err) == 0);
        CHECK(fabs(out[0] - first[0]) <= TOL && fabs(out[1] - first[1]) <= TOL);
        CHECK(first_lse == -INFINITY ? lse == -INFINITY : lse_close(lse, first_lse));
      }
    }
  }
  group_done("tile_boundary_invariance");
}

int main(void) {
  uint64_t seed = DEFAULT_SEED;
  const char *env = getenv("FATUNE_TEST_SEED");
  if (env && *env) seed = strtoull(env, NULL, 0);
  rng_state = seed;
  printf("seed 0x%016" PRIx64 " (set FATUNE_TEST_SEED to repeat another)\n", seed);

  test_worked_example();
  test_alpha_when_max_falls();
  test_random_finite();
  test_extreme_offsets();
  test_masks();
  test_empty_rows();
  test_errors();
  test_mask_helper();
  test_tile_boundary_invariance();

  return check_summary("test_online_ref");
}
