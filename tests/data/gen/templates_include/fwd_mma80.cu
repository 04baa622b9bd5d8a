// Fixture for test_gen: include inlining (stands in for the real template).
#include "inc_a.cuh"
#include <cuda_fp16.h>
#include "sub/inc_b.h"
#include "not_there.h"
#include "inc_b.h"
extern "C" __global__ void fat_fwd_mma80() { int rows = {{ BLOCK_M }}, d = {{HEAD_DIM}}; }
