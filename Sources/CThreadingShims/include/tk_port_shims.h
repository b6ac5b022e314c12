// Socket calls the RunLoop ports need that Swift imports awkwardly or not at all: glibc
// exposes `struct ucred` and `accept4` only under _GNU_SOURCE, `sockaddr_un` is a fixed C
// array, and SOCK_STREAM/SOCK_CLOEXEC arrive as an enum Swift cannot OR together. The
// functions are in port_shims.c, which defines _GNU_SOURCE. Every function returns its
// result (0, a descriptor or a byte count) or a negated errno, the C target's one error
// convention (see tk_runloop_shims.h). The epoll and eventfd calls the named ports use are
// the run loop's, in tk_runloop_shims.h.
#ifndef TK_PORT_SHIMS_H
#define TK_PORT_SHIMS_H

#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <sys/types.h>
#include <time.h>

/// The largest path a Unix-domain socket address holds, without the terminating NUL
/// (sizeof(sockaddr_un.sun_path) - 1, that is 107 on Linux).
size_t tk_unix_path_capacity(void);

/// socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0). Returns the descriptor or
/// -errno.
int tk_unix_stream_socket(void);

/// socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds). Returns 0 or
/// -errno.
int tk_unix_stream_socketpair(int fds[2]);

/// bind() to the filesystem path `path`. Returns 0, -ENAMETOOLONG when the path does not
/// fit in sun_path, or -errno.
int tk_unix_bind(int fd, const char *path);

/// connect() to the filesystem path `path`. Returns 0, -ENAMETOOLONG, or -errno
/// (-EINPROGRESS/-EAGAIN for a non-blocking socket that has not connected yet).
int tk_unix_connect(int fd, const char *path);

/// accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK). Returns the descriptor or -errno.
int tk_unix_accept(int fd);

/// getsockopt(fd, SOL_SOCKET, SO_PEERCRED): the process id, user id and group id the peer
/// had when it connected (or created the socket pair). Returns 0 or -errno.
int tk_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid);

/// send(fd, bytes, count, MSG_NOSIGNAL | MSG_DONTWAIT): a closed peer yields -EPIPE instead
/// of a SIGPIPE that would kill the process. Returns the byte count or -errno.
ssize_t tk_send_nosignal(int fd, const void *bytes, size_t count);

/// recv(fd, bytes, count, MSG_DONTWAIT). Returns the byte count (0 = orderly shutdown by
/// the peer) or -errno.
ssize_t tk_receive(int fd, void *bytes, size_t count);

/// poll() on one descriptor for `events` until the absolute CLOCK_MONOTONIC `deadline`
/// (NULL waits forever), restarting after EINTR with the same absolute deadline (ppoll with
/// the remaining time). Returns the revents (0 = timed out) or -errno.
int tk_poll_one(int fd, short events, const struct timespec *deadline);

/// open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) then flock(LOCK_EX |
/// LOCK_NB). Returns the locked descriptor, -EWOULDBLOCK when another open file description
/// (in this or another process) holds the lock, or -errno. The kernel drops the lock when
/// the descriptor is closed or its process dies, which makes it a crash-proof name claim.
int tk_claim_lock_file(const char *path);

#endif
