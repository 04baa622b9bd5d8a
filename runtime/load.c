/* SPDX-License-Identifier: MIT */
/* Loading the selected variant's module: a stored cubin when one passes
 * fat_verify_cubin (its recorded sha256, this GPU's architecture), else
 * its source, checked against its hash, compiled with NVRTC and stored in
 * the user's database for the next process; then the module's entry
 * points and its opt-in to more shared memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sqlite3.h>
#include "compile.h"
#include "db.h"
#include "fwd_launch.h"
#include "kernel.h"
#include "nvrtc_api.h"
#include "sha256.h"
#include "types.h"
#include "runtime_int.h"

#define DEFAULT_SMEM_LIMIT (48 * 1024) /* more needs the opt-in attribute */
#define KEY_PREFIX 12               /* hex digits of a build key shown in a message */

/* ---- loading ------------------------------------------------------------ */

fat_status fat_verify_cubin(const void *cubin, size_t len, const char *expected_sha256,
                            const char *build_arch, const char *device_arch, char *err,
                            size_t errlen) {
  char hex[FAT_SHA256_HEX_CHARS + 1], scratch[8];
  fat_status st = FAT_OK;
  if (!err) err = scratch, errlen = sizeof scratch;
  err[0] = 0;
  if (!cubin || len == 0) {
    st = FAT_ERR_INTEGRITY;
    snprintf(err, errlen, "the cubin is empty");
  } else if (len > (size_t)FAT_TABLES_MAX_CUBIN_BYTES) {
    st = FAT_ERR_INTEGRITY;
    snprintf(err, errlen, "the cubin of %zu bytes is over the %lld-byte cap", len,
             (long long)FAT_TABLES_MAX_CUBIN_BYTES);
  } else if (!expected_sha256 || !expected_sha256[0]) {
    st = FAT_ERR_INTEGRITY;
    snprintf(err, errlen, "the cubin has no recorded sha256: not trusted");
  } else if (!build_arch || !device_arch || strcmp(build_arch, device_arch)) {
    st = FAT_ERR_UNSUPPORTED;
    snprintf(err, errlen, "the cubin was built for %s, this GPU is %s",
             build_arch ? build_arch : "(no architecture)", device_arch ? device_arch : "(unknown)");
  } else {
    fat_sha256_hex(cubin, len, hex);
    if (strcmp(hex, expected_sha256)) {
      st = FAT_ERR_INTEGRITY;
      snprintf(err, errlen, "the cubin's sha256 %s does not match its recorded %.64s", hex,
               expected_sha256);
    }
  }
  return st;
}

/* A stored cubin of variant (name, hash) that may be loaded on this GPU:
 * from any database (the user's first), builds for this architecture
 * first, newest first, the first that passes fat_verify_cubin. Heap copy in
 * *CUBIN (NULL when none); NOTE gets why the first stored one was refused,
 * or that none is stored for this architecture. */
void fat_rt_find_cubin(fat_context *c, const selection *sel, void **cubin, char *note,
                       size_t cap) {
  int stored = 0;
  *cubin = NULL;
  note[0] = 0;
  for (int i = 0; i < c->n_dbs && !*cubin; i++) {
    sqlite3 *h = fat_rt_open_ro(c, i);
    sqlite3_stmt *s = NULL;
    int step;
    if (!h) continue;
    if (sqlite3_prepare_v2(h,
                           "SELECT b.key, b.arch, b.cubin, hs.cubin_sha256 FROM builds b"
                           " JOIN variants v ON v.id = b.variant_id"
                           " LEFT JOIN build_hashes hs ON hs.build_key = b.key"
                           " WHERE v.name = ?1 AND v.source_hash = ?2 AND b.ok = 1"
                           " ORDER BY b.arch = ?3 DESC, b.created_at DESC, b.key",
                           -1, &s, NULL) != SQLITE_OK) {
      /* A database from before build_hashes: its cubins are not trusted. */
      if (!note[0])
        snprintf(note, cap, "%s: %s; its cubins are not trusted", c->dbs[i], sqlite3_errmsg(h));
      sqlite3_close(h);
      continue;
    }
    sqlite3_bind_text(s, 1, sel->choice.variant, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, sel->choice.source_hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, c->arch, -1, SQLITE_STATIC);
    while ((step = sqlite3_step(s)) == SQLITE_ROW && !*cubin) {
      char why[256];
      const void *blob = sqlite3_column_blob(s, 2);
      size_t n = (size_t)sqlite3_column_bytes(s, 2);
      stored = 1;
      if (fat_verify_cubin(blob, n, (const char *)sqlite3_column_text(s, 3),
                           (const char *)sqlite3_column_text(s, 1), c->arch, why, sizeof why)) {
        /* A long path may truncate the note: its end says the least. */
        if (!note[0] && snprintf(note, cap, "%s: build %.*s: %s; compiling from source", c->dbs[i],
                                 KEY_PREFIX, (const char *)sqlite3_column_text(s, 0), why) < 0)
          note[0] = 0;
        continue;
      }
      if ((*cubin = malloc(n))) memcpy(*cubin, blob, n);
    }
    sqlite3_finalize(s);
    sqlite3_close(h);
  }
  if (*cubin) note[0] = 0;
  else if (!stored && !note[0])
    snprintf(note, cap, "no stored cubin of %s for %s; compiling from source", sel->choice.variant,
             c->arch);
}

/* The source of the selected variant: built in, or from its database. */
static char *find_source(fat_context *c, const selection *sel) {
  if (sel->def) return dup_str(sel->def->source);
  sqlite3 *h = fat_rt_open_ro(c, sel->db_index);
  sqlite3_stmt *s = NULL;
  char *src = NULL;
  if (!h) return NULL;
  if (sqlite3_prepare_v2(h, "SELECT source FROM variants WHERE name = ?1 AND source_hash = ?2",
                         -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, sel->choice.variant, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, sel->choice.source_hash, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) src = dup_str((const char *)sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return src;
}

static int make_parent_dirs(const char *path) {
  char p[PATH_CAP];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) && errno != EEXIST) return -1;
    *s = '/';
  }
  return 0;
}

/* Keeps a cubin compiled here in the user's database, so the next process
 * loads it without NVRTC. Failing to store is logged, not an error: the
 * kernel runs all the same. */
static void store_build(fat_context *c, const selection *sel, const char *source,
                        const fat_build *b) {
  char e[ERR_CAP], nv[32];
  fat_db *db = NULL;
  fat_variant v = {0};
  fat_build kb = *b;
  sqlite3_int64 vid;
  const fat_nvrtc *nvrtc = fat_nvrtc_get(e, sizeof e);
  if (!c->user_db_enabled || !nvrtc) return;
  if (make_parent_dirs(c->dbs[0]) || fat_db_open(c->dbs[0], &db, e, sizeof e)) {
    logf_(c, "cannot store the cubin of %s in %s", sel->choice.variant, c->dbs[0]);
    return;
  }
  v.name = (char *)sel->choice.variant;
  v.family = (char *)sel->family;
  v.params = (char *)sel->params;
  v.entry = (char *)sel->entry;
  v.source = (char *)source;
  snprintf(v.hash, sizeof v.hash, "%s", sel->choice.source_hash);
  v.direction = (fat_direction)sel->direction;
  v.dtype = (fat_dtype)sel->dtype;
  v.mask = (fat_mask)sel->mask;
  v.head_dim = sel->head_dim;
  v.block_m = sel->block_m;
  v.threads = sel->threads;
  v.smem_bytes = sel->smem_bytes;
  v.is_default = sel->def != NULL;
  snprintf(nv, sizeof nv, "%d.%d", nvrtc->major, nvrtc->minor);
  if (fat_db_put_variant(db, &v, &vid) || fat_db_put_build(db, vid, &kb, fat_compile_options(), nv))
    logf_(c, "cannot store the cubin of %s in %s: %s", sel->choice.variant, c->dbs[0],
          fat_db_errmsg(db));
  else
    logf_(c, "stored the cubin of %s (%s) in %s", sel->choice.variant, c->arch, c->dbs[0]);
  fat_db_close(db);
}

/* Compiles the selected variant's source for this GPU with NVRTC into a
 * heap cubin, and stores it for next time. */
static fat_status compile_variant(fat_context *c, const selection *sel, void **cubin) {
  char e[ERR_CAP];
  fat_build b;
  fat_status st = FAT_OK;
  char *src = find_source(c, sel);
  *cubin = NULL;
  memset(&b, 0, sizeof b);
  if (!src) return fail(c, FAT_ERR_DATABASE, "%s: the source of %s is missing",
                        sel->choice.db_path, sel->choice.variant);
  /* What is compiled is what was checked: the source its hash names (the
   * selection passed over any other; the file may have changed since). */
  char hex[FAT_SHA256_HEX_CHARS + 1];
  fat_sha256_hex(src, strlen(src), hex);
  if (strcmp(hex, sel->choice.source_hash)) {
    st = fail(c, FAT_ERR_INTEGRITY, "%s: the stored source of %s does not hash to its source_hash "
              "%s; not compiled", sel->def ? "built-in" : sel->choice.db_path, sel->choice.variant,
              sel->choice.source_hash);
    goto out;
  }
  if (!fat_nvrtc_get(e, sizeof e)) {
    st = fail(c, FAT_ERR_NO_NVRTC, "%s has no stored cubin for %s and NVRTC is unavailable: %s",
              sel->choice.variant, c->arch, e);
    goto out;
  }
  if (fat_compile_one(sel->choice.variant, src, c->arch, &b, e, sizeof e)) {
    st = fail(c, FAT_ERR_NO_NVRTC, "compiling %s: %s", sel->choice.variant, e);
    goto out;
  }
  if (!b.ok) {
    st = fail(c, FAT_ERR_COMPILE, "NVRTC could not compile %s for %s: %.400s", sel->choice.variant,
              c->arch, b.log ? b.log : "");
    goto out;
  }
  if (fat_build_key(src, c->arch, b.key, e, sizeof e) == 0) store_build(c, sel, src, &b);
  logf_(c, "compiled %s for %s with NVRTC (%.0f ms)", sel->choice.variant, c->arch, b.compile_ms);
  *cubin = b.cubin;
  b.cubin = NULL;
out:
  fat_build_free(&b);
  free(src);
  return st;
}

/* Loaded once a context per source hash (a hash names a source exactly). */
const kernel *fat_rt_loaded_kernel(const fat_context *c, const char *hash) {
  for (const kernel *k = c->kernels; k; k = k->next)
    if (!strcmp(k->hash, hash)) return k;
  return NULL;
}

/* The loaded kernel of SEL, loading its module on first use: a stored cubin
 * when one fits the GPU and loads, else the source compiled with NVRTC.
 * Called with the context lock held. */
fat_status fat_rt_ensure_kernel(fat_context *c, const selection *sel, const kernel **out) {
  fat_status st = FAT_OK;
  void *cubin = NULL;
  char e[256];
  if ((*out = fat_rt_loaded_kernel(c, sel->choice.source_hash))) return FAT_OK;
  kernel *k = calloc(1, sizeof *k);
  if (!k) return fail(c, FAT_ERR_OUT_OF_MEMORY, "out of memory");
  snprintf(k->hash, sizeof k->hash, "%s", sel->choice.source_hash);
  fat_rt_find_cubin(c, sel, &cubin, k->note, sizeof k->note);
  if (k->note[0]) logf_(c, "%s", k->note);
  if (cubin) {
    CUresult r = c->cu.cuModuleLoadData(&k->module, cubin);
    if (r == CUDA_SUCCESS) {
      k->load = FAT_LOAD_STORED_CUBIN;
      logf_(c, "loaded the stored cubin of %s", sel->choice.variant);
    } else {
      /* A cubin from a newer toolkit than the driver, say: compile instead. */
      snprintf(k->note, sizeof k->note, "the stored cubin of %s does not load (%s); compiling",
               sel->choice.variant, fat_cuda_result_text(&c->cu, r, e, sizeof e));
      logf_(c, "%s", k->note);
      k->module = NULL;
    }
    free(cubin);
    cubin = NULL;
  }
  if (!k->module) {
    if ((st = compile_variant(c, sel, &cubin))) goto out;
    CUDA_TRY(c->cu.cuModuleLoadData(&k->module, cubin), "loading the compiled module");
    k->load = FAT_LOAD_COMPILED;
  }
  CUresult r = c->cu.cuModuleGetFunction(&k->fn, k->module, sel->entry);
  if (r != CUDA_SUCCESS) {
    st = fail(c, FAT_ERR_CUDA, "entry %s of %s: %s", sel->entry, sel->choice.variant,
              fat_cuda_result_text(&c->cu, r, e, sizeof e));
    goto out;
  }
  if (sel->direction == FAT_FWD && sel->splits != 1) { /* a fixed count, or the launch's (0) */
    char entry[160];
    snprintf(entry, sizeof entry, "%s%s", sel->entry, FAT_FWD_COMBINE_SUFFIX);
    r = c->cu.cuModuleGetFunction(&k->combine_fn, k->module, entry);
    if (r != CUDA_SUCCESS) {
      st = fail(c, FAT_ERR_CUDA, "entry %s of %s: %s", entry, sel->choice.variant,
                fat_cuda_result_text(&c->cu, r, e, sizeof e));
      goto out;
    }
  }
  if (sel->direction == FAT_BWD) {
    /* The backward's three other kernels; the dQ pass shares the variant's
     * shared memory, the per-row kernels need none. */
    static const char *const names[3] = {FAT_BWD_PREPROCESS_ENTRY, FAT_BWD_DQ_ENTRY,
                                         FAT_BWD_CONVERT_ENTRY};
    CUfunction *fns[3] = {&k->pre_fn, &k->dq_fn, &k->convert_fn};
    for (int i = 0; i < 3; i++) {
      r = c->cu.cuModuleGetFunction(fns[i], k->module, names[i]);
      if (r != CUDA_SUCCESS) {
        st = fail(c, FAT_ERR_CUDA, "entry %s of %s: %s", names[i], sel->choice.variant,
                  fat_cuda_result_text(&c->cu, r, e, sizeof e));
        goto out;
      }
    }
  }
  if (sel->smem_bytes > DEFAULT_SMEM_LIMIT) {
    CUDA_TRY(c->cu.cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      sel->smem_bytes),
             "opting into dynamic shared memory");
    if (k->dq_fn)
      CUDA_TRY(c->cu.cuFuncSetAttribute(k->dq_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        sel->smem_bytes),
               "opting into dynamic shared memory for the dQ pass");
  }
  k->next = c->kernels;
  c->kernels = k;
  c->stats.kernels++;
  *out = k;
  k = NULL;
out:
  free(cubin);
  if (k) {
    if (k->module) c->cu.cuModuleUnload(k->module);
    free(k);
  }
  return st;
}
