#define B_MARK 1
