/* The problems the tuner builds from its options (fat_tune_problem,
 * fat_tune_problems), the shapes it checks each variant on
 * (fat_check_shapes_for) and the label it prints: the benchmark shapes
 * unchanged, grouped-query heads that divide, uneven lengths that keep
 * their longer side, decoding shapes, and local windows carried from
 * --window into every problem and check shape of the local mask (and into
 * no other). */
#include <stdio.h>
#include <string.h>
#include "fwd_job.h"
#include "options.h"
#include "tune.h"
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
  return check_summary("test_problem");
}
