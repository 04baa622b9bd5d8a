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
     .builtin_default = 1, .matrix_op = FAT_MATRIX_MMA_SYNC},
    {.name = "splitkv", .direction = FAT_FWD, .kind = FAT_KERNEL_FUSED, .may_win = 1,
     .max_seqlen_q = SPLITKV_MAX_SEQLEN_Q, .builtin_default = 1, .matrix_op = FAT_MATRIX_MMA_SYNC},
    {.name = "paged", .direction = FAT_FWD, .kind = FAT_KERNEL_FUSED, .may_win = 1,
     .builtin_default = 1, .matrix_op = FAT_MATRIX_MMA_SYNC, .paged = 1},
    {.name = "wgmma90", .direction = FAT_FWD, .kind = FAT_KERNEL_FUSED, .may_win = 1, .packed = 1,
     .matrix_op = FAT_MATRIX_WGMMA},
    {.name = "ws90", .direction = FAT_FWD, .kind = FAT_KERNEL_FUSED_TMA, .may_win = 1, .packed = 1,
     .matrix_op = FAT_MATRIX_WGMMA},
    {.name = FAT_FAMILY_MATERIALIZE, .direction = FAT_FWD, .kind = FAT_KERNEL_MATERIALIZE,
     .matrix_op = FAT_MATRIX_OTHER},
    {.name = "mma80", .direction = FAT_BWD, .kind = FAT_KERNEL_FUSED, .may_win = 1,
     .builtin_default = 1, .matrix_op = FAT_MATRIX_MMA_SYNC},
    {.name = "mma80f", .direction = FAT_BWD, .kind = FAT_KERNEL_FUSED, .may_win = 1, .packed = 1,
     .builtin_default = 1, .features = 1, .matrix_op = FAT_MATRIX_MMA_SYNC},
    {.name = "wgmma90", .direction = FAT_BWD, .kind = FAT_KERNEL_FUSED, .may_win = 1,
     .matrix_op = FAT_MATRIX_WGMMA},
    {.name = "ws90", .direction = FAT_BWD, .kind = FAT_KERNEL_FUSED_TMA, .may_win = 1,
     .matrix_op = FAT_MATRIX_WGMMA},
};

#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

const char *fat_matrix_op_name(fat_matrix_op op) {
  switch (op) {
    case FAT_MATRIX_MMA_SYNC: return "mma.sync";
    case FAT_MATRIX_WGMMA: return "wgmma";
    case FAT_MATRIX_OTHER: break;
  }
  return "other";
}

size_t fat_family_count(void) { return N_FAMILIES; }

const fat_family *fat_family_at(size_t i) { return i < N_FAMILIES ? &FAMILIES[i] : NULL; }

fat_family fat_family_of_template(const char *name, fat_direction direction) {
  return (fat_family){.name = name, .direction = direction, .kind = FAT_KERNEL_FUSED, .may_win = 1,
                      .matrix_op = FAT_MATRIX_OTHER};
}

const fat_family *fat_family_find(const char *name, fat_direction direction) {
  if (!name) return NULL;
  for (size_t i = 0; i < N_FAMILIES; i++)
    if (FAMILIES[i].direction == direction && strcmp(FAMILIES[i].name, name) == 0)
      return &FAMILIES[i];
  return NULL;
}

fat_matrix_op fat_family_matrix_op(const char *name, fat_direction direction) {
  const fat_family *f = fat_family_find(name, direction);
  return f ? f->matrix_op : FAT_MATRIX_OTHER;
}
