// Fixture for test_gen: the unknown placeholder is in the included file.
#include "inc_bad.h"
extern "C" __global__ void fat_fwd_mma80() {}
