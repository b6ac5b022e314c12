// LeakSanitizer's exit-time check, limited to processes it can check (scripts/test-asan).
#include <unistd.h>

// The process this image was started as: the test runner, or an exit test's child (each is
// a fresh exec). Recorded before main.
static pid_t tk_test_started_process;

__attribute__((constructor)) static void tk_test_record_started_process(void) {
  tk_test_started_process = getpid();
}

/// LeakSanitizer's hook, asked at its exit-time check: off in a child made by fork() in a
/// test (a fork of a multithreaded process keeps only the forking thread, so every object
/// that only the parent's other threads' stacks referenced would be reported as leaked).
/// Unused without a sanitizer.
int __lsan_is_turned_off(void) { return getpid() != tk_test_started_process; }
