// Thread calls the Threads module needs that Swift cannot import or call safely: CPU-set
// macros, GNU-only pthread functions (declared by glibc only under _GNU_SOURCE), and calls
// whose error convention needs errno read at once. Implemented in thread_shims.c, which
// defines _GNU_SOURCE.
//
// Error convention (the one every CThreadingShims header follows): each function that can
// fail returns 0 (or a non-negative result) on success and the negated errno on failure,
// whether the wrapped call reports through its result (the pthread functions,
// clock_nanosleep) or through errno (setpriority, getpriority); it never returns -1 with
// the code left in errno. Swift callers check the one value through Sync's `shimCall`.
#ifndef TK_THREAD_SHIMS_H
#define TK_THREAD_SHIMS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/// The number of CPUs a cpu_set_t can name (CPU_SETSIZE, 1024 on glibc).
int tk_cpu_set_capacity(void);

/// pthread_attr_setaffinity_np with the `count` CPU numbers in `cpus`. -EINVAL for a number
/// outside 0..<CPU_SETSIZE.
int tk_attr_set_affinity(pthread_attr_t *attributes, const int32_t *cpus, int count);

/// pthread_getaffinity_np(pthread_self()): writes up to `capacity` CPU numbers to `cpus` and
/// how many the set holds to `*count` (may exceed `capacity`; call again with more room).
int tk_thread_get_affinity(int32_t *cpus, int capacity, int *count);

/// pthread_setaffinity_np(pthread_self()) with the `count` CPU numbers in `cpus`.
int tk_thread_set_affinity(const int32_t *cpus, int count);

/// pthread_setname_np(pthread_self(), name): `name` must be at most 15 bytes.
int tk_thread_set_name(const char *name);

/// pthread_getname_np(pthread_self()) into `buffer` of `length` bytes (16 is enough).
int tk_thread_get_name(char *buffer, size_t length);

/// setpriority(PRIO_PROCESS, 0, nice): on Linux this sets the calling thread's nice value
/// only (the kernel treats `who` as a thread id). -EACCES when lowering it below the
/// permitted value (RLIMIT_NICE, CAP_SYS_NICE).
int tk_thread_set_nice(int nice);

/// getpriority(PRIO_PROCESS, 0) for the calling thread into `*nice` (getpriority can
/// legitimately return -1, so errno is cleared and checked here).
int tk_thread_get_nice(int *nice);

/// pthread_getattr_np(pthread_self()) -> the stack size and guard size of the calling thread.
int tk_thread_get_stack(size_t *stack_size, size_t *guard_size);

/// The scheduling policy and priority of the calling thread (pthread_getschedparam).
int tk_thread_get_scheduling(int *policy, int *priority);

/// clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) until `deadline_ns` on the monotonic clock,
/// resuming after signals (EINTR). Returns 0 or the negated error clock_nanosleep reported.
int tk_sleep_until_monotonic(int64_t deadline_ns);

/// The calling thread's kernel id without a system call, or -1 when it cannot be derived.
/// glibc's pthread_getcpuclockid(pthread_self()) encodes the `tid` the kernel stored at
/// clone time (CLONE_PARENT_SETTID) as the per-thread CPU clock id `(~tid << 3) | 6`; this
/// decodes it. Callers validate it once against gettid (tk_gettid) before relying on it.
int32_t tk_thread_kernel_id_without_syscall(void);

/// The scheduling policy constants (SCHED_FIFO, SCHED_RR, SCHED_OTHER) as plain ints.
int tk_sched_fifo(void);
int tk_sched_rr(void);
int tk_sched_other(void);

#endif
