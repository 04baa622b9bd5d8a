/* SPDX-License-Identifier: MIT */
/* `fatune export`: a database's winners for one GPU model written as a
 * table file, the text SQL that db/tables/ ships and import reads back.
 * The rows of each table go out in id order, and the same content always
 * gives the same bytes (tables.h says why the format looks as it does).
 * Ids are numbered in natural-key order, or kept from the table a new
 * export replaces (fat_table_ids), so that a re-export changes the lines
 * of the rows that changed and no others. */
#include <stdio.h>
#include <stdlib.h>
#include "tables_int.h"

/* The (variant, timing) pairs that go out for each problem with a winner
 * of the exported GPU rows (temp.x_gpus): the winner, and for the backward
 * the fastest passed variant of a deterministic dQ mode (separate or
 * ordered) as well, which the runtime serves when the caller asks for
 * deterministic gradients -- by a full timing (a table holds no
 * screening: the tuner re-times that variant in full with the
 * contenders). */
static const char *const EXPORT_PICKS_SQL =
    "CREATE TEMP TABLE x_picks AS SELECT w.gpu_id, w.problem_id, w.variant_id, w.timing_id"
    "  FROM main.winners w WHERE w.gpu_id IN (SELECT old FROM temp.x_gpus)"
    " UNION SELECT t.gpu_id, t.problem_id, t.variant_id, t.id FROM main.winners w"
    "  JOIN main.problems p ON p.id = w.problem_id AND p.direction = 'bwd'"
    "  JOIN main.timings t ON t.id = (SELECT t2.id FROM main.timings t2 JOIN main.variants v2"
    "   ON v2.id = t2.variant_id WHERE t2.gpu_id = w.gpu_id AND t2.problem_id = w.problem_id"
    "   AND t2.retired = 0 AND t2.reps >= " FAT_SQL_FULL_REPS " AND " FAT_SQL_DQ_DETERMINISTIC("v2.params")
    "   AND " FAT_SQL_LIVE_PASSING("main.", "t2.variant_id", "t2.gpu_id", "t2.problem_id")
    "   ORDER BY t2.median_ms, t2.id LIMIT 1)"
    "  WHERE w.gpu_id IN (SELECT old FROM temp.x_gpus);";

/* One table whose rows go out with ids: which rows, and by what key an id
 * is kept. Its temp table x_NAME maps each row's id in the database (old)
 * to the id it is written with (new); p_NAME holds the ids and keys of the
 * previous table's rows (table_ids.c; empty when there is none). A row
 * whose natural key the previous table has keeps that row's id; the others
 * are numbered after the previous table's largest id, in natural-key order
 * (with no previous table: 1, 2, ... in natural-key order, as export always
 * numbered). Rows of one key (a key that is not unique: two checks of one
 * time, two timings of one variant) pair off in id order. References in a
 * key are the ids they go out with: the tables they name come first. */
typedef struct id_table {
  const char *name;
  const char *key;   /* natural-key columns, as the table names them, in sort order */
  const char *rows;  /* SELECT old, KEY's columns: the rows that go out */
  const char *first; /* SQL that ROWS needs and the tables before do not, or NULL */
} id_table;

static const id_table ID_TABLES[] = {
    {"gpus", "name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major, nvrtc_minor",
     "SELECT id AS old, name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major,"
     " nvrtc_minor FROM main.gpus WHERE name = :gpu AND id IN (SELECT gpu_id FROM main.winners)",
     NULL},
    {"variants", "name, source_hash",
     "SELECT id AS old, name, source_hash FROM main.variants"
     " WHERE id IN (SELECT variant_id FROM temp.x_picks)",
     EXPORT_PICKS_SQL},
    {"problems",
     "direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k, window_left,"
     " window_right, lengths, page_size",
     "SELECT id AS old, direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q,"
     " seqlen_k, window_left, window_right, lengths, page_size FROM main.problems WHERE id IN"
     " (SELECT problem_id FROM main.winners WHERE gpu_id IN (SELECT old FROM temp.x_gpus))",
     NULL},
    {"builds", "key",
     "SELECT id AS old, key FROM main.builds"
     " WHERE ok = 1 AND variant_id IN (SELECT old FROM temp.x_variants)",
     NULL},
    /* The live checks of each pick's (variant, GPU, problem): EXISTS, not a
     * join, since a backward's winner and its deterministic pick may be two
     * timings of one variant, which would list its checks twice. */
    {"checks",
     "gpu_id, problem_id, variant_id, batch, heads, seqlen_q, seqlen_k, created_at",
     "SELECT c.id AS old, g.new AS gpu_id, p.new AS problem_id, v.new AS variant_id, c.batch,"
     " c.heads, c.seqlen_q, c.seqlen_k, c.created_at FROM main.checks c"
     " JOIN temp.x_gpus g ON g.old = c.gpu_id JOIN temp.x_problems p ON p.old = c.problem_id"
     " JOIN temp.x_variants v ON v.old = c.variant_id WHERE c.retired = 0 AND EXISTS (SELECT 1"
     " FROM temp.x_picks w WHERE w.gpu_id = c.gpu_id AND w.problem_id = c.problem_id AND"
     " w.variant_id = c.variant_id)",
     NULL},
    {"timings", "gpu_id, problem_id, variant_id",
     "SELECT w.timing_id AS old, g.new AS gpu_id, p.new AS problem_id, v.new AS variant_id"
     " FROM temp.x_picks w JOIN temp.x_gpus g ON g.old = w.gpu_id"
     " JOIN temp.x_problems p ON p.old = w.problem_id JOIN temp.x_variants v ON v.old ="
     " w.variant_id",
     NULL},
    {"ceilings", "gpu_id, name",
     "SELECT t.id AS old, g.new AS gpu_id, t.name FROM main.ceilings t"
     " JOIN temp.x_gpus g ON g.old = t.gpu_id",
     NULL},
    /* Each peer's latest timing of each exported problem. */
    {"external_timings", "gpu_id, problem_id, source, measured_at",
     "SELECT e.id AS old, g.new AS gpu_id, p.new AS problem_id, e.source, e.measured_at"
     " FROM main.external_timings e JOIN temp.x_gpus g ON g.old = e.gpu_id"
     " JOIN temp.x_problems p ON p.old = e.problem_id WHERE e.id = (SELECT max(e2.id) FROM"
     " main.external_timings e2 WHERE e2.gpu_id = e.gpu_id AND e2.problem_id = e.problem_id AND"
     " e2.source = e.source)",
     NULL},
};
#define N_ID_TABLES (sizeof ID_TABLES / sizeof ID_TABLES[0])

/* x_NAME from ROWS (id_table): with KEY the natural key, a row pairs with
 * the previous table's row of its key and rank among that key's rows (in
 * id order), and keeps its id; the rest count on from the previous
 * table's largest id (0 when it has none). The arguments, in order: NAME,
 * ROWS, KEY, KEY, KEY, NAME, NAME, KEY, KEY. */
static const char *const NUMBER_SQL =
    "CREATE TEMP TABLE x_%s AS WITH r AS (%s),"
    " c AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY %s ORDER BY old) AS dup FROM r),"
    " p AS (SELECT id, %s, ROW_NUMBER() OVER (PARTITION BY %s ORDER BY id) AS dup"
    "  FROM temp.p_%s)"
    " SELECT old, coalesce(p.id, (SELECT coalesce(max(id), 0) FROM temp.p_%s)"
    "  + ROW_NUMBER() OVER (PARTITION BY p.id IS NULL ORDER BY %s, dup)) AS new"
    " FROM c LEFT JOIN p USING (%s, dup)";

static const char *const EXPORT_DROP_SQL =
    "DROP TABLE IF EXISTS temp.x_gpus; DROP TABLE IF EXISTS temp.x_variants;"
    "DROP TABLE IF EXISTS temp.x_problems; DROP TABLE IF EXISTS temp.x_builds;"
    "DROP TABLE IF EXISTS temp.x_checks; DROP TABLE IF EXISTS temp.x_timings;"
    "DROP TABLE IF EXISTS temp.x_ceilings; DROP TABLE IF EXISTS temp.x_picks;"
    "DROP TABLE IF EXISTS temp.p_gpus; DROP TABLE IF EXISTS temp.p_variants;"
    "DROP TABLE IF EXISTS temp.p_problems; DROP TABLE IF EXISTS temp.p_builds;"
    "DROP TABLE IF EXISTS temp.p_checks; DROP TABLE IF EXISTS temp.p_timings;"
    "DROP TABLE IF EXISTS temp.p_ceilings; DROP TABLE IF EXISTS temp.x_external_timings;"
    "DROP TABLE IF EXISTS temp.p_external_timings;";

/* Which exports write an export_table's rows: all, or only those with
 * paged problems, or only those with none. */
enum { EXPORT_ALWAYS = 0, EXPORT_IF_PAGED, EXPORT_IF_NOT_PAGED };

/* One exported table: its INSERT column list and the SELECT giving the
 * values in that order, sorted by the new ids; WHEN one of EXPORT_*. */
typedef struct export_table {
  const char *name;
  const char *columns;
  const char *select;
  int when;
} export_table;

/* Whether the exported problems hold a paged one. */
static const char *const EXPORT_HAS_PAGED_SQL =
    "SELECT count(*) FROM main.problems t JOIN temp.x_problems x ON x.old = t.id"
    " WHERE t.page_size <> 0";

static const export_table EXPORT_TABLES[] = {
    {"gpus",
     "id, name, cc_major, cc_minor, sm_count, driver_version, nvrtc_major, nvrtc_minor, "
     "mem_bytes, smem_per_block_optin, l2_bytes, clock_khz, mem_clock_khz, first_seen",
     "SELECT x.new, t.name, t.cc_major, t.cc_minor, t.sm_count, t.driver_version, t.nvrtc_major,"
     " t.nvrtc_minor, t.mem_bytes, t.smem_per_block_optin, t.l2_bytes, t.clock_khz,"
     " t.mem_clock_khz, t.first_seen FROM main.gpus t JOIN temp.x_gpus x ON x.old = t.id"
     " ORDER BY x.new", EXPORT_ALWAYS},
    /* The GPU's measured ceilings (explain's floors, the report's roofs),
     * so that a table serves them where its user has tuned nothing. */
    {"ceilings", "id, gpu_id, name, value, unit, measured_at",
     "SELECT x.new, g.new, t.name, t.value, t.unit, t.measured_at FROM main.ceilings t"
     " JOIN temp.x_ceilings x ON x.old = t.id JOIN temp.x_gpus g ON g.old = t.gpu_id"
     " ORDER BY x.new", EXPORT_ALWAYS},
    /* No source: import fills it in from its generator, which must give
     * this source_hash or the variant is stale (trust.h). */
    {"variants",
     "id, name, family, direction, dtype, mask, head_dim, params, entry, block_m, threads, "
     "smem_bytes, source_hash, is_default, created_at",
     "SELECT x.new, t.name, t.family, t.direction, t.dtype, t.mask, t.head_dim, t.params, t.entry,"
     " t.block_m, t.threads, t.smem_bytes, t.source_hash, t.is_default, t.created_at"
     " FROM main.variants t JOIN temp.x_variants x ON x.old = t.id ORDER BY x.new", EXPORT_ALWAYS},
    {"builds",
     "id, key, variant_id, arch, options, nvrtc_version, ok, cubin, registers, smem_static, "
     "stack_frame, spill_stores, spill_loads, compile_ms, log, created_at",
     "SELECT x.new, t.key, v.new, t.arch, t.options, t.nvrtc_version, t.ok, t.cubin, t.registers,"
     " t.smem_static, t.stack_frame, t.spill_stores, t.spill_loads, t.compile_ms, t.log,"
     " t.created_at FROM main.builds t JOIN temp.x_builds x ON x.old = t.id"
     " JOIN temp.x_variants v ON v.old = t.variant_id ORDER BY x.new", EXPORT_ALWAYS},
    /* The hash the runtime checks each cubin against before loading it. */
    {"build_hashes", "build_key, cubin_sha256",
     "SELECT h.build_key, h.cubin_sha256 FROM main.build_hashes h JOIN main.builds t ON t.key ="
     " h.build_key JOIN temp.x_builds x ON x.old = t.id ORDER BY x.new", EXPORT_ALWAYS},
    /* A table of schema version 1 has no window columns: they default to
     * 0, 0, the window of every problem but a local one; one of version 2
     * has no lengths, which default to '' (dense); one of version 6 or
     * older and any without a paged problem has no page_size, which
     * defaults to 0 (contiguous): a table of contiguous problems is written
     * as version 6 wrote it, so that a re-export's diff holds the rows that
     * changed and a fatune of version 6 still reads it. */
    {"problems",
     "id, direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k, "
     "window_left, window_right, lengths",
     "SELECT x.new, t.direction, t.dtype, t.mask, t.head_dim, t.batch, t.heads, t.heads_k,"
     " t.seqlen_q, t.seqlen_k, t.window_left, t.window_right, t.lengths FROM main.problems t"
     " JOIN temp.x_problems x ON x.old = t.id ORDER BY x.new", EXPORT_IF_NOT_PAGED},
    {"problems",
     "id, direction, dtype, mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k, "
     "window_left, window_right, lengths, page_size",
     "SELECT x.new, t.direction, t.dtype, t.mask, t.head_dim, t.batch, t.heads, t.heads_k,"
     " t.seqlen_q, t.seqlen_k, t.window_left, t.window_right, t.lengths, t.page_size"
     " FROM main.problems t JOIN temp.x_problems x ON x.old = t.id ORDER BY x.new", EXPORT_IF_PAGED},
    {"checks",
     "id, variant_id, gpu_id, problem_id, batch, heads, seqlen_q, seqlen_k, rel_l2, max_abs, "
     "lse_max_abs, nonfinite, passed, reason, retired, created_at",
     "SELECT x.new, v.new, g.new, p.new, t.batch, t.heads, t.seqlen_q, t.seqlen_k, t.rel_l2,"
     " t.max_abs, t.lse_max_abs, t.nonfinite, t.passed, t.reason, t.retired, t.created_at"
     " FROM main.checks t JOIN temp.x_checks x ON x.old = t.id"
     " JOIN temp.x_variants v ON v.old = t.variant_id JOIN temp.x_gpus g ON g.old = t.gpu_id"
     " JOIN temp.x_problems p ON p.old = t.problem_id ORDER BY x.new", EXPORT_ALWAYS},
    {"timings",
     "id, variant_id, gpu_id, problem_id, reps, median_ms, min_ms, max_ms, p10_ms, p90_ms, "
     "tflops, sm_clock_mhz, retired, created_at",
     "SELECT x.new, v.new, g.new, p.new, t.reps, t.median_ms, t.min_ms, t.max_ms, t.p10_ms,"
     " t.p90_ms, t.tflops, t.sm_clock_mhz, t.retired, t.created_at"
     " FROM main.timings t JOIN temp.x_timings x ON x.old = t.id"
     " JOIN temp.x_variants v ON v.old = t.variant_id JOIN temp.x_gpus g ON g.old = t.gpu_id"
     " JOIN temp.x_problems p ON p.old = t.problem_id ORDER BY x.new", EXPORT_ALWAYS},
    {"winners", "gpu_id, problem_id, variant_id, timing_id, chosen_at",
     "SELECT g.new, p.new, v.new, tm.new, w.chosen_at FROM main.winners w"
     " JOIN temp.x_gpus g ON g.old = w.gpu_id JOIN temp.x_problems p ON p.old = w.problem_id"
     " JOIN temp.x_variants v ON v.old = w.variant_id JOIN temp.x_timings tm ON tm.old ="
     " w.timing_id ORDER BY g.new, p.new", EXPORT_ALWAYS},
    /* Other implementations' timings of the exported problems on this GPU
     * (bench/store_peers.py), so that the report of a table alone draws
     * fatune beside them; never candidates. */
    {"external_timings", "id, gpu_id, problem_id, source, median_ms, tflops, measured_at",
     "SELECT x.new, g.new, p.new, t.source, t.median_ms, t.tflops, t.measured_at"
     " FROM main.external_timings t JOIN temp.x_external_timings x ON x.old = t.id"
     " JOIN temp.x_gpus g ON g.old = t.gpu_id JOIN temp.x_problems p ON p.old = t.problem_id"
     " ORDER BY x.new", EXPORT_ALWAYS},
};
#define N_EXPORT_TABLES (sizeof EXPORT_TABLES / sizeof EXPORT_TABLES[0])

/* A text value as one SQL line: newlines and carriage returns become
 * ' || char(10) || ' so that a build log stays on one line. SQLite
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

/* Column COL of row S as an SQL value. 0, or -1 out of memory. */
static int put_value(FILE *out, sqlite3_stmt *s, int col) {
  switch (sqlite3_column_type(s, col)) {
  case SQLITE_NULL: fputs("NULL", out); break;
  case SQLITE_INTEGER: fprintf(out, "%lld", (long long)sqlite3_column_int64(s, col)); break;
  case SQLITE_FLOAT: fprintf(out, "%.17g", sqlite3_column_double(s, col)); break;
  case SQLITE_BLOB: {  /* a cubin: deflated (cubin_text.c) */
    const unsigned char *b = sqlite3_column_blob(s, col);
    const size_t n = (size_t)sqlite3_column_bytes(s, col);
    unsigned char *z = NULL;
    size_t zn = 0;
    if (cubin_deflate(b, n, &z, &zn)) return -1;
    fputs(FAT_INFLATE_SQL "(X'", out);
    for (size_t i = 0; i < zn; i++) fprintf(out, "%02x", z[i]);
    fprintf(out, "', %zu)", n);
    free(z);
    break;
  }
  default: put_text(out, sqlite3_column_text(s, col)); break;
  }
  return 0;
}

/* Runs the statements of SQL on H one by one (so that :gpu can be bound
 * to GPU in each that names it). 0, or -1 with err. */
static int run_script(sqlite3 *h, const char *sql, const char *gpu, char *err, size_t errlen) {
  const char *tail = sql;
  while (tail && *tail) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(h, tail, -1, &s, &tail) != SQLITE_OK) {
      set_err(err, errlen, "export: %s", sqlite3_errmsg(h));
      return -1;
    }
    if (!s) break;
    int idx = sqlite3_bind_parameter_index(s, ":gpu");
    if (idx) sqlite3_bind_text(s, idx, gpu, -1, SQLITE_STATIC);
    const int step = sqlite3_step(s);
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) {
      set_err(err, errlen, "export: %s", sqlite3_errmsg(h));
      return -1;
    }
  }
  return 0;
}

/* The longest numbering statement (NUMBER_SQL filled in for one table). */
#define NUMBER_SQL_CAP 8192

/* The temp tables x_* of the rows that go out, and their ids: kept from
 * IDS (NULL: none, numbered afresh). 0, or -1 with err. */
static int number_rows(sqlite3 *h, const char *gpu, const fat_table_ids *ids, char *err,
                       size_t errlen) {
  char sql[NUMBER_SQL_CAP];
  if (sqlite3_exec(h, EXPORT_DROP_SQL, NULL, NULL, NULL) != SQLITE_OK) {
    set_err(err, errlen, "export: %s", sqlite3_errmsg(h));
    return -1;
  }
  for (size_t t = 0; t < N_ID_TABLES; t++) {
    const id_table *x = &ID_TABLES[t];
    if (table_ids_copy(h, ids, x->name, x->key, err, errlen)) return -1;
    if (x->first && run_script(h, x->first, gpu, err, errlen)) return -1;
    const int n = snprintf(sql, sizeof sql, NUMBER_SQL, x->name, x->rows, x->key, x->key, x->key,
                           x->name, x->name, x->key, x->key);
    if (n < 0 || (size_t)n >= sizeof sql) {
      set_err(err, errlen, "export %s: its numbering statement is over %d bytes", x->name,
              NUMBER_SQL_CAP);
      return -1;
    }
    if (run_script(h, sql, gpu, err, errlen)) return -1;
  }
  return 0;
}

int fat_tables_export(fat_db *db, const char *gpu_name, const fat_table_ids *ids, FILE *out,
                      char *err, size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  sqlite3_stmt *s = NULL;
  int rc = -1;
  if (number_rows(h, gpu_name, ids, err, errlen)) goto out;
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
  int paged = 0;
  if (sqlite3_prepare_v2(h, EXPORT_HAS_PAGED_SQL, -1, &s, NULL) != SQLITE_OK ||
      sqlite3_step(s) != SQLITE_ROW) {
    set_err(err, errlen, "export: %s", sqlite3_errmsg(h));
    goto out;
  }
  paged = sqlite3_column_int(s, 0) > 0;
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
               "-- Each variant carries its source_hash, not its source: import regenerates the source\n"
               "-- and refuses a variant whose hash differs from what the generator gives today (stale).\n"
               "-- Load with: fatune import FILE.sql (only INSERTs into fatune tables are accepted).\n",
          FAT_VERSION, FAT_DB_SCHEMA_VERSION);
  for (size_t t = 0; t < N_EXPORT_TABLES; t++) {
    if ((EXPORT_TABLES[t].when == EXPORT_IF_PAGED && !paged) ||
        (EXPORT_TABLES[t].when == EXPORT_IF_NOT_PAGED && paged))
      continue;
    if (sqlite3_prepare_v2(h, EXPORT_TABLES[t].select, -1, &s, NULL) != SQLITE_OK) {
      set_err(err, errlen, "export %s: %s", EXPORT_TABLES[t].name, sqlite3_errmsg(h));
      goto out;
    }
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
      fprintf(out, "INSERT INTO %s (%s) VALUES (", EXPORT_TABLES[t].name, EXPORT_TABLES[t].columns);
      for (int c = 0; c < sqlite3_column_count(s); c++) {
        if (c) fputs(", ", out);
        if (put_value(out, s, c)) {
          set_err(err, errlen, "export %s: out of memory", EXPORT_TABLES[t].name);
          goto out;
        }
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
