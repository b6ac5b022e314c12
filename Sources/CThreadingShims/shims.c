// Out-of-line shims: calls glibc declares only under _GNU_SOURCE. The inline shims are in
// include/.
#define _GNU_SOURCE
#include <pthread.h>
#include <time.h>

#include "tk_pthread_shims.h"
#include "tk_sync_shims.h"

int tk_rwlock_init_prefer_writer(pthread_rwlock_t *lock) {
  pthread_rwlockattr_t attributes;
  int result = pthread_rwlockattr_init(&attributes);
  if (result != 0) return result;
  result = pthread_rwlockattr_setkind_np(&attributes, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  if (result == 0) result = pthread_rwlock_init(lock, &attributes);
  int destroyed = pthread_rwlockattr_destroy(&attributes);
  return result != 0 ? result : destroyed;
}

int tk_rwlock_monotonic_rdlock(pthread_rwlock_t *lock, const struct timespec *deadline) {
  return pthread_rwlock_clockrdlock(lock, CLOCK_MONOTONIC, deadline);
}

int tk_rwlock_monotonic_wrlock(pthread_rwlock_t *lock, const struct timespec *deadline) {
  return pthread_rwlock_clockwrlock(lock, CLOCK_MONOTONIC, deadline);
}

int tk_cond_monotonic_wait(pthread_cond_t *cond, pthread_mutex_t *mutex,
                           const struct timespec *deadline) {
  return pthread_cond_clockwait(cond, mutex, CLOCK_MONOTONIC, deadline);
}

int tk_mutex_monotonic_lock(pthread_mutex_t *mutex, const struct timespec *deadline) {
  return pthread_mutex_clocklock(mutex, CLOCK_MONOTONIC, deadline);
}
