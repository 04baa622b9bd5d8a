/* SPDX-License-Identifier: MIT */
/* The scratch database a stranger's rows go into before they reach the
 * target: import.c fills one from a table file and merge.c from another
 * database, both through scratch_open; judge_and_merge has the trust rule
 * (trust.h) judge it and merges what it leaves by natural keys, the one
 * path by which such rows come in. A scratch database never outlives its
 * command: it is removed when done, by a signal that ends the process, or
 * by the next import once its process is gone. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tables_int.h"

/* ---- merging a judged scratch database -------------------------------- */

/* Rows of the attached scratch database `src` brought into main by natural keys;
 * a row main already has is skipped, so merging twice adds nothing. A
 * winner comes in where main has none for its (GPU, problem), or where it
 * is faster than main's beyond the runs' spread: its timing's 90th
 * percentile below the 10th of main's winner's (two runs on two days differ
 * by their noise, and "the faster median" rewarded it); never one main has
 * seen fail. The tuner's one preference holds across runs too
 * (FAT_LAUNCH_SPLITS_TIE, fat_launch_splits() below): a winner whose launch
 * chooses its key splits comes in over main's fixed count when its median
 * is within the tie of main's (or faster), and main's stays against a
 * fixed count that is not faster than it by more than the tie. */
#define FAT_XSTR(x) FAT_STR(x)
#define FAT_STR(x) #x
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
    " seqlen_q, seqlen_k, window_left, window_right, lengths, page_size) SELECT direction, dtype,"
    " mask, head_dim, batch, heads, heads_k, seqlen_q, seqlen_k, window_left, window_right,"
    " lengths, page_size FROM src.problems ORDER BY id;"
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
    " s.window_left AND m.window_right = s.window_right AND m.lengths = s.lengths"
    " AND m.page_size = s.page_size;"
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
    " AS mid, t.p90_ms AS p90_ms, t.median_ms AS median_ms FROM src.timings t"
    " JOIN temp.m_variants v ON v.sid = t.variant_id JOIN temp.m_gpus g ON g.sid = t.gpu_id"
    " JOIN temp.m_problems p ON p.sid = t.problem_id;"
    /* Peers' timings (the report's comparisons), each row once. */
    "INSERT INTO main.external_timings (gpu_id, problem_id, source, median_ms, tflops, measured_at)"
    " SELECT g.mid, p.mid, e.source, e.median_ms, e.tflops, e.measured_at FROM src.external_timings e"
    " JOIN temp.m_gpus g ON g.sid = e.gpu_id JOIN temp.m_problems p ON p.sid = e.problem_id"
    " WHERE NOT EXISTS (SELECT 1 FROM main.external_timings x WHERE x.gpu_id = g.mid AND"
    " x.problem_id = p.mid AND x.source = e.source AND x.median_ms = e.median_ms AND"
    " x.measured_at = e.measured_at) ORDER BY e.id;"
    "INSERT OR REPLACE INTO main.winners (gpu_id, problem_id, variant_id, timing_id, chosen_at)"
    " SELECT g.mid, p.mid, v.mid, t.mid, w.chosen_at FROM src.winners w"
    " JOIN temp.m_gpus g ON g.sid = w.gpu_id JOIN temp.m_problems p ON p.sid = w.problem_id"
    " JOIN temp.m_variants v ON v.sid = w.variant_id JOIN temp.m_timings t ON t.sid = w.timing_id"
    " JOIN main.variants mv ON mv.id = v.mid"
    " WHERE NOT EXISTS (SELECT 1 FROM main.winners x JOIN main.timings xt ON xt.id = x.timing_id"
    "   JOIN main.variants xv ON xv.id = x.variant_id"
    "   WHERE x.gpu_id = g.mid AND x.problem_id = p.mid AND (x.timing_id = t.mid OR"
    "   CASE fat_launch_splits(mv.direction, mv.params) - fat_launch_splits(xv.direction, xv.params)"
    "   WHEN 1 THEN t.median_ms > xt.median_ms * (1 + " FAT_XSTR(FAT_LAUNCH_SPLITS_TIE) ")"
    "   WHEN -1 THEN xt.p10_ms <= t.p90_ms OR"
    "     xt.median_ms <= t.median_ms * (1 + " FAT_XSTR(FAT_LAUNCH_SPLITS_TIE) ")"
    "   ELSE xt.p10_ms <= t.p90_ms END))"
    " AND " FAT_SQL_LIVE_PASSING("main.", "v.mid", "g.mid", "p.mid") ";";

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

/* fat_launch_splits(direction, params): the winner rule's side of a
 * variant (fat_db_launch_splits), for MERGE_SQL. */
static void sql_launch_splits(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  sqlite3_result_int(ctx, fat_db_launch_splits((const char *)sqlite3_value_text(argv[0]),
                                               (const char *)sqlite3_value_text(argv[1])));
}

/* Rows in main's tables that a merge can add to. */
static int count_rows(sqlite3 *h, long long *n) {
  sqlite3_stmt *c = NULL;
  int rc = -1;
  if (sqlite3_prepare_v2(h,
                         "SELECT (SELECT count(*) FROM main.gpus) + (SELECT count(*) FROM"
                         " main.ceilings) + (SELECT count(*) FROM main.variants) + (SELECT count(*) FROM main.builds) + (SELECT"
                         " count(*) FROM main.problems) + (SELECT count(*) FROM main.checks) +"
                         " (SELECT count(*) FROM main.timings) + (SELECT count(*) FROM"
                         " main.winners) + (SELECT count(*) FROM main.build_hashes) + (SELECT"
                         " count(*) FROM main.external_timings)",
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
  if (sqlite3_create_function_v2(h, "fat_launch_splits", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                 sql_launch_splits, NULL, NULL, NULL) != SQLITE_OK ||
      count_rows(h, &before))
    goto sqlfail;
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

void remove_and_die(int sig) {
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
int scratch_open(const char *name, char stage[PATH_CAP], fat_db **sdb, char *err,
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
void scratch_done(char stage[PATH_CAP]) {
  live_stage_set = 0;
  scratch_remove(stage);
  stage[0] = 0;
}

/* The end both paths share: judges the rows of scratch SDB (in an open
 * transaction) by the trust rule, applies the cubin policy, commits, and
 * merges what is left into DB. SDB is closed either way. */
int judge_and_merge(fat_db *db, fat_db *sdb, const char *stage, const char *name,
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
