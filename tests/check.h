/* SPDX-License-Identifier: MIT */
/* The assertion macros of the C tests, written once. Each test used to carry
 * its own copy of the same few (CHECK, CHECK_INT, CHECK_STR, REQUIRE...) with
 * its own failure counter and summary line. Every macro here records a pass
 * or a failure in two static counters (a test is one translation unit), a
 * failure prints file:line, the expression and the got/want values on stderr
 * and the test goes on (the REQUIREs alone stop), and check_summary() prints the
 * last line, "NAME: N passed, M failed", and gives the exit status.
 * Header-only, C11, nothing beyond the C library. */
#ifndef FAT_TESTS_CHECK_H
#define FAT_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed, check_failed;

/* Counts one assertion and returns OK, so that a macro prints only on failure. */
static inline int check_record(int ok) {
  if (ok)
    check_passed++;
  else
    check_failed++;
  return ok;
}

/* NULL printed as such, for the got side of string checks. */
static inline const char *check_or_null(const char *s) { return s ? s : "(null)"; }

/* COND is true. */
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!check_record((cond) != 0))                                            \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
  } while (0)

/* COND is true; a failure also prints the printf-style explanation after it. */
#define CHECK_WHY(cond, ...)                                                     \
  do {                                                                           \
    if (!check_record((cond) != 0)) {                                            \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
      fprintf(stderr, __VA_ARGS__);                                              \
      fputc('\n', stderr);                                                       \
    }                                                                            \
  } while (0)

/* Integers: GOT == WANT, both converted to long long. */
#define CHECK_INT(got, want)                                                   \
  do {                                                                         \
    long long g_ = (long long)(got), w_ = (long long)(want);                   \
    if (!check_record(g_ == w_))                                               \
      fprintf(stderr, "%s:%d: %s is %lld, want %lld\n", __FILE__, __LINE__,    \
              #got, g_, w_);                                                   \
  } while (0)

/* Doubles: GOT == WANT exactly, no tolerance; printed to 17 digits. */
#define CHECK_DBL(got, want)                                                   \
  do {                                                                         \
    double g_ = (got), w_ = (want);                                            \
    if (!check_record(g_ == w_))                                               \
      fprintf(stderr, "%s:%d: %s is %.17g, want %.17g\n", __FILE__, __LINE__,  \
              #got, g_, w_);                                                   \
  } while (0)

/* Doubles: |GOT - WANT| <= TOL (a NaN on either side fails). */
#define CHECK_NEAR(got, want, tol)                                             \
  do {                                                                         \
    double g_ = (got), w_ = (want), t_ = (tol);                                \
    if (!check_record(fabs(g_ - w_) <= t_))                                    \
      fprintf(stderr, "%s:%d: %s is %.17g, want %s = %.17g within %g\n",       \
              __FILE__, __LINE__, #got, g_, #want, w_, t_);                    \
  } while (0)

/* Strings: GOT equals WANT byte for byte; a NULL GOT fails. */
#define CHECK_STR(got, want)                                                   \
  do {                                                                         \
    const char *g_ = (got), *w_ = (want);                                      \
    if (!check_record(g_ && strcmp(g_, w_) == 0))                              \
      fprintf(stderr, "%s:%d: %s is \"%s\",\n  want \"%s\"\n", __FILE__,       \
              __LINE__, #got, check_or_null(g_), w_);                          \
  } while (0)

/* Strings: GOT starts with WANT; a NULL GOT fails. */
#define CHECK_PREFIX(got, want)                                                \
  do {                                                                         \
    const char *g_ = (got), *w_ = (want);                                      \
    if (!check_record(g_ && strncmp(g_, w_, strlen(w_)) == 0))                 \
      fprintf(stderr, "%s:%d: %s is \"%s\",\n  want prefix \"%s\"\n",          \
              __FILE__, __LINE__, #got, check_or_null(g_), w_);                \
  } while (0)

/* Strings: GOT contains PART; a NULL GOT fails. */
#define CHECK_CONTAINS(got, part)                                              \
  do {                                                                         \
    const char *g_ = (got), *p_ = (part);                                      \
    if (!check_record(g_ && strstr(g_, p_) != NULL))                           \
      fprintf(stderr, "%s:%d: %s is \"%s\",\n  which does not contain \"%s\"\n", \
              __FILE__, __LINE__, #got, check_or_null(g_), p_);                \
  } while (0)

/* COND is true, or the failure is counted and control jumps to the calling
 * function's `out:` label: for a check that the following ones depend on. */
#define REQUIRE(cond)                                                          \
  do {                                                                         \
    if (!check_record((cond) != 0)) {                                          \
      fprintf(stderr, "%s:%d: required %s\n", __FILE__, __LINE__, #cond);      \
      goto out;                                                                \
    }                                                                          \
  } while (0)

/* The whole file at PATH as a NUL-terminated heap string (the caller frees
 * it), or NULL when it cannot be opened or read in full. */
static inline char *check_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  long n = -1;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  if (buf) buf[n] = 0;
  fclose(f);
  return buf;
}

/* Prints "NAME: N passed, M failed" on stdout (ctest and CI read it as the
 * last line) and returns the exit status: 1 when anything failed. */
static inline int check_summary(const char *name) {
  printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
  return check_failed ? 1 : 0;
}

/* The summary, named FILE's base name without ".c" as tests name it, then exit 1. */
static inline void check_exit(const char *file) {
  const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
  char name[FILENAME_MAX];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "."), base);
  exit(check_summary(name));
}

/* REQUIRE for helpers with no `out:` to reach: on failure the whole test ends (check_exit). */
#define REQUIRE_EXIT(cond)                                                     \
  do {                                                                         \
    if (!check_record((cond) != 0)) {                                          \
      fprintf(stderr, "%s:%d: required %s\n", __FILE__, __LINE__, #cond);      \
      check_exit(__FILE__);                                                    \
    }                                                                          \
  } while (0)

#endif
