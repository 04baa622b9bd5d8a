/* SPDX-License-Identifier: MIT */
/* The generator: an embedded Lua 5.4 state that runs the generator/ scripts to turn
 * the search space and the kernel templates into concrete variants.
 * Lua sees only the `fat` table documented in generator/API.md; every error in
 * a script or template comes back as "file:line: cause". */
#ifndef FAT_GEN_H
#define FAT_GEN_H
#include <stddef.h>
#include "types.h"

typedef struct fat_gen fat_gen;

/* Opens the generator. SOURCE_DIR, when not NULL, is a folder holding
 * generator/ and templates/ that replaces the embedded copies (for template
 * development); NULL uses the files compiled into the binary. */
fat_gen *fat_gen_open(const char *source_dir, char *err, size_t errlen);
void fat_gen_close(fat_gen *g);

/* Which variants to produce. Empty lists (n == 0) mean "all the space has". */
typedef struct fat_gen_query {
  fat_direction direction;
  const int *head_dims; int n_head_dims;
  const fat_dtype *dtypes; int n_dtypes;
  const fat_mask *masks; int n_masks;
  const char *arch;     /* "sm_80" or "sm_90a": sets the shared-memory limit used in pruning */
  int smem_limit;       /* bytes of dynamic shared memory a block may use; 0: the arch's default */
} fat_gen_query;

/* A configuration the space dropped before compilation, and why. */
typedef struct fat_pruned {
  char *name;           /* the name the variant would have had */
  char *reason;         /* "shared memory 241664 > 232448 bytes" */
} fat_pruned;

/* Expands the space. *OUT gets *N variants (free each with fat_variant_free,
 * then the array with free). PRUNED, when not NULL, gets the dropped ones
 * (free with fat_pruned_free_all). Returns 0, or -1 with err set. */
int fat_gen_variants(fat_gen *g, const fat_gen_query *q, fat_variant **out, size_t *n,
                     fat_pruned **pruned, size_t *n_pruned, char *err, size_t errlen);
void fat_pruned_free_all(fat_pruned *p, size_t n);

/* Head dims, dtypes and masks the space knows for DIRECTION (for --help and
 * validating the CLI). Fills up to CAP entries, returns the count or -1. */
int fat_gen_head_dims(fat_gen *g, fat_direction direction, int *out, int cap, char *err, size_t errlen);

/* The targets the space generates for ("sm_80", "sm_90a", ...), in its
 * order: fills up to CAP, returns the count, 0 when the space does not say
 * (a --templates space without space.archs: its generate judges), or -1
 * with err. */
int fat_gen_archs(fat_gen *g, char (*out)[16], int cap, char *err, size_t errlen);
#endif
