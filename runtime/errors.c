/* SPDX-License-Identifier: MIT */
/* The library's words for what happened: fat_strerror (the one table of
 * status messages) and the names of a choice's origin, match and load, the
 * context's last error, the version, and the check of every public
 * struct's struct_size, which each entry point makes before it reads one.
 * fail and logf_, which write the error and the log, are in runtime_int.h. */
#include "runtime_int.h"

/* ---- names ------------------------------------------------------------- */

const char *fat_strerror(fat_status s) {
  switch (s) {
  case FAT_OK: return "success";
  case FAT_ERR_INVALID_ARGUMENT: return "invalid argument";
  case FAT_ERR_UNSUPPORTED: return "unsupported problem";
  case FAT_ERR_NO_DRIVER: return "no CUDA driver or device";
  case FAT_ERR_CUDA: return "CUDA driver call failed";
  case FAT_ERR_NO_NVRTC: return "NVRTC unavailable";
  case FAT_ERR_COMPILE: return "kernel compilation failed";
  case FAT_ERR_DATABASE: return "database error";
  case FAT_ERR_OUT_OF_MEMORY: return "out of memory";
  case FAT_ERR_INTEGRITY: return "stored cubin or source failed its integrity check";
  }
  return "unknown status";
}

const char *fat_origin_name(fat_origin o) {
  switch (o) {
  case FAT_ORIGIN_USER_DB: return "user database";
  case FAT_ORIGIN_TABLES: return "shipped tables";
  case FAT_ORIGIN_BUILTIN: return "built-in default";
  case FAT_ORIGIN_SAME_ARCH: return "same architecture";
  }
  return "?";
}

const char *fat_match_name(fat_match m) {
  switch (m) {
  case FAT_MATCH_EXACT: return "exact bucket";
  case FAT_MATCH_NEAREST: return "nearest bucket";
  case FAT_MATCH_DEFAULT: return "default";
  }
  return "?";
}

const char *fat_load_name(fat_load l) {
  switch (l) {
  case FAT_LOAD_STORED_CUBIN: return "stored cubin";
  case FAT_LOAD_COMPILED: return "compiled with NVRTC";
  }
  return "?";
}

/* ---- the last error ------------------------------------------------------ */

const char *fat_context_error(const fat_context *ctx) { return ctx ? ctx->err : "no context"; }

/* ---- versions and struct sizes ------------------------------------------ */

unsigned fat_version_number(void) { return FATUNE_VERSION_NUMBER; }
const char *fat_version_string(void) { return FATUNE_VERSION_STRING; }

/* Every public struct's struct_size against this library's sizeof
 * (fatune.h): a struct of another release's layout is refused by name
 * before any other field is read or written. */
fat_status fat_rt_check_size(fat_context *c, const char *type, size_t got, size_t want,
                             const char *init) {
  if (got == want) return FAT_OK;
  return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s.struct_size %zu: this libfatune (%s) has "
              "sizeof(%s) %zu; initialise it with %s, built against this library's fatune.h",
              type, got, FATUNE_VERSION_STRING, type, want, init);
}
