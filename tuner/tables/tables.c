/* SPDX-License-Identifier: MIT */
/* `fatune export`, `fatune import`, `fatune merge`: tuning results moved
 * between machines and shipped with the release as text SQL (tables.h says
 * why the format and the import path look as they do). Import and merge
 * both fill a scratch database, have trust.c judge it, and merge what it
 * leaves: one path for a stranger's rows. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli_args.h"
#include "compile.h"
#include "interrupt.h"
#include "nvrtc_api.h"
#include "options.h"
#include "sha256.h"
#include "tables.h"

#define ERRLEN 1024
#define PATH_CAP 4096
#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2
/* Architectures the generator is asked for in the stale check: a variant
 * pruned for one may exist for the other. */
static const char *const STALE_ARCHS[] = {"sm_90a", "sm_80"};
#define N_STALE_ARCHS 2

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* ---- export ------------------------------------------------------------ */

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
    "   AND EXISTS (SELECT 1 FROM main.checks c WHERE c.variant_id = t2.variant_id AND c.gpu_id ="
    "    t2.gpu_id AND c.problem_id = t2.problem_id AND c.retired = 0 AND c.passed = 1)"
    "   AND NOT EXISTS (SELECT 1 FROM main.checks c WHERE c.variant_id = t2.variant_id AND"
    "    c.gpu_id = t2.gpu_id AND c.problem_id = t2.problem_id AND c.retired = 0 AND c.passed = 0)"
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
    "CREATE TEMP TABLE x_checks AS SELECT c.id AS old, ROW_NUMBER() OVER (ORDER BY g.new, p.new,"
    "  v.new, c.batch, c.heads, c.seqlen_q, c.seqlen_k, c.created_at, c.id) AS new"
    "  FROM main.checks c JOIN temp.x_picks w ON w.gpu_id = c.gpu_id AND w.problem_id ="
    "  c.problem_id AND w.variant_id = c.variant_id JOIN temp.x_gpus g ON g.old = c.gpu_id"
    "  JOIN temp.x_problems p ON p.old = c.problem_id JOIN temp.x_variants v ON v.old ="
    "  c.variant_id WHERE c.retired = 0;"
    "CREATE TEMP TABLE x_timings AS SELECT w.timing_id AS old, ROW_NUMBER() OVER (ORDER BY"
    "  g.new, p.new, v.new) AS new FROM temp.x_picks w JOIN temp.x_gpus g ON g.old = w.gpu_id"
    "  JOIN temp.x_problems p ON p.old = w.problem_id JOIN temp.x_variants v ON v.old ="
    "  w.variant_id;";

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

/* ---- merging a judged scratch database -------------------------------- */

/* How often (SQLite virtual-machine steps) an import or a merge looks for ^C. */
#define INTERRUPT_CHECK_STEPS 10000

/* Stops a statement once SIGINT has arrived (the command's handler). */
static int interrupt_progress(void *unused) {
  (void)unused;
  return fat_interrupted();
}


/* Rows of the attached scratch database `src` brought into main by natural keys;
 * a row main already has is skipped, so merging twice adds nothing. A
 * winner comes in where main has none for its (GPU, problem), or where it
 * is faster than main's beyond the runs' spread: its timing's 90th
 * percentile below the 10th of main's winner's (two runs on two days differ
 * by their noise, and "the faster median" rewarded it); never one main has
 * seen fail. */
static const char *const MERGE_SQL =
    "INSERT OR IGNORE INTO main.gpus (name, cc_major, cc_minor, sm_count, driver_version,"
    " nvrtc_major, nvrtc_minor, mem_bytes, smem_per_block_optin, l2_bytes, clock_khz,"
    " mem_clock_khz, first_seen) SELECT name, cc_major, cc_minor, sm_count, driver_version,"
    " nvrtc_major, nvrtc_minor, mem_bytes, smem_per_block_optin, l2_bytes, clock_khz,"
    " mem_clock_khz, first_seen FROM src.gpus ORDER BY id;"
    "INSERT OR IGNORE INTO main.variants (name, family, direction, dtype, mask, head_dim, params,"
    " entry, block_m, threads, smem_bytes, source_hash, source, is_default, created_at)"
    " SELECT name, family, direction, dtype, mask, head_dim, params, entry, block_m, threads,"
    " smem_bytes, source_hash, source, is_default, created_at FROM src.variants ORDER BY id;"
    "INSERT OR IGNORE INTO main.problems (direction, dtype, mask, head_dim, batch, heads, heads_k,"
    " seqlen_q, seqlen_k, window_left, window_right, lengths) SELECT direction, dtype, mask,"
    " head_dim, batch, heads, heads_k, seqlen_q, seqlen_k, window_left, window_right, lengths"
    " FROM src.problems ORDER BY id;"
    "CREATE TEMP TABLE m_gpus AS SELECT s.id AS sid, m.id AS mid FROM src.gpus s JOIN main.gpus m"
    " ON m.name = s.name AND m.cc_major = s.cc_major AND m.cc_minor = s.cc_minor AND m.sm_count ="
    " s.sm_count AND m.driver_version = s.driver_version AND m.nvrtc_major = s.nvrtc_major AND"
    " m.nvrtc_minor = s.nvrtc_minor;"
    /* A ceiling main has measured for that GPU stays: its own measurement. */
    "INSERT OR IGNORE INTO main.ceilings (gpu_id, name, value, unit, measured_at)"
    " SELECT g.mid, c.name, c.value, c.unit, c.measured_at FROM src.ceilings c"
    " JOIN temp.m_gpus g ON g.sid = c.gpu_id ORDER BY c.id;"
    "CREATE TEMP TABLE m_variants AS SELECT s.id AS sid, m.id AS mid FROM src.variants s"
    " JOIN main.variants m ON m.name = s.name AND m.source_hash = s.source_hash;"
    "CREATE TEMP TABLE m_problems AS SELECT s.id AS sid, m.id AS mid FROM src.problems s"
    " JOIN main.problems m ON m.direction = s.direction AND m.dtype = s.dtype AND m.mask = s.mask"
    " AND m.head_dim = s.head_dim AND m.batch = s.batch AND m.heads = s.heads AND m.heads_k ="
    " s.heads_k AND m.seqlen_q = s.seqlen_q AND m.seqlen_k = s.seqlen_k AND m.window_left ="
    " s.window_left AND m.window_right = s.window_right AND m.lengths = s.lengths;"
    "INSERT OR IGNORE INTO main.builds (key, variant_id, arch, options, nvrtc_version, ok, cubin,"
    " registers, smem_static, stack_frame, spill_stores, spill_loads, compile_ms, log, created_at)"
    " SELECT b.key, v.mid, b.arch, b.options, b.nvrtc_version, b.ok, b.cubin, b.registers,"
    " b.smem_static, b.stack_frame, b.spill_stores, b.spill_loads, b.compile_ms, b.log,"
    " b.created_at FROM src.builds b JOIN temp.m_variants v ON v.sid = b.variant_id ORDER BY b.id;"
    "INSERT INTO main.checks (variant_id, gpu_id, problem_id, batch, heads, seqlen_q, seqlen_k,"
    " rel_l2, max_abs, lse_max_abs, nonfinite, passed, reason, retired, created_at)"
    " SELECT v.mid, g.mid, p.mid, c.batch, c.heads, c.seqlen_q, c.seqlen_k, c.rel_l2, c.max_abs,"
    " c.lse_max_abs, c.nonfinite, c.passed, c.reason, c.retired, c.created_at FROM src.checks c"
    " JOIN temp.m_variants v ON v.sid = c.variant_id JOIN temp.m_gpus g ON g.sid = c.gpu_id"
    " JOIN temp.m_problems p ON p.sid = c.problem_id WHERE NOT EXISTS (SELECT 1 FROM main.checks"
    " x WHERE x.variant_id = v.mid AND x.gpu_id = g.mid AND x.problem_id = p.mid AND x.batch ="
    " c.batch AND x.heads = c.heads AND x.seqlen_q = c.seqlen_q AND x.seqlen_k = c.seqlen_k AND"
    " x.passed = c.passed AND x.created_at = c.created_at) ORDER BY c.id;"
    "INSERT INTO main.timings (variant_id, gpu_id, problem_id, reps, median_ms, min_ms, max_ms,"
    " p10_ms, p90_ms, tflops, sm_clock_mhz, retired, created_at)"
    " SELECT v.mid, g.mid, p.mid, t.reps, t.median_ms, t.min_ms, t.max_ms, t.p10_ms, t.p90_ms,"
    " t.tflops, t.sm_clock_mhz, t.retired, t.created_at FROM src.timings t"
    " JOIN temp.m_variants v ON v.sid = t.variant_id JOIN temp.m_gpus g ON g.sid = t.gpu_id"
    " JOIN temp.m_problems p ON p.sid = t.problem_id WHERE NOT EXISTS (SELECT 1 FROM main.timings"
    " x WHERE x.variant_id = v.mid AND x.gpu_id = g.mid AND x.problem_id = p.mid AND x.reps ="
    " t.reps AND x.median_ms = t.median_ms AND x.created_at = t.created_at) ORDER BY t.id;"
    "CREATE TEMP TABLE m_timings AS SELECT t.id AS sid, (SELECT x.id FROM main.timings x"
    " WHERE x.variant_id = v.mid AND x.gpu_id = g.mid AND x.problem_id = p.mid AND x.reps ="
    " t.reps AND x.median_ms = t.median_ms AND x.created_at = t.created_at ORDER BY x.id LIMIT 1)"
    " AS mid, t.p90_ms AS p90_ms FROM src.timings t JOIN temp.m_variants v ON v.sid ="
    " t.variant_id JOIN temp.m_gpus g ON g.sid = t.gpu_id JOIN temp.m_problems p ON p.sid ="
    " t.problem_id;"
    "INSERT OR REPLACE INTO main.winners (gpu_id, problem_id, variant_id, timing_id, chosen_at)"
    " SELECT g.mid, p.mid, v.mid, t.mid, w.chosen_at FROM src.winners w"
    " JOIN temp.m_gpus g ON g.sid = w.gpu_id JOIN temp.m_problems p ON p.sid = w.problem_id"
    " JOIN temp.m_variants v ON v.sid = w.variant_id JOIN temp.m_timings t ON t.sid = w.timing_id"
    " WHERE NOT EXISTS (SELECT 1 FROM main.winners x JOIN main.timings xt ON xt.id = x.timing_id"
    "   WHERE x.gpu_id = g.mid AND x.problem_id = p.mid AND (xt.p10_ms <= t.p90_ms OR"
    "   x.timing_id = t.mid))"
    " AND NOT EXISTS (SELECT 1 FROM main.checks c WHERE c.variant_id = v.mid AND c.gpu_id = g.mid"
    "   AND c.problem_id = p.mid AND c.retired = 0 AND c.passed = 0)"
    " AND EXISTS (SELECT 1 FROM main.checks c WHERE c.variant_id = v.mid AND c.gpu_id = g.mid"
    "   AND c.problem_id = p.mid AND c.retired = 0 AND c.passed = 1);";

/* A cubin's hash comes in only where main's build under that key holds the
 * very cubin it hashes (a build main already had keeps its own). */
static const char *const MERGE_HASHES_SQL =
    "INSERT OR IGNORE INTO main.build_hashes (build_key, cubin_sha256)"
    " SELECT h.build_key, h.cubin_sha256 FROM src.build_hashes h"
    " JOIN src.builds sb ON sb.key = h.build_key JOIN main.builds mb ON mb.key = h.build_key"
    " WHERE mb.cubin = sb.cubin ORDER BY h.build_key;";

static const char *const MERGE_CLEANUP_SQL =
    "DROP TABLE IF EXISTS temp.m_gpus; DROP TABLE IF EXISTS temp.m_variants;"
    "DROP TABLE IF EXISTS temp.m_problems; DROP TABLE IF EXISTS temp.m_timings;";

#define MERGE_OLDEST_SOURCE 1  /* the oldest schema version a merge reads */

/* Rows in main's tables that a merge can add to. */
static int count_rows(sqlite3 *h, long long *n) {
  sqlite3_stmt *c = NULL;
  int rc = -1;
  if (sqlite3_prepare_v2(h,
                         "SELECT (SELECT count(*) FROM main.gpus) + (SELECT count(*) FROM"
                         " main.ceilings) + (SELECT count(*) FROM main.variants) + (SELECT count(*) FROM main.builds) + (SELECT"
                         " count(*) FROM main.problems) + (SELECT count(*) FROM main.checks) +"
                         " (SELECT count(*) FROM main.timings) + (SELECT count(*) FROM"
                         " main.winners) + (SELECT count(*) FROM main.build_hashes)",
                         -1, &c, NULL) == SQLITE_OK &&
      sqlite3_step(c) == SQLITE_ROW) {
    *n = sqlite3_column_int64(c, 0);
    rc = 0;
  }
  sqlite3_finalize(c);
  return rc;
}

/* Merges the judged scratch database at STAGE (of this schema version,
 * fatune's own file) into DB by natural keys; *ADDED gets the new rows. */
static int merge_scratch(fat_db *db, const char *stage, long long *added, char *err,
                         size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  sqlite3_stmt *s = NULL;
  int rc = -1, attached = 0, in_tx = 0;
  char *msg = NULL;
  long long before, after;
  sqlite3_progress_handler(h, INTERRUPT_CHECK_STEPS, interrupt_progress, NULL);
  if (count_rows(h, &before)) goto sqlfail;
  if (sqlite3_prepare_v2(h, "ATTACH DATABASE ?1 AS src", -1, &s, NULL) != SQLITE_OK) goto sqlfail;
  sqlite3_bind_text(s, 1, stage, -1, SQLITE_STATIC);
  if (sqlite3_step(s) != SQLITE_DONE) goto sqlfail;
  attached = 1;
  sqlite3_exec(h, MERGE_CLEANUP_SQL, NULL, NULL, NULL);
  if (sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) goto execfail;
  in_tx = 1;
  if (sqlite3_exec(h, MERGE_SQL, NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(h, MERGE_HASHES_SQL, NULL, NULL, &msg) != SQLITE_OK)
    goto execfail;
  if (sqlite3_exec(h, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) goto execfail;
  in_tx = 0;
  if (count_rows(h, &after)) goto sqlfail;
  *added = after - before;
  rc = 0;
  goto out;
sqlfail:
execfail:
  /* The target is what failed here (the scratch database is read): its
   * lock, its disk, its constraints. */
  set_err(err, errlen, "cannot merge into %s: %s%s", fat_db_path(db),
          msg ? msg : sqlite3_errmsg(h),
          (sqlite3_errcode(h) & 0xff) == SQLITE_BUSY
              ? " (another process held its write lock past the busy timeout)" : "");
out:
  sqlite3_free(msg);
  sqlite3_finalize(s);
  if (in_tx) sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_exec(h, MERGE_CLEANUP_SQL, NULL, NULL, NULL);
  if (attached) sqlite3_exec(h, "DETACH DATABASE src", NULL, NULL, NULL);
  sqlite3_progress_handler(h, 0, NULL, NULL);
  return rc;
}

/* ---- the scratch database both import and merge fill ------------------- */

/* The tables a scratch database receives, in the order their rows load
 * (each refers only to those before it). */
static const char *const IMPORT_TABLES[] = {"gpus",   "ceilings", "variants", "builds",  "build_hashes",
                                            "problems", "checks", "timings", "winners"};
#define N_IMPORT_TABLES (sizeof IMPORT_TABLES / sizeof IMPORT_TABLES[0])

/* Scratch databases are named SCRATCH_PREFIX<pid>-XXXXXX under $TMPDIR:
 * the pid says whether the process that made one is still alive. */
#define SCRATCH_PREFIX "fatune-import-"
/* The side files SQLite may keep beside a database. */
static const char *const SCRATCH_SIDES[] = {"-wal", "-shm", "-journal"};
#define N_SCRATCH_SIDES (sizeof SCRATCH_SIDES / sizeof SCRATCH_SIDES[0])

static const char *scratch_dir(void) {
  const char *tmpdir = getenv("TMPDIR");
  return tmpdir && *tmpdir ? tmpdir : "/tmp";
}

/* Removes the scratch database at STAGE and its side files. Only calls
 * that are async-signal-safe: the signal handler below uses it. */
static void scratch_remove(const char *stage) {
  char side[PATH_CAP + 16];
  const size_t n = strlen(stage);
  if (!n || n >= PATH_CAP) return;
  unlink(stage);
  for (size_t i = 0; i < N_SCRATCH_SIDES; i++) {
    memcpy(side, stage, n);
    strcpy(side + n, SCRATCH_SIDES[i]);
    unlink(side);
  }
}

/* The scratch database in use, for the handler of a signal that ends the
 * process (SIGTERM, SIGHUP, or a second ^C): it is removed first. */
static char live_stage[PATH_CAP];
static volatile sig_atomic_t live_stage_set;

static void remove_and_die(int sig) {
  if (live_stage_set) scratch_remove(live_stage);
  signal(sig, SIG_DFL);
  raise(sig);
}

/* A scratch database left by a process that no longer exists (a kill -9,
 * a crash): this user's regular files named SCRATCH_PREFIX<pid>-... in
 * DIR whose pid is gone are removed, with their side files. */
static void sweep_stale_scratch(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return;
  while ((e = readdir(d))) {
    char path[PATH_CAP], *end;
    struct stat st;
    if (strncmp(e->d_name, SCRATCH_PREFIX, strlen(SCRATCH_PREFIX))) continue;
    const long pid = strtol(e->d_name + strlen(SCRATCH_PREFIX), &end, 10);
    if (end == e->d_name + strlen(SCRATCH_PREFIX) || *end != '-' || pid <= 0 ||
        strchr(end, '.') || strstr(end, "-wal") || strstr(end, "-shm") || strstr(end, "-journal"))
      continue;
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
    if (lstat(path, &st) || !S_ISREG(st.st_mode) || st.st_uid != getuid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  /* alive, or not ours to judge */
    scratch_remove(path);
  }
  closedir(d);
}

/* A fresh fatune database of this schema version under $TMPDIR (STAGE: its
 * path), opened in *SDB. Returns 0, or -1 with err. */
static int scratch_open(const char *name, char stage[PATH_CAP], fat_db **sdb, char *err,
                        size_t errlen) {
  char e2[ERRLEN];
  int fd;
  *sdb = NULL;
  sweep_stale_scratch(scratch_dir());
  snprintf(stage, PATH_CAP, "%s/" SCRATCH_PREFIX "%ld-XXXXXX", scratch_dir(), (long)getpid());
  if ((fd = mkstemp(stage)) < 0) {
    set_err(err, errlen, "cannot create a scratch database in %s: %s", scratch_dir(),
            strerror(errno));
    stage[0] = 0;
    return -1;
  }
  close(fd);
  snprintf(live_stage, sizeof live_stage, "%s", stage);
  live_stage_set = 1;
  if (fat_db_open(stage, sdb, e2, sizeof e2)) {
    set_err(err, errlen, "%s: scratch database: %s", name, e2);
    return -1;
  }
  return 0;
}

/* Removes STAGE (scratch_remove) and forgets it. */
static void scratch_done(char stage[PATH_CAP]) {
  live_stage_set = 0;
  scratch_remove(stage);
  stage[0] = 0;
}

/* The end both paths share: judges the rows of scratch SDB (in an open
 * transaction) by the trust rule, applies the cubin policy, commits, and
 * merges what is left into DB. SDB is closed either way. */
static int judge_and_merge(fat_db *db, fat_db *sdb, const char *stage, const char *name,
                           const fat_import_options *o, fat_tables_report *r, char *err,
                           size_t errlen) {
  sqlite3 *sh = fat_db_handle(sdb);
  char *msg = NULL, e2[ERRLEN];
  int rc = -1;
  if (fat_trust_check(o->trust, sh, name, o->stale, &r->trust, err, errlen) ||
      fat_trust_cubins(sh, name, o->cubins, &r->trust, err, errlen)) {
    sqlite3_exec(sh, "ROLLBACK", NULL, NULL, NULL);
    goto out;
  }
  if (sqlite3_exec(sh, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
    set_err(err, errlen, "%s: scratch database: %s", name, msg ? msg : sqlite3_errmsg(sh));
    sqlite3_exec(sh, "ROLLBACK", NULL, NULL, NULL);
    goto out;
  }
  fat_db_close(sdb);
  sdb = NULL;
  if (merge_scratch(db, stage, &r->added, e2, sizeof e2)) {
    set_err(err, errlen, "%s: %s", name, e2);
    goto out;
  }
  rc = 0;
out:
  sqlite3_free(msg);
  fat_db_close(sdb);
  return rc;
}

/* ---- import ------------------------------------------------------------ */

/* Functions a table file may call: char() splices newlines, the rest are
 * what the schema's constraints and defaults evaluate. */
static const char *const IMPORT_FUNCTIONS[] = {"char", "length", "strftime", "glob"};
#define N_IMPORT_FUNCTIONS (sizeof IMPORT_FUNCTIONS / sizeof IMPORT_FUNCTIONS[0])

typedef struct import_guard {
  char refused[256];  /* the first action refused, for the message */
} import_guard;

static int in_list(const char *s, const char *const *list, size_t n) {
  for (size_t i = 0; s && i < n; i++)
    if (!strcmp(s, list[i])) return 1;
  return 0;
}

static const char *action_name(int action) {
  switch (action) {
  case SQLITE_INSERT: return "INSERT INTO";
  case SQLITE_DELETE: return "DELETE FROM";
  case SQLITE_UPDATE: return "UPDATE";
  case SQLITE_SELECT: return "SELECT";
  case SQLITE_FUNCTION: return "function";
  case SQLITE_DROP_TABLE: return "DROP TABLE";
  case SQLITE_ATTACH: return "ATTACH";
  case SQLITE_DETACH: return "DETACH";
  case SQLITE_PRAGMA: return "PRAGMA";
  case SQLITE_TRANSACTION: return "transaction";
  case SQLITE_CREATE_TABLE: case SQLITE_CREATE_TEMP_TABLE: return "CREATE TABLE";
  case SQLITE_CREATE_TRIGGER: case SQLITE_CREATE_TEMP_TRIGGER: return "CREATE TRIGGER";
  default: return "statement";
  }
}

/* Only INSERTs into fatune's tables, and what the schema's own triggers and
 * constraints do in response, are allowed. */
static int import_authorizer(void *user, int action, const char *a1, const char *a2,
                             const char *db, const char *trigger) {
  import_guard *g = user;
  switch (action) {
  case SQLITE_INSERT:
    /* Only the scratch database's own tables: never temp or an attachment. */
    if (in_list(a1, IMPORT_TABLES, N_IMPORT_TABLES) && db && !strcmp(db, "main")) return SQLITE_OK;
    break;
  case SQLITE_READ: return SQLITE_OK;
  case SQLITE_FUNCTION:
    if (in_list(a2, IMPORT_FUNCTIONS, N_IMPORT_FUNCTIONS)) return SQLITE_OK;
    break;
  case SQLITE_SELECT:
  case SQLITE_DELETE:
    if (trigger) return SQLITE_OK; /* the schema's triggers */
    break;
  default: break;
  }
  /* The first refusal aborts the statement: it is the one reported. */
  const char *what = action == SQLITE_FUNCTION && a2 ? a2 : (a1 ? a1 : a2);
  if (!g->refused[0])
    snprintf(g->refused, sizeof g->refused, "%s%s%s%s", action_name(action), what ? " '" : "",
             what ? what : "", what ? "'" : "");
  return SQLITE_DENY;
}


static const fat_tables_report NO_REPORT;

/* A UTF-8 byte order mark, which some editors put before the first line. */
#define UTF8_BOM "\xef\xbb\xbf"
/* Longest SQLite message quoted whole: a cut or mangled blob makes one of
 * its whole hex token. */
#define MAX_QUOTED_MESSAGE 160
/* The text after white space and SQL comments at P. */
static const char *skip_space(const char *p) {
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') p++;
    if (p[0] == '-' && p[1] == '-') {
      while (*p && *p != '\n') p++;
    } else if (p[0] == '/' && p[1] == '*') {
      const char *e = strstr(p + 2, "*/");
      p = e ? e + 2 : p + strlen(p);
    } else {
      return p;
    }
  }
}

/* Counts lines up to P: *AT (a position at or before P) moves there and
 * *LINE is the line of P. */
static void count_lines(const char **at, const char *p, long *line) {
  for (; *at < p; (*at)++) *line += **at == '\n';
}

/* 1 when TEXT's last line that is not blank is FAT_TABLES_END's (CR LF line
 * ends and blank lines after it allowed). */
static int ends_with_end_line(const char *text) {
  const size_t want = strlen(FAT_TABLES_END) - 1; /* without its newline */
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' ||
                   text[n - 1] == '\t'))
    n--;
  return n > want && text[n - want - 1] == '\n' && !strncmp(text + n - want, FAT_TABLES_END, want);
}

/* NAME:LINE: MSG, a long message cut to its start. */
static void set_line_err(char *err, size_t errlen, const char *name, long line, const char *msg) {
  const size_t n = strlen(msg);
  if (n > MAX_QUOTED_MESSAGE)
    set_err(err, errlen, "%s:%ld: %.*s... (%zu more characters)", name, line,
            MAX_QUOTED_MESSAGE, msg, n - MAX_QUOTED_MESSAGE);
  else
    set_err(err, errlen, "%s:%ld: %s", name, line, msg);
}

/* Runs the statements of TEXT on SH one by one under the authorizer,
 * naming the line of the first that fails. Returns 0 or -1 with err. */
static int run_table_text(sqlite3 *sh, const char *text, const char *name, import_guard *guard,
                          char *err, size_t errlen) {
  const char *tail = text, *counted = text;
  long line = 1;
  for (;;) {
    const char *start = skip_space(tail), *next = NULL;
    sqlite3_stmt *st = NULL;
    if (!*start) return 0;
    count_lines(&counted, start, &line);
    int rc = sqlite3_prepare_v2(sh, start, -1, &st, &next);
    if (rc == SQLITE_OK && st) {
      while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      }
      if (rc == SQLITE_DONE) rc = SQLITE_OK;
    } else if (rc != SQLITE_OK) {
      /* The line of the token SQLite stopped at, when it says. */
      const int off = sqlite3_error_offset(sh);
      if (off >= 0) count_lines(&counted, start + off, &line);
    }
    if (rc != SQLITE_OK) {
      char why[ERRLEN];
      if (guard->refused[0])
        snprintf(why, sizeof why, "refused %s: a table may only INSERT into fatune's tables",
                 guard->refused);
      else
        snprintf(why, sizeof why, "%s", sqlite3_errmsg(sh));
      set_line_err(err, errlen, name, line, why);
      sqlite3_finalize(st);
      return -1;
    }
    sqlite3_finalize(st);
    tail = next;
  }
}

int fat_tables_import(fat_db *db, const char *sql, const char *name, const fat_import_options *o,
                      fat_tables_report *r, char *err, size_t errlen) {
  char stage[PATH_CAP] = "";
  fat_db *sdb = NULL;
  fat_tables_report scratch_report;
  char *msg = NULL;
  int rc = -1;
  import_guard guard = {{0}};
  if (!r) r = &scratch_report;
  *r = NO_REPORT;
  if (!strncmp(sql, UTF8_BOM, strlen(UTF8_BOM))) sql += strlen(UTF8_BOM);
  if (strncmp(sql, FAT_TABLES_MAGIC, strlen(FAT_TABLES_MAGIC))) {
    set_err(err, errlen, "%s: not a fatune table (first line must start '%s')", name,
            FAT_TABLES_MAGIC);
    return -1;
  }
  /* A file cut anywhere, between two statements or inside one (a blob's
   * hex, a source), is refused as what it is, before any row is read. */
  if (!ends_with_end_line(sql)) {
    set_err(err, errlen, "%s: truncated: the file does not end with the line '%.*s'", name,
            (int)strlen(FAT_TABLES_END) - 1, FAT_TABLES_END);
    return -1;
  }
  if (!o || !o->trust) {
    set_err(err, errlen, "%s: no generator to check its variants against", name);
    return -1;
  }
  if (scratch_open(name, stage, &sdb, err, errlen)) goto out;
  sqlite3 *sh = fat_db_handle(sdb);
  /* Defensive mode: no writable_schema, no direct writes to the schema or
   * shadow tables, whatever the file manages to say. */
  sqlite3_db_config(sh, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
  sqlite3_db_config(sh, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
  sqlite3_progress_handler(sh, INTERRUPT_CHECK_STEPS, interrupt_progress, NULL);
  if (sqlite3_exec(sh, "BEGIN", NULL, NULL, &msg) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", name, msg ? msg : "scratch database failure");
    goto out;
  }
  sqlite3_set_authorizer(sh, import_authorizer, &guard);
  int erc = run_table_text(sh, sql, name, &guard, err, errlen);
  sqlite3_set_authorizer(sh, NULL, NULL);
  if (erc) {
    sqlite3_exec(sh, "ROLLBACK", NULL, NULL, NULL);
    goto out;
  }
  rc = judge_and_merge(db, sdb, stage, name, o, r, err, errlen);
  sdb = NULL;
out:
  sqlite3_free(msg);
  fat_db_close(sdb);
  scratch_done(stage);
  return rc;
}

/* ---- merge ------------------------------------------------------------- */

/* Tables SQLite itself may have made in a database (ANALYZE's statistics,
 * AUTOINCREMENT's counters): allowed beside fatune's own. */
static const char *const SQLITE_OWN_TABLES[] = {"sqlite_stat1", "sqlite_stat2", "sqlite_stat3",
                                                "sqlite_stat4", "sqlite_sequence"};
#define N_SQLITE_OWN_TABLES (sizeof SQLITE_OWN_TABLES / sizeof SQLITE_OWN_TABLES[0])

/* Every object of source SRC's schema is one a fatune database has, of the
 * same kind, as REF (a fresh scratch database) has it: a table, index,
 * view or trigger of another name, or a view where fatune has a table (a
 * view is code), refuses the source. Its views and triggers never run:
 * the source is read-only and only its tables are read. */
static int check_source_objects(sqlite3 *src, sqlite3 *ref, const char *path, char *err,
                                size_t errlen) {
  sqlite3_stmt *s = NULL, *q = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(src, "SELECT type, name, sql LIKE 'CREATE VIRTUAL TABLE%' FROM"
                         " main.sqlite_schema ORDER BY rowid", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(ref, "SELECT type FROM main.sqlite_schema WHERE name = ?1", -1, &q,
                         NULL) != SQLITE_OK) {
    set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(src));
    goto out;
  }
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *type = (const char *)sqlite3_column_text(s, 0);
    const char *name = (const char *)sqlite3_column_text(s, 1);
    if (!type || !name) continue;
    /* A virtual table is read through its module's code, not from the file. */
    if (sqlite3_column_int(s, 2)) {
      set_err(err, errlen, "%s: '%s' is a virtual table: refusing the database", path, name);
      goto out;
    }
    if (!strcmp(type, "table") && in_list(name, SQLITE_OWN_TABLES, N_SQLITE_OWN_TABLES)) continue;
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) != SQLITE_ROW) {
      set_err(err, errlen, "%s: %s '%s' is not fatune's: refusing the database", path, type, name);
      goto out;
    }
    const char *want = (const char *)sqlite3_column_text(q, 0);
    if (strcmp(type, want)) {
      set_err(err, errlen, "%s: '%s' is a %s, fatune's is a %s: refusing the database", path,
              name, type, want);
      goto out;
    }
  }
  if (step != SQLITE_DONE) {
    set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(src));
    goto out;
  }
  /* A generated column is computed as it is read: an expression of the
   * file's (a 60 MB string per row, say), not a value stored in it. Without
   * them everything read is bytes of the file, so the file bounds it. */
  for (size_t t = 0; t < N_IMPORT_TABLES; t++) {
    char sql[128];
    sqlite3_finalize(q);
    q = NULL;
    snprintf(sql, sizeof sql, "PRAGMA main.table_xinfo(%s)", IMPORT_TABLES[t]);
    if (sqlite3_prepare_v2(src, sql, -1, &q, NULL) != SQLITE_OK) {
      set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(src));
      goto out;
    }
    while ((step = sqlite3_step(q)) == SQLITE_ROW)
      if (sqlite3_column_int(q, 6) != 0) { /* hidden: 2 and 3 are generated columns */
        set_err(err, errlen, "%s: column '%s' of %s is generated, not stored: refusing the "
                "database", path, (const char *)sqlite3_column_text(q, 1), IMPORT_TABLES[t]);
        goto out;
      }
    if (step != SQLITE_DONE) {
      set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(src));
      goto out;
    }
  }
  rc = 0;
out:
  sqlite3_finalize(s);
  sqlite3_finalize(q);
  return rc;
}

/* Opens PATH read-only (a merge never writes its source) as a fatune
 * database of a schema version a merge reads, whose schema is fatune's
 * (REF: a fresh one to compare with). *SRC gets the connection. */
static int open_source(const char *path, sqlite3 *ref, sqlite3 **src, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  struct stat st;
  int version, rc = -1;
  *src = NULL;
  if (access(path, R_OK)) {
    set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return -1;
  }
  if (stat(path, &st) || !S_ISREG(st.st_mode)) {
    set_err(err, errlen, "%s: not a regular file", path);
    return -1;
  }
  if (sqlite3_open_v2(path, src, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    set_err(err, errlen, "not a fatune database: %s: %s", path,
            *src ? sqlite3_errmsg(*src) : "out of memory");
    goto out;
  }
  /* Nothing in its schema runs with more trust than the rows: no function
   * a view or trigger names unless it is harmless, no schema writes, and
   * no value longer than the largest a row may hold. */
  sqlite3_db_config(*src, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
  sqlite3_db_config(*src, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
  sqlite3_limit(*src, SQLITE_LIMIT_LENGTH, (int)FAT_TABLES_MAX_CUBIN_BYTES + 1);
  sqlite3_busy_timeout(*src, FAT_DB_BUSY_TIMEOUT_MS);
  sqlite3_progress_handler(*src, INTERRUPT_CHECK_STEPS, interrupt_progress, NULL);
  if (sqlite3_prepare_v2(*src, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_step(s) != SQLITE_ROW) {
    set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(*src));
    goto out;
  }
  version = sqlite3_column_int(s, 0);
  if (version < MERGE_OLDEST_SOURCE || version > FAT_DB_SCHEMA_VERSION) {
    set_err(err, errlen, "%s: schema version %d, this fatune reads %d to %d", path, version,
            MERGE_OLDEST_SOURCE, FAT_DB_SCHEMA_VERSION);
    goto out;
  }
  if (check_source_objects(*src, ref, path, err, errlen)) goto out;
  rc = 0;
out:
  sqlite3_finalize(s);
  if (rc) {
    sqlite3_close(*src);
    *src = NULL;
  }
  return rc;
}

/* The columns of TABLE in database H (heap, NULL-terminated list of heap
 * strings), or NULL on failure. */
static char **table_columns(sqlite3 *h, const char *table) {
  char sql[128];
  sqlite3_stmt *s = NULL;
  char **cols = NULL;
  size_t n = 0;
  snprintf(sql, sizeof sql, "PRAGMA main.table_info(%s)", table);
  if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) != SQLITE_OK) return NULL;
  if (!(cols = calloc(1, sizeof *cols))) goto out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    char **grown = realloc(cols, (n + 2) * sizeof *cols);
    if (!grown) break;
    cols = grown;
    cols[n] = strdup((const char *)sqlite3_column_text(s, 1));
    cols[++n] = NULL;
  }
out:
  sqlite3_finalize(s);
  return cols;
}

static int has_column(char *const *cols, const char *name) {
  for (size_t i = 0; cols[i]; i++)
    if (!strcmp(cols[i], name)) return 1;
  return 0;
}

static void columns_free(char **cols) {
  for (size_t i = 0; cols && cols[i]; i++) free(cols[i]);
  free(cols);
}

/* Copies TABLE's rows from SRC into scratch SH: the columns both have (an
 * older source lacks some, which take their defaults), named as the
 * scratch's schema names them. The scratch's constraints and triggers
 * judge each row as they judge an imported file's INSERT. */
static int copy_table(sqlite3 *src, sqlite3 *sh, const char *path, const char *table, char *err,
                      size_t errlen) {
  char **ours = table_columns(sh, table), **theirs = table_columns(src, table);
  char *select = NULL, *insert = NULL;
  size_t cap = 0;
  sqlite3_stmt *from = NULL, *to = NULL;
  int rc = -1, n = 0, step;
  if (!ours || !theirs) {
    set_err(err, errlen, "%s: cannot read the columns of %s", path, table);
    goto out;
  }
  if (!theirs[0]) {  /* a table an older schema has not yet got (build_hashes) */
    rc = 0;
    goto out;
  }
  for (size_t i = 0; ours[i]; i++) cap += strlen(ours[i]) + 8;
  cap += strlen(table) + 64;
  select = malloc(cap), insert = malloc(2 * cap);
  if (!select || !insert) {
    set_err(err, errlen, "out of memory");
    goto out;
  }
  strcpy(select, "SELECT ");
  snprintf(insert, 2 * cap, "INSERT INTO main.\"%s\" (", table);
  for (size_t i = 0; ours[i]; i++) n += has_column(theirs, ours[i]);
  if (n == 0) {  /* nothing in common: nothing to bring */
    rc = 0;
    goto out;
  }
  n = 0;
  for (size_t i = 0; ours[i]; i++) {
    if (!has_column(theirs, ours[i])) continue;
    strcat(select, n ? ", \"" : "\"");
    strcat(select, ours[i]);
    strcat(select, "\"");
    strcat(insert, n ? ", \"" : "\"");
    strcat(insert, ours[i]);
    strcat(insert, "\"");
    n++;
  }
  /* The rowid last, to name a refused row by it. */
  snprintf(select + strlen(select), cap - strlen(select), ", rowid FROM main.\"%s\" ORDER BY rowid",
           table);
  strcat(insert, ") VALUES (");
  for (int i = 0; i < n; i++) strcat(insert, i ? ", ?" : "?");
  strcat(insert, ")");
  if (sqlite3_prepare_v2(src, select, -1, &from, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s: %s", path, table, sqlite3_errmsg(src));
    goto out;
  }
  if (sqlite3_prepare_v2(sh, insert, -1, &to, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s: %s", path, table, sqlite3_errmsg(sh));
    goto out;
  }
  while ((step = sqlite3_step(from)) == SQLITE_ROW) {
    sqlite3_reset(to);
    for (int c = 0; c < n; c++) sqlite3_bind_value(to, c + 1, sqlite3_column_value(from, c));
    if (sqlite3_step(to) != SQLITE_DONE) {
      set_err(err, errlen, "%s: %s row %lld: %s", path, table,
              (long long)sqlite3_column_int64(from, n), sqlite3_errmsg(sh));
      goto out;
    }
  }
  if (step != SQLITE_DONE) {
    set_err(err, errlen, "%s: %s: %s", path, table, sqlite3_errmsg(src));
    goto out;
  }
  rc = 0;
out:
  sqlite3_finalize(from);
  sqlite3_finalize(to);
  free(select);
  free(insert);
  columns_free(ours);
  columns_free(theirs);
  return rc;
}

int fat_tables_merge(fat_db *db, const char *path, const fat_import_options *o,
                     fat_tables_report *r, char *err, size_t errlen) {
  char stage[PATH_CAP] = "";
  fat_db *sdb = NULL;
  sqlite3 *src = NULL;
  fat_tables_report scratch_report;
  int rc = -1;
  if (!r) r = &scratch_report;
  *r = NO_REPORT;
  if (!o || !o->trust) {
    set_err(err, errlen, "%s: no generator to check its variants against", path);
    return -1;
  }
  if (scratch_open(path, stage, &sdb, err, errlen)) goto out;
  sqlite3 *sh = fat_db_handle(sdb);
  sqlite3_progress_handler(sh, INTERRUPT_CHECK_STEPS, interrupt_progress, NULL);
  if (open_source(path, sh, &src, err, errlen)) goto out;
  if (sqlite3_exec(sh, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: scratch database: %s", path, sqlite3_errmsg(sh));
    goto out;
  }
  /* One read transaction: the rows come from one state of the source. */
  if (sqlite3_exec(src, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", path, sqlite3_errmsg(src));
    sqlite3_exec(sh, "ROLLBACK", NULL, NULL, NULL);
    goto out;
  }
  for (size_t t = 0; t < N_IMPORT_TABLES; t++)
    if (copy_table(src, sh, path, IMPORT_TABLES[t], err, errlen)) {
      sqlite3_exec(sh, "ROLLBACK", NULL, NULL, NULL);
      goto out;
    }
  sqlite3_exec(src, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(src);
  src = NULL;
  rc = judge_and_merge(db, sdb, stage, path, o, r, err, errlen);
  sdb = NULL;
out:
  sqlite3_close(src);
  fat_db_close(sdb);
  scratch_done(stage);
  return rc;
}

/* ---- stale check --------------------------------------------------------- */

/* 1 when the source in column COL of row S hashes to HASH: a source
 * altered under its hash (the runtime refuses to compile it) counts stale. */
static int source_hashes_to(sqlite3_stmt *s, int col, const char *hash) {
  char hex[FAT_SHA256_HEX_CHARS + 1];
  const char *src = (const char *)sqlite3_column_text(s, col);
  if (!src || !hash) return 0;
  fat_sha256_hex(src, (size_t)sqlite3_column_bytes(s, col), hex);
  return !strcmp(hex, hash);
}

/* The generator's variants of one (DIR, DT, MK, HD) for the stale check's
 * architecture A (*V: free each, then the array). Returns 0 or -1 with err. */
static int stale_arch_variants(fat_gen *g, fat_direction dir, fat_dtype dt, fat_mask mk, int hd,
                               int a, fat_variant **v, size_t *n, char *err, size_t errlen) {
  fat_gen_query q = {.direction = dir, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = STALE_ARCHS[a]};
  *v = NULL;
  *n = 0;
  return fat_gen_variants(g, &q, v, n, NULL, NULL, err, errlen);
}

/* What the generator produces today for variant NAME of (DIR, DT, MK, HD):
 * its source hash in NOW, or "" when no architecture's space has it.
 * Returns 0, or -1 with err when the generator fails. */
static int regenerated_hash(fat_gen *g, const char *name, fat_direction dir, fat_dtype dt,
                            fat_mask mk, int hd, char now[FAT_SHA256_HEX_CHARS + 1], char *err,
                            size_t errlen) {
  now[0] = 0;
  for (int a = 0; a < N_STALE_ARCHS && !now[0]; a++) {
    fat_variant *v;
    size_t n;
    if (stale_arch_variants(g, dir, dt, mk, hd, a, &v, &n, err, errlen)) return -1;
    for (size_t i = 0; i < n; i++)
      if (!strcmp(v[i].name, name)) snprintf(now, FAT_SHA256_HEX_CHARS + 1, "%s", v[i].hash);
    for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
    free(v);
  }
  return 0;
}


int fat_tables_stale(fat_db *db, fat_gen *g, char *report, size_t cap, char *err, size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  sqlite3_stmt *s = NULL;
  int n_stale = 0, rc = -1;
  size_t used = 0;
  if (report && cap) report[0] = 0;
  if (sqlite3_prepare_v2(h,
                         "SELECT DISTINCT v.name, v.source_hash, v.direction, v.dtype, v.mask,"
                         " v.head_dim, v.source FROM main.winners w JOIN main.variants v ON v.id ="
                         " w.variant_id ORDER BY v.name, v.source_hash",
                         -1, &s, NULL) != SQLITE_OK) {
    set_err(err, errlen, "stale check: %s", sqlite3_errmsg(h));
    return -1;
  }
  int step;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(s, 0);
    const char *hash = (const char *)sqlite3_column_text(s, 1);
    fat_direction dir;
    fat_dtype dt;
    fat_mask mk;
    int hd = sqlite3_column_int(s, 5);
    if (fat_direction_parse((const char *)sqlite3_column_text(s, 2), &dir) ||
        fat_dtype_parse((const char *)sqlite3_column_text(s, 3), &dt) ||
        fat_mask_parse((const char *)sqlite3_column_text(s, 4), &mk)) {
      set_err(err, errlen, "stale check: %s: unknown direction, dtype or mask", name);
      goto out;
    }
    char now[FAT_SHA256_HEX_CHARS + 1] = "", e2[ERRLEN];
    const int altered = !source_hashes_to(s, 6, hash);
    /* A generator failure counts the variant stale (as before): nothing
     * today produces it. */
    if (regenerated_hash(g, name, dir, dt, mk, hd, now, e2, sizeof e2)) now[0] = 0;
    if (!strcmp(now, hash) && !altered) continue;
    n_stale++;
    if (report && used < cap) {
      int k = altered ? snprintf(report + used, cap - used,
                                 "stale: %s: its source does not hash to its source_hash %s\n",
                                 name, hash)
            : now[0] ? snprintf(report + used, cap - used,
                                "stale: %s: table source_hash %s, generator gives %s\n", name,
                                hash, now)
                     : snprintf(report + used, cap - used,
                                "stale: %s: the generator no longer produces this variant\n",
                                name);
      if (k > 0) used += (size_t)k < cap - used ? (size_t)k : cap - used - 1;
    }
  }
  if (step != SQLITE_DONE) {
    set_err(err, errlen, "stale check: %s", sqlite3_errmsg(h));
    goto out;
  }
  rc = n_stale;
out:
  sqlite3_finalize(s);
  return rc;
}

/* ---- retiring stale variants ------------------------------------------- */

/* The generator's variants of one (direction, dtype, mask, head dim) over
 * the stale check's architectures, generated once for all the database's
 * variants of that group (thousands after a few tunes). */
typedef struct gen_group {
  fat_variant *v;
  size_t n;
} gen_group;

/* Variants anything live still refers to (a live timing or check, or a
 * winner), grouped by (direction, dtype, mask, head dim) for the
 * generator: what retire-stale and rehash walk. */
static const char *const LIVE_VARIANTS_SQL =
    "SELECT v.id, v.name, v.source_hash, v.direction, v.dtype, v.mask, v.head_dim, v.source"
    " FROM variants v WHERE"
    " EXISTS (SELECT 1 FROM timings t WHERE t.variant_id = v.id AND t.retired = 0)"
    " OR EXISTS (SELECT 1 FROM checks c WHERE c.variant_id = v.id AND c.retired = 0)"
    " OR EXISTS (SELECT 1 FROM winners w WHERE w.variant_id = v.id)"
    " ORDER BY v.direction, v.dtype, v.mask, v.head_dim, v.name";

static void group_free(gen_group *gg) {
  for (size_t i = 0; i < gg->n; i++) fat_variant_free(&gg->v[i]);
  free(gg->v);
  gg->v = NULL;
  gg->n = 0;
}

static int group_load(fat_gen *g, fat_direction dir, fat_dtype dt, fat_mask mk, int hd,
                      gen_group *gg, char *err, size_t errlen) {
  group_free(gg);
  for (int a = 0; a < N_STALE_ARCHS; a++) {
    fat_variant *v;
    size_t n;
    if (stale_arch_variants(g, dir, dt, mk, hd, a, &v, &n, err, errlen)) return -1;
    fat_variant *all = realloc(gg->v, (gg->n + n) * sizeof *all);
    if (!all && gg->n + n) {
      for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
      free(v);
      set_err(err, errlen, "out of memory");
      return -1;
    }
    if (n) memcpy(all + gg->n, v, n * sizeof *v);
    gg->v = all;
    gg->n += n;
    free(v);
  }
  return 0;
}

/* The group's variant NAME as the generator gives it today, or NULL. */
static const fat_variant *group_find(const gen_group *gg, const char *name) {
  for (size_t i = 0; i < gg->n; i++)
    if (!strcmp(gg->v[i].name, name)) return &gg->v[i];
  return NULL;
}

static const char *group_hash(const gen_group *gg, const char *name) {
  const fat_variant *v = group_find(gg, name);
  return v ? v->hash : NULL;
}

int fat_tables_retire_stale(fat_db *db, fat_gen *g, long long *n_variants, long long *n_winners,
                            char *err, size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  sqlite3_stmt *s = NULL, *retire[3] = {NULL, NULL, NULL};
  static const char *const RETIRE_SQL[3] = {
      "UPDATE checks SET retired = 1 WHERE variant_id = ?1 AND retired = 0",
      "UPDATE timings SET retired = 1 WHERE variant_id = ?1 AND retired = 0",
      "DELETE FROM winners WHERE variant_id = ?1"};
  gen_group gg = {0};
  sqlite3_int64 *stale = NULL;
  size_t variants = 0, cap = 0;
  long long winners = 0;
  int rc = -1, in_tx = 0, step, have_group = 0;
  char group_key[64] = "";
  if (sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) goto sqlfail;
  in_tx = 1;
  if (sqlite3_prepare_v2(h, LIVE_VARIANTS_SQL, -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  for (int i = 0; i < 3; i++)
    if (sqlite3_prepare_v2(h, RETIRE_SQL[i], -1, &retire[i], NULL) != SQLITE_OK) goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(s, 1);
    const char *hash = (const char *)sqlite3_column_text(s, 2);
    const char *dir_s = (const char *)sqlite3_column_text(s, 3);
    const char *dt_s = (const char *)sqlite3_column_text(s, 4);
    const char *mk_s = (const char *)sqlite3_column_text(s, 5);
    const int hd = sqlite3_column_int(s, 6);
    fat_direction dir;
    fat_dtype dt;
    fat_mask mk;
    if (fat_direction_parse(dir_s, &dir) || fat_dtype_parse(dt_s, &dt) || fat_mask_parse(mk_s, &mk)) {
      set_err(err, errlen, "retire stale: %s: unknown direction, dtype or mask", name);
      goto out;
    }
    char key[64];
    snprintf(key, sizeof key, "%s %s %s %d", dir_s, dt_s, mk_s, hd);
    if (!have_group || strcmp(key, group_key)) {
      if (group_load(g, dir, dt, mk, hd, &gg, err, errlen)) goto out;
      snprintf(group_key, sizeof group_key, "%s", key);
      have_group = 1;
    }
    const char *now = group_hash(&gg, name);
    if (now && !strcmp(now, hash) && source_hashes_to(s, 7, hash)) continue;
    if (variants == cap) {  /* retired after the walk, not under its cursor */
      size_t more = cap ? 2 * cap : 64;
      sqlite3_int64 *grown = realloc(stale, more * sizeof *grown);
      if (!grown) {
        set_err(err, errlen, "out of memory");
        goto out;
      }
      stale = grown;
      cap = more;
    }
    stale[variants++] = sqlite3_column_int64(s, 0);
  }
  if (step != SQLITE_DONE) goto sqlfail;
  for (size_t k = 0; k < variants; k++)
    for (int i = 0; i < 3; i++) {
      sqlite3_reset(retire[i]);
      sqlite3_bind_int64(retire[i], 1, stale[k]);
      if (sqlite3_step(retire[i]) != SQLITE_DONE) goto sqlfail;
      if (i == 2) winners += sqlite3_changes(h);
    }
  if (sqlite3_exec(h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) goto sqlfail;
  in_tx = 0;
  if (n_variants) *n_variants = (long long)variants;
  if (n_winners) *n_winners = winners;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "retire stale: %s", sqlite3_errmsg(h));
out:
  free(stale);
  sqlite3_finalize(s);
  for (int i = 0; i < 3; i++) sqlite3_finalize(retire[i]);
  if (in_tx) sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  group_free(&gg);
  return rc;
}

/* ---- carrying measurements over a source-only change ------------------ */

/* A stale variant REHASH may carry over: its id and its (direction, dtype,
 * mask, head dim) group, for the generator. */
typedef struct rehash_item {
  sqlite3_int64 id;
  char *name, *key;
  fat_direction dir;
  fat_dtype dt;
  fat_mask mk;
  int hd;
} rehash_item;

/* 1 when variant ID's stored shape (family, parameters, entry, launch
 * geometry) is NOW's; 0 when not; -1 on an SQL error. */
static int same_shape(sqlite3 *h, sqlite3_int64 id, const fat_variant *now) {
  sqlite3_stmt *s = NULL;
  int same = -1;
  if (sqlite3_prepare_v2(h,
                         "SELECT family = ?2 AND params = ?3 AND entry = ?4 AND block_m = ?5"
                         " AND threads = ?6 AND smem_bytes = ?7 FROM variants WHERE id = ?1",
                         -1, &s, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int64(s, 1, id);
  sqlite3_bind_text(s, 2, now->family, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, now->params, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 4, now->entry, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 5, now->block_m);
  sqlite3_bind_int(s, 6, now->threads);
  sqlite3_bind_int(s, 7, now->smem_bytes);
  if (sqlite3_step(s) == SQLITE_ROW) same = sqlite3_column_int(s, 0);
  sqlite3_finalize(s);
  return same;
}

/* Compiles NOW's source for every stored build of variant ID and compares
 * the cubins byte for byte. 1: every build (at least one) is identical and
 * was made with today's options and NVRTC; 0: not; -1 with err: NVRTC or
 * SQL failed. */
static int same_machine_code(sqlite3 *h, sqlite3_int64 id, const fat_variant *now,
                             const char *nvrtc_version, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int same = 1, builds = 0, step = SQLITE_DONE;
  if (sqlite3_prepare_v2(h,
                         "SELECT arch, options, nvrtc_version, cubin FROM builds"
                         " WHERE variant_id = ?1 AND ok = 1 ORDER BY id",
                         -1, &s, NULL) != SQLITE_OK) {
    set_err(err, errlen, "rehash: %s", sqlite3_errmsg(h));
    return -1;
  }
  sqlite3_bind_int64(s, 1, id);
  while (same == 1 && (step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *arch = (const char *)sqlite3_column_text(s, 0);
    builds++;
    if (strcmp((const char *)sqlite3_column_text(s, 1), fat_compile_options()) ||
        strcmp((const char *)sqlite3_column_text(s, 2), nvrtc_version)) {
      same = 0;  /* another compiler or options: nothing to compare with */
      break;
    }
    fat_build b = {0};
    /* In a compile process, under the caps, as every compile the command makes. */
    if (fat_compile_all(now, 1, arch, 1, NULL, &b, NULL, NULL, fat_interrupted, err, errlen)) {
      same = -1;
      break;
    }
    const int n = sqlite3_column_bytes(s, 3);
    same = b.ok && b.cubin_size == (size_t)n && !memcmp(b.cubin, sqlite3_column_blob(s, 3), (size_t)n);
    fat_build_free(&b);
  }
  if (same == 1 && step != SQLITE_DONE) {  /* the walk itself failed */
    set_err(err, errlen, "rehash: %s", sqlite3_errmsg(h));
    same = -1;
  }
  sqlite3_finalize(s);
  return same == 1 && builds == 0 ? 0 : same;
}

/* Points variant ID and its builds at NOW's source: the variant's source and
 * hash, each build's cache key (and its build_hashes row, which names the
 * key). Ids stay, so checks, timings and winners stay with it. */
static int carry_over(sqlite3 *h, sqlite3_int64 id, const fat_variant *now, char *err,
                      size_t errlen) {
  sqlite3_stmt *up = NULL, *sel = NULL, *hash_get = NULL, *hash_del = NULL, *build_up = NULL,
               *hash_put = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h, "UPDATE variants SET source = ?2, source_hash = ?3 WHERE id = ?1", -1,
                         &up, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "SELECT id, key, arch FROM builds WHERE variant_id = ?1 AND ok = 1",
                         -1, &sel, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "SELECT cubin_sha256 FROM build_hashes WHERE build_key = ?1", -1,
                         &hash_get, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "DELETE FROM build_hashes WHERE build_key = ?1", -1, &hash_del,
                         NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "UPDATE builds SET key = ?2 WHERE id = ?1", -1, &build_up, NULL) !=
          SQLITE_OK ||
      sqlite3_prepare_v2(h, "INSERT INTO build_hashes (build_key, cubin_sha256) VALUES (?1, ?2)",
                         -1, &hash_put, NULL) != SQLITE_OK)
    goto sqlfail;
  sqlite3_bind_int64(up, 1, id);
  sqlite3_bind_text(up, 2, now->source, -1, SQLITE_STATIC);
  sqlite3_bind_text(up, 3, now->hash, -1, SQLITE_STATIC);
  if (sqlite3_step(up) != SQLITE_DONE) goto sqlfail;
  sqlite3_bind_int64(sel, 1, id);
  while ((step = sqlite3_step(sel)) == SQLITE_ROW) {
    const sqlite3_int64 bid = sqlite3_column_int64(sel, 0);
    char old_key[FAT_SHA256_HEX_CHARS + 1], key[65], sha[FAT_SHA256_HEX_CHARS + 1] = "";
    snprintf(old_key, sizeof old_key, "%s", (const char *)sqlite3_column_text(sel, 1));
    if (fat_build_key(now->source, (const char *)sqlite3_column_text(sel, 2), key, err, errlen))
      goto out;
    sqlite3_reset(hash_get);
    sqlite3_bind_text(hash_get, 1, old_key, -1, SQLITE_TRANSIENT);
    if ((step = sqlite3_step(hash_get)) == SQLITE_ROW)
      snprintf(sha, sizeof sha, "%s", (const char *)sqlite3_column_text(hash_get, 0));
    else if (step != SQLITE_DONE)
      goto sqlfail;
    sqlite3_reset(hash_del);
    sqlite3_bind_text(hash_del, 1, old_key, -1, SQLITE_TRANSIENT);
    sqlite3_reset(build_up);
    sqlite3_bind_int64(build_up, 1, bid);
    sqlite3_bind_text(build_up, 2, key, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(hash_del) != SQLITE_DONE || sqlite3_step(build_up) != SQLITE_DONE) goto sqlfail;
    if (sha[0]) {
      sqlite3_reset(hash_put);
      sqlite3_bind_text(hash_put, 1, key, -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(hash_put, 2, sha, -1, SQLITE_TRANSIENT);
      if (sqlite3_step(hash_put) != SQLITE_DONE) goto sqlfail;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "rehash: %s", sqlite3_errmsg(h));
out:
  sqlite3_finalize(up);
  sqlite3_finalize(sel);
  sqlite3_finalize(hash_get);
  sqlite3_finalize(hash_del);
  sqlite3_finalize(build_up);
  sqlite3_finalize(hash_put);
  return rc;
}

int fat_tables_rehash(fat_db *db, fat_gen *g, long long *n_carried, long long *n_left,
                      char *err, size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  sqlite3_stmt *s = NULL, *taken = NULL;
  gen_group gg = {0};
  rehash_item *items = NULL;
  size_t n = 0, cap = 0;
  long long carried = 0, left = 0;
  int rc = -1, in_tx = 0, step;
  char group_key[64] = "", nvrtc_version[32];
  const fat_nvrtc *nv = fat_nvrtc_get(err, errlen);
  if (!nv) return -1;
  snprintf(nvrtc_version, sizeof nvrtc_version, "%d.%d", nv->major, nv->minor);
  if (sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) goto sqlfail;
  in_tx = 1;
  /* The live variants, as retire-stale walks them; the stale ones are
   * collected first and changed after the walk, not under its cursor. */
  if (sqlite3_prepare_v2(h, LIVE_VARIANTS_SQL, -1, &s, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "SELECT 1 FROM variants WHERE name = ?1 AND source_hash = ?2", -1,
                         &taken, NULL) != SQLITE_OK)
    goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    rehash_item it = {.id = sqlite3_column_int64(s, 0)};
    const char *name = (const char *)sqlite3_column_text(s, 1);
    const char *hash = (const char *)sqlite3_column_text(s, 2);
    const char *dir_s = (const char *)sqlite3_column_text(s, 3);
    const char *dt_s = (const char *)sqlite3_column_text(s, 4);
    const char *mk_s = (const char *)sqlite3_column_text(s, 5);
    it.hd = sqlite3_column_int(s, 6);
    if (fat_direction_parse(dir_s, &it.dir) || fat_dtype_parse(dt_s, &it.dt) ||
        fat_mask_parse(mk_s, &it.mk)) {
      set_err(err, errlen, "rehash: %s: unknown direction, dtype or mask", name);
      goto out;
    }
    char key[64];
    snprintf(key, sizeof key, "%s %s %s %d", dir_s, dt_s, mk_s, it.hd);
    if (strcmp(key, group_key)) {
      if (group_load(g, it.dir, it.dt, it.mk, it.hd, &gg, err, errlen)) goto out;
      snprintf(group_key, sizeof group_key, "%s", key);
    }
    const char *now = group_hash(&gg, name);
    const int altered = !source_hashes_to(s, 7, hash);
    if (now && !strcmp(now, hash) && !altered) continue;
    /* The space no longer has it, or its stored source is not the one its
     * hash names (its builds were made from who knows what): nothing to
     * compare with. */
    if (!now || altered) {
      left++;
      continue;
    }
    if (n == cap) {
      size_t more = cap ? 2 * cap : 64;
      rehash_item *grown = realloc(items, more * sizeof *grown);
      if (!grown) {
        set_err(err, errlen, "out of memory");
        goto out;
      }
      items = grown;
      cap = more;
    }
    it.name = strdup(name);
    it.key = strdup(key);
    items[n++] = it;
    if (!it.name || !it.key) {
      set_err(err, errlen, "out of memory");
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  group_key[0] = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(items[i].key, group_key)) {
      if (group_load(g, items[i].dir, items[i].dt, items[i].mk, items[i].hd, &gg, err, errlen))
        goto out;
      snprintf(group_key, sizeof group_key, "%s", items[i].key);
    }
    const fat_variant *now = group_find(&gg, items[i].name);
    int same = same_shape(h, items[i].id, now);
    if (same < 0) goto sqlfail;
    sqlite3_reset(taken);
    sqlite3_bind_text(taken, 1, now->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(taken, 2, now->hash, -1, SQLITE_STATIC);
    if ((step = sqlite3_step(taken)) == SQLITE_ROW) same = 0;  /* today's source has a row of its own */
    else if (step != SQLITE_DONE) goto sqlfail;
    if (same) same = same_machine_code(h, items[i].id, now, nvrtc_version, err, errlen);
    if (same < 0) goto out;
    if (!same) {
      left++;
      continue;
    }
    if (carry_over(h, items[i].id, now, err, errlen)) goto out;
    carried++;
  }
  if (sqlite3_exec(h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) goto sqlfail;
  in_tx = 0;
  if (n_carried) *n_carried = carried;
  if (n_left) *n_left = left;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "rehash: %s", sqlite3_errmsg(h));
out:
  for (size_t i = 0; i < n; i++) {
    free(items[i].name);
    free(items[i].key);
  }
  free(items);
  sqlite3_finalize(s);
  sqlite3_finalize(taken);
  if (in_tx) sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  group_free(&gg);
  return rc;
}

/* ---- command line ------------------------------------------------------ */

static const char *const USAGE =
    "usage: fatune export [--db PATH] --gpu-name NAME [-o FILE.sql]\n"
    "       fatune import [--db PATH] [--keep-cubins] FILE.sql...\n"
    "       fatune merge [--db PATH] [--keep-cubins] OTHER.db...\n"
    "         (both refuse a file or database whose variants are not what this fatune's\n"
    "          generator produces, field by field, or whose results put a variant on a\n"
    "          problem it does not serve; no cubin comes in: the runtime compiles the\n"
    "          checked sources. --keep-cubins compiles each cubin again here and keeps it\n"
    "          where it comes out byte for byte (same NVRTC version and options); import\n"
    "          also accepts --recompile, the default)\n"
    "       fatune retire-stale [--db PATH]\n"
    "         (retires the checks and timings, and deletes the winners, of every variant\n"
    "          whose source this fatune no longer generates: run it on a database of\n"
    "          older tunes before merging a re-tune into it after a template change)\n"
    "       fatune rehash [--db PATH]\n"
    "         (after a change to the templates' text that leaves the machine code as it\n"
    "          was: keeps the measurements of every stale variant whose source, compiled\n"
    "          today, gives its stored cubins byte for byte, under today's source; run it\n"
    "          before retire-stale)\n";

/* The largest table file import reads (the H200's is 17 MB). */
#define MAX_TABLE_FILE_BYTES ((size_t)1 << 30)
#define READ_CHUNK ((size_t)1 << 16)

/* The text of table file PATH ("-": standard input), read to its end
 * whatever it is -- a file, a pipe, a FIFO, a terminal -- never more than
 * MAX_TABLE_FILE_BYTES; a folder, a NUL byte (no text file has one) and a
 * read error are refused by name. Heap string, or NULL with err. */
static char *read_file(const char *path, char *err, size_t errlen) {
  const int std_in = !strcmp(path, "-");
  struct stat st;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  FILE *f = NULL;
  if (!std_in && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    set_err(err, errlen, "cannot read %s: it is a folder", path);
    return NULL;
  }
  if (!(f = std_in ? stdin : fopen(path, "rb"))) {
    set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return NULL;
  }
  for (;;) {
    if (cap - n < READ_CHUNK + 1) {
      size_t more = cap ? 2 * cap : 4 * READ_CHUNK;
      char *grown = more <= MAX_TABLE_FILE_BYTES + READ_CHUNK + 1 ? realloc(buf, more) : NULL;
      if (!grown) {
        if (more > MAX_TABLE_FILE_BYTES + READ_CHUNK + 1)
          set_err(err, errlen, "cannot read %s: more than the %zu bytes a table file may have",
                  path, MAX_TABLE_FILE_BYTES);
        else
          set_err(err, errlen, "cannot read %s: out of memory", path);
        goto fail;
      }
      buf = grown, cap = more;
    }
    size_t got = fread(buf + n, 1, READ_CHUNK, f);
    n += got;
    if (n > MAX_TABLE_FILE_BYTES) {
      set_err(err, errlen, "cannot read %s: more than the %zu bytes a table file may have", path,
              MAX_TABLE_FILE_BYTES);
      goto fail;
    }
    if (got < READ_CHUNK) break;
  }
  if (ferror(f)) {
    set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    goto fail;
  }
  buf[n] = 0;
  const char *nul = memchr(buf, 0, n);
  if (nul) {
    long line = 1;
    for (const char *p = buf; p < nul; p++) line += *p == '\n';
    set_err(err, errlen, "%s:%ld: a NUL byte: not a table file", std_in ? "(stdin)" : path, line);
    goto fail;
  }
  if (!std_in) fclose(f);
  return buf;
fail:
  if (f && !std_in) fclose(f);
  free(buf);
  return NULL;
}

/* Attempts at a fresh temporary name before export gives up. */
#define TEMP_TRIES 100

/* Writes the export to PATH through a temporary file in PATH's folder,
 * renamed over PATH when complete: a failed export leaves the previous
 * table in place. The temporary is made with O_EXCL | O_NOFOLLOW (a link
 * planted where it is to be is never followed), and a PATH that exists as
 * anything but a regular file (a link, a FIFO, a device, a folder) is
 * refused, not replaced. */
static int export_to(fat_db *db, const char *gpu, const char *path, char *err, size_t errlen) {
  char tmp[PATH_CAP + 64];
  struct stat st;
  int fd = -1;
  if (!path) return fat_tables_export(db, gpu, stdout, err, errlen);
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    set_err(err, errlen, "%s exists and is not a regular file: not replaced", path);
    return -1;
  }
  const char *slash = strrchr(path, '/');
  const int dir_len = slash ? (int)(slash - path) + 1 : 0;
  for (int i = 0; fd < 0 && i < TEMP_TRIES; i++) {
    snprintf(tmp, sizeof tmp, "%.*s.%s.%ld.%d.tmp", dir_len, path, slash ? slash + 1 : path,
             (long)getpid(), i);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    return -1;
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    return -1;
  }
  int rc = fat_tables_export(db, gpu, f, err, errlen);
  if (fclose(f) && rc == 0) {
    set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    rc = -1;
  }
  if (rc == 0 && rename(tmp, path)) {
    set_err(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    rc = -1;
  }
  if (rc) unlink(tmp);
  return rc;
}

int fat_tables_main(int argc, char **argv) {
  char err[ERRLEN], db_path[PATH_CAP] = "";
  const char *gpu = NULL, *out_path = NULL, *cmd = argc > 0 ? argv[0] : "";
  const char **files = NULL;
  int n_files = 0, status = EXIT_FAILED, keep_cubins = 0;
  fat_db *db = NULL;
  fat_gen *gen = NULL;
  fat_trust *trust = NULL;
  if (strcmp(cmd, "export") && strcmp(cmd, "import") && strcmp(cmd, "merge") &&
      strcmp(cmd, "retire-stale") && strcmp(cmd, "rehash")) {
    fprintf(stderr, "fatune: unknown table command '%s'\n%s", cmd, USAGE);
    return EXIT_USAGE;
  }
  if (!(files = calloc((size_t)argc + 1, sizeof *files))) return EXIT_FAILED;
  /* Each valued flag once, never empty: an empty --db is no path (it is
   * not the default database), and a second one is not last-wins. */
  static const char *const VALUED[] = {"--db", "--gpu-name", "-o"};
  int seen[3] = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int k, got;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(USAGE, stdout);
      fputs("\n" FAT_EXIT_STATUS_HELP, stdout);
      status = fat_exit_flushed(stdout, "fatune", EXIT_OK);
      goto out;
    }
    if ((got = fat_cli_valued(argc, argv, &i, VALUED, 3, seen, &k, &v, err, sizeof err)) < 0 ||
        (got && !*v) || (got && k == 0 && strlen(v) >= sizeof db_path)) {
      if (got > 0 && !*v)
        snprintf(err, sizeof err, "%s: empty %s", VALUED[k], k == 1 ? "name" : "path");
      else if (got > 0)
        snprintf(err, sizeof err, "%s: path longer than %zu bytes", VALUED[k], sizeof db_path - 1);
      fprintf(stderr, "fatune %s: %s\n%s", cmd, err, USAGE);
      status = EXIT_USAGE;
      goto out;
    }
    if (got) {
      if (k == 0) snprintf(db_path, sizeof db_path, "%s", v);
      else if (k == 1) gpu = v;
      else out_path = v;
    } else if (!strcmp(a, "--recompile") && !strcmp(cmd, "import")) {
      keep_cubins = 0;  /* what it always asked for is now the default */
    } else if (!strcmp(a, "--keep-cubins") && (!strcmp(cmd, "import") || !strcmp(cmd, "merge"))) {
      keep_cubins = 1;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "fatune %s: unknown option '%s'\n%s", cmd, a, USAGE);
      status = EXIT_USAGE;
      goto out;
    } else {
      files[n_files++] = a;
    }
  }
  /* A GPU name is one line of printable text (import refuses any other). */
  for (const unsigned char *c = (const unsigned char *)(gpu ? gpu : ""); *c; c++)
    if (*c < 0x20 || *c == 0x7f) {
      fprintf(stderr, "fatune %s: --gpu-name: byte %d is 0x%02x, a control character\n", cmd,
              (int)(c - (const unsigned char *)gpu) + 1, *c);
      status = EXIT_USAGE;
      goto out;
    }
  int is_export = !strcmp(cmd, "export"), is_rehash = !strcmp(cmd, "rehash");
  int is_retire = is_rehash || !strcmp(cmd, "retire-stale");  /* both walk the stale variants */
  if (is_retire && (n_files || gpu || out_path)) {
    fprintf(stderr, "fatune %s: takes only --db\n%s", cmd, USAGE);
    status = EXIT_USAGE;
    goto out;
  }
  if (!is_retire && (is_export ? (!gpu || n_files) : (n_files == 0 || gpu || out_path))) {
    fprintf(stderr, "fatune %s: %s\n%s", cmd,
            is_export ? (gpu ? "export takes no file arguments (use -o)" : "--gpu-name is required")
                      : (n_files ? "--gpu-name and -o belong to export" : "no input files"),
            USAGE);
    status = EXIT_USAGE;
    goto out;
  }
  /* An unusable --db is a usage error, as for every fatune command; export
   * only reads it (nothing is created, or written). */
  if ((!db_path[0] &&
       fat_options_default_db(db_path, sizeof db_path, !is_export, err, sizeof err)) ||
      (is_export ? fat_db_open_readonly : fat_db_open)(db_path, &db, err, sizeof err)) {
    fprintf(stderr, "fatune %s: --db: %s\n", cmd, err);
    status = EXIT_USAGE;
    goto out;
  }
  if (is_retire && !(gen = fat_gen_open(NULL, err, sizeof err))) {
    fprintf(stderr, "fatune %s: the generator: %s\n", cmd, err);
    goto out;
  }
  if (is_rehash) {
    long long carried = 0, left = 0;
    if (fat_tables_rehash(db, gen, &carried, &left, err, sizeof err)) {
      fprintf(stderr, "fatune rehash: %s\n", err);
      goto out;
    }
    fprintf(stderr,
            "fatune rehash: %s: %lld stale variants carried over (same machine code), %lld left"
            " stale\n", db_path, carried, left);
    status = EXIT_OK;
    goto out;
  }
  if (is_retire) {
    long long variants = 0, winners = 0;
    if (fat_tables_retire_stale(db, gen, &variants, &winners, err, sizeof err)) {
      fprintf(stderr, "fatune retire-stale: %s\n", err);
      goto out;
    }
    fprintf(stderr, "fatune retire-stale: %s: %lld stale variants retired, %lld winners deleted\n",
            db_path, variants, winners);
    status = EXIT_OK;
    goto out;
  }
  if (is_export) {
    if (export_to(db, gpu, out_path, err, sizeof err)) {
      fprintf(stderr, "fatune export: %s\n", err);
      goto out;
    }
    status = out_path ? EXIT_OK : fat_exit_flushed(stdout, "fatune export", EXIT_OK);
    goto out;
  }
  /* Each variant is checked against the generator, generated once for all
   * the files. */
  if (!(gen = fat_gen_open(NULL, err, sizeof err))) {
    fprintf(stderr, "fatune %s: the generator: %s\n", cmd, err);
    goto out;
  }
  if (!(trust = fat_trust_open(gen))) {
    fprintf(stderr, "fatune %s: out of memory\n", cmd);
    goto out;
  }
  const fat_import_options io = {.trust = trust,
                                 .cubins = keep_cubins ? FAT_CUBINS_RECOMPILE : FAT_CUBINS_DROP};
  /* ^C stops the file in hand (nothing of it reaches the database) and
   * exits 130; a signal that ends the process removes the scratch database
   * first, and one that cannot be caught leaves it for the next import to
   * sweep. */
  fat_interrupt_install();
  signal(SIGTERM, remove_and_die);
  signal(SIGHUP, remove_and_die);
  for (int i = 0; i < n_files && !fat_interrupted(); i++) {
    fat_tables_report r;
    int rc;
    const char *name = strcmp(files[i], "-") ? files[i] : "(stdin)";
    if (!strcmp(cmd, "import")) {
      char *text = read_file(files[i], err, sizeof err);
      rc = text ? fat_tables_import(db, text, name, &io, &r, err, sizeof err) : -1;
      free(text);
    } else {
      rc = fat_tables_merge(db, files[i], &io, &r, err, sizeof err);
    }
    if (rc && fat_interrupted()) break;
    if (rc) {
      fprintf(stderr, "fatune %s: %s\n", cmd, err);
      goto out;
    }
    fprintf(stderr, "fatune %s: %s: %lld new rows into %s", cmd, name, r.added, db_path);
    if (keep_cubins)
      fprintf(stderr, " (%lld cubins kept, compiled here byte for byte; %lld builds left out)\n",
              r.trust.builds_kept, r.trust.builds_dropped);
    else if (r.trust.builds_dropped)
      fprintf(stderr, " (%lld builds left out: the runtime compiles the checked sources)\n",
              r.trust.builds_dropped);
    else
      fputc('\n', stderr);
  }
  if (fat_interrupted()) {
    fprintf(stderr, "fatune %s: interrupted\n", cmd);
    status = FAT_EXIT_INTERRUPTED;
    goto out;
  }
  status = EXIT_OK;
out:
  fat_trust_close(trust);
  fat_gen_close(gen);
  fat_db_close(db);
  free(files);
  return status;
}
