/* SPDX-License-Identifier: MIT */
/* Shipped tables: a tuning database's winners for one GPU model as a text
 * SQL file (db/tables/<gpu>.sql), deterministic and readable in a diff, and
 * the way back in. `fatune export` writes one; `fatune import` loads table
 * files and `fatune merge` another machine's database into a database, both
 * without duplicates. An imported file is never executed as given: its
 * statements run in a scratch database under an authorizer that allows only
 * INSERT into fatune's tables, and only then are its rows merged by natural
 * keys (variant name and source hash, build key, GPU and problem key). */
#ifndef FAT_TABLES_H
#define FAT_TABLES_H
#include <stddef.h>
#include <stdio.h>
#include "db.h"
#include "gen.h"

/* First line of every exported table; import refuses a file without it. */
#define FAT_TABLES_MAGIC "-- fatune tables 1"
/* Last line of every exported table: a file cut between two statements
 * still parses, so import refuses one that does not end with this line. */
#define FAT_TABLES_END "-- end of fatune tables\n"

/* `fatune export|import|merge ...`: ARGV[0] is the subcommand. Messages go to
 * stderr, the exported table to -o FILE or stdout. Returns the exit status:
 * 0 done, 1 failed, 2 usage error. */
int fat_tables_main(int argc, char **argv);

/* Writes the winners of every GPU named GPU_NAME in DB (with their variants'
 * sources, their cubins, problems, live checks and winning timings) to OUT.
 * Rows are sorted by natural keys and renumbered, so the same content always
 * gives the same bytes. Fails with "no winners for GPU 'X' in the database"
 * when there is nothing to export. Returns 0 or -1 with err. */
int fat_tables_export(fat_db *db, const char *gpu_name, FILE *out, char *err, size_t errlen);

/* The largest cubin a table may carry; a bigger one refuses the file. */
#define FAT_TABLES_MAX_CUBIN_BYTES (64LL * 1024 * 1024)

/* How far an import trusts its file beyond the checks it always makes. */
typedef struct fat_import_options {
  fat_gen *gen;   /* non-NULL: refuse the file when a variant's source is not what
                     the generator produces for its name today (a stale table) */
  int recompile;  /* 1: keep no build or cubin from the file; the runtime compiles
                     the imported sources with NVRTC and stores its own */
} fat_import_options;

/* Loads the table text SQL (NAME: its file name, for messages) into DB.
 * *ADDED (may be NULL) gets the number of rows that were new. The file's
 * statements run in a scratch database under the authorizer (only INSERT
 * into fatune's tables); then its rows must hold their declared types, no
 * cubin may exceed FAT_TABLES_MAX_CUBIN_BYTES, every source must hash to its
 * source_hash and every build_hashes row must hash its cubin -- else the
 * whole file is refused with a message naming the row, and DB is untouched.
 * fat_tables_import is fat_tables_import_ex with OPTS NULL (no generator
 * check: `fatune import` passes one). */
int fat_tables_import(fat_db *db, const char *sql, const char *name, long long *added,
                      char *err, size_t errlen);
int fat_tables_import_ex(fat_db *db, const char *sql, const char *name,
                         const fat_import_options *opts, long long *added, char *err,
                         size_t errlen);

/* Merges the fatune database at PATH into DB (read, never written: one of
 * an older schema version is read as it is, not upgraded). */
int fat_tables_merge(fat_db *db, const char *path, long long *added, char *err, size_t errlen);

/* Compares every winner variant in DB with what generator G produces for it
 * today. Each stale one adds a line to REPORT (CAP bytes, may be NULL):
 *   "stale: NAME: table source_hash H1, generator gives H2\n" or
 *   "stale: NAME: the generator no longer produces this variant\n".
 * Returns the number of stale variants, or -1 with err. */
int fat_tables_stale(fat_db *db, fat_gen *g, char *report, size_t cap, char *err, size_t errlen);

/* Retires what DB knows of every variant whose source generator G no
 * longer produces (its source_hash differs, or the name is gone): its live
 * checks and timings are marked retired and its winners deleted, so that a
 * later merge puts today's winners in their place (merge keeps the faster
 * of two winners, and a stale one timed before a template change may be
 * faster) and export picks no stale variant for the deterministic backward.
 * Builds stay (a cache key names a compile exactly). *N_VARIANTS gets the
 * variants retired, *N_WINNERS the winners deleted (either may be NULL).
 * Returns 0, or -1 with err (nothing changed). */
int fat_tables_retire_stale(fat_db *db, fat_gen *g, long long *n_variants, long long *n_winners,
                            char *err, size_t errlen);

/* Carries the measurements of each stale variant of DB over to the source
 * generator G gives it today, where only the source text changed: same
 * family, parameters and launch geometry, and for every stored build a
 * compile of today's source (same architecture, options and NVRTC) that
 * is byte for byte the stored cubin. Such a variant keeps its row -- its
 * checks, timings and winners, which were measured on that very machine
 * code -- with today's source, hash and build keys. The others stay stale
 * (re-tune them, or retire-stale). *N_CARRIED and *N_LEFT (may be NULL)
 * get the counts. Needs NVRTC, not a GPU. Returns 0, or -1 with err
 * (nothing changed). */
int fat_tables_rehash(fat_db *db, fat_gen *g, long long *n_carried, long long *n_left, char *err,
                      size_t errlen);
#endif
