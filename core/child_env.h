/* SPDX-License-Identifier: MIT */
/* The environment of a process this one forks and execs (the GPU worker,
 * a compile process): built before the fork, since the child may call only
 * async-signal-safe functions until it execs. */
#ifndef FAT_CHILD_ENV_H
#define FAT_CHILD_ENV_H
#include <stddef.h>

/* environ without any variable that one of the N strings VARS
 * ("NAME=VALUE") names, then copies of VARS, NULL-terminated; NULL when
 * out of memory. Free it with fat_child_env_free(envp, N). */
char **fat_child_env(const char *const *vars, size_t n);

/* Frees fat_child_env's ENVP of N added variables: only those are its
 * own; the rest belong to environ. */
void fat_child_env_free(char **envp, size_t n);

#endif
