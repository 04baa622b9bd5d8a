/* SPDX-License-Identifier: MIT */
/* The queue of a run's problems and the lanes that take them (handout.h):
 * one lock over the queue and the counts, one condition a lane waits on
 * when the queue is empty but another lane may still give a problem back. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "handout.h"

int fat_queue_init(fat_queue *q, size_t n) {
  memset(q, 0, sizeof *q);
  q->n = n;
  q->back = calloc(n ? n : 1, sizeof *q->back);
  return q->back ? 0 : -1;
}

void fat_queue_free(fat_queue *q) {
  free(q->back);
  memset(q, 0, sizeof *q);
}

int fat_queue_take(fat_queue *q, size_t *problem) {
  if (q->back_count > 0) {
    *problem = q->back[q->back_first];
    q->back_first = (q->back_first + 1) % q->n;
    q->back_count--;
    return 0;
  }
  if (q->next >= q->n) return -1;
  *problem = q->next++;
  return 0;
}

void fat_queue_give_back(fat_queue *q, size_t problem) {
  /* At most n problems are out at once, so the ring never overflows. */
  q->back[(q->back_first + q->back_count) % q->n] = problem;
  q->back_count++;
}

size_t fat_queue_waiting(const fat_queue *q) { return q->back_count + (q->n - q->next); }

struct fat_handout {
  pthread_mutex_t lock;   /* the queue and everything below but ending */
  pthread_cond_t changed; /* a lane finished a problem or dropped out */
  fat_queue q;
  fat_lane_fn tune;
  void *user;
  fat_stop_fn stop;
  atomic_int ending;      /* a lane stopped or failed: no more hand-outs */
  int busy;               /* lanes tuning a problem now, or dealt one not yet begun */
  int n_dealt;            /* lanes 0 .. n_dealt - 1 were dealt problem LANE at the start */
  fat_handout_stats stats;
};

int fat_handout_stopping(fat_handout *h) {
  return atomic_load(&h->ending) || (h->stop && h->stop(h->user));
}

/* One lane: takes problems until none is left (and no other lane could
 * give one back), the hand-out ends, or the lane drops out. */
static void run_lane(fat_handout *h, int lane) {
  pthread_mutex_lock(&h->lock);
  int dealt = lane < h->n_dealt; /* its first problem, counted busy since the deal */
  for (;;) {
    size_t p;
    while (!dealt && !fat_handout_stopping(h) && fat_queue_waiting(&h->q) == 0 && h->busy > 0)
      pthread_cond_wait(&h->changed, &h->lock);
    if (fat_handout_stopping(h)) {
      h->stats.stopped |= !h->stats.failed;
      if (dealt) { /* never begun: it stays unfinished, and no lane waits for it */
        h->busy--;
        pthread_cond_broadcast(&h->changed);
      }
      break;
    }
    if (dealt) {
      p = (size_t)lane;
      dealt = 0;
    } else if (fat_queue_take(&h->q, &p)) {
      break; /* all handed out and no lane busy: finished */
    } else {
      h->busy++;
    }
    pthread_mutex_unlock(&h->lock);
    const fat_lane_result r = h->tune(h->user, h, lane, p);
    pthread_mutex_lock(&h->lock);
    h->busy--;
    int leave = 0;
    switch (r) {
      case FAT_LANE_DONE:
        h->stats.done++;
        break;
      case FAT_LANE_STOPPED:
        h->stats.stopped |= !h->stats.failed; /* after a failure, stopping is its echo */
        atomic_store(&h->ending, 1);
        leave = 1;
        break;
      case FAT_LANE_LOST:
        fat_queue_give_back(&h->q, p);
        h->stats.given_back++;
        h->stats.lanes_lost++;
        leave = 1;
        break;
      default:
        h->stats.failed = 1;
        atomic_store(&h->ending, 1);
        leave = 1;
        break;
    }
    pthread_cond_broadcast(&h->changed);
    if (leave) break;
  }
  pthread_mutex_unlock(&h->lock);
}

typedef struct lane_arg {
  fat_handout *h;
  int lane;
} lane_arg;

static void *lane_thread(void *arg) {
  const lane_arg *a = arg;
  run_lane(a->h, a->lane);
  return NULL;
}

int fat_handout_run(size_t n_problems, int n_lanes, fat_lane_fn tune, void *user,
                    fat_stop_fn stop, fat_handout_stats *stats, char *err, size_t errlen) {
  fat_handout h;
  pthread_t *threads = NULL;
  lane_arg *args = NULL;
  int started = 0, rc = -1;
  memset(&h, 0, sizeof h);
  memset(stats, 0, sizeof *stats);
  if (n_lanes < 1) {
    snprintf(err, errlen, "%d lanes to hand problems to (at least 1)", n_lanes);
    return -1;
  }
  if (fat_queue_init(&h.q, n_problems)) {
    snprintf(err, errlen, "out of memory for a queue of %zu problems", n_problems);
    return -1;
  }
  pthread_mutex_init(&h.lock, NULL);
  pthread_cond_init(&h.changed, NULL);
  atomic_init(&h.ending, 0);
  h.tune = tune;
  h.user = user;
  h.stop = stop;
  /* The deal: lane k's first problem is problem k, so that every GPU starts
   * at once, whichever of the lanes' threads the system runs first. */
  for (size_t p; h.n_dealt < n_lanes && fat_queue_take(&h.q, &p) == 0; h.n_dealt++) h.busy++;
  if (n_lanes == 1) {
    run_lane(&h, 0); /* the single-GPU run: in this thread, as it always was */
    rc = 0;
    goto out;
  }
  threads = calloc((size_t)n_lanes, sizeof *threads);
  args = calloc((size_t)n_lanes, sizeof *args);
  if (!threads || !args) {
    snprintf(err, errlen, "out of memory for %d lanes", n_lanes);
    goto out;
  }
  for (; started < n_lanes; started++) {
    args[started] = (lane_arg){.h = &h, .lane = started};
    int e = pthread_create(&threads[started], NULL, lane_thread, &args[started]);
    if (e) {
      snprintf(err, errlen, "cannot start the thread of GPU lane %d: %s", started, strerror(e));
      atomic_store(&h.ending, 1);
      break;
    }
  }
  if (started < n_lanes) { /* the lanes never started will not begin the problems dealt them */
    pthread_mutex_lock(&h.lock);
    for (int i = started; i < h.n_dealt; i++) h.busy--;
    pthread_cond_broadcast(&h.changed);
    pthread_mutex_unlock(&h.lock);
  }
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  rc = started == n_lanes ? 0 : -1;
out:
  h.stats.left = n_problems - h.stats.done;
  *stats = h.stats;
  free(threads);
  free(args);
  pthread_cond_destroy(&h.changed);
  pthread_mutex_destroy(&h.lock);
  fat_queue_free(&h.q);
  return rc;
}
