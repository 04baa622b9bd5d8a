/* SPDX-License-Identifier: MIT */
/* Files compiled into the binary (generator scripts, kernel templates, the
 * database schema), so that the build folder alone runs anywhere. */
#ifndef FAT_EMBEDDED_H
#define FAT_EMBEDDED_H
#include <stddef.h>

typedef struct fat_embedded_file {
  const char *path; /* relative to the source root: "templates/fwd_mma80.cu" */
  const char *data; /* NUL-terminated contents */
  size_t size;      /* bytes, without the terminating NUL */
} fat_embedded_file;

extern const fat_embedded_file fat_embedded_files[];

/* The embedded file at PATH, or NULL. */
const fat_embedded_file *fat_embedded_find(const char *path);
#endif
