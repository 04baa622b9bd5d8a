/* SPDX-License-Identifier: MIT */
/* The GPUs of a tuning run (gpus.h): a worker per --gpu index, and their
 * architectures. */
#include <stdio.h>
#include <string.h>
#include "compile.h"
#include "gpu_run.h"
#include "gpus.h"

#define DEFAULT_ARCH "sm_90a"  /* what a run with no GPU compiles for, without --arch */

/* Starts the worker of GPU INDEX into G's next slot; the code of
 * fat_worker_start, with ERR. */
static int start_one(fat_run_gpus *g, int index, const fat_worker_options *wo, char *err,
                     size_t errlen) {
  fat_run_gpu *slot = &g->gpus[g->n];
  memset(slot, 0, sizeof *slot);
  slot->index = index;
  int rc = fat_worker_start(index, wo, &slot->worker, &slot->info, err, errlen);
  if (rc != FAT_GPU_OPENED) {
    g->failed_index = index;
    return rc;
  }
  g->n++;
  return FAT_GPU_OPENED;
}

int fat_run_gpus_start(const fat_options *o, const fat_worker_options *wo, fat_run_gpus *g,
                       char *err, size_t errlen) {
  int rc = FAT_GPU_OPENED;
  memset(g, 0, sizeof *g);
  if (o->gpu_all) {
    rc = start_one(g, 0, wo, err, errlen);
    int count = rc == FAT_GPU_OPENED ? fat_worker_device_count(g->gpus[0].worker) : 0;
    if (count > FAT_MAX_GPUS) count = FAT_MAX_GPUS;
    for (int i = 1; rc == FAT_GPU_OPENED && i < count; i++) rc = start_one(g, i, wo, err, errlen);
  } else {
    for (int i = 0; rc == FAT_GPU_OPENED && i < o->n_gpus; i++)
      rc = start_one(g, o->gpus[i], wo, err, errlen);
  }
  if (rc != FAT_GPU_OPENED) fat_run_gpus_stop(g);
  return rc;
}

int fat_run_gpus_archs(fat_run_gpus *g, const char *arch, char *err, size_t errlen) {
  g->n_archs = 0;
  if (g->n == 0) {
    snprintf(g->archs[0].name, sizeof g->archs[0].name, "%s", arch && arch[0] ? arch : DEFAULT_ARCH);
    g->archs[0].smem_limit = 0;
    g->n_archs = 1;
    return 0;
  }
  for (int i = 0; i < g->n; i++) {
    fat_run_gpu *gpu = &g->gpus[i];
    char want[FAT_ARCH_CAP];
    fat_arch_for_cc(gpu->info.cc_major, gpu->info.cc_minor, want);
    if (arch && arch[0] && strcmp(arch, want)) {
      snprintf(err, errlen, "--arch %s: GPU %d is %s (compute capability %d.%d), which runs %s",
               arch, gpu->index, gpu->info.name, gpu->info.cc_major, gpu->info.cc_minor, want);
      return -1;
    }
    int a = 0;
    while (a < g->n_archs && strcmp(g->archs[a].name, want)) a++;
    if (a == g->n_archs) {
      snprintf(g->archs[a].name, sizeof g->archs[a].name, "%s", want);
      g->archs[a].smem_limit = gpu->info.smem_per_block_optin;
      g->n_archs++;
    } else if (gpu->info.smem_per_block_optin < g->archs[a].smem_limit) {
      g->archs[a].smem_limit = gpu->info.smem_per_block_optin;
    }
    gpu->arch = a;
  }
  return 0;
}

void fat_run_gpus_list(const fat_run_gpus *g, const unsigned char *member, char *out, size_t cap) {
  int total = 0, written = 0;
  for (int i = 0; i < g->n; i++) total += !member || member[i];
  size_t used = (size_t)snprintf(out, cap, "GPU");
  for (int i = 0; i < g->n && used < cap; i++) {
    if (member && !member[i]) continue;
    const char *sep = written == 0 ? " " : written + 1 == total ? " and " : ", ";
    used += (size_t)snprintf(out + used, cap - used, "%s%d", sep, g->gpus[i].index);
    written++;
  }
}

void fat_run_gpus_stop(fat_run_gpus *g) {
  for (int i = 0; i < g->n; i++) {
    fat_worker_stop(g->gpus[i].worker);
    g->gpus[i].worker = NULL;
  }
  g->n = 0;
}
