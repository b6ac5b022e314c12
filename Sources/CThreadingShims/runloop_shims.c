// Out-of-line epoll shim for the run loops and named ports (declared in
// include/tk_runloop_shims.h).
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>

#include "tk_runloop_shims.h"

int tk_fork_detection_process_id = 0;
static pthread_once_t tk_fork_detection_once = PTHREAD_ONCE_INIT;
static int tk_fork_detection_result = 0;

// Runs in the child before fork() returns there, with only the forking thread alive.
// getpid is async-signal-safe, and a relaxed store is seen by all the child does later.
static void tk_fork_detection_child(void) {
  __atomic_store_n(&tk_fork_detection_process_id, (int)getpid(), __ATOMIC_RELAXED);
}

static void tk_fork_detection_register(void) {
  __atomic_store_n(&tk_fork_detection_process_id, (int)getpid(), __ATOMIC_RELAXED);
  tk_fork_detection_result = pthread_atfork(NULL, NULL, tk_fork_detection_child);
}

int tk_fork_detection_start(void) {
  int once = pthread_once(&tk_fork_detection_once, tk_fork_detection_register);
  return once != 0 ? once : tk_fork_detection_result;
}

int tk_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int capacity,
                  const struct timespec *deadline) {
  struct epoll_event ready[64];
  if (capacity > 64) capacity = 64;
  for (;;) {
    int timeout_ms = -1;
    if (deadline != NULL && deadline->tv_sec == 0 && deadline->tv_nsec == 0) {
      // The monotonic clock is past zero once the system runs: a poll, no clock read.
      timeout_ms = 0;
    } else if (deadline != NULL) {
      struct timespec now;
      if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) return -errno;
      long long left = ((long long)deadline->tv_sec - now.tv_sec) * 1000000000LL +
                       ((long long)deadline->tv_nsec - now.tv_nsec);
      if (left <= 0) {
        timeout_ms = 0;
      } else {
        // Round up: epoll_wait's millisecond timeout must never end the wait early.
        long long ms = (left + 999999LL) / 1000000LL;
        timeout_ms = ms > 0x7fffffffLL ? 0x7fffffff : (int)ms;
      }
    }
    int count = epoll_wait(epfd, ready, capacity, timeout_ms);
    if (count >= 0) {
      for (int index = 0; index < count; index++) {
        tokens[index] = ready[index].data.u64;
        if (events != NULL) events[index] = ready[index].events;
      }
      return count;
    }
    if (errno != EINTR) return -errno;
  }
}

int tk_current_cpu(void) { return sched_getcpu(); }
