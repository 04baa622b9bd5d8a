/* SPDX-License-Identifier: MIT */
/* The template families as the C side knows them: one row per family of
 * one direction (core/family.c), mirroring the generator's family files one
 * to one. The generator owns what a family expands to (its template,
 * architectures, parameters and pruning rules: generator/family_*.lua);
 * this table owns what the tuner and the runtime do with its variants: how
 * they launch, whether they may win and be served, and on which problems.
 * Adding a family is its template, its Lua file and one row here;
 * test_gen checks that every family the generator produces has its row. */
#ifndef FAT_FAMILY_H
#define FAT_FAMILY_H
#include <stddef.h>
#include "kernel.h"
#include "types.h"

/* The tensor-core instruction of a family's matrix products: whose peak
 * a winner of the family is placed against (the tuner's end-of-run table,
 * explain, the report's roofline). The tuner measures each instruction's
 * peak: mma.sync's on every GPU (templates/ceilings.cu), wgmma's on sm_90a
 * (templates/ceilings_wgmma90.cu); db.h's fat_ceiling_peak_name names the
 * ceiling. */
typedef enum fat_matrix_op {
  FAT_MATRIX_OTHER,     /* none this table knows: the baseline's CUDA-core loops, a
                           template folder's own family */
  FAT_MATRIX_MMA_SYNC,  /* mma.sync m16n8k16, every architecture from sm_80 */
  FAT_MATRIX_WGMMA,     /* Hopper's warpgroup wgmma.mma_async (sm_90a) */
} fat_matrix_op;
#define FAT_MATRIX_OP_COUNT (FAT_MATRIX_WGMMA + 1)

/* "mma.sync", "wgmma" or "other". */
const char *fat_matrix_op_name(fat_matrix_op op);

typedef struct fat_family {
  const char *name;          /* the generator's family name: "mma80" */
  fat_direction direction;   /* the direction of its variants */
  fat_kernel_kind kind;      /* how its variants launch */
  int may_win;               /* 0: a yardstick the tuner times beside the winners (the
                                materialising baseline), never a winner, never served */
  int packed;                /* 1: its kernels take a packed batch of variable lengths
                                in one pass, so varlen problems are tuned on it */
  int max_seqlen_q;          /* > 0: the longest seqlen_q it is timed on and may serve
                                (the decoding family's blocks are for few queries); 0: any */
  int builtin_default;       /* 1: the runtime's built-in default variants are of this
                                family (one fused kernel of sm_80, which every GPU runs);
                                one with a longest seqlen_q (splitkv) serves only the calls
                                the runtime finds decoding-shaped (runtime/select.c) */
  int features;              /* backward: 1 when its kernels take variable lengths and the
                                soft-cap (FAT_BWD_FEATURES); such a family serves, and is
                                timed on, only the calls that have one, and the others
                                serve only the calls that have neither */
  fat_matrix_op matrix_op;   /* the instruction of its products */
  int paged;                 /* forward: 1 when its kernels read K and V from a paged cache
                                through a block table (fat_abi_kv.h); such a family serves,
                                and is timed on, only paged calls, and they only it */
} fat_family;

/* The family NAME of DIRECTION, or NULL when there is none. */
const fat_family *fat_family_find(const char *name, fat_direction direction);

/* The instruction of family NAME's products in DIRECTION (its row's
 * matrix_op): what a winner of it is placed against. FAT_MATRIX_OTHER for a
 * family the table does not name (a template folder's own). */
fat_matrix_op fat_family_matrix_op(const char *name, fat_direction direction);

/* The row the tuner gives a family the table does not name, one that a
 * template folder given with --templates adds (a family of one's own, the
 * fault-isolation test's): the fused kernel's launch contract (kernel.h),
 * free to win, dense problems of any length. libfatune never uses it: it
 * serves only the families it was built with (fat_kernel_schedule refuses
 * the others). */
fat_family fat_family_of_template(const char *name, fat_direction direction);

/* The rows, in the table's order: fat_family_at(i) for i < fat_family_count(). */
size_t fat_family_count(void);
const fat_family *fat_family_at(size_t i);

/* The baseline's family (its row has may_win 0), for the SQL that leaves it
 * out of every ranking and the report that draws it beside the winners. */
#define FAT_FAMILY_MATERIALIZE "materialize"
#endif
