/* SPDX-License-Identifier: MIT */
/* Finds NVRTC at run time and resolves the handful of functions the compiler
 * module calls. Loading happens once per process (pthread_once) because
 * dlopen of NVRTC is slow and compile threads all ask for it at once. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "elf_check.h"
#include "nvrtc_api.h"

/* The toolkit's default install location, for when the loader path lacks it. */
#define CUDA_LIB64 "/usr/local/cuda/lib64/"
#define LOAD_ERR_MAX 4096
#define MAX_CANDIDATES 8

static const char *const default_candidates[] = {
  "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
  CUDA_LIB64 "libnvrtc.so.13", CUDA_LIB64 "libnvrtc.so",
};

/* Appends to a bounded message; truncation is silent, never an overflow. */
static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, cap - used, fmt, ap);
  va_end(ap);
}

/* Resolves every entry point from HANDLE; the name of the first missing one
 * is returned, NULL when all are there. */
static const char *resolve_all(void *handle, fat_nvrtc *t) {
  /* dlsym returns void *; C11 has no conversion to function pointers, so the
   * address is copied, as POSIX's dlsym documentation does. */
#define RESOLVE(field, symbol)                       \
  do {                                               \
    void *sym = dlsym(handle, symbol);               \
    if (!sym) return symbol;                         \
    memcpy(&t->field, &sym, sizeof sym);             \
  } while (0)
  RESOLVE(GetErrorString, "nvrtcGetErrorString");
  RESOLVE(Version, "nvrtcVersion");
  RESOLVE(CreateProgram, "nvrtcCreateProgram");
  RESOLVE(DestroyProgram, "nvrtcDestroyProgram");
  RESOLVE(CompileProgram, "nvrtcCompileProgram");
  RESOLVE(GetProgramLogSize, "nvrtcGetProgramLogSize");
  RESOLVE(GetProgramLog, "nvrtcGetProgramLog");
  RESOLVE(GetCUBINSize, "nvrtcGetCUBINSize");
  RESOLVE(GetCUBIN, "nvrtcGetCUBIN");
#undef RESOLVE
  return NULL;
}

int fat_nvrtc_open(const char *const *candidates, int n, fat_nvrtc *out, char *err, size_t errlen) {
  char why[LOAD_ERR_MAX] = "NVRTC could not be loaded; tried:";
  for (int i = 0; i < n; i++) {
    const char *name = candidates[i];
    char damaged[LOAD_ERR_MAX / 4];
    /* A truncated file would raise SIGBUS inside dlopen. */
    if (fat_library_check(name, damaged, sizeof damaged)) {
      append(why, sizeof why, "\n  %s", damaged);
      continue;
    }
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      append(why, sizeof why, "\n  %s: %s", name, e ? e : "dlopen failed");
      continue;
    }
    fat_nvrtc t;
    memset(&t, 0, sizeof t);
    const char *missing = resolve_all(h, &t);
    if (missing) {
      append(why, sizeof why, "\n  %s: no symbol %s", name, missing);
      dlclose(h);
      continue;
    }
    nvrtcResult r = t.Version(&t.major, &t.minor);
    if (r != NVRTC_SUCCESS) {
      append(why, sizeof why, "\n  %s: nvrtcVersion failed: %s", name, t.GetErrorString(r));
      dlclose(h);
      continue;
    }
    t.handle = h;
    snprintf(t.path, sizeof t.path, "%s", name);
    *out = t;
    return 0;
  }
  append(why, sizeof why,
         "\nInstall the CUDA toolkit's NVRTC or set FATUNE_NVRTC to the path of libnvrtc.so");
  if (err && errlen) snprintf(err, errlen, "%s", why);
  return -1;
}

/* The one load's outcome, written inside pthread_once and read-only after. */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static fat_nvrtc loaded;
static int load_ok;
static char load_err[LOAD_ERR_MAX];

static void load(void) {
  const char *list[MAX_CANDIDATES];
  int n = 0;
  const char *env = getenv("FATUNE_NVRTC");
  char env_err[LOAD_ERR_MAX] = "";
  /* The user's library first, alone, so that its failure can be told. */
  if (env && *env && fat_nvrtc_open(&env, 1, &loaded, env_err, sizeof env_err) == 0) {
    load_ok = 1;
    return;
  }
  for (size_t i = 0; i < sizeof default_candidates / sizeof default_candidates[0]; i++)
    list[n++] = default_candidates[i];
  load_ok = fat_nvrtc_open(list, n, &loaded, load_err, sizeof load_err) == 0;
  if (env && *env) {
    /* The user asked for a specific library: say why another one serves,
     * or why none does. Its line of the message is "\n  PATH: reason". */
    const char *line = strstr(env_err, "\n  ");
    const size_t len = line ? strcspn(line + 3, "\n") : 0;
    if (load_ok)
      fprintf(stderr, "fatune: FATUNE_NVRTC=%s could not be loaded (%.*s); using %s\n", env,
              (int)len, line ? line + 3 : "", loaded.path);
    else
      snprintf(load_err, sizeof load_err, "%s", env_err);
  }
}

const fat_nvrtc *fat_nvrtc_get(char *err, size_t errlen) {
  pthread_once(&load_once, load);
  if (load_ok) return &loaded;
  if (err && errlen) snprintf(err, errlen, "%s", load_err);
  return NULL;
}
