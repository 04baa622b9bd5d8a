/* fatune command line: placeholder while the pipeline modules are written. */
int main(void) { return 0; }
