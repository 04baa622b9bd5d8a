/* SPDX-License-Identifier: MIT */
/* How a build-cache key is made from its parts, apart from compile.c's
 * fat_build_key (which needs NVRTC for its version) so the layout can be
 * tested, and reproduced by anything that must find a cached cubin. */
#ifndef FAT_BUILD_KEY_H
#define FAT_BUILD_KEY_H

/* sha256 hex of the canonical byte stream
 *   "fatune-build-key 1\n1\n" "source <len>\n<source>\n" "arch <len>\n<arch>\n"
 *   "options <len>\n<options>\n" "compiler <len>\n<compiler>\n"
 * where <len> is the decimal byte length of the value that follows: with the
 * lengths in front, no two different tuples give the same stream.
 * COMPILER names the compiler and its version: "nvrtc 13.0". */
void fat_build_key_of(const char *source, const char *arch, const char *options,
                      const char *compiler, char key[65]);
#endif
