/* SPDX-License-Identifier: MIT */
/* The report module's private header (nothing outside tuner/report/ includes
 * it): what report_data.c reads from the database and report.c draws -- the
 * series, one record per problem and the page's data -- and the one call
 * between them. */
#ifndef FAT_REPORT_INT_H
#define FAT_REPORT_INT_H
#include <stddef.h>
#include "db.h"
#include "family.h"

/* Series of the throughput charts: three of fatune's own, then one per
 * external source found in the database, up to MAX_SERIES in all. */
enum { S_WINNER, S_DEFAULT, S_MATERIALIZE, S_FIRST_EXTERNAL };
#define MAX_SERIES 8

/* One problem with everything measured for it on the report's GPU. */
typedef struct rp_problem {
  sqlite3_int64 id;
  fat_problem p;
  double ms[MAX_SERIES];        /* median per series; NAN: none stored */
  double bench_ms;              /* fatune's own median from the benchmark that timed the
                                   peers (FAT_EXTERNAL_FATUNE_BENCH); NAN: none stored */
  int has_winner;
  fat_db_summary_row summary;   /* valid when has_winner */
  fat_matrix_op matrix_op;      /* the winner's family's instruction, when has_winner */
} rp_problem;

typedef struct rp_data {
  rp_problem *probs;
  size_t n;
  char series[MAX_SERIES][64];  /* display name of each series */
  int n_series;
  int dropped_sources;          /* external sources beyond MAX_SERIES, not drawn */
  double bandwidth;             /* B/s, 0 when not measured */
  double peak[2];               /* mma.sync's FLOP/s by fat_dtype, 0 when not measured */
  char gpu[256];
  char gpu_detail[256];
} rp_data;

/* Fills D with what the report of GPU_ID shows: the GPU, every problem with
 * something measured (in the order the charts read) and its median per
 * series, the winners' summaries, the external sources and the measured
 * ceilings. Returns 0, or -1 with ERR when the database cannot be read; the
 * caller frees D->probs either way. */
int fat_report_load(fat_db *db, sqlite3_int64 gpu_id, rp_data *d, char *err, size_t errlen);
#endif
