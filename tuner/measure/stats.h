/* SPDX-License-Identifier: MIT */
/* Summary statistics of repeated timings. Pure functions, no GPU: the
 * worker calls them on event times, tests call them on known arrays. */
#ifndef FAT_STATS_H
#define FAT_STATS_H
#include <stddef.h>

typedef struct fat_stats {
  size_t n;
  double min, max;
  double median;   /* the 50th percentile: mean of the two middle values for even n */
  double p10, p90;
  double mean;
} fat_stats;

/* The P-th percentile (0 <= p <= 100) of SORTED (N >= 1 values, ascending),
 * by linear interpolation between closest ranks: rank p/100 · (n - 1), as
 * numpy.percentile's default does. */
double fat_percentile_sorted(const double *sorted, size_t n, double p);

/* Summarises X (N values, left unchanged). Returns 0, or -1 when N is 0 or
 * a value is NaN (a timing that is not a number means the run is broken). */
int fat_stats_compute(const double *x, size_t n, fat_stats *out);
#endif
