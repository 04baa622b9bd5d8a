/* SPDX-License-Identifier: MIT */
/* A library checked before dlopen maps it (elf_check.h says why). Reads
 * only the ELF header and the program headers, as the loader does before
 * it maps anything. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "elf_check.h"

#define PATH_CAP 4096
#define LD_CACHE "/etc/ld.so.cache"
#define LD_CACHE_MAGIC "glibc-ld.so.cache1.1"  /* the format of glibc 2.32 and later */
#define LD_CACHE_HEADER 48                     /* magic, counts, flags, extension offset */
#define LD_CACHE_ENTRY 24                      /* flags, key, value, osversion, hwcap */
#define LD_CACHE_MAX_BYTES (64 << 20)
#define MAX_PHDRS 4096                         /* no real library has more */

#if defined(__x86_64__)
#define THIS_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define THIS_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define THIS_MACHINE EM_PPC64
#else
#define THIS_MACHINE EM_NONE  /* unknown: any machine is taken as this one */
#endif
#if __SIZEOF_POINTER__ == 8
#define THIS_CLASS ELFCLASS64
#else
#define THIS_CLASS ELFCLASS32
#endif

/* The loader's default folders, after the cache. */
static const char *const DEFAULT_DIRS[] = {
#if defined(__x86_64__)
    "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
#elif defined(__aarch64__)
    "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
#endif
    "/lib64", "/usr/lib64", "/lib", "/usr/lib"};

static ssize_t read_at(int fd, void *buf, size_t n, off_t at) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = pread(fd, (char *)buf + got, n - got, at + (off_t)got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  return (ssize_t)got;
}

/* PATH as the loader would take it: 0 complete, 1 not this machine's ELF
 * (the loader passes it over), -1 damaged (WHY). */
static int check_file(const char *path, char *why, size_t cap) {
  struct stat st;
  ElfW(Ehdr) eh;
  int rc = -1;
  /* O_NONBLOCK: a FIFO planted as the library opens at once (and is refused). */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 1; /* the loader cannot open it either: it says why */
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    snprintf(why, cap, "%s: not a regular file", path);
    goto out;
  }
  const unsigned long long size = (unsigned long long)st.st_size;
  if (read_at(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG)) {
    rc = size < sizeof eh && !memcmp(&eh, ELFMAG, size < SELFMAG ? size : SELFMAG) ? -1 : 1;
    if (rc < 0) snprintf(why, cap, "%s: truncated: %llu bytes, no whole ELF header", path, size);
    goto out;
  }
  if (eh.e_ident[EI_CLASS] != THIS_CLASS ||
      (THIS_MACHINE != EM_NONE && eh.e_machine != THIS_MACHINE)) {
    rc = 1;
    goto out;
  }
  if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 || eh.e_phnum > MAX_PHDRS) {
    snprintf(why, cap, "%s: damaged: %u program headers of %u bytes", path, (unsigned)eh.e_phnum,
             (unsigned)eh.e_phentsize);
    goto out;
  }
  const unsigned long long ph_end = (unsigned long long)eh.e_phoff + (unsigned long long)eh.e_phnum * sizeof(ElfW(Phdr));
  if (eh.e_phoff > size || ph_end > size) {
    snprintf(why, cap, "%s: truncated: its program headers end at byte %llu, the file has %llu",
             path, ph_end, size);
    goto out;
  }
  ElfW(Phdr) *ph = malloc(eh.e_phnum * sizeof *ph);
  if (!ph) {
    snprintf(why, cap, "%s: out of memory", path);
    goto out;
  }
  if (read_at(fd, ph, eh.e_phnum * sizeof *ph, (off_t)eh.e_phoff) != (ssize_t)(eh.e_phnum * sizeof *ph)) {
    snprintf(why, cap, "%s: cannot read its program headers", path);
    free(ph);
    goto out;
  }
  rc = 0;
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    if (ph[i].p_type != PT_LOAD) continue;
    const unsigned long long end = (unsigned long long)ph[i].p_offset + ph[i].p_filesz;
    if (end < ph[i].p_offset || end > size) {
      snprintf(why, cap, "%s: truncated: segment %u ends at byte %llu, the file has %llu", path, i,
               end, size);
      rc = -1;
      break;
    }
  }
  free(ph);
out:
  close(fd);
  return rc;
}

/* DIR/NAME checked (1: none there, or not this machine's). */
static int check_in(const char *dir, size_t dir_len, const char *name, char *why, size_t cap) {
  char path[PATH_CAP];
  if (dir_len == 0) dir = ".", dir_len = 1; /* an empty entry is the current folder */
  if (snprintf(path, sizeof path, "%.*s/%s", (int)dir_len, dir, name) >= (int)sizeof path) return 1;
  return check_file(path, why, cap);
}

/* NAME through /etc/ld.so.cache: each of its entries, in the cache's order. */
static int check_cached(const char *name, char *why, size_t cap) {
  FILE *f = fopen(LD_CACHE, "rb");
  char *c = NULL;
  long n;
  int rc = 1;
  if (!f) return 1;
  if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < LD_CACHE_HEADER || n > LD_CACHE_MAX_BYTES ||
      fseek(f, 0, SEEK_SET) || !(c = malloc((size_t)n + 1)) || fread(c, 1, (size_t)n, f) != (size_t)n)
    goto out;
  c[n] = 0; /* every string ends inside the buffer */
  if (memcmp(c, LD_CACHE_MAGIC, strlen(LD_CACHE_MAGIC))) goto out;
  uint32_t nlibs;
  memcpy(&nlibs, c + strlen(LD_CACHE_MAGIC), sizeof nlibs);
  for (uint64_t i = 0; i < nlibs && rc > 0; i++) {
    const uint64_t at = LD_CACHE_HEADER + i * LD_CACHE_ENTRY;
    uint32_t key, value;
    if (at + LD_CACHE_ENTRY > (uint64_t)n) break;
    memcpy(&key, c + at + 4, sizeof key);
    memcpy(&value, c + at + 8, sizeof value);
    if (key >= (uint64_t)n || value >= (uint64_t)n || strcmp(c + key, name)) continue;
    rc = check_file(c + value, why, cap);
  }
out:
  free(c);
  if (f) fclose(f);
  return rc;
}

int fat_library_check(const char *name, char *why, size_t cap) {
  why[0] = 0;
  if (!name || !*name) return 0;
  if (strchr(name, '/')) return check_file(name, why, cap) < 0 ? -1 : 0;
  int rc = 1;
  const char *ld = getenv("LD_LIBRARY_PATH");
  for (const char *p = ld; p && rc > 0;) {
    const size_t len = strcspn(p, ":;");
    rc = check_in(p, len, name, why, cap);
    p = p[len] ? p + len + 1 : NULL;
  }
  if (rc > 0) rc = check_cached(name, why, cap);
  for (size_t i = 0; rc > 0 && i < sizeof DEFAULT_DIRS / sizeof DEFAULT_DIRS[0]; i++)
    rc = check_in(DEFAULT_DIRS[i], strlen(DEFAULT_DIRS[i]), name, why, cap);
  return rc < 0 ? -1 : 0;
}
