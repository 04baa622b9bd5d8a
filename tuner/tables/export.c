/* SPDX-License-Identifier: MIT */
/* `fatune export`: a database's winners for one GPU model written as a
 * table file, the text SQL that db/tables/ ships and import reads back.
 * The rows go out sorted by natural keys and renumbered, so that the same
 * content always gives the same bytes (tables.h says why the format looks
 * as it does). */
#include <stdio.h>
#include "tables_int.h"

/* The rows exported for one GPU name, renumbered in natural-key order. Each
 * x_* temp table maps an old id to its new one. x_picks are the (variant,
 * timing) pairs that go out for each problem with a winner: the winner, and
 * for the backward the fastest passed variant without atomics as well, which
 * the runtime serves when the caller asks for deterministic gradients. */
static const char *const EXPORT_SELECT_SQL =
    "DROP TABLE IF EXISTS temp.x_gpus; DROP TABLE IF EXISTS temp.x_variants;"
    "DROP TABLE IF EXISTS temp.x_problems; DROP TABLE IF EXISTS temp.x_builds;"
    "DROP TABLE IF EXISTS temp.x_checks; DROP TABLE IF EXISTS temp.x_timings;"
    "DROP TABLE IF EXISTS temp.x_picks;"
    "CREATE TEMP TABLE x_gpus AS SELECT id AS old, ROW_NUMBER() OVER (ORDER BY name, cc_major,"
    "  cc_minor, sm_count, driver_version, nvrtc_major, nvrtc_minor) AS new FROM main.gpus"
    "  WHERE name = :gpu AND id IN (SELECT gpu_id FROM main.winners);"
    "CREATE TEMP TABLE x_picks AS SELECT w.gpu_id, w.problem_id, w.variant_id, w.timing_id"
    "  FROM main.winners w WHERE w.gpu_id IN (SELECT old FROM temp.x_gpus)"
    " UNION SELECT t.gpu_id, t.problem_id, t.variant_id, t.id FROM main.winners w"
    "  JOIN main.problems p ON p.id = w.problem_id AND p.direction = 'bwd'"
    "  JOIN main.timings t ON t.id = (SELECT t2.id FROM main.timings t2 JOIN main.variants v2"
    "   ON v2.id = t2.variant_id WHERE t2.gpu_id = w.gpu_id AND t2.problem_id = w.problem_id"
    "   AND t2.retired = 0 AND ' ' || v2.params || ' ' LIKE '% DQ_MODE=separate %'"
    "   AND " FAT_SQL_LIVE_PASSING("main.", "t2.variant_id", "t2.gpu_id", "t2.problem_id")
    "   ORDER BY t2.median_ms, t2.id LIMIT 1)"
    "  WHERE w.gpu_id IN (SELECT old FROM temp.x_gpus);"
    "CREATE TEMP TABLE x_variants AS SELECT id AS old, ROW_NUMBER() OVER (ORDER BY name,"
    "  source_hash) AS new FROM main.variants WHERE id IN (SELECT variant_id FROM temp.x_picks);"
    "CREATE TEMP TABLE x_problems AS SELECT id AS old, ROW_NUMBER() OVER (ORDER BY direction,"
    "  dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k, window_left,"
    "  window_right, lengths) AS new FROM main.problems"
    "  WHERE id IN (SELECT problem_id FROM main.winners WHERE gpu_id IN (SELECT old FROM"
    "  temp.x_gpus));"
    "CREATE TEMP TABLE x_builds AS SELECT b.id AS old, ROW_NUMBER() OVER (ORDER BY b.key) AS new"
    "  FROM main.builds b WHERE b.ok = 1 AND b.variant_id IN (SELECT old FROM temp.x_variants);"
    /* EXISTS, not a join with x_picks: a backward's winner and its
     * deterministic pick may be two timings of one variant, which would
     * list its checks twice. */
    "CREATE TEMP TABLE x_checks AS SELECT c.id AS old, ROW_NUMBER() OVER (ORDER BY g.new, p.new,"
    "  v.new, c.batch, c.heads, c.seqlen_q, c.seqlen_k, c.created_at, c.id) AS new"
    "  FROM main.checks c JOIN temp.x_gpus g ON g.old = c.gpu_id"
    "  JOIN temp.x_problems p ON p.old = c.problem_id JOIN temp.x_variants v ON v.old ="
    "  c.variant_id WHERE c.retired = 0 AND EXISTS (SELECT 1 FROM temp.x_picks w WHERE"
    "  w.gpu_id = c.gpu_id AND w.problem_id = c.problem_id AND w.variant_id = c.variant_id);"
    /* Two timings of one variant (as above) in the order they were made. */
    "CREATE TEMP TABLE x_timings AS SELECT w.timing_id AS old, ROW_NUMBER() OVER (ORDER BY"
    "  g.new, p.new, v.new, w.timing_id) AS new FROM temp.x_picks w"
    "  JOIN temp.x_gpus g ON g.old = w.gpu_id JOIN temp.x_problems p ON p.old = w.problem_id"
    "  JOIN temp.x_variants v ON v.old = w.variant_id;";

static const char *const EXPORT_DROP_SQL =
    "DROP TABLE IF EXISTS temp.x_gpus; DROP TABLE IF EXISTS temp.x_variants;"
    "DROP TABLE IF EXISTS temp.x_problems; DROP TABLE IF EXISTS temp.x_builds;"
    "DROP TABLE IF EXISTS temp.x_checks; DROP TABLE IF EXISTS temp.x_timings;"
    "DROP TABLE IF EXISTS temp.x_picks;";

/* One exported table: its INSERT column list and the SELECT giving the
 * values in that order, sorted by the new ids. */
typedef struct export_table {
  const char *name;
  const char *columns;
  const char *select;
} export_table;

static const export_table EXPORT_TABLES[] = {
    {"gpus",
     "id, name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major, nvrtc_minor, "
     "mem_bytes, smem_per_block_optin, l2_bytes, clock_khz, mem_clock_khz, first_seen",
     "SELECT x.new, t.name, t.cc_major, t.cc_minor, t.sm_count, t.driver_version, t.nvrtc_major,"
     " t.nvrtc_minor, t.mem_bytes, t.smem_per_block_optin, t.l2_bytes, t.clock_khz,"
     " t.mem_clock_khz, t.first_seen FROM main.gpus t JOIN temp.x_gpus x ON x.old = t.id"
     " ORDER BY x.new"},
    /* The GPU's measured ceilings (explain's floors, the report's roofs),
     * so that a table serves them where its user has tuned nothing. */
    {"ceilings", "id, gpu_id, name, value, unit, measured_at",
     "SELECT ROW_NUMBER() OVER (ORDER BY g.new, t.name), g.new, t.name, t.value, t.unit,"
     " t.measured_at FROM main.ceilings t JOIN temp.x_gpus g ON g.old = t.gpu_id"
     " ORDER BY g.new, t.name"},
    {"variants",
     "id, name, family, direction, dtype, mask, head_dim, params, entry, block_m, threads, "
     "smem_bytes, source_hash, source, is_default, created_at",
     "SELECT x.new, t.name, t.family, t.direction, t.dtype, t.mask, t.head_dim, t.params, t.entry,"
     " t.block_m, t.threads, t.smem_bytes, t.source_hash, t.source, t.is_default, t.created_at"
     " FROM main.variants t JOIN temp.x_variants x ON x.old = t.id ORDER BY x.new"},
    {"builds",
     "id, key, variant_id, arch, options, nvrtc_version, ok, cubin, registers, smem_static, "
     "stack_frame, spill_stores, spill_loads, compile_ms, log, created_at",
     "SELECT x.new, t.key, v.new, t.arch, t.options, t.nvrtc_version, t.ok, t.cubin, t.registers,"
     " t.smem_static, t.stack_frame, t.spill_stores, t.spill_loads, t.compile_ms, t.log,"
     " t.created_at FROM main.builds t JOIN temp.x_builds x ON x.old = t.id"
     " JOIN temp.x_variants v ON v.old = t.variant_id ORDER BY x.new"},
    /* The hash the runtime checks each cubin against before loading it. */
    {"build_hashes", "build_key, cubin_sha256",
     "SELECT h.build_key, h.cubin_sha256 FROM main.build_hashes h JOIN main.builds t ON t.key ="
     " h.build_key JOIN temp.x_builds x ON x.old = t.id ORDER BY x.new"},
    /* A table of schema version 1 has no window columns: they default to
     * 0, 0, the window of every problem but a local one; one of version 2
     * has no lengths, which default to '' (dense). */
    {"problems",
     "id, direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k, "
     "window_left, window_right, lengths",
     "SELECT x.new, t.direction, t.dtype, t.mask, t.head_dim, t.batch, t.heads, t.heads_k,"
     " t.seqlen_q, t.seqlen_k, t.window_left, t.window_right, t.lengths FROM main.problems t"
     " JOIN temp.x_problems x ON x.old = t.id ORDER BY x.new"},
    {"checks",
     "id, variant_id, gpu_id, problem_id, batch, heads, seqlen_q, seqlen_k, rel_l2, max_abs, "
     "lse_max_abs, nonfinite, passed, reason, retired, created_at",
     "SELECT x.new, v.new, g.new, p.new, t.batch, t.heads, t.seqlen_q, t.seqlen_k, t.rel_l2,"
     " t.max_abs, t.lse_max_abs, t.nonfinite, t.passed, t.reason, t.retired, t.created_at"
     " FROM main.checks t JOIN temp.x_checks x ON x.old = t.id"
     " JOIN temp.x_variants v ON v.old = t.variant_id JOIN temp.x_gpus g ON g.old = t.gpu_id"
     " JOIN temp.x_problems p ON p.old = t.problem_id ORDER BY x.new"},
    {"timings",
     "id, variant_id, gpu_id, problem_id, reps, median_ms, min_ms, max_ms, p10_ms, p90_ms, "
     "tflops, sm_clock_mhz, retired, created_at",
     "SELECT x.new, v.new, g.new, p.new, t.reps, t.median_ms, t.min_ms, t.max_ms, t.p10_ms,"
     " t.p90_ms, t.tflops, t.sm_clock_mhz, t.retired, t.created_at"
     " FROM main.timings t JOIN temp.x_timings x ON x.old = t.id"
     " JOIN temp.x_variants v ON v.old = t.variant_id JOIN temp.x_gpus g ON g.old = t.gpu_id"
     " JOIN temp.x_problems p ON p.old = t.problem_id ORDER BY x.new"},
    {"winners", "gpu_id, problem_id, variant_id, timing_id, chosen_at",
     "SELECT g.new, p.new, v.new, tm.new, w.chosen_at FROM main.winners w"
     " JOIN temp.x_gpus g ON g.old = w.gpu_id JOIN temp.x_problems p ON p.old = w.problem_id"
     " JOIN temp.x_variants v ON v.old = w.variant_id JOIN temp.x_timings tm ON tm.old ="
     " w.timing_id ORDER BY g.new, p.new"},
};
#define N_EXPORT_TABLES (sizeof EXPORT_TABLES / sizeof EXPORT_TABLES[0])

/* A text value as one SQL line: newlines and carriage returns become
 * ' || char(10) || ' so that a kernel source stays on one line. SQLite
 * parses a || b || c ... as a tree as deep as the chain (at most 1000), so
 * a text of more than TEXT_CHUNK_TERMS terms is written as parenthesised
 * chains of that many, joined: depth TEXT_CHUNK_TERMS + terms / that. */
#define TEXT_CHUNK_TERMS 256

static void put_text(FILE *out, const unsigned char *s) {
  size_t breaks = 0, term = 0;
  for (const unsigned char *c = s; *c; c++) breaks += *c == '\n' || *c == '\r';
  const int chunked = 2 * breaks + 1 > TEXT_CHUNK_TERMS;
  if (chunked) fputc('(', out);
  fputc('\'', out);
  for (; *s; s++) {
    if (*s == '\'') {
      fputs("''", out);
      continue;
    }
    if (*s != '\n' && *s != '\r') {
      fputc(*s, out);
      continue;
    }
    /* The string so far is a term, the char() another; a chunk ends after
     * the char() when it is full. */
    term += 2;
    const char *ch = *s == '\n' ? "char(10)" : "char(13)";
    if (chunked && term % TEXT_CHUNK_TERMS < 2)
      fprintf(out, "' || %s) || ('", ch);
    else
      fprintf(out, "' || %s || '", ch);
  }
  fputc('\'', out);
  if (chunked) fputc(')', out);
}

static void put_value(FILE *out, sqlite3_stmt *s, int col) {
  switch (sqlite3_column_type(s, col)) {
  case SQLITE_NULL: fputs("NULL", out); break;
  case SQLITE_INTEGER: fprintf(out, "%lld", (long long)sqlite3_column_int64(s, col)); break;
  case SQLITE_FLOAT: fprintf(out, "%.17g", sqlite3_column_double(s, col)); break;
  case SQLITE_BLOB: {
    const unsigned char *b = sqlite3_column_blob(s, col);
    int n = sqlite3_column_bytes(s, col);
    fputs("X'", out);
    for (int i = 0; i < n; i++) fprintf(out, "%02x", b[i]);
    fputc('\'', out);
    break;
  }
  default: put_text(out, sqlite3_column_text(s, col)); break;
  }
}

int fat_tables_export(fat_db *db, const char *gpu_name, FILE *out, char *err, size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  sqlite3_stmt *s = NULL;
  int rc = -1;
  const char *tail = EXPORT_SELECT_SQL;
  /* The temp tables are made statement by statement so :gpu can be bound. */
  while (tail && *tail) {
    if (sqlite3_prepare_v2(h, tail, -1, &s, &tail) != SQLITE_OK) {
      set_err(err, errlen, "export: %s", sqlite3_errmsg(h));
      goto out;
    }
    if (!s) break;
    int idx = sqlite3_bind_parameter_index(s, ":gpu");
    if (idx) sqlite3_bind_text(s, idx, gpu_name, -1, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) {
      set_err(err, errlen, "export: %s", sqlite3_errmsg(h));
      goto out;
    }
    sqlite3_finalize(s);
    s = NULL;
  }
  if (sqlite3_prepare_v2(h, "SELECT count(*) FROM temp.x_gpus", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_step(s) != SQLITE_ROW) {
    set_err(err, errlen, "export: %s", sqlite3_errmsg(h));
    goto out;
  }
  if (sqlite3_column_int(s, 0) == 0) {
    set_err(err, errlen, "no winners for GPU '%s' in the database", gpu_name);
    goto out;
  }
  sqlite3_finalize(s);
  s = NULL;

  /* The header is comment lines: a control character in the name (which
   * the command refuses; the API may be handed one) is written as \xNN, so
   * that it cannot start a line of its own. */
  fprintf(out, "%s: the tuned winners for ", FAT_TABLES_MAGIC);
  for (const unsigned char *c = (const unsigned char *)gpu_name; *c; c++)
    if (*c < 0x20 || *c == 0x7f) fprintf(out, "\\x%02x", *c);
    else fputc(*c, out);
  fputc('\n', out);
  fprintf(out, "-- Generated by fatune %s (fatune export), database schema version %d; do not edit.\n"
               "-- Each variant carries its full source and source_hash: a test refuses a table\n"
               "-- whose hashes differ from what the generator produces today (a stale table).\n"
               "-- Load with: fatune import FILE.sql (only INSERTs into fatune tables are accepted).\n",
          FAT_VERSION, FAT_DB_SCHEMA_VERSION);
  for (size_t t = 0; t < N_EXPORT_TABLES; t++) {
    if (sqlite3_prepare_v2(h, EXPORT_TABLES[t].select, -1, &s, NULL) != SQLITE_OK) {
      set_err(err, errlen, "export %s: %s", EXPORT_TABLES[t].name, sqlite3_errmsg(h));
      goto out;
    }
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
      fprintf(out, "INSERT INTO %s (%s) VALUES (", EXPORT_TABLES[t].name, EXPORT_TABLES[t].columns);
      for (int c = 0; c < sqlite3_column_count(s); c++) {
        if (c) fputs(", ", out);
        put_value(out, s, c);
      }
      fputs(");\n", out);
    }
    if (step != SQLITE_DONE) {
      set_err(err, errlen, "export %s: %s", EXPORT_TABLES[t].name, sqlite3_errmsg(h));
      goto out;
    }
    sqlite3_finalize(s);
    s = NULL;
  }
  fputs(FAT_TABLES_END, out);
  if (ferror(out)) {
    set_err(err, errlen, "export: write error");
    goto out;
  }
  rc = 0;
out:
  sqlite3_finalize(s);
  sqlite3_exec(h, EXPORT_DROP_SQL, NULL, NULL, NULL);
  return rc;
}
