/* SPDX-License-Identifier: MIT */
/* NVRTC compilation of variants: one thread per compilation, resource usage
 * read from ptxas's verbose report, results keyed for the build cache.
 * NVRTC is loaded at run time (nvrtc_api.h); nothing here needs a GPU. */
#ifndef FAT_COMPILE_H
#define FAT_COMPILE_H
#include "types.h"

/* Architectures fatune compiles for: "sm_80" (mma.sync family, any Ampere or
 * newer GPU) and "sm_90a" (Hopper; needed for wgmma). */
int fat_arch_valid(const char *arch);
/* The architecture to compile for on a GPU of compute capability major.minor:
 * "sm_90a" for 9.0, else "sm_<major><minor>". Writes into out (>= 16 bytes). */
void fat_arch_for_cc(int major, int minor, char out[16]);
/* 1 when ARCH has Hopper's warpgroup products (wgmma): "sm_90a", the
 * architecture-specific target, only. */
int fat_arch_has_wgmma(const char *arch);

/* The NVRTC options every variant is compiled with for ARCH, as one string
 * (recorded in the database and part of the cache key). */
const char *fat_compile_options(void);

/* Cache key of (source, arch, options, NVRTC version), sha256 hex. Needs
 * NVRTC loaded (for its version); returns -1 and fills err otherwise. */
int fat_build_key(const char *source, const char *arch, char key[65], char *err, size_t errlen);

/* Why SOURCE may not be compiled -- a preprocessor directive that reads a
 * file (#include, #include_next, #import, #embed or one unknown), a probe
 * for one (__has_include), or what would make its lines ambiguous to this
 * check (a trigraph, a carriage return, a backslash and spaces before a
 * newline) -- as "line N: directive #include" in WHY; "" when nothing.
 * Generated sources are self-contained (the generator inlines the
 * templates' includes): NVRTC would read any path from the disk. */
void fat_source_file_reads(const char *source, char *why, size_t cap);

/* Compiles one source for ARCH into B (zeroed first). Returns 0 when NVRTC
 * ran (B->ok says whether a cubin came out, B->log says why not), -1 when
 * NVRTC could not be loaded or called (err says why). NAME is used in
 * diagnostics ("fwd.mma80....cu"). A source fat_source_file_reads refuses
 * is not handed to NVRTC: B->ok = 0 and B->log says why. */
int fat_compile_one(const char *name, const char *source, const char *arch,
                    fat_build *b, char *err, size_t errlen);

/* Compiles N variants for ARCH on up to JOBS threads. BUILDS[i] receives
 * variant i's result. SKIP, when not NULL, marks builds already cached
 * (skip[i] != 0: left untouched). PROGRESS, when not NULL, is called from the
 * compiling threads (serialised by a lock) after each build with the number
 * done so far; it returns 0 to go on, or -1 to stop the run (a build it could
 * not store: the caller says why), which then hands out no more work and
 * returns -1 with "stopped after VARIANT". Returns 0, or -1 with err set
 * when NVRTC is unavailable or a compile process cannot start. Each compile
 * runs in a compile process, one per thread: a fresh image of the running
 * binary (fork, then exec of /proc/self/exe; a constructor in compile.c
 * serves there before main, so a binary that calls this hosts it), which
 * may be started from any thread while others run. It is capped at
 * FATUNE_COMPILE_TIMEOUT_S seconds (300) and FATUNE_COMPILE_MAX_MB of
 * address space (8192) beyond its own with NVRTC loaded, where a cap or a
 * crash gives a failed build with B->capped set; SIGINT is blocked there. */
typedef int (*fat_compile_progress)(void *user, size_t done, size_t total,
                                    const fat_variant *v, const fat_build *b);
/* CANCELLED, when not NULL, is asked before each build is handed out
 * (from the compiling threads; it must be safe to call from any thread):
 * nonzero stops the run as the command's ^C does, handing out no more work
 * and returning 0 with the builds not made left as they were. */
typedef int (*fat_compile_cancelled)(void);
int fat_compile_all(const fat_variant *variants, size_t n, const char *arch, int jobs,
                    const unsigned char *skip, fat_build *builds,
                    fat_compile_progress progress, void *user, fat_compile_cancelled cancelled,
                    char *err, size_t errlen);

/* How fat_compile_planned hands the work out. */
typedef struct fat_compile_plan {
  /* The variants' indices in the order to compile them (a permutation of
   * 0 .. n - 1), so that a consumer waiting on the builds gets the ones it
   * needs first; NULL: 0, 1, ... */
  const size_t *order;
  /* Added to each compile process's niceness (0-19): a compile running
   * beside the GPU's timings leaves the CPU to the GPU worker first. */
  int nice;
} fat_compile_plan;

/* fat_compile_all with PLAN (NULL: as fat_compile_all). An ORDER that is
 * not a permutation of 0 .. n - 1, or a NICE outside 0-19, is refused with
 * err naming it, before anything is compiled. */
int fat_compile_planned(const fat_variant *variants, size_t n, const char *arch, int jobs,
                        const unsigned char *skip, fat_build *builds,
                        fat_compile_progress progress, void *user, fat_compile_cancelled cancelled,
                        const fat_compile_plan *plan, char *err, size_t errlen);
#endif
