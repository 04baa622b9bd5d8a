/* SPDX-License-Identifier: MIT */
/* SIGINT handling (interrupt.h): a flag set by the handler, which then
 * restores the default action so that a second ^C ends the process. */
#include <signal.h>
#include <string.h>
#include "interrupt.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  interrupted = 1;
  signal(sig, SIG_DFL);
}

void fat_interrupt_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
}

int fat_interrupted(void) { return interrupted != 0; }
