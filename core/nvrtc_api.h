/* SPDX-License-Identifier: MIT */
/* NVRTC loaded at run time with dlopen, never linked: fatune must start,
 * generate and explain on a machine without the CUDA toolkit's libraries,
 * and say exactly what it looked for when compiling needs them.
 * nvrtc.h is included for its types only. */
#ifndef FAT_NVRTC_API_H
#define FAT_NVRTC_API_H
#include <stddef.h>
#include <nvrtc.h>

#define FAT_NVRTC_PATH_MAX 512

/* The NVRTC entry points fatune uses, resolved from one loaded library. */
typedef struct fat_nvrtc {
  void *handle;                     /* dlopen handle; never closed (NVRTC stays for the process) */
  char path[FAT_NVRTC_PATH_MAX];    /* the name or path that loaded */
  int major, minor;                 /* nvrtcVersion: part of every build-cache key */
  const char *(*GetErrorString)(nvrtcResult result);
  nvrtcResult (*Version)(int *major, int *minor);
  nvrtcResult (*CreateProgram)(nvrtcProgram *prog, const char *src, const char *name,
                               int num_headers, const char *const *headers,
                               const char *const *include_names);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *prog);
  nvrtcResult (*CompileProgram)(nvrtcProgram prog, int num_options, const char *const *options);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram prog, size_t *size);
  nvrtcResult (*GetProgramLog)(nvrtcProgram prog, char *log);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram prog, size_t *size);
  nvrtcResult (*GetCUBIN)(nvrtcProgram prog, char *cubin);
} fat_nvrtc;

/* The process-wide NVRTC, loaded on first call (thread-safe). Tries
 * $FATUNE_NVRTC when set, then libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so,
 * /usr/local/cuda/lib64/libnvrtc.so.13 and /usr/local/cuda/lib64/libnvrtc.so.
 * Returns NULL with err naming everything tried when none loads; the outcome
 * is remembered, so later calls give the same answer. */
const fat_nvrtc *fat_nvrtc_get(char *err, size_t errlen);

/* Loads the first of CANDIDATES (N names or paths for dlopen) that opens and
 * has every entry point, into OUT. Returns 0, or -1 with err listing each
 * candidate and why it failed. fat_nvrtc_get uses this; tests call it with
 * their own lists to see the failure message. */
int fat_nvrtc_open(const char *const *candidates, int n, fat_nvrtc *out, char *err, size_t errlen);
#endif
