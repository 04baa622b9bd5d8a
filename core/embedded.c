/* SPDX-License-Identifier: MIT */
/* Lookup in the table of files that cmake/embed.cmake compiled in. */
#include <string.h>
#include "embedded.h"

const fat_embedded_file *fat_embedded_find(const char *path) {
  for (const fat_embedded_file *f = fat_embedded_files; f->path; f++)
    if (strcmp(f->path, path) == 0) return f;
  return NULL;
}
