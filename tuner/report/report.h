/* SPDX-License-Identifier: MIT */
/* `fatune report`: one self-contained HTML file (inline SVG, no network, no
 * script) that shows what a tuning database holds for one GPU: per problem
 * group (direction, dtype, mask, head dim) TFLOP/s against sequence length
 * for the winner, the default configuration, the materialising baseline and
 * any external implementations (PyTorch SDPA backends) that
 * bench/bench_sdpa.py stored; a roofline placing each winner by its
 * arithmetic intensity over the input/output lower bound; and a table of the
 * winners with their verified error. It opens in any browser and prints. */
#ifndef FAT_REPORT_H
#define FAT_REPORT_H
#include <stddef.h>
#include <stdio.h>
#include "db.h"
#include "family.h"

/* Output file when -o is absent. */
#define FAT_REPORT_DEFAULT_OUTPUT "fatune-report.html"

/* What one report holds, for the caller's message ("wrote ... (3 charts,
 * 12 winners)"). */
typedef struct fat_report_counts {
  int charts;    /* <svg> elements: one per problem group plus the roofline */
  int winners;   /* rows of the winners table */
  int series;    /* series paths drawn over all throughput charts */
} fat_report_counts;

/* Writes the report of GPU_ID in DB to OUT (DB_LABEL names the database in
 * the page). Returns 0, or -1 with ERR when the database cannot be read. */
int fat_report_write(fat_db *db, sqlite3_int64 gpu_id, const char *db_label, FILE *out,
                     fat_report_counts *counts, char *err, size_t errlen);

const char *fat_report_usage(void);
/* `fatune report ARGS` (ARGV[0] is the sub-command's name): writes the file
 * (through a temporary name, renamed when complete) and says so on OUT.
 * Returns 0, 1 (database unreadable, file not written) or 2 (bad usage,
 * message on ERR naming the bad value). */
int fat_report_run(int argc, char **argv, FILE *out, FILE *err);
/* fat_report_run on stdout and stderr: what main() dispatches to. */
int fat_report_main(int argc, char **argv);
#endif
