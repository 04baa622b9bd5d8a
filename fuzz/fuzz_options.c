/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the command-line parser (fat_options_parse): the
 * input is split at NUL bytes into argv. The parser must never crash, read
 * out of bounds or leave an error message empty when it refuses. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "options.h"

#define MAX_ARGS 64  /* more arguments than any real command line */

static const int known_head_dims[] = {64, 96, 128, 192, 256};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  char *argv[MAX_ARGS + 2];
  int argc = 0;
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  argv[argc++] = "fatune";
  for (size_t i = 0; i <= size && argc <= MAX_ARGS;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  static fat_options o;
  char err[1024] = "";
  int rc = fat_options_parse(argc, argv, known_head_dims, 5, &o, err, sizeof err);
  if (rc != 0 && !err[0]) abort();  /* every refusal names its reason */
  /* --help and --version stop parsing at once; a run gets its defaults. */
  int runs = o.command == FAT_CMD_TUNE || o.command == FAT_CMD_LIST;
  if (rc == 0 && runs && (o.n_seqlens < 1 || o.n_seqlens > FAT_MAX_LIST)) abort();
  /* A run has at least one group size, each MQA or 1 .. FAT_MAX_GROUP. */
  if (rc == 0 && runs && (o.n_gqa < 1 || o.n_gqa > FAT_MAX_LIST)) abort();
  for (int i = 0; rc == 0 && runs && i < o.n_gqa; i++)
    if (o.gqa[i] != FAT_GQA_MQA && (o.gqa[i] < 1 || o.gqa[i] > FAT_MAX_GROUP)) abort();
  /* A run has GPUs: all of them, or 1 .. FAT_MAX_LIST indices in range. */
  if (rc == 0 && runs && !o.gpu_all && (o.n_gpus < 1 || o.n_gpus > FAT_MAX_LIST)) abort();
  for (int i = 0; rc == 0 && runs && i < o.n_gpus; i++)
    if (o.gpus[i] < 0 || o.gpus[i] > FAT_MAX_GPU_INDEX) abort();
  free(buf);
  return 0;
}
