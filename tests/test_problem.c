/* SPDX-License-Identifier: MIT */
/* The problems the tuner builds from its options (fat_tune_problem,
 * fat_tune_problems), the shapes it checks each variant on
 * (fat_check_shapes_for) and the label it prints: the benchmark shapes
 * unchanged, grouped-query heads that divide, uneven lengths that keep
 * their longer side, decoding shapes, local windows carried from
 * --window into every problem and check shape of the local mask (and into
 * no other), and --varlen's profiles: problems of their own, checked on
 * packed shapes, their FLOPs counted sequence by sequence. */
#include <stdio.h>
#include <string.h>
#include "job.h"
#include "options.h"
#include "problems.h"
#include "check.h"

/* The problems of a command line (fat_options_parse, then the defaults
 * main() fills in for what it leaves empty), into OUT; their number. */
static size_t problems_of(int argc, char **argv, fat_problem *out, size_t cap) {
  static const int known[] = {64, 128};
  fat_options o;
  char err[256];
  if (fat_options_parse(argc, argv, known, 2, &o, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 0;
  }
  size_t n = fat_tune_problems(&o, NULL);
  return n <= cap ? fat_tune_problems(&o, out) : 0;
}

static void expect_problem(int line, const fat_problem *p, int batch, int heads, int heads_k,
                           int sq, int sk) {
  if (!check_record(p->batch == batch && p->heads == heads && p->heads_k == heads_k &&
                    p->seqlen_q == sq && p->seqlen_k == sk))
    fprintf(stderr, "%s:%d: problem %dx%d/%d %dx%d, want %dx%d/%d %dx%d\n", __FILE__, line,
            p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k, batch, heads, heads_k, sq,
            sk);
}
#define EXPECT_PROBLEM(p, b, h, hk, sq, sk) expect_problem(__LINE__, p, b, h, hk, sq, sk)

static void expect_shape(int line, const fat_check_shape *s, int b, int h, int hk, int sq, int sk) {
  if (!check_record(s->batch == b && s->heads == h && s->heads_k == hk && s->seqlen_q == sq &&
                    s->seqlen_k == sk))
    fprintf(stderr, "%s:%d: shape %dx%d/%dx%dx%d, want %dx%d/%dx%dx%d\n", __FILE__, line,
            s->batch, s->heads, s->heads_k, s->seqlen_q, s->seqlen_k, b, h, hk, sq, sk);
}
#define EXPECT_SHAPE(s, b, h, hk, sq, sk) expect_shape(__LINE__, s, b, h, hk, sq, sk)

/* --shard K/N splits the query's problems with no overlap and nothing
 * left out: the union over K is the whole list, each problem on one shard,
 * shard K's j-th problem the query's (K - 1) + j * N (the documented
 * rule), counts at most one apart; and the values that are no shard are
 * refused naming the value. */
#define SHARD_QUERY_PROBLEMS 24  /* 2 head dims x 2 dtypes x 2 masks x 3 seqlens */
#define SHARD_MAX_N 7
static void test_shards(void) {
  char *whole[] = {"fatune", "--head-dim", "64,128", "--dtype", "fp16,bf16", "--mask",
                   "none,causal", "--seqlen", "512,1024,2048"};
  enum { N_WHOLE = sizeof whole / sizeof whole[0] };
  fat_problem all[SHARD_QUERY_PROBLEMS + 1], part[SHARD_QUERY_PROBLEMS + 1];
  CHECK_INT(problems_of(N_WHOLE, whole, all, SHARD_QUERY_PROBLEMS + 1), SHARD_QUERY_PROBLEMS);
  for (int n = 1; n <= SHARD_MAX_N; n++) {
    int times[SHARD_QUERY_PROBLEMS] = {0};
    size_t smallest = SHARD_QUERY_PROBLEMS, largest = 0;
    for (int k = 1; k <= n; k++) {
      char shard[16];
      snprintf(shard, sizeof shard, "%d/%d", k, n);
      char *argv[N_WHOLE + 2];
      memcpy(argv, whole, sizeof whole);
      argv[N_WHOLE] = "--shard";
      argv[N_WHOLE + 1] = shard;
      const size_t got = problems_of(N_WHOLE + 2, argv, part, SHARD_QUERY_PROBLEMS + 1);
      smallest = got < smallest ? got : smallest;
      largest = got > largest ? got : largest;
      for (size_t j = 0; j < got; j++) {
        const size_t i = (size_t)(k - 1) + j * (size_t)n;  /* the rule */
        CHECK_WHY(i < SHARD_QUERY_PROBLEMS && !memcmp(&part[j], &all[i], sizeof part[j]),
                  "--shard %s: its problem %zu is not the query's %zu", shard, j, i);
        for (size_t x = 0; x < SHARD_QUERY_PROBLEMS; x++) times[x] += !memcmp(&part[j], &all[x], sizeof all[x]);
      }
    }
    for (size_t x = 0; x < SHARD_QUERY_PROBLEMS; x++)
      CHECK_WHY(times[x] == 1, "%d shards: the query's problem %zu is on %d of them", n, x, times[x]);
    CHECK_WHY(largest - smallest <= 1, "%d shards of %d problems: %zu to %zu each", n,
              SHARD_QUERY_PROBLEMS, smallest, largest);
  }
  /* Exact: shard 2 of 5 takes the query's problems 1, 6, 11, 16, 21. */
  char *two_of_five[] = {"fatune", "--head-dim", "64,128", "--dtype", "fp16,bf16", "--mask",
                         "none,causal", "--seqlen", "512,1024,2048", "--shard=2/5"};
  CHECK_INT(problems_of(N_WHOLE + 1, two_of_five, part, SHARD_QUERY_PROBLEMS + 1), 5);
  CHECK(!memcmp(&part[0], &all[1], sizeof all[1]) && !memcmp(&part[4], &all[21], sizeof all[21]));

  static const char *const bad[][2] = {
      {"0/2", "--shard: '0/2': K (this shard) must be 1 to N (2)"},
      {"3/2", "--shard: '3/2': K (this shard) must be 1 to N (2)"},
      {"-1/2", "--shard: '-1/2' is not K/N (shard K of N machines, e.g. 2/4)"},
      {"1/0", "--shard: '1/0': N (the number of shards) must be 1 to 4096"},
      {"1/4097", "--shard: '1/4097': N (the number of shards) must be 1 to 4096"},
      {"x", "--shard: 'x' is not K/N (shard K of N machines, e.g. 2/4)"},
      {"1/x", "--shard: '1/x' is not K/N (shard K of N machines, e.g. 2/4)"},
      {"1/2/3", "--shard: '1/2/3' is not K/N (shard K of N machines, e.g. 2/4)"},
      {"/2", "--shard: '/2' is not K/N (shard K of N machines, e.g. 2/4)"},
      {"1/", "--shard: '1/' is not K/N (shard K of N machines, e.g. 2/4)"},
      {" 1/2", "--shard: ' 1/2' is not K/N (shard K of N machines, e.g. 2/4)"},
      {"1/99999999999", "--shard: '1/99999999999': N (the number of shards) must be 1 to 4096"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    static const int known[] = {64, 128};
    fat_options o;
    char err[256] = "";
    char *argv[] = {"fatune", "--shard", (char *)bad[i][0]};
    CHECK_INT(fat_options_parse(3, argv, known, 2, &o, err, sizeof err), -1);
    CHECK_STR(err, bad[i][1]);
  }
}

int main(void) {
  fat_problem p;
  fat_check_shape s[FAT_TUNE_CHECK_SHAPES];
  char label[96];

  /* The benchmark shapes: 16384 tokens, 2048 hidden, as before. */
  fat_bench_problem(FAT_BF16, FAT_MASK_CAUSAL, 128, 4096, &p);
  EXPECT_PROBLEM(&p, 4, 16, 16, 4096, 4096);
  CHECK_INT(fat_check_shapes_for(&p, s), 3);
  EXPECT_SHAPE(&s[0], 1, 2, 2, 4096, 4096);
  EXPECT_SHAPE(&s[1], 2, 3, 3, 3089, 3089); /* 4096 * 3/4 + 17 = 3089, odd */
  EXPECT_SHAPE(&s[2], 1, 2, 2, 77, 77);
  fat_problem_label(&p, label, sizeof label);
  CHECK_STR(label, "fwd bf16 d128 causal s4096");
  CHECK(s[0].descale_per_head == 0 && s[1].descale_per_head == 0 && s[2].descale_per_head == 0);
  /* e4m3: the same shapes, the bucket's with one descale factor a tensor,
   * the other two with one a (batch, key head). */
  fat_bench_problem(FAT_E4M3, FAT_MASK_CAUSAL, 128, 4096, &p);
  EXPECT_PROBLEM(&p, 4, 16, 16, 4096, 4096);
  CHECK_INT(fat_check_shapes_for(&p, s), 3);
  EXPECT_SHAPE(&s[1], 2, 3, 3, 3089, 3089);
  CHECK_INT(s[0].descale_per_head, 0);
  CHECK_INT(s[1].descale_per_head, 1);
  CHECK_INT(s[2].descale_per_head, 1);
  fat_problem_label(&p, label, sizeof label);
  CHECK_STR(label, "fwd e4m3 d128 causal s4096");
  /* An fp8 K/V cache: its descale factors indexed both ways too, on a
   * decoding problem's shapes as on any other; the 16-bit dtypes have none. */
  fat_tune_problem(FAT_BF16_E4M3KV, FAT_MASK_NONE, 128, 1, 4096, 4, 0, &p);
  CHECK_INT(fat_check_shapes_for(&p, s), 3);
  CHECK(s[0].descale_per_head == 0 && s[1].descale_per_head == 1 && s[2].descale_per_head == 1);
  fat_problem_label(&p, label, sizeof label);
  CHECK_STR(label, "fwd bf16-e4m3kv d128 none s1/k4096 gqa4");
  fat_tune_problem(FAT_FP16_E4M3KV, FAT_MASK_CAUSAL, 64, 2048, 2048, 1, 0, &p);
  CHECK_INT(fat_check_shapes_for(&p, s), 3);
  CHECK(s[0].descale_per_head == 0 && s[1].descale_per_head == 1 && s[2].descale_per_head == 1);
  fat_tune_problem(FAT_FP16, FAT_MASK_CAUSAL, 64, 2048, 2048, 1, 0, &p);
  CHECK_INT(fat_check_shapes_for(&p, s), 3);
  CHECK(s[0].descale_per_head == 0 && s[1].descale_per_head == 0 && s[2].descale_per_head == 0);

  /* Grouped-query: heads rounded down to a multiple of the group. */
  fat_tune_problem(FAT_FP16, FAT_MASK_NONE, 96, 2048, 2048, 4, 0, &p);
  EXPECT_PROBLEM(&p, 8, 20, 5, 2048, 2048); /* 2048 / 96 = 21 heads -> 20 */
  fat_check_shapes_for(&p, s);
  EXPECT_SHAPE(&s[0], 1, 8, 2, 2048, 2048);
  EXPECT_SHAPE(&s[1], 2, 12, 3, 1553, 1553);
  fat_problem_label(&p, label, sizeof label);
  CHECK_STR(label, "fwd fp16 d96 none s2048 gqa4");
  fat_tune_problem(FAT_FP16, FAT_MASK_NONE, 128, 1024, 1024, 8, 0, &p);
  EXPECT_PROBLEM(&p, 16, 16, 2, 1024, 1024);
  fat_check_shapes_for(&p, s);
  EXPECT_SHAPE(&s[0], 1, 8, 1, 1024, 1024); /* groups above 4: one K/V head */
  fat_tune_problem(FAT_FP16, FAT_MASK_NONE, 256, 1024, 1024, 16, 0, &p);
  EXPECT_PROBLEM(&p, 16, 16, 1, 1024, 1024); /* 8 heads < group 16: 16 heads */
  fat_tune_problem(FAT_BF16, FAT_MASK_NONE, 64, 512, 512, FAT_GQA_MQA, 0, &p);
  EXPECT_PROBLEM(&p, 32, 32, 1, 512, 512);
  fat_check_shapes_for(&p, s);
  EXPECT_SHAPE(&s[0], 1, 32, 1, 512, 512);
  fat_problem_label(&p, label, sizeof label);
  CHECK_STR(label, "fwd bf16 d64 none s512 mqa");

  /* Decoding: a few queries on a long cache; batch from the longer side or
   * given; checks keep the keys the longer side. */
  fat_tune_problem(FAT_BF16, FAT_MASK_CAUSAL, 128, 16, 65536, 4, 8, &p);
  EXPECT_PROBLEM(&p, 8, 16, 4, 16, 65536);
  fat_check_shapes_for(&p, s);
  EXPECT_SHAPE(&s[0], 1, 8, 2, 16, 65536);
  EXPECT_SHAPE(&s[1], 2, 12, 3, 29, 49169);
  EXPECT_SHAPE(&s[2], 1, 8, 2, 16, 61);
  fat_problem_label(&p, label, sizeof label);
  CHECK_STR(label, "fwd bf16 d128 causal s16/k65536 gqa4");
  fat_tune_problem(FAT_BF16, FAT_MASK_CAUSAL, 128, 1, 65536, 1, 0, &p);
  EXPECT_PROBLEM(&p, 1, 16, 16, 1, 65536);
  /* More queries than keys: causal rows with no key stay in every shape. */
  fat_tune_problem(FAT_BF16, FAT_MASK_CAUSAL, 64, 4096, 1024, 1, 0, &p);
  EXPECT_PROBLEM(&p, 4, 32, 32, 4096, 1024);
  fat_check_shapes_for(&p, s);
  EXPECT_SHAPE(&s[1], 2, 3, 3, 3089, 785);
  EXPECT_SHAPE(&s[2], 1, 2, 2, 122, 77);
  for (int i = 0; i < 3; i++) CHECK(s[i].seqlen_q > s[i].seqlen_k);

  /* Windows: each --window is a problem of the local mask, in the order
   * given, after the masks before it; the other masks' problems keep the
   * window 0, 0. Every check shape of a local problem has its window. */
  char *argv[] = {"fatune", "--head-dim", "64", "--dtype", "bf16", "--seqlen", "1024,4096",
                  "--mask", "none,local", "--window", "256,0:1024,-1"};
  fat_problem q[8];
  CHECK_INT(problems_of(11, argv, q, 8), 6);
  static const struct {
    fat_mask mask;
    int seqlen, left, right;
  } want[6] = {{FAT_MASK_NONE, 1024, 0, 0},     {FAT_MASK_NONE, 4096, 0, 0},
               {FAT_MASK_LOCAL, 1024, 256, 0},  {FAT_MASK_LOCAL, 4096, 256, 0},
               {FAT_MASK_LOCAL, 1024, 1024, -1}, {FAT_MASK_LOCAL, 4096, 1024, -1}};
  for (int i = 0; i < 6; i++) {
    CHECK_INT(q[i].mask, want[i].mask);
    CHECK_INT(q[i].seqlen_q, want[i].seqlen);
    CHECK_INT(q[i].window_left, want[i].left);
    CHECK_INT(q[i].window_right, want[i].right);
    CHECK_INT(q[i].direction, FAT_FWD);
  }
  CHECK_INT(fat_check_shapes_for(&q[4], s), 3);
  for (int i = 0; i < 3; i++) CHECK(s[i].window_left == 1024 && s[i].window_right == -1);
  fat_problem_label(&q[4], label, sizeof label);
  CHECK_STR(label, "fwd bf16 d64 local s1024 w1024,-1");
  fat_problem_label(&q[0], label, sizeof label);
  CHECK_STR(label, "fwd bf16 d64 none s1024");
  /* Both directions, both windows: 2 x (1 + 2) x 2 lengths. */
  char *both[] = {"fatune", "--head-dim", "64", "--dtype", "bf16", "--seqlen", "1024,4096",
                  "--mask", "local,causal", "--window", "256,0:1024,-1", "--direction", "fwd,bwd"};
  fat_problem r[16];
  CHECK_INT(problems_of(13, both, r, 16), 12);
  CHECK(r[6].direction == FAT_BWD && r[6].mask == FAT_MASK_LOCAL && r[6].window_left == 256);
  CHECK(r[11].direction == FAT_BWD && r[11].mask == FAT_MASK_CAUSAL && r[11].window_left == 0);

  /* Profiles: each --varlen is a problem per mask (and dtype, head dim,
   * group), its batch the number of sequences, its lengths the longest. */
  char *vl[] = {"fatune", "--head-dim", "128", "--dtype", "bf16", "--mask", "none,causal",
                "--varlen", "538,3976,2092:1024,1024"};
  fat_problem v[4];
  CHECK_INT(problems_of(9, vl, v, 4), 4);
  EXPECT_PROBLEM(&v[0], 3, 16, 16, 3976, 3976);
  CHECK(v[0].lengths.n == 3 && v[0].lengths.v[0] == 538 && v[0].lengths.v[2] == 2092);
  EXPECT_PROBLEM(&v[1], 2, 16, 16, 1024, 1024);
  CHECK(v[1].mask == FAT_MASK_NONE && v[2].mask == FAT_MASK_CAUSAL && v[3].lengths.n == 2);
  fat_problem_label(&v[2], label, sizeof label);
  CHECK_STR(label, "fwd bf16 d128 causal s3976 varlen 3x2202");
  /* FLOPs: each sequence at its own length (causal halves each square). */
  const double pairs = 538.0 * 538 + 3976.0 * 3976 + 2092.0 * 2092;
  CHECK(fat_problem_flops(&v[0]) == 4.0 * 16 * pairs * 128);
  CHECK(fat_problem_flops(&v[2]) == 0.5 * 4.0 * 16 * pairs * 128);
  /* The dense problem of the same batch and length counts every sequence long. */
  fat_tune_problem(FAT_BF16, FAT_MASK_NONE, 128, 3976, 3976, 1, 3, &p);
  CHECK(fat_problem_flops(&p) == 4.0 * 16 * 3 * 3976.0 * 3976 * 128);
  /* Checked packed: every shape variable-length, with more sequences. */
  CHECK_INT(fat_check_shapes_for(&v[0], s), 3);
  for (int i = 0; i < 3; i++) CHECK(s[i].varlen == 1 && s[i].batch >= 3 && s[i].lengths.n == 0);
  /* --varlen gives lengths and batch itself, forward and backward. */
  static const int known[] = {64, 128};
  fat_options o;
  char err[256];
  char *clash[] = {"fatune", "--varlen", "12,3", "--seqlen", "1024"};
  CHECK_INT(fat_options_parse(5, clash, known, 2, &o, err, sizeof err), -1);
  CHECK_STR(err, "--varlen gives its problems' lengths and batch: leave out --seqlen, --seqlen-k "
                 "and --batch");
  char *vl_bwd[] = {"fatune", "--head-dim", "128", "--dtype", "bf16", "--mask", "causal",
                    "--varlen", "538,3976,2092", "--direction", "fwd,bwd"};
  fat_problem vb[2];
  CHECK_INT(problems_of(11, vl_bwd, vb, 2), 2);
  CHECK(vb[0].direction == FAT_FWD && vb[1].direction == FAT_BWD && vb[1].lengths.n == 3);
  /* The packed backward's short shape checks the soft-cap's path too (its
   * family, mma80f, serves both); the forward's does not. */
  CHECK_INT(fat_check_shapes_for(&vb[1], s), 3);
  CHECK(s[0].softcap == 0.f && s[1].softcap == 0.f && s[2].softcap == 2.f && s[2].varlen == 1);
  CHECK_INT(fat_check_shapes_for(&vb[0], s), 3);
  CHECK(s[2].softcap == 0.f);
  /* Timed there: mma80f only; on a dense backward every family but it. */
  fat_variant dense_v = {.family = "mma80", .direction = FAT_BWD, .params = ""},
              features_v = {.family = "mma80f", .direction = FAT_BWD, .params = ""};
  CHECK(!fat_family_applies(&dense_v, &vb[1]) && fat_family_applies(&features_v, &vb[1]));
  fat_tune_problem(FAT_BF16, FAT_MASK_CAUSAL, 128, 2048, 2048, 1, 8, &p);
  p.direction = FAT_BWD;
  CHECK(fat_family_applies(&dense_v, &p) && !fat_family_applies(&features_v, &p));
  static const char *const bad[] = {"12,", "0,4", "4,,4", "4:", "x", "4,2000000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *one[] = {"fatune", "--varlen", (char *)bad[i]};
    CHECK_INT(fat_options_parse(3, one, known, 2, &o, err, sizeof err), -1);
    CHECK(strncmp(err, "--varlen: ", 10) == 0);
  }
  char *twice[] = {"fatune", "--varlen", "12,3:4:12,3"};
  CHECK_INT(fat_options_parse(3, twice, known, 2, &o, err, sizeof err), -1);
  CHECK_STR(err, "--varlen: '12,3' given twice");
  /* Paged problems: one per --paged page size beside every other axis,
   * labelled with it, checked on shapes of its page size with one sequence
   * more, partly filled caches and the soft-cap on the short one; timed on
   * the paged family alone, which nothing else is. */
  char *pg[] = {"fatune", "--head-dim", "128", "--dtype", "bf16", "--mask", "causal", "--seqlen", "1",
                "--seqlen-k", "4096", "--gqa", "4", "--paged", "16,256"};
  fat_problem pp[4];
  CHECK_INT(problems_of(15, pg, pp, 4), 4);  /* at batch 4 and, a wave, 32 (4 K/V heads) */
  CHECK(pp[2].batch == 32 && pp[2].page_size == 16 && pp[3].batch == 32 && pp[1].batch == 4);
  CHECK(pp[0].page_size == 16 && pp[1].page_size == 256 && pp[0].seqlen_q == 1 &&
        pp[0].seqlen_k == 4096 && pp[0].heads == 4 * pp[0].heads_k);
  fat_problem_label(&pp[1], label, sizeof label);
  CHECK_STR(label, "fwd bf16 d128 causal s1/k4096 gqa4 paged 256");
  CHECK(fat_problem_flops(&pp[0]) == fat_problem_flops(&(fat_problem){
                                         .direction = FAT_FWD, .mask = FAT_MASK_CAUSAL, .head_dim = 128,
                                         .batch = pp[0].batch, .heads = pp[0].heads,
                                         .heads_k = pp[0].heads_k, .seqlen_q = 1, .seqlen_k = 4096}));
  fat_check_shape plain[FAT_TUNE_CHECK_SHAPES];
  fat_problem contiguous = pp[0];
  contiguous.page_size = 0;
  CHECK_INT(fat_check_shapes_for(&contiguous, plain), 3);
  CHECK_INT(fat_check_shapes_for(&pp[0], s), 3);
  for (int i = 0; i < 3; i++)
    CHECK(s[i].page_size == 16 && s[i].varlen == 1 && s[i].batch == plain[i].batch + 1 &&
          s[i].seqlen_k == plain[i].seqlen_k && s[i].softcap == (i == 2 ? 2.f : 0.f));
  /* Caches: the first sequence full, the others shorter, not a page apart. */
  CHECK_INT(fat_paged_used_keys(&s[1], 0), s[1].seqlen_k);
  CHECK(fat_paged_used_keys(&s[1], 1) < s[1].seqlen_k && fat_paged_used_keys(&s[1], 1) % 16 != 0);
  fat_variant paged_v = {.family = "paged", .direction = FAT_FWD, .params = "PACK_GQA=1 SPLITS=0"},
              mma80_v = {.family = "mma80", .direction = FAT_FWD, .params = ""},
              splitkv_v = {.family = "splitkv", .direction = FAT_FWD, .params = "PACK_GQA=1 SPLITS=8"};
  CHECK(fat_family_applies(&paged_v, &pp[0]) && !fat_family_applies(&mma80_v, &pp[0]) &&
        !fat_family_applies(&splitkv_v, &pp[0]));
  CHECK(!fat_family_applies(&paged_v, &contiguous) && fat_family_applies(&mma80_v, &contiguous) &&
        fat_family_applies(&splitkv_v, &contiguous));
  /* --paged refuses what is no page size, the backward and --varlen, by name. */
  static const char *const bad_pages[] = {"48", "8", "131072", "0", "x"};
  for (size_t i = 0; i < sizeof bad_pages / sizeof bad_pages[0]; i++) {
    char *one[] = {"fatune", "--paged", (char *)bad_pages[i]};
    char want[128];
    snprintf(want, sizeof want, "--paged: page size '%s' is not a power of two from 16 to 65536",
             bad_pages[i]);
    CHECK_INT(fat_options_parse(3, one, known, 2, &o, err, sizeof err), -1);
    CHECK_STR(err, want);
  }
  /* The fp8 K/V caches are dtypes of the forward's problems, one problem
   * each beside the 16-bit ones; the backward refuses them by name. */
  char *kv8[] = {"fatune", "--head-dim", "128", "--dtype", "fp16,fp16-e4m3kv,bf16-e4m3kv",
                 "--mask", "none", "--seqlen", "1", "--seqlen-k", "4096", "--paged", "256",
                 "--batch", "4"};
  fat_problem kp[4];
  CHECK_INT(problems_of(15, kv8, kp, 4), 3);
  CHECK(kp[0].dtype == FAT_FP16 && kp[1].dtype == FAT_FP16_E4M3KV &&
        kp[2].dtype == FAT_BF16_E4M3KV && kp[2].page_size == 256 && kp[2].direction == FAT_FWD);
  char *kv8_bwd[] = {"fatune", "--dtype", "bf16-e4m3kv", "--direction", "bwd"};
  CHECK_INT(fat_options_parse(5, kv8_bwd, known, 2, &o, err, sizeof err), -1);
  CHECK_STR(err, "--dtype bf16-e4m3kv: there is no bf16-e4m3kv backward (fp8 K/V caches are the "
                 "forward's): --direction fwd, or the backward with --dtype fp16,bf16");
  /* --batch LIST: each batch a problem of its own, after the keys and
   * before the page sizes (a decoding bucket at several parallelisms,
   * which the runtime tells apart); the default batch where not given. */
  char *batches[] = {"fatune", "--head-dim", "128", "--dtype", "bf16", "--mask", "none", "--gqa", "4",
                     "--seqlen", "1", "--seqlen-k", "4096,32768", "--batch", "1,4,16", "--paged", "16,256"};
  fat_problem bp[12];
  CHECK_INT(problems_of(17, batches, bp, 12), 12);
  static const int want_batch[] = {1, 1, 4, 4, 16, 16, 1, 1, 4, 4, 16, 16};
  for (int i = 0; i < 12; i++)
    CHECK(bp[i].batch == want_batch[i] && bp[i].seqlen_k == (i < 6 ? 4096 : 32768) &&
          bp[i].page_size == (i % 2 ? 256 : 16) && bp[i].heads == 16 && bp[i].heads_k == 4);
  char *one_batch[] = {"fatune", "--head-dim", "128", "--dtype", "bf16", "--mask", "none",
                       "--seqlen", "1", "--seqlen-k", "4096"};
  /* Without --batch a forward decoding problem is tuned at the default
   * batch and at a wave's, batch x K/V heads >= 128 (fat_decoding_batches):
   * 16 K/V heads at 4096 keys, 4 (16384 tokens / 4096) and 8. */
  CHECK_INT(problems_of(11, one_batch, bp, 12), 2);
  CHECK(bp[0].batch == 4 && bp[1].batch == 8 && bp[0].heads_k == 16 && bp[1].seqlen_k == 4096);
  /* GQA 8 (2 K/V heads) from 32768 keys: 1 and 64, each with every page
   * size; at 131072 keys the wave's K and V would pass 4 GiB (128 MiB a
   * sequence): 32. */
  char *waves[] = {"fatune", "--head-dim", "128", "--dtype", "bf16", "--mask", "causal", "--gqa", "8",
                   "--seqlen", "1,16", "--seqlen-k", "32768,131072", "--paged", "16,256"};
  fat_problem wp[17];
  CHECK_INT(problems_of(15, waves, wp, 17), 16);
  static const int want_wave[] = {1, 1, 64, 64, 1, 1, 32, 32};
  for (int i = 0; i < 16; i++)
    CHECK_WHY(wp[i].batch == want_wave[i % 8] && wp[i].heads_k == 2 &&
                  wp[i].seqlen_k == (i % 8 < 4 ? 32768 : 131072) &&
                  wp[i].page_size == (i % 2 ? 256 : 16) && wp[i].seqlen_q == (i < 8 ? 1 : 16),
              "problem %d: batch %d, %d keys, page %d", i, wp[i].batch, wp[i].seqlen_k, wp[i].page_size);
  int two[2];
  /* Close to a wave already (64 K/V heads x 4): one batch. Longer than the
   * decoding family's queries, or the backward: the default only. */
  CHECK_INT(fat_decoding_batches(FAT_FWD, FAT_BF16, FAT_MASK_NONE, 32, 1, 4096, 1, two), 1);
  CHECK_INT(two[0], 4);
  CHECK_INT(fat_decoding_batches(FAT_FWD, FAT_BF16, FAT_MASK_NONE, 128, 1024, 32768, 1, two), 1);
  CHECK_INT(fat_decoding_batches(FAT_BWD, FAT_BF16, FAT_MASK_NONE, 128, 1, 4096, 1, two), 1);
  CHECK_INT(fat_decoding_batches(FAT_FWD, FAT_BF16, FAT_MASK_NONE, 128, 16, 4096, 4, two), 2);
  CHECK(two[0] == 4 && two[1] == 32);
  char *bad_batch[] = {"fatune", "--batch", "1,0"};
  CHECK_INT(fat_options_parse(3, bad_batch, known, 2, &o, err, sizeof err), -1);
  CHECK_STR(err, "--batch: 0 is out of range [1, 65536]");
  char *paged_bwd[] = {"fatune", "--paged", "64", "--direction", "fwd,bwd"};
  CHECK_INT(fat_options_parse(5, paged_bwd, known, 2, &o, err, sizeof err), -1);
  CHECK_STR(err, "--paged: the backward reads contiguous K and V (a paged cache is the forward's): "
                 "--direction fwd");
  char *paged_vl[] = {"fatune", "--paged", "64", "--varlen", "12,3"};
  CHECK_INT(fat_options_parse(5, paged_vl, known, 2, &o, err, sizeof err), -1);
  CHECK_STR(err, "--paged and --varlen: a paged cache's problems are dense batches");
  test_shards();
  return check_summary("test_problem");
}
