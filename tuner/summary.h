/* SPDX-License-Identifier: MIT */
/* The summary of one tuning run, for people and for CI: the counts of what
 * was compiled, checked, timed and failed, the wall time of each stage, and
 * the winners of the run's problems -- the rows of the table the run prints
 * at its end (fat_db_summary's), written by `--json FILE` as one JSON
 * object. The writer is separate from the pipeline so that a test can give
 * it a fixture database's rows. */
#ifndef FAT_SUMMARY_H
#define FAT_SUMMARY_H
#include <stddef.h>
#include <stdio.h>
#include "db.h"
#include "job.h"
#include "types.h"

/* The format of the JSON, its "format" field: raised when a field changes
 * meaning or goes away (a new field does not raise it). */
#define FAT_SUMMARY_FORMAT 1

/* The stages of a run, in order, by the names the JSON gives them. */
typedef enum fat_stage {
  FAT_STAGE_GENERATE = 0,  /* the generator: the query's variants */
  FAT_STAGE_COMPILE,       /* NVRTC, and the build cache */
  FAT_STAGE_CEILINGS,      /* the GPU's ceilings, read or measured */
  FAT_STAGE_TUNE,          /* checking, timing and choosing every problem's winner */
  FAT_STAGE_COUNT
} fat_stage;
const char *fat_stage_name(fat_stage s);  /* "generate", "compile", ... */

/* One GPU of a run of several (--gpu 0,1, --gpu all), as the JSON lists it. */
typedef struct fat_summary_device {
  int index;                 /* its CUDA device index */
  const fat_gpu_info *gpu;
} fat_summary_device;

/* What one run did. Seconds are wall time; a stage the run did not reach
 * has a negative time (written as null). */
typedef struct fat_run_summary {
  int status;                       /* the run's exit status (options.h, interrupt.h) */
  const char *db_path;              /* --db */
  const char *arch;                 /* the architecture compiled for (the first GPU's) */
  const fat_gpu_info *gpu;          /* NULL when there is no GPU; the first model's */
  const char *no_gpu;               /* why there is none; "" or NULL with one */
  int shard_index, shard_count;     /* --shard K/N; 1/1 without */
  size_t problems;                  /* the run's problems (this shard's) */
  size_t problems_done;             /* of them, tuned to the end */
  size_t variants;                  /* generated for the query */
  size_t compiled, cached, compile_failed;  /* compiled now, from the cache, failed (both) */
  size_t checked, timed, check_failed, resumed;  /* (variant, problem) pairs */
  double stage_s[FAT_STAGE_COUNT];
  double total_s;
  /* Where the tune stage's time went, summed over the GPUs (written as
   * "tune_seconds" when TUNE_MEASURED): the workers' phases, the rest of
   * their jobs' wall time (MESSAGES_S: the messages, the marshalling and
   * what the phases leave out) and the waits for builds still compiling. */
  int tune_measured;
  double tune_phase_s[FAT_PHASE_COUNT];
  double tune_messages_s, tune_build_wait_s;
  /* A run of several GPUs: each of them, written as "devices" (nothing
   * with one); with several models, ROW_GPUS[k] the GPU of winner row k,
   * written as its "gpu" (NULL: none written). */
  const fat_summary_device *devices;
  size_t n_devices;
  const char *const *row_gpus;
} fat_run_summary;

/* The "% peak" cell of the end-of-run table for ROW: its TFLOP/s over
 * PEAKS[its family's instruction][its dtype] (FLOP/s, 0 where not measured:
 * the mma.sync peak for mma80's winners, the wgmma peak for ws90's) and
 * that instruction's name, "87% wgmma"; "-" when the peak is not measured
 * or the family's instruction is unknown. */
void fat_summary_peak_cell(const fat_db_summary_row *row,
                           const double peaks[FAT_MATRIX_OP_COUNT][FAT_PEAK_DTYPES], char *out, size_t cap);

/* "done", "failed", "usage", "no_gpu", "interrupted" (SIGINT) or
 * "terminated" (SIGTERM): the JSON's "outcome" for exit status STATUS. */
const char *fat_summary_outcome(int status);

/* Writes S and the N winners ROWS (fat_db_summary's rows of the run's
 * problems, in its order, model after model) to F as one JSON object, keys in a fixed order,
 * numbers in their shortest form that reads back to the same double
 * (NaN and infinities as null). 0, or -1 when F could not be written. */
int fat_summary_write_json(FILE *f, const fat_run_summary *s, const fat_db_summary_row *rows,
                           size_t n);

/* --json PATH before the run: PATH can be written (its folder exists and
 * takes a new file; PATH is a regular file or absent). 0, or -1 with ERR
 * "cannot write PATH: REASON". */
int fat_summary_check_path(const char *path, char *err, size_t errlen);
/* Writes the JSON to PATH through a temporary file in its folder renamed
 * over it, so that CI never reads half a summary. 0, or -1 with ERR. */
int fat_summary_save_json(const char *path, const fat_run_summary *s,
                          const fat_db_summary_row *rows, size_t n, char *err, size_t errlen);
#endif
