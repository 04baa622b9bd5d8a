/* SPDX-License-Identifier: MIT */
/* Names, arithmetic and parameter parsing for the shared vocabulary in types.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "types.h"

static const char *const dtype_names[] = {"fp16", "bf16", "e4m3", "fp16-e4m3kv", "bf16-e4m3kv"};
static const char *const mask_names[] = {"none", "causal", "local"};
static const char *const direction_names[] = {"fwd", "bwd"};

#define NAME_OF(table, i) \
  ((unsigned)(i) < sizeof(table) / sizeof(table[0]) ? table[i] : "?")

const char *fat_dtype_name(fat_dtype d) { return NAME_OF(dtype_names, d); }
const char *fat_mask_name(fat_mask m) { return NAME_OF(mask_names, m); }
const char *fat_direction_name(fat_direction d) { return NAME_OF(direction_names, d); }

static int parse_name(const char *s, const char *const *table, int n, int *out) {
  if (!s) return -1;
  for (int i = 0; i < n; i++)
    if (strcmp(s, table[i]) == 0) {
      *out = i;
      return 0;
    }
  return -1;
}

int fat_dtype_parse(const char *s, fat_dtype *out) {
  int i;
  if (parse_name(s, dtype_names, FAT_N_DTYPES, &i)) return -1;
  *out = (fat_dtype)i;
  return 0;
}

int fat_mask_parse(const char *s, fat_mask *out) {
  int i;
  if (parse_name(s, mask_names, 3, &i)) return -1;
  *out = (fat_mask)i;
  return 0;
}

int fat_direction_parse(const char *s, fat_direction *out) {
  int i;
  if (parse_name(s, direction_names, 2, &i)) return -1;
  *out = (fat_direction)i;
  return 0;
}

size_t fat_dtype_size(fat_dtype d) { return d == FAT_E4M3 ? 1 : 2; }

size_t fat_dtype_kv_size(fat_dtype d) { return fat_dtype_kv_fp8(d) ? 1 : 2; }

fat_dtype fat_dtype_out(fat_dtype d) {
  switch (d) {
    case FAT_E4M3: return FAT_BF16;
    case FAT_FP16_E4M3KV: return FAT_FP16;
    case FAT_BF16_E4M3KV: return FAT_BF16;
    default: return d;
  }
}

int fat_dtype_kv_fp8(fat_dtype d) { return d == FAT_E4M3 || fat_dtype_is_kv8(d); }

/* Keys a query at position POS (of SK keys) sees through window [LO, HI]
 * around it (-1: unbounded). */
static double window_keys(long long pos, long long sk, int left, int right) {
  long long lo = left < 0 ? 0 : pos - left, hi = right < 0 ? sk - 1 : pos + right;
  if (lo < 0) lo = 0;
  if (hi > sk - 1) hi = sk - 1;
  return hi >= lo ? (double)(hi - lo + 1) : 0.0;
}

/* The (query, key) pairs one sequence of SQ queries and SK keys counts
 * under P's mask. */
static double sequence_pairs(const fat_problem *p, int sq, int sk) {
  if (p->mask == FAT_MASK_LOCAL) {
    /* The pairs the window lets through, counted row by row. */
    double pairs = 0;
    const long long diag = (long long)sk - sq;
    for (long long i = 0; i < sq; i++) pairs += window_keys(i + diag, sk, p->window_left, p->window_right);
    return pairs;
  }
  const double pairs = (double)sq * sk;
  return p->mask == FAT_MASK_CAUSAL && sq == sk ? 0.5 * pairs : pairs;
}

double fat_problem_flops(const fat_problem *p) {
  double pairs = 0;
  if (p->lengths.n > 0)
    for (int b = 0; b < p->lengths.n; b++) pairs += sequence_pairs(p, p->lengths.v[b], p->lengths.v[b]);
  else
    pairs = p->batch * sequence_pairs(p, p->seqlen_q, p->seqlen_k);
  const double f = 4.0 * p->heads * pairs * p->head_dim;
  return p->direction == FAT_BWD ? 2.5 * f : f;
}

void fat_lengths_text(const fat_problem *p, char *out) {
  size_t n = 0;
  out[0] = '\0';
  for (int b = 0; b < p->lengths.n && n < FAT_LENGTHS_TEXT_CAP; b++)
    n += (size_t)snprintf(out + n, FAT_LENGTHS_TEXT_CAP - n, b ? ",%d" : "%d", p->lengths.v[b]);
}

int fat_lengths_parse(const char *text, fat_lengths *out, char *err, size_t errlen) {
  out->n = 0;
  for (const char *c = text; *c;) {
    char *end;
    long v = strtol(c, &end, 10);
    if (end == c || (*end && *end != ',') || !(*c >= '0' && *c <= '9') || v < 1 ||
        v > FAT_VARLEN_MAX_LENGTH || (*end == ',' && !end[1])) {
      snprintf(err, errlen, "'%.60s': a varlen profile is a comma-separated list of sequence "
               "lengths, each 1 to %d", text, FAT_VARLEN_MAX_LENGTH);
      return -1;
    }
    if (out->n == FAT_VARLEN_MAX) {
      snprintf(err, errlen, "'%.40s...': more than %d sequences in a varlen profile", text,
               FAT_VARLEN_MAX);
      return -1;
    }
    out->v[out->n++] = (int)v;
    c = *end ? end + 1 : end;
  }
  return 0;
}

long long fat_lengths_tokens(const fat_lengths *l) {
  long long tokens = 0;
  for (int b = 0; b < l->n; b++) tokens += l->v[b];
  return tokens;
}

int fat_lengths_longest(const fat_lengths *l) {
  int longest = 0;
  for (int b = 0; b < l->n; b++)
    if (l->v[b] > longest) longest = l->v[b];
  return longest;
}

void fat_lengths_apply(fat_problem *p) {
  if (p->lengths.n < 1) return;
  p->batch = p->lengths.n;
  p->seqlen_q = p->seqlen_k = fat_lengths_longest(&p->lengths);
}

void fat_variant_free(fat_variant *v) {
  if (!v) return;
  free(v->name);
  free(v->family);
  free(v->params);
  free(v->entry);
  free(v->source);
  memset(v, 0, sizeof *v);
}

void fat_build_free(fat_build *b) {
  if (!b) return;
  free(b->cubin);
  free(b->log);
  memset(b, 0, sizeof *b);
}

/* The integer after "NAME=" in PARAMS (a canonical parameter string, names
 * whole words): 0 with *OUT set, 1 when PARAMS does not name it, -1 when its
 * value is not an integer in [MIN, 65536]. */
static int param_int(const char *params, const char *name, int min, int *out) {
  size_t len = strlen(name);
  for (const char *p = params; (p = strstr(p, name)) != NULL; p += len) {
    if ((p == params || p[-1] == ' ') && p[len] == '=') {
      char *end;
      long v = strtol(p + len + 1, &end, 10);
      if (end == p + len + 1 || (*end && *end != ' ') || v < min || v > 1 << 16) return -1;
      *out = (int)v;
      return 0;
    }
  }
  return 1;
}

int fat_params_have_all(const char *params, const char *words) {
  if (!params) params = "";
  for (const char *w = words ? words : ""; *w;) {
    while (*w == ' ') w++;
    const size_t len = strcspn(w, " ");
    if (!len) break;
    int found = 0;
    for (const char *p = params; *p && !found;) {
      while (*p == ' ') p++;
      const size_t plen = strcspn(p, " ");
      found = plen == len && !strncmp(p, w, len);
      p += plen;
    }
    if (!found) return 0;
    w += len;
  }
  return 1;
}

int fat_bwd_params_parse(const char *params, int *block_m, int *block_n, fat_dq_mode *dq_mode,
                         char *err, size_t errlen) {
  static const struct {
    const char *word;
    fat_dq_mode mode;
  } MODES[] = {{"atomic", FAT_DQ_ATOMIC}, {"separate", FAT_DQ_SEPARATE}, {"ordered", FAT_DQ_ORDERED}};
  if (!params) params = "";
  if (param_int(params, "BLOCK_M", 1, block_m)) {
    snprintf(err, errlen, "backward parameters '%s': no positive BLOCK_M", params);
    return -1;
  }
  if (param_int(params, "BLOCK_N", 1, block_n)) {
    snprintf(err, errlen, "backward parameters '%s': no positive BLOCK_N", params);
    return -1;
  }
  const char *mode = strstr(params, "DQ_MODE=");
  if (mode && (mode == params || mode[-1] == ' ')) {
    mode += strlen("DQ_MODE=");
    size_t len = strcspn(mode, " ");
    for (size_t i = 0; i < sizeof MODES / sizeof MODES[0]; i++)
      if (len == strlen(MODES[i].word) && !strncmp(mode, MODES[i].word, len)) {
        *dq_mode = MODES[i].mode;
        return 0;
      }
  }
  snprintf(err, errlen, "backward parameters '%s': DQ_MODE is not atomic, separate or ordered", params);
  return -1;
}

int fat_fwd_tma_parse(const char *params, int *block_n, int *persistent, int *slab, char *err, size_t errlen) {
  if (!params) params = "";
  if (param_int(params, "BLOCK_N", 1, block_n) || *block_n > 256) {
    snprintf(err, errlen, "forward parameters '%s': no BLOCK_N of 1 .. 256", params);
    return -1;
  }
  *persistent = 0;
  if (param_int(params, "PERSISTENT", 0, persistent) < 0 || *persistent > FAT_FWD_DRAWN) {
    snprintf(err, errlen, "forward parameters '%s': PERSISTENT is not 0, 1 or 2", params);
    return -1;
  }
  /* Variants tuned before SLAB was a parameter have 64-column slabs. */
  *slab = 64;
  if (param_int(params, "SLAB", 0, slab) < 0 || (*slab != 64 && *slab != 32 && *slab != 128)) {
    snprintf(err, errlen, "forward parameters '%s': SLAB is not 64, 32 or 128", params);
    return -1;
  }
  return 0;
}

int fat_bwd_tma_parse(const char *params, int *persistent, char *err, size_t errlen) {
  if (!params) params = "";
  *persistent = 0;
  if (param_int(params, "PERSISTENT", 0, persistent) < 0 || *persistent > FAT_FWD_RESIDENT) {
    snprintf(err, errlen, "backward parameters '%s': PERSISTENT is not 0 or 1", params);
    return -1;
  }
  return 0;
}

int fat_fwd_params_parse(const char *params, int *pack_gqa, int *splits, char *err,
                         size_t errlen) {
  if (!params) params = "";
  *pack_gqa = 0;
  *splits = 1;
  if (param_int(params, "PACK_GQA", 0, pack_gqa) < 0 || *pack_gqa > 1) {
    snprintf(err, errlen, "forward parameters '%s': PACK_GQA is not 0 or 1", params);
    return -1;
  }
  if (param_int(params, "SPLITS", 0, splits) < 0 || *splits > FAT_FWD_MAX_SPLITS) {
    snprintf(err, errlen, "forward parameters '%s': SPLITS is not 0 .. %d (0: chosen at launch)",
             params, FAT_FWD_MAX_SPLITS);
    return -1;
  }
  return 0;
}
