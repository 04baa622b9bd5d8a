/* SPDX-License-Identifier: MIT */
/* SIGINT for long runs: the first ^C asks the run to stop after the variant
 * in hand (every result so far is already committed), the second one kills
 * the process as usual. Long loops poll fat_interrupted(). */
#ifndef FAT_INTERRUPT_H
#define FAT_INTERRUPT_H

/* The exit status of a run stopped by SIGINT (128 + SIGINT, the shell's). */
#define FAT_EXIT_INTERRUPTED 130

/* Installs the handler (idempotent). */
void fat_interrupt_install(void);
/* 1 once SIGINT has arrived. Async-signal-safe to read from any thread. */
int fat_interrupted(void);
#endif
