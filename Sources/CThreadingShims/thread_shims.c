// Out-of-line shims for the Threads module (see include/tk_thread_shims.h).
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include "tk_thread_shims.h"

int tk_cpu_set_capacity(void) { return CPU_SETSIZE; }

static int tk_fill_cpu_set(cpu_set_t *set, const int32_t *cpus, int count) {
  CPU_ZERO(set);
  for (int i = 0; i < count; i++) {
    if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) return -EINVAL;
    CPU_SET(cpus[i], set);
  }
  return 0;
}

int tk_attr_set_affinity(pthread_attr_t *attributes, const int32_t *cpus, int count) {
  cpu_set_t set;
  int result = tk_fill_cpu_set(&set, cpus, count);
  if (result != 0) return result;
  return -pthread_attr_setaffinity_np(attributes, sizeof set, &set);
}

int tk_thread_set_affinity(const int32_t *cpus, int count) {
  cpu_set_t set;
  int result = tk_fill_cpu_set(&set, cpus, count);
  if (result != 0) return result;
  return -pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

int tk_thread_get_affinity(int32_t *cpus, int capacity, int *count) {
  cpu_set_t set;
  int result = pthread_getaffinity_np(pthread_self(), sizeof set, &set);
  if (result != 0) return -result;
  int found = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (CPU_ISSET(cpu, &set)) {
      if (found < capacity) cpus[found] = cpu;
      found++;
    }
  }
  *count = found;
  return 0;
}

int tk_thread_set_name(const char *name) { return -pthread_setname_np(pthread_self(), name); }

int tk_thread_get_name(char *buffer, size_t length) {
  return -pthread_getname_np(pthread_self(), buffer, length);
}

int tk_thread_set_nice(int nice) {
  if (setpriority(PRIO_PROCESS, 0, nice) != 0) return -errno;
  return 0;
}

int tk_thread_get_nice(int *nice) {
  errno = 0;
  int value = getpriority(PRIO_PROCESS, 0);
  if (value == -1 && errno != 0) return -errno;
  *nice = value;
  return 0;
}

int tk_thread_get_stack(size_t *stack_size, size_t *guard_size) {
  pthread_attr_t attributes;
  int result = pthread_getattr_np(pthread_self(), &attributes);
  if (result != 0) return -result;
  result = pthread_attr_getstacksize(&attributes, stack_size);
  if (result == 0) result = pthread_attr_getguardsize(&attributes, guard_size);
  int destroyed = pthread_attr_destroy(&attributes);
  return -(result != 0 ? result : destroyed);
}

int tk_thread_get_scheduling(int *policy, int *priority) {
  struct sched_param parameters;
  int result = pthread_getschedparam(pthread_self(), policy, &parameters);
  if (result == 0) *priority = parameters.sched_priority;
  return -result;
}

int tk_sleep_until_monotonic(int64_t deadline_ns) {
  if (deadline_ns < 0) deadline_ns = 0;
  struct timespec deadline = {.tv_sec = (time_t)(deadline_ns / 1000000000LL),
                              .tv_nsec = (long)(deadline_ns % 1000000000LL)};
  for (;;) {
    // clock_nanosleep returns the error number itself (it does not set errno). With
    // TIMER_ABSTIME an interrupted sleep can simply be repeated with the same deadline.
    int result = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL);
    if (result != EINTR) return -result;
  }
}

int32_t tk_thread_kernel_id_without_syscall(void) {
  clockid_t clock;
  if (pthread_getcpuclockid(pthread_self(), &clock) != 0) return -1;
  // CPUCLOCK_PERTHREAD_MASK (4) | CPUCLOCK_SCHED (2) in the low three bits.
  if ((clock & 7) != 6) return -1;
  return (int32_t)~(clock >> 3);
}

int tk_sched_fifo(void) { return SCHED_FIFO; }
int tk_sched_rr(void) { return SCHED_RR; }
int tk_sched_other(void) { return SCHED_OTHER; }
