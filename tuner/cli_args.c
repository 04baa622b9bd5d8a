/* SPDX-License-Identifier: MIT */
/* Shared command-line parsing (cli_args.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli_args.h"

#define FLAG_NAME_MAX 32  /* longest flag name, "--" included */

int fat_cli_parse_int(const char *flag, const char *s, long lo, long hi, int *out, char *err,
                      size_t errlen) {
  char *end;
  if (!*s) {
    snprintf(err, errlen, "%s: empty value", flag);
    return -1;
  }
  errno = 0;
  long v = strtol(s, &end, 10);
  /* strtol skips leading white space: ' 1' would pass where '1 ' fails. */
  if (*end || end == s || isspace((unsigned char)s[0])) {
    snprintf(err, errlen, "%s: '%s' is not a number", flag, s);
    return -1;
  }
  if (errno == ERANGE || v < lo || v > hi) {
    snprintf(err, errlen, "%s: %s is out of range [%ld, %ld]", flag, s, lo, hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int fat_cli_valued(int argc, char **argv, int *i, const char *const *valued, int n, int *seen,
                   int *which, const char **value, char *err, size_t errlen) {
  const char *a = argv[*i], *eq = strchr(a, '=');
  char flag[FLAG_NAME_MAX];
  const char *v = NULL;
  if (eq && eq - a < (long)sizeof flag) {
    memcpy(flag, a, (size_t)(eq - a));
    flag[eq - a] = 0;
    v = eq + 1;
  } else {
    snprintf(flag, sizeof flag, "%s", a);
  }
  int k = -1;
  for (int j = 0; j < n; j++)
    if (!strcmp(flag, valued[j])) k = j;
  if (k < 0) return 0;
  if (!v) {
    if (*i + 1 >= argc) {
      snprintf(err, errlen, "%s needs a value", valued[k]);
      return -1;
    }
    v = argv[++*i];
  }
  if (seen[k]++) {
    snprintf(err, errlen, "%s given twice", valued[k]);
    return -1;
  }
  *which = k;
  *value = v;
  return 1;
}

int fat_exit_flushed(FILE *out, const char *who, int status) {
  /* A write that failed before this call (output longer than the buffer)
   * left its reason in errno, and the flush may not find it again. */
  const int earlier = ferror(out) ? errno : 0;
  errno = 0;
  if (fflush(out) == 0 && !ferror(out)) return status;
  const int e = errno ? errno : earlier;
  fprintf(stderr, "%s: cannot write the output: %s\n", who, e ? strerror(e) : "write error");
  return status == 0 ? 1 : status; /* FAT_EXIT_FAILED (options.h) */
}
