/* SPDX-License-Identifier: MIT */
/* Percentiles and spread of repeated measurements (see stats.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "stats.h"

#define PERCENT 100.0
#define MEDIAN_PCT 50.0
#define LOW_PCT 10.0
#define HIGH_PCT 90.0

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double fat_percentile_sorted(const double *sorted, size_t n, double p) {
  double rank = p / PERCENT * (double)(n - 1);
  size_t lo = (size_t)floor(rank);
  if (lo >= n - 1) return sorted[n - 1];
  double frac = rank - (double)lo;
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

int fat_stats_compute(const double *x, size_t n, fat_stats *out) {
  int rc = -1;
  double *sorted = NULL, sum = 0;
  memset(out, 0, sizeof *out);
  if (n == 0) goto out;
  for (size_t i = 0; i < n; i++) {
    if (isnan(x[i])) goto out;
    sum += x[i];
  }
  sorted = malloc(n * sizeof *sorted);
  if (!sorted) goto out;
  memcpy(sorted, x, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_double);
  out->n = n;
  out->min = sorted[0];
  out->max = sorted[n - 1];
  out->median = fat_percentile_sorted(sorted, n, MEDIAN_PCT);
  out->p10 = fat_percentile_sorted(sorted, n, LOW_PCT);
  out->p90 = fat_percentile_sorted(sorted, n, HIGH_PCT);
  out->mean = sum / (double)n;
  rc = 0;
out:
  free(sorted);
  return rc;
}
