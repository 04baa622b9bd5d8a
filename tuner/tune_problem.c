/* SPDX-License-Identifier: MIT */
/* The tune stage (tune_problem.h): check before time, every result stored
 * the moment it is known, only a variant that passed every check can win,
 * and each problem on one GPU from its first variant to its winner. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "family.h"
#include "handout.h"
#include "interrupt.h"
#include "kernel.h"
#include "problems.h"
#include "tune.h"
#include "tune_problem.h"

#define ERRLEN 1024
#define TAG_MAX 32       /* "GPU 1023: " */
#define LABEL_MAX 96     /* a problem's label (fat_problem_label) */

static int worker_evaluate(void *self, const fat_variant *v, const fat_build *b,
                           const fat_check_shape *shapes, int n_shapes, const fat_problem *problem,
                           double cutoff_ms, fat_check *checks, fat_timing *timing, int *timed,
                           char *reason, size_t reasonlen) {
  return fat_worker_evaluate(self, v, b, shapes, n_shapes, problem, cutoff_ms, checks, timing,
                             timed, reason, reasonlen);
}

static int worker_time_interleaved(void *self, const fat_variant *const *v,
                                   const fat_build *const *b, int n, const fat_problem *problem,
                                   fat_timing *timings, char *reason, size_t reasonlen) {
  return fat_worker_time_interleaved(self, v, b, n, problem, timings, reason, reasonlen);
}

static int worker_recover(void *self, char *err, size_t errlen) {
  return fat_worker_recover(self, err, errlen);
}

fat_measurer fat_worker_measurer(fat_worker *w) {
  return (fat_measurer){.self = w, .evaluate = worker_evaluate,
                        .time_interleaved = worker_time_interleaved, .recover = worker_recover};
}

typedef struct stage stage;

/* What the stage keeps of one model's hand-out: the hand-out's user. */
typedef struct model_run {
  stage *s;
  fat_model *m;
  unsigned char *retired;  /* --retune retired problem k's results on this model: a problem
                              handed out again after its lane dropped out is not retired twice */
  size_t *measured;        /* variants checked on problem k by this run, over every lane that
                              had it: a winner is decided again when this is not 0 */
  unsigned char *counted;  /* variant i on problem k counted in the run's figures (row k):
                              a problem handed out again counts what it resumes once */
  unsigned char *pending;  /* variant i's build was still to come when the evaluations were
                              counted: counted as one that builds */
  int alive;               /* its lanes that have not dropped out */
  ssize_t last_winner;     /* the variant that won the problem decided last on this model (-1:
                              none yet): the next problem of its key measures it first */
  fat_handout_stats stats;
  int started;             /* its hand-out ran (fat_handout_run returned 0) */
  char err[ERRLEN];        /* why it did not */
} model_run;

/* One call of fat_tuning_run. */
struct stage {
  fat_tuning *t;
  const fat_problem *problems;
  size_t n;
  int n_lanes;       /* over every model: 1 reads as the single-GPU run always has */
  int alive;         /* lanes of every model that have not dropped out (the ETA's) */
  /* The database connection, every count, the log and the models' arrays:
   * a lane holds it for all but its measurer's calls. The compile's
   * (fat_tuning.compile) when one runs beside the stage, else own_lock. */
  pthread_mutex_t *lock;
  pthread_mutex_t own_lock;
  atomic_int failed; /* a model's hand-out failed: every other model's ends too */
};

/* "GPU 1: " before a lane's lines when the run has several lanes, "" with
 * one (the single-GPU run reads as it always has). */
static const char *tag(const stage *s, const fat_lane *l, char *buf) {
  if (s->n_lanes == 1) return "";
  snprintf(buf, TAG_MAX, "GPU %d: ", l->gpu);
  return buf;
}

/* The tuner's line for a database call that failed: "fatune: WHAT: " and
 * the database's error, after LEAD ("\n" where a variant's row is open on
 * the line, else ""). */
static void db_error(const stage *s, const char *lead, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void db_error(const stage *s, const char *lead, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(s->t->log, "%sfatune: ", lead);
  vfprintf(s->t->log, fmt, ap);
  fprintf(s->t->log, ": %s\n", fat_db_errmsg(s->t->db));
  va_end(ap);
}

/* The materialising baseline's fp32 scores are measured while both sides
 * stay within FAT_MATERIALIZE_MAX_SEQLEN. */
static int baseline_too_long(int seqlen_q, int seqlen_k) {
  return seqlen_q > FAT_MATERIALIZE_MAX_SEQLEN || seqlen_k > FAT_MATERIALIZE_MAX_SEQLEN;
}

int fat_tuning_fits(const fat_variant *v, const fat_problem *p) {
  if (v->direction != p->direction || v->dtype != p->dtype || v->mask != p->mask ||
      v->head_dim != p->head_dim)
    return 0;
  if (!strcmp(v->family, FAT_FAMILY_MATERIALIZE) && baseline_too_long(p->seqlen_q, p->seqlen_k))
    return 0;
  return fat_family_applies(v, p);
}

/* Whether variant I of model M's build is final: always, but while the
 * compile beside the stage has yet to make it. Called with the lock held. */
static int built(const stage *s, const fat_model *m, size_t i) {
  return !s->t->compile || !m->built || m->built[i];
}

/* Waits (the lock held) until variant I of model M's build is final.
 * FAT_LANE_DONE; FAT_LANE_STOPPED when the compile ended without it on ^C
 * or SIGTERM; FAT_LANE_FAILED when it ended on a failure (said by the
 * compile's end). */
static fat_lane_result await_build(stage *s, const fat_model *m, size_t i) {
  const fat_build_feed *c = s->t->compile;
  const double t0 = fat_now_s();
  while (!built(s, m, i) && !*c->ended) pthread_cond_wait(c->changed, s->lock);
  s->t->progress->build_wait_s += fat_now_s() - t0;
  if (built(s, m, i)) return FAT_LANE_DONE;
  return *c->ended < 0 ? FAT_LANE_FAILED : FAT_LANE_STOPPED;
}

static void print_variant_row(stage *s, const fat_lane *l, const fat_variant *v,
                              const fat_problem *p, const char *what) {
  char t[TAG_MAX];
  if (!s->t->verbose) return;
  fat_progress_end(s->t->progress);
  fprintf(s->t->log, "%-52s s%-6d %s%s\n", v->name, p->seqlen_q, tag(s, l, t), what);
}

/* Records a failure that left no per-shape result (a fault, a timeout, a
 * refused job) as one failed check on the first shape. */
static int record_failure(model_run *mr, size_t i, sqlite3_int64 problem_id,
                          const fat_check_shape *sh, const char *reason) {
  fat_check c;
  memset(&c, 0, sizeof c);
  c.batch = sh->batch;
  c.heads = sh->heads;
  c.seqlen_q = sh->seqlen_q;
  c.seqlen_k = sh->seqlen_k;
  c.rel_l2 = c.max_abs = c.lse_max_abs = NAN;
  c.passed = 0;
  snprintf(c.reason, sizeof c.reason, "%.*s", (int)sizeof c.reason - 1, reason);
  if (fat_db_put_check(mr->s->t->db, mr->m->variant_ids[i], mr->m->gpu_id, problem_id, &c)) {
    db_error(mr->s, "", "storing check");
    return -1;
  }
  return 0;
}

/* After a job that did not come to a result: the worker it lost, if any,
 * restarted (the measurer's recover, fat_worker_recover: the one policy).
 * FAT_LANE_DONE when a worker runs; FAT_LANE_LOST (said on the log after
 * LEAD) when none would restart: the lane drops out, and problem P goes
 * back to the other lanes of its model. */
static fat_lane_result keep_worker(model_run *mr, fat_lane *l, const fat_problem *p,
                                   const char *lead) {
  stage *s = mr->s;
  char err[ERRLEN], label[LABEL_MAX];
  pthread_mutex_unlock(s->lock);
  int rc = l->m.recover(l->m.self, err, sizeof err);
  pthread_mutex_lock(s->lock);
  if (!rc) return FAT_LANE_DONE;
  l->lost = 1;
  mr->alive--;
  s->alive--;
  s->t->progress->lanes = s->alive;
  if (s->n_lanes == 1) {
    fprintf(s->t->log, "%sfatune: restarting the GPU worker: %s\n", lead, err);
    return FAT_LANE_LOST;
  }
  fat_problem_label(p, label, sizeof label);
  fprintf(s->t->log, "%sfatune: GPU %d drops out: restarting its worker: %s; %s ", lead, l->gpu,
          err, label);
  if (mr->alive)
    fprintf(s->t->log, "goes back to the other GPUs\n");
  else if (s->t->n_models == 1)
    fprintf(s->t->log, "goes back, but no GPU is left\n");
  else
    fprintf(s->t->log, "goes back, but no %s is left\n", mr->m->name);
  return FAT_LANE_LOST;
}

/* Why variant V's build B is not checked: a forward kernel of Hopper's
 * warpgroup products (wgmma) that keeps anything in local memory -- a
 * stack frame or spills, by ptxas's report -- which no shipped table may
 * hold (tests/test_sass_winners.sh reads their machine code for LDL and
 * STL): a winner that spills would have to be cut from the table by hand
 * after the tune. Empty when it may run. */
static void refusal(const fat_variant *v, const fat_build *b, char *why, size_t cap) {
  const fat_family *f = fat_family_find(v->family, v->direction);
  why[0] = 0;
  if (v->direction != FAT_FWD || !f || f->matrix_op != FAT_MATRIX_WGMMA) return;
  if (b->stack_frame > 0 || b->spill_stores > 0 || b->spill_loads > 0)
    snprintf(why, cap, "refused: local memory (stack frame %d B, spill stores %d B, loads %d B):"
             " a shipped Hopper forward kernel keeps none", b->stack_frame, b->spill_stores,
             b->spill_loads);
}

/* The best medians screened or timed so far on the problem in hand (0:
 * none yet): what a screening's cutoff is FAT_DROP_FACTOR times. */
typedef struct best_so_far {
  double any_ms;  /* of every candidate */
  double det_ms;  /* of the backward's deterministic variants (separate or ordered dQ): one of
                     them is served for deterministic gradients, so each is cut against its
                     own kind's best */
} best_so_far;

/* Whether V is a backward variant whose gradients are deterministic (its
 * dQ mode separate or ordered: fat_dq_deterministic), as
 * FAT_SQL_DQ_DETERMINISTIC reads its parameters. */
static int deterministic(const fat_variant *v) {
  int block_m, block_n;
  fat_dq_mode mode = FAT_DQ_ATOMIC;
  char err[8];
  return v->direction == FAT_BWD &&
         !fat_bwd_params_parse(v->params, &block_m, &block_n, &mode, err, sizeof err) &&
         fat_dq_deterministic(mode);
}

/* Problem PROBLEM_ID's best so far as the database holds it (a resumed
 * problem's): the first of the ranking, and of the deterministic one, that
 * is no drop. */
static int best_stored(model_run *mr, const fat_problem *p, sqlite3_int64 problem_id,
                       best_so_far *best) {
  fat_db_choice c;
  int found = 0;
  memset(best, 0, sizeof *best);
  if (fat_db_best(mr->s->t->db, mr->m->gpu_id, problem_id, &c, &found)) return -1;
  if (found && !fat_db_dropped(&c)) best->any_ms = c.median_ms;
  if (p->direction != FAT_BWD) return 0;
  if (fat_db_best_deterministic(mr->s->t->db, mr->m->gpu_id, problem_id, &c, &found)) return -1;
  if (found && !fat_db_dropped(&c)) best->det_ms = c.median_ms;
  return 0;
}

/* The cutoff of V's screening: FAT_DROP_FACTOR times the best so far of
 * its kind; 0 (none) before there is one, and for the materialising
 * baseline, which is no candidate but a figure the run's table prints. */
static double cutoff_for(const fat_variant *v, const best_so_far *best) {
  if (!strcmp(v->family, FAT_FAMILY_MATERIALIZE)) return 0;
  const double of_kind = deterministic(v) ? best->det_ms : best->any_ms;
  return of_kind > 0 ? FAT_DROP_FACTOR * of_kind : 0;
}

/* A timing of V enters BEST unless it is a drop or the baseline's. */
static void note_best(const fat_variant *v, const fat_timing *t, best_so_far *best) {
  if (t->reps < FAT_SCREEN_REPS || !strcmp(v->family, FAT_FAMILY_MATERIALIZE)) return;
  if (!best->any_ms || t->median_ms < best->any_ms) best->any_ms = t->median_ms;
  if (deterministic(v) && (!best->det_ms || t->median_ms < best->det_ms))
    best->det_ms = t->median_ms;
}

/* Checks and times variant I on problem P on lane L, its screening cut off
 * against BEST (updated by its timing); everything stored. FAT_LANE_DONE,
 * FAT_LANE_LOST (its worker would not restart) or FAT_LANE_FAILED (the
 * database, or the worker broke the protocol). */
static fat_lane_result evaluate(model_run *mr, fat_lane *l, size_t i, const fat_problem *p,
                                sqlite3_int64 problem_id, best_so_far *best) {
  stage *s = mr->s;
  fat_tuning *t = s->t;
  const fat_model *m = mr->m;
  fat_progress *pr = t->progress;
  fat_check_shape shapes[FAT_TUNE_CHECK_SHAPES];
  fat_check checks[FAT_TUNE_CHECK_SHAPES];
  fat_timing timing;
  int timed = 0, n = fat_check_shapes_for(p, shapes);
  char reason[ERRLEN], tg[TAG_MAX];
  const fat_variant *v = &m->variants[i];
  refusal(v, &m->builds[i], reason, sizeof reason);
  if (reason[0]) {  /* a failed check of its own, so that a rerun does not ask again */
    pr->evals_done++;
    pr->eval_failed++;
    l->checked++;
    l->failed++;
    print_variant_row(s, l, v, p, reason);
    return record_failure(mr, i, problem_id, &shapes[0], reason) ? FAT_LANE_FAILED : FAT_LANE_DONE;
  }
  double t0 = fat_now_s();
  const double cutoff_ms = cutoff_for(v, best);
  memset(checks, 0, sizeof checks);
  pthread_mutex_unlock(s->lock);
  int st = l->m.evaluate(l->m.self, v, &m->builds[i], shapes, n, p, cutoff_ms, checks, &timing,
                         &timed, reason, sizeof reason);
  pthread_mutex_lock(s->lock);
  pr->eval_seconds += fat_now_s() - t0;
  pr->evals_done++;
  l->checked++;
  if (st == FAT_WORKER_ERROR) {
    fprintf(t->log, "\nfatune: %sworker: %s\n", tag(s, l, tg), reason);
    return FAT_LANE_FAILED;
  }
  if (st != FAT_WORKER_OK) {
    pr->eval_failed++;
    l->failed++;
    print_variant_row(s, l, v, p, reason);
    if (record_failure(mr, i, problem_id, &shapes[0], reason)) return FAT_LANE_FAILED;
    return keep_worker(mr, l, p, "\n");
  }
  int passed = 1;
  for (int k = 0; k < n; k++) {
    if (fat_db_put_check(t->db, m->variant_ids[i], m->gpu_id, problem_id, &checks[k])) {
      db_error(s, "\n", "storing check");
      return FAT_LANE_FAILED;
    }
    if (!checks[k].passed) {
      if (passed) {
        char what[ERRLEN];
        snprintf(what, sizeof what, "check failed at %dx%dx%d: %s", checks[k].batch,
                 checks[k].heads, checks[k].seqlen_q, checks[k].reason);
        print_variant_row(s, l, v, p, what);
      }
      passed = 0;
    }
  }
  if (!passed) {
    pr->eval_failed++;
    l->failed++;
    return FAT_LANE_DONE;
  }
  if (timed) {
    if (fat_db_put_timing_on(t->db, m->variant_ids[i], m->gpu_id, l->device_id, problem_id,
                             &timing, NULL)) {
      db_error(s, "\n", "storing timing");
      return FAT_LANE_FAILED;
    }
    pr->evals_timed++;
    l->timed++;
    note_best(v, &timing, best);
    const int dropped = timing.reps < FAT_SCREEN_REPS;
    pr->evals_dropped += dropped;
    char what[320];
    double worst = 0;
    for (int k = 0; k < n; k++) worst = fmax(worst, checks[k].rel_l2);
    const int len = snprintf(what, sizeof what, "results match (rel_l2 %.1e)  %8.3f ms  %6.1f TFLOP/s",
                             worst, timing.median_ms, timing.tflops);
    if (dropped && len > 0 && (size_t)len < sizeof what)
      snprintf(what + len, sizeof what - (size_t)len, "  dropped after %d repetition: past %.3f ms,"
               " %gx the best so far", timing.reps, cutoff_ms, FAT_DROP_FACTOR);
    print_variant_row(s, l, v, p, what);
  }
  return FAT_LANE_DONE;
}

static ssize_t variant_index(const fat_model *m, sqlite3_int64 id) {
  for (size_t i = 0; i < m->n_variants; i++)
    if (m->variant_ids[i] == id) return (ssize_t)i;
  return -1;
}

/* Re-times the close contenders (fat_db_contenders: within
 * fat_db_contender_margin of the best by their timings alone, the wider
 * one of a screening) together, interleaved, in full, as one job on lane
 * L -- a lone contender too when it was only screened, and for the
 * backward the deterministic pick with them -- then decides the winner
 * (fat_db_decide_winner, the one rule, which compares them by that job). A
 * winner is decided once: when this run measured nothing of P (MEASURED 0:
 * a rerun, every result resumed) and P has a stored winner, it stands --
 * re-timing the close contenders on every rerun let noise pick another,
 * and the rerun's table then disagreed with the one the cold run printed. */
static fat_lane_result choose_winner(model_run *mr, fat_lane *l, const fat_problem *p,
                                     sqlite3_int64 problem_id, size_t measured) {
  stage *s = mr->s;
  fat_tuning *t = s->t;
  const fat_model *m = mr->m;
  fat_db_choice ranked[FAT_DB_MAX_CONTENDERS];
  size_t n = 0;
  char reason[ERRLEN], tg[TAG_MAX];
  if (!measured) {
    fat_db_choice stored;
    int has = 0;
    if (fat_db_get_winner(t->db, m->gpu_id, problem_id, &stored, &has)) {
      db_error(s, "", "reading the winner");
      return FAT_LANE_FAILED;
    }
    if (has) {
      mr->last_winner = variant_index(m, stored.variant_id);
      return FAT_LANE_DONE;
    }
  }
  if (fat_db_contenders(t->db, m->gpu_id, problem_id, ranked, FAT_DB_MAX_CONTENDERS, &n)) {
    db_error(s, "", "ranking");
    return FAT_LANE_FAILED;
  }
  /* The deterministic backward's variant (the fastest deterministic one)
   * goes into the job too, unless a contender is it: it is served, and
   * exported, by a full timing. */
  if (p->direction == FAT_BWD && n < FAT_DB_MAX_CONTENDERS) {
    fat_db_choice det;
    int has = 0;
    if (fat_db_best_deterministic(t->db, m->gpu_id, problem_id, &det, &has)) {
      db_error(s, "", "ranking");
      return FAT_LANE_FAILED;
    }
    size_t k = 0;
    while (has && k < n && ranked[k].variant_id != det.variant_id) k++;
    if (has && k == n) ranked[n++] = det;
  }
  const fat_variant *vs[FAT_MAX_INTERLEAVED];
  const fat_build *bs[FAT_MAX_INTERLEAVED];
  sqlite3_int64 ids[FAT_MAX_INTERLEAVED];
  int close = 0, screened = 0;
  /* A contender this run has no build of (another family's, say) is not
   * re-timed; the rule compares the others by the job. */
  for (size_t k = 0; k < n && close < FAT_MAX_INTERLEAVED; k++) {
    ssize_t i = variant_index(m, ranked[k].variant_id);
    if (i < 0 || !m->builds[i].ok) continue;
    vs[close] = &m->variants[i];
    bs[close] = &m->builds[i];
    ids[close++] = m->variant_ids[i];
    screened |= ranked[k].reps < FAT_FULL_REPS;
  }
  /* Timed together when there are several to compare, and always where
   * one was only screened: a winner's timing is a full one. */
  if (close >= 2 || (close == 1 && screened)) {
    fat_timing tm[FAT_MAX_INTERLEAVED];
    pthread_mutex_unlock(s->lock);
    int st = l->m.time_interleaved(l->m.self, vs, bs, close, p, tm, reason, sizeof reason);
    pthread_mutex_lock(s->lock);
    if (st == FAT_WORKER_OK) {
      if (fat_db_put_job_timings(t->db, m->gpu_id, l->device_id, problem_id, (size_t)close, ids,
                                 tm, NULL)) {
        db_error(s, "", "storing timing");
        return FAT_LANE_FAILED;
      }
    } else {
      fprintf(t->log, "fatune: %sre-timing close contenders: %s\n", tag(s, l, tg), reason);
      fat_lane_result kept = keep_worker(mr, l, p, "");
      if (kept != FAT_LANE_DONE) return kept;
      if (screened) {  /* no winner by a screening: the rerun times them in full again */
        char label[LABEL_MAX];
        fat_problem_label(p, label, sizeof label);
        fprintf(t->log, "fatune: %sno winner for %s yet: its screened contenders were not timed"
                " in full; a rerun times them again\n", tag(s, l, tg), label);
        return FAT_LANE_DONE;
      }
    }
  }
  fat_db_choice best;
  int found = 0;
  if (fat_db_decide_winner(t->db, m->gpu_id, problem_id, &best, &found, NULL)) {
    db_error(s, "", "choosing the winner");
    return FAT_LANE_FAILED;
  }
  if (!found) {
    char label[LABEL_MAX];
    fat_problem_label(p, label, sizeof label);
    fprintf(t->log, "fatune: %sno variant passed for %s\n", tag(s, l, tg), label);
  } else {
    mr->last_winner = variant_index(m, best.variant_id);
  }
  return FAT_LANE_DONE;
}

/* The variant of problem P measured first, so that its problem's best so
 * far is a good one from the start and more of the slow variants stop at
 * their cutoff: the winner decided last on this model where it runs on P
 * (the last problem of P's key, as a rule), else P's default variant where
 * its build is made already (waiting for it would idle the GPU); -1: none,
 * the generator's order. Only the order changes: every variant is still
 * measured, and only a measurement drops one. Called with the lock held. */
static ssize_t lead_variant(const model_run *mr, const fat_problem *p) {
  const fat_model *m = mr->m;
  const ssize_t w = mr->last_winner;
  if (w >= 0 && m->builds[w].ok && fat_tuning_fits(&m->variants[w], p)) return w;
  for (size_t i = 0; i < m->n_variants; i++)
    if (m->variants[i].is_default && fat_tuning_fits(&m->variants[i], p) && built(mr->s, m, i) &&
        m->builds[i].ok)
      return (ssize_t)i;
  return -1;
}

/* Stores problem K, checks and times every variant of its model that runs
 * on it on lane L -- resuming what the database already holds -- and
 * chooses its winner. FAT_LANE_STOPPED when the hand-out ends before K is
 * finished (a problem left half-measured gets no winner: resume finishes
 * it). Called with the lock held. */
static fat_lane_result tune_problem(model_run *mr, fat_handout *h, fat_lane *l, size_t k) {
  stage *s = mr->s;
  fat_tuning *t = s->t;
  fat_model *m = mr->m;
  fat_progress *pr = t->progress;
  const fat_problem *p = &s->problems[k];
  sqlite3_int64 pid;
  char tg[TAG_MAX], label[LABEL_MAX];
  if (fat_db_put_problem(t->db, p, &pid)) {
    db_error(s, "", "storing problem");
    return FAT_LANE_FAILED;
  }
  if (t->retune && !mr->retired[k]) {
    if (fat_db_forget(t->db, m->gpu_id, pid, NULL)) {
      db_error(s, "", "--retune");
      return FAT_LANE_FAILED;
    }
    mr->retired[k] = 1;
  }
  if (fat_handout_stopping(h)) return FAT_LANE_STOPPED;
  fat_problem_label(p, label, sizeof label);
  const int tagged = snprintf(pr->stage, sizeof pr->stage, "%s", tag(s, l, tg));
  fat_problem_label(p, pr->stage + tagged, sizeof pr->stage - (size_t)tagged);
  if (!pr->tty && !t->quiet) fprintf(t->log, "fatune: %stuning %s\n", tag(s, l, tg), label);
  best_so_far best = {0};
  int best_read = 0;  /* read before the first variant measured: a rerun reads nothing */
  const ssize_t lead = lead_variant(mr, p);
  for (size_t j = 0; j < m->n_variants; j++) {
    /* LEAD first, then the others in the generator's order. */
    const size_t i = lead < 0 ? j : j == 0 ? (size_t)lead : j - 1 + (j - 1 >= (size_t)lead);
    if (!fat_tuning_fits(&m->variants[i], p)) continue;
    if (!built(s, m, i)) {
      fat_lane_result waited = await_build(s, m, i);
      if (waited != FAT_LANE_DONE) return waited;
    }
    if (!m->builds[i].ok) {
      if (mr->pending[i]) pr->evals_total--; /* counted as a build to come, which failed */
      continue;
    }
    int checked = 0, passed = 0, timed = 0;
    if (fat_db_has_result(t->db, m->variant_ids[i], m->gpu_id, pid, &checked, &passed, &timed)) {
      db_error(s, "", "reading results");
      return FAT_LANE_FAILED;
    }
    unsigned char *counted = &mr->counted[k * m->n_variants + i];
    if (checked && (!passed || timed)) {
      if (!*counted) {
        pr->evals_skipped++;  /* measured before, same source hash */
        l->resumed++;
        *counted = 1;
      }
      fat_progress_show(pr, 0);
      continue;
    }
    if (fat_handout_stopping(h)) return FAT_LANE_STOPPED;
    if (!best_read && best_stored(mr, p, pid, &best)) {
      db_error(s, "", "ranking");
      return FAT_LANE_FAILED;
    }
    best_read = 1;
    *counted = 1;
    fat_lane_result rc = evaluate(mr, l, i, p, pid, &best);
    if (rc != FAT_LANE_DONE) return rc;
    mr->measured[k]++;
    fat_progress_show(pr, 0);
  }
  fat_lane_result rc = choose_winner(mr, l, p, pid, mr->measured[k]);
  if (rc == FAT_LANE_DONE) {
    m->problem_ids[m->n_done++] = pid;
    l->problems++;
  }
  return rc;
}

static fat_lane_result tune_on_lane(void *user, fat_handout *h, int lane, size_t k) {
  model_run *mr = user;
  pthread_mutex_lock(mr->s->lock);
  fat_lane_result rc = tune_problem(mr, h, &mr->m->lanes[lane], k);
  pthread_mutex_unlock(mr->s->lock);
  return rc;
}

/* The hand-out ends on ^C or SIGTERM, and when another model's failed. */
static int stage_stopping(void *user) {
  const model_run *mr = user;
  return fat_interrupted() || atomic_load(&mr->s->failed);
}

/* One model's hand-out of every problem to its lanes. */
static void run_model(model_run *mr) {
  mr->started = !fat_handout_run(mr->s->n, mr->m->n_lanes, tune_on_lane, mr, stage_stopping,
                                 &mr->stats, mr->err, sizeof mr->err);
  if (!mr->started || mr->stats.failed) atomic_store(&mr->s->failed, 1);
}

static void *model_thread(void *arg) {
  run_model(arg);
  return NULL;
}

int fat_tuning_run(fat_tuning *t, const fat_problem *problems, size_t n, int *stopped) {
  stage s = {.t = t, .problems = problems, .n = n};
  model_run *runs = calloc((size_t)(t->n_models > 0 ? t->n_models : 1), sizeof *runs);
  pthread_t *threads = calloc((size_t)(t->n_models > 0 ? t->n_models : 1), sizeof *threads);
  int rc = -1, threads_started = 0;
  *stopped = 0;
  atomic_init(&s.failed, 0);
  pthread_mutex_init(&s.own_lock, NULL);
  s.lock = t->compile ? t->compile->lock : &s.own_lock;
  if (!runs || !threads) {
    fprintf(t->log, "fatune: out of memory for %d GPU models\n", t->n_models);
    goto out;
  }
  for (int j = 0; j < t->n_models; j++) {
    model_run *mr = &runs[j];
    mr->s = &s;
    mr->m = &t->models[j];
    mr->last_winner = -1;
    mr->m->n_done = 0;
    mr->m->all_lost = 0;
    mr->alive = mr->m->n_lanes;
    s.n_lanes += mr->m->n_lanes;
    mr->retired = calloc(n ? n : 1, sizeof *mr->retired);
    mr->measured = calloc(n ? n : 1, sizeof *mr->measured);
    mr->counted = calloc(n * mr->m->n_variants + 1, 1);
    mr->pending = calloc(mr->m->n_variants + 1, 1);
    if (!mr->retired || !mr->measured || !mr->counted || !mr->pending) {
      fprintf(t->log, "fatune: out of memory for %zu problems\n", n);
      goto out;
    }
    /* Count the evaluations first, for the ETA: a build still to come as
     * one that will build. */
    pthread_mutex_lock(s.lock);
    for (size_t i = 0; i < mr->m->n_variants; i++) mr->pending[i] = !built(&s, mr->m, i);
    for (size_t k = 0; k < n; k++)
      for (size_t i = 0; i < mr->m->n_variants; i++)
        t->progress->evals_total += fat_tuning_fits(&mr->m->variants[i], &problems[k]) &&
                                    (mr->pending[i] || mr->m->builds[i].ok);
    pthread_mutex_unlock(s.lock);
  }
  s.alive = s.n_lanes;
  t->progress->lanes = s.n_lanes;

  if (t->n_models == 1) {
    run_model(&runs[0]); /* one lane runs in this thread, as the single-GPU run always did */
  } else {
    /* Each model its own hand-out, all at once; the lock is the stage's. */
    for (; threads_started < t->n_models; threads_started++)
      if (pthread_create(&threads[threads_started], NULL, model_thread, &runs[threads_started])) {
        atomic_store(&s.failed, 1);  /* the models already running stop after their variant */
        pthread_mutex_lock(s.lock);
        fprintf(t->log, "fatune: cannot start the thread of %s\n", runs[threads_started].m->name);
        pthread_mutex_unlock(s.lock);
        break;
      }
    for (int j = 0; j < threads_started; j++) pthread_join(threads[j], NULL);
  }
  int failed = threads_started < t->n_models && t->n_models > 1, any_lost = 0;
  for (int j = 0; j < t->n_models; j++) {
    model_run *mr = &runs[j];
    if (!mr->started && mr->err[0]) fprintf(t->log, "fatune: %s\n", mr->err);
    failed |= !mr->started || mr->stats.failed;
    *stopped |= mr->stats.stopped && !mr->stats.failed;
    if (mr->started && !mr->stats.failed && mr->stats.lanes_lost == mr->m->n_lanes &&
        mr->stats.left > 0) {
      mr->m->all_lost = 1;
      any_lost = 1;
      if (s.n_lanes == 1) continue; /* said by the lane, as the single-GPU run always did */
      if (t->n_models == 1)
        fprintf(t->log, "fatune: every GPU has dropped out: %zu of %zu problems not tuned\n",
                mr->stats.left, n);
      else
        fprintf(t->log, "fatune: every %s has dropped out: %zu of %zu problems not tuned on it\n",
                mr->m->name, mr->stats.left, n);
    }
  }
  if (!failed && !any_lost) {
    pthread_mutex_lock(s.lock);  /* the compile beside the stage shows it too */
    fat_progress_end(t->progress);
    pthread_mutex_unlock(s.lock);
    rc = 0;
  }
  if (failed) *stopped = 0; /* the failure is the run's end; stopping was its echo */
out:
  if (runs)
    for (int j = 0; j < t->n_models; j++) {
      free(runs[j].retired);
      free(runs[j].measured);
      free(runs[j].counted);
      free(runs[j].pending);
    }
  free(runs);
  free(threads);
  pthread_mutex_destroy(&s.own_lock);
  return rc;
}
