/* SPDX-License-Identifier: MIT */
/* The family table (family.h): one row per generator family file. The
 * order is the generator's (generator/space.lua). */
#include <string.h>
#include "family.h"

/* The decoding family's blocks are 64 query rows (packed with the heads of
 * a group) and its key splits pay off only for few queries against many
 * keys: longer query lengths are the dense families'. */
#define SPLITKV_MAX_SEQLEN_Q 128

static const fat_family FAMILIES[] = {
    {.name = "mma80", .direction = FAT_FWD, .kind = FAT_KERNEL_FUSED, .may_win = 1, .packed = 1,
     .builtin_default = 1},
    {.name = "splitkv", .direction = FAT_FWD, .kind = FAT_KERNEL_FUSED, .may_win = 1,
     .max_seqlen_q = SPLITKV_MAX_SEQLEN_Q},
    {.name = "wgmma90", .direction = FAT_FWD, .kind = FAT_KERNEL_FUSED, .may_win = 1, .packed = 1},
    {.name = "ws90", .direction = FAT_FWD, .kind = FAT_KERNEL_FUSED_TMA, .may_win = 1, .packed = 1},
    {.name = FAT_FAMILY_MATERIALIZE, .direction = FAT_FWD, .kind = FAT_KERNEL_MATERIALIZE},
    {.name = "mma80", .direction = FAT_BWD, .kind = FAT_KERNEL_FUSED, .may_win = 1,
     .builtin_default = 1},
    {.name = "mma80f", .direction = FAT_BWD, .kind = FAT_KERNEL_FUSED, .may_win = 1, .packed = 1,
     .builtin_default = 1, .features = 1},
    {.name = "wgmma90", .direction = FAT_BWD, .kind = FAT_KERNEL_FUSED, .may_win = 1},
    {.name = "ws90", .direction = FAT_BWD, .kind = FAT_KERNEL_FUSED_TMA, .may_win = 1},
};

#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

size_t fat_family_count(void) { return N_FAMILIES; }

const fat_family *fat_family_at(size_t i) { return i < N_FAMILIES ? &FAMILIES[i] : NULL; }

fat_family fat_family_of_template(const char *name, fat_direction direction) {
  return (fat_family){.name = name, .direction = direction, .kind = FAT_KERNEL_FUSED, .may_win = 1};
}

const fat_family *fat_family_find(const char *name, fat_direction direction) {
  if (!name) return NULL;
  for (size_t i = 0; i < N_FAMILIES; i++)
    if (FAMILIES[i].direction == direction && strcmp(FAMILIES[i].name, name) == 0)
      return &FAMILIES[i];
  return NULL;
}
