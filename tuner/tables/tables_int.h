/* SPDX-License-Identifier: MIT */
/* What the files of tuner/tables/ share and no file outside them sees (the
 * module's public headers are tables.h and trust.h): the error and ^C
 * helpers every one of them uses, and the scratch database (scratch.c) that
 * import.c and merge.c fill and hand to the trust rule before a row of
 * theirs reaches the target. */
#ifndef FAT_TABLES_INT_H
#define FAT_TABLES_INT_H
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "gen.h"
#include "interrupt.h"
#include "tables.h"

#define ERRLEN 1024
#define PATH_CAP 4096

static inline void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void set_err(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* 1 when S (never when NULL) is one of the N strings of LIST. */
static inline int in_list(const char *s, const char *const *list, size_t n) {
  for (size_t i = 0; s && i < n; i++)
    if (!strcmp(s, list[i])) return 1;
  return 0;
}

/* How often (SQLite virtual-machine steps) an import or a merge looks for ^C. */
#define INTERRUPT_CHECK_STEPS 10000

/* Stops a statement once SIGINT has arrived (the command's handler). */
static inline int interrupt_progress(void *unused) {
  (void)unused;
  return fat_interrupted();
}

/* The tables a scratch database receives, in the order their rows load
 * (each refers only to those before it). */
static const char *const IMPORT_TABLES[] = {"gpus",   "ceilings", "variants", "builds",  "build_hashes",
                                            "problems", "checks", "timings", "winners",
                                            "external_timings"};
#define N_IMPORT_TABLES (sizeof IMPORT_TABLES / sizeof IMPORT_TABLES[0])

/* A report of nothing done yet, where an import or a merge starts. */
static const fat_tables_report NO_REPORT;

/* ---- a table file's text (import.c) ------------------------------------ */

/* TEXT past a UTF-8 byte order mark, or NULL with err ("NAME: not a fatune
 * table (...)", "NAME: truncated: ...") unless it starts with
 * FAT_TABLES_MAGIC and ends with the line FAT_TABLES_END. */
const char *table_text_begin(const char *text, const char *name, char *err, size_t errlen);
/* Runs the statements of TEXT (from table_text_begin) one by one in SH, a
 * database of fatune's schema, in defensive mode under the import's
 * authorizer: only INSERT into fatune's tables. The first that fails or is
 * refused gives err "NAME:LINE: why". 0, or -1 with err. */
int table_text_run(sqlite3 *sh, const char *text, const char *name, char *err, size_t errlen);

/* ---- the ids of an earlier export (table_ids.c) ------------------------- */

/* Creates H's temp table p_TABLE (id, KEY's columns) with the id and
 * natural key of each of IDS's rows of TABLE; none when IDS is NULL. 0, or
 * -1 with err. */
int table_ids_copy(sqlite3 *h, const fat_table_ids *ids, const char *table, const char *key,
                   char *err, size_t errlen);

/* ---- the scratch database (scratch.c) ---------------------------------- */

/* A fresh scratch database under $TMPDIR (STAGE: its path), opened in *SDB
 * (NAME names the source in messages). 0, or -1 with err. */
int scratch_open(const char *name, char stage[PATH_CAP], fat_db **sdb, char *err, size_t errlen);
/* Removes scratch database STAGE and its side files, and forgets it. */
void scratch_done(char stage[PATH_CAP]);
/* Judges scratch SDB (in an open transaction) by the trust rule, applies
 * the cubin policy, commits, and merges what is left into DB. SDB is closed
 * either way. 0, or -1 with err. */
int judge_and_merge(fat_db *db, fat_db *sdb, const char *stage, const char *name,
                    const fat_import_options *o, fat_tables_report *r, char *err, size_t errlen);
/* The handler of a signal that ends the process (SIGTERM, SIGHUP): the
 * scratch database in use is removed first. */
void remove_and_die(int sig);

/* ---- a cubin as table text (cubin_text.c) ------------------------------ */

/* The SQL function a table file spells each cubin with:
 * fat_inflate(X'<zlib stream>', <inflated bytes>). */
#define FAT_INFLATE_SQL "fat_inflate"
/* BLOB's N bytes deflated (zlib, level 9) into *OUT (malloc'd, *OUT_N
 * bytes). 0, or -1 out of memory. */
int cubin_deflate(const void *blob, size_t n, unsigned char **out, size_t *out_n);
/* FAT_INFLATE_SQL as an SQLite function: the blob its stream inflates to,
 * or an error naming what is wrong (a size outside 1 to
 * FAT_TABLES_MAX_CUBIN_BYTES, a stream that does not inflate to exactly
 * that many bytes). */
void cubin_inflate_sql(sqlite3_context *ctx, int argc, sqlite3_value **argv);

/* ---- the generator's variants of one key (gen_group.c) ------------------ */

/* Architectures the generator is asked for, in turn, wherever a table's or
 * a database's variants are judged (trust.c, stale.c): each is a space of
 * its own (its shared-memory limit prunes differently), and a variant
 * pruned for one may exist for the other. */
static const char *const TABLES_ARCHS[] = {"sm_90a", "sm_80"};
#define N_TABLES_ARCHS (sizeof TABLES_ARCHS / sizeof TABLES_ARCHS[0])

/* The generator's variants of one (direction, dtype, mask, head dim) over
 * TABLES_ARCHS, in order, sources and all:
 * loaded once for every variant of a database or a table with that key. */
typedef struct gen_group {
  fat_variant *v;
  size_t n;
} gen_group;

/* Frees GG's variants; GG is then empty (and may be loaded again). */
void gen_group_free(gen_group *gg);
/* Replaces GG's variants with the generator's for (DIR, DT, MK, HD), of
 * architecture ARCH alone when not NULL. 0, or -1 with err (the generator
 * failed; GG is then empty). */
int gen_group_load(fat_gen *g, fat_direction dir, fat_dtype dt, fat_mask mk, int hd,
                   const char *arch, gen_group *gg, char *err, size_t errlen);
/* GG's variant NAME, the first architecture's where both have it; NULL
 * when the group has none of that name. */
const fat_variant *gen_group_find(const gen_group *gg, const char *name);
#endif
