/* SPDX-License-Identifier: MIT */
/* A CPU reference, in double precision, of the online softmax recurrence the
 * kernels run for one query row: the running max m, denominator l and
 * unnormalised output o, with l and o rescaled by alpha = exp(m_old - m_new)
 * whenever a tile raises the max. It exists so the recurrence itself (not only
 * its end result) can be tested for every tile size, extreme score offsets and
 * masked rows, and so the checker has a model of what a kernel computes.
 *
 * Masking is expressed in the scores: -INFINITY marks a key the query must not
 * see. fat_online_mask_row builds those -inf entries from absolute positions,
 * because a causal or windowed mask compares absolute query and key indices
 * and a tile-local index is never enough.
 *
 * Empty-row policy: a row with no keys, or with every key masked, yields a
 * zero output and log-sum-exp -INFINITY, and -inf - (-inf) is never computed.
 *
 * Every function returns 0 on success, or -1 with ERR (ERRLEN bytes, may be
 * NULL) naming the bad value: "score 3 is NaN". */
#ifndef FAT_ONLINE_REF_H
#define FAT_ONLINE_REF_H
#include <stddef.h>

/* The state carried from tile to tile for one query row. The last four
 * fields are the trace of the most recent tile, so a test can watch the
 * recurrence step by step. */
typedef struct fat_online_state {
  double m;      /* running max over the unmasked scores seen; -INFINITY before any */
  double l;      /* running denominator: sum of exp(s - m) */
  double *o;     /* running unnormalised output, d entries: sum of exp(s - m) * v */
  int d;         /* head dimension: entries per value row and in o */
  int seen;      /* keys consumed so far: error messages name keys by row index */
  int tiles;     /* tiles consumed, skipped ones included */
  int skipped;   /* tiles skipped because every score in them was masked */
  double alpha;  /* factor the last tile rescaled l and o by: exp(m_old - m_new);
                    0 when there was nothing to rescale (m_old = -inf), 1 when
                    the max did not rise or the tile was skipped */
} fat_online_state;

/* Starts a row: m = -inf, l = 0, O (caller-owned, D entries) zeroed.
 * Fails when D <= 0 or O is NULL. */
int fat_online_init(fat_online_state *s, double *o, int d, char *err, size_t errlen);

/* Consumes one tile of N keys: SCORES[N] (already scaled; -inf = masked) and
 * VALUES, N rows of d entries, row-major. The whole tile is validated before
 * the state changes, so on error the state is exactly as before. Rejects NaN
 * and +inf scores and any non-finite value (masked keys' values included).
 * A tile whose scores are all masked leaves m, l and o untouched. */
int fat_online_tile(fat_online_state *s, const double *scores, const double *values,
                    int n, char *err, size_t errlen);

/* Ends the row: OUT[d] = o / l and *LSE = m + log(l); for an empty or
 * all-masked row (l == 0) OUT is zeros and *LSE is -INFINITY. LSE may be
 * NULL. OUT may be the state's own o. */
void fat_online_finish(const fat_online_state *s, double *out, double *lse);

/* The whole row in one call: N keys consumed in tiles of TILE keys (the last
 * one shorter), then finished into OUT[d] and *LSE (LSE may be NULL). OUT
 * doubles as the accumulator, so nothing is allocated. Fails when TILE <= 0,
 * N < 0, D <= 0 or any score or value is rejected by fat_online_tile; on
 * failure OUT is zeros and *LSE is NaN, so a caller ignoring the return value
 * still cannot mistake the result for an answer. */
int fat_online_row(const double *scores, const double *values, int n, int d, int tile,
                   double *out, double *lse, char *err, size_t errlen);

/* Which keys a query sees, by absolute positions. Queries are aligned to the
 * bottom right of the score matrix (the FlashAttention convention), so query i
 * sits at key position i + seqlen_k - seqlen_q and sees key j iff
 *   j <= i + seqlen_k - seqlen_q + window_right   (when window_right >= 0)
 *   j >= i + seqlen_k - seqlen_q - window_left    (when window_left >= 0)
 * A window of -1 is unbounded on that side. Causal is window_right = 0; a
 * causal spec with window_right > 0 contradicts itself and is rejected. */
typedef struct fat_online_mask_spec {
  int seqlen_q, seqlen_k;  /* query and key counts of the whole problem */
  int causal;              /* 1: no key to the right of the query's position */
  int window_left;         /* keys visible to the left of that position; -1 = all */
  int window_right;        /* keys visible to its right; -1 = all */
} fat_online_mask_spec;

/* Checks SPEC: lengths >= 0, windows >= -1, no causal window_right > 0. */
int fat_online_mask_check(const fat_online_mask_spec *spec, char *err, size_t errlen);

/* 1 when query I sees key J under SPEC (assumed checked), else 0. */
int fat_online_key_visible(const fat_online_mask_spec *spec, int i, int j);

/* Sets SCORES[j] = -INFINITY for every key j in 0..seqlen_k-1 that query I
 * does not see; visible scores are left as they are. Fails on a bad SPEC or
 * I outside 0..seqlen_q-1. */
int fat_online_mask_row(const fat_online_mask_spec *spec, int i, double *scores,
                        char *err, size_t errlen);

#endif
