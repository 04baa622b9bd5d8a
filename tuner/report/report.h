/* SPDX-License-Identifier: MIT */
/* `fatune report`: one self-contained HTML file (inline SVG, no network, no
 * script, no path of the machine that drew it) that shows what a tuning
 * database holds for one GPU: contents; a summary of speed-ups against the
 * peers (external implementations, PyTorch SDPA's backends, that
 * bench/bench_sdpa.py or bench/store_peers.py stored), the default
 * configuration and the materialising baseline; small multiples, one chart
 * per direction, dtype and mask with a series per head dim for fatune's
 * winner and each peer (TFLOP/s against sequence length; decoding shapes in
 * TB/s over the input/output lower bound); a roofline placing each forward
 * winner by its arithmetic intensity under the measured copy bandwidth and
 * the measured peak of the instruction its family issues (mma.sync's;
 * wgmma's on Hopper); and a table of the winners with their verified error. It
 * opens in any browser and prints. */
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
  int charts;    /* <svg> elements: one per chart plus the roofline */
  int winners;   /* rows of the winners table */
  int series;    /* series drawn over all charts: a line per (series key, implementation)
                    of a small multiple, a point set per (instruction, dtype) of the roofline */
} fat_report_counts;

/* Writes the report of GPU_ID in DB to OUT. Returns 0, or -1 with ERR when
 * the database cannot be read. */
int fat_report_write(fat_db *db, sqlite3_int64 gpu_id, FILE *out, fat_report_counts *counts,
                     char *err, size_t errlen);

const char *fat_report_usage(void);
/* `fatune report ARGS` (ARGV[0] is the sub-command's name): writes the file
 * (through a temporary name, renamed when complete) and says so on OUT.
 * Returns 0, 1 (database unreadable, file not written) or 2 (bad usage,
 * message on ERR naming the bad value). */
int fat_report_run(int argc, char **argv, FILE *out, FILE *err);
/* fat_report_run on stdout and stderr: what main() dispatches to. */
int fat_report_main(int argc, char **argv);
#endif
