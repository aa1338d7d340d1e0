// Declarations only: the definitions come from libFuzzer (`-sanitize=fuzzer`).
#include "CLibFuzzer.h"
