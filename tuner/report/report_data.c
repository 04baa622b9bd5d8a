/* SPDX-License-Identifier: MIT */
/* `fatune report`'s data: everything the page shows of one GPU, read from
 * the database into report_int.h's records (report.c draws them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "report_int.h"

static int sql_fail(fat_db *db, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "cannot read %s: %s", what, sqlite3_errmsg(fat_db_handle(db)));
  return -1;
}

static rp_problem *find_problem(rp_data *d, sqlite3_int64 id) {
  for (size_t i = 0; i < d->n; i++)
    if (d->probs[i].id == id) return &d->probs[i];
  return NULL;
}

/* Every forward and backward problem, in the order the charts read. */
static int load_problems(fat_db *db, rp_data *d, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  size_t cap = 0;
  int rc, ret = -1;
  if (sqlite3_prepare_v2(fat_db_handle(db),
                         "SELECT id, direction, dtype, mask, head_dim, batch, heads, heads_k,"
                         " seqlen_q, seqlen_k, window_left, window_right, lengths, page_size"
                         " FROM problems"
                         /* same_group's key (report.c) first, so that each group is one run */
                         " ORDER BY direction = 'bwd', dtype, mask, head_dim, window_left,"
                         " window_right, lengths <> '', page_size, heads / heads_k,"
                         " seqlen_k != seqlen_q, CASE WHEN seqlen_k = seqlen_q THEN 0 ELSE"
                         " seqlen_k END, seqlen_q, seqlen_k, batch, heads, heads_k",
                         -1, &s, NULL) != SQLITE_OK) {
    sql_fail(db, "problems", err, errlen);
    goto out;
  }
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    if (d->n == cap) {
      size_t ncap = cap ? 2 * cap : 64;
      rp_problem *grown = realloc(d->probs, ncap * sizeof *grown);
      if (!grown) {
        snprintf(err, errlen, "cannot read problems: out of memory");
        goto out;
      }
      d->probs = grown;
      cap = ncap;
    }
    rp_problem *r = &d->probs[d->n++];
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(s, 0);
    fat_direction_parse((const char *)sqlite3_column_text(s, 1), &r->p.direction);
    fat_dtype_parse((const char *)sqlite3_column_text(s, 2), &r->p.dtype);
    fat_mask_parse((const char *)sqlite3_column_text(s, 3), &r->p.mask);
    r->p.head_dim = sqlite3_column_int(s, 4);
    r->p.batch = sqlite3_column_int(s, 5);
    r->p.heads = sqlite3_column_int(s, 6);
    r->p.heads_k = sqlite3_column_int(s, 7);
    r->p.seqlen_q = sqlite3_column_int(s, 8);
    r->p.seqlen_k = sqlite3_column_int(s, 9);
    r->p.window_left = sqlite3_column_int(s, 10);
    r->p.window_right = sqlite3_column_int(s, 11);
    const char *lengths = (const char *)sqlite3_column_text(s, 12);
    if (fat_lengths_parse(lengths ? lengths : "", &r->p.lengths, err, errlen)) goto out;
    r->p.page_size = sqlite3_column_int(s, 13);
    for (int k = 0; k < MAX_SERIES; k++) r->ms[k] = NAN;
    r->bench_ms = NAN;
  }
  if (rc != SQLITE_DONE) {
    sql_fail(db, "problems", err, errlen);
    goto out;
  }
  ret = 0;
out:
  sqlite3_finalize(s);
  return ret;
}

/* The fastest materialising variant per problem, by its latest live timing,
 * unless a live check of it failed (a wrong baseline is no baseline). */
static int load_materialize(fat_db *db, sqlite3_int64 gpu_id, rp_data *d, char *err,
                            size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc, ret = -1;
  if (sqlite3_prepare_v2(
          fat_db_handle(db),
          "SELECT t.problem_id, min(t.median_ms) FROM timings t"
          " JOIN variants v ON v.id = t.variant_id"
          " WHERE t.gpu_id = ?1 AND t.retired = 0 AND v.family = ?2"
          " AND t.id = (SELECT max(t2.id) FROM timings t2 WHERE t2.variant_id = t.variant_id"
          "   AND t2.gpu_id = ?1 AND t2.problem_id = t.problem_id AND t2.retired = 0)"
          " AND " FAT_SQL_LIVE_PASSING("", "t.variant_id", "?1", "t.problem_id")
          " GROUP BY t.problem_id",
          -1, &s, NULL) != SQLITE_OK) {
    sql_fail(db, "materialising baseline timings", err, errlen);
    goto out;
  }
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_text(s, 2, FAT_FAMILY_MATERIALIZE, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    rp_problem *r = find_problem(d, sqlite3_column_int64(s, 0));
    if (r) r->ms[S_MATERIALIZE] = sqlite3_column_double(s, 1);
  }
  if (rc != SQLITE_DONE) {
    sql_fail(db, "materialising baseline timings", err, errlen);
    goto out;
  }
  ret = 0;
out:
  sqlite3_finalize(s);
  return ret;
}

/* Display name of an external source. */
static const char *source_label(const char *source) {
  if (!strcmp(source, FAT_EXTERNAL_SDPA_FLASH)) return "SDPA FlashAttention-2";
  if (!strcmp(source, FAT_EXTERNAL_SDPA_CUDNN)) return "SDPA cuDNN";
  return source;
}

/* The latest timing per (problem, source) of external_timings: a series
 * per peer, and fatune's own time in the peers' benchmark. */
static int load_external(fat_db *db, sqlite3_int64 gpu_id, rp_data *d, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  char sources[MAX_SERIES][64] = {{0}};
  int rc, ret = -1;
  if (sqlite3_prepare_v2(fat_db_handle(db),
                         "SELECT e.problem_id, e.source, e.median_ms FROM external_timings e"
                         " WHERE e.gpu_id = ?1 AND e.id = (SELECT max(e2.id) FROM external_timings"
                         "   e2 WHERE e2.gpu_id = ?1 AND e2.problem_id = e.problem_id"
                         "   AND e2.source = e.source)"
                         " ORDER BY e.source <> ?2, e.source <> ?3, e.source, e.problem_id",
                         -1, &s, NULL) != SQLITE_OK) {
    sql_fail(db, "external timings", err, errlen);
    goto out;
  }
  sqlite3_bind_int64(s, 1, gpu_id);
  /* PyTorch's backends first, in a fixed order, then any other source. */
  sqlite3_bind_text(s, 2, FAT_EXTERNAL_SDPA_FLASH, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, FAT_EXTERNAL_SDPA_CUDNN, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *src = (const char *)sqlite3_column_text(s, 1);
    if (!strcmp(src, FAT_EXTERNAL_FATUNE_BENCH)) { /* fatune itself: the peers' yardstick */
      rp_problem *r = find_problem(d, sqlite3_column_int64(s, 0));
      if (r) r->bench_ms = sqlite3_column_double(s, 2);
      continue;
    }
    int k = S_FIRST_EXTERNAL;
    while (k < d->n_series && strcmp(sources[k], src)) k++;
    if (k == d->n_series) {
      if (k == MAX_SERIES) {
        /* Sources arrive sorted: count each dropped one once. */
        if (strcmp(sources[0], src)) d->dropped_sources++;
        snprintf(sources[0], sizeof sources[0], "%s", src);
        continue;
      }
      snprintf(sources[k], sizeof sources[k], "%s", src);
      snprintf(d->series[k], sizeof d->series[k], "%s", source_label(src));
      d->n_series++;
    }
    rp_problem *r = find_problem(d, sqlite3_column_int64(s, 0));
    if (r) r->ms[k] = sqlite3_column_double(s, 2);
  }
  if (rc != SQLITE_DONE) {
    sql_fail(db, "external timings", err, errlen);
    goto out;
  }
  ret = 0;
out:
  sqlite3_finalize(s);
  return ret;
}

static int load_gpu(fat_db *db, sqlite3_int64 gpu_id, rp_data *d, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int ret = -1;
  if (sqlite3_prepare_v2(fat_db_handle(db),
                         "SELECT name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major,"
                         " nvrtc_minor FROM gpus WHERE id = ?1",
                         -1, &s, NULL) != SQLITE_OK) {
    sql_fail(db, "GPUs", err, errlen);
    goto out;
  }
  sqlite3_bind_int64(s, 1, gpu_id);
  if (sqlite3_step(s) != SQLITE_ROW) {
    snprintf(err, errlen, "cannot read GPU %lld: no such row", (long long)gpu_id);
    goto out;
  }
  snprintf(d->gpu, sizeof d->gpu, "%s", (const char *)sqlite3_column_text(s, 0));
  int drv = sqlite3_column_int(s, 4);
  snprintf(d->gpu_detail, sizeof d->gpu_detail,
           "compute capability %d.%d, %d SMs, driver %d.%d, NVRTC %d.%d",
           sqlite3_column_int(s, 1), sqlite3_column_int(s, 2), sqlite3_column_int(s, 3),
           drv / 1000, drv % 1000 / 10, sqlite3_column_int(s, 5), sqlite3_column_int(s, 6));
  ret = 0;
out:
  sqlite3_finalize(s);
  return ret;
}

int fat_report_load(fat_db *db, sqlite3_int64 gpu_id, rp_data *d, char *err, size_t errlen) {
  fat_db_summary_row *rows = NULL;
  size_t n_rows = 0;
  int found, ret = -1;
  snprintf(d->series[S_WINNER], sizeof d->series[0], "fatune winner");
  snprintf(d->series[S_DEFAULT], sizeof d->series[0], "fatune default configuration");
  snprintf(d->series[S_MATERIALIZE], sizeof d->series[0], "materialising baseline");
  d->n_series = S_FIRST_EXTERNAL;
  if (load_gpu(db, gpu_id, d, err, errlen) || load_problems(db, d, err, errlen)) goto out;
  if (fat_db_summary(db, gpu_id, &rows, &n_rows)) goto db_fail;
  for (size_t i = 0; i < n_rows; i++) {
    rp_problem *r = find_problem(d, rows[i].problem_id);
    if (!r) continue;
    r->has_winner = 1;
    r->summary = rows[i];
    r->ms[S_WINNER] = rows[i].median_ms;
    r->ms[S_DEFAULT] = rows[i].default_ms;
    r->matrix_op = fat_family_matrix_op(rows[i].winner_family, rows[i].problem.direction);
  }
  if (load_materialize(db, gpu_id, d, err, errlen) || load_external(db, gpu_id, d, err, errlen))
    goto out;
  if (fat_db_get_ceiling(db, gpu_id, FAT_CEILING_COPY_BANDWIDTH, &d->bandwidth, NULL, 0, &found))
    goto db_fail;
  if (!found) d->bandwidth = 0;
  /* Each instruction's peak, the roof of the winners that issue it. */
  static const char *const rs_names[2] = {FAT_CEILING_WGMMA_RS_PEAK_FP16, FAT_CEILING_WGMMA_RS_PEAK_BF16};
  for (int t = FAT_FP16; t <= FAT_BF16; t++) {
    for (int op = FAT_MATRIX_MMA_SYNC; op < FAT_MATRIX_OP_COUNT; op++) {
      if (fat_db_get_ceiling(db, gpu_id, fat_ceiling_peak_name((fat_matrix_op)op, (fat_dtype)t),
                             &d->peak[op][t], NULL, 0, &found))
        goto db_fail;
      if (!found) d->peak[op][t] = 0;
    }
    if (fat_db_get_ceiling(db, gpu_id, rs_names[t], &d->wgmma_rs_peak[t], NULL, 0, &found))
      goto db_fail;
    if (!found) d->wgmma_rs_peak[t] = 0;
  }
  /* Keep only problems with something to show. */
  size_t kept = 0;
  for (size_t i = 0; i < d->n; i++) {
    int any = 0;
    for (int k = 0; k < d->n_series; k++) any |= !isnan(d->probs[i].ms[k]);
    if (any) d->probs[kept++] = d->probs[i];
  }
  d->n = kept;
  ret = 0;
  goto out;
db_fail:
  snprintf(err, errlen, "%s", fat_db_errmsg(db));
out:
  free(rows);
  return ret;
}
