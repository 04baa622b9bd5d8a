/* SPDX-License-Identifier: MIT */
/* Shipped tables: a tuning database's winners for one GPU model as a text
 * SQL file (db/tables/<gpu>.sql), deterministic and readable in a diff, and
 * the way back in. `fatune export` writes one; `fatune import` loads table
 * files and `fatune merge` another machine's database into a database, both
 * without duplicates. An imported file is never executed as given: its
 * statements run in a scratch database under an authorizer that allows only
 * INSERT into fatune's tables; another database is opened read-only and its
 * rows copied into one. Either scratch database is judged by the trust rule
 * (trust.h) before its rows are merged by natural keys (variant name and
 * source hash, build key, GPU and problem key). */
#ifndef FAT_TABLES_H
#define FAT_TABLES_H
#include <stddef.h>
#include <stdio.h>
#include "db.h"
#include "gen.h"
#include "trust.h"

/* First line of every exported table; import refuses a file without it or
 * FAT_TABLES_MAGIC_V1's. Format 2 carries each variant's source_hash without
 * its source (the generator that judges an import reproduces it, and
 * import fills it in) and each cubin deflated (fat_inflate(X'...', N):
 * cubin_text.c): the shipped tables are a fifth the size. Format 1,
 * sources and plain hex, still loads, each source checked against its hash. */
#define FAT_TABLES_MAGIC "-- fatune tables 2"
#define FAT_TABLES_MAGIC_V1 "-- fatune tables 1"
/* Last line of every exported table: a file cut between two statements
 * still parses, so import refuses one that does not end with this line. */
#define FAT_TABLES_END "-- end of fatune tables\n"

/* `fatune export|import|merge ...`: ARGV[0] is the subcommand. Messages go to
 * stderr, the exported table to -o FILE or stdout. Returns the exit status:
 * 0 done, 1 failed, 2 usage error. */
int fat_tables_main(int argc, char **argv);

/* The ids of an earlier export of a table, which a new export keeps: what
 * a table file's rows are (by natural key) and the id each was written
 * with. */
typedef struct fat_table_ids fat_table_ids;

/* Reads the ids of table file TEXT (NAME: its file name, for messages), an
 * earlier export for GPU GPU_NAME. TEXT goes the way an import's does --
 * its first and last lines checked, its statements run one by one under
 * the import's authorizer (only INSERT into fatune's tables) in a
 * temporary in-memory database of fatune's schema, whose constraints judge
 * each row -- and nothing of it but ids and natural keys is read. It is
 * not checked against the generator: the table a re-tune replaces is stale
 * as a rule, and none of its rows is written. Refuses, naming NAME, what
 * import refuses as no table ("NAME: not a fatune table (...)", "NAME:
 * truncated: ...", "NAME:LINE: ..."), an id outside 1 to FAT_TABLE_MAX_ID
 * ("NAME: checks id 0 is outside 1 to 9007199254740992"), and a table
 * whose GPU rows are all of another GPU ("NAME: a table of GPU 'X', not
 * 'Y'"). Returns NULL with err. */
fat_table_ids *fat_table_ids_read(const char *text, const char *name, const char *gpu_name,
                                  char *err, size_t errlen);
void fat_table_ids_free(fat_table_ids *ids);

/* The largest id kept from an earlier export: 2^53, which a double holds
 * exactly (a reader of the table through JSON or Python floats), and from
 * which new ids cannot count past a 64-bit integer. */
#define FAT_TABLE_MAX_ID ((long long)1 << 53)

/* Writes the winners of every GPU named GPU_NAME in DB (their variants by
 * name and source hash, without the sources; their cubins, problems, live
 * checks and winning timings) to OUT,
 * each table's rows in id order. With IDS NULL, rows are numbered 1, 2, ...
 * in natural-key order; with IDS, a row whose natural key the earlier
 * export has keeps its id there, and the others are numbered on from that
 * table's largest id, in natural-key order (a row gone leaves a gap). The
 * same content and IDS always give the same bytes, and an export with the
 * ids of its own output gives it again. Fails with "no winners for GPU 'X'
 * in the database" when there is nothing to export. Returns 0 or -1 with
 * err. */
int fat_tables_export(fat_db *db, const char *gpu_name, const fat_table_ids *ids, FILE *out,
                      char *err, size_t errlen);

/* How an import or a merge treats what it brings (trust.h). TRUST is
 * required: every variant is checked against the generator. */
typedef struct fat_import_options {
  fat_trust *trust;
  fat_cubins cubins;  /* default FAT_CUBINS_DROP: the runtime compiles the checked sources */
  fat_stale stale;    /* default FAT_STALE_REFUSE */
} fat_import_options;

/* What an import or a merge did. */
typedef struct fat_tables_report {
  long long added;         /* rows new to the database */
  fat_trust_report trust;  /* builds kept and left out, stale variants */
} fat_tables_report;

/* Loads the table text SQL (NAME: its file name, for messages) into DB. The
 * file's statements run in a scratch database under the authorizer (only
 * INSERT into fatune's tables), the file must end with FAT_TABLES_END, and
 * its rows must pass fat_trust_check; OPTS says what becomes of stale
 * variants and of cubins. Anything else refuses the whole file with a
 * message naming the row, and DB is untouched. R (may be NULL) gets what
 * was done. Returns 0, or -1 with err. */
int fat_tables_import(fat_db *db, const char *sql, const char *name, const fat_import_options *opts,
                      fat_tables_report *r, char *err, size_t errlen);

/* Merges the fatune database at PATH into DB: the same rule as an import.
 * PATH is opened read-only (one of an older schema version is read as it
 * is, never upgraded) and refused unless it is a regular file whose schema
 * holds only fatune's own tables, indexes, views and triggers (by name and
 * kind; none of its views or triggers runs); its rows are copied into a
 * scratch database, judged by fat_trust_check, and merged from there. */
int fat_tables_merge(fat_db *db, const char *path, const fat_import_options *opts,
                     fat_tables_report *r, char *err, size_t errlen);

/* Compares every winner variant in DB with what generator G produces for it
 * today. Each stale one adds a line to REPORT (CAP bytes, may be NULL):
 *   "stale: NAME: table source_hash H1, generator gives H2\n",
 *   "stale: NAME: the generator no longer produces this variant\n" or
 *   "stale: NAME: its source does not hash to its source_hash H\n" (altered
 *   in place: the runtime refuses to compile it).
 * Returns the number of stale variants, or -1 with err. */
int fat_tables_stale(fat_db *db, fat_gen *g, char *report, size_t cap, char *err, size_t errlen);

/* Retires what DB knows of every variant whose source generator G no
 * longer produces (its source_hash differs, the name is gone, or its stored
 * source does not hash to its source_hash): its live
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
 * (re-tune them, or retire-stale), and so does one whose stored source does
 * not hash to its source_hash (its builds were made from another text). A
 * variant with no stored source (a table's, kept by build_tables
 * --keep-stale) is compared by its cubins alone, and one whose hash the
 * generator gives today just gets that source. *N_CARRIED and *N_LEFT (may
 * be NULL) get the counts. Needs NVRTC, not a GPU. Returns 0, or -1 with err
 * (nothing changed). */
int fat_tables_rehash(fat_db *db, fat_gen *g, long long *n_carried, long long *n_left, char *err,
                      size_t errlen);
#endif
