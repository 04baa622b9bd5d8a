/* SPDX-License-Identifier: MIT */
/* The tuning pipeline (tune.h): the one place that strings the generator,
 * the compiler, the GPU worker and the database together. Order matters:
 * the worker is forked before any compile thread exists, every result is
 * committed the moment it is known, a variant is checked before it is timed,
 * and only a variant that passed every check can win. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "compile.h"
#include "db.h"
#include "family.h"
#include "gen.h"
#include "interrupt.h"
#include "nvrtc_api.h"
#include "problems.h"
#include "summary.h"
#include "tune.h"
#include "worker.h"

#define ERRLEN 1024
#define PROGRESS_INTERVAL_S 0.25  /* terminal refresh: a few times a second */
#define BYTES_PER_TB 1e12
#define FLOPS_PER_TFLOP 1e12
#define BYTES_PER_GB 1e9
#define PERCENT 100.0

typedef struct run {
  const fat_options *o;
  FILE *out, *log;
  fat_gen *gen;
  fat_db *db;
  fat_worker *worker;
  fat_gpu_info gpu;
  char no_gpu[ERRLEN];  /* why there is no GPU; "" when there is one */
  char arch[16];
  sqlite3_int64 gpu_id;
  double peak_flops[2];  /* measured mma.sync peak by dtype (FLOP/s); 0 when unknown */
  fat_variant *variants;
  size_t n_variants;
  sqlite3_int64 *variant_ids;
  fat_build *builds;
  char (*keys)[65];
  /* progress */
  int tty;
  double t0, last_progress;
  size_t compiled, compile_total, cached, compile_failed;
  size_t evals_done, evals_total, evals_skipped, eval_failed, evals_timed;
  double eval_seconds;
  double stage_s[FAT_STAGE_COUNT];  /* wall time of each stage; -1 until it ran */
  char stage[96];
  int interrupted;  /* SIGINT or SIGTERM seen: stop after the variant in hand */
  char store_err[ERRLEN + 4096 + 256];  /* why a build could not be stored ("" none): the run stops */
} run;

/* The tuner's line for a database call that failed: "fatune: WHAT: " and
 * the database's error, after LEAD ("\n" where a variant's row is open on
 * the line, else ""). */
static void db_error(const run *r, const char *lead, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void db_error(const run *r, const char *lead, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(r->log, "%sfatune: ", lead);
  vfprintf(r->log, fmt, ap);
  fprintf(r->log, ": %s\n", fat_db_errmsg(r->db));
  va_end(ap);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The materialising baseline's fp32 scores are measured while both sides
 * stay within FAT_MATERIALIZE_MAX_SEQLEN. */
static int baseline_too_long(int seqlen_q, int seqlen_k) {
  return seqlen_q > FAT_MATERIALIZE_MAX_SEQLEN || seqlen_k > FAT_MATERIALIZE_MAX_SEQLEN;
}

static void fmt_duration(double s, char *buf, size_t n) {
  if (s < 0 || !isfinite(s)) snprintf(buf, n, "?");
  else if (s < 60) snprintf(buf, n, "%.0fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s / 60 % 60);
}

/* The progress line: on a terminal only, refreshed in place. */
static void progress(run *r, int force) {
  if (!r->tty || r->o->quiet) return;
  double t = now_s();
  if (!force && t - r->last_progress < PROGRESS_INTERVAL_S) return;
  r->last_progress = t;
  char eta[32] = "";
  size_t left = r->evals_total - r->evals_done - r->evals_skipped;
  size_t measured = r->evals_done;
  if (measured > 0) fmt_duration(r->eval_seconds / measured * left, eta, sizeof eta);
  fprintf(r->log, "\r\033[K[%s] compiled %zu/%zu, checked %zu/%zu (%zu failed, %zu resumed)%s%s",
          r->stage, r->compiled + r->cached, r->compile_total + r->cached,
          r->evals_done + r->evals_skipped, r->evals_total, r->eval_failed, r->evals_skipped,
          *eta ? ", ETA " : "", eta);
  fflush(r->log);
}

static void end_progress(run *r) {
  if (r->tty && !r->o->quiet) fprintf(r->log, "\r\033[K");
}

/* Stores each build as it comes: a build that cannot be committed (a full
 * disk, a read-only file) stops the run -- reporting it compiled would lose
 * it, and every rerun would compile it again. */
static int on_compiled(void *user, size_t done, size_t total, const fat_variant *v,
                       const fat_build *b) {
  run *r = user;
  size_t i = (size_t)(v - r->variants);
  (void)done;
  r->compiled++;
  r->compile_total = total;
  if (!b->ok) r->compile_failed++;
  char nv[32];
  const fat_nvrtc *nvrtc = fat_nvrtc_get(NULL, 0);
  snprintf(nv, sizeof nv, "%d.%d", nvrtc ? nvrtc->major : 0, nvrtc ? nvrtc->minor : 0);
  /* A build a cap stopped says nothing about the source: not cached (the
   * next run tries again). */
  if (!b->capped && fat_db_put_build(r->db, r->variant_ids[i], b, fat_compile_options(), nv)) {
    snprintf(r->store_err, sizeof r->store_err, "storing the build of %s in %s: %s", v->name,
             r->o->db_path, fat_db_errmsg(r->db));
    return -1;
  }
  if (r->o->verbose) {
    end_progress(r);
    if (b->ok)
      fprintf(r->log, "%-52s compiled: %d registers, %d B spilled, %.0f ms\n", v->name,
              b->registers, b->spill_stores, b->compile_ms);
    else
      fprintf(r->log, "%-52s %s\n", v->name, b->capped && b->log ? b->log : "compilation error");
  }
  progress(r, 0);
  return 0;
}

/* Whether the space-separated parameter string PARAMS holds the word WORD. */
static int has_param(const char *params, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = params ? strstr(params, word) : NULL; p; p = strstr(p + 1, word))
    if ((p == params || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
  return 0;
}

/* Appends the variants of the query for DIRECTION to r->variants (the
 * structs move; their strings stay where the generator put them). */
static int generate_direction(run *r, fat_direction direction);

/* Generate the query's variants for r->arch into r->variants, one
 * direction after the other (--direction). */
static int generate(run *r) {
  for (int i = 0; i < r->o->n_directions; i++)
    if (generate_direction(r, r->o->directions[i])) return -1;
  /* A --param set no variant has is a typo or another family's parameter. */
  if (r->o->n_params > 0 && r->n_variants == 0) {
    char list[FAT_MAX_LIST * 66] = "";
    for (int i = 0; i < r->o->n_params; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "", r->o->params[i]);
    fprintf(r->log, "fatune: --param %s: no variant of this query for %s has %s\n", list, r->arch,
            r->o->n_params > 1 ? "all of them" : "it");
    return -1;
  }
  /* A --family that gave no variant is a typo or another query's family. */
  for (int f = 0; f < r->o->n_families; f++) {
    int found = 0;
    for (size_t i = 0; i < r->n_variants && !found; i++) found = !strcmp(r->variants[i].family, r->o->families[f]);
    if (!found) {
      fprintf(r->log, "fatune: --family %s: no variant of that family in this query for %s\n", r->o->families[f],
              r->arch);
      return -1;
    }
  }
  return 0;
}

static int generate_direction(run *r, fat_direction direction) {
  char err[ERRLEN];
  fat_gen_query q = {0};
  fat_variant *more = NULL;
  size_t n_more = 0;
  q.direction = direction;
  q.head_dims = r->o->head_dims;
  q.n_head_dims = r->o->n_head_dims;
  q.dtypes = r->o->dtypes;
  q.n_dtypes = r->o->n_dtypes;
  q.masks = r->o->masks;
  q.n_masks = r->o->n_masks;
  q.arch = r->arch;
  q.smem_limit = r->no_gpu[0] ? 0 : r->gpu.smem_per_block_optin;
  fat_pruned *pruned = NULL;
  size_t n_pruned = 0;
  if (fat_gen_variants(r->gen, &q, &more, &n_more, &pruned, &n_pruned, err, sizeof err)) {
    fprintf(r->log, "fatune: generator: %s\n", err);
    return -1;
  }
  /* --family: the variants of those families only. */
  if (r->o->n_families > 0) {
    size_t kept = 0;
    for (size_t i = 0; i < n_more; i++) {
      int wanted = 0;
      for (int f = 0; f < r->o->n_families && !wanted; f++) wanted = !strcmp(more[i].family, r->o->families[f]);
      if (wanted)
        more[kept++] = more[i];
      else
        fat_variant_free(&more[i]);
    }
    n_more = kept;
  }
  /* --param: the variants whose canonical parameter string ("BLOCK_M=128
   * BLOCK_N=112 ...", space-separated) holds every NAME=VALUE given. */
  if (r->o->n_params > 0) {
    size_t kept = 0;
    for (size_t i = 0; i < n_more; i++) {
      int wanted = 1;
      for (int k = 0; k < r->o->n_params && wanted; k++) wanted = has_param(more[i].params, r->o->params[k]);
      if (wanted)
        more[kept++] = more[i];
      else
        fat_variant_free(&more[i]);
    }
    n_more = kept;
  }
  if (r->n_variants == 0) {
    free(r->variants);
    r->variants = more;
    r->n_variants = n_more;
  } else if (n_more > 0) {
    fat_variant *all = realloc(r->variants, (r->n_variants + n_more) * sizeof *all);
    if (!all) {
      for (size_t i = 0; i < n_more; i++) fat_variant_free(&more[i]);
      free(more);
      fat_pruned_free_all(pruned, n_pruned);
      fprintf(r->log, "fatune: out of memory for %zu variants\n", r->n_variants + n_more);
      return -1;
    }
    memcpy(all + r->n_variants, more, n_more * sizeof *more);
    r->variants = all;
    r->n_variants += n_more;
    free(more);
  } else {
    free(more);
  }
  if (r->o->verbose >= 2)
    for (size_t i = 0; i < n_pruned; i++)
      fprintf(r->log, "%-52s pruned: %s\n", pruned[i].name, pruned[i].reason);
  /* One line per direction; the forward-only run reads as it always has. */
  if (!r->o->quiet && direction == FAT_FWD)
    fprintf(r->log, "fatune: %zu variants for %s (%zu configurations pruned before compiling)\n",
            n_more, r->arch, n_pruned);
  else if (!r->o->quiet)
    fprintf(r->log, "fatune: %zu %s variants for %s (%zu configurations pruned before compiling)\n",
            n_more, fat_direction_name(direction), r->arch, n_pruned);
  fat_pruned_free_all(pruned, n_pruned);
  return 0;
}

/* --shard: keeps the variants of the keys (direction, dtype, mask, head
 * dim) of the shard's N PROBLEMS, so that a shard compiles only what it
 * measures. Says how the query was split. */
static void keep_shard_variants(run *r, const fat_problem *problems, size_t n, size_t n_all) {
  size_t kept = 0;
  for (size_t i = 0; i < r->n_variants; i++) {
    const fat_variant *v = &r->variants[i];
    int wanted = 0;
    for (size_t k = 0; k < n && !wanted; k++)
      wanted = v->direction == problems[k].direction && v->dtype == problems[k].dtype &&
               v->mask == problems[k].mask && v->head_dim == problems[k].head_dim;
    if (wanted)
      r->variants[kept++] = r->variants[i];
    else
      fat_variant_free(&r->variants[i]);
  }
  if (!r->o->quiet)
    fprintf(r->log, "fatune: shard %d/%d: %zu of the query's %zu problems, %zu of its %zu variants\n",
            r->o->shard_index, r->o->shard_count, n, n_all, kept, r->n_variants);
  r->n_variants = kept;
}

/* Store the variants, reuse cached builds, compile the rest in parallel. */
static int compile_all(run *r) {
  char err[ERRLEN];
  size_t n = r->n_variants;
  r->variant_ids = calloc(n ? n : 1, sizeof *r->variant_ids);
  r->builds = calloc(n ? n : 1, sizeof *r->builds);
  r->keys = calloc(n ? n : 1, sizeof *r->keys);
  unsigned char *skip = calloc(n ? n : 1, 1);
  int rc = -1;
  if (!r->variant_ids || !r->builds || !r->keys || !skip) {
    fprintf(r->log, "fatune: out of memory\n");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    if (fat_db_put_variant(r->db, &r->variants[i], &r->variant_ids[i])) {
      db_error(r, "", "storing variant %s", r->variants[i].name);
      goto out;
    }
    if (fat_build_key(r->variants[i].source, r->arch, r->keys[i], err, sizeof err)) {
      fprintf(r->log, "fatune: %s\n", err);
      goto out;
    }
    int found = 0;
    if (fat_db_find_build(r->db, r->keys[i], &r->builds[i], &found)) {
      db_error(r, "", "reading build cache");
      goto out;
    }
    if (found) {
      skip[i] = 1;
      r->cached++;
      if (!r->builds[i].ok) r->compile_failed++;
    }
  }
  snprintf(r->stage, sizeof r->stage, "compile %s", r->arch);
  r->compile_total = n - r->cached;
  progress(r, 1);
  double t = now_s();
  if (fat_compile_all(r->variants, n, r->arch, r->o->jobs, skip, r->builds, on_compiled, r,
                      fat_interrupted, err, sizeof err)) {
    end_progress(r);
    fprintf(r->log, "fatune: %s\n", r->store_err[0] ? r->store_err : err);
    goto out;
  }
  end_progress(r);
  if (!r->o->quiet)
    fprintf(r->log, "fatune: compiled %zu variants in %.1f s on %d threads, %zu from the cache, %zu failed\n",
            r->compiled, now_s() - t, r->o->jobs ? r->o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN),
            r->cached, r->compile_failed);
  rc = 0;
out:
  free(skip);
  return rc;
}

static void print_variant_row(run *r, const fat_variant *v, const fat_problem *p, const char *what) {
  if (!r->o->verbose) return;
  end_progress(r);
  fprintf(r->log, "%-52s s%-6d %s\n", v->name, p->seqlen_q, what);
}

/* Records a failure that left no per-shape result (a fault, a timeout, a
 * refused job) as one failed check on the first shape. */
static int record_failure(run *r, size_t i, sqlite3_int64 problem_id, const fat_check_shape *s,
                          const char *reason) {
  fat_check c;
  memset(&c, 0, sizeof c);
  c.batch = s->batch;
  c.heads = s->heads;
  c.seqlen_q = s->seqlen_q;
  c.seqlen_k = s->seqlen_k;
  c.rel_l2 = c.max_abs = c.lse_max_abs = NAN;
  c.passed = 0;
  snprintf(c.reason, sizeof c.reason, "%.*s", (int)sizeof c.reason - 1, reason);
  if (fat_db_put_check(r->db, r->variant_ids[i], r->gpu_id, problem_id, &c)) {
    db_error(r, "", "storing check");
    return -1;
  }
  return 0;
}

/* After a job that did not come to a result: the worker it lost, if any,
 * restarted (fat_worker_recover, the one policy). Returns 0, or -1 (said on
 * the log after LEAD) when none would restart and the run cannot go on. */
static int keep_worker(run *r, const char *lead) {
  char err[ERRLEN];
  if (!fat_worker_recover(r->worker, err, sizeof err)) return 0;
  fprintf(r->log, "%sfatune: restarting the GPU worker: %s\n", lead, err);
  return -1;
}

/* Checks and times variant I on problem P; everything stored. Returns 0, or
 * -1 when the run cannot go on (database, or the worker will not restart). */
static int evaluate(run *r, size_t i, const fat_problem *p, sqlite3_int64 problem_id) {
  fat_check_shape shapes[FAT_TUNE_CHECK_SHAPES];
  fat_check checks[FAT_TUNE_CHECK_SHAPES];
  fat_timing timing;
  int timed = 0, n = fat_check_shapes_for(p, shapes);
  char reason[ERRLEN];
  const fat_variant *v = &r->variants[i];
  double t = now_s();
  memset(checks, 0, sizeof checks);
  int st = fat_worker_evaluate(r->worker, v, &r->builds[i], shapes, n, p, checks, &timing, &timed,
                               reason, sizeof reason);
  r->eval_seconds += now_s() - t;
  r->evals_done++;
  if (st == FAT_WORKER_ERROR) {
    fprintf(r->log, "\nfatune: worker: %s\n", reason);
    return -1;
  }
  if (st != FAT_WORKER_OK) {
    r->eval_failed++;
    print_variant_row(r, v, p, reason);
    if (record_failure(r, i, problem_id, &shapes[0], reason)) return -1;
    return keep_worker(r, "\n");
  }
  int passed = 1;
  for (int s = 0; s < n; s++) {
    if (fat_db_put_check(r->db, r->variant_ids[i], r->gpu_id, problem_id, &checks[s])) {
      db_error(r, "\n", "storing check");
      return -1;
    }
    if (!checks[s].passed) {
      if (passed) {
        char what[ERRLEN];
        snprintf(what, sizeof what, "check failed at %dx%dx%d: %s", checks[s].batch,
                 checks[s].heads, checks[s].seqlen_q, checks[s].reason);
        print_variant_row(r, v, p, what);
      }
      passed = 0;
    }
  }
  if (!passed) {
    r->eval_failed++;
    return 0;
  }
  if (timed) {
    if (fat_db_put_timing(r->db, r->variant_ids[i], r->gpu_id, problem_id, &timing, NULL)) {
      db_error(r, "\n", "storing timing");
      return -1;
    }
    r->evals_timed++;
    char what[256];
    double worst = 0;
    for (int s = 0; s < n; s++) worst = fmax(worst, checks[s].rel_l2);
    snprintf(what, sizeof what, "results match (rel_l2 %.1e)  %8.3f ms  %6.1f TFLOP/s", worst,
             timing.median_ms, timing.tflops);
    print_variant_row(r, v, p, what);
  }
  return 0;
}

static ssize_t variant_index(run *r, sqlite3_int64 id) {
  for (size_t i = 0; i < r->n_variants; i++)
    if (r->variant_ids[i] == id) return (ssize_t)i;
  return -1;
}

/* Re-times the close contenders (fat_db_contenders: within
 * FAT_CLOSE_CONTENDER of the best by their timings alone) together,
 * interleaved, as one job, then decides the winner (fat_db_decide_winner,
 * the one rule, which compares them by that job). A winner is decided once:
 * when this run measured nothing of P (MEASURED 0: a rerun, every result
 * resumed) and P has a stored winner, it stands -- re-timing the close
 * contenders on every rerun let noise pick another, and the rerun's table
 * then disagreed with the one the cold run printed. */
static int choose_winner(run *r, const fat_problem *p, sqlite3_int64 problem_id, size_t measured) {
  fat_db_choice ranked[FAT_DB_MAX_CONTENDERS];
  size_t n = 0;
  char reason[ERRLEN];
  if (!measured) {
    fat_db_choice stored;
    int has = 0;
    if (fat_db_get_winner(r->db, r->gpu_id, problem_id, &stored, &has)) {
      db_error(r, "", "reading the winner");
      return -1;
    }
    if (has) return 0;
  }
  if (fat_db_contenders(r->db, r->gpu_id, problem_id, ranked, FAT_DB_MAX_CONTENDERS, &n)) {
    db_error(r, "", "ranking");
    return -1;
  }
  const fat_variant *vs[FAT_MAX_INTERLEAVED];
  const fat_build *bs[FAT_MAX_INTERLEAVED];
  sqlite3_int64 ids[FAT_MAX_INTERLEAVED];
  int close = 0;
  /* A contender this run has no build of (another family's, say) is not
   * re-timed; the rule compares the others by the job. */
  for (size_t k = 0; k < n && close < FAT_MAX_INTERLEAVED; k++) {
    ssize_t i = variant_index(r, ranked[k].variant_id);
    if (i < 0 || !r->builds[i].ok) continue;
    vs[close] = &r->variants[i];
    bs[close] = &r->builds[i];
    ids[close++] = r->variant_ids[i];
  }
  if (close >= 2) {
    fat_timing t[FAT_MAX_INTERLEAVED];
    int st = fat_worker_time_interleaved(r->worker, vs, bs, close, p, t, reason, sizeof reason);
    if (st == FAT_WORKER_OK) {
      if (fat_db_put_job_timings(r->db, r->gpu_id, 0, problem_id, (size_t)close, ids, t, NULL)) {
        db_error(r, "", "storing timing");
        return -1;
      }
    } else {
      fprintf(r->log, "fatune: re-timing close contenders: %s\n", reason);
      if (keep_worker(r, "")) return -1;
    }
  }
  fat_db_choice best;
  int found = 0;
  if (fat_db_decide_winner(r->db, r->gpu_id, problem_id, &best, &found, NULL)) {
    db_error(r, "", "choosing the winner");
    return -1;
  }
  if (!found) {
    char label[96];
    fat_problem_label(p, label, sizeof label);
    fprintf(r->log, "fatune: no variant passed for %s\n", label);
  }
  return 0;
}

/* Whether variant I is checked and timed on problem P: its own key, a
 * build, and a family that applies to the shape. */
static int runs_on(const run *r, size_t i, const fat_problem *p) {
  const fat_variant *v = &r->variants[i];
  if (v->direction != p->direction || v->dtype != p->dtype || v->mask != p->mask ||
      v->head_dim != p->head_dim || !r->builds[i].ok)
    return 0;
  if (!strcmp(v->family, FAT_FAMILY_MATERIALIZE) && baseline_too_long(p->seqlen_q, p->seqlen_k))
    return 0;
  return fat_family_applies(v, p);
}

/* Stores problem P (*PID gets its id), checks and times every variant that
 * runs on it -- resuming what the database already holds -- and chooses
 * its winner. Returns 0, 1 when interrupted before P was finished (a
 * problem left half-measured gets no winner: resume finishes it), -1 when
 * the run cannot go on. */
static int tune_problem(run *r, const fat_problem *p, sqlite3_int64 *pid) {
  if (fat_db_put_problem(r->db, p, pid)) {
    db_error(r, "", "storing problem");
    return -1;
  }
  if (r->o->retune && fat_db_forget(r->db, r->gpu_id, *pid, NULL)) {
    db_error(r, "", "--retune");
    return -1;
  }
  if (fat_interrupted()) return 1;
  fat_problem_label(p, r->stage, sizeof r->stage);
  if (!r->tty && !r->o->quiet) fprintf(r->log, "fatune: tuning %s\n", r->stage);
  size_t measured = 0;  /* variants checked (and timed) on P by this run */
  for (size_t i = 0; i < r->n_variants; i++) {
    if (!runs_on(r, i, p)) continue;
    int checked = 0, passed = 0, timed = 0;
    if (fat_db_has_result(r->db, r->variant_ids[i], r->gpu_id, *pid, &checked, &passed, &timed)) {
      db_error(r, "", "reading results");
      return -1;
    }
    if (checked && (!passed || timed)) {
      r->evals_skipped++;  /* measured before, same source hash */
      progress(r, 0);
      continue;
    }
    if (fat_interrupted()) return 1;
    if (evaluate(r, i, p, *pid)) return -1;
    measured++;
    progress(r, 0);
  }
  return choose_winner(r, p, *pid, measured);
}

/* Tunes the N PROBLEMS in order; PROBLEM_IDS gets the ids of those
 * finished, *N_DONE their number. */
static int tune_problems(run *r, const fat_problem *problems, size_t n, sqlite3_int64 *problem_ids,
                         size_t *n_done) {
  *n_done = 0;
  /* Count the evaluations first, for the ETA. */
  for (size_t k = 0; k < n; k++)
    for (size_t i = 0; i < r->n_variants; i++) r->evals_total += runs_on(r, i, &problems[k]);
  for (size_t k = 0; k < n; k++) {
    int rc = tune_problem(r, &problems[k], &problem_ids[*n_done]);
    if (rc < 0) return -1;
    if (rc > 0) {
      r->interrupted = 1;
      break;
    }
    (*n_done)++;
  }
  end_progress(r);
  return 0;
}

/* The winners of the run's N_PROBLEMS PROBLEM_IDS, as the table at its end
 * and --json show them: fat_db_summary's rows of those problems, in its
 * order, into *ROWS (heap) and *N. */
static int run_winners(run *r, const sqlite3_int64 *problem_ids, size_t n_problems,
                       fat_db_summary_row **rows, size_t *n) {
  size_t kept = 0;
  if (fat_db_summary(r->db, r->gpu_id, rows, n)) {
    db_error(r, "", "summary");
    return -1;
  }
  for (size_t k = 0; k < *n; k++) {
    int mine = 0;
    for (size_t j = 0; j < n_problems; j++) mine |= problem_ids[j] == (*rows)[k].problem_id;
    if (mine) (*rows)[kept++] = (*rows)[k];
  }
  *n = kept;
  return 0;
}

static void print_table(run *r, const fat_db_summary_row *rows, size_t n) {
  fprintf(r->out, "\n%s (sm_%d%d, %d SMs, driver %d, NVRTC %d.%d) -- database %s\n", r->gpu.name,
          r->gpu.cc_major, r->gpu.cc_minor, r->gpu.sm_count, r->gpu.driver_version,
          r->gpu.nvrtc_major, r->gpu.nvrtc_minor, r->o->db_path);
  /* x materialise: the winner's speedup over the materialising baseline;
   * peak GB: device memory of the fused pass / of the materialising one,
   * from the shapes (Q, K, V, O, lse; plus the fp32 scores). */
  fprintf(r->out, "%-34s %-40s %9s %8s %6s %8s %9s %9s %13s %15s %7s\n", "problem (batch x heads)",
          "winner", "ms", "TFLOP/s", "%mma", "rel_l2", "x slowest", "x default", "x materialise",
          "peak GB fus/mat", "passed");
  for (size_t k = 0; k < n; k++) {
    const fat_db_summary_row *row = &rows[k];
    const fat_problem *p = &row->problem;
    char prob[128], label[96], def[16] = "-";
    fat_problem_label(p, label, sizeof label);
    snprintf(prob, sizeof prob, "%s (%dx%d)", label, p->batch, p->heads);
    if (isfinite(row->default_ms)) snprintf(def, sizeof def, "%.2fx", row->default_ms / row->median_ms);
    char mat[16] = "-", peak[16] = "-", mem[32];
    if (isfinite(row->materialize_ms))
      snprintf(mat, sizeof mat, "%.2fx", row->materialize_ms / row->median_ms);
    double ceiling = r->peak_flops[p->dtype];
    if (ceiling > 0) snprintf(peak, sizeof peak, "%.0f%%", row->tflops * FLOPS_PER_TFLOP / ceiling * PERCENT);
    if (p->direction == FAT_FWD)  /* the baseline and its workspace are forward-only */
      snprintf(mem, sizeof mem, "%.2f/%.2f", fat_fwd_peak_bytes(p, 0) / BYTES_PER_GB,
               fat_fwd_peak_bytes(p, 1) / BYTES_PER_GB);
    else
      snprintf(mem, sizeof mem, "-");
    const char *short_name = strrchr(row->winner, '.');
    const char *winner = short_name ? short_name + 1 : row->winner;
    fprintf(r->out, "%-34s %-40s %9.3f %8.1f %6s %8.1e %8.2fx %9s %13s %15s %3d/%-3d\n", prob, winner,
            row->median_ms, row->tflops, peak, row->rel_l2, row->slowest_ms / row->median_ms, def,
            mat, mem, row->n_passing, row->n_passing + row->n_failed);
  }
}

/* The GPU's ceilings: read from the database, or measured once by the
 * worker and stored. A failed measurement is reported and the run goes on
 * (the ceilings only add context to the tables). */
static int ensure_ceilings(run *r) {
  enum { COPY, FP16, BF16, N_CEILINGS };
  static const char *const names[N_CEILINGS] = {FAT_CEILING_COPY_BANDWIDTH, FAT_CEILING_PEAK_FP16,
                                                FAT_CEILING_PEAK_BF16};
  static const char *const units[N_CEILINGS] = {FAT_CEILING_UNIT_BANDWIDTH, FAT_CEILING_UNIT_FLOPS,
                                                FAT_CEILING_UNIT_FLOPS};
  double value[N_CEILINGS] = {0, 0, 0};
  int missing = 0;
  char reason[ERRLEN];
  for (int i = 0; i < N_CEILINGS; i++) {
    int found = 0;
    if (fat_db_get_ceiling(r->db, r->gpu_id, names[i], &value[i], NULL, 0, &found)) {
      db_error(r, "", "reading ceilings");
      return -1;
    }
    missing |= !found;
  }
  if (missing) {
    fat_ceilings c;
    int st = fat_worker_measure_ceilings(r->worker, &c, reason, sizeof reason);
    if (st != FAT_WORKER_OK) {
      fprintf(r->log, "fatune: measuring the GPU's ceilings: %s\n", reason);
      return keep_worker(r, "");
    }
    value[COPY] = c.copy_bytes_per_s;
    value[FP16] = c.mma_fp16_flops_per_s;
    value[BF16] = c.mma_bf16_flops_per_s;
    for (int i = 0; i < N_CEILINGS; i++)
      if (fat_db_put_ceiling(r->db, r->gpu_id, names[i], value[i], units[i])) {
        db_error(r, "", "storing ceilings");
        return -1;
      }
  }
  r->peak_flops[FAT_FP16] = value[FP16];
  r->peak_flops[FAT_BF16] = value[BF16];
  if (!r->o->quiet)
    fprintf(r->log, "fatune: ceilings%s: copy %.2f TB/s, mma.sync bf16 %.0f TFLOP/s, fp16 %.0f TFLOP/s\n",
            missing ? " (measured)" : " (from the database)", value[COPY] / BYTES_PER_TB,
            value[BF16] / FLOPS_PER_TFLOP, value[FP16] / FLOPS_PER_TFLOP);
  return 0;
}

static uint64_t fresh_seed(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^
         ((uint64_t)getpid() << 32);
}

int fat_tune_main(const fat_options *o, FILE *out, FILE *log) {
  char err[ERRLEN];
  int status = FAT_EXIT_FAILED;
  run r;
  memset(&r, 0, sizeof r);
  r.o = o;
  r.out = out;
  r.log = log;
  r.tty = isatty(fileno(log));
  r.t0 = now_s();
  fat_interrupt_install();
  sqlite3_int64 *problem_ids = NULL;
  fat_problem *problems = NULL;
  size_t n_query = 0, n_problems = 0, n_winners = 0;
  fat_db_summary_row *winners = NULL;
  /* --json: refused before any work when it cannot be written. */
  int json = o->command == FAT_CMD_TUNE && o->json_path[0];
  for (int i = 0; i < FAT_STAGE_COUNT; i++) r.stage_s[i] = -1;
  if (json && fat_summary_check_path(o->json_path, err, sizeof err)) {
    fprintf(log, "fatune: --json: %s\n", err);
    json = 0;
    status = FAT_EXIT_USAGE;
    goto out;
  }

  /* The run's problems (--shard's share of the query's) first: a shard
   * compiles only the variants they need. */
  n_query = fat_tune_problems(o, NULL);
  problems = calloc(n_query + 1, sizeof *problems);
  problem_ids = calloc(n_query + 1, sizeof *problem_ids);
  if (!problems || !problem_ids) {
    fprintf(log, "fatune: out of memory for %zu problems\n", n_query);
    goto out;
  }
  fat_tune_problems(o, problems);
  double t_stage = now_s();
  r.gen = fat_gen_open(o->source_dir[0] ? o->source_dir : NULL, err, sizeof err);
  if (!r.gen) {
    fprintf(log, "fatune: generator: %s\n", err);
    goto out;
  }
  if (o->command == FAT_CMD_TUNE) {
    /* The worker is forked first, before any compile thread exists. */
    fat_worker_options wo;
    fat_worker_options_default(&wo);
    wo.timeout_base_s = o->timeout_s;
    wo.time.reps = o->reps;
    wo.seed = fresh_seed();
    int started = fat_worker_start(o->gpu, &wo, &r.worker, &r.gpu, err, sizeof err);
    if (started != FAT_GPU_OPENED) {
      if (!fat_gpu_absent(started)) {
        fprintf(log, "fatune: --gpu %d: %s\n", o->gpu, err);
        status = started == FAT_GPU_BAD_INDEX ? FAT_EXIT_USAGE : FAT_EXIT_FAILED;
        goto out;
      }
      snprintf(r.no_gpu, sizeof r.no_gpu, "%s", err);
    }
  } else {
    snprintf(r.no_gpu, sizeof r.no_gpu, "not asked for (--list)");
  }
  if (!r.no_gpu[0]) {
    char want[16];
    fat_arch_for_cc(r.gpu.cc_major, r.gpu.cc_minor, want);
    if (o->arch[0] && strcmp(o->arch, want)) {
      fprintf(log, "fatune: --arch %s: GPU %d is %s (compute capability %d.%d), which runs %s\n",
              o->arch, o->gpu, r.gpu.name, r.gpu.cc_major, r.gpu.cc_minor, want);
      status = FAT_EXIT_USAGE;
      goto out;
    }
    snprintf(r.arch, sizeof r.arch, "%s", want);
  } else {
    snprintf(r.arch, sizeof r.arch, "%s", o->arch[0] ? o->arch : "sm_90a");
  }
  /* Said before the compile, which may take minutes, not only after it. */
  if (o->command == FAT_CMD_TUNE && r.no_gpu[0] && !o->quiet)
    fprintf(log, "fatune: no GPU found: compiling only, for %s; checking, timing and choosing "
            "winners need an NVIDIA GPU (%s)\n", r.arch, r.no_gpu);
  if (generate(&r)) goto out;
  if (o->shard_count > 1) {
    fat_options all = *o;
    all.shard_index = all.shard_count = 1;
    keep_shard_variants(&r, problems, n_query, fat_tune_problems(&all, NULL));
  }
  r.stage_s[FAT_STAGE_GENERATE] = now_s() - t_stage;
  if (o->command == FAT_CMD_LIST) {
    for (size_t i = 0; i < r.n_variants; i++)
      fprintf(out, "%s%s  %s  %s\n", r.variants[i].name, r.variants[i].is_default ? " (default)" : "",
              r.variants[i].params, r.variants[i].hash);
    status = FAT_EXIT_OK;
    goto out;
  }
  if (fat_db_open(o->db_path, &r.db, err, sizeof err)) {
    fprintf(log, "fatune: --db: %s\n", err);
    status = FAT_EXIT_USAGE;
    goto out;
  }
  t_stage = now_s();
  if (compile_all(&r)) goto out;
  r.stage_s[FAT_STAGE_COMPILE] = now_s() - t_stage;
  if (fat_interrupted()) {
    fprintf(log, "fatune: %zu builds committed to %s; rerun to go on from there\n",
            r.compiled + r.cached, o->db_path);
    goto interrupted;
  }
  if (r.no_gpu[0]) {
    fprintf(log,
            "fatune: no GPU: %s\n"
            "fatune: without a GPU fatune generated %zu variants and compiled them for %s\n"
            "        (cubins and resource usage stored in %s); checking against the\n"
            "        reference, timing and choosing winners need an NVIDIA GPU (sm_80 or newer).\n",
            r.no_gpu, r.n_variants, r.arch, o->db_path);
    status = FAT_EXIT_NO_GPU;
    goto out;
  }
  const fat_nvrtc *nv = fat_nvrtc_get(err, sizeof err);
  if (!nv) {
    fprintf(log, "fatune: %s\n", err);
    goto out;
  }
  r.gpu.nvrtc_major = nv->major;
  r.gpu.nvrtc_minor = nv->minor;
  if (fat_db_put_gpu(r.db, &r.gpu, &r.gpu_id)) {
    fprintf(log, "fatune: storing the GPU: %s\n", fat_db_errmsg(r.db));
    goto out;
  }
  if (!o->quiet)
    fprintf(log, "fatune: tuning on %s (compute capability %d.%d, %d SMs)\n", r.gpu.name,
            r.gpu.cc_major, r.gpu.cc_minor, r.gpu.sm_count);
  t_stage = now_s();
  if (ensure_ceilings(&r)) goto out;
  r.stage_s[FAT_STAGE_CEILINGS] = now_s() - t_stage;
  t_stage = now_s();
  if (tune_problems(&r, problems, n_query, problem_ids, &n_problems)) goto out;
  r.stage_s[FAT_STAGE_TUNE] = now_s() - t_stage;
  if (!o->quiet)
    fprintf(log, "fatune: %zu checked and timed, %zu failed, %zu resumed from the database, %.0f s\n",
            r.evals_done, r.eval_failed, r.evals_skipped, now_s() - r.t0);
  if (run_winners(&r, problem_ids, n_problems, &winners, &n_winners)) goto out;
  print_table(&r, winners, n_winners);
  if (r.interrupted) goto interrupted;
  status = FAT_EXIT_OK;
  goto out;
interrupted:
  fflush(out);
  /* ^C reads as it always has; SIGTERM (a scheduler's preemption) is named. */
  if (fat_interrupt_signal() == SIGTERM) {
    fprintf(log, "fatune: interrupted by SIGTERM\n");
    status = FAT_EXIT_TERMINATED;
  } else {
    fprintf(log, "fatune: interrupted\n");
    status = FAT_EXIT_INTERRUPTED;
  }
out:
  if (json) {
    fat_run_summary sum = {
        .status = status, .db_path = o->db_path, .arch = r.arch,
        .gpu = r.no_gpu[0] || !r.gpu.name[0] ? NULL : &r.gpu, .no_gpu = r.no_gpu,
        .shard_index = o->shard_index, .shard_count = o->shard_count,
        .problems = n_query, .problems_done = n_problems, .variants = r.n_variants,
        .compiled = r.compiled, .cached = r.cached, .compile_failed = r.compile_failed,
        .checked = r.evals_done, .timed = r.evals_timed, .check_failed = r.eval_failed,
        .resumed = r.evals_skipped, .total_s = now_s() - r.t0};
    memcpy(sum.stage_s, r.stage_s, sizeof r.stage_s);
    if (fat_summary_save_json(o->json_path, &sum, winners, n_winners, err, sizeof err)) {
      fprintf(log, "fatune: --json: %s\n", err);
      if (status == FAT_EXIT_OK) status = FAT_EXIT_FAILED;
    }
  }
  free(winners);
  free(problems);
  free(problem_ids);
  if (r.worker) fat_worker_stop(r.worker);
  for (size_t i = 0; i < r.n_variants; i++) {
    fat_variant_free(&r.variants[i]);
    if (r.builds) fat_build_free(&r.builds[i]);
  }
  free(r.variants);
  free(r.builds);
  free(r.variant_ids);
  free(r.keys);
  if (r.db) fat_db_close(r.db);
  if (r.gen) fat_gen_close(r.gen);
  return status;
}
