// inc_bad.h: line 3 names a parameter no family gives.
constexpr int kRows = {{BLOCK_M}};
constexpr int kOops = {{NO_SUCH}};
