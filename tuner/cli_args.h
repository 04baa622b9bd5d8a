/* SPDX-License-Identifier: MIT */
/* The pieces every fatune command line shares (the tuner's options, explain,
 * ...): strict integers with overflow checks and one reader for flags that
 * take a value, so that each refusal reads the same wherever it is made. */
#ifndef FAT_CLI_ARGS_H
#define FAT_CLI_ARGS_H
#include <stddef.h>
#include <stdio.h>

/* A decimal integer in [LO, HI], the whole string. Errors: "FLAG: empty
 * value", "FLAG: 'S' is not a number", "FLAG: S is out of range [LO, HI]". */
int fat_cli_parse_int(const char *flag, const char *s, long lo, long hi, int *out, char *err,
                      size_t errlen);

/* Reads the flag at argv[*i] if it is one of the N flags in VALUED that take
 * a value, as "--flag value" or "--flag=value"; each may be given once
 * (SEEN[k] counts flag k). Returns 1 with *WHICH and *VALUE set and *i on the
 * value's argument; 0 when argv[*i] is none of them (nothing changed); -1
 * with ERR ("FLAG needs a value", "FLAG given twice"). */
int fat_cli_valued(int argc, char **argv, int *i, const char *const *valued, int n, int *seen,
                   int *which, const char **value, char *err, size_t errlen);

/* The exit status of a command that wrote its results to OUT (stdout):
 * STATUS when everything reached it, else (a full disk, a closed pipe, a
 * read-only file) "WHO: cannot write the output: REASON" on stderr and
 * status 1 -- a listing cut short is a failure, never exit 0. */
int fat_exit_flushed(FILE *out, const char *who, int status);
#endif
