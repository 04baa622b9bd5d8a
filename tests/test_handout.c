/* SPDX-License-Identifier: MIT */
/* The hand-out of problems to GPUs (tuner/handout.c) with fake lanes, no
 * GPU: the queue's order as a function of the hand-outs and give-backs
 * alone; one lane tuning in order in the caller's thread; several lanes
 * tuning every problem exactly once; a lane that drops out giving its
 * problem back to the others -- the last one too, to a lane already idle
 * -- and every lane dropping out leaving the problems counted; a failure
 * or a stop ending the hand-out, no problem handed out after it (the
 * other lanes held at their next variant, so that the order of returns is
 * the hand-out's and not the scheduler's). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "handout.h"
#include "check.h"

#define MAX_PROBLEMS 64
#define MAX_CALLS 256
#define NO_LANE (-1)

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = us % 1000000 * 1000};
  nanosleep(&ts, NULL);
}

/* ---- the queue ---- */

static void test_queue_order(void) {
  fat_queue q;
  size_t p = 99;
  REQUIRE(fat_queue_init(&q, 5) == 0);
  CHECK_INT(fat_queue_waiting(&q), 5);
  CHECK_INT(fat_queue_take(&q, &p), 0);
  CHECK_INT(p, 0);
  CHECK_INT(fat_queue_take(&q, &p), 0);
  CHECK_INT(p, 1);
  fat_queue_give_back(&q, 1);
  CHECK_INT(fat_queue_waiting(&q), 4);
  /* A problem given back comes before those never handed out. */
  CHECK_INT(fat_queue_take(&q, &p), 0);
  CHECK_INT(p, 1);
  CHECK_INT(fat_queue_take(&q, &p), 0);
  CHECK_INT(p, 2);
  /* Given back 2, then 0: the oldest first. */
  fat_queue_give_back(&q, 2);
  fat_queue_give_back(&q, 0);
  CHECK_INT(fat_queue_take(&q, &p), 0);
  CHECK_INT(p, 2);
  CHECK_INT(fat_queue_take(&q, &p), 0);
  CHECK_INT(p, 0);
  CHECK_INT(fat_queue_take(&q, &p), 0);
  CHECK_INT(p, 3);
  /* The ring wraps: five given back at once, then taken in that order. */
  CHECK_INT(fat_queue_take(&q, &p), 0);
  CHECK_INT(p, 4);
  CHECK_INT(fat_queue_take(&q, &p), -1);
  CHECK_INT(fat_queue_waiting(&q), 0);
  static const size_t back[] = {3, 0, 4, 1, 2};
  for (int i = 0; i < 5; i++) fat_queue_give_back(&q, back[i]);
  CHECK_INT(fat_queue_waiting(&q), 5);
  for (int i = 0; i < 5; i++) {
    CHECK_INT(fat_queue_take(&q, &p), 0);
    CHECK_INT(p, back[i]);
  }
  CHECK_INT(fat_queue_take(&q, &p), -1);
out:
  fat_queue_free(&q);
}

/* ---- fake lanes ---- */

/* One call of the fake tune function. */
typedef struct call {
  int lane;
  size_t problem;
  fat_lane_result result;
} call;

/* What the fake lanes do and what they saw. */
typedef struct fake {
  pthread_mutex_t lock;
  call calls[MAX_CALLS];  /* in the order they returned */
  int n_calls;
  atomic_int started;     /* calls begun */
  int done_by[MAX_PROBLEMS];  /* the lane that finished each problem, NO_LANE none */
  int done_times[MAX_PROBLEMS];
  int lane_calls[16];
  pthread_t thread_of[16];
  /* the script */
  long sleep_us;          /* each call's duration, varied by problem */
  int lose_lane;          /* a lane that drops out on its first call (NO_LANE none) */
  int lose_problem_once;  /* the first call for this problem drops its lane out, after
                             LOSE_DELAY_US (-1 none) */
  int lose_every;         /* every call drops its lane out */
  int fail_problem;       /* the call for this problem fails the run (-1 none) */
  int stop_after;         /* stop() says 1 once this many calls have begun (0: never) */
  int stop_now;           /* stop() says 1 from the start */
  int polls;              /* "variants" per problem, fat_handout_stopping asked before each */
  int failing;            /* the call for fail_problem has begun: every other call in
                             flight holds until the hand-out ends (under LOCK) */
  int began_after[MAX_CALLS];  /* calls recorded when each call began, by return order */
} fake;

#define HOLD_LIMIT_US 10000000L  /* the most a held call waits for the end (then DONE: a failure) */
#define HOLD_POLL_US 100

#define LOSE_DELAY_US 50000

static fake F;

static void fake_reset(void) {
  memset(&F, 0, sizeof F);
  pthread_mutex_init(&F.lock, NULL);
  atomic_init(&F.started, 0);
  for (int i = 0; i < MAX_PROBLEMS; i++) F.done_by[i] = NO_LANE;
  F.lose_lane = NO_LANE;
  F.lose_problem_once = -1;
  F.fail_problem = -1;
  F.polls = 1;
}

static int fake_stop(void *user) {
  const fake *f = user;
  return f->stop_now || (f->stop_after > 0 && atomic_load(&f->started) >= f->stop_after);
}

static fat_lane_result fake_tune(void *user, fat_handout *h, int lane, size_t problem) {
  fake *f = user;
  fat_lane_result r = FAT_LANE_DONE;
  atomic_fetch_add(&f->started, 1);
  pthread_mutex_lock(&f->lock);
  const int first_of_lane = f->lane_calls[lane]++ == 0;
  const int began_after = f->n_calls;
  f->thread_of[lane] = pthread_self();
  const int lose_this = (int)problem == f->lose_problem_once;
  if (lose_this) f->lose_problem_once = -1;
  const int fails = (int)problem == f->fail_problem;
  if (fails) f->failing = 1;
  pthread_mutex_unlock(&f->lock);
  int held = 0;
  for (int v = 0; v < f->polls && r == FAT_LANE_DONE; v++) {
    if (fat_handout_stopping(h)) r = FAT_LANE_STOPPED;
    else if (f->sleep_us) sleep_us(f->sleep_us + (long)(problem % 7) * f->sleep_us / 3);
    /* Once the failing call has begun, another call goes no further than
     * this variant until the hand-out ends: whether it would have been in
     * its last variant is no longer a matter of timing. */
    pthread_mutex_lock(&f->lock);
    held = !fails && f->failing;
    pthread_mutex_unlock(&f->lock);
    if (held) break;
  }
  for (long waited = 0; held && r == FAT_LANE_DONE && waited < HOLD_LIMIT_US; waited += HOLD_POLL_US)
    if (fat_handout_stopping(h)) r = FAT_LANE_STOPPED;
    else sleep_us(HOLD_POLL_US);
  if (r == FAT_LANE_DONE && fails) r = FAT_LANE_FAILED;
  if (r == FAT_LANE_DONE && (f->lose_every || (lane == f->lose_lane && first_of_lane)))
    r = FAT_LANE_LOST;
  if (r == FAT_LANE_DONE && lose_this) {
    sleep_us(LOSE_DELAY_US); /* long enough for the other lane to find the queue empty */
    r = FAT_LANE_LOST;
  }
  pthread_mutex_lock(&f->lock);
  if (f->n_calls < MAX_CALLS) {
    f->began_after[f->n_calls] = began_after;
    f->calls[f->n_calls++] = (call){lane, problem, r};
  }
  if (r == FAT_LANE_DONE) {
    f->done_by[problem] = lane;
    f->done_times[problem]++;
  }
  pthread_mutex_unlock(&f->lock);
  return r;
}

/* Every one of the N problems was finished exactly once. */
static void check_each_once(size_t n) {
  for (size_t p = 0; p < n; p++) CHECK_WHY(F.done_times[p] == 1, "problem %zu finished %d times", p, F.done_times[p]);
}

/* One lane: every problem in tuning order, in the caller's thread. */
static void test_one_lane_in_order(void) {
  fat_handout_stats st;
  char err[256];
  fake_reset();
  CHECK_INT(fat_handout_run(6, 1, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  CHECK_INT(F.n_calls, 6);
  for (int i = 0; i < F.n_calls && i < 6; i++) CHECK_INT(F.calls[i].problem, i);
  CHECK(pthread_equal(F.thread_of[0], pthread_self()));
  CHECK_INT(st.done, 6);
  CHECK_INT(st.left, 0);
  CHECK_INT(st.given_back, 0);
  CHECK_INT(st.lanes_lost, 0);
  CHECK_INT(st.stopped, 0);
  CHECK_INT(st.failed, 0);
}

/* Four lanes, forty problems of varied length: each finished once, each
 * lane on a thread of its own. */
static void test_every_problem_once(void) {
  fat_handout_stats st;
  char err[256];
  fake_reset();
  F.sleep_us = 300;
  CHECK_INT(fat_handout_run(40, 4, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  check_each_once(40);
  CHECK_INT(F.n_calls, 40);
  CHECK_INT(st.done, 40);
  CHECK_INT(st.left, 0);
  CHECK_INT(st.lanes_lost, 0);
  for (int l = 0; l < 4; l++)
    if (F.lane_calls[l]) CHECK(!pthread_equal(F.thread_of[l], pthread_self()));
}

/* The deal: each lane's first problem is its own index, though lane 0's
 * problems take no time and could all be gone before another lane's thread
 * first runs; a lane past the problems is dealt none and never called. */
static void test_deal(void) {
  fat_handout_stats st;
  char err[256];
  for (int round = 0; round < 20; round++) {
    fake_reset();
    CHECK_INT(fat_handout_run(8, 3, fake_tune, &F, NULL, &st, err, sizeof err), 0);
    check_each_once(8);
    CHECK_INT(st.done, 8);
    for (int l = 0; l < 3; l++) {
      int first = -1;
      for (int i = 0; i < F.n_calls && first < 0; i++)
        if (F.calls[i].lane == l) first = (int)F.calls[i].problem;
      CHECK_WHY(first == l, "round %d: lane %d began with problem %d", round, l, first);
    }
  }
  fake_reset();
  CHECK_INT(fat_handout_run(2, 4, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  CHECK_INT(F.n_calls, 2);
  CHECK_INT(F.lane_calls[2] + F.lane_calls[3], 0);
  CHECK_INT(st.done, 2);
  /* STOP before anything begins: the dealt problems are left, not tuned. */
  fake_reset();
  F.stop_now = 1;
  CHECK_INT(fat_handout_run(6, 3, fake_tune, &F, fake_stop, &st, err, sizeof err), 0);
  CHECK_INT(F.n_calls, 0);
  CHECK_INT(st.left, 6);
  CHECK_INT(st.stopped, 1);
}

/* A lane that drops out on its first problem: that problem goes back and
 * another lane finishes it; the lost lane is never called again. */
static void test_lost_lane_gives_back(void) {
  fat_handout_stats st;
  char err[256];
  fake_reset();
  F.sleep_us = 200;
  F.lose_lane = 1;
  CHECK_INT(fat_handout_run(20, 3, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  check_each_once(20);
  CHECK_INT(F.lane_calls[1], 1);
  size_t lost = MAX_PROBLEMS;
  for (int i = 0; i < F.n_calls; i++)
    if (F.calls[i].result == FAT_LANE_LOST) lost = F.calls[i].problem;
  REQUIRE(lost < 20);
  CHECK(F.done_by[lost] == 0 || F.done_by[lost] == 2);
  CHECK_INT(F.n_calls, 21);
  CHECK_INT(st.done, 20);
  CHECK_INT(st.left, 0);
  CHECK_INT(st.given_back, 1);
  CHECK_INT(st.lanes_lost, 1);
  CHECK_INT(st.failed, 0);
  CHECK_INT(st.stopped, 0);
out:;
}

/* The last problem given back while the other lane has nothing left and
 * waits: it takes it, and nothing is lost. */
static void test_last_problem_to_idle_lane(void) {
  fat_handout_stats st;
  char err[256];
  fake_reset();
  F.lose_problem_once = 1;
  CHECK_INT(fat_handout_run(2, 2, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  check_each_once(2);
  REQUIRE(F.n_calls == 3);
  CHECK_INT(F.calls[1].problem, 1);
  CHECK_INT(F.calls[1].result, FAT_LANE_LOST);
  CHECK_INT(F.calls[2].problem, 1);
  CHECK_INT(F.calls[2].result, FAT_LANE_DONE);
  CHECK(F.calls[2].lane != F.calls[1].lane);
  CHECK_INT(st.done, 2);
  CHECK_INT(st.left, 0);
  CHECK_INT(st.given_back, 1);
  CHECK_INT(st.lanes_lost, 1);
out:;
}

/* Every lane drops out: the hand-out ends with the problems left counted. */
static void test_every_lane_lost(void) {
  fat_handout_stats st;
  char err[256];
  fake_reset();
  F.lose_every = 1;
  CHECK_INT(fat_handout_run(5, 2, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  CHECK_INT(F.n_calls, 2);
  CHECK_INT(st.done, 0);
  CHECK_INT(st.left, 5);
  CHECK_INT(st.given_back, 2);
  CHECK_INT(st.lanes_lost, 2);
  CHECK_INT(st.failed, 0);
  CHECK_INT(st.stopped, 0);
  /* One lane, as the single-GPU run has: the same. */
  fake_reset();
  F.lose_every = 1;
  CHECK_INT(fat_handout_run(5, 1, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  CHECK_INT(F.n_calls, 1);
  CHECK_INT(st.done, 0);
  CHECK_INT(st.left, 5);
  CHECK_INT(st.lanes_lost, 1);
}

/* A failing lane ends the hand-out: the others stop at their next variant
 * (held there once the failing call has begun, so that none can be in its
 * last) and no problem is handed out after the failure. */
static void test_failure_stops_every_lane(void) {
  fat_handout_stats st;
  char err[256];
  fake_reset();
  F.sleep_us = 500;
  F.polls = 8;
  F.fail_problem = 5;
  CHECK_INT(fat_handout_run(30, 3, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  CHECK_INT(st.failed, 1);
  CHECK_INT(st.stopped, 0);
  int failed_at = -1, stopped = 0, done = 0;
  for (int i = 0; i < F.n_calls; i++) {
    if (F.calls[i].result == FAT_LANE_FAILED) failed_at = i;
    stopped += F.calls[i].result == FAT_LANE_STOPPED;
    done += F.calls[i].result == FAT_LANE_DONE;
  }
  REQUIRE(failed_at >= 0);
  /* Only the two other lanes returned after it, each stopped; none began
   * after it. */
  CHECK(F.n_calls - 1 - failed_at <= 2);
  for (int i = failed_at + 1; i < F.n_calls; i++) {
    CHECK_INT(F.calls[i].result, FAT_LANE_STOPPED);
    CHECK(F.began_after[i] <= failed_at);
  }
  CHECK_INT(atomic_load(&F.started), F.n_calls);
  CHECK_INT(stopped + done + 1, F.n_calls);
  CHECK_INT(st.done, done);
  CHECK_INT(st.left, 30 - st.done);
out:;
}

/* STOP (^C) seen when the third problem begins: one lane stops there. */
static void test_stop(void) {
  fat_handout_stats st;
  char err[256];
  fake_reset();
  F.stop_after = 3;
  CHECK_INT(fat_handout_run(10, 1, fake_tune, &F, fake_stop, &st, err, sizeof err), 0);
  REQUIRE(F.n_calls == 3);
  CHECK_INT(F.calls[2].result, FAT_LANE_STOPPED);
  CHECK_INT(st.done, 2);
  CHECK_INT(st.left, 8);
  CHECK_INT(st.stopped, 1);
  CHECK_INT(st.failed, 0);
  /* Three lanes: no call begins once it is seen. */
  fake_reset();
  F.sleep_us = 300;
  F.polls = 4;
  F.stop_after = 5;
  CHECK_INT(fat_handout_run(40, 3, fake_tune, &F, fake_stop, &st, err, sizeof err), 0);
  CHECK(atomic_load(&F.started) <= 5 + 2);
  CHECK_INT(st.stopped, 1);
  CHECK(st.done < 40);
  CHECK_INT(st.left, 40 - st.done);
out:;
}

static void test_refusals(void) {
  fat_handout_stats st;
  char err[256];
  fake_reset();
  CHECK_INT(fat_handout_run(3, 0, fake_tune, &F, NULL, &st, err, sizeof err), -1);
  CHECK_STR(err, "0 lanes to hand problems to (at least 1)");
  CHECK_INT(F.n_calls, 0);
  /* No problems: nothing called, nothing left. */
  CHECK_INT(fat_handout_run(0, 2, fake_tune, &F, NULL, &st, err, sizeof err), 0);
  CHECK_INT(F.n_calls, 0);
  CHECK_INT(st.done, 0);
  CHECK_INT(st.left, 0);
}

int main(void) {
  test_queue_order();
  test_one_lane_in_order();
  test_every_problem_once();
  test_deal();
  test_lost_lane_gives_back();
  test_last_problem_to_idle_lane();
  test_every_lane_lost();
  test_failure_stops_every_lane();
  test_stop();
  test_refusals();
  return check_summary("test_handout");
}
