/* SPDX-License-Identifier: MIT */
/* What a tuning run measures (problems.c): the problems a query stands
 * for, in tuning order, the shapes every variant is checked on for each,
 * which families are timed on which, and how a problem is labelled in the
 * tuner's progress and table. */
#ifndef FAT_PROBLEMS_H
#define FAT_PROBLEMS_H
#include <stddef.h>
#include "options.h"
#include "types.h"

/* The FlashAttention benchmark shapes a seqlen bucket stands for: batch x
 * seqlen = 16384 tokens, heads x head_dim = 2048. */
#define FAT_BENCH_TOKENS 16384
#define FAT_BENCH_HIDDEN 2048

/* The problem a forward bucket stands for: fat_tune_problem with seqlen_k =
 * seqlen, group 1 and the default batch. */
void fat_bench_problem(fat_dtype dtype, fat_mask mask, int head_dim, int seqlen, fat_problem *p);

/* The problem tuned for (SEQLEN_Q, SEQLEN_K, GROUP): heads = 2048 / head
 * dim, rounded down to a multiple of GROUP (at least GROUP) with heads /
 * GROUP K/V heads, or one K/V head for FAT_GQA_MQA; batch = BATCH, or (0)
 * 16384 tokens / the longer seqlen, at least 1. Direction fwd. */
void fat_tune_problem(fat_dtype dtype, fat_mask mask, int head_dim, int seqlen_q, int seqlen_k,
                      int group, int batch, fat_problem *p);

/* A decoding problem's second batch (fat_decoding_batches): batch x K/V
 * heads at least a wave of blocks on the GPUs fatune tunes (108-132 SMs),
 * its K and V at most 4 GiB. */
#define FAT_DECODE_WAVE 128
#define FAT_DECODE_WAVE_KV_BYTES 4294967296.0

/* The batches a problem of the query is tuned at when --batch is not
 * given, into OUT; their number. The default (fat_tune_problem's batch
 * 0: 16384 tokens / the longer side) always; for a forward decoding
 * problem (seqlen_q at most the decoding family's longest) also a wave's:
 * the smallest batch whose batch x K/V heads reaches FAT_DECODE_WAVE,
 * where that is at least twice the default. The runtime serves a
 * decoding call the winner of the nearest batch x K/V heads at or below
 * its own (else the smallest above), and a variant whose split count is
 * fixed for the few blocks of the default batch over-splits a full batch
 * (RESULTS.md, the decoding buckets at batch 1): tuned at both, a full
 * batch has a winner of its own. */
int fat_decoding_batches(fat_direction direction, fat_dtype dtype, fat_mask mask, int head_dim,
                         int seqlen_q, int seqlen_k, int group, int out[2]);

/* The problems of the query O in tuning order: one per direction, dtype,
 * mask -- and for the local mask, per --window --, head dim, group and
 * lengths (fat_tune_problem's shapes; the window 0, 0 for the other masks)
 * -- of those, --shard K/N's (fat_shard_takes). Fills OUT when not NULL
 * (room for the count: call with NULL first). Returns their number. */
size_t fat_tune_problems(const fat_options *o, fat_problem *out);

/* --shard K/N's rule: the query's problem of index I (0, 1, ... in the
 * order above, before sharding) is shard K's when I mod N = K - 1. A
 * function of the command line alone, so that N machines given the same
 * one but for K split the problems between them without a coordinator:
 * every problem on exactly one, and their counts at most one apart. */
int fat_shard_takes(const fat_options *o, size_t i);

/* The shapes every variant is checked on for problem P, into S (room for
 * FAT_TUNE_CHECK_SHAPES): P's own lengths, odd ones and short ones, each
 * with P's query-to-K/V head ratio and the same side (queries or keys) the
 * longer. Returns the count. */
#define FAT_TUNE_CHECK_SHAPES 3
struct fat_check_shape; /* measure/job.h */
int fat_check_shapes_for(const fat_problem *p, struct fat_check_shape *s);

/* 0 when variant V's family is not timed on problem P (fat_family_applies
 * says which, from the family's row: the decoding family only on short
 * query sides, packed heads only with groups, varlen only in one pass). */
int fat_family_applies(const fat_variant *v, const fat_problem *p);

/* "fwd bf16 d128 causal s16/k65536 gqa4": the problem's key as the tuner's
 * progress and table show it (/k only when seqlen_k differs, gqa<group> or
 * mqa only when K/V heads are fewer, " w256,0" for a local window). */
void fat_problem_label(const fat_problem *p, char *out, size_t cap);
#endif
