// pthread calls glibc declares only under _GNU_SOURCE. Implemented in shims.c, which defines
// it; each returns the pthread result (0 or an errno) unchanged.
#ifndef TK_PTHREAD_SHIMS_H
#define TK_PTHREAD_SHIMS_H

#include <pthread.h>
#include <time.h>

/// Initializes a read-write lock of kind PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: while a
/// writer waits, new readers wait.
int tk_rwlock_init_prefer_writer(pthread_rwlock_t *lock);
/// pthread_rwlock_clockrdlock on CLOCK_MONOTONIC with an absolute deadline.
int tk_rwlock_monotonic_rdlock(pthread_rwlock_t *lock, const struct timespec *deadline);
/// pthread_rwlock_clockwrlock on CLOCK_MONOTONIC with an absolute deadline.
int tk_rwlock_monotonic_wrlock(pthread_rwlock_t *lock, const struct timespec *deadline);
/// pthread_cond_clockwait on CLOCK_MONOTONIC with an absolute deadline.
int tk_cond_monotonic_wait(pthread_cond_t *cond, pthread_mutex_t *mutex,
                           const struct timespec *deadline);
/// pthread_mutex_clocklock on CLOCK_MONOTONIC with an absolute deadline.
int tk_mutex_monotonic_lock(pthread_mutex_t *mutex, const struct timespec *deadline);

#endif
