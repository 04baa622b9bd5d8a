/* SPDX-License-Identifier: MIT */
/* What a tuning run measures (problems.h): the problems of a query, the
 * shapes each is checked on, the families timed on each, and the label a
 * problem is shown with. Pure functions of the options and the family
 * table; the pipeline that measures them is tune.c. */
#include <stdio.h>
#include <string.h>
#include "family.h"
#include "job.h"
#include "problems.h"

/* The soft-cap of a packed backward's short check shape: small, so that
 * tanh bends most scores (random inputs' scaled scores are of order 1,
 * which Gemma 2's cap of 50 would leave on tanh's straight part). */
#define CHECK_SOFTCAP 2.f

void fat_tune_problem(fat_dtype dtype, fat_mask mask, int head_dim, int seqlen_q, int seqlen_k,
                      int group, int batch, fat_problem *p) {
  memset(p, 0, sizeof *p);
  p->direction = FAT_FWD;
  p->dtype = dtype;
  p->mask = mask;
  p->head_dim = head_dim;
  const int longer = seqlen_q > seqlen_k ? seqlen_q : seqlen_k;
  p->batch = batch > 0 ? batch : longer < FAT_BENCH_TOKENS ? FAT_BENCH_TOKENS / longer : 1;
  p->heads = FAT_BENCH_HIDDEN / head_dim > 0 ? FAT_BENCH_HIDDEN / head_dim : 1;
  if (group == FAT_GQA_MQA) {
    p->heads_k = 1;
  } else {
    p->heads = p->heads / group * group;
    if (p->heads < group) p->heads = group;
    p->heads_k = p->heads / group;
  }
  p->seqlen_q = seqlen_q;
  p->seqlen_k = seqlen_k;
}

void fat_bench_problem(fat_dtype dtype, fat_mask mask, int head_dim, int seqlen, fat_problem *p) {
  fat_tune_problem(dtype, mask, head_dim, seqlen, seqlen, 1, 0, p);
}

void fat_problem_label(const fat_problem *p, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s %s d%d %s s%d", fat_direction_name(p->direction),
                   fat_dtype_name(p->dtype), p->head_dim, fat_mask_name(p->mask), p->seqlen_q);
  if (n > 0 && (size_t)n < cap && p->seqlen_k != p->seqlen_q)
    n += snprintf(out + n, cap - (size_t)n, "/k%d", p->seqlen_k);
  if (n > 0 && (size_t)n < cap && p->heads_k != p->heads)
    n += snprintf(out + n, cap - (size_t)n, p->heads_k == 1 ? " mqa" : " gqa%d", p->heads / p->heads_k);
  if (n > 0 && (size_t)n < cap && p->mask == FAT_MASK_LOCAL)
    n += snprintf(out + n, cap - (size_t)n, " w%d,%d", p->window_left, p->window_right);
  if (n > 0 && (size_t)n < cap && p->lengths.n > 0)
    n += snprintf(out + n, cap - (size_t)n, " varlen %dx%lld", p->lengths.n,
                  fat_lengths_tokens(&p->lengths) / p->lengths.n);
  if (n > 0 && (size_t)n < cap && p->page_size > 0)
    snprintf(out + n, cap - (size_t)n, " paged %d", p->page_size);
}

/* The shapes every variant is checked on for problem P: the bucket's own
 * lengths, lengths that are no multiple of any tile (odd), and short ones
 * that end inside the first tile -- each keeping P's ratio of query to K/V
 * heads and which of seqlen_q and seqlen_k is the longer (bottom-right
 * causal rows with no key, when queries outnumber keys). Few heads: the
 * fp64 reference is slow. */
static int odd_len(int L) { return (L * 3 / 4 + 17) | 1; }
static int short_len(int L) { return L < 77 ? L : 77; }

int fat_check_shapes_for(const fat_problem *p, fat_check_shape *s) {
  const int group = p->heads / p->heads_k, h1 = group <= 4 ? 2 * group : group;
  const int hk1 = group <= 4 ? 2 : 1, Lq = p->seqlen_q, Lk = p->seqlen_k;
  const int wl = p->window_left, wr = p->window_right;
  s[0] = (fat_check_shape){.batch = 1, .heads = h1, .heads_k = hk1, .seqlen_q = Lq, .seqlen_k = Lk,
                           .window_left = wl, .window_right = wr};
  s[1] = (fat_check_shape){.batch = 2, .heads = group <= 4 ? 3 * group : group,
                           .heads_k = group <= 4 ? 3 : 1, .seqlen_q = odd_len(Lq),
                           .seqlen_k = odd_len(Lk), .window_left = wl, .window_right = wr};
  /* Short: the shorter side at most 77 long, the longer up to 45 more. */
  const int sq = Lq <= Lk ? short_len(Lq) : (Lq < short_len(Lk) + 45 ? Lq : short_len(Lk) + 45);
  const int sk = Lk <= Lq ? short_len(Lk) : (Lk < sq + 45 ? Lk : sq + 45);
  s[2] = (fat_check_shape){.batch = 1, .heads = h1, .heads_k = hk1, .seqlen_q = sq, .seqlen_k = sk,
                           .window_left = wl, .window_right = wr};
  /* A variable-length profile is checked packed: sequences of uneven
   * lengths (fat_varlen_lengths) up to each shape's, some using only part
   * of their keys. */
  if (p->lengths.n > 0)
    for (int i = 0; i < FAT_TUNE_CHECK_SHAPES; i++) {
      s[i].varlen = 1;
      s[i].batch += 2;
    }
  /* A packed backward is served by the family that also takes the
   * soft-cap (family.h's features), one path of its code: its short shape
   * checks that path too. */
  if (p->lengths.n > 0 && p->direction == FAT_BWD) s[2].softcap = CHECK_SOFTCAP;
  /* A paged problem is checked on its page size, one sequence more, the
   * caches partly filled (varlen: fat_paged_used_keys), so that tables of
   * different lengths and half-filled last pages are read; its short shape
   * has the soft-cap too. */
  if (p->page_size > 0)
    for (int i = 0; i < FAT_TUNE_CHECK_SHAPES; i++) {
      s[i].page_size = p->page_size;
      s[i].varlen = 1;
      s[i].batch += 1;
      if (i == 2) s[i].softcap = CHECK_SOFTCAP;
    }
  /* e4m3 and the fp8 K/V caches: the bucket's shape with one descale
   * factor a tensor, the others (two sequences, three key heads) with one
   * per (batch, key head), so that both ways of indexing them
   * (fat_abi_fp8.h) are checked. */
  if (fat_dtype_kv_fp8(p->dtype))
    for (int i = 1; i < FAT_TUNE_CHECK_SHAPES; i++) s[i].descale_per_head = 1;
  return FAT_TUNE_CHECK_SHAPES;
}

/* Where a family is timed, by its row of the family table (family.h): a
 * packed batch of variable lengths only on the families whose kernels take
 * one in a pass (the runtime serves a packed call the nearest dense winner
 * too); a backward family with features (variable lengths and the
 * soft-cap) on nothing else, whose calls it alone serves; a family with a
 * longest seqlen_q (the decoding family) only up to it; a variant that packs the heads of a group (PACK_GQA 1) only where a
 * group has more than one query head. A variant whose family has no row,
 * or whose parameters do not parse, is timed, so that its check fails it
 * with the reason (fat_kernel_schedule's). */
int fat_family_applies(const fat_variant *v, const fat_problem *p) {
  const fat_family *f = fat_family_find(v->family, v->direction);
  if (!f) return 1;
  /* A paged cache is read by the paged family alone, and it reads nothing else. */
  if (f->paged != (p->page_size > 0)) return 0;
  if (p->lengths.n > 0) return f->packed;
  if (f->features) return 0;
  if (f->max_seqlen_q > 0 && p->seqlen_q > f->max_seqlen_q) return 0;
  if (v->direction != FAT_FWD) return 1;
  int pack_gqa = 0, splits = 1;
  char err[256];
  if (fat_fwd_params_parse(v->params, &pack_gqa, &splits, err, sizeof err)) return 1;
  return !(pack_gqa && p->heads == p->heads_k);
}

/* The windows MASK is tuned with: --window's for the local mask, the one
 * window (0, 0) of every other mask's problems. Returns their number. */
static int windows_of(const fat_options *o, fat_mask mask, const fat_window **w) {
  static const fat_window no_window = {.left = 0, .right = 0};
  if (mask != FAT_MASK_LOCAL) {
    *w = &no_window;
    return 1;
  }
  *w = o->windows;
  return o->n_windows;
}

int fat_shard_takes(const fat_options *o, size_t i) {
  /* Options filled by hand rather than parsed (tests, tools) leave 0/0: everything. */
  if (o->shard_count < 1) return 1;
  return i % (size_t)o->shard_count == (size_t)(o->shard_index - 1);
}

int fat_decoding_batches(fat_direction direction, fat_dtype dtype, fat_mask mask, int head_dim,
                         int seqlen_q, int seqlen_k, int group, int out[2]) {
  fat_problem p;
  fat_tune_problem(dtype, mask, head_dim, seqlen_q, seqlen_k, group, 0, &p);
  out[0] = p.batch;
  const fat_family *decoding = fat_family_find("splitkv", FAT_FWD);
  if (direction != FAT_FWD || !decoding || seqlen_q > decoding->max_seqlen_q) return 1;
  /* A wave: one block per K/V head and sequence on every SM, before any
   * split -- at most FAT_DECODE_WAVE_KV_BYTES of K and V (two bytes an
   * element), so that the longest caches stay within one GPU's memory. */
  long wave = (FAT_DECODE_WAVE + p.heads_k - 1) / p.heads_k;
  const double seq_bytes = 2.0 * 2.0 * seqlen_k * p.heads_k * head_dim;
  const long fits = (long)(FAT_DECODE_WAVE_KV_BYTES / seq_bytes);
  if (wave > fits) wave = fits;
  /* Within a factor two of the default the lookup's nearest parallelism
   * would not tell them apart: one batch is enough. */
  if (wave < 2L * p.batch) return 1;
  out[1] = (int)wave;
  return 2;
}

size_t fat_tune_problems(const fat_options *o, fat_problem *out) {
  size_t n = 0, i = 0;  /* the shard's problems; the query's */
  /* Dense problems by --seqlen (and --seqlen-k), or one per --varlen profile. */
  const int n_lens = o->n_varlens ? o->n_varlens : o->n_seqlens;
  const int n_keys = o->n_seqlens_k && !o->n_varlens ? o->n_seqlens_k : 1;
  /* ... at each --batch, or without it at the default batch and, for a
   * forward decoding problem, a wave's (fat_decoding_batches) ... */
  int defaults[2];
  /* ... and over a paged cache, one per --paged page size. */
  const int n_pages = o->n_page_sizes ? o->n_page_sizes : 1;
  const fat_window *windows;
  for (int ri = 0; ri < o->n_directions; ri++)
  for (int di = 0; di < o->n_dtypes; di++)
    for (int mi = 0; mi < o->n_masks; mi++)
      for (int wi = 0; wi < windows_of(o, o->masks[mi], &windows); wi++)
      for (int hi = 0; hi < o->n_head_dims; hi++)
        for (int gi = 0; gi < o->n_gqa; gi++)
        for (int si = 0; si < n_lens; si++)
        for (int ki = 0; ki < n_keys; ki++) {
          const int seqlen_q = o->n_varlens ? 1 : o->seqlens[si];
          const int seqlen_k = o->n_seqlens_k && !o->n_varlens ? o->seqlens_k[ki] : seqlen_q;
          const int n_batches =
              o->n_varlens ? 1
              : o->n_batches
                  ? o->n_batches
                  : fat_decoding_batches(o->directions[ri], o->dtypes[di], o->masks[mi],
                                         o->head_dims[hi], seqlen_q, seqlen_k, o->gqa[gi], defaults);
          for (int bi = 0; bi < n_batches; bi++)
          for (int pi = 0; pi < n_pages; pi++, i++) {
            if (!fat_shard_takes(o, i)) continue;
            if (!out) {
              n++;
              continue;
            }
            fat_problem *p = &out[n++];
            if (o->n_varlens) {
              fat_tune_problem(o->dtypes[di], o->masks[mi], o->head_dims[hi], 1, 1, o->gqa[gi], 1, p);
              p->lengths = o->varlens[si];
              fat_lengths_apply(p);
            } else {
              fat_tune_problem(o->dtypes[di], o->masks[mi], o->head_dims[hi], seqlen_q, seqlen_k,
                               o->gqa[gi], o->n_batches ? o->batches[bi] : defaults[bi], p);
            }
            p->window_left = windows[wi].left;
            p->window_right = windows[wi].right;
            p->page_size = o->n_page_sizes ? o->page_sizes[pi] : 0;
            /* The backward is tuned on the forward's shapes; its FLOPs are
             * 2.5x (fat_problem_flops). */
            p->direction = o->directions[ri];
          }
        }
  return n;
}
