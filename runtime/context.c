/* SPDX-License-Identifier: MIT */
/* Opening and closing a context: the databases it searches, in order (the
 * user's, by the fatune command's rule, then the shipped tables), the GPU
 * it serves (a device, or an offline description that can only select),
 * and the caller's current CUDA context, which every call that makes the
 * primary context current puts back. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compile.h"
#include "tables_path.h"
#include "runtime_int.h"

#define MAX_CC_MAJOR 99             /* an offline GPU's compute capability: what "sm_XY" can say */
#define MAX_CC_MINOR 9

/* ---- context ------------------------------------------------------------ */

/* The user's database path by the same rule as the fatune command. */
static int default_user_db(char *out, size_t cap) {
  const char *env = getenv("FATUNE_DB"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (env && *env) n = snprintf(out, cap, "%s", env);
  else if (xdg && *xdg) n = snprintf(out, cap, "%s/fatune/fatune.db", xdg);
  else if (home && *home) n = snprintf(out, cap, "%s/.cache/fatune/fatune.db", home);
  else return -1;
  return n > 0 && (size_t)n < cap ? 0 : -1;
}

static fat_status add_db(fat_context *c, const char *path) {
  if (c->n_dbs > MAX_TABLES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "more than %d table databases", MAX_TABLES);
  if (!(c->dbs[c->n_dbs] = dup_str(path))) return fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
  c->n_dbs++;
  return FAT_OK;
}

fat_status fat_context_open(fat_context **ctx, const fat_context_options *opts) {
  fat_context_options none = {0};
  fat_status st = FAT_OK;
  char e[ERR_CAP], path[PATH_CAP];
  if (!ctx) return FAT_ERR_INVALID_ARGUMENT;
  if (!opts) opts = &none;
  fat_context *c = calloc(1, sizeof *c);
  *ctx = c;
  if (!c) return FAT_ERR_OUT_OF_MEMORY;
  pthread_mutex_init(&c->lock, NULL);
  const char *lg = getenv("FATUNE_LOG");
  c->log = lg && *lg && strcmp(lg, "0");
  if (opts != &none && (st = CHECK_SIZE(c, fat_context_options, opts, "FAT_CONTEXT_OPTIONS_INIT")))
    goto out;
  c->no_builtin = opts->no_builtin;

  /* Databases: the user's first (it may not exist yet), then the tables. */
  if (opts->user_db) {
    c->user_db_enabled = opts->user_db[0] != 0;
    snprintf(path, sizeof path, "%s", opts->user_db);
  } else {
    c->user_db_enabled = default_user_db(path, sizeof path) == 0;
    if (!c->user_db_enabled) path[0] = 0;
  }
  if ((st = add_db(c, c->user_db_enabled ? path : ""))) goto out;
  if (opts->tables) {
    for (int i = 0; i < opts->n_tables; i++) {
      if (!opts->tables[i]) {
        st = fail(c, FAT_ERR_INVALID_ARGUMENT, "tables[%d] is NULL", i);
        goto out;
      }
      if ((st = add_db(c, opts->tables[i]))) goto out;
    }
  } else if (getenv("FATUNE_TABLES") && *getenv("FATUNE_TABLES")) {
    char list[PATH_CAP], *save = NULL;
    snprintf(list, sizeof list, "%s", getenv("FATUNE_TABLES"));
    for (char *t = strtok_r(list, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
      if (access(t, R_OK)) logf_(c, "warning: FATUNE_TABLES names %s, which cannot be read", t);
      if ((st = add_db(c, t))) goto out;
    }
  } else {
    /* The same search from a shared and a static link (tables_path.h). */
    char looked[PATH_CAP];
    if (fat_tables_installed(path, sizeof path, looked, sizeof looked) == 0) {
      logf_(c, "shipped tables: %s", path);
      if ((st = add_db(c, path))) goto out;
    } else {
      logf_(c, "warning: no shipped tables found (looked for %s); set FATUNE_TABLES to "
            "fatune_tables.db: until then only the user database and the built-in defaults serve",
            looked);
    }
  }

  if (opts->gpu_name) {
    if (!opts->gpu_name[0] || opts->gpu_cc_major < 1 || opts->gpu_cc_major > MAX_CC_MAJOR ||
        opts->gpu_cc_minor < 0 || opts->gpu_cc_minor > MAX_CC_MINOR || opts->gpu_sm_count < 1) {
      st = fail(c, FAT_ERR_INVALID_ARGUMENT,
                "offline GPU '%s' compute capability %d.%d, %d SMs: give a name, a compute "
                "capability (major 1 to %d, minor 0 to %d) and an SM count of at least 1",
                opts->gpu_name, opts->gpu_cc_major, opts->gpu_cc_minor, opts->gpu_sm_count,
                MAX_CC_MAJOR, MAX_CC_MINOR);
      goto out;
    }
    c->offline = 1;
    snprintf(c->gpu_name, sizeof c->gpu_name, "%s", opts->gpu_name);
    c->cc_major = opts->gpu_cc_major;
    c->cc_minor = opts->gpu_cc_minor;
    c->sm_count = opts->gpu_sm_count;
    c->smem_optin = INT_MAX; /* unknown: every stored winner ran on its own GPU */
    fat_arch_for_cc(c->cc_major, c->cc_minor, c->arch);
    goto out;
  }
  /* The device. */
  if (opts->device < 0) {
    st = fail(c, FAT_ERR_INVALID_ARGUMENT, "device %d: must be >= 0", opts->device);
    goto out;
  }
  if (fat_cuda_load(&c->cu, e, sizeof e)) {
    st = fail(c, FAT_ERR_NO_DRIVER, "%s", e);
    goto out;
  }
  CUresult r = c->cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    st = fail(c, FAT_ERR_NO_DRIVER, "no CUDA device: cuInit: %s",
              fat_cuda_result_text(&c->cu, r, e, sizeof e));
    goto out;
  }
  int count = 0;
  CUDA_TRY(c->cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (opts->device >= count) {
    st = fail(c, FAT_ERR_NO_DRIVER, "device %d out of range: %d device%s found", opts->device,
              count, count == 1 ? "" : "s");
    goto out;
  }
  CUDA_TRY(c->cu.cuDeviceGet(&c->dev, opts->device), "cuDeviceGet");
  CUDA_TRY(c->cu.cuDeviceGetName(c->gpu_name, sizeof c->gpu_name, c->dev), "cuDeviceGetName");
  CUDA_TRY(c->cu.cuDeviceGetAttribute(&c->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                      c->dev), "compute capability");
  CUDA_TRY(c->cu.cuDeviceGetAttribute(&c->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                      c->dev), "compute capability");
  CUDA_TRY(c->cu.cuDeviceGetAttribute(&c->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                      c->dev), "SM count");
  CUDA_TRY(c->cu.cuDeviceGetAttribute(&c->smem_optin,
                                      CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, c->dev),
           "shared memory per block");
  fat_arch_for_cc(c->cc_major, c->cc_minor, c->arch);
  CUDA_TRY(c->cu.cuDevicePrimaryCtxRetain(&c->pctx, c->dev), "cuDevicePrimaryCtxRetain");
  c->retained = 1;
  c->ordinal = opts->device;
  *(void **)&c->ptr_attr = dlsym(c->cu.handle, "cuPointerGetAttribute");
  *(void **)&c->stream_ctx = dlsym(c->cu.handle, "cuStreamGetCtx");
  logf_(c, "context on %s (%s, %d SMs), user database %s, %d table database(s)", c->gpu_name,
        c->arch, c->sm_count, c->user_db_enabled ? c->dbs[0] : "(none)", c->n_dbs - 1);
out:
  return st;
}

/* ---- the caller's CUDA context -------------------------------------------- */

saved_ctx fat_rt_save_current(const fat_context *c) {
  saved_ctx s = {.ctx = NULL, .saved = 0};
  if (c->retained && c->cu.cuCtxGetCurrent(&s.ctx) == CUDA_SUCCESS) s.saved = 1;
  return s;
}

/* Nothing to do when the caller's was the primary context: the calls only
 * ever make that one current. */
void fat_rt_restore_current(fat_context *c, saved_ctx s) {
  if (!s.saved || s.ctx == c->pctx) return;
  CUresult r = c->cu.cuCtxSetCurrent(s.ctx);
  if (r != CUDA_SUCCESS) {
    char t[256];
    logf_(c, "warning: restoring the caller's CUDA context %p: %s", (void *)s.ctx,
          fat_cuda_result_text(&c->cu, r, t, sizeof t));
  }
}

void fat_context_close(fat_context *c) {
  if (!c) return;
  if (c->retained) {
    const saved_ctx caller = fat_rt_save_current(c);
    c->cu.cuCtxSetCurrent(c->pctx);
    for (kernel *k = c->kernels, *n; k; k = n) {
      n = k->next;
      if (k->module) c->cu.cuModuleUnload(k->module);
      free(k);
    }
    if (c->dlse_module) c->cu.cuModuleUnload(c->dlse_module);
    fat_rt_restore_current(c, caller);  /* before the release, which may end the primary context */
    c->cu.cuDevicePrimaryCtxRelease(c->dev);
  }
  for (sel_record *r = c->records, *n; r; r = n) {
    n = r->next;
    free(r);
  }
  fat_rt_free_rows(c->rows);
  for (int i = 0; i < c->n_dbs; i++) free(c->dbs[i]);
  fat_cuda_unload(&c->cu);
  pthread_mutex_destroy(&c->lock);
  free(c);
}
