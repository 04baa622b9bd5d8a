/* SPDX-License-Identifier: MIT */
/* The tuning pipeline (tune.h): the one place that strings the generator,
 * the compiler, the GPU workers and the database together. Order matters:
 * the workers (one per GPU, gpus.h) are forked before any compile thread
 * exists, the variants are generated and compiled once per architecture,
 * every build is committed the moment it is made, and the problems are
 * tuned -- checked before timed, only a variant that passed every check a
 * winner, on each GPU model under its own key -- by the tune stage
 * (tune_problem.h). With a GPU the compile runs on a thread of its own
 * beside the tune stage (fat_build_feed): the variants of the first
 * problems are compiled first, a lane waits only for a build it needs
 * next, and one lock (the run's) covers the database connection, the
 * counts and the log for both. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
#include "gpus.h"
#include "interrupt.h"
#include "nvrtc_api.h"
#include "problems.h"
#include "progress.h"
#include "summary.h"
#include "tune.h"
#include "tune_problem.h"
#include "worker.h"

#define ERRLEN 1024
#define HOST_NAME_CAP 256  /* a host name as the devices table keeps it (POSIX: at most 255) */
#define BYTES_PER_TB 1e12
#define FLOPS_PER_TFLOP 1e12
#define BYTES_PER_GB 1e9

/* One architecture of the run: its variants, generated and compiled once
 * for every GPU of it. */
typedef struct target {
  const fat_run_arch *arch;
  fat_variant *variants;
  size_t n_variants;
  sqlite3_int64 *variant_ids;
  fat_build *builds;
  char (*keys)[65];
  unsigned char *cached;  /* variant i's build came from the database: not compiled again */
  unsigned char *built;   /* the tune stage's fat_model.built: cached, then each build as it is
                             stored (under the run's lock) */
  size_t *order;          /* the compile's order: the variants of the run's problems, in tuning
                             order, first (NULL: 0, 1, ...) */
} target;

/* One GPU model of the run: the GPUs that share a gpus row. */
typedef struct model {
  fat_gpu_info gpu;            /* as its first GPU saw it, NVRTC's version filled in */
  fat_run_gpu *first;          /* that GPU: its worker measures the model's ceilings */
  double peak_flops[FAT_MATRIX_OP_COUNT][FAT_PEAK_DTYPES];  /* measured peak by instruction and dtype
                                                 (FLOP/s); 0 when unknown (wgmma's off sm_90a) */
  fat_model m;                 /* the tune stage's: key, variants, lanes, problems done */
  unsigned char member[FAT_MAX_GPUS];  /* the run's GPUs of this model */
  fat_db_summary_row *winners; /* its table, fat_db_summary's rows of the run's problems */
  size_t n_winners;
} model;

typedef struct run {
  const fat_options *o;
  FILE *out, *log;
  fat_gen *gen;
  fat_db *db;
  fat_run_gpus gpus;    /* the GPUs, their workers and architectures; none without a GPU */
  char no_gpu[ERRLEN];  /* why there is no GPU; "" when there is one */
  target targets[FAT_MAX_GPUS];  /* one per architecture (gpus.archs) */
  int n_targets;
  size_t n_variants;    /* over every architecture */
  fat_lane lanes[FAT_MAX_GPUS];  /* one per GPU, those of a model side by side */
  model models[FAT_MAX_GPUS];
  int n_models;
  fat_progress pr;  /* the counts of the run and its progress line */
  double t0;
  double stage_s[FAT_STAGE_COUNT];  /* wall time of each stage; -1 until it ran */
  int interrupted;  /* SIGINT or SIGTERM seen: stop after the variant in hand */
  char store_err[ERRLEN + 4096 + 256];  /* why a build could not be stored ("" none): the run stops */
  /* The compile beside the tune stage (with a GPU): its thread stores each
   * build and the lanes wait for the ones they need, one lock over the
   * database connection, the counts and the log for both. */
  pthread_mutex_t lock;
  pthread_cond_t built;     /* a build stored, or the compile ended */
  int compile_ended;        /* 0 while it runs, 1 ended, -1 failed (said on the log) */
  int compile_cut;          /* it stopped on ^C or SIGTERM before every build was made */
  pthread_t compile_thread;
  int compile_running;      /* the thread was started and not yet joined */
  fat_build_feed feed;
} run;

/* Set when the run gives up on the compile beside the tune stage (a
 * failure of the stage): it hands out no more builds. */
static atomic_int compile_abandoned;

static int compile_cancelled(void) {
  return fat_interrupted() || atomic_load(&compile_abandoned);
}

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

/* What the compile's callback is given: the run and the architecture
 * compiled for. */
typedef struct compiling {
  run *r;
  target *t;
  size_t compiled_before;  /* builds the run compiled for the architectures before T's */
} compiling;

static int stored(run *r, target *t, size_t compiled_before, size_t i, size_t total,
                  const fat_variant *v, const fat_build *b);

/* Stores each build as it comes: a build that cannot be committed (a full
 * disk, a read-only file) stops the run -- reporting it compiled would lose
 * it, and every rerun would compile it again. */
static int on_compiled(void *user, size_t done, size_t total, const fat_variant *v,
                       const fat_build *b) {
  run *r = ((compiling *)user)->r;
  target *t = ((compiling *)user)->t;
  size_t i = (size_t)(v - t->variants);
  (void)done;
  pthread_mutex_lock(&r->lock);
  int rc = stored(r, t, ((compiling *)user)->compiled_before, i, total, v, b);
  t->built[i] = 1; /* final, stored or not: a lane waiting on it goes on */
  pthread_cond_broadcast(&r->built);
  pthread_mutex_unlock(&r->lock);
  return rc;
}

/* on_compiled's work, under the run's lock. */
static int stored(run *r, target *t, size_t compiled_before, size_t i, size_t total,
                  const fat_variant *v, const fat_build *b) {
  r->pr.compiled++;
  r->pr.compile_total = compiled_before + total;
  if (!b->ok) r->pr.compile_failed++;
  char nv[32];
  const fat_nvrtc *nvrtc = fat_nvrtc_get(NULL, 0);
  snprintf(nv, sizeof nv, "%d.%d", nvrtc ? nvrtc->major : 0, nvrtc ? nvrtc->minor : 0);
  /* A build a cap stopped says nothing about the source: not cached (the
   * next run tries again). */
  if (!b->capped && fat_db_put_build(r->db, t->variant_ids[i], b, fat_compile_options(), nv)) {
    snprintf(r->store_err, sizeof r->store_err, "storing the build of %s in %s: %s", v->name,
             r->o->db_path, fat_db_errmsg(r->db));
    return -1;
  }
  if (r->o->verbose) {
    fat_progress_end(&r->pr);
    if (b->ok)
      fprintf(r->log, "%-52s compiled: %d registers, %d B spilled, %.0f ms\n", v->name,
              b->registers, b->spill_stores, b->compile_ms);
    else
      fprintf(r->log, "%-52s %s\n", v->name, b->capped && b->log ? b->log : "compilation error");
  }
  fat_progress_show(&r->pr, 0);
  return 0;
}

/* Appends the variants of the query for DIRECTION to t->variants (the
 * structs move; their strings stay where the generator put them). */
static int generate_direction(run *r, target *t, fat_direction direction);

/* Generate the query's variants for T's architecture into t->variants, one
 * direction after the other (--direction). */
static int generate(run *r, target *t) {
  const char *arch = t->arch->name;
  for (int i = 0; i < r->o->n_directions; i++)
    if (generate_direction(r, t, r->o->directions[i])) return -1;
  /* A --param set no variant has is a typo or another family's parameter. */
  if (r->o->n_params > 0 && t->n_variants == 0) {
    char list[FAT_MAX_LIST * 66] = "";
    for (int i = 0; i < r->o->n_params; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "", r->o->params[i]);
    fprintf(r->log, "fatune: --param %s: no variant of this query for %s has %s\n", list, arch,
            r->o->n_params > 1 ? "all of them" : "it");
    return -1;
  }
  /* A --family that gave no variant is a typo or another query's family. */
  for (int f = 0; f < r->o->n_families; f++) {
    int found = 0;
    for (size_t i = 0; i < t->n_variants && !found; i++) found = !strcmp(t->variants[i].family, r->o->families[f]);
    if (!found) {
      fprintf(r->log, "fatune: --family %s: no variant of that family in this query for %s\n", r->o->families[f],
              arch);
      return -1;
    }
  }
  return 0;
}

static int generate_direction(run *r, target *t, fat_direction direction) {
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
  q.arch = t->arch->name;
  q.smem_limit = t->arch->smem_limit;
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
      for (int k = 0; k < r->o->n_params && wanted; k++) wanted = fat_params_have_all(more[i].params, r->o->params[k]);
      if (wanted)
        more[kept++] = more[i];
      else
        fat_variant_free(&more[i]);
    }
    n_more = kept;
  }
  if (t->n_variants == 0) {
    free(t->variants);
    t->variants = more;
    t->n_variants = n_more;
  } else if (n_more > 0) {
    fat_variant *all = realloc(t->variants, (t->n_variants + n_more) * sizeof *all);
    if (!all) {
      for (size_t i = 0; i < n_more; i++) fat_variant_free(&more[i]);
      free(more);
      fat_pruned_free_all(pruned, n_pruned);
      fprintf(r->log, "fatune: out of memory for %zu variants\n", t->n_variants + n_more);
      return -1;
    }
    memcpy(all + t->n_variants, more, n_more * sizeof *more);
    t->variants = all;
    t->n_variants += n_more;
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
            n_more, t->arch->name, n_pruned);
  else if (!r->o->quiet)
    fprintf(r->log, "fatune: %zu %s variants for %s (%zu configurations pruned before compiling)\n",
            n_more, fat_direction_name(direction), t->arch->name, n_pruned);
  fat_pruned_free_all(pruned, n_pruned);
  return 0;
}

/* --shard: keeps the variants of the keys (direction, dtype, mask, head
 * dim) of the shard's N PROBLEMS, so that a shard compiles only what it
 * measures. Says how the query was split. */
static void keep_shard_variants(run *r, target *t, const fat_problem *problems, size_t n,
                                size_t n_all) {
  size_t kept = 0;
  for (size_t i = 0; i < t->n_variants; i++) {
    const fat_variant *v = &t->variants[i];
    int wanted = 0;
    for (size_t k = 0; k < n && !wanted; k++)
      wanted = v->direction == problems[k].direction && v->dtype == problems[k].dtype &&
               v->mask == problems[k].mask && v->head_dim == problems[k].head_dim;
    if (wanted)
      t->variants[kept++] = t->variants[i];
    else
      fat_variant_free(&t->variants[i]);
  }
  if (!r->o->quiet)
    fprintf(r->log, "fatune: shard %d/%d: %zu of the query's %zu problems, %zu of its %zu variants\n",
            r->o->shard_index, r->o->shard_count, n, n_all, kept, t->n_variants);
  t->n_variants = kept;
}

/* Store T's variants, reuse cached builds, compile the rest in parallel. */
/* Stores T's variants and looks each build up in the database: a build
 * found there is final (cached, built) and not compiled again. */
static int prepare_builds(run *r, target *t) {
  char err[ERRLEN];
  const char *arch = t->arch->name;
  size_t n = t->n_variants;
  t->variant_ids = calloc(n ? n : 1, sizeof *t->variant_ids);
  t->builds = calloc(n ? n : 1, sizeof *t->builds);
  t->keys = calloc(n ? n : 1, sizeof *t->keys);
  t->cached = calloc(n ? n : 1, 1);
  t->built = calloc(n ? n : 1, 1);
  if (!t->variant_ids || !t->builds || !t->keys || !t->cached || !t->built) {
    fprintf(r->log, "fatune: out of memory\n");
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    if (fat_db_put_variant(r->db, &t->variants[i], &t->variant_ids[i])) {
      db_error(r, "", "storing variant %s", t->variants[i].name);
      return -1;
    }
    if (fat_build_key(t->variants[i].source, arch, t->keys[i], err, sizeof err)) {
      fprintf(r->log, "fatune: %s\n", err);
      return -1;
    }
    int found = 0;
    if (fat_db_find_build(r->db, t->keys[i], &t->builds[i], &found)) {
      db_error(r, "", "reading build cache");
      return -1;
    }
    if (found) {
      t->cached[i] = t->built[i] = 1;
      r->pr.cached++;
      if (!t->builds[i].ok) r->pr.compile_failed++;
    }
  }
  return 0;
}

/* T's compile order for the tune stage beside it: the variants of the
 * run's N PROBLEMS in tuning order (each problem's in generation order),
 * then the rest, so that the first lanes wait only for the builds they
 * need first. */
static int plan_order(run *r, target *t, const fat_problem *problems, size_t n) {
  t->order = malloc((t->n_variants ? t->n_variants : 1) * sizeof *t->order);
  unsigned char *placed = calloc(t->n_variants ? t->n_variants : 1, 1);
  if (!t->order || !placed) {
    free(placed);
    fprintf(r->log, "fatune: out of memory\n");
    return -1;
  }
  size_t k = 0;
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < t->n_variants; i++)
      if (!placed[i] && fat_tuning_fits(&t->variants[i], &problems[j])) {
        placed[i] = 1;
        t->order[k++] = i;
      }
  for (size_t i = 0; i < t->n_variants; i++)
    if (!placed[i]) t->order[k++] = i;
  free(placed);
  return 0;
}

/* Compiles T's builds not found in the database, each stored as it comes
 * (on_compiled), then says what it did. BESIDE: the tune stage runs beside
 * it (its compile processes niced, the progress line's stage left to the
 * tune stage's problems). Takes the run's lock for the log and counts. */
static int compile_target(run *r, target *t, int beside) {
  char err[ERRLEN];
  const char *arch = t->arch->name;
  size_t n = t->n_variants;
  pthread_mutex_lock(&r->lock);
  /* The counts are the run's, over every architecture; the line says this one's. */
  const size_t compiled_before = r->pr.compiled, failed_before = r->pr.compile_failed;
  size_t cached_here = 0;
  for (size_t i = 0; i < n; i++) cached_here += t->cached[i];
  compiling c = {.r = r, .t = t, .compiled_before = compiled_before};
  if (!beside) snprintf(r->pr.stage, sizeof r->pr.stage, "compile %s", arch);
  r->pr.compile_total = compiled_before + n - cached_here;
  fat_progress_show(&r->pr, 1);
  pthread_mutex_unlock(&r->lock);
  double t0 = fat_now_s();
  /* Beside the tune stage the GPU worker's host thread comes first. */
  const fat_compile_plan plan = {.order = t->order, .nice = beside ? 10 : 0};
  int rc = fat_compile_planned(t->variants, n, arch, r->o->jobs, t->cached, t->builds, on_compiled,
                               &c, compile_cancelled, &plan, err, sizeof err);
  pthread_mutex_lock(&r->lock);
  fat_progress_end(&r->pr);
  if (rc) {
    fprintf(r->log, "fatune: %s\n", r->store_err[0] ? r->store_err : err);
  } else if (!r->o->quiet) {
    fprintf(r->log, "fatune: compiled %zu variants%s%s in %.1f s on %d threads, %zu from the cache, %zu failed\n",
            r->pr.compiled - compiled_before, r->n_targets > 1 ? " for " : "",
            r->n_targets > 1 ? arch : "", fat_now_s() - t0,
            r->o->jobs ? r->o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN),
            cached_here, r->pr.compile_failed - failed_before);
  }
  if (beside) fat_progress_show(&r->pr, 1);
  pthread_mutex_unlock(&r->lock);
  return rc ? -1 : 0;
}

/* Compiles every target's builds; with BESIDE, from the compile thread. */
static int compile_targets(run *r, int beside) {
  for (int a = 0; a < r->n_targets && !fat_interrupted(); a++)
    if (compile_target(r, &r->targets[a], beside)) return -1;
  return 0;
}

/* The compile thread: every target compiled, then the end said to the
 * lanes that wait on a build (compile_ended). */
static void *compile_main(void *arg) {
  run *r = arg;
  const double t0 = fat_now_s();
  const int rc = compile_targets(r, 1);
  pthread_mutex_lock(&r->lock);
  r->stage_s[FAT_STAGE_COMPILE] = fat_now_s() - t0;
  r->compile_ended = rc ? -1 : 1;
  r->compile_cut = !rc && fat_interrupted();
  pthread_cond_broadcast(&r->built);
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

/* Waits for the compile thread, if it runs; ABANDON: it hands out no more
 * builds first (the run is failing). Returns -1 when the compile failed. */
static int join_compile(run *r, int abandon) {
  if (!r->compile_running) return 0;
  if (abandon) atomic_store(&compile_abandoned, 1);
  pthread_join(r->compile_thread, NULL);
  r->compile_running = 0;
  return r->compile_ended < 0 ? -1 : 0;
}

/* After the ceilings' job: the worker W lost, if any, restarted
 * (fat_worker_recover, the one policy). Returns 0, or -1 (said on the log)
 * when none would restart and the run cannot go on. */
static int keep_worker(run *r, fat_worker *w) {
  char err[ERRLEN];
  if (!fat_worker_recover(w, err, sizeof err)) return 0;
  fprintf(r->log, "fatune: restarting the GPU worker: %s\n", err);
  return -1;
}

/* The winners of M's problems tuned in this run, as the table at its end
 * and --json show them: fat_db_summary's rows of those problems, in its
 * order, into m->winners (heap) and m->n_winners. */
static int run_winners(run *r, model *m) {
  size_t kept = 0, n = 0;
  fat_db_summary_row *rows = NULL;
  if (fat_db_summary(r->db, m->m.gpu_id, &rows, &n)) {
    db_error(r, "", "summary");
    return -1;
  }
  for (size_t k = 0; k < n; k++) {
    int mine = 0;
    for (size_t j = 0; j < m->m.n_done; j++) mine |= m->m.problem_ids[j] == rows[k].problem_id;
    if (mine) rows[kept++] = rows[k];
  }
  m->winners = rows;
  m->n_winners = kept;
  return 0;
}

static void print_table(run *r, const model *m) {
  const fat_gpu_info *g = &m->gpu;
  const fat_db_summary_row *rows = m->winners;
  fprintf(r->out, "\n%s (sm_%d%d, %d SMs, driver %d, NVRTC %d.%d) -- database %s\n", g->name,
          g->cc_major, g->cc_minor, g->sm_count, g->driver_version, g->nvrtc_major, g->nvrtc_minor,
          r->o->db_path);
  /* % peak: the winner's TFLOP/s over the measured peak of the instruction
   * its family issues (mma.sync or wgmma), named beside it;
   * x materialise: the winner's speedup over the materialising baseline;
   * peak GB: device memory of the fused pass / of the materialising one,
   * from the shapes (Q, K, V, O, lse; plus the fp32 scores). */
  fprintf(r->out, "%-34s %-40s %9s %8s %-13s %8s %9s %9s %13s %15s %7s\n", "problem (batch x heads)",
          "winner", "ms", "TFLOP/s", "% peak", "rel_l2", "x slowest", "x default", "x materialise",
          "peak GB fus/mat", "passed");
  for (size_t k = 0; k < m->n_winners; k++) {
    const fat_db_summary_row *row = &rows[k];
    const fat_problem *p = &row->problem;
    char prob[128], label[96], def[16] = "-";
    fat_problem_label(p, label, sizeof label);
    snprintf(prob, sizeof prob, "%s (%dx%d)", label, p->batch, p->heads);
    if (isfinite(row->default_ms)) snprintf(def, sizeof def, "%.2fx", row->default_ms / row->median_ms);
    char mat[16] = "-", peak[32] = "-", mem[32];
    if (isfinite(row->materialize_ms))
      snprintf(mat, sizeof mat, "%.2fx", row->materialize_ms / row->median_ms);
    fat_summary_peak_cell(row, (const double(*)[FAT_PEAK_DTYPES])m->peak_flops, peak, sizeof peak);
    if (p->direction == FAT_FWD)  /* the baseline and its workspace are forward-only */
      snprintf(mem, sizeof mem, "%.2f/%.2f", fat_fwd_peak_bytes(p, 0) / BYTES_PER_GB,
               fat_fwd_peak_bytes(p, 1) / BYTES_PER_GB);
    else
      snprintf(mem, sizeof mem, "-");
    const char *short_name = strrchr(row->winner, '.');
    const char *winner = short_name ? short_name + 1 : row->winner;
    fprintf(r->out, "%-34s %-40s %9.3f %8.1f %-13s %8.1e %8.2fx %9s %13s %15s %3d/%-3d\n", prob, winner,
            row->median_ms, row->tflops, peak, row->rel_l2, row->slowest_ms / row->median_ms, def,
            mat, mem, row->n_passing, row->n_passing + row->n_failed);
  }
}

/* Model M's ceilings: read from the database, or measured once by its
 * first GPU's worker and stored -- the copy bandwidth and mma.sync peaks
 * on every model, the wgmma peaks (operands in shared memory, and A in
 * registers) where the model's architecture has wgmma. A failed
 * measurement is reported and the run goes on (the ceilings only add
 * context to the tables). */
static int ensure_ceilings(run *r, model *m) {
  enum { COPY, MMA_FP16, MMA_BF16, WGMMA_FP16, WGMMA_BF16, WGMMA_RS_FP16, WGMMA_RS_BF16, N_CEILINGS };
  static const char *const names[N_CEILINGS] = {
      FAT_CEILING_COPY_BANDWIDTH,   FAT_CEILING_PEAK_FP16,          FAT_CEILING_PEAK_BF16,
      FAT_CEILING_WGMMA_PEAK_FP16,  FAT_CEILING_WGMMA_PEAK_BF16,    FAT_CEILING_WGMMA_RS_PEAK_FP16,
      FAT_CEILING_WGMMA_RS_PEAK_BF16};
  const int wgmma = fat_arch_has_wgmma(r->gpus.archs[m->first->arch].name);
  const int wanted = wgmma ? N_CEILINGS : WGMMA_FP16;
  double value[N_CEILINGS] = {0};
  int missing = 0;
  char reason[ERRLEN], of[sizeof m->gpu.name + 8] = "";
  if (r->n_models > 1) snprintf(of, sizeof of, " of %s", m->gpu.name);
  const char *whose = r->n_models > 1 ? "" : " the GPU's";
  for (int i = 0; i < wanted; i++) {
    int found = 0;
    if (fat_db_get_ceiling(r->db, m->m.gpu_id, names[i], &value[i], NULL, 0, &found)) {
      db_error(r, "", "reading ceilings");
      return -1;
    }
    missing |= !found;
  }
  if (missing) {
    fat_ceilings c;
    int st = fat_worker_measure_ceilings(m->first->worker, &c, reason, sizeof reason);
    if (st != FAT_WORKER_OK) {
      fprintf(r->log, "fatune: measuring%s ceilings%s: %s\n", whose, of, reason);
      return keep_worker(r, m->first->worker);
    }
    value[COPY] = c.copy_bytes_per_s;
    value[MMA_FP16] = c.mma_fp16_flops_per_s;
    value[MMA_BF16] = c.mma_bf16_flops_per_s;
    for (int t = FAT_FP16; t <= FAT_BF16; t++) {
      value[WGMMA_FP16 + t] = c.wgmma_flops_per_s[t];
      value[WGMMA_RS_FP16 + t] = c.wgmma_rs_flops_per_s[t];
    }
    for (int i = 0; i < wanted; i++)
      if (fat_db_put_ceiling(r->db, m->m.gpu_id, names[i], value[i],
                             i == COPY ? FAT_CEILING_UNIT_BANDWIDTH : FAT_CEILING_UNIT_FLOPS)) {
        db_error(r, "", "storing ceilings");
        return -1;
      }
  }
  for (int t = FAT_FP16; t <= FAT_BF16; t++) {
    m->peak_flops[FAT_MATRIX_MMA_SYNC][t] = value[MMA_FP16 + t];
    m->peak_flops[FAT_MATRIX_WGMMA][t] = value[WGMMA_FP16 + t];
  }
  if (!r->o->quiet) {
    fprintf(r->log, "fatune: ceilings%s%s: copy %.2f TB/s, mma.sync bf16 %.0f TFLOP/s, fp16 %.0f TFLOP/s",
            of, missing ? " (measured)" : " (from the database)", value[COPY] / BYTES_PER_TB,
            value[MMA_BF16] / FLOPS_PER_TFLOP, value[MMA_FP16] / FLOPS_PER_TFLOP);
    if (wgmma)
      fprintf(r->log, ", wgmma bf16 %.0f TFLOP/s (A in registers %.0f), fp16 %.0f (%.0f)",
              value[WGMMA_BF16] / FLOPS_PER_TFLOP, value[WGMMA_RS_BF16] / FLOPS_PER_TFLOP,
              value[WGMMA_FP16] / FLOPS_PER_TFLOP, value[WGMMA_RS_FP16] / FLOPS_PER_TFLOP);
    fputc('\n', r->log);
  }
  return 0;
}

/* This host's name, by which the devices table tells its GPUs from another
 * host's; "localhost" where it has none. */
static void host_name(char *out, size_t cap) {
  if (gethostname(out, cap) || !out[0]) snprintf(out, cap, "localhost");
  out[cap - 1] = '\0';  /* gethostname may leave a cut name unterminated */
}

/* Stores every GPU of the run (its model's gpus row and its own devices
 * row) and groups them by model: the lanes of a model side by side in
 * r->lanes, each model's problems room for N. Says what the run tunes on. */
static int store_gpus(run *r, const fat_nvrtc *nv, sqlite3_int64 *problem_ids_all, size_t n) {
  char host[HOST_NAME_CAP];
  sqlite3_int64 gpu_ids[FAT_MAX_GPUS], device_ids[FAT_MAX_GPUS];
  int model_of[FAT_MAX_GPUS];
  host_name(host, sizeof host);
  for (int i = 0; i < r->gpus.n; i++) {
    fat_run_gpu *g = &r->gpus.gpus[i];
    g->info.nvrtc_major = nv->major;
    g->info.nvrtc_minor = nv->minor;
    if (fat_db_put_gpu(r->db, &g->info, &gpu_ids[i]) ||
        fat_db_put_device(r->db, gpu_ids[i], host, g->index, &g->info, &device_ids[i])) {
      fprintf(r->log, "fatune: storing the GPU: %s\n", fat_db_errmsg(r->db));
      return -1;
    }
    int k = 0;
    while (k < r->n_models && r->models[k].m.gpu_id != gpu_ids[i]) k++;
    if (k == r->n_models) {
      model *m = &r->models[r->n_models++];
      const target *t = &r->targets[g->arch];
      m->gpu = g->info;
      m->first = g;
      m->m = (fat_model){.name = m->gpu.name, .gpu_id = gpu_ids[i], .variants = t->variants,
                         .builds = t->builds, .built = t->built, .variant_ids = t->variant_ids,
                         .n_variants = t->n_variants, .problem_ids = problem_ids_all + k * n};
    }
    model_of[i] = k;
    r->models[k].member[i] = 1;
  }
  int lanes = 0;
  for (int k = 0; k < r->n_models; k++) {
    model *m = &r->models[k];
    m->m.lanes = &r->lanes[lanes];
    for (int i = 0; i < r->gpus.n; i++)
      if (model_of[i] == k)
        r->lanes[lanes++] = (fat_lane){.gpu = r->gpus.gpus[i].index, .device_id = device_ids[i],
                                       .m = fat_worker_measurer(r->gpus.gpus[i].worker)};
    m->m.n_lanes = (int)(&r->lanes[lanes] - m->m.lanes);
  }
  return 0;
}

/* "fatune: tuning on NAME (compute capability X.Y, N SMs)", with the GPUs
 * of the model where the run has several. */
static void say_model(run *r, const model *m) {
  const fat_gpu_info *g = &m->gpu;
  fprintf(r->log, "fatune: tuning on %s (compute capability %d.%d, %d SMs)", g->name, g->cc_major,
          g->cc_minor, g->sm_count);
  if (r->gpus.n > 1) {
    char list[FAT_MAX_GPUS * 8];
    fat_run_gpus_list(&r->gpus, m->member, list, sizeof list);
    fprintf(r->log, ": %s", list);
  }
  fputc('\n', r->log);
}

/* The problems tuned to the end on every model of the run (--json's done). */
static size_t problems_done(const run *r) {
  if (r->n_models == 0) return 0;
  size_t done = 0;
  const fat_model *first = &r->models[0].m;
  for (size_t j = 0; j < first->n_done; j++) {
    int everywhere = 1;
    for (int k = 1; k < r->n_models && everywhere; k++) {
      int found = 0;
      for (size_t i = 0; i < r->models[k].m.n_done && !found; i++)
        found = r->models[k].m.problem_ids[i] == first->problem_ids[j];
      everywhere = found;
    }
    done += everywhere;
  }
  return done;
}

/* --json: the run's summary; with several GPUs each of them, and with
 * several models the GPU of each winner. 0 or -1 (said on the log). */
/* Where the tune stage's time went, summed over the run's GPUs: each
 * worker's phases (PHASE_S), the rest of its jobs' wall time (*MESSAGES_S)
 * and the waits for builds (*WAIT_S). */
static void tune_phases(const run *r, double phase_s[FAT_PHASE_COUNT], double *messages_s,
                        double *wait_s) {
  double job_s = 0, sum = 0;
  for (int i = 0; i < FAT_PHASE_COUNT; i++) phase_s[i] = 0;
  for (int i = 0; i < r->gpus.n; i++) fat_worker_phases(r->gpus.gpus[i].worker, phase_s, &job_s);
  for (int i = 0; i < FAT_PHASE_COUNT; i++) sum += phase_s[i];
  *messages_s = job_s > sum ? job_s - sum : 0;
  *wait_s = r->pr.build_wait_s;
}

/* The tune stage's line of where its time went: "tune stage 130.0 s:
 * module loads 3.1 s, ..., the rest 2.0 s" (the rest: the database and
 * the choosing, where one GPU measured). */
static void say_tune_phases(const run *r) {
  double phase_s[FAT_PHASE_COUNT], messages_s, wait_s, sum = 0;
  const double stage = r->stage_s[FAT_STAGE_TUNE];
  tune_phases(r, phase_s, &messages_s, &wait_s);
  fprintf(r->log, "fatune: tune stage %.1f s%s:", stage, r->gpus.n > 1 ? " (phases summed over the GPUs)" : "");
  for (int i = 0; i < FAT_PHASE_COUNT; i++) {
    fprintf(r->log, " %s %.1f s,", fat_phase_name((fat_phase)i), phase_s[i]);
    sum += phase_s[i];
  }
  fprintf(r->log, " worker messages %.1f s, waiting for builds %.1f s", messages_s, wait_s);
  sum += messages_s + wait_s;
  if (r->gpus.n == 1 && stage >= sum) fprintf(r->log, ", the rest %.1f s", stage - sum);
  fputc('\n', r->log);
}

static int save_json(run *r, int status, size_t n_query) {
  char err[ERRLEN];
  fat_summary_device devices[FAT_MAX_GPUS];
  size_t n_rows = 0;
  for (int k = 0; k < r->n_models; k++) n_rows += r->models[k].n_winners;
  fat_db_summary_row *rows = calloc(n_rows ? n_rows : 1, sizeof *rows);
  const char **row_gpus = calloc(n_rows ? n_rows : 1, sizeof *row_gpus);
  int rc = -1;
  if (!rows || !row_gpus) {
    fprintf(r->log, "fatune: --json: out of memory\n");
    goto out;
  }
  n_rows = 0;
  for (int k = 0; k < r->n_models; k++)
    for (size_t j = 0; j < r->models[k].n_winners; j++) {
      row_gpus[n_rows] = r->models[k].gpu.name;
      rows[n_rows++] = r->models[k].winners[j];
    }
  for (int i = 0; i < r->gpus.n; i++)
    devices[i] = (fat_summary_device){.index = r->gpus.gpus[i].index, .gpu = &r->gpus.gpus[i].info};
  /* The first model's GPU; before the GPUs were stored, the first GPU's. */
  const fat_gpu_info *gpu = r->n_models > 0 ? &r->models[0].gpu
                            : r->gpus.n > 0  ? &r->gpus.gpus[0].info
                                             : NULL;
  fat_run_summary sum = {
      .status = status, .db_path = r->o->db_path,
      .arch = r->n_targets > 0 ? r->targets[0].arch->name : "",
      .gpu = r->no_gpu[0] ? NULL : gpu, .no_gpu = r->no_gpu,
      .shard_index = r->o->shard_index, .shard_count = r->o->shard_count,
      .problems = n_query, .problems_done = problems_done(r), .variants = r->n_variants,
      .compiled = r->pr.compiled, .cached = r->pr.cached, .compile_failed = r->pr.compile_failed,
      .checked = r->pr.evals_done, .timed = r->pr.evals_timed, .check_failed = r->pr.eval_failed,
      .resumed = r->pr.evals_skipped, .total_s = fat_now_s() - r->t0,
      .devices = devices, .n_devices = (size_t)r->gpus.n,
      .row_gpus = r->n_models > 1 ? row_gpus : NULL};
  memcpy(sum.stage_s, r->stage_s, sizeof r->stage_s);
  sum.tune_measured = r->stage_s[FAT_STAGE_TUNE] >= 0;
  if (sum.tune_measured)
    tune_phases(r, sum.tune_phase_s, &sum.tune_messages_s, &sum.tune_build_wait_s);
  rc = fat_summary_save_json(r->o->json_path, &sum, rows, n_rows, err, sizeof err);
  if (rc) fprintf(r->log, "fatune: --json: %s\n", err);
out:
  free(rows);
  free(row_gpus);
  return rc;
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
  run *r = calloc(1, sizeof *r);  /* tens of kB: a slot for every GPU a run may have */
  if (!r) {
    fprintf(log, "fatune: out of memory\n");
    return FAT_EXIT_FAILED;
  }
  r->o = o;
  r->out = out;
  r->log = log;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->built, NULL);
  atomic_store(&compile_abandoned, 0);
  fat_progress_init(&r->pr, log, o->quiet);
  r->t0 = fat_now_s();
  fat_interrupt_install();
  sqlite3_int64 *problem_ids = NULL;
  fat_problem *problems = NULL;
  size_t n_query = 0;
  /* --json: refused before any work when it cannot be written. */
  int json = o->command == FAT_CMD_TUNE && o->json_path[0];
  for (int i = 0; i < FAT_STAGE_COUNT; i++) r->stage_s[i] = -1;
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
  if (!problems) {
    fprintf(log, "fatune: out of memory for %zu problems\n", n_query);
    goto out;
  }
  fat_tune_problems(o, problems);
  double t_stage = fat_now_s();
  r->gen = fat_gen_open(o->source_dir[0] ? o->source_dir : NULL, err, sizeof err);
  if (!r->gen) {
    fprintf(log, "fatune: generator: %s\n", err);
    goto out;
  }
  if (o->command == FAT_CMD_TUNE) {
    /* The workers are forked first, before any compile thread exists. */
    fat_worker_options wo;
    fat_worker_options_default(&wo);
    wo.timeout_base_s = o->timeout_s;
    wo.time.reps = o->reps;
    wo.screen_reps = o->exhaustive ? 0 : FAT_SCREEN_REPS;
    wo.seed = fresh_seed();
    int started = fat_run_gpus_start(o, &wo, &r->gpus, err, sizeof err);
    if (started != FAT_GPU_OPENED) {
      if (!fat_gpu_absent(started)) {
        fprintf(log, "fatune: --gpu %d: %s\n", r->gpus.failed_index, err);
        status = started == FAT_GPU_BAD_INDEX ? FAT_EXIT_USAGE : FAT_EXIT_FAILED;
        goto out;
      }
      snprintf(r->no_gpu, sizeof r->no_gpu, "%s", err);
    }
  } else {
    snprintf(r->no_gpu, sizeof r->no_gpu, "not asked for (--list)");
  }
  if (fat_run_gpus_archs(&r->gpus, o->arch, err, sizeof err)) {
    fprintf(log, "fatune: %s\n", err);
    status = FAT_EXIT_USAGE;
    goto out;
  }
  r->n_targets = r->gpus.n_archs;
  for (int a = 0; a < r->n_targets; a++) r->targets[a].arch = &r->gpus.archs[a];
  /* Said before the compile, which may take minutes, not only after it. */
  if (o->command == FAT_CMD_TUNE && r->no_gpu[0] && !o->quiet)
    fprintf(log, "fatune: no GPU found: compiling only, for %s; checking, timing and choosing "
            "winners need an NVIDIA GPU (%s)\n", r->targets[0].arch->name, r->no_gpu);
  for (int a = 0; a < r->n_targets; a++) {
    target *t = &r->targets[a];
    if (generate(r, t)) goto out;
    if (o->shard_count > 1) {
      fat_options all = *o;
      all.shard_index = all.shard_count = 1;
      keep_shard_variants(r, t, problems, n_query, fat_tune_problems(&all, NULL));
    }
    r->n_variants += t->n_variants;
  }
  r->stage_s[FAT_STAGE_GENERATE] = fat_now_s() - t_stage;
  if (o->command == FAT_CMD_LIST) {
    const target *t = &r->targets[0];
    for (size_t i = 0; i < t->n_variants; i++)
      fprintf(out, "%s%s  %s  %s\n", t->variants[i].name, t->variants[i].is_default ? " (default)" : "",
              t->variants[i].params, t->variants[i].hash);
    status = FAT_EXIT_OK;
    goto out;
  }
  if (fat_db_open(o->db_path, &r->db, err, sizeof err)) {
    fprintf(log, "fatune: --db: %s\n", err);
    status = FAT_EXIT_USAGE;
    goto out;
  }
  for (int a = 0; a < r->n_targets; a++)
    if (prepare_builds(r, &r->targets[a])) goto out;
  if (r->no_gpu[0]) {
    t_stage = fat_now_s();
    if (compile_targets(r, 0)) goto out;
    r->stage_s[FAT_STAGE_COMPILE] = fat_now_s() - t_stage;
    if (fat_interrupted()) {
      fprintf(log, "fatune: %zu builds committed to %s; rerun to go on from there\n",
              r->pr.compiled + r->pr.cached, o->db_path);
      goto interrupted;
    }
    fprintf(log,
            "fatune: no GPU: %s\n"
            "fatune: without a GPU fatune generated %zu variants and compiled them for %s\n"
            "        (cubins and resource usage stored in %s); checking against the\n"
            "        reference, timing and choosing winners need an NVIDIA GPU (sm_80 or newer).\n",
            r->no_gpu, r->n_variants, r->targets[0].arch->name, o->db_path);
    status = FAT_EXIT_NO_GPU;
    goto out;
  }
  /* NVRTC loaded before the compile thread forks its processes. */
  const fat_nvrtc *nv = fat_nvrtc_get(err, sizeof err);
  if (!nv) {
    fprintf(log, "fatune: %s\n", err);
    goto out;
  }
  /* Each model's problems tuned to the end, room for all of them. */
  problem_ids = calloc((size_t)r->gpus.n * n_query + 1, sizeof *problem_ids);
  if (!problem_ids) {
    fprintf(log, "fatune: out of memory for %zu problems\n", n_query);
    goto out;
  }
  for (int a = 0; a < r->n_targets; a++)
    if (plan_order(r, &r->targets[a], problems, n_query)) goto out;
  /* The compile runs beside the GPU's work: the lanes check and time the
   * first problem's variants while NVRTC makes the rest. With nothing to
   * compile (every build cached), or where no thread can be started, it
   * runs here first, its line before the GPU's as it always was. */
  size_t to_compile = 0;
  for (int a = 0; a < r->n_targets; a++)
    for (size_t i = 0; i < r->targets[a].n_variants; i++) to_compile += !r->targets[a].cached[i];
  if (to_compile && pthread_create(&r->compile_thread, NULL, compile_main, r) == 0) {
    r->compile_running = 1;
  } else {
    t_stage = fat_now_s();
    if (compile_targets(r, 0)) goto out;
    r->stage_s[FAT_STAGE_COMPILE] = fat_now_s() - t_stage;
    r->compile_ended = 1;
    r->compile_cut = fat_interrupted();
  }
  pthread_mutex_lock(&r->lock);
  int ready = !store_gpus(r, nv, problem_ids, n_query);
  t_stage = fat_now_s();
  for (int k = 0; k < r->n_models && ready; k++) {
    if (!o->quiet) say_model(r, &r->models[k]);
    ready = !ensure_ceilings(r, &r->models[k]);
  }
  r->stage_s[FAT_STAGE_CEILINGS] = fat_now_s() - t_stage;
  pthread_mutex_unlock(&r->lock);
  if (!ready) goto out;
  t_stage = fat_now_s();
  fat_model tuned_models[FAT_MAX_GPUS];
  for (int k = 0; k < r->n_models; k++) tuned_models[k] = r->models[k].m;
  r->feed = (fat_build_feed){.lock = &r->lock, .changed = &r->built, .ended = &r->compile_ended};
  fat_tuning tuning = {.db = r->db, .log = log, .verbose = o->verbose, .quiet = o->quiet,
                       .retune = o->retune, .models = tuned_models, .n_models = r->n_models,
                       .progress = &r->pr, .compile = &r->feed};
  int tuned = fat_tuning_run(&tuning, problems, n_query, &r->interrupted);
  for (int k = 0; k < r->n_models; k++) r->models[k].m = tuned_models[k];
  if (tuned) goto out;
  r->stage_s[FAT_STAGE_TUNE] = fat_now_s() - t_stage;
  /* The builds the problems did not wait for are finished and stored. */
  if (join_compile(r, 0)) goto out;
  if (r->compile_cut) {
    fprintf(log, "fatune: %zu builds committed to %s; rerun to go on from there\n",
            r->pr.compiled + r->pr.cached, o->db_path);
    r->interrupted = 1;
  }
  if (!o->quiet) {
    fprintf(log, "fatune: %zu checked and timed, %zu failed, %zu resumed from the database",
            r->pr.evals_done, r->pr.eval_failed, r->pr.evals_skipped);
    if (r->pr.evals_dropped)  /* FAT_DROP_FACTOR behind: never contenders, said by explain */
      fprintf(log, ", %zu screenings stopped after one repetition", r->pr.evals_dropped);
    fprintf(log, ", %.0f s\n", fat_now_s() - r->t0);
  }
  if (!o->quiet && r->pr.evals_done > 0) say_tune_phases(r);
  for (int k = 0; k < r->n_models; k++) {
    if (run_winners(r, &r->models[k])) goto out;
    print_table(r, &r->models[k]);
  }
  if (r->interrupted) goto interrupted;
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
  join_compile(r, 1);
  if (json && save_json(r, status, n_query) && status == FAT_EXIT_OK) status = FAT_EXIT_FAILED;
  free(problems);
  free(problem_ids);
  fat_run_gpus_stop(&r->gpus);
  for (int k = 0; k < r->n_models; k++) free(r->models[k].winners);
  for (int a = 0; a < r->n_targets; a++) {
    target *t = &r->targets[a];
    for (size_t i = 0; i < t->n_variants; i++) {
      fat_variant_free(&t->variants[i]);
      if (t->builds) fat_build_free(&t->builds[i]);
    }
    free(t->variants);
    free(t->builds);
    free(t->variant_ids);
    free(t->keys);
    free(t->cached);
    free(t->built);
    free(t->order);
  }
  if (r->db) fat_db_close(r->db);
  if (r->gen) fat_gen_close(r->gen);
  pthread_cond_destroy(&r->built);
  pthread_mutex_destroy(&r->lock);
  free(r);
  return status;
}
