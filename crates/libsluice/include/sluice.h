/*
 * sluice.h: the C API of libsluice.so, Sluice's application library (C99).
 *
 * An application attaches to a running engine (`sluice engine`) over its Unix socket and
 * gets a shared-memory region of its own; every engine socket is a pair of payload rings in
 * it. Sending and receiving are one memcpy each and, while the engine polls, no system call.
 * The zero-copy calls hand out the rings themselves: received bytes where the engine put
 * them, and the free space where the engine will take bytes to send.
 *
 * Conventions (POSIX): calls return -1 (or NULL) and set errno on failure. Null pointers
 * are EINVAL. After the engine dies, reads fail with ECONNRESET, writes with EPIPE and new
 * sockets with ECONNREFUSED; nothing blocks forever. In a child process after fork() the
 * parent's sockets fail with EBADF (see the Rust docs of sluice::after_fork_child).
 *
 * Threads: any thread may call any function; one socket may be used by several threads
 * for send/recv/poll. The zero-copy calls on one socket must come from one thread at a time.
 *
 * Link with -lsluice (libsluice.so, built from crates/libsluice).
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <netinet/in.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An engine socket (opaque). */
typedef struct sluice_socket sluice_socket;

/* Readiness bits of sluice_poll: the values of poll(2)'s POLLIN, POLLOUT, ... */
#define SLUICE_POLLIN    0x001  /* readable: bytes, end of stream, an error, a connection */
#define SLUICE_POLLOUT   0x004  /* writable: room in the TX ring (or a connect finished) */
#define SLUICE_POLLERR   0x008  /* an error is pending (read it with sluice_socket_error) */
#define SLUICE_POLLHUP   0x010  /* hung up: closed, or both directions shut */
#define SLUICE_POLLRDHUP 0x2000 /* the peer shut its sending side */

/*
 * Attaches the process to the engine listening at `path` (NULL: $SLUICE_SOCKET, or
 * /run/sluice/engine.sock). Optional: the first sluice_socket_open attaches from the
 * environment. Returns 0, or -1 with errno (ECONNREFUSED: no engine answered).
 */
int sluice_attach(const char *path);

/* Opens an engine socket (IPv4 TCP). NULL with errno on failure (EMFILE: no free slot). */
sluice_socket *sluice_socket_open(void);

/* Binds to the engine's address or INADDR_ANY; port 0 lets the engine pick one.
 * EADDRINUSE, EADDRNOTAVAIL (not the engine's address), EINVAL (already bound). */
int sluice_bind(sluice_socket *s, const struct sockaddr_in *addr);

/* Listens (an unbound socket gets INADDR_ANY and a port the engine picks). */
int sluice_listen(sluice_socket *s, int backlog);

/* Connects. A blocking socket waits for the handshake (ECONNREFUSED, ETIMEDOUT, ...);
 * a non-blocking one returns -1 with EINPROGRESS: poll for SLUICE_POLLOUT, then read the
 * outcome with sluice_socket_error. */
int sluice_connect(sluice_socket *s, const struct sockaddr_in *addr);

/* Accepts a connection (blocking unless non-blocking: then EAGAIN); fills *peer if not
 * NULL. The new socket is blocking and inherits the listener's TCP_NODELAY. */
sluice_socket *sluice_accept(sluice_socket *s, struct sockaddr_in *peer);

/* Sends `len` bytes. Blocking: returns once all are queued. Non-blocking: what fits, or
 * -1 with EAGAIN. EPIPE after shutdown; ECONNRESET once after a reset. */
ssize_t sluice_send(sluice_socket *s, const void *buf, size_t len);

/* Receives up to `len` bytes; 0 is the end of the stream. Non-blocking: -1 with EAGAIN
 * when nothing is there. */
ssize_t sluice_recv(sluice_socket *s, void *buf, size_t len);

/* Shuts down a direction: SHUT_RD, SHUT_WR (a FIN after the queued bytes) or SHUT_RDWR.
 * ENOTCONN if not connected. */
int sluice_shutdown(sluice_socket *s, int how);

/* Closes the socket and frees it. The engine sends what is queued, then closes (unread
 * received bytes make it a reset, as RFC 2525 asks). */
int sluice_close(sluice_socket *s);

/* O_NONBLOCK on (on != 0) or off. */
int sluice_set_nonblocking(sluice_socket *s, int on);

/* TCP_NODELAY on (on != 0) or off. */
int sluice_set_nodelay(sluice_socket *s, int on);

/* SO_REUSEADDR (addr != 0) and SO_REUSEPORT (port != 0) for the next bind: sockets of
 * the same uid share a port as on Linux (both SO_REUSEPORT: bind and listen; both
 * SO_REUSEADDR: bind, one listener); another uid gets EADDRINUSE. */
int sluice_set_reuse(sluice_socket *s, int addr, int port);

/* Asks (on != 0) for the socket's close to be offloaded to the engine's teardown stage
 * (advisory; accepted sockets inherit their listener's). */
int sluice_set_teardown_offload(sluice_socket *s, int on);
/* The same through the LD_PRELOAD shim: setsockopt(fd, IPPROTO_TCP,
 * SLUICE_TCP_TEARDOWN_OFFLOAD, &one, sizeof one); a kernel socket answers ENOPROTOOPT. */
#define SLUICE_TCP_TEARDOWN_OFFLOAD 0x5354

/* Longest congestion-control name with its NUL (Linux's TCP_CA_NAME_MAX). */
#define SLUICE_CONGESTION_NAME_MAX 16

/*
 * TCP_CONGESTION: chooses the socket's congestion control by name: "dctcp", "timely",
 * "reno" (or "newreno") or "cubic", case-insensitive. -1 with ENOENT for any other name.
 * Before connect or listen it is remembered (and decides whether the SYN asks for ECN);
 * accepted sockets inherit their listener's. Reads at most SLUICE_CONGESTION_NAME_MAX
 * bytes of `name`.
 */
int sluice_set_congestion(sluice_socket *s, const char *name);

/*
 * Writes the socket's congestion-control name (the engine's default until one is chosen)
 * into buf, NUL-terminated and truncated to `len` bytes like snprintf; returns the name's
 * length, or -1 with errno.
 */
int sluice_get_congestion(sluice_socket *s, char *buf, size_t len);

/*
 * Waits until the socket is ready for `events` (SLUICE_POLLIN and/or SLUICE_POLLOUT;
 * SLUICE_POLLERR and SLUICE_POLLHUP are always reported) or `timeout_ms` passes
 * (negative: forever; 0: just check). The thread polls for the engine's idle period, then
 * sleeps. Returns the ready bits, 0 on timeout, or -1 with errno.
 */
int sluice_poll(sluice_socket *s, int events, int timeout_ms);

/* One entry of sluice_poll_many: a socket, the events wanted, the events found. */
struct sluice_pollfd {
    sluice_socket *socket;
    short events;
    short revents;
};

/* sluice_poll over several sockets, like poll(2): fills each revents and returns how many
 * entries have events, 0 on timeout, or -1 with errno. NULL sockets are skipped. */
int sluice_poll_many(struct sluice_pollfd *fds, size_t n, int timeout_ms);

/* Fills *addr with the local / the peer's address (getsockname / getpeername). */
int sluice_getsockname(sluice_socket *s, struct sockaddr_in *addr);
int sluice_getpeername(sluice_socket *s, struct sockaddr_in *addr);

/* SO_ERROR: the pending error number (0: none), cleared by reading it. */
int sluice_socket_error(sluice_socket *s);

/* FIONREAD: how many bytes a receive would return now. */
ssize_t sluice_available(sluice_socket *s);

/*
 * Zero copy.
 *
 * sluice_rx_peek points *data at the received bytes in the socket's RX ring and returns
 * how many there are (one contiguous run: the ring is mapped twice back to back), 0 at the
 * end of the stream, or -1 with EAGAIN when none are there yet (never blocks: use
 * sluice_poll). The bytes stay valid and unchanged until sluice_rx_consume releases them.
 *
 * sluice_rx_consume releases the first `n` of them to the engine (clamped to what is
 * readable), making room for more.
 *
 * sluice_tx_reserve points *buf at the free space of the socket's TX ring and returns its
 * size, or -1 with EAGAIN when the ring is full (EPIPE after shutdown). Write the bytes to
 * send there.
 *
 * sluice_tx_commit sends the first `n` bytes of the last reservation (clamped to its size;
 * a send() in between cancels the reservation).
 */
ssize_t sluice_rx_peek(sluice_socket *s, const void **data);
int sluice_rx_consume(sluice_socket *s, size_t n);
ssize_t sluice_tx_reserve(sluice_socket *s, void **buf);
int sluice_tx_commit(sluice_socket *s, size_t n);

/*
 * Splicing (AccelTCP's connection splicing): the engine joins two established sockets'
 * peers directly and relays their bytes without waking the application.
 *
 * sluice_splice joins `a` and `b` and stores a handle in *out; -1 with errno on failure,
 * nothing changed: EBADF (closed, or of another attachment), EINVAL (a socket with itself,
 * or a listener), ENOTCONN (not connected, failed, or shut for writing), EALREADY (already
 * spliced), EOPNOTSUPP (a peer's MSS below ours, or timestamps on one side only), ENOBUFS
 * (the engine's splice table is full), EAGAIN (bytes kept arriving before the splice).
 * Bytes still unread in either socket are sent on to the other first (counted in
 * forwarded_*), as are bytes already written. Afterwards send/recv on the sockets fail with
 * EBADFD; closing them is allowed and does not touch the splice.
 *
 * sluice_splice_poll waits up to timeout_ms (negative: forever, 0: just look) for the
 * splice to end, fills *st (if not NULL) and returns 1 once it ended, 0 if not yet, -1 with
 * errno. sluice_splice_free frees the handle (the splice goes on in the engine).
 *
 * The LD_PRELOAD shim (libsluice_preload.so) exports the same for file descriptors:
 * int sluice_splice_fds(int fd_a, int fd_b) returns a handle >= 0 (-1 with errno; EBADF
 * or ENOTSOCK for descriptors that are not engine sockets), and
 * int sluice_splice_wait(int handle, int timeout_ms, struct sluice_splice_stats *st) is
 * sluice_splice_poll for that handle (the handle is released once it reported the end).
 * Find them with dlsym(RTLD_DEFAULT, "sluice_splice_fds") or declare them.
 */
typedef struct sluice_splice_handle sluice_splice_handle;

#define SLUICE_SPLICE_INSTALLED  1 /* handed to the splice stage: bytes flow peer to peer */
#define SLUICE_SPLICE_FAILED     2 /* a connection failed before the handover */
#define SLUICE_SPLICE_CLOSED     3 /* both sides closed */
#define SLUICE_SPLICE_RESET_BY_A 4 /* a RST from a's peer */
#define SLUICE_SPLICE_RESET_BY_B 5 /* a RST from b's peer */

struct sluice_splice_stats {
    int outcome;               /* 0 (not installed yet) or SLUICE_SPLICE_* */
    uint64_t a_to_b;           /* bytes relayed from a's peer to b's by the engine */
    uint64_t b_to_a;           /* bytes relayed the other way */
    uint64_t forwarded_a_to_b; /* bytes sent on from a's ring to b before the splice */
    uint64_t forwarded_b_to_a; /* the other way */
};

int sluice_splice(sluice_socket *a, sluice_socket *b, sluice_splice_handle **out);
int sluice_splice_poll(sluice_splice_handle *sp, int timeout_ms, struct sluice_splice_stats *st);
void sluice_splice_free(sluice_splice_handle *sp);
int sluice_splice_fds(int fd_a, int fd_b);
int sluice_splice_wait(int handle, int timeout_ms, struct sluice_splice_stats *st);

/*
 * ---- RDMA verbs (docs/verbs.md) -------------------------------------------------------
 *
 * Reliable-connected queue pairs over the engine's RoCEv2 transport, with the verbs'
 * semantics and libibverbs' numbers (IBV_WR_*, IBV_SEND_*, IBV_WC_*, IBV_QPS_*, IBV_QP_*
 * masks, IBV_ACCESS_*, IBV_MTU_*), for programs that link Sluice directly and for Sluice's
 * rdma-core provider. Unlike the socket calls, these return 0 or a positive errno (as the
 * verbs do); sluice_rdma_poll_cq returns a count or a negative errno.
 *
 * Threads: any thread may call any function; a QP's posts and a CQ's polls are serialised
 * inside the library.
 */
typedef struct sluice_rdma sluice_rdma;       /* the engine's RDMA device, opened */
typedef struct sluice_rdma_cq sluice_rdma_cq; /* a completion queue */
typedef struct sluice_rdma_qp sluice_rdma_qp; /* a queue pair */

struct sluice_rdma_device_attr {
    uint32_t ipv4;          /* the engine's address, network order: the GID is ::ffff:ipv4 */
    uint8_t mac[6];         /* the engine's MAC */
    uint8_t active_mtu;     /* IBV_MTU_* */
    uint8_t reserved;
    uint32_t max_qp;
    uint32_t max_qp_wr;
    uint32_t max_cq;
    uint32_t max_cqe;
    uint32_t max_mr;
    uint32_t max_sge;
    uint64_t max_mr_size;
    uint32_t max_inline;    /* max_inline_data */
    uint32_t max_qp_rd_atom;
};

/* Opens the device (attaching to the engine from the environment first if needed). */
int sluice_rdma_open(sluice_rdma **out);
/* Closes it (its objects must have been destroyed; those left are destroyed). */
void sluice_rdma_close(sluice_rdma *dev);
int sluice_rdma_query_device(sluice_rdma *dev, struct sluice_rdma_device_attr *attr);

int sluice_rdma_alloc_pd(sluice_rdma *dev, uint32_t *pd);
int sluice_rdma_dealloc_pd(sluice_rdma *dev, uint32_t pd);

/* Registers len bytes at addr (any memory: its pages become shared with the engine, see
 * docs/verbs.md "Memory regions"); *key serves as lkey and rkey. */
int sluice_rdma_reg_mr(sluice_rdma *dev, uint32_t pd, void *addr, size_t len, int access,
                       uint32_t *key);
int sluice_rdma_dereg_mr(sluice_rdma *dev, uint32_t key);

/* A CQ of at least cqe entries (*actual gets its size). event_fd (or -1), a non-blocking
 * eventfd, is signalled when the CQ is armed by sluice_rdma_req_notify_cq and gets a
 * completion. */
int sluice_rdma_create_cq(sluice_rdma *dev, uint32_t cqe, int event_fd, sluice_rdma_cq **out,
                          uint32_t *actual);
/* As sluice_rdma_create_cq, an event writing the 8 bytes of token (native order) to event_fd,
 * a non-blocking eventfd or pipe write end: rdma-core's completion channels read the CQ's
 * address so. */
int sluice_rdma_create_cq_channel(sluice_rdma *dev, uint32_t cqe, int event_fd, uint64_t token,
                                  sluice_rdma_cq **out, uint32_t *actual);
int sluice_rdma_destroy_cq(sluice_rdma_cq *cq);

struct sluice_rdma_wc {
    uint64_t wr_id;
    uint32_t status;        /* IBV_WC_* status */
    uint32_t opcode;        /* IBV_WC_SEND, IBV_WC_RDMA_WRITE, ..., IBV_WC_RECV (128), ... */
    uint32_t byte_len;
    uint32_t imm_data;      /* network order, valid with IBV_WC_WITH_IMM */
    uint32_t qp_num;
    uint32_t src_qp;
    uint32_t wc_flags;      /* IBV_WC_WITH_IMM (2) */
    uint32_t reserved;
};

/* Takes up to n completions; returns how many, or a negative errno. */
int sluice_rdma_poll_cq(sluice_rdma_cq *cq, int n, struct sluice_rdma_wc *wc);
/* Arms the CQ's event for the next (solicited_only: next solicited) completion. */
int sluice_rdma_req_notify_cq(sluice_rdma_cq *cq, int solicited_only);

struct sluice_rdma_qp_init {
    uint32_t pd;
    uint32_t max_send_wr;
    uint32_t max_recv_wr;
    uint32_t max_inline;
    sluice_rdma_cq *send_cq;
    sluice_rdma_cq *recv_cq;
};

struct sluice_rdma_qp_caps {
    uint32_t qpn;
    uint32_t max_send_wr;   /* what the QP holds (at least what was asked) */
    uint32_t max_recv_wr;
    uint32_t max_inline;
};

/* An RC QP in RESET. */
int sluice_rdma_create_qp(sluice_rdma *dev, const struct sluice_rdma_qp_init *init,
                          sluice_rdma_qp **out, struct sluice_rdma_qp_caps *caps);

/* Notification pipes (docs/verbs.md "Notification pipes"): a pipe-mode CQ, and a pipe-mode
 * RC QP in RESET on the calling thread's context's pipe (its CQs pipe-mode; max_inline up
 * to 1024, one MTU, for the inline QP). Posting and polling as for the others. */
int sluice_rdma_create_pipe_cq(sluice_rdma *dev, uint32_t cqe, int event_fd,
                               sluice_rdma_cq **out, uint32_t *actual);
int sluice_rdma_create_pipe_qp(sluice_rdma *dev, const struct sluice_rdma_qp_init *init,
                               sluice_rdma_qp **out, struct sluice_rdma_qp_caps *caps);
/* The inline QP (docs/verbs.md "The inline QP"): an RDMA WRITE of len bytes and an 8-byte
 * trailer (length, then a valid byte written last), inline in the pipe, ending at the end of
 * the peer's slot. On the peer, sluice_rdma_poll_inline_recv returns the payload's length
 * (copied to out) once the slot of region key holds one, -EAGAIN while not. */
int sluice_rdma_post_send_inline_flagged(sluice_rdma_qp *qp, uint64_t wr_id, const void *data,
                                         size_t len, uint64_t slot_addr, size_t slot_len,
                                         uint32_t rkey, int signaled);
int64_t sluice_rdma_poll_inline_recv(sluice_rdma *dev, uint32_t key, size_t offset,
                                     size_t slot_len, void *out, size_t out_len);

struct sluice_rdma_qp_attr {
    uint32_t qp_state;      /* IBV_QPS_* */
    uint32_t cur_qp_state;
    uint32_t access;        /* qp_access_flags */
    uint32_t dest_qpn;
    uint32_t rq_psn;
    uint32_t sq_psn;
    uint32_t dest_ipv4;     /* the peer (ah_attr's GID as IPv4), network order; 0: none */
    uint8_t path_mtu;       /* IBV_MTU_* */
    uint8_t timeout;
    uint8_t retry_cnt;
    uint8_t rnr_retry;
    uint8_t min_rnr_timer;
    uint8_t max_rd_atomic;
    uint8_t max_dest_rd_atomic;
    uint8_t reserved;
};

/* ibv_modify_qp: mask is IBV_QP_* (IBV_QP_AV gives dest_ipv4). EAGAIN: the peer's MAC is
 * not known yet after a second of asking. */
int sluice_rdma_modify_qp(sluice_rdma_qp *qp, const struct sluice_rdma_qp_attr *attr, int mask);
int sluice_rdma_query_qp(sluice_rdma_qp *qp, struct sluice_rdma_qp_attr *attr);
/* Destroys the QP; outstanding work completes with IBV_WC_WR_FLUSH_ERR first. */
int sluice_rdma_destroy_qp(sluice_rdma_qp *qp);
uint32_t sluice_rdma_qp_num(const sluice_rdma_qp *qp);

struct sluice_rdma_sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

struct sluice_rdma_send_wr {
    uint64_t wr_id;
    const struct sluice_rdma_sge *sg_list;
    int32_t num_sge;        /* at most 1, or several with IBV_SEND_INLINE */
    uint32_t opcode;        /* IBV_WR_RDMA_WRITE(_WITH_IMM), IBV_WR_SEND(_WITH_IMM), IBV_WR_RDMA_READ,
                               SLUICE_RDMA_WR_OFFLOAD */
    uint32_t send_flags;    /* IBV_SEND_FENCE, _SIGNALED, _SOLICITED, _INLINE */
    uint32_t imm_data;      /* network order; OFFLOAD: the offload opcode, host order */
    uint64_t remote_addr;   /* OFFLOAD: the response buffer (in a local region) */
    uint32_t rkey;          /* OFFLOAD: the response buffer's lkey */
    uint32_t resp_len;      /* OFFLOAD: the response buffer's length; 0 otherwise */
};

/* OFFLOAD (docs/offload.md): the request's bytes (sg_list, at most one MTU) go to the handler
 * the peer's engine runs for the offload opcode on its QP; the response lands in the response
 * buffer. Its completion has opcode SLUICE_RDMA_WC_OFFLOAD and byte_len the response's
 * length; a handler that failed completes with IBV_WC_REM_OP_ERR (11) and its status in
 * imm_data (network order), and the QP stays up. */
#define SLUICE_RDMA_WR_OFFLOAD 64
#define SLUICE_RDMA_WC_OFFLOAD 64

struct sluice_rdma_recv_wr {
    uint64_t wr_id;
    const struct sluice_rdma_sge *sg_list;
    int32_t num_sge;        /* at most 1 */
    uint32_t reserved;
};

/* Posts n work requests in order; on failure *bad (if not NULL) is the index of the first
 * not posted and the return is its errno (EINVAL: a bad field or opcode; ENOMEM: the queue
 * is full). */
int sluice_rdma_post_send(sluice_rdma_qp *qp, const struct sluice_rdma_send_wr *wr, size_t n,
                          size_t *bad);
/* Offload handlers on a QP (docs/offload.md): the engine runs the handler for every OFFLOAD
 * request of `opcode` the peer sends on this QP, with access to the regions of the n keys
 * only. An eBPF object (section "offload") is open to every application; a Rust handler
 * library (built against sluice-offload-api) only to uid 0 and the engine's uid (EPERM).
 * EEXIST: the opcode has a handler on the QP; ENOENT: a key or the QP is not this
 * application's; EINVAL: the handler did not load (the engine's log says why). */
int sluice_rdma_register_offload_ebpf(sluice_rdma_qp *qp, uint32_t opcode, const char *name,
                                      const void *object, size_t len, const uint32_t *keys,
                                      size_t n);
int sluice_rdma_register_offload_rust(sluice_rdma_qp *qp, uint32_t opcode, const char *path,
                                      const char *handler, const uint32_t *keys, size_t n);
int sluice_rdma_unregister_offload(sluice_rdma_qp *qp, uint32_t opcode);
int sluice_rdma_post_recv(sluice_rdma_qp *qp, const struct sluice_rdma_recv_wr *wr, size_t n,
                          size_t *bad);

/*
 * ---- MTP messages (docs/mtp.md "Messages in service mode") ---------------------------
 *
 * Messages over the engine's MTP transport: bind a port, send whole messages (each is
 * acknowledged as a whole: its completion), receive whole messages. These return 0 or a
 * positive errno; sluice_mtp_poll, sluice_mtp_recv and sluice_mtp_wait return a count or a
 * length, or a negative errno. Any thread may call any function.
 */
typedef struct sluice_mtp sluice_mtp; /* a bound endpoint */

struct sluice_mtp_completion {
    uint64_t id;        /* what sluice_mtp_send returned in *id */
    uint32_t msg_id;    /* the message id on the wire */
    uint32_t status;    /* 0 success; 3 too long, 4 bad destination, 5 timeout, 6 flushed, ... */
    uint32_t len;       /* the message's length */
    uint32_t peer_ipv4; /* network order */
    uint16_t peer_port;
    uint8_t kind;       /* 1 sent, 2 a receive buffer's error */
    uint8_t reserved;
};

/* Binds port (0: ephemeral), attaching to the engine from the environment first if needed. */
int sluice_mtp_bind(uint16_t port, sluice_mtp **out);
uint16_t sluice_mtp_port(sluice_mtp *m);
/* Sends len bytes (0 is a message too) to ipv4 (network order):port; waits while every
 * send slot is in flight. EMSGSIZE: longer than the engine's largest message. */
int sluice_mtp_send(sluice_mtp *m, uint32_t ipv4, uint16_t port, const void *buf, size_t len,
                    uint8_t priority, uint8_t tc, uint32_t *id);
/* The next completion: 1, 0 when none is waiting, or -errno. */
int sluice_mtp_poll(sluice_mtp *m, struct sluice_mtp_completion *out);
/* The next whole message into buf: its length, -EAGAIN when none is waiting, -EMSGSIZE
 * when longer than cap (it stays for the next call). */
ssize_t sluice_mtp_recv(sluice_mtp *m, void *buf, size_t cap, uint32_t *src_ipv4,
                        uint16_t *src_port, uint32_t *msg_id);
/* Waits for a completion or a message: 1, 0 after timeout_ms (negative: forever), -errno. */
int sluice_mtp_wait(sluice_mtp *m, int timeout_ms);
/* Unbinds and frees the endpoint. */
void sluice_mtp_close(sluice_mtp *m);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
