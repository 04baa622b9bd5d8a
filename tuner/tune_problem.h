/* SPDX-License-Identifier: MIT */
/* The tune stage (tune_problem.c): each problem tuned on one GPU -- every
 * variant that runs on it checked and timed, what the database holds
 * already resumed, its close contenders re-timed together on that GPU, its
 * winner decided (fat_db_decide_winner, the one rule), every result
 * committed as it comes -- and the run's problems handed out to its GPUs
 * one problem at a time (handout.h).
 *
 * A GPU of the run is a lane: the devices row its timings name and a
 * fat_measurer -- the GPU worker in the tuner (fat_worker_measurer), a fake
 * in the CPU tests -- so that everything here but the GPU runs in CI. The
 * lanes of one GPU model share a model: its gpus row (the key its winners
 * go under) and the variants compiled for its architecture; every model
 * tunes every problem, its own problems handed out among its own lanes.
 * With several lanes each is driven from its own thread; one mutex guards
 * the database connection, the counts and the log, and a lane holds it for
 * everything but its measurer's calls. */
#ifndef FAT_TUNE_PROBLEM_H
#define FAT_TUNE_PROBLEM_H
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include "db.h"
#include "job.h"
#include "progress.h"
#include "types.h"
#include "worker.h"

/* How a lane measures, with fat_worker_evaluate's, fat_worker_time_interleaved's
 * and fat_worker_recover's contracts (worker.h); SELF is the worker. */
typedef struct fat_measurer {
  void *self;
  int (*evaluate)(void *self, const fat_variant *v, const fat_build *b,
                  const fat_check_shape *shapes, int n_shapes, const fat_problem *problem,
                  double cutoff_ms, fat_check *checks, fat_timing *timing, int *timed,
                  char *reason, size_t reasonlen);
  int (*time_interleaved)(void *self, const fat_variant *const *v, const fat_build *const *b,
                          int n, const fat_problem *problem, fat_timing *timings, char *reason,
                          size_t reasonlen);
  int (*recover)(void *self, char *err, size_t errlen);
} fat_measurer;

/* The GPU worker W as a lane's measurer. */
fat_measurer fat_worker_measurer(fat_worker *w);

/* One GPU of the run. */
typedef struct fat_lane {
  int gpu;                  /* its CUDA device index (--gpu) */
  fat_measurer m;
  sqlite3_int64 device_id;  /* its own devices row, which its timings name (0: none) */
  /* Its share of the run, for the log and the tests. */
  size_t problems;          /* problems it tuned to the end */
  size_t checked, timed, failed, resumed;  /* (variant, problem) pairs, as fat_progress's */
  int lost;                 /* dropped out: its worker would not restart */
} fat_lane;

/* One GPU model of the run: the lanes that share a gpus row. */
typedef struct fat_model {
  const char *name;                  /* the GPU's name, for the log */
  sqlite3_int64 gpu_id;              /* its gpus row: the key its winners go under */
  const fat_variant *variants;       /* those of its architecture */
  const fat_build *builds;           /* variant i's build; those not ok run nowhere */
  const unsigned char *built;        /* with a compile beside the stage: variant i's build is
                                        final once built[i] (written and read under the
                                        compile's lock); NULL: every build is */
  const sqlite3_int64 *variant_ids;  /* variant i's row */
  size_t n_variants;
  fat_lane *lanes;
  int n_lanes;
  /* Filled by fat_tuning_run. */
  sqlite3_int64 *problem_ids;        /* room for every problem: those tuned to the end on this
                                        model, in the order they ended */
  size_t n_done;
  int all_lost;                      /* every lane dropped out before the problems were done */
} fat_model;

/* The compile running beside the stage (tune.c), so that the GPU checks
 * the first variants while NVRTC makes the rest: the stage takes LOCK, the
 * one the compile stores each build and sets fat_model.built under, for
 * everything but its measurers' calls (the database connection is one), and
 * a lane that meets a build still to come waits on CHANGED. */
typedef struct fat_build_feed {
  pthread_mutex_t *lock;
  pthread_cond_t *changed;  /* broadcast under LOCK after each build and at the compile's end */
  const int *ended;         /* under LOCK: 0 while it runs, 1 when it ended (every build made, or
                               ^C), -1 when it failed (said on the log): a build not made then
                               never will be */
} fat_build_feed;

/* What the tune stage works on; the caller fills it and keeps it alive. */
typedef struct fat_tuning {
  fat_db *db;
  FILE *log;
  int verbose, quiet;      /* -v, -q */
  int retune;              /* --retune: each problem's results retired first, once per model */
  fat_model *models;
  int n_models;            /* one model of one lane: the problems in order, in the caller's thread */
  fat_progress *progress;  /* the run's counts (the compile's too) and its line */
  const fat_build_feed *compile;  /* NULL: every build is made before the stage */
} fat_tuning;

/* Whether variant V is checked and timed on problem P, given a build: its
 * own key and a family that applies to the shape. */
int fat_tuning_fits(const fat_variant *v, const fat_problem *p);

/* Tunes the N PROBLEMS on every model of T, each model's on its lanes.
 * Each model's problem_ids and n_done say which problems it tuned to the
 * end; *STOPPED = 1 when ^C or SIGTERM stopped the stage (a problem left
 * half-measured gets no winner: a rerun finishes it). A lane whose worker
 * will not restart drops out (fat_lane.lost) and its problem goes back to
 * the other lanes of its model, as the log says; the run goes on. Returns
 * 0, or -1 when the run cannot go on or did not finish (said on the log):
 * the database failed, a worker broke the protocol, or every lane of a
 * model dropped out (that model's all_lost; the other models finish
 * first). */
int fat_tuning_run(fat_tuning *t, const fat_problem *problems, size_t n, int *stopped);
#endif
