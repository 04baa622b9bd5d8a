/* SPDX-License-Identifier: MIT */
/* The tuning database's rows (db.h): the puts and gets of GPUs, variants,
 * devices, builds, problems, checks and timings, the ranking and the winner,
 * forgetting for --retune, the summary, ceilings and external timings. Each
 * put is a single statement in autocommit mode, so it is committed (WAL)
 * before the function returns; the statements are prepared once per
 * connection and reset after every use. db.c opens the connection. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "db_int.h"
#include "kernel.h"
#include "sha256.h"

/* The columns of ST_GET_VARIANT's, ST_FIND_BUILD's and ST_SUMMARY's rows,
 * in their SELECT's order: a column added to one goes in both places. */
enum variant_col {
  VC_NAME, VC_FAMILY, VC_DIRECTION, VC_DTYPE, VC_MASK, VC_HEAD_DIM, VC_PARAMS, VC_ENTRY,
  VC_BLOCK_M, VC_THREADS, VC_SMEM_BYTES, VC_SOURCE_HASH, VC_SOURCE, VC_IS_DEFAULT
};
enum build_col {
  BC_ARCH, BC_OK, BC_CUBIN, BC_REGISTERS, BC_SMEM_STATIC, BC_STACK_FRAME, BC_SPILL_STORES,
  BC_SPILL_LOADS, BC_COMPILE_MS, BC_LOG
};
enum summary_col {
  SC_PROBLEM_ID, SC_DIRECTION, SC_DTYPE, SC_MASK, SC_HEAD_DIM, SC_BATCH, SC_HEADS, SC_HEADS_K,
  SC_SEQLEN_Q, SC_SEQLEN_K, SC_WINNER, SC_MEDIAN_MS, SC_TFLOPS, SC_REL_L2, SC_MAX_ABS,
  SC_SLOWEST_MS, SC_DEFAULT_MS, SC_DEFAULT_NAME, SC_N_PASSING, SC_N_FAILED, SC_MATERIALIZE_MS,
  SC_WINDOW_LEFT, SC_WINDOW_RIGHT, SC_LENGTHS, SC_WINNER_FAMILY, SC_PAGE_SIZE
};

/* The first key of every ranking: a drop (a screening stopped after its
 * first repetition, db.h's FAT_DROP_FACTOR) after every other timing. */
#define DROPS_LAST "t.reps < " FAT_SQL_SCREEN_REPS ", "

/* The candidates ranked by their latest live timing taken alone (no
 * timing_jobs row), a variant timed only in jobs by its latest; COLS adds
 * columns after rank_by's six, WHERE adds to the condition, TAIL follows
 * the order. */
#define RANK_ALONE_SQL(cols, where, tail)                                                        \
  "WITH latest AS (SELECT variant_id, max(id) AS id FROM timings"                                \
  "  WHERE gpu_id = ?1 AND problem_id = ?2 AND retired = 0 GROUP BY variant_id),"                \
  " alone AS (SELECT t.variant_id, max(t.id) AS id FROM timings t"                               \
  "  WHERE t.gpu_id = ?1 AND t.problem_id = ?2 AND t.retired = 0"                                \
  "  AND NOT EXISTS (SELECT 1 FROM timing_jobs j WHERE j.timing_id = t.id) GROUP BY t.variant_id)" \
  " SELECT t.variant_id, t.id, t.median_ms, t.tflops, v.name, t.reps" cols                       \
  " FROM latest l LEFT JOIN alone a ON a.variant_id = l.variant_id"                              \
  " JOIN timings t ON t.id = coalesce(a.id, l.id) JOIN variants v ON v.id = t.variant_id"        \
  " WHERE " FAT_SQL_LIVE_PASSING("", "t.variant_id", "?1", "?2")                                 \
  " AND v.family <> '" FAT_FAMILY_MATERIALIZE "'" where                                         \
  " ORDER BY " DROPS_LAST "t.median_ms, v.name" tail

/* The SQL of each prepared statement (enum stmt_id, db_int.h). */
static const char *const stmt_sql[ST_COUNT] = {
  [ST_PUT_GPU] =
    "INSERT INTO gpus (name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major,"
    " nvrtc_minor, mem_bytes, smem_per_block_optin, l2_bytes, clock_khz, mem_clock_khz)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    " ON CONFLICT (name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major, nvrtc_minor)"
    " DO UPDATE SET mem_bytes = excluded.mem_bytes,"
    " smem_per_block_optin = excluded.smem_per_block_optin, l2_bytes = excluded.l2_bytes,"
    " clock_khz = excluded.clock_khz, mem_clock_khz = excluded.mem_clock_khz"
    " RETURNING id",
  [ST_PUT_VARIANT] =
    "INSERT INTO variants (name, family, direction, dtype, mask, head_dim, params, entry,"
    " block_m, threads, smem_bytes, source_hash, source, is_default)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
    " ON CONFLICT (name, source_hash) DO UPDATE SET is_default = excluded.is_default"
    " RETURNING id",
  [ST_GET_VARIANT] =
    "SELECT name, family, direction, dtype, mask, head_dim, params, entry, block_m, threads,"
    " smem_bytes, source_hash, source, is_default FROM variants WHERE id = ?1",
  [ST_FIND_BUILD] =
    "SELECT arch, ok, cubin, registers, smem_static, stack_frame, spill_stores, spill_loads,"
    " compile_ms, log FROM builds WHERE key = ?1",
  [ST_PUT_BUILD] =
    "INSERT INTO builds (key, variant_id, arch, options, nvrtc_version, ok, cubin, registers,"
    " smem_static, stack_frame, spill_stores, spill_loads, compile_ms, log)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
    " ON CONFLICT (key) DO UPDATE SET variant_id = excluded.variant_id, arch = excluded.arch,"
    " options = excluded.options, nvrtc_version = excluded.nvrtc_version, ok = excluded.ok,"
    " cubin = excluded.cubin, registers = excluded.registers,"
    " smem_static = excluded.smem_static, stack_frame = excluded.stack_frame,"
    " spill_stores = excluded.spill_stores, spill_loads = excluded.spill_loads,"
    " compile_ms = excluded.compile_ms, log = excluded.log,"
    " created_at = excluded.created_at",
  [ST_PUT_PROBLEM] =
    "INSERT INTO problems (direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q,"
    " seqlen_k, window_left, window_right, lengths, page_size)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
    " ON CONFLICT (direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k,"
    " window_left, window_right, lengths, page_size)"
    " DO UPDATE SET head_dim = excluded.head_dim" /* no-op, so that RETURNING reports the row */
    " RETURNING id",
  [ST_PUT_CHECK] =
    "INSERT INTO checks (variant_id, gpu_id, problem_id, batch, heads, seqlen_q, seqlen_k,"
    " rel_l2, max_abs, lse_max_abs, nonfinite, passed, reason)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
  [ST_PUT_TIMING] =
    "INSERT INTO timings (variant_id, gpu_id, problem_id, reps, median_ms, min_ms, max_ms,"
    " p10_ms, p90_ms, tflops, sm_clock_mhz, device_id)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
  [ST_PUT_DEVICE] =
    "INSERT INTO devices (gpu_id, host, device_index, mem_bytes, clock_khz, mem_clock_khz)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT (gpu_id, host, device_index)"
    " DO UPDATE SET mem_bytes = excluded.mem_bytes, clock_khz = excluded.clock_khz,"
    " mem_clock_khz = excluded.mem_clock_khz, last_seen = excluded.last_seen"
    " RETURNING id",
  [ST_HAS_RESULT] =
    "SELECT"
    " (SELECT count(*) FROM checks WHERE variant_id = ?1 AND gpu_id = ?2 AND problem_id = ?3"
    "  AND retired = 0),"
    " (SELECT count(*) FROM checks WHERE variant_id = ?1 AND gpu_id = ?2 AND problem_id = ?3"
    "  AND retired = 0 AND passed = 0),"
    " (SELECT count(*) FROM timings WHERE variant_id = ?1 AND gpu_id = ?2 AND problem_id = ?3"
    "  AND retired = 0)",
  /* Each variant's latest live timing; a variant qualifies only with at least
   * one passing and no failing live check on this GPU and problem. The
   * materialising baseline is a yardstick, never a candidate. */
  [ST_RANK] =
    "WITH latest AS (SELECT variant_id, max(id) AS id FROM timings"
    "  WHERE gpu_id = ?1 AND problem_id = ?2 AND retired = 0 GROUP BY variant_id)"
    " SELECT t.variant_id, t.id, t.median_ms, t.tflops, v.name, t.reps"
    " FROM latest l JOIN timings t ON t.id = l.id JOIN variants v ON v.id = t.variant_id"
    " WHERE " FAT_SQL_LIVE_PASSING("", "t.variant_id", "?1", "?2")
    " AND v.family <> '" FAT_FAMILY_MATERIALIZE "'"
    " ORDER BY " DROPS_LAST "t.median_ms, v.name",
  [ST_PUT_JOB] = "INSERT INTO timing_jobs (timing_id, job) VALUES (?1, ?2)",
  /* As ST_RANK, by each variant's latest live timing taken alone (no
   * timing_jobs row); a variant timed only in jobs (merged from elsewhere)
   * by its latest. */
  [ST_RANK_ALONE] = RANK_ALONE_SQL("", "", ""),
  /* The same, the first of the variants whose dQ mode is deterministic
   * (separate or ordered): the deterministic backward's. */
  [ST_RANK_ALONE_DQ_DETERMINISTIC] =
    RANK_ALONE_SQL("", " AND " FAT_SQL_DQ_DETERMINISTIC("v.params"), " LIMIT 1"),
  /* The jobs with live timings of (GPU, problem), the newest first. */
  [ST_JOBS] =
    "SELECT j.job FROM timing_jobs j JOIN timings t ON t.id = j.timing_id"
    " WHERE t.gpu_id = ?1 AND t.problem_id = ?2 AND t.retired = 0"
    " GROUP BY j.job ORDER BY max(t.id) DESC",
  [ST_JOB_TIMINGS] =
    "SELECT t.variant_id, t.id, t.median_ms, t.tflops, t.reps, v.direction, v.params"
    " FROM timing_jobs j JOIN timings t ON t.id = j.timing_id"
    " JOIN variants v ON v.id = t.variant_id WHERE j.job = ?1 AND t.retired = 0",
  /* REPLACE deletes the old winner and inserts, so the schema's insert
   * triggers vet every winner. */
  [ST_SET_WINNER] =
    "INSERT OR REPLACE INTO winners (gpu_id, problem_id, variant_id, timing_id)"
    " VALUES (?1, ?2, ?3, ?4)",
  [ST_GET_WINNER] =
    "SELECT w.variant_id, w.timing_id, t.median_ms, t.tflops, v.name, t.reps FROM winners w"
    " JOIN timings t ON t.id = w.timing_id JOIN variants v ON v.id = w.variant_id"
    " WHERE w.gpu_id = ?1 AND w.problem_id = ?2",
  [ST_RETIRE_CHECKS] =
    "UPDATE checks SET retired = 1 WHERE gpu_id = ?1 AND problem_id = ?2 AND retired = 0",
  [ST_RETIRE_TIMINGS] =
    "UPDATE timings SET retired = 1 WHERE gpu_id = ?1 AND problem_id = ?2 AND retired = 0",
  [ST_DROP_WINNER] =
    "DELETE FROM winners WHERE gpu_id = ?1 AND problem_id = ?2",
  [ST_SUMMARY] =
    "WITH latest AS ("
    "  SELECT t.variant_id, t.problem_id, t.median_ms FROM timings t"
    "  WHERE t.gpu_id = ?1 AND t.retired = 0 AND t.id = (SELECT max(t2.id) FROM timings t2"
    "    WHERE t2.variant_id = t.variant_id AND t2.gpu_id = ?1"
    "      AND t2.problem_id = t.problem_id AND t2.retired = 0)),"
    " verdict AS ("
    "  SELECT variant_id, problem_id, min(passed) AS all_passed,"
    "    max(rel_l2) AS worst_rel_l2, max(max_abs) AS worst_max_abs"
    "  FROM checks WHERE gpu_id = ?1 AND retired = 0 GROUP BY variant_id, problem_id),"
    /* The materialising baseline is reported beside the candidates, not
     * among them: not in the slowest or default figures (it is counted in
     * the passed and failed counts: it was checked like any variant). */
    " passing_all AS ("
    "  SELECT l.variant_id, l.problem_id, l.median_ms, v.is_default, v.name, v.family"
    "  FROM latest l JOIN verdict d USING (variant_id, problem_id)"
    "  JOIN variants v ON v.id = l.variant_id WHERE d.all_passed = 1),"
    " passing AS (SELECT * FROM passing_all WHERE family <> '" FAT_FAMILY_MATERIALIZE "')"
    " SELECT p.id, p.direction, p.dtype, p.mask, p.head_dim, p.batch, p.heads, p.heads_k,"
    "  p.seqlen_q, p.seqlen_k, vw.name, tw.median_ms, tw.tflops,"
    "  d.worst_rel_l2, d.worst_max_abs,"
    "  (SELECT max(s.median_ms) FROM passing s WHERE s.problem_id = p.id),"
    "  (SELECT s.median_ms FROM passing s WHERE s.problem_id = p.id AND s.is_default = 1"
    "    ORDER BY s.median_ms, s.name LIMIT 1),"
    "  (SELECT s.name FROM passing s WHERE s.problem_id = p.id AND s.is_default = 1"
    "    ORDER BY s.median_ms, s.name LIMIT 1),"
    "  (SELECT count(*) FROM passing_all s WHERE s.problem_id = p.id),"
    "  (SELECT count(*) FROM verdict f WHERE f.problem_id = p.id AND f.all_passed = 0),"
    "  (SELECT min(s.median_ms) FROM passing_all s WHERE s.problem_id = p.id"
    "    AND s.family = '" FAT_FAMILY_MATERIALIZE "'),"
    "  p.window_left, p.window_right, p.lengths, vw.family, p.page_size"
    " FROM winners w"
    " JOIN problems p ON p.id = w.problem_id"
    " JOIN variants vw ON vw.id = w.variant_id"
    " JOIN timings tw ON tw.id = w.timing_id"
    " LEFT JOIN verdict d ON d.variant_id = w.variant_id AND d.problem_id = w.problem_id"
    " WHERE w.gpu_id = ?1"
    " ORDER BY p.direction = 'bwd', p.dtype, p.mask, p.head_dim, p.window_left,"
    "  p.window_right, p.lengths <> '', p.page_size, p.seqlen_q, p.seqlen_k, p.batch, p.heads,"
    "  p.heads_k, p.lengths",
  /* Every candidate as ST_RANK_ALONE ranks it, with the most repetitions
   * of any of its live timings: what an elimination is found among. */
  [ST_RANK_ALONE_ALL] =
    RANK_ALONE_SQL(", (SELECT max(f.reps) FROM timings f WHERE f.variant_id = t.variant_id"
                   " AND f.gpu_id = ?1 AND f.problem_id = ?2 AND f.retired = 0)", "", ""),
  [ST_DROP_ELIMINATIONS] =
    "DELETE FROM eliminations WHERE gpu_id = ?1 AND problem_id = ?2",
  [ST_PUT_ELIMINATION] =
    "INSERT INTO eliminations (gpu_id, problem_id, variant_id, timing_id, best_timing_id, ratio,"
    " reps) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
  /* The closest first. */
  [ST_ELIMINATIONS] =
    "SELECT v.name, t.median_ms, e.ratio, e.reps, bv.name, b.median_ms FROM eliminations e"
    " JOIN variants v ON v.id = e.variant_id JOIN timings t ON t.id = e.timing_id"
    " JOIN timings b ON b.id = e.best_timing_id JOIN variants bv ON bv.id = b.variant_id"
    " WHERE e.gpu_id = ?1 AND e.problem_id = ?2 ORDER BY e.ratio, v.name",
  [ST_PUT_BUILD_HASH] =
    "INSERT INTO build_hashes (build_key, cubin_sha256) VALUES (?1, ?2)"
    " ON CONFLICT (build_key) DO UPDATE SET cubin_sha256 = excluded.cubin_sha256",
  [ST_DROP_BUILD_HASH] =
    "DELETE FROM build_hashes WHERE build_key = ?1",
};

/* The cached statement ID, prepared on first use; NULL with db->err set. */
/* The columns the statements read by name return, as their enums count
 * them: a statement whose SELECT and enum disagree is refused when it is
 * first prepared. */
static const int stmt_columns[ST_COUNT] = {
  [ST_GET_VARIANT] = VC_IS_DEFAULT + 1,
  [ST_FIND_BUILD] = BC_LOG + 1,
  [ST_SUMMARY] = SC_PAGE_SIZE + 1,
};

static sqlite3_stmt *stmt(fat_db *db, enum stmt_id id) {
  if (db->st[id]) return db->st[id];
  if (sqlite3_prepare_v3(db->h, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &db->st[id], NULL) !=
      SQLITE_OK) {
    fail(db, "cannot prepare statement %d on %s", (int)id, db->path);
    return NULL;
  }
  if (stmt_columns[id] && sqlite3_column_count(db->st[id]) != stmt_columns[id]) {
    snprintf(db->err, sizeof db->err, "statement %d returns %d columns, its enum names %d", (int)id,
             sqlite3_column_count(db->st[id]), stmt_columns[id]);
    sqlite3_finalize(db->st[id]);
    db->st[id] = NULL;
    return NULL;
  }
  return db->st[id];
}

/* Makes S reusable; its error, if any, was read before this. */
static void release(sqlite3_stmt *s) {
  if (!s) return;
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
}

/* Runs an INSERT ... RETURNING id to completion (completion is the commit)
 * and stores the id. Returns the failing SQLite code or SQLITE_OK. */
static int step_returning_id(sqlite3_stmt *s, sqlite3_int64 *id) {
  int rc = sqlite3_step(s);
  if (rc != SQLITE_ROW) return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
  if (id) *id = sqlite3_column_int64(s, 0);
  rc = sqlite3_step(s);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int fat_db_put_gpu(fat_db *db, const fat_gpu_info *g, sqlite3_int64 *id) {
  sqlite3_stmt *s = stmt(db, ST_PUT_GPU);
  if (!s) return -1;
  sqlite3_bind_text(s, 1, g->name, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, g->cc_major);
  sqlite3_bind_int(s, 3, g->cc_minor);
  sqlite3_bind_int(s, 4, g->sm_count);
  sqlite3_bind_int(s, 5, g->driver_version);
  sqlite3_bind_int(s, 6, g->nvrtc_major);
  sqlite3_bind_int(s, 7, g->nvrtc_minor);
  sqlite3_bind_int64(s, 8, (sqlite3_int64)g->mem_bytes);
  sqlite3_bind_int(s, 9, g->smem_per_block_optin);
  sqlite3_bind_int(s, 10, g->l2_bytes);
  sqlite3_bind_int(s, 11, g->clock_khz);
  sqlite3_bind_int(s, 12, g->mem_clock_khz);
  int ret = 0;
  if (step_returning_id(s, id) != SQLITE_OK)
    ret = fail(db, "cannot store GPU '%s' (cc %d.%d, %d SMs, driver %d, NVRTC %d.%d)", g->name,
               g->cc_major, g->cc_minor, g->sm_count, g->driver_version, g->nvrtc_major,
               g->nvrtc_minor);
  release(s);
  return ret;
}

int fat_db_put_device(fat_db *db, sqlite3_int64 gpu_id, const char *host, int device_index,
                      const fat_gpu_info *g, sqlite3_int64 *id) {
  sqlite3_stmt *s = stmt(db, ST_PUT_DEVICE);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_text(s, 2, host, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 3, device_index);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)g->mem_bytes);
  sqlite3_bind_int(s, 5, g->clock_khz);
  sqlite3_bind_int(s, 6, g->mem_clock_khz);
  int ret = 0;
  if (step_returning_id(s, id) != SQLITE_OK)
    ret = fail(db, "cannot store device %d of host '%s' (gpu %lld, %s)", device_index,
               host ? host : "(null)", (long long)gpu_id, g->name);
  release(s);
  return ret;
}

int fat_db_put_variant(fat_db *db, const fat_variant *v, sqlite3_int64 *id) {
  sqlite3_stmt *s = stmt(db, ST_PUT_VARIANT);
  if (!s) return -1;
  sqlite3_bind_text(s, 1, v->name, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, v->family, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, fat_direction_name(v->direction), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 4, fat_dtype_name(v->dtype), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 5, fat_mask_name(v->mask), -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 6, v->head_dim);
  sqlite3_bind_text(s, 7, v->params, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 8, v->entry, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 9, v->block_m);
  sqlite3_bind_int(s, 10, v->threads);
  sqlite3_bind_int(s, 11, v->smem_bytes);
  sqlite3_bind_text(s, 12, v->hash, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 13, v->source, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 14, v->is_default ? 1 : 0);
  int ret = 0;
  if (step_returning_id(s, id) != SQLITE_OK)
    ret = fail(db, "cannot store variant %s (source %.12s)", v->name ? v->name : "(null)", v->hash);
  release(s);
  return ret;
}

/* strdup of a column, "" for NULL; NULL only when out of memory. */
static char *column_dup(sqlite3_stmt *s, int col) {
  const char *t = (const char *)sqlite3_column_text(s, col);
  return strdup(t ? t : "");
}

int fat_db_get_variant(fat_db *db, sqlite3_int64 id, fat_variant *v, int *found) {
  int ret = -1;
  memset(v, 0, sizeof *v);
  *found = 0;
  sqlite3_stmt *s = stmt(db, ST_GET_VARIANT);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, id);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    ret = 0;
    goto out;
  }
  if (rc != SQLITE_ROW) {
    fail(db, "cannot read variant %lld", (long long)id);
    goto out;
  }
  v->name = column_dup(s, VC_NAME);
  v->family = column_dup(s, VC_FAMILY);
  v->params = column_dup(s, VC_PARAMS);
  v->entry = column_dup(s, VC_ENTRY);
  v->source = column_dup(s, VC_SOURCE);
  if (!v->name || !v->family || !v->params || !v->entry || !v->source) {
    snprintf(db->err, sizeof db->err, "cannot read variant %lld: out of memory", (long long)id);
    fat_variant_free(v);
    goto out;
  }
  /* The schema's CHECKs guarantee these names parse. */
  fat_direction_parse((const char *)sqlite3_column_text(s, VC_DIRECTION), &v->direction);
  fat_dtype_parse((const char *)sqlite3_column_text(s, VC_DTYPE), &v->dtype);
  fat_mask_parse((const char *)sqlite3_column_text(s, VC_MASK), &v->mask);
  v->head_dim = sqlite3_column_int(s, VC_HEAD_DIM);
  v->block_m = sqlite3_column_int(s, VC_BLOCK_M);
  v->threads = sqlite3_column_int(s, VC_THREADS);
  v->smem_bytes = sqlite3_column_int(s, VC_SMEM_BYTES);
  snprintf(v->hash, sizeof v->hash, "%s", (const char *)sqlite3_column_text(s, VC_SOURCE_HASH));
  v->is_default = sqlite3_column_int(s, VC_IS_DEFAULT);
  *found = 1;
  ret = 0;
out:
  release(s);
  return ret;
}

int fat_db_find_build(fat_db *db, const char *key, fat_build *b, int *found) {
  int ret = -1;
  memset(b, 0, sizeof *b);
  *found = 0;
  sqlite3_stmt *s = stmt(db, ST_FIND_BUILD);
  if (!s) return -1;
  sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    ret = 0;
    goto out;
  }
  if (rc != SQLITE_ROW) {
    fail(db, "cannot read build %s", key);
    goto out;
  }
  snprintf(b->arch, sizeof b->arch, "%s", (const char *)sqlite3_column_text(s, BC_ARCH));
  snprintf(b->key, sizeof b->key, "%s", key);
  b->ok = sqlite3_column_int(s, BC_OK);
  const void *blob = sqlite3_column_blob(s, BC_CUBIN);
  size_t size = (size_t)sqlite3_column_bytes(s, BC_CUBIN);
  if (blob && size) {
    if (!(b->cubin = malloc(size))) {
      snprintf(db->err, sizeof db->err, "cannot read build %s: out of memory for %zu bytes", key, size);
      goto out;
    }
    memcpy(b->cubin, blob, size);
    b->cubin_size = size;
  }
  b->registers = sqlite3_column_int(s, BC_REGISTERS);
  b->smem_static = sqlite3_column_int(s, BC_SMEM_STATIC);
  b->stack_frame = sqlite3_column_int(s, BC_STACK_FRAME);
  b->spill_stores = sqlite3_column_int(s, BC_SPILL_STORES);
  b->spill_loads = sqlite3_column_int(s, BC_SPILL_LOADS);
  b->compile_ms = sqlite3_column_double(s, BC_COMPILE_MS);
  if (!(b->log = column_dup(s, BC_LOG))) {
    snprintf(db->err, sizeof db->err, "cannot read build %s: out of memory", key);
    goto out;
  }
  *found = 1;
  ret = 0;
out:
  if (ret) fat_build_free(b);
  release(s);
  return ret;
}

int fat_db_put_build(fat_db *db, sqlite3_int64 variant_id, const fat_build *b,
                     const char *options, const char *nvrtc_version) {
  sqlite3_stmt *s = stmt(db, ST_PUT_BUILD);
  if (!s) return -1;
  sqlite3_bind_text(s, 1, b->key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 2, variant_id);
  sqlite3_bind_text(s, 3, b->arch, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 4, options, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 5, nvrtc_version, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 6, b->ok ? 1 : 0);
  if (b->cubin && b->cubin_size)
    sqlite3_bind_blob64(s, 7, b->cubin, b->cubin_size, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 7);
  sqlite3_bind_int(s, 8, b->registers);
  sqlite3_bind_int(s, 9, b->smem_static);
  sqlite3_bind_int(s, 10, b->stack_frame);
  sqlite3_bind_int(s, 11, b->spill_stores);
  sqlite3_bind_int(s, 12, b->spill_loads);
  sqlite3_bind_double(s, 13, b->compile_ms);
  sqlite3_bind_text(s, 14, b->log ? b->log : "", -1, SQLITE_STATIC);
  /* The build and its cubin's hash commit together (one savepoint), so a
   * cubin is never stored with another cubin's hash. */
  int ret = 0;
  if (exec(db, "SAVEPOINT put_build") != SQLITE_OK) {
    release(s);
    return fail(db, "cannot store build %s", b->key);
  }
  if (sqlite3_step(s) != SQLITE_DONE)
    ret = fail(db, "cannot store build %s (variant %lld, %s)", b->key, (long long)variant_id, b->arch);
  release(s);
  if (ret == 0) {
    int has_cubin = b->cubin && b->cubin_size;
    char hex[FAT_SHA256_HEX_CHARS + 1];
    sqlite3_stmt *h = stmt(db, has_cubin ? ST_PUT_BUILD_HASH : ST_DROP_BUILD_HASH);
    if (!h) ret = -1;
    else {
      sqlite3_bind_text(h, 1, b->key, -1, SQLITE_STATIC);
      if (has_cubin) {
        fat_sha256_hex(b->cubin, b->cubin_size, hex);
        sqlite3_bind_text(h, 2, hex, -1, SQLITE_STATIC);
      }
      if (sqlite3_step(h) != SQLITE_DONE) ret = fail(db, "cannot store the cubin hash of build %s", b->key);
      release(h);
    }
  }
  if (ret == 0 && exec(db, "RELEASE put_build") != SQLITE_OK)
    ret = fail(db, "cannot commit build %s", b->key);
  if (ret) {
    exec(db, "ROLLBACK TO put_build");
    exec(db, "RELEASE put_build");
  }
  return ret;
}

int fat_db_put_problem(fat_db *db, const fat_problem *p, sqlite3_int64 *id) {
  sqlite3_stmt *s = stmt(db, ST_PUT_PROBLEM);
  if (!s) return -1;
  sqlite3_bind_text(s, 1, fat_direction_name(p->direction), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, fat_dtype_name(p->dtype), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, fat_mask_name(p->mask), -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 4, p->head_dim);
  sqlite3_bind_int(s, 5, p->batch);
  sqlite3_bind_int(s, 6, p->heads);
  sqlite3_bind_int(s, 7, p->heads_k);
  sqlite3_bind_int(s, 8, p->seqlen_q);
  sqlite3_bind_int(s, 9, p->seqlen_k);
  sqlite3_bind_int(s, 10, p->window_left);
  sqlite3_bind_int(s, 11, p->window_right);
  char lengths[FAT_LENGTHS_TEXT_CAP];
  fat_lengths_text(p, lengths);
  sqlite3_bind_text(s, 12, lengths, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 13, p->page_size);
  int ret = 0;
  if (step_returning_id(s, id) != SQLITE_OK)
    ret = fail(db, "cannot store problem %s %s %s d%d b%d h%d/%d sq%d sk%d w%d,%d%s%.60s%s%.0d",
               fat_direction_name(p->direction), fat_dtype_name(p->dtype), fat_mask_name(p->mask),
               p->head_dim, p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k,
               p->window_left, p->window_right, lengths[0] ? " lengths " : "", lengths,
               p->page_size ? " page_size " : "", p->page_size);
  release(s);
  return ret;
}

int fat_db_put_check(fat_db *db, sqlite3_int64 variant_id, sqlite3_int64 gpu_id,
                     sqlite3_int64 problem_id, const fat_check *c) {
  sqlite3_stmt *s = stmt(db, ST_PUT_CHECK);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, variant_id);
  sqlite3_bind_int64(s, 2, gpu_id);
  sqlite3_bind_int64(s, 3, problem_id);
  sqlite3_bind_int(s, 4, c->batch);
  sqlite3_bind_int(s, 5, c->heads);
  sqlite3_bind_int(s, 6, c->seqlen_q);
  sqlite3_bind_int(s, 7, c->seqlen_k);
  /* sqlite3_bind_double binds NaN as NULL; the schema reads NULL as NaN. */
  sqlite3_bind_double(s, 8, c->rel_l2);
  sqlite3_bind_double(s, 9, c->max_abs);
  sqlite3_bind_double(s, 10, c->lse_max_abs);
  sqlite3_bind_int64(s, 11, c->nonfinite);
  sqlite3_bind_int(s, 12, c->passed ? 1 : 0);
  sqlite3_bind_text(s, 13, c->reason, -1, SQLITE_STATIC);
  int ret = 0;
  if (sqlite3_step(s) != SQLITE_DONE)
    ret = fail(db, "cannot store check of variant %lld on gpu %lld, problem %lld (%s)",
               (long long)variant_id, (long long)gpu_id, (long long)problem_id, c->reason);
  release(s);
  return ret;
}

int fat_db_put_timing(fat_db *db, sqlite3_int64 variant_id, sqlite3_int64 gpu_id,
                      sqlite3_int64 problem_id, const fat_timing *t, sqlite3_int64 *id) {
  return fat_db_put_timing_on(db, variant_id, gpu_id, 0, problem_id, t, id);
}

int fat_db_put_timing_on(fat_db *db, sqlite3_int64 variant_id, sqlite3_int64 gpu_id,
                         sqlite3_int64 device_id, sqlite3_int64 problem_id, const fat_timing *t,
                         sqlite3_int64 *id) {
  sqlite3_stmt *s = stmt(db, ST_PUT_TIMING);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, variant_id);
  sqlite3_bind_int64(s, 2, gpu_id);
  sqlite3_bind_int64(s, 3, problem_id);
  sqlite3_bind_int(s, 4, t->reps);
  sqlite3_bind_double(s, 5, t->median_ms);
  sqlite3_bind_double(s, 6, t->min_ms);
  sqlite3_bind_double(s, 7, t->max_ms);
  sqlite3_bind_double(s, 8, t->p10_ms);
  sqlite3_bind_double(s, 9, t->p90_ms);
  sqlite3_bind_double(s, 10, t->tflops);
  sqlite3_bind_int(s, 11, t->sm_clock_mhz);
  if (device_id > 0)
    sqlite3_bind_int64(s, 12, device_id);
  else
    sqlite3_bind_null(s, 12);
  int ret = 0;
  if (sqlite3_step(s) != SQLITE_DONE) {
    char device[48] = "";
    if (device_id > 0) snprintf(device, sizeof device, ", device %lld", (long long)device_id);
    ret = fail(db, "cannot store timing of variant %lld on gpu %lld%s, problem %lld (median %g ms)",
               (long long)variant_id, (long long)gpu_id, device, (long long)problem_id,
               t->median_ms);
  } else if (id) {
    *id = sqlite3_last_insert_rowid(db->h);
  }
  release(s);
  return ret;
}

int fat_db_has_result(fat_db *db, sqlite3_int64 variant_id, sqlite3_int64 gpu_id,
                      sqlite3_int64 problem_id, int *checked, int *passed, int *timed) {
  sqlite3_stmt *s = stmt(db, ST_HAS_RESULT);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, variant_id);
  sqlite3_bind_int64(s, 2, gpu_id);
  sqlite3_bind_int64(s, 3, problem_id);
  int ret = 0;
  if (sqlite3_step(s) != SQLITE_ROW) {
    ret = fail(db, "cannot read results of variant %lld on gpu %lld, problem %lld",
               (long long)variant_id, (long long)gpu_id, (long long)problem_id);
  } else {
    sqlite3_int64 n_checks = sqlite3_column_int64(s, 0);
    sqlite3_int64 n_failed = sqlite3_column_int64(s, 1);
    sqlite3_int64 n_timings = sqlite3_column_int64(s, 2);
    if (checked) *checked = n_checks > 0;
    if (passed) *passed = n_checks > 0 && n_failed == 0;
    if (timed) *timed = n_timings > 0;
  }
  release(s);
  return ret;
}

/* The rows of ranking statement ID for (GPU_ID, PROBLEM_ID) into OUT. */
static int rank_by(fat_db *db, enum stmt_id id, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                   fat_db_choice *out, size_t cap, size_t *n) {
  *n = 0;
  sqlite3_stmt *s = stmt(db, id);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_int64(s, 2, problem_id);
  int rc = SQLITE_DONE;
  while (*n < cap && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    fat_db_choice *c = &out[(*n)++];
    c->variant_id = sqlite3_column_int64(s, 0);
    c->timing_id = sqlite3_column_int64(s, 1);
    c->median_ms = sqlite3_column_double(s, 2);
    c->tflops = sqlite3_column_double(s, 3);
    snprintf(c->name, sizeof c->name, "%s", (const char *)sqlite3_column_text(s, 4));
    c->reps = sqlite3_column_int(s, 5);
  }
  int ret = 0;
  if (*n < cap && rc != SQLITE_DONE)
    ret = fail(db, "cannot rank variants on gpu %lld, problem %lld", (long long)gpu_id,
               (long long)problem_id);
  release(s);
  return ret;
}

int fat_db_rank(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                fat_db_choice *out, size_t cap, size_t *n) {
  return rank_by(db, ST_RANK, gpu_id, problem_id, out, cap, n);
}

int fat_db_best_deterministic(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                              fat_db_choice *out, int *found) {
  size_t n = 0;
  memset(out, 0, sizeof *out);
  int ret = rank_by(db, ST_RANK_ALONE_DQ_DETERMINISTIC, gpu_id, problem_id, out, 1, &n);
  *found = n == 1;
  return ret;
}

_Static_assert(FAT_FULL_REPS == 20, "FAT_SQL_FULL_REPS spells FAT_FULL_REPS");
_Static_assert(FAT_SCREEN_REPS == 5, "FAT_SQL_SCREEN_REPS spells FAT_SCREEN_REPS");
_Static_assert(FAT_SCREEN_REPS > 1 && FAT_SCREEN_REPS < FAT_FULL_REPS,
               "a screening has fewer, a drop fewer still");

double fat_db_contender_margin(const fat_db_choice *best, const fat_db_choice *c) {
  return best->reps < FAT_FULL_REPS || c->reps < FAT_FULL_REPS ? FAT_SCREEN_CONTENDER
                                                               : FAT_CLOSE_CONTENDER;
}

int fat_db_contenders(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                      fat_db_choice *out, size_t cap, size_t *n) {
  if (rank_by(db, ST_RANK_ALONE, gpu_id, problem_id, out, cap, n)) return -1;
  size_t close = 0;
  /* Drops rank last: the first is one only when every candidate is. */
  for (size_t k = 0; k < *n && !fat_db_dropped(&out[0]); k++)
    if (!fat_db_dropped(&out[k]) &&
        out[k].median_ms <= out[0].median_ms * (1 + fat_db_contender_margin(&out[0], &out[k])))
      out[close++] = out[k];
  *n = close;
  return 0;
}

int fat_db_put_job_timings(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 device_id,
                           sqlite3_int64 problem_id, size_t n, const sqlite3_int64 *variant_ids,
                           const fat_timing *t, sqlite3_int64 *job) {
  int ret = 0;
  sqlite3_int64 first = 0;
  if (exec(db, "SAVEPOINT put_job") != SQLITE_OK)
    return fail(db, "cannot begin storing a job on gpu %lld, problem %lld", (long long)gpu_id,
                (long long)problem_id);
  for (size_t i = 0; i < n && !ret; i++) {
    sqlite3_int64 id;
    if ((ret = fat_db_put_timing_on(db, variant_ids[i], gpu_id, device_id, problem_id, &t[i], &id)))
      break;
    if (i == 0) first = id;
    sqlite3_stmt *s = stmt(db, ST_PUT_JOB);
    if (!s) {
      ret = -1;
      break;
    }
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, first);
    if (sqlite3_step(s) != SQLITE_DONE)
      ret = fail(db, "cannot store timing %lld in job %lld", (long long)id, (long long)first);
    release(s);
  }
  if (ret == 0 && exec(db, "RELEASE put_job") != SQLITE_OK)
    ret = fail(db, "cannot commit the job's timings on gpu %lld, problem %lld", (long long)gpu_id,
               (long long)problem_id);
  if (ret) {
    exec(db, "ROLLBACK TO put_job");
    exec(db, "RELEASE put_job");
  } else if (job) {
    *job = first;
  }
  return ret;
}

int fat_db_launch_splits(const char *direction, const char *params) {
  int pack_gqa = 0, splits = 1;
  char err[128];
  return direction && params && !strcmp(direction, "fwd") &&
         !fat_fwd_params_parse(params, &pack_gqa, &splits, err, sizeof err) && splits == 0;
}

/* The winner among contenders C (N of them, C[0] the fastest alone): the
 * fastest of them in the newest job that timed C[0] -- or that job's
 * fastest with launch-chosen splits, within FAT_LAUNCH_SPLITS_TIE of it
 * -- into OUT; C[0] itself when no job did. */
static int winner_of_contenders(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                                const fat_db_choice *c, size_t n, fat_db_choice *out) {
  *out = c[0];
  if (n < 1) return 0;
  sqlite3_int64 jobs[FAT_DB_MAX_JOBS_READ];
  size_t n_jobs = 0;
  sqlite3_stmt *s = stmt(db, ST_JOBS);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_int64(s, 2, problem_id);
  int rc = SQLITE_DONE;
  while (n_jobs < FAT_DB_MAX_JOBS_READ && (rc = sqlite3_step(s)) == SQLITE_ROW)
    jobs[n_jobs++] = sqlite3_column_int64(s, 0);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    fail(db, "cannot read the jobs on gpu %lld, problem %lld", (long long)gpu_id,
         (long long)problem_id);
    release(s);
    return -1;
  }
  release(s);
  for (size_t k = 0; k < n_jobs; k++) {
    /* The job's fastest contender, and its fastest whose launch chooses
     * the key splits. */
    fat_db_choice best, best_launch;
    int has_first = 0, has_best = 0, has_launch = 0, best_is_launch = 0;
    if (!(s = stmt(db, ST_JOB_TIMINGS))) return -1;
    sqlite3_bind_int64(s, 1, jobs[k]);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      const sqlite3_int64 v = sqlite3_column_int64(s, 0);
      const double ms = sqlite3_column_double(s, 2);
      size_t i = 0;
      while (i < n && c[i].variant_id != v) i++;
      if (i == n) continue;  /* not a contender now */
      has_first |= i == 0;
      fat_db_choice here = c[i];
      here.timing_id = sqlite3_column_int64(s, 1);
      here.median_ms = ms;
      here.tflops = sqlite3_column_double(s, 3);
      here.reps = sqlite3_column_int(s, 4);
      const int is_launch = fat_db_launch_splits((const char *)sqlite3_column_text(s, 5),
                                                 (const char *)sqlite3_column_text(s, 6));
      /* Faster, or as fast and first by name (ST_RANK's tie rule). */
      if (!has_best || ms < best.median_ms ||
          (ms == best.median_ms && strcmp(c[i].name, best.name) < 0)) {
        best = here;
        best_is_launch = is_launch;
        has_best = 1;
      }
      if (is_launch && (!has_launch || ms < best_launch.median_ms ||
                        (ms == best_launch.median_ms && strcmp(c[i].name, best_launch.name) < 0))) {
        best_launch = here;
        has_launch = 1;
      }
    }
    if (rc != SQLITE_DONE) {
      fail(db, "cannot read job %lld on gpu %lld, problem %lld", (long long)jobs[k],
           (long long)gpu_id, (long long)problem_id);
      release(s);
      return -1;
    }
    release(s);
    if (has_first) {
      *out = has_launch && !best_is_launch &&
                     best_launch.median_ms <= best.median_ms * (1.0 + FAT_LAUNCH_SPLITS_TIE)
                 ? best_launch
                 : best;
      return 0;
    }
  }
  return 0;
}

int fat_db_best(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                fat_db_choice *out, int *found) {
  size_t n = 0;
  memset(out, 0, sizeof *out);
  int ret = fat_db_rank(db, gpu_id, problem_id, out, 1, &n);
  *found = n == 1;
  return ret;
}

int fat_db_set_winner(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                      sqlite3_int64 variant_id, sqlite3_int64 timing_id) {
  sqlite3_stmt *s = stmt(db, ST_SET_WINNER);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_int64(s, 2, problem_id);
  sqlite3_bind_int64(s, 3, variant_id);
  sqlite3_bind_int64(s, 4, timing_id);
  int ret = 0;
  if (sqlite3_step(s) != SQLITE_DONE)
    ret = fail(db, "cannot make variant %lld (timing %lld) the winner on gpu %lld, problem %lld",
               (long long)variant_id, (long long)timing_id, (long long)gpu_id, (long long)problem_id);
  release(s);
  return ret;
}

int fat_db_get_winner(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                      fat_db_choice *out, int *found) {
  memset(out, 0, sizeof *out);
  *found = 0;
  sqlite3_stmt *s = stmt(db, ST_GET_WINNER);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_int64(s, 2, problem_id);
  int ret = 0, rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    *found = 1;
    out->variant_id = sqlite3_column_int64(s, 0);
    out->timing_id = sqlite3_column_int64(s, 1);
    out->median_ms = sqlite3_column_double(s, 2);
    out->tflops = sqlite3_column_double(s, 3);
    snprintf(out->name, sizeof out->name, "%s", (const char *)sqlite3_column_text(s, 4));
    out->reps = sqlite3_column_int(s, 5);
  } else if (rc != SQLITE_DONE) {
    ret = fail(db, "cannot read the winner on gpu %lld, problem %lld", (long long)gpu_id,
               (long long)problem_id);
  }
  release(s);
  return ret;
}

/* Replaces the eliminations of (GPU_ID, PROBLEM_ID) by those of the
 * decision among contenders C (N of them, C[0] the best by its timing
 * alone): every candidate of the ranking alone that is none of them and
 * has no full timing, against C[0]. */
static int record_eliminations(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                               const fat_db_choice *c, size_t n) {
  sqlite3_stmt *drop = stmt(db, ST_DROP_ELIMINATIONS);
  if (!drop) return -1;
  sqlite3_bind_int64(drop, 1, gpu_id);
  sqlite3_bind_int64(drop, 2, problem_id);
  int ret = 0;
  if (sqlite3_step(drop) != SQLITE_DONE)
    ret = fail(db, "cannot remove the eliminations on gpu %lld, problem %lld", (long long)gpu_id,
               (long long)problem_id);
  release(drop);
  if (ret) return ret;
  sqlite3_stmt *s = stmt(db, ST_RANK_ALONE_ALL);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_int64(s, 2, problem_id);
  int rc;
  while (!ret && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    const sqlite3_int64 v = sqlite3_column_int64(s, 0), t = sqlite3_column_int64(s, 1);
    const double ms = sqlite3_column_double(s, 2);
    const int reps = sqlite3_column_int(s, 5), most = sqlite3_column_int(s, 6);
    size_t k = 0;
    while (k < n && c[k].variant_id != v) k++;
    if (k < n || most >= FAT_FULL_REPS) continue;  /* a contender, or timed in full */
    sqlite3_stmt *put = stmt(db, ST_PUT_ELIMINATION);
    if (!put) {
      ret = -1;
      break;
    }
    sqlite3_bind_int64(put, 1, gpu_id);
    sqlite3_bind_int64(put, 2, problem_id);
    sqlite3_bind_int64(put, 3, v);
    sqlite3_bind_int64(put, 4, t);
    sqlite3_bind_int64(put, 5, c[0].timing_id);
    sqlite3_bind_double(put, 6, ms / c[0].median_ms);
    sqlite3_bind_int(put, 7, reps);
    if (sqlite3_step(put) != SQLITE_DONE)
      ret = fail(db, "cannot store the elimination of variant %lld (%g ms, %d repetitions) on gpu"
                 " %lld, problem %lld", (long long)v, ms, reps, (long long)gpu_id,
                 (long long)problem_id);
    release(put);
  }
  if (!ret && rc != SQLITE_DONE)
    ret = fail(db, "cannot rank variants on gpu %lld, problem %lld", (long long)gpu_id,
               (long long)problem_id);
  release(s);
  return ret;
}

int fat_db_decide_winner(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                         fat_db_choice *out, int *found, int *changed) {
  fat_db_choice stored, c[FAT_DB_MAX_CONTENDERS];
  size_t n = 0;
  int has_stored = 0, ret = -1, set = 0;
  if (changed) *changed = 0;
  memset(out, 0, sizeof *out);
  *found = 0;
  if (fat_db_contenders(db, gpu_id, problem_id, c, FAT_DB_MAX_CONTENDERS, &n) ||
      fat_db_get_winner(db, gpu_id, problem_id, &stored, &has_stored))
    return -1;
  if (n == 0) return 0;
  if (winner_of_contenders(db, gpu_id, problem_id, c, n, out)) return -1;
  /* The winner and the eliminations of one decision, both or neither. */
  if (exec(db, "SAVEPOINT decide") != SQLITE_OK)
    return fail(db, "cannot begin deciding gpu %lld, problem %lld", (long long)gpu_id,
                (long long)problem_id);
  /* The same decision as stored: the row (and its chosen_at) stays. */
  set = !has_stored || stored.variant_id != out->variant_id || stored.timing_id != out->timing_id;
  if (set && fat_db_set_winner(db, gpu_id, problem_id, out->variant_id, out->timing_id)) goto out;
  if (record_eliminations(db, gpu_id, problem_id, c, n)) goto out;
  if (exec(db, "RELEASE decide") != SQLITE_OK) {
    fail(db, "cannot commit the decision on gpu %lld, problem %lld", (long long)gpu_id,
         (long long)problem_id);
    goto out;
  }
  ret = 0;
  *found = 1;
  if (changed) *changed = set;
out:
  if (ret) {
    exec(db, "ROLLBACK TO decide");
    exec(db, "RELEASE decide");
    memset(out, 0, sizeof *out);
  }
  return ret;
}

int fat_db_eliminations(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                        fat_db_elimination *out, size_t cap, size_t *n, size_t *total,
                        size_t *drops) {
  *n = *total = *drops = 0;
  sqlite3_stmt *s = stmt(db, ST_ELIMINATIONS);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_int64(s, 2, problem_id);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const int reps = sqlite3_column_int(s, 3);
    (*total)++;
    *drops += reps < FAT_SCREEN_REPS;
    if (*n == cap) continue;
    fat_db_elimination *e = &out[(*n)++];
    snprintf(e->name, sizeof e->name, "%s", (const char *)sqlite3_column_text(s, 0));
    e->median_ms = sqlite3_column_double(s, 1);
    e->ratio = sqlite3_column_double(s, 2);
    e->reps = reps;
    snprintf(e->best, sizeof e->best, "%s", (const char *)sqlite3_column_text(s, 4));
    e->best_ms = sqlite3_column_double(s, 5);
  }
  int ret = 0;
  if (rc != SQLITE_DONE)
    ret = fail(db, "cannot read the eliminations on gpu %lld, problem %lld", (long long)gpu_id,
               (long long)problem_id);
  release(s);
  return ret;
}

/* Runs one of the forget statements for (GPU_ID, PROBLEM_ID), adding the
 * rows it changed to *N. */
static int run_forget(fat_db *db, enum stmt_id id, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                      long long *n) {
  sqlite3_stmt *s = stmt(db, id);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_int64(s, 2, problem_id);
  int ret = 0;
  if (sqlite3_step(s) != SQLITE_DONE)
    ret = fail(db, "cannot forget results on gpu %lld, problem %lld", (long long)gpu_id,
               (long long)problem_id);
  else
    *n += sqlite3_changes(db->h);
  release(s);
  return ret;
}

int fat_db_forget(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                  long long *n_retired) {
  int ret = -1, in_tx = 0;
  long long retired = 0, dropped = 0;
  if (exec(db, "BEGIN IMMEDIATE") != SQLITE_OK) {
    fail(db, "cannot lock database %s", db->path);
    goto out;
  }
  in_tx = 1;
  if (run_forget(db, ST_DROP_ELIMINATIONS, gpu_id, problem_id, &dropped) ||
      run_forget(db, ST_RETIRE_CHECKS, gpu_id, problem_id, &retired) ||
      run_forget(db, ST_RETIRE_TIMINGS, gpu_id, problem_id, &retired) ||
      run_forget(db, ST_DROP_WINNER, gpu_id, problem_id, &dropped))
    goto out;
  if (exec(db, "COMMIT") != SQLITE_OK) {
    fail(db, "cannot commit forgetting gpu %lld, problem %lld", (long long)gpu_id,
         (long long)problem_id);
    goto out;
  }
  in_tx = 0;
  if (n_retired) *n_retired = retired;
  ret = 0;
out:
  if (in_tx) exec(db, "ROLLBACK");
  return ret;
}

/* A REAL column that may be NULL (NaN stored, or no such row): NAN. */
static double column_real(sqlite3_stmt *s, int col) {
  return sqlite3_column_type(s, col) == SQLITE_NULL ? NAN : sqlite3_column_double(s, col);
}

int fat_db_summary(fat_db *db, sqlite3_int64 gpu_id, fat_db_summary_row **rows, size_t *n) {
  int ret = -1, rc;
  size_t cap = 0;
  fat_db_summary_row *r = NULL;
  *rows = NULL;
  *n = 0;
  sqlite3_stmt *s = stmt(db, ST_SUMMARY);
  if (!s) return -1;
  sqlite3_bind_int64(s, 1, gpu_id);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    if (*n == cap) {
      size_t ncap = cap ? 2 * cap : 16;
      fat_db_summary_row *grown = realloc(r, ncap * sizeof *r);
      if (!grown) {
        snprintf(db->err, sizeof db->err, "cannot read results of gpu %lld: out of memory",
                 (long long)gpu_id);
        goto out;
      }
      r = grown;
      cap = ncap;
    }
    fat_db_summary_row *row = &r[(*n)++];
    memset(row, 0, sizeof *row);
    row->problem_id = sqlite3_column_int64(s, SC_PROBLEM_ID);
    fat_direction_parse((const char *)sqlite3_column_text(s, SC_DIRECTION), &row->problem.direction);
    fat_dtype_parse((const char *)sqlite3_column_text(s, SC_DTYPE), &row->problem.dtype);
    fat_mask_parse((const char *)sqlite3_column_text(s, SC_MASK), &row->problem.mask);
    row->problem.head_dim = sqlite3_column_int(s, SC_HEAD_DIM);
    row->problem.batch = sqlite3_column_int(s, SC_BATCH);
    row->problem.heads = sqlite3_column_int(s, SC_HEADS);
    row->problem.heads_k = sqlite3_column_int(s, SC_HEADS_K);
    row->problem.seqlen_q = sqlite3_column_int(s, SC_SEQLEN_Q);
    row->problem.seqlen_k = sqlite3_column_int(s, SC_SEQLEN_K);
    snprintf(row->winner, sizeof row->winner, "%s", (const char *)sqlite3_column_text(s, SC_WINNER));
    snprintf(row->winner_family, sizeof row->winner_family, "%s",
             (const char *)sqlite3_column_text(s, SC_WINNER_FAMILY));
    row->median_ms = column_real(s, SC_MEDIAN_MS);
    row->tflops = column_real(s, SC_TFLOPS);
    row->rel_l2 = column_real(s, SC_REL_L2);
    row->max_abs = column_real(s, SC_MAX_ABS);
    row->slowest_ms = column_real(s, SC_SLOWEST_MS);
    row->default_ms = column_real(s, SC_DEFAULT_MS);
    const char *dname = (const char *)sqlite3_column_text(s, SC_DEFAULT_NAME);
    snprintf(row->default_name, sizeof row->default_name, "%s", dname ? dname : "");
    row->n_passing = sqlite3_column_int(s, SC_N_PASSING);
    row->n_failed = sqlite3_column_int(s, SC_N_FAILED);
    row->materialize_ms = column_real(s, SC_MATERIALIZE_MS);
    row->problem.window_left = sqlite3_column_int(s, SC_WINDOW_LEFT);
    row->problem.window_right = sqlite3_column_int(s, SC_WINDOW_RIGHT);
    row->problem.page_size = sqlite3_column_int(s, SC_PAGE_SIZE);
    const char *lengths = (const char *)sqlite3_column_text(s, SC_LENGTHS);
    char why[160];
    if (fat_lengths_parse(lengths ? lengths : "", &row->problem.lengths, why,
                          sizeof why)) {
      fail(db, "problem %lld: %s", (long long)row->problem_id, why);
      goto out;
    }
  }
  if (rc != SQLITE_DONE) {
    fail(db, "cannot read results of gpu %lld", (long long)gpu_id);
    goto out;
  }
  *rows = r;
  r = NULL;
  ret = 0;
out:
  if (ret) *n = 0;
  free(r);
  release(s);
  return ret;
}

/* Ceilings and external timings: written rarely, so each statement is
 * prepared per call rather than kept in stmt_sql[]. */
static int prepare_once(fat_db *db, const char *sql, sqlite3_stmt **s, const char *what) {
  if (sqlite3_prepare_v2(db->h, sql, -1, s, NULL) == SQLITE_OK) return 0;
  return fail(db, "cannot %s in %s", what, db->path);
}

const char *fat_ceiling_peak_name(fat_matrix_op op, fat_dtype dtype) {
  const int t = fat_dtype_peak(dtype);
  if (t < 0) return NULL;
  switch (op) {
    case FAT_MATRIX_MMA_SYNC: return t == FAT_BF16 ? FAT_CEILING_PEAK_BF16 : FAT_CEILING_PEAK_FP16;
    case FAT_MATRIX_WGMMA:
      return t == FAT_BF16 ? FAT_CEILING_WGMMA_PEAK_BF16 : FAT_CEILING_WGMMA_PEAK_FP16;
    case FAT_MATRIX_OTHER: break;
  }
  return NULL;
}

int fat_db_put_ceiling(fat_db *db, sqlite3_int64 gpu_id, const char *name, double value,
                       const char *unit) {
  int ret = -1;
  sqlite3_stmt *s = NULL;
  if (!name || !*name || !unit || !*unit || !isfinite(value) || value <= 0) {
    snprintf(db->err, sizeof db->err, "cannot store ceiling '%s' = %g %s of gpu %lld: %s",
             name ? name : "(null)", value, unit ? unit : "(null)", (long long)gpu_id,
             !isfinite(value) || value <= 0 ? "value must be positive and finite"
                                            : "empty name or unit");
    goto out;
  }
  if (prepare_once(db,
                   "INSERT INTO ceilings (gpu_id, name, value, unit) VALUES (?1, ?2, ?3, ?4)"
                   " ON CONFLICT (gpu_id, name) DO UPDATE SET value = excluded.value,"
                   " unit = excluded.unit, measured_at = excluded.measured_at",
                   &s, "store a ceiling"))
    goto out;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
  sqlite3_bind_double(s, 3, value);
  sqlite3_bind_text(s, 4, unit, -1, SQLITE_STATIC);
  if (sqlite3_step(s) != SQLITE_DONE) {
    fail(db, "cannot store ceiling '%s' = %g %s of gpu %lld", name, value, unit,
         (long long)gpu_id);
    goto out;
  }
  ret = 0;
out:
  sqlite3_finalize(s);
  return ret;
}

int fat_db_get_ceiling(fat_db *db, sqlite3_int64 gpu_id, const char *name, double *value,
                       char *unit, size_t unitlen, int *found) {
  int ret = -1, rc;
  sqlite3_stmt *s = NULL;
  *found = 0;
  if (prepare_once(db, "SELECT value, unit FROM ceilings WHERE gpu_id = ?1 AND name = ?2", &s,
                   "read ceilings"))
    goto out;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
  rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    *found = 1;
    *value = sqlite3_column_double(s, 0);
    if (unit && unitlen)
      snprintf(unit, unitlen, "%s", (const char *)sqlite3_column_text(s, 1));
  } else if (rc != SQLITE_DONE) {
    fail(db, "cannot read ceiling '%s' of gpu %lld", name, (long long)gpu_id);
    goto out;
  }
  ret = 0;
out:
  sqlite3_finalize(s);
  return ret;
}

int fat_db_put_external_timing(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                               const char *source, double median_ms, double tflops) {
  int ret = -1;
  sqlite3_stmt *s = NULL;
  if (prepare_once(db,
                   "INSERT INTO external_timings (gpu_id, problem_id, source, median_ms, tflops)"
                   " VALUES (?1, ?2, ?3, ?4, ?5)",
                   &s, "store an external timing"))
    goto out;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_int64(s, 2, problem_id);
  sqlite3_bind_text(s, 3, source ? source : "", -1, SQLITE_STATIC);
  sqlite3_bind_double(s, 4, median_ms);
  sqlite3_bind_double(s, 5, tflops);
  if (sqlite3_step(s) != SQLITE_DONE) {
    fail(db, "cannot store %s timing on gpu %lld, problem %lld (median %g ms)",
         source ? source : "(null)", (long long)gpu_id, (long long)problem_id, median_ms);
    goto out;
  }
  ret = 0;
out:
  sqlite3_finalize(s);
  return ret;
}
