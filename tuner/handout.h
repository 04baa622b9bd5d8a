/* SPDX-License-Identifier: MIT */
/* The hand-out of a run's problems to its GPUs (handout.c), for --gpu 0,1
 * and --gpu all. The unit handed out is a problem: every variant of one
 * problem is checked and timed on one GPU and its close contenders re-timed
 * there, so that a winner is decided from one GPU's timings under one set
 * of conditions. One queue holds the problems' indices; each lane (a GPU,
 * its worker and the thread that drives it) takes the next one when it is
 * done with the last. Nothing here knows of GPUs or databases: a lane is a
 * function that tunes one problem, which the CPU tests fake.
 *
 * Lane k's first problem is problem k, dealt before any lane's thread runs,
 * so that every GPU starts at once whichever thread the system schedules
 * first (and a GPU is never left idle because another finished the whole
 * queue before its worker came up). After that, which lane tunes which
 * problem is a function of the order in which the lanes finish: a lane
 * that asks gets the oldest problem given back by a lane that dropped out,
 * else the next in tuning order. */
#ifndef FAT_HANDOUT_H
#define FAT_HANDOUT_H
#include <stddef.h>

/* ---- the queue ------------------------------------------------------------
 * Problems 0 .. n - 1, each waiting, handed out or finished. Not locked:
 * fat_handout_run takes its lock around every call. */
typedef struct fat_queue {
  size_t n;                        /* problems 0 .. n - 1 */
  size_t next;                     /* the first never handed out */
  size_t *back;                    /* given back, oldest first: a ring of n */
  size_t back_first, back_count;
} fat_queue;

/* An empty queue of N problems, none handed out. 0, or -1 out of memory. */
int fat_queue_init(fat_queue *q, size_t n);
void fat_queue_free(fat_queue *q);
/* The problem a lane asking now gets, into *PROBLEM: the oldest given
 * back, else the next never handed out. 0, or -1 when none is waiting. */
int fat_queue_take(fat_queue *q, size_t *problem);
/* PROBLEM, handed out and not finished, waits again (before the problems
 * never handed out). */
void fat_queue_give_back(fat_queue *q, size_t problem);
/* How many problems wait to be handed out. */
size_t fat_queue_waiting(const fat_queue *q);

/* ---- the lanes ------------------------------------------------------------ */

/* What a lane's tuning of one problem came to. */
typedef enum fat_lane_result {
  FAT_LANE_DONE = 0,     /* the problem is finished */
  FAT_LANE_STOPPED = 1,  /* stopped before it was finished (^C, SIGTERM, another lane's
                            failure): handed to no one else -- a rerun finishes it */
  FAT_LANE_LOST = 2,     /* this lane cannot go on (its worker would not restart): the
                            problem goes back on the queue and the lane drops out */
  FAT_LANE_FAILED = -1,  /* the run cannot go on (the database): every lane stops after
                            the variant in hand */
} fat_lane_result;

typedef struct fat_handout fat_handout;

/* Tunes problem PROBLEM (an index into the caller's list) on lane LANE.
 * Between variants it asks fat_handout_stopping(H) and returns
 * FAT_LANE_STOPPED once that says 1. Called from the lane's own thread
 * when there are several lanes: it must be safe to call for two lanes at
 * once. */
typedef fat_lane_result (*fat_lane_fn)(void *user, fat_handout *h, int lane, size_t problem);

/* 1 once the hand-out is ending: STOP said so (an interrupt, a failure
 * elsewhere), or a lane stopped or failed. Safe to call from any lane. */
int fat_handout_stopping(fat_handout *h);

/* What a hand-out came to. */
typedef struct fat_handout_stats {
  size_t done;        /* problems finished */
  size_t left;        /* problems not finished: never handed out, given back, or stopped */
  size_t given_back;  /* problems that went back on the queue when their lane dropped out */
  int lanes_lost;     /* lanes that dropped out */
  int stopped;        /* STOP said so, or a lane stopped */
  int failed;         /* a lane said the run cannot go on */
} fat_handout_stats;

/* Says 1 when the hand-out is to end (^C, SIGTERM, or a failure elsewhere
 * in the run); called with the USER given to fat_handout_run. */
typedef int (*fat_stop_fn)(void *user);

/* Hands problems 0 .. N_PROBLEMS - 1 out to N_LANES lanes, calling TUNE
 * (USER, ...) for each, until every problem is finished, STOP (USER) says to
 * stop (asked before each hand-out; NULL: never), a lane stops or fails,
 * or every lane has dropped out. One lane runs in the calling thread, in
 * tuning order; several run on a thread each while the caller waits for
 * them all. A lane that finds the queue empty waits while another is still
 * tuning: that one's problem may come back to it. Returns 0 with *STATS,
 * or -1 with ERR when a thread or the queue could not be made (the lanes
 * already running are stopped and waited for first: *STATS says what they
 * did). */
int fat_handout_run(size_t n_problems, int n_lanes, fat_lane_fn tune, void *user,
                    fat_stop_fn stop, fat_handout_stats *stats, char *err, size_t errlen);
#endif
