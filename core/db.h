/* SPDX-License-Identifier: MIT */
/* The tuning database (SQLite, schema in db/schema.sql): where every build,
 * check and timing is committed the moment it is made, so an interrupted run
 * loses nothing and a re-run measures only what is missing.
 *
 * Every function returns 0 on success and -1 on failure, with the reason in
 * fat_db_errmsg(db) naming the value or path at fault and SQLite's own text.
 * Nothing here prints or exits. Every put is one statement, hence one
 * transaction, committed before the function returns (WAL mode).
 *
 * --retune: fat_db_forget marks a (GPU, problem)'s checks and timings retired
 * (kept for history, ignored by resume and selection) and drops its winner.
 * Builds are never retired: a cache key names a compile exactly. */
#ifndef FAT_DB_H
#define FAT_DB_H
#include <stddef.h>
#include <sqlite3.h>
#include "family.h"
#include "types.h"

/* The largest cubin a table may carry (a bigger one refuses the file) and
 * the runtime will load from any database. */
#define FAT_TABLES_MAX_CUBIN_BYTES (64LL * 1024 * 1024)

/* The schema version this build reads and writes (PRAGMA user_version). */
#define FAT_DB_SCHEMA_VERSION 10
/* The schema's embedded file (embedded.h): what a new database is given. */
#define FAT_DB_SCHEMA_PATH "db/schema.sql"
/* How long a writer waits for another process holding the lock. */
#define FAT_DB_BUSY_TIMEOUT_MS 10000

/* The one rule of a live, passing candidate, as an SQL condition: variant V
 * has at least one live (not retired) passing check on GPU G and problem P,
 * and no live failing one. SCHEMA is "" or a schema with its dot ("main."),
 * V, G and P SQL expressions (columns or parameters). Every ranking, the
 * export's deterministic picks, the merge, the report's baseline and the
 * runtime's deterministic lookup (runtime/select.c) ask it. */
#define FAT_SQL_LIVE_PASSING(schema, v, g, p)                                                      \
  "EXISTS (SELECT 1 FROM " schema "checks c WHERE c.variant_id = " v " AND c.gpu_id = " g          \
  " AND c.problem_id = " p " AND c.retired = 0 AND c.passed = 1)"                                  \
  " AND NOT EXISTS (SELECT 1 FROM " schema "checks c WHERE c.variant_id = " v " AND c.gpu_id = " g \
  " AND c.problem_id = " p " AND c.retired = 0 AND c.passed = 0)"

/* Rules that read a variant's parameters or family, as SQL conditions over
 * the functions fat_db_add_functions defines: the parameters go through
 * their parser and the family through the family table, never matched as
 * text. FAT_SQL_DQ_DETERMINISTIC: backward parameters PARAMS parse
 * (fat_bwd_params_parse) with a deterministic dQ mode (DQ_MODE=separate, dQ
 * in its own pass, or ordered, added into the accumulator in a fixed
 * order: types.h's fat_dq_deterministic), what the deterministic backward
 * is served from. FAT_SQL_MAY_WIN: the family table has FAMILY of
 * DIRECTION (a "fwd" or "bwd" expression) and it may win (may_win), so the
 * runtime may serve it; a family it does not name (a --templates folder's)
 * may not. */
#define FAT_SQL_DQ_DETERMINISTIC(params) "fat_dq_deterministic(" params ") = 1"
#define FAT_SQL_MAY_WIN(family, direction) "fat_family_may_win(" family ", " direction ") = 1"

/* Defines fat_dq_deterministic(params) and fat_family_may_win(family, direction)
 * on connection H (1 or 0; 0 for NULL or what does not parse), for the
 * conditions above. They may be called from top-level SQL only, never from
 * a view or trigger a database brings. Every fat_db_open and
 * fat_db_open_readonly connection has them; the runtime's own read-only
 * connections call this. SQLITE_OK or SQLite's code. */
int fat_db_add_functions(sqlite3 *h);

typedef struct fat_db fat_db;

/* Opens PATH, creating it (the file, not its folder) and applying the schema
 * when new, upgrading an older schema version in place (db/migrations/, one
 * transaction per version, every row and id kept), and adding schema.sql's
 * appended build_hashes table to a file made before it (hashing the cubins
 * it holds). Refuses a file that is not SQLite ("not a fatune database: PATH:
 * file is not a database"), an SQLite file of another program, a newer or
 * unknown schema version, and a path it cannot open for writing ("cannot open
 * database PATH: ..."). On failure *DB is NULL and ERR holds the reason. */
int fat_db_open(const char *path, fat_db **db, char *err, size_t errlen);
/* Opens the existing database PATH for reading only (report, export,
 * explain): nothing is created ("no database at PATH (No such file or
 * directory)") and nothing written, so a file on read-only media opens
 * (immutable, when its folder cannot take the -shm file). A file of an
 * older schema version is upgraded in place by fat_db_open, as before (its
 * readers need today's columns); every refusal is fat_db_open's. */
int fat_db_open_readonly(const char *path, fat_db **db, char *err, size_t errlen);
void fat_db_close(fat_db *db);
/* The reason for the last failure on DB ("" if none). */
const char *fat_db_errmsg(const fat_db *db);
/* The path DB was opened with. */
const char *fat_db_path(const fat_db *db);
/* The underlying connection, for ad-hoc queries (export, tests). */
sqlite3 *fat_db_handle(fat_db *db);

/* Inserts the GPU or finds it by (name, cc, SM count, driver, NVRTC);
 * refreshes the informational columns (memory, clocks). Identical GPUs of
 * a host are one row: the key their winners are stored and looked up by. */
int fat_db_put_gpu(fat_db *db, const fat_gpu_info *gpu, sqlite3_int64 *id);
/* Inserts the device -- one GPU of a host, under its model's GPU_ID -- or
 * finds it by (GPU_ID, HOST, DEVICE_INDEX, the CUDA ordinal); refreshes the
 * informational columns (memory, clocks, last seen) from GPU. */
int fat_db_put_device(fat_db *db, sqlite3_int64 gpu_id, const char *host, int device_index,
                      const fat_gpu_info *gpu, sqlite3_int64 *id);

/* Inserts the variant or finds it by (name, hash); the source text is stored
 * in full. is_default is refreshed (it belongs to the space, not the source). */
int fat_db_put_variant(fat_db *db, const fat_variant *v, sqlite3_int64 *id);
/* Reads variant ID back into OUT (heap strings: free with fat_variant_free).
 * *FOUND is 0 when there is no such id. */
int fat_db_get_variant(fat_db *db, sqlite3_int64 id, fat_variant *out, int *found);

/* Build cache. find: *FOUND = 1 and OUT filled (heap cubin and log: free with
 * fat_build_free) when KEY is stored, else *FOUND = 0. put: stores B under
 * B->key (replacing an earlier row with that key) for VARIANT_ID, with the
 * OPTIONS and NVRTC_VERSION ("13.0") that went into the key, and the sha256
 * of its cubin in build_hashes (the runtime loads no cubin without it). */
int fat_db_find_build(fat_db *db, const char *key, fat_build *out, int *found);
int fat_db_put_build(fat_db *db, sqlite3_int64 variant_id, const fat_build *b,
                     const char *options, const char *nvrtc_version);

/* Inserts the problem or finds it by its full shape (the window included:
 * a local problem's own, 0, 0 for the other masks -- the schema refuses
 * anything else). */
int fat_db_put_problem(fat_db *db, const fat_problem *p, sqlite3_int64 *id);

/* Records one reference check. A failing check also unseats the variant if it
 * was the winner for this GPU and problem. NaN errors are stored as NULL. */
int fat_db_put_check(fat_db *db, sqlite3_int64 variant_id, sqlite3_int64 gpu_id,
                     sqlite3_int64 problem_id, const fat_check *c);
/* Records one timing; *ID (may be NULL) gets its row id. _on names the
 * device (fat_db_put_device's id) it was measured on, which the schema
 * refuses unless it is one of GPU_ID's; fat_db_put_timing names none
 * (device_id NULL), as a timing brought from elsewhere has. */
int fat_db_put_timing(fat_db *db, sqlite3_int64 variant_id, sqlite3_int64 gpu_id,
                      sqlite3_int64 problem_id, const fat_timing *t, sqlite3_int64 *id);
int fat_db_put_timing_on(fat_db *db, sqlite3_int64 variant_id, sqlite3_int64 gpu_id,
                         sqlite3_int64 device_id, sqlite3_int64 problem_id, const fat_timing *t,
                         sqlite3_int64 *id);

/* What resume needs, over live (not retired) rows of VARIANT_ID on GPU_ID for
 * PROBLEM_ID: *CHECKED = 1 if any check exists, *PASSED = 1 if at least one
 * exists and all passed, *TIMED = 1 if any timing exists. Any pointer may be
 * NULL. The variant id implies the source hash: a changed source is another
 * variant with no results. */
int fat_db_has_result(fat_db *db, sqlite3_int64 variant_id, sqlite3_int64 gpu_id,
                      sqlite3_int64 problem_id, int *checked, int *passed, int *timed);

/* A variant as a candidate for one (GPU, problem): its latest live timing. */
typedef struct fat_db_choice {
  sqlite3_int64 variant_id;
  sqlite3_int64 timing_id;
  double median_ms;
  double tflops;
  char name[256];
  int reps;  /* the timing's repetitions: fewer than FAT_FULL_REPS, a screening's; fewer
                than FAT_SCREEN_REPS, a drop's (FAT_DROP_FACTOR) */
} fat_db_choice;

/* The candidates for (GPU_ID, PROBLEM_ID), fastest first by their latest live
 * timing, ties by name, those whose latest timing is a drop (fewer than
 * FAT_SCREEN_REPS repetitions: FAT_DROP_FACTOR) after all the others. Only
 * variants with at least one passing and no failing live check are
 * candidates, and never one of the materialising baseline (family
 * FAT_FAMILY_MATERIALIZE, kernel.h). Fills up to CAP entries of OUT; *N
 * gets how many. */
int fat_db_rank(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                fat_db_choice *out, size_t cap, size_t *n);
/* Close contenders: candidates within this fraction of the best by their
 * timings alone are re-timed together, interleaved, and the winner is
 * decided among them by that job (fat_db_decide_winner). */
#define FAT_CLOSE_CONTENDER 0.03
/* A timing of at least this many repetitions is a full one (the tuner's
 * --reps is never fewer); one of fewer is a screening: the first round of
 * successive halving, a few repetitions of every candidate, after which
 * only the close contenders are timed in full, in the job that decides. */
#define FAT_FULL_REPS 20
#define FAT_SQL_FULL_REPS "20" /* the same, for SQL text */
/* The margin of a comparison that involves a screening median, whose few
 * repetitions spread more: a candidate within it of the best stays a
 * contender. (The shipped H200 winners' full timings spread (p90 - p10) /
 * median 0.9 % at the median, 7.6 % at the 90th percentile.) */
#define FAT_SCREEN_CONTENDER 0.10
/* The repetitions of a screening (the tuner's, unless --exhaustive). */
#define FAT_SCREEN_REPS 5
#define FAT_SQL_SCREEN_REPS "5" /* the same, for SQL text */
/* A screening stops after its first timed repetition when that alone is
 * more than this many times the best median screened or timed so far for
 * its problem (the tuner passes the worker the product, a cutoff): a
 * candidate so far behind cannot come within FAT_SCREEN_CONTENDER of the
 * best, and four more repetitions would only say by how much. Such a
 * timing, of fewer than FAT_SCREEN_REPS repetitions, is a drop: it is
 * kept (every timing is) and counts as the variant's measurement, so a
 * rerun does not screen it again, but it is never a contender, never the
 * best, never a winner (fat_db_contenders, fat_db_decide_winner), and a
 * table holds none (export: winners' and the deterministic pick's full
 * timings only; the trust rule takes one from elsewhere only where its
 * median is more than this factor times another timing's of its problem,
 * of at least FAT_SCREEN_REPS). The backward's deterministic variants
 * (separate or ordered dQ) are cut against the best of their own kind: one
 * of them is served for deterministic gradients
 * (fat_db_best_deterministic). */
#define FAT_DROP_FACTOR 1.5
/* Whether choice C's timing is a drop (FAT_DROP_FACTOR). */
static inline int fat_db_dropped(const fat_db_choice *c) { return c->reps < FAT_SCREEN_REPS; }
/* The margin within which candidate C of the best, BEST, is a contender:
 * FAT_CLOSE_CONTENDER between full timings, FAT_SCREEN_CONTENDER where
 * either is a screening. */
double fat_db_contender_margin(const fat_db_choice *best, const fat_db_choice *c);
/* At most this many contenders are compared (the worker's FAT_MAX_INTERLEAVED). */
#define FAT_DB_MAX_CONTENDERS 16
/* The newest jobs of a problem the rule reads, looking for one that timed
 * the best contender. */
#define FAT_DB_MAX_JOBS_READ 64
/* The close contenders of (GPU_ID, PROBLEM_ID): the candidates (as
 * fat_db_rank's) ranked by their latest live timing taken alone -- not in a
 * job -- fastest first (drops after all the others), those within
 * fat_db_contender_margin of the first, among the CAP fastest; never a
 * drop (fat_db_dropped); up to CAP into OUT, *N how many
 * (0: no candidate). A variant with no timing alone (merged from a
 * database that timed it only in jobs) is ranked by its latest. */
int fat_db_contenders(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                      fat_db_choice *out, size_t cap, size_t *n);
/* The fastest candidate of (GPU_ID, PROBLEM_ID) by its timing alone (as
 * fat_db_contenders ranks) among the backward variants whose dQ mode is
 * deterministic (FAT_SQL_DQ_DETERMINISTIC): what the deterministic backward
 * is served from, which the tuner re-times with the contenders so that it
 * has a full timing to be served and exported by. *FOUND = 0 when there is
 * none. */
int fat_db_best_deterministic(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                              fat_db_choice *out, int *found);
/* Stores the N timings T of one interleaved job (VARIANT_IDS[i] timed as
 * T[i]) on device DEVICE_ID of GPU_ID (0: none named, as
 * fat_db_put_timing) and their timing_jobs rows, all or none; *JOB (may be
 * NULL) gets the job's number, the id of its first timing. */
int fat_db_put_job_timings(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 device_id,
                           sqlite3_int64 problem_id, size_t n, const sqlite3_int64 *variant_ids,
                           const fat_timing *t, sqlite3_int64 *job);
/* The first of fat_db_rank; *FOUND = 0 when no variant qualifies. */
int fat_db_best(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                fat_db_choice *out, int *found);
/* Makes VARIANT_ID (with its timing TIMING_ID) the winner for (GPU_ID,
 * PROBLEM_ID), replacing the previous one. The schema refuses a variant that
 * has not passed its checks there, or a timing that is not its own. */
int fat_db_set_winner(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                      sqlite3_int64 variant_id, sqlite3_int64 timing_id);
/* The stored winner of (GPU_ID, PROBLEM_ID), with its winning timing:
 * *FOUND = 0 when there is none. */
int fat_db_get_winner(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                      fat_db_choice *out, int *found);
/* The one rule of a tuning run's winner: decides (GPU_ID, PROBLEM_ID)'s
 * winner from the stored timings into OUT and stores it. Timings are
 * compared only with timings of their kind: the close contenders
 * (fat_db_contenders) are found by their timings alone, and the winner is
 * the fastest contender in the newest job that timed the best of them
 * (ties by name), with that job's timing -- a lone contender's too, so that
 * a winner screened by a few repetitions is served with its full timing;
 * where no job timed the best, the best alone wins. Within that job a
 * contender whose launch chooses its key splits (SPLITS 0) wins over a
 * faster one of a fixed count by less than FAT_LAUNCH_SPLITS_TIE: the
 * runtime serves a decoding winner to every call of its bucket near its
 * batch x K/V heads, and a fixed count fits its own problem's blocks
 * only (RESULTS.md, the decoding grid at two parallelisms).
 * (A variant timed alone runs a short burst at the boost clock, a job of
 * several the sustained one: on the H200 the re-timed contenders ran
 * 1.03x their first timings, so "the fastest latest timing" let a variant
 * timed alone beat faster ones that had been re-timed.) A decision that is
 * the stored winner already leaves its row as it was (chosen_at too: a
 * rerun's export is the same bytes). *FOUND = 0 when no variant qualifies
 * (the stored winner, if any, stays); *CHANGED (may be NULL) = 1 when the
 * stored winner was replaced or set. Every printer of winners (the run's
 * table and --json, export, explain, report, the runtime's lookup) reads
 * the row this stores. */
int fat_db_decide_winner(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                         fat_db_choice *out, int *found, int *changed);
/* The decoding timings' spread between two runs of the same winner on
 * the H100 (call 3 of the forty-second session against the fortieth's
 * and forty-first's: 0.0291 / 0.0296 ms, 0.0779 / 0.0783, 0.0434 /
 * 0.0429): within it a launch-chosen split count is as fast. */
#define FAT_LAUNCH_SPLITS_TIE 0.02
/* 1 when a variant of DIRECTION ("fwd", "bwd") and PARAMS has its key
 * splits chosen by the launch (SPLITS 0: fat_fwd_params_parse), the side
 * FAT_LAUNCH_SPLITS_TIE prefers; `fatune merge` applies it across runs
 * (tuner/tables/scratch.c). */
int fat_db_launch_splits(const char *direction, const char *params);

/* Why a candidate lost without a full timing (schema.sql's eliminations):
 * a decision of fat_db_decide_winner that finds a winner also replaces
 * the problem's eliminations, in one transaction with the winner -- a row
 * for each candidate of the ranking alone that is not a contender and has
 * no live timing of FAT_FULL_REPS or more, with its timing (a screening or
 * a drop), the best contender's (the first of fat_db_contenders), the
 * ratio of their medians and its repetitions. fat_db_forget removes them. */
typedef struct fat_db_elimination {
  char name[256];    /* the candidate */
  double median_ms;  /* its timing that lost */
  double ratio;      /* median_ms over the best's */
  int reps;          /* its timing's repetitions: below FAT_SCREEN_REPS, a drop */
  char best[256];    /* the best it was compared with */
  double best_ms;    /* the best's timing alone */
} fat_db_elimination;
/* The eliminations of (GPU_ID, PROBLEM_ID), the closest first (by ratio,
 * ties by name): up to CAP into OUT, *N how many; *TOTAL gets how many
 * there are, *DROPS how many of them are drops. */
int fat_db_eliminations(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                        fat_db_elimination *out, size_t cap, size_t *n, size_t *total,
                        size_t *drops);

/* --retune: retires the live checks and timings of (GPU_ID, PROBLEM_ID) and
 * removes its winner and eliminations, in one transaction. *N_RETIRED (may be NULL) gets the
 * number of rows retired. */
int fat_db_forget(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                  long long *n_retired);

/* One row of the final results table: a problem and its winner on a GPU. */
typedef struct fat_db_summary_row {
  sqlite3_int64 problem_id;
  fat_problem problem;
  char winner[256];
  char winner_family[64];       /* the winner's family (family.h): its instruction's peak is
                                   the one the winner is placed against */
  double median_ms, tflops;     /* the winner's winning timing */
  double rel_l2, max_abs;       /* the winner's worst live check */
  double slowest_ms;            /* slowest passing variant (latest timings) */
  double default_ms;            /* fastest passing default variant; NAN if none timed */
  char default_name[256];       /* "" if none */
  int n_passing;                /* variants that passed and were timed */
  int n_failed;                 /* variants with a failed live check */
  double materialize_ms;        /* fastest passing materialising baseline (latest timings);
                                   NAN if none timed; never in slowest_ms or default_ms */
} fat_db_summary_row;

/* Every winner on GPU_ID, ordered by direction, dtype, mask, head dim, window,
 * seqlens. *ROWS is heap (free), *N its length. */
int fat_db_summary(fat_db *db, sqlite3_int64 gpu_id, fat_db_summary_row **rows, size_t *n);

/* The GPU's measured ceilings (table ceilings), in SI base units. The tuner
 * stores them; `fatune explain` and `fatune report` read them for the
 * roofline floors. */
#define FAT_CEILING_COPY_BANDWIDTH "copy_bandwidth"  /* B/s, device-to-device copy */
#define FAT_CEILING_PEAK_FP16 "matrix_peak_fp16"      /* FLOP/s, mma.sync fp16, fp32 accumulate */
#define FAT_CEILING_PEAK_BF16 "matrix_peak_bf16"      /* FLOP/s, mma.sync bf16, fp32 accumulate */
/* Hopper's (sm_90a only): wgmma m64n256k16, fp32 accumulate, both operands
 * in shared memory (the forward's S = Q·Kᵀ), and with A in registers. */
#define FAT_CEILING_WGMMA_PEAK_FP16 "wgmma_peak_fp16"        /* FLOP/s */
#define FAT_CEILING_WGMMA_PEAK_BF16 "wgmma_peak_bf16"        /* FLOP/s */
#define FAT_CEILING_WGMMA_RS_PEAK_FP16 "wgmma_rs_peak_fp16"  /* FLOP/s */
#define FAT_CEILING_WGMMA_RS_PEAK_BF16 "wgmma_rs_peak_bf16"  /* FLOP/s */
#define FAT_CEILING_UNIT_BANDWIDTH "B/s"
#define FAT_CEILING_UNIT_FLOPS "FLOP/s"

/* The dtypes with measured peaks: fp16 and bf16, fat_dtype's first
 * FAT_PEAK_DTYPES, which index the arrays of peaks by dtype (fat_ceilings',
 * the end-of-run table's, the report's). e4m3 has none: fatune measures no
 * fp8 matrix peak, and an e4m3 winner is placed against nothing. An fp8
 * K/V cache (fp16-e4m3kv, bf16-e4m3kv) is placed against its Q's type's
 * peak: its kernels convert K and V to that type exactly and issue that
 * type's products, so that instruction is the roof of what they compute
 * (decoding sits far below it, on the bandwidth side: the roofline's
 * intensity counts their one-byte K and V, explain's fat_io_model). */
#define FAT_PEAK_DTYPES 2
/* The index of D's peak in those arrays (fp16 or bf16), or -1 for none. */
static inline int fat_dtype_peak(fat_dtype d) {
  switch (d) {
    case FAT_FP16: case FAT_FP16_E4M3KV: return FAT_FP16;
    case FAT_BF16: case FAT_BF16_E4M3KV: return FAT_BF16;
    default: return -1;
  }
}
static inline int fat_dtype_has_peak(fat_dtype d) { return fat_dtype_peak(d) >= 0; }

/* The ceiling that is the peak of instruction OP in DTYPE, the roof of a
 * family that issues OP (family.h's matrix_op): FAT_CEILING_PEAK_* for
 * mma.sync, FAT_CEILING_WGMMA_PEAK_* for wgmma (of fat_dtype_peak's type:
 * an fp8 K/V cache's Q's); NULL for FAT_MATRIX_OTHER and for a dtype
 * without a peak (fat_dtype_has_peak: e4m3). */
const char *fat_ceiling_peak_name(fat_matrix_op op, fat_dtype dtype);

/* Stores ceiling NAME = VALUE (UNIT) for GPU_ID, replacing an earlier
 * measurement of the same name. VALUE must be positive and finite. */
int fat_db_put_ceiling(fat_db *db, sqlite3_int64 gpu_id, const char *name, double value,
                       const char *unit);
/* Reads ceiling NAME of GPU_ID: *FOUND = 0 when none is stored, else 1 with
 * *VALUE (and UNIT, when not NULL, up to UNITLEN bytes) filled. */
int fat_db_get_ceiling(fat_db *db, sqlite3_int64 gpu_id, const char *name, double *value,
                       char *unit, size_t unitlen, int *found);

/* Sources of external_timings rows written by bench/bench_sdpa.py and
 * bench/store_peers.py. */
#define FAT_EXTERNAL_SDPA_FLASH "sdpa_flash"  /* SDPBackend.FLASH_ATTENTION */
#define FAT_EXTERNAL_SDPA_CUDNN "sdpa_cudnn"  /* SDPBackend.CUDNN_ATTENTION */
/* fatune's own kernel, timed by the benchmark in the same run as the peers:
 * the report's speed-ups against a peer divide by it (one harness for both)
 * where it is stored, by the tuner's median where not. */
#define FAT_EXTERNAL_FATUNE_BENCH "fatune_bench"

/* Records one timing of an implementation outside fatune (SOURCE names it)
 * on GPU_ID and PROBLEM_ID, for comparison in the report. */
int fat_db_put_external_timing(fat_db *db, sqlite3_int64 gpu_id, sqlite3_int64 problem_id,
                               const char *source, double median_ms, double tflops);
#endif
