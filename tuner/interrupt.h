/* SPDX-License-Identifier: MIT */
/* SIGINT and SIGTERM for long runs: the first ^C (or the SIGTERM a batch
 * scheduler sends before it preempts a job) asks the run to stop after the
 * variant in hand (every result so far is already committed); a second one
 * of the same signal kills the process as usual. Long loops poll
 * fat_interrupted(). */
#ifndef FAT_INTERRUPT_H
#define FAT_INTERRUPT_H

/* The exit status of a run stopped by SIGINT (128 + SIGINT, the shell's). */
#define FAT_EXIT_INTERRUPTED 130
/* ... and by SIGTERM (128 + SIGTERM). */
#define FAT_EXIT_TERMINATED 143

/* Installs the handler for SIGINT and SIGTERM (idempotent). A command that
 * must do something else on SIGTERM installs its own handler after this. */
void fat_interrupt_install(void);
/* 1 once SIGINT or SIGTERM has arrived. Async-signal-safe to read from any
 * thread. */
int fat_interrupted(void);
/* The signal that stopped the run (the first one seen), 0 while none has:
 * its exit status is 128 + that number (FAT_EXIT_INTERRUPTED,
 * FAT_EXIT_TERMINATED). */
int fat_interrupt_signal(void);
#endif
