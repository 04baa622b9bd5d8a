/* SPDX-License-Identifier: MIT */
/* Where the shipped tables database (fatune_tables.db, built from
 * db/tables/ SQL files) lies, found one way for the fatune command, the shared
 * libfatune and a program that links libfatune.a: first relative to the
 * file this code was loaded from, then at the install path compiled in. */
#ifndef FAT_TABLES_PATH_H
#define FAT_TABLES_PATH_H
#include <stddef.h>

/* The file name of the shipped tables database. */
#define FAT_TABLES_FILE "fatune_tables.db"

/* Writes into OUT (CAP bytes) the first readable of, in order:
 *   1. beside the image holding this code (dladdr: the shared library, or
 *      the program -- the fatune command, or one linked with libfatune.a):
 *      DIR/fatune_tables.db (libfatune.so in the build tree),
 *      DIR/runtime/fatune_tables.db (the build tree's fatune),
 *      the install tree's share/fatune seen from bin/ and from lib/ (an
 *      install moved as a whole);
 *   2. the install prefix's share/fatune/fatune_tables.db, compiled in.
 * Returns 0 with OUT resolved (realpath), or -1 when none is readable, with LOOKED (LOOKED_CAP bytes;
 * may be NULL) naming the paths tried, comma-separated, for a warning.
 * $FATUNE_TABLES is the caller's to read first: it may list several. */
int fat_tables_installed(char *out, size_t cap, char *looked, size_t looked_cap);

/* The one tables database a reader of results (fatune explain, report)
 * shows when given none: the first readable entry of $FATUNE_TABLES
 * (':'-separated) when it is set, else fat_tables_installed's. Returns 0 or
 * -1 as that does, LOOKED naming what was tried. */
int fat_tables_default(char *out, size_t cap, char *looked, size_t looked_cap);
#endif
