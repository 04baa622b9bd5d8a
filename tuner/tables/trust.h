/* SPDX-License-Identifier: MIT */
/* What fatune believes of rows it did not make: the one rule for a table
 * file (`fatune import`, and the build's build_tables) and another
 * machine's database (`fatune merge`), both loaded first into a scratch
 * database and judged there by fat_trust_check before a row reaches the
 * target. A row is believed when the generator, run here, produces the very
 * variant it names -- name, family, direction, dtype, mask, head dim,
 * parameters, entry, launch geometry and source -- and when every winner,
 * timing and check puts that variant on a problem it serves. Cubins are
 * believed by provenance alone (fat_trust_cubins): the release's own tables,
 * or a compile made on this machine. db/tables/README.md, "Trust", says the
 * same for users. */
#ifndef FAT_TRUST_H
#define FAT_TRUST_H
#include <stddef.h>
#include <sqlite3.h>
#include "gen.h"

/* The generator's space as the checks read it: a row's variant looked up
 * in the group its row claims (direction, dtype, mask, head dim), each
 * group expanded once, on first need, and kept by variant name (metadata
 * and source hash; a source is kept only for the check that fills a
 * sourceless row in with it, until that check ends); a whole
 * (direction, architecture) space only where the claimed group lacks the
 * name, to say which field the row has wrong. */
typedef struct fat_trust fat_trust;

/* A view of G (not owned: G must outlive it). NULL only out of memory. */
fat_trust *fat_trust_open(fat_gen *g);
void fat_trust_close(fat_trust *t);

/* What becomes of a variant whose name the generator produces with another
 * source, or no longer produces (a template changed since it was tuned). */
typedef enum fat_stale {
  FAT_STALE_REFUSE = 0,  /* the whole source is refused, naming the variant */
  FAT_STALE_LEAVE_OUT,   /* it is left out, with everything that refers to it (the
                            build's tables: a stale entry is never served) */
  FAT_STALE_KEEP         /* it is kept as it is, unchecked against the generator, for
                            `fatune rehash` and `retire-stale` (build_tables --keep-stale) */
} fat_stale;

/* What becomes of the source's builds. A failed build (ok = 0) is never
 * kept: under its real cache key it would stop every later tune from
 * compiling that variant. */
typedef enum fat_cubins {
  FAT_CUBINS_DROP = 0,   /* none is kept: the runtime compiles the checked sources and
                            keeps its own cubins */
  FAT_CUBINS_RECOMPILE,  /* each is compiled again here (its architecture, today's
                            options; needs NVRTC) and kept only where it was made by
                            this NVRTC version with these options and the cubin comes
                            out byte for byte; the kept build is this machine's compile */
  FAT_CUBINS_SHIPPED     /* kept as they are: only for the release's own tables, which
                            build_tables turns into fatune_tables.db */
} fat_cubins;

/* What a check and the cubin step did, for the command's report line. */
typedef struct fat_trust_report {
  long long stale;          /* stale variants left out (FAT_STALE_LEAVE_OUT) or kept
                               (FAT_STALE_KEEP) */
  char stale_lines[4096];   /* one "stale: NAME: ...\n" line each (as fat_tables_stale
                               words them), cut at the capacity */
  long long builds_kept;    /* builds that came in with their cubins */
  long long builds_dropped; /* builds left out (failed, dropped, or not reproduced) */
} fat_trust_report;

/* Judges the rows of H's main database (a scratch copy of a table file or
 * a database; NAME names it in messages) and leaves in it only what is
 * believed, or refuses. In order, the first failure naming its row:
 *   - each column holds the storage class its declaration names;
 *   - no cubin is over FAT_TABLES_MAX_CUBIN_BYTES;
 *   - a variable-length profile parses and its longest is its seqlen;
 *   - each source hashes to its source_hash, each build_hashes row to its cubin
 *     (a table file carries no sources: a variant without one gets the
 *     generator's below, or stays without one only when it is stale and
 *     STALE keeps it -- nothing compiles or serves it until `fatune rehash`);
 *   - each variant is what the generator produces for its name today, field by
 *     field: "NAME: variant V: block_m 16 is not the generator's 64; refusing
 *     the table"; a variant the generator produces with another source, or not
 *     at all, is stale and handled by STALE (R->stale counts it);
 *   - each winner, timing and check puts its variant on a problem of the
 *     variant's direction, dtype and mask, whose head dim runs on the
 *     variant's template (the generator's smallest head dim at least the
 *     problem's): "NAME: winners row 1: variant V has dtype fp16, its
 *     problem 1 has bf16".
 * Returns 0 (H changed only by FAT_STALE_LEAVE_OUT), or -1 with err. */
int fat_trust_check(fat_trust *t, sqlite3 *h, const char *name, fat_stale stale,
                    fat_trust_report *r, char *err, size_t errlen);

/* Applies CUBINS to the builds of H's main database (after fat_trust_check),
 * counting into R. Returns 0, or -1 with err (FAT_CUBINS_RECOMPILE without
 * NVRTC, an SQL failure). */
int fat_trust_cubins(sqlite3 *h, const char *name, fat_cubins cubins, fat_trust_report *r,
                     char *err, size_t errlen);
#endif
