/* SPDX-License-Identifier: MIT */
/* One tuning run, start to end: generate → compile (cached) → check → time →
 * store → choose winners → print the table. Every result is committed to the
 * database as it is made, so a run stopped anywhere resumes where it stopped.
 * Without a GPU the run stops after compiling and says so. */
#ifndef FAT_TUNE_H
#define FAT_TUNE_H
#include <stdio.h>
#include "options.h"

/* The materialising baseline is measured up to this seqlen. Beyond it one
 * repetition of its three fp32 kernels costs tenths of a second (25 of them
 * per variant and problem), while the fused kernels' lead is already plain
 * from 2048 on; `fatune explain` gives the arithmetic for any length. */
#define FAT_MATERIALIZE_MAX_SEQLEN 4096

/* Runs the tuner for O (command FAT_CMD_TUNE or FAT_CMD_LIST). OUT gets the
 * results (tables, lists); ERR gets progress, row-per-variant output and
 * errors. Returns an exit status (options.h). */
int fat_tune_main(const fat_options *o, FILE *out, FILE *err);
#endif
