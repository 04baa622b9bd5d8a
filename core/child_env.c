/* SPDX-License-Identifier: MIT */
#include "child_env.h"
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* Whether ENTRY ("NAME=...") sets the variable VAR ("NAME=VALUE") sets. */
static int same_name(const char *entry, const char *var) {
  const size_t len = strcspn(var, "=") + 1;  /* the name and its '=' */
  return strncmp(entry, var, len) == 0;
}

char **fat_child_env(const char *const *vars, size_t n) {
  size_t n_env = 0;
  while (environ[n_env]) n_env++;
  char **envp = calloc(n_env + n + 1, sizeof *envp);
  if (!envp) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n_env; i++) {
    int ours = 0;
    for (size_t v = 0; v < n && !ours; v++) ours = same_name(environ[i], vars[v]);
    if (!ours) envp[k++] = environ[i];
  }
  for (size_t v = 0; v < n; v++)
    if (!(envp[k + v] = strdup(vars[v]))) {
      for (size_t u = 0; u < v; u++) free(envp[k + u]);
      free(envp);
      return NULL;
    }
  return envp;
}

void fat_child_env_free(char **envp, size_t n) {
  size_t len = 0;
  while (envp[len]) len++;
  for (size_t v = len - n; v < len; v++) free(envp[v]);
  free(envp);
}
