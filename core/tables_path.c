/* SPDX-License-Identifier: MIT */
/* Finding the shipped tables (tables_path.h). This file is compiled into
 * the fatune command and into libfatune alike, so "the image holding this
 * code" is whichever of them runs it. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fat_install_paths.h"
#include "tables_path.h"

/* An address inside this image, for dladdr. */
static const char image_anchor;

/* The folder of the file this code was loaded from, resolved, into DIR;
 * -1 if unknown. glibc names the main program by its argv[0], which may be
 * a bare name found on $PATH: then /proc/self/exe says where it is. */
static int image_dir(char *dir, size_t cap) {
  Dl_info info;
  char resolved[PATH_MAX];
  if (!dladdr(&image_anchor, &info) || !info.dli_fname) return -1;
  const char *name = info.dli_fname;
  if (!strchr(name, '/') || !realpath(name, resolved)) {
    if (!realpath("/proc/self/exe", resolved)) return -1;
  }
  char *slash = strrchr(resolved, '/');
  if (!slash) return -1;
  *slash = 0;
  int n = snprintf(dir, cap, "%s", resolved[0] ? resolved : "/");
  return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* Appends PATH to the comma-separated LOOKED. */
static void note(char *looked, size_t cap, const char *path) {
  if (!looked || !cap) return;
  size_t n = strlen(looked);
  if (n < cap) snprintf(looked + n, cap - n, "%s%s", n ? ", " : "", path);
}

int fat_tables_installed(char *out, size_t cap, char *looked, size_t looked_cap) {
  static const char *const relative[] = {
      FAT_TABLES_FILE, ("runtime/" FAT_TABLES_FILE), FAT_TABLES_FROM_BINDIR, FAT_TABLES_FROM_LIBDIR};
  char dir[PATH_MAX], candidate[PATH_MAX + 64];
  if (looked && looked_cap) looked[0] = 0;
  if (image_dir(dir, sizeof dir) == 0) {
    for (size_t i = 0; i < sizeof relative / sizeof relative[0]; i++) {
      int repeated = 0;
      for (size_t j = 0; j < i; j++) repeated |= !strcmp(relative[i], relative[j]);
      if (repeated) continue;
      snprintf(candidate, sizeof candidate, "%s/%s", dir, relative[i]);
      note(looked, looked_cap, candidate);
      if (access(candidate, R_OK) == 0) goto found;
    }
  }
  snprintf(candidate, sizeof candidate, "%s", FAT_TABLES_INSTALL_PATH);
  note(looked, looked_cap, candidate);
  if (access(candidate, R_OK)) return -1;
found:;
  /* Resolved, so that every way to the same file names it alike. */
  char resolved[PATH_MAX];
  int n = snprintf(out, cap, "%s", realpath(candidate, resolved) ? resolved : candidate);
  return n > 0 && (size_t)n < cap ? 0 : -1;
}

int fat_tables_default(char *out, size_t cap, char *looked, size_t looked_cap) {
  const char *env = getenv("FATUNE_TABLES");
  if (!env || !*env) return fat_tables_installed(out, cap, looked, looked_cap);
  char list[PATH_MAX], *save = NULL;
  if (looked && looked_cap) looked[0] = 0;
  snprintf(list, sizeof list, "%s", env);
  for (char *t = strtok_r(list, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
    note(looked, looked_cap, t);
    if (access(t, R_OK) == 0) {
      int n = snprintf(out, cap, "%s", t);
      return n > 0 && (size_t)n < cap ? 0 : -1;
    }
  }
  return -1;
}
