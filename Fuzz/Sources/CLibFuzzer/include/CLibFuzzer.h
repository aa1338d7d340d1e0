#ifndef TOKEND_FUZZ_CLIBFUZZER_H
#define TOKEND_FUZZ_CLIBFUZZER_H

#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver (compiler-rt `FuzzerInterface.h`), linked in by `-sanitize=fuzzer`.
///
/// SwiftPM links Swift executables with `--defsym main=<module>_main`, which replaces libFuzzer's
/// own `main`; each fuzz target's `@main` therefore hands control to libFuzzer through this.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
