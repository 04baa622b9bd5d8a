/* Validation of the forward job's pieces, and the launch kind and memory
 * arithmetic of the materialising baseline (see fwd_job.h). */
#include <stdio.h>
#include <string.h>
#include "fwd_job.h"

int fat_check_shape_validate(const fat_check_shape *s, int index, char *err, size_t errlen) {
  const struct { const char *name; int value; } dims[] = {
      {"batch", s->batch},       {"heads", s->heads},       {"heads_k", s->heads_k},
      {"seqlen_q", s->seqlen_q}, {"seqlen_k", s->seqlen_k},
  };
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].value < 1) {
      snprintf(err, errlen, "check shape %d: %s %d is not positive", index, dims[i].name,
               dims[i].value);
      return -1;
    }
  if (s->heads % s->heads_k != 0) {
    snprintf(err, errlen, "check shape %d: heads %d is not a multiple of heads_k %d", index,
             s->heads, s->heads_k);
    return -1;
  }
  return 0;
}

fat_kernel_kind fat_kernel_kind_of_family(const char *family) {
  return family && strcmp(family, FAT_FAMILY_MATERIALIZE) == 0 ? FAT_KERNEL_MATERIALIZE
                                                               : FAT_KERNEL_FUSED;
}

size_t fat_materialize_workspace_bytes(const fat_check_shape *s) {
  return (size_t)s->batch * (size_t)s->heads * (size_t)s->seqlen_q * (size_t)s->seqlen_k *
         sizeof(float);
}

size_t fat_fwd_peak_bytes(const fat_problem *p, int materialize) {
  const size_t e = fat_dtype_size(p->dtype), d = (size_t)p->head_dim;
  const size_t q_o = 2 * (size_t)p->batch * p->seqlen_q * p->heads * d * e;
  const size_t k_v = 2 * (size_t)p->batch * p->seqlen_k * p->heads_k * d * e;
  const size_t lse = (size_t)p->batch * p->heads * p->seqlen_q * sizeof(float);
  fat_check_shape s = {p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k};
  return q_o + k_v + lse + (materialize ? fat_materialize_workspace_bytes(&s) : 0);
}
