/* SPDX-License-Identifier: MIT */
/* The online softmax recurrence of one query row on the CPU, in double
 * precision, written to read like the kernels' inner loop (m, l, o, alpha)
 * so that a test of this file is a test of the algorithm they implement.
 * See online_ref.h for the contract and the empty-row policy. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "online_ref.h"

/* The window value that means "unbounded on this side". */
#define WINDOW_UNBOUNDED (-1)

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int fat_online_init(fat_online_state *s, double *o, int d, char *err, size_t errlen) {
  if (d <= 0) return fail(err, errlen, "head dimension must be positive, got %d", d);
  if (!o) return fail(err, errlen, "output buffer is NULL");
  s->m = -INFINITY;
  s->l = 0.0;
  s->o = o;
  s->d = d;
  s->seen = 0;
  s->tiles = 0;
  s->skipped = 0;
  s->alpha = 1.0;
  memset(o, 0, (size_t)d * sizeof *o);
  return 0;
}

/* Rejects what the recurrence cannot give a meaning to. -inf is a mask and
 * is allowed; NaN and +inf are not scores. Values must all be finite: a kernel
 * multiplies a masked key's zero probability by its value too, and 0 * inf is
 * NaN. Keys are named by their index in the row, not in the tile. */
static int validate_tile(const fat_online_state *s, const double *scores,
                         const double *values, int n, char *err, size_t errlen) {
  for (int j = 0; j < n; j++) {
    double x = scores[j];
    if (isnan(x)) return fail(err, errlen, "score %d is NaN", s->seen + j);
    if (isinf(x) && x > 0) return fail(err, errlen, "score %d is +inf", s->seen + j);
  }
  for (int j = 0; j < n; j++)
    for (int c = 0; c < s->d; c++)
      if (!isfinite(values[(size_t)j * s->d + c]))
        return fail(err, errlen, "value [%d][%d] is not finite", s->seen + j, c);
  return 0;
}

int fat_online_tile(fat_online_state *s, const double *scores, const double *values,
                    int n, char *err, size_t errlen) {
  if (n < 0) return fail(err, errlen, "tile key count must be non-negative, got %d", n);
  if (n > 0 && (!scores || !values))
    return fail(err, errlen, "tile of %d keys has no %s", n, scores ? "values" : "scores");
  if (validate_tile(s, scores, values, n, err, errlen)) return -1;

  /* The tile's max over its unmasked scores. */
  double tile_max = -INFINITY;
  for (int j = 0; j < n; j++)
    if (scores[j] > tile_max) tile_max = scores[j];

  s->seen += n;
  s->tiles++;
  if (tile_max == -INFINITY) {
    /* Every key masked: nothing to add, and m_new could be -inf, which would
     * make exp(s - m_new) compute -inf - (-inf). Skip the tile. */
    s->skipped++;
    s->alpha = 1.0;
    return 0;
  }

  double m_new = s->m > tile_max ? s->m : tile_max;
  /* Rescale what was accumulated under the old max. Before the first
   * unmasked key m is -inf and l, o are 0: there is nothing to rescale. */
  double alpha = isfinite(s->m) ? exp(s->m - m_new) : 0.0;
  s->l *= alpha;
  for (int c = 0; c < s->d; c++) s->o[c] *= alpha;

  for (int j = 0; j < n; j++) {
    if (scores[j] == -INFINITY) continue;  /* masked: contributes exactly 0 */
    double p = exp(scores[j] - m_new);     /* <= 1, never overflows */
    const double *v = values + (size_t)j * s->d;
    s->l += p;                                            /* l += rowsum(P) */
    for (int c = 0; c < s->d; c++) s->o[c] += p * v[c];  /* O += P·V */
  }
  s->m = m_new;
  s->alpha = alpha;
  return 0;
}

void fat_online_finish(const fat_online_state *s, double *out, double *lse) {
  if (s->l == 0.0) {
    /* Empty or all-masked row: the policy is zeros and lse = -inf. */
    memset(out, 0, (size_t)s->d * sizeof *out);
    if (lse) *lse = -INFINITY;
    return;
  }
  for (int c = 0; c < s->d; c++) out[c] = s->o[c] / s->l;
  if (lse) *lse = s->m + log(s->l);
}

int fat_online_row(const double *scores, const double *values, int n, int d, int tile,
                   double *out, double *lse, char *err, size_t errlen) {
  fat_online_state s;
  int rc = -1;
  if (tile <= 0) {
    fail(err, errlen, "tile size must be positive, got %d", tile);
    goto out;
  }
  if (n < 0) {
    fail(err, errlen, "key count must be non-negative, got %d", n);
    goto out;
  }
  if (fat_online_init(&s, out, d, err, errlen)) goto out;
  /* Step by len, not tile: start + tile may overflow int near INT_MAX. */
  for (int start = 0, len; start < n; start += len) {
    len = n - start < tile ? n - start : tile;
    if (fat_online_tile(&s, scores + start, values + (size_t)start * d, len, err, errlen))
      goto out;
  }
  fat_online_finish(&s, out, lse);
  rc = 0;
out:
  if (rc) {
    if (out && d > 0) memset(out, 0, (size_t)d * sizeof *out);
    if (lse) *lse = NAN;
  }
  return rc;
}

int fat_online_mask_check(const fat_online_mask_spec *spec, char *err, size_t errlen) {
  if (spec->seqlen_q < 0)
    return fail(err, errlen, "seqlen_q must be non-negative, got %d", spec->seqlen_q);
  if (spec->seqlen_k < 0)
    return fail(err, errlen, "seqlen_k must be non-negative, got %d", spec->seqlen_k);
  if (spec->window_left < WINDOW_UNBOUNDED)
    return fail(err, errlen, "window_left must be -1 (unbounded) or >= 0, got %d",
                spec->window_left);
  if (spec->window_right < WINDOW_UNBOUNDED)
    return fail(err, errlen, "window_right must be -1 (unbounded) or >= 0, got %d",
                spec->window_right);
  if (spec->causal && spec->window_right > 0)
    return fail(err, errlen, "causal mask cannot have window_right %d > 0",
                spec->window_right);
  return 0;
}

int fat_online_key_visible(const fat_online_mask_spec *spec, int i, int j) {
  /* Wide arithmetic: i + seqlen_k - seqlen_q + window may leave int's range. */
  long long pos = (long long)i + spec->seqlen_k - spec->seqlen_q;  /* query's key position */
  long long right = spec->causal ? 0 : spec->window_right;
  if ((spec->causal || right != WINDOW_UNBOUNDED) && j > pos + right) return 0;
  if (spec->window_left != WINDOW_UNBOUNDED && j < pos - spec->window_left) return 0;
  return 1;
}

int fat_online_mask_row(const fat_online_mask_spec *spec, int i, double *scores,
                        char *err, size_t errlen) {
  if (fat_online_mask_check(spec, err, errlen)) return -1;
  if (i < 0 || i >= spec->seqlen_q)
    return fail(err, errlen, "query %d is out of range: seqlen_q is %d", i, spec->seqlen_q);
  for (int j = 0; j < spec->seqlen_k; j++)
    if (!fat_online_key_visible(spec, i, j)) scores[j] = -INFINITY;
  return 0;
}
