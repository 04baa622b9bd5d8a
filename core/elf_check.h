/* SPDX-License-Identifier: MIT */
/* The file a dlopen of a library would map, checked first: dlopen maps
 * each loadable segment as its program header says, and a file shorter
 * than that (a truncated download, a disk that filled while copying)
 * raises SIGBUS inside dlopen, where nothing can catch it. NVRTC and the
 * CUDA driver are loaded so (nvrtc_api.c, cuda_api.c). */
#ifndef FAT_ELF_CHECK_H
#define FAT_ELF_CHECK_H
#include <stddef.h>

/* Finds the file dlopen(NAME) would load -- NAME itself when it holds a
 * '/', else the first of this machine's ELF class and architecture in
 * $LD_LIBRARY_PATH, /etc/ld.so.cache and the default folders -- and checks
 * that it is a regular file holding every byte its program headers map.
 * Returns 0 when it does, or when no file is found (dlopen then says so);
 * -1 with WHY (CAP bytes): "PATH: truncated: segment 2 ends at byte N, the
 * file has M", "PATH: not a regular file". */
int fat_library_check(const char *name, char *why, size_t cap);
#endif
