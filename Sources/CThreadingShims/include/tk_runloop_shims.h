// The epoll, eventfd and timerfd calls of the run loops and the named ports, in a shape Swift
// can use: `struct epoll_event` is packed on x86-64 (Swift cannot import its layout
// reliably), and the epoll/eventfd/timerfd flags are enum constants glibc re-#defines.
// Error convention (the one every CThreadingShims header follows): every function returns a
// non-negative result or a negated errno and never reports through `errno` alone, so Swift
// callers check one value (through Sync's `shimCall`). EINTR is retried only where a retry
// is harmless (counter reads and writes, waits with an absolute deadline), never for close.
#ifndef TK_RUNLOOP_SHIMS_H
#define TK_RUNLOOP_SHIMS_H

#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/// Interest and readiness flags for the tk_epoll_* calls (the EPOLLIN / EPOLLOUT / EPOLLERR /
/// EPOLLHUP / EPOLLONESHOT / EPOLLET bits as plain constants).
enum {
  TK_EPOLL_READABLE = 0x001,
  TK_EPOLL_WRITABLE = 0x004,
  TK_EPOLL_ERROR = 0x008,
  TK_EPOLL_HANGUP = 0x010,
  TK_EPOLL_ONE_SHOT = 1 << 30,
  TK_EPOLL_EDGE_TRIGGERED = (int)(1u << 31),
};

/// epoll_create1(EPOLL_CLOEXEC). Returns the descriptor or -errno.
static inline int tk_epoll_create(void) {
  int fd = epoll_create1(EPOLL_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

/// epoll_ctl(EPOLL_CTL_ADD) of `fd` with interest `events` (TK_EPOLL_* bits) and `token` as
/// its user data. Returns 0 or -errno.
static inline int tk_epoll_add(int epfd, int fd, uint32_t events, uint64_t token) {
  struct epoll_event event = {.events = events, .data.u64 = token};
  return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) == 0 ? 0 : -errno;
}

/// epoll_ctl(EPOLL_CTL_MOD): changes the interest of `fd` (0 = report nothing but keep the
/// registration). Returns 0 or -errno.
static inline int tk_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token) {
  struct epoll_event event = {.events = events, .data.u64 = token};
  return epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event) == 0 ? 0 : -errno;
}

/// epoll_ctl(EPOLL_CTL_DEL) of `fd`. Returns 0 or -errno.
static inline int tk_epoll_remove(int epfd, int fd) {
  struct epoll_event event = {0};
  return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &event) == 0 ? 0 : -errno;
}

/// epoll_wait until the absolute CLOCK_MONOTONIC `deadline`: NULL waits forever, a deadline
/// of zero polls without reading the clock, any other passed deadline polls. Restarts after
/// EINTR with the time left. Stores up to `capacity` (at most 64) ready tokens, and their
/// TK_EPOLL_* bits when `events` is not NULL. Returns how many (0 = timed out) or -errno.
/// Implemented in runloop_shims.c.
int tk_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int capacity,
                  const struct timespec *deadline);

/// The CPU the calling thread runs on (`sched_getcpu`, which glibc reads from the kernel's
/// per-thread restartable-sequence area, without a system call), or -1 when it cannot tell.
/// Implemented in runloop_shims.c.
int tk_current_cpu(void);

/// eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK). Returns the descriptor or -errno.
static inline int tk_eventfd_create(void) {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd >= 0 ? fd : -errno;
}

/// Adds 1 to an eventfd counter. Returns 0 or -errno.
static inline int tk_eventfd_signal(int fd) {
  uint64_t one = 1;
  for (;;) {
    ssize_t r = write(fd, &one, sizeof one);
    if (r == (ssize_t)sizeof one) return 0;
    if (r < 0 && errno == EINTR) continue;
    return r < 0 ? -errno : -EIO;
  }
}

/// Reads (and so resets) an eventfd or timerfd counter. Returns 0 when a count was read,
/// -EAGAIN when there was none, or another -errno.
static inline int tk_counter_fd_drain(int fd) {
  uint64_t value;
  for (;;) {
    ssize_t r = read(fd, &value, sizeof value);
    if (r == (ssize_t)sizeof value) return 0;
    if (r < 0 && errno == EINTR) continue;
    return r < 0 ? -errno : -EIO;
  }
}

/// timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK). Returns the descriptor or -errno.
static inline int tk_timerfd_create_monotonic(void) {
  int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  return fd >= 0 ? fd : -errno;
}

/// Arms a monotonic timerfd to expire once at the absolute instant `deadline_ns`
/// (TFD_TIMER_ABSTIME); an instant at or before the clock's start expires at once.
/// `deadline_ns == INT64_MAX` disarms it. Returns 0 or -errno.
static inline int tk_timerfd_arm_absolute(int fd, int64_t deadline_ns) {
  struct itimerspec spec = {0};
  int flags = 0;
  if (deadline_ns != INT64_MAX) {
    // A zero it_value would disarm; the earliest real instant is 1 ns.
    if (deadline_ns < 1) deadline_ns = 1;
    spec.it_value.tv_sec = (time_t)(deadline_ns / 1000000000LL);
    spec.it_value.tv_nsec = (long)(deadline_ns % 1000000000LL);
    flags = TFD_TIMER_ABSTIME;
  }
  return timerfd_settime(fd, flags, &spec, NULL) == 0 ? 0 : -errno;
}

/// close(2). Returns 0 or -errno. Never retried: Linux releases the descriptor even on EINTR.
static inline int tk_close(int fd) {
  return close(fd) == 0 ? 0 : -errno;
}

/// The calling process's id as the run loops cache it: set by `tk_fork_detection_start` and
/// again in every child of `fork()` by a `pthread_atfork` child handler (0 before the first
/// start). Read with a relaxed atomic load.
extern int tk_fork_detection_process_id;

/// Caches the process id and registers the fork child handler, once per process
/// (`pthread_once`, which glibc restarts in a child forked during it). Returns 0 or the
/// error `pthread_atfork` returned.
int tk_fork_detection_start(void);

/// The cached process id (see `tk_fork_detection_process_id`): one relaxed load.
static inline int tk_fork_detection_cached_process_id(void) {
  return __atomic_load_n(&tk_fork_detection_process_id, __ATOMIC_RELAXED);
}

#endif
