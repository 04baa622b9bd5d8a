/* SPDX-License-Identifier: MIT */
/* `fatune explain`: the IO arithmetic of one attention shape, so that the
 * claim "FlashAttention is IO-aware" can be checked by measurement rather
 * than taken on faith. For a shape it counts the score matrix, the bytes a
 * materialising implementation moves, the input/output lower bound, the
 * FLOPs, and -- with the GPU's measured ceilings and a tuned winner from the
 * database -- the roofline floors and where the measured kernel sits, its
 * FLOP rate over the peak of the instruction its family issues (mma.sync
 * or wgmma: family.h's matrix_op), and why the candidates not timed in
 * full lost (the tuning database's eliminations: how many, and the
 * closest few by their ratio over the best and their repetitions).
 *
 * The lower bound is never called FlashAttention's traffic: a tiled kernel
 * re-reads K and V once per query tile. The materialising/lower-bound ratio
 * compares byte counts; it is not a predicted speedup.
 *
 * Everything prints to a FILE* the caller chooses, so tests read the exact
 * text back. */
#ifndef FAT_EXPLAIN_H
#define FAT_EXPLAIN_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "db.h"
#include "types.h"

/* What explain accepts; beyond these the question is not one fatune answers. */
#define FAT_EXPLAIN_MAX_BATCH 65536
#define FAT_EXPLAIN_MAX_HEADS 4096
#define FAT_EXPLAIN_MAX_HEAD_DIM 1024

/* Byte and FLOP counts of one forward problem. Integers are exact (the
 * shape is refused when one would overflow 64 bits). */
typedef struct fat_io_model {
  fat_problem problem;
  uint64_t elem_bytes;         /* bytes per element of Q: 2, e4m3's 1 */
  uint64_t kv_elem_bytes;      /* bytes per element of K and V: 2, e4m3's and the fp8 K/V
                                  caches' 1 (fat_dtype_kv_size) */
  uint64_t out_bytes;          /* bytes per element of O, S and P: the output's type
                                  (fat_dtype_out: bf16 for e4m3, Q's for a K/V cache), 2 */
  uint64_t score_elements;     /* batch·heads·seqlen_q·seqlen_k */
  uint64_t score_bytes;        /* one full S (or P) in memory */
  uint64_t row_bytes;          /* one score row: seqlen_k elements */
  uint64_t scores_traffic;     /* 4·score_bytes: S written, read for softmax, P written, read for P·V */
  uint64_t q_bytes, k_bytes, v_bytes, o_bytes;  /* K and V with heads_k heads */
  uint64_t lower_bound_bytes;  /* Q, K, V read once and O written once */
  uint64_t materialise_bytes;  /* scores_traffic + lower_bound_bytes */
  uint64_t flops;              /* fat_problem_flops: 4·B·H·Sq·Sk·D, halved for causal when Sq = Sk;
                                  a local window's pairs instead of Sq·Sk */
  double ratio;                /* materialise_bytes / lower_bound_bytes */
  double intensity;            /* flops / lower_bound_bytes: the roofline's x */
} fat_io_model;

/* Fills M for forward problem P. Refuses (-1, ERR naming the value) a
 * non-positive dimension, heads not a multiple of heads_k, or a shape whose
 * counts overflow 64 bits. */
int fat_io_model_compute(const fat_problem *p, fat_io_model *m, char *err, size_t errlen);

/* The roofline ceilings the floors are drawn from, and where each came from. */
typedef struct fat_floors {
  double bandwidth;            /* B/s; 0 when unknown */
  int bandwidth_measured;      /* 1: from the database, 0: --bandwidth (or unknown) */
  double peak[FAT_MATRIX_OP_COUNT];  /* FLOP/s of each instruction's products in the problem's
                                        dtype as measured (mma.sync's; wgmma's on Hopper);
                                        0 when not */
  double given_peak;           /* --peak, FLOP/s: the matrix peak by hand, which stands for
                                  every instruction's; 0 when not given */
} fat_floors;

/* The shape and where to look, as parsed from the command line. */
typedef struct fat_explain_options {
  fat_problem problem;         /* direction is always forward */
  char db_path[4096];          /* --db; "" means the default database */
  char gpu_name[256];          /* --gpu-name; "" means the database's only GPU */
  double bandwidth;            /* --bandwidth, converted to B/s; 0 when absent */
  double peak;                 /* --peak, converted to FLOP/s; 0 when absent */
  int help;                    /* --help: print fat_explain_usage() and stop */
} fat_explain_options;

/* Parses ARGV (ARGV[0] is the sub-command's name and is skipped). Returns 0,
 * or -1 with ERR naming the flag and value ("--head-dim: 0 is out of range
 * [1, 1024]"). */
int fat_explain_parse(int argc, char **argv, fat_explain_options *o, char *err, size_t errlen);
const char *fat_explain_usage(void);

/* Prints the shape, the counts, the lower bound, the ratio, the FLOPs and
 * the notes on what they do not mean. */
void fat_explain_print_model(FILE *out, const fat_io_model *m);

/* `fatune explain ARGS`, printing to OUT (results, --help) and ERR (usage
 * errors, failures). Returns the exit status: 0, 1 (database unreadable) or
 * 2 (bad usage, message naming the bad value). */
int fat_explain_run(int argc, char **argv, FILE *out, FILE *err);
/* fat_explain_run on stdout and stderr: what main() dispatches to. */
int fat_explain_main(int argc, char **argv);

/* Formatting shared with the report: N with thousands separators
 * ("545,259,520"); bytes in binary units ("520 MiB", "16 KiB", "1.5 MiB");
 * FLOPs in decimal units ("34.36 GFLOP"); a value past the largest unit's
 * 10^15 in %g ("8.67e+281 EiB"). Each returns BUF, which FAT_FMT_CAP
 * bytes always hold (a shorter CAP cuts the text). */
#define FAT_FMT_CAP 32
char *fat_fmt_thousands(uint64_t n, char *buf, size_t cap);
char *fat_fmt_bytes(double bytes, char *buf, size_t cap);
char *fat_fmt_flops(double flops, char *buf, size_t cap);
#endif
