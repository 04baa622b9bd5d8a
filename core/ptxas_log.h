/* SPDX-License-Identifier: MIT */
/* Reading resource usage out of ptxas's verbose report (--ptxas-options=-v),
 * which NVRTC returns in the program log. Kept apart from compile.c so tests
 * can feed it exact log text without compiling anything. */
#ifndef FAT_PTXAS_LOG_H
#define FAT_PTXAS_LOG_H
#include "types.h"

/* Sets B's registers, smem_static, stack_frame, spill_stores and spill_loads
 * from LOG: the maximum over every function reported (a variant may have
 * several entries or non-inlined device functions), 0 where a value is
 * absent. Returns the number of entry functions the log names
 * ("Compiling entry function"), 0 for a NULL log. */
int fat_ptxas_parse(const char *log, fat_build *b);
#endif
