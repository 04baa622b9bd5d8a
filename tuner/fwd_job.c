/* Validation of the forward job's pieces (see fwd_job.h). */
#include <stdio.h>
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
