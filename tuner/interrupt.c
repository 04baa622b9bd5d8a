/* SPDX-License-Identifier: MIT */
/* SIGINT and SIGTERM handling (interrupt.h): the first signal seen is kept,
 * and the handler restores the default action of the signal that arrived,
 * so that a second ^C (or SIGTERM) ends the process. */
#include <signal.h>
#include <string.h>
#include "interrupt.h"

static volatile sig_atomic_t interrupted;  /* the first signal seen, 0 none */

static void on_stop(int sig) {
  if (!interrupted) interrupted = sig;
  signal(sig, SIG_DFL);
}

void fat_interrupt_install(void) {
  static const int stops[] = {SIGINT, SIGTERM};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) sigaction(stops[i], &sa, NULL);
}

int fat_interrupted(void) { return interrupted != 0; }

int fat_interrupt_signal(void) { return interrupted; }
