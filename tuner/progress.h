/* SPDX-License-Identifier: MIT */
/* The tuner's progress line (progress.c): on a terminal only, refreshed in
 * place on stderr a few times a second (the zstd habit), never under -q:
 * the stage, the builds compiled, the (variant, problem) pairs checked and
 * an ETA. The counts are the run's own -- the end-of-run lines and --json
 * read them too --; with several GPUs the lock that guards the database
 * (tune_problem.h) guards them and the line. */
#ifndef FAT_PROGRESS_H
#define FAT_PROGRESS_H
#include <stddef.h>
#include <stdio.h>

typedef struct fat_progress {
  FILE *log;
  int tty;        /* LOG is a terminal: the line is drawn ... */
  int quiet;      /* ... unless -q */
  double last;    /* when it was last drawn (monotonic seconds) */
  char stage[96]; /* "compile sm_90a", a problem's label */
  /* the compile: builds */
  size_t compiled, compile_total, cached, compile_failed;
  /* checking and timing: (variant, problem) pairs */
  size_t evals_done, evals_total, evals_skipped, eval_failed, evals_timed;
  size_t evals_dropped;  /* of those timed, screenings stopped after their first repetition,
                            FAT_DROP_FACTOR behind their problem's best so far */
  double eval_seconds; /* wall time of the evaluations, summed over the GPUs */
  double build_wait_s; /* wall time the GPUs' problems waited for a build, summed likewise */
  int lanes;           /* GPUs measuring at once, which the ETA divides by (0 counts as 1) */
} fat_progress;

/* Monotonic seconds: what the progress line, the stages' wall times and
 * the evaluations are timed by. */
double fat_now_s(void);
/* A line for LOG with every count 0. */
void fat_progress_init(fat_progress *p, FILE *log, int quiet);
/* Draws the line: at once when FORCE, else when it was last drawn a
 * refresh interval ago. */
void fat_progress_show(fat_progress *p, int force);
/* Clears the line, before a line of the log is written over it. */
void fat_progress_end(fat_progress *p);
#endif
