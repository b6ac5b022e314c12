// Linux calls the RunLoop module needs in a shape Swift can use: `struct epoll_event` is packed
// on x86-64 (Swift cannot import its layout reliably), and the epoll/eventfd/timerfd flags are
// enum constants glibc re-#defines. Every function returns the kernel's result with a
// negative errno instead of setting `errno`, so Swift callers check one value. EINTR is
// retried only where a retry is harmless (reads and writes of eventfd/timerfd counters).
#ifndef TK_RUNLOOP_SHIMS_H
#define TK_RUNLOOP_SHIMS_H

#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/// epoll_create1(EPOLL_CLOEXEC). Returns the descriptor or -errno.
static inline int tk_epoll_create(void) {
  int fd = epoll_create1(EPOLL_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

/// Adds `fd` to `epfd` for readability (level-triggered), tagging its events with `token`.
/// Returns 0 or -errno.
static inline int tk_epoll_add_readable(int epfd, int fd, uint64_t token) {
  struct epoll_event event;
  event.events = EPOLLIN;
  event.data.u64 = token;
  return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) == 0 ? 0 : -errno;
}

/// Adds `fd` to `epfd` for readability, edge-triggered (EPOLLET): each new readiness (for an
/// eventfd: each write) is reported once, without reading the descriptor. Returns 0 or -errno.
static inline int tk_epoll_add_edge_triggered(int epfd, int fd, uint64_t token) {
  struct epoll_event event;
  event.events = EPOLLIN | EPOLLET;
  event.data.u64 = token;
  return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) == 0 ? 0 : -errno;
}

/// Removes `fd` from `epfd`. Returns 0 or -errno.
static inline int tk_epoll_remove(int epfd, int fd) {
  struct epoll_event event = {0};
  return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &event) == 0 ? 0 : -errno;
}

/// epoll_wait for at most `capacity` (<= 64) events; stores each ready event's token in
/// `tokens`. `timeout_ms` is 0 (poll) or -1 (block; precise deadlines come from a timerfd).
/// Returns the number of events, or -errno (-EINTR when a signal interrupted the wait).
static inline int tk_epoll_wait_tokens(int epfd, uint64_t *tokens, int capacity, int timeout_ms) {
  struct epoll_event events[64];
  if (capacity > 64) capacity = 64;
  int n = epoll_wait(epfd, events, capacity, timeout_ms);
  if (n < 0) return -errno;
  for (int i = 0; i < n; i++) tokens[i] = events[i].data.u64;
  return n;
}

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

#endif
