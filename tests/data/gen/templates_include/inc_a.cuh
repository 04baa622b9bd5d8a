// inc_a.cuh: includes inc_b.h, which must appear once in the result.
#include "inc_b.h"
#define A_ROWS {{BLOCK_M}}
