/* SPDX-License-Identifier: MIT */
/* The progress line (progress.h). */
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "progress.h"

#define PROGRESS_INTERVAL_S 0.25  /* terminal refresh: a few times a second */

double fat_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_duration(double s, char *buf, size_t n) {
  if (s < 0 || !isfinite(s)) snprintf(buf, n, "?");
  else if (s < 60) snprintf(buf, n, "%.0fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s / 60 % 60);
}

void fat_progress_init(fat_progress *p, FILE *log, int quiet) {
  memset(p, 0, sizeof *p);
  p->log = log;
  p->tty = isatty(fileno(log));
  p->quiet = quiet;
}

void fat_progress_show(fat_progress *p, int force) {
  if (!p->tty || p->quiet) return;
  double t = fat_now_s();
  if (!force && t - p->last < PROGRESS_INTERVAL_S) return;
  p->last = t;
  char eta[32] = "";
  size_t left = p->evals_total - p->evals_done - p->evals_skipped;
  size_t measured = p->evals_done;
  int lanes = p->lanes > 1 ? p->lanes : 1;
  if (measured > 0) fmt_duration(p->eval_seconds / measured * left / lanes, eta, sizeof eta);
  fprintf(p->log, "\r\033[K[%s] compiled %zu/%zu, checked %zu/%zu (%zu failed, %zu resumed)%s%s",
          p->stage, p->compiled + p->cached, p->compile_total + p->cached,
          p->evals_done + p->evals_skipped, p->evals_total, p->eval_failed, p->evals_skipped,
          *eta ? ", ETA " : "", eta);
  fflush(p->log);
}

void fat_progress_end(fat_progress *p) {
  if (p->tty && !p->quiet) fprintf(p->log, "\r\033[K");
}
