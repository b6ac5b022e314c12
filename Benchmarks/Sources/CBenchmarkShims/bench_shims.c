// The benchmarks' C calls (declared in include/bench_shims.h): pthread_getattr_np and
// pthread_rwlockattr_setkind_np need _GNU_SOURCE.
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_shims.h"

int bench_eventfd(void) {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd >= 0 ? fd : -errno;
}

int bench_unix_stream_socketpair(int fds[2]) {
  return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) == 0 ? 0 : -errno;
}

int bench_rwlock_init_prefer_writer(pthread_rwlock_t *lock) {
  pthread_rwlockattr_t attributes;
  int result = pthread_rwlockattr_init(&attributes);
  if (result != 0) return result;
  result = pthread_rwlockattr_setkind_np(&attributes, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  if (result == 0) result = pthread_rwlock_init(lock, &attributes);
  int destroyed = pthread_rwlockattr_destroy(&attributes);
  return result != 0 ? result : destroyed;
}

int bench_thread_get_stack_range(void **low, size_t *stack_size) {
  pthread_attr_t attributes;
  int result = pthread_getattr_np(pthread_self(), &attributes);
  if (result != 0) return result;
  result = pthread_attr_getstack(&attributes, low, stack_size);
  int destroyed = pthread_attr_destroy(&attributes);
  return result != 0 ? result : destroyed;
}

long bench_resident_pages(void *address, size_t length) {
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return -EINVAL;
  uintptr_t start = (uintptr_t)address & ~((uintptr_t)page - 1);
  size_t pages = ((uintptr_t)address + length - start + (size_t)page - 1) / (size_t)page;
  unsigned char *vector = malloc(pages);
  if (vector == NULL) return -ENOMEM;
  if (mincore((void *)start, pages * (size_t)page, vector) != 0) {
    int error = errno;
    free(vector);
    return -error;
  }
  long resident = 0;
  for (size_t i = 0; i < pages; i++) resident += vector[i] & 1;
  free(vector);
  return resident;
}

int bench_current_cpu(void) { return sched_getcpu(); }

int bench_thread_id(void) { return (int)gettid(); }

int bench_pin_thread(int tid, const int *cpus, int count) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int index = 0; index < count; index++) {
    if (cpus[index] < 0 || cpus[index] >= CPU_SETSIZE) return -EINVAL;
    CPU_SET(cpus[index], &set);
  }
  return sched_setaffinity(tid, sizeof set, &set) == 0 ? 0 : -errno;
}

int bench_flush_stdout(void) {
  if (fflush(stdout) != 0) return errno;
  return ferror(stdout) ? EIO : 0;
}
