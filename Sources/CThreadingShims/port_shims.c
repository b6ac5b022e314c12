// Out-of-line socket shims for the RunLoop ports (declared in include/tk_port_shims.h):
// `struct ucred` and `accept4` need _GNU_SOURCE.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tk_port_shims.h"

size_t tk_unix_path_capacity(void) {
  struct sockaddr_un address;
  return sizeof(address.sun_path) - 1;
}

int tk_unix_stream_socket(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  return fd >= 0 ? fd : -errno;
}

int tk_unix_stream_socketpair(int fds[2]) {
  return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) == 0 ? 0 : -errno;
}

static int tk_fill_address(struct sockaddr_un *address, const char *path) {
  size_t length = strlen(path);
  if (length == 0) return -EINVAL;
  if (length >= sizeof(address->sun_path)) return -ENAMETOOLONG;
  memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  memcpy(address->sun_path, path, length + 1);
  return 0;
}

int tk_unix_bind(int fd, const char *path) {
  struct sockaddr_un address;
  int filled = tk_fill_address(&address, path);
  if (filled != 0) return filled;
  return bind(fd, (const struct sockaddr *)&address, sizeof(address)) == 0 ? 0 : -errno;
}

int tk_unix_connect(int fd, const char *path) {
  struct sockaddr_un address;
  int filled = tk_fill_address(&address, path);
  if (filled != 0) return filled;
  return connect(fd, (const struct sockaddr *)&address, sizeof(address)) == 0 ? 0 : -errno;
}

int tk_unix_accept(int fd) {
  int accepted = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  return accepted >= 0 ? accepted : -errno;
}

int tk_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid) {
  struct ucred credentials;
  socklen_t length = sizeof(credentials);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -errno;
  if (length != sizeof(credentials)) return -EPROTO;
  *pid = (int32_t)credentials.pid;
  *uid = (uint32_t)credentials.uid;
  *gid = (uint32_t)credentials.gid;
  return 0;
}

ssize_t tk_send_nosignal(int fd, const void *bytes, size_t count) {
  ssize_t sent = send(fd, bytes, count, MSG_NOSIGNAL | MSG_DONTWAIT);
  return sent >= 0 ? sent : -(ssize_t)errno;
}

ssize_t tk_receive(int fd, void *bytes, size_t count) {
  ssize_t received = recv(fd, bytes, count, MSG_DONTWAIT);
  return received >= 0 ? received : -(ssize_t)errno;
}

/// poll() on `count` descriptors until the absolute CLOCK_MONOTONIC `deadline` (NULL waits
/// forever), restarting after EINTR with the same absolute deadline. Returns the number of
/// ready entries (0 = timed out) or -errno.
static int tk_poll_many(struct pollfd *entries, unsigned long count, const struct timespec *deadline);

int tk_poll_one(int fd, short events, const struct timespec *deadline) {
  struct pollfd entry = {.fd = fd, .events = events, .revents = 0};
  int ready = tk_poll_many(&entry, 1, deadline);
  return ready > 0 ? entry.revents : ready;
}

static int tk_poll_many(struct pollfd *entries, unsigned long count, const struct timespec *deadline) {
  for (;;) {
    struct timespec remaining;
    struct timespec *timeout = NULL;
    if (deadline != NULL) {
      struct timespec now;
      if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) return -errno;
      long long left = ((long long)deadline->tv_sec - now.tv_sec) * 1000000000LL +
                       ((long long)deadline->tv_nsec - now.tv_nsec);
      if (left < 0) left = 0;
      remaining.tv_sec = (time_t)(left / 1000000000LL);
      remaining.tv_nsec = (long)(left % 1000000000LL);
      timeout = &remaining;
    }
    int ready = ppoll(entries, (nfds_t)count, timeout, NULL);
    if (ready >= 0) return ready;
    if (errno != EINTR) return -errno;
  }
}

int tk_claim_lock_file(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -errno;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    int error = errno;
    if (error == EINTR) continue;
    // The claim failed, so the descriptor is ours to drop; a failing close changes nothing
    // about the answer.
    (void)close(fd);
    return -error;
  }
}
