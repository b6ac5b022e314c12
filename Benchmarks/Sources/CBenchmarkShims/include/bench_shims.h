// The C calls the benchmarks make that Swift cannot import or call directly: flags glibc
// declares as macros or enums Swift imports awkwardly, and GNU-only functions declared only
// under _GNU_SOURCE. Implemented in bench_shims.c.
#ifndef BENCH_SHIMS_H
#define BENCH_SHIMS_H

#include <pthread.h>
#include <stddef.h>
// eventfd(2) and its flags, for rows that make their own blocking eventfds.
#include <sys/eventfd.h>

/// eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK). Returns the descriptor or -errno.
int bench_eventfd(void);

/// socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds). Returns 0 or
/// -errno.
int bench_unix_stream_socketpair(int fds[2]);

/// Initializes a read-write lock of kind PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: while a
/// writer waits, new readers wait. Returns 0 or a positive errno.
int bench_rwlock_init_prefer_writer(pthread_rwlock_t *lock);

/// pthread_getattr_np(pthread_self()) -> the lowest address and size of the calling thread's
/// stack (without its guard). Returns 0 or a positive errno.
int bench_thread_get_stack_range(void **low, size_t *stack_size);

/// How many pages of [address, address + length) are resident (mincore), or -errno.
long bench_resident_pages(void *address, size_t length);

/// sched_getcpu(): the CPU the calling thread runs on, or -1.
int bench_current_cpu(void);

/// gettid(): the calling thread's kernel id.
int bench_thread_id(void);

/// sched_setaffinity(tid, ...) with the `count` CPUs in `cpus`: pins any thread of the
/// process by its kernel id (a runtime's pool threads, which cannot pin themselves). Returns 0
/// or -errno.
int bench_pin_thread(int tid, const int *cpus, int count);

/// Flushes stdout and returns 0 when everything written to it arrived, or the errno of the
/// failure (Swift 6 cannot name C's `stdout` global).
int bench_flush_stdout(void);

#endif
