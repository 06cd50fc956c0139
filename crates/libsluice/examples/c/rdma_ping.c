/*
 * rdma_ping.c: the RDMA verbs of sluice.h from C. Two processes, each attached to its own
 * engine ($SLUICE_SOCKET), one RC QP each:
 *
 *   rdma_ping server            prints "server QPN ADDR RKEY", reads the client's QPN and
 *                               IPv4 address from stdin, connects, posts a receive, prints
 *                               "ready", then waits for the client's SEND and checks it and
 *                               the bytes the client's WRITE put in its region.
 *   rdma_ping client IP QPN ADDR RKEY
 *                               prints "client QPN", waits for a line on stdin, connects,
 *                               WRITEs 4096 bytes and SENDs 100 (inline) with immediate data.
 *
 * With a last argument "pipe" (both sides), the CQ and QP are notification-pipe ones
 * (sluice_rdma_create_pipe_cq/_pipe_qp), and after the SEND the client also sends a flagged
 * inline message (sluice_rdma_post_send_inline_flagged) of 64 bytes into the server's slot at
 * 16384, which the server finds by polling (sluice_rdma_poll_inline_recv); both check the
 * new calls' error paths (NULL, too long, bad handle).
 *
 * Both print "ok" at the end, or a reason and exit 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sluice.h"

/* libibverbs' numbers (sluice.h uses them; infiniband/verbs.h is not needed). */
enum { QPS_INIT = 1, QPS_RTR = 2, QPS_RTS = 3 };
enum {
    QP_STATE = 1, QP_ACCESS_FLAGS = 1 << 3, QP_PKEY_INDEX = 1 << 4, QP_PORT = 1 << 5,
    QP_AV = 1 << 7, QP_PATH_MTU = 1 << 8, QP_TIMEOUT = 1 << 9, QP_RETRY_CNT = 1 << 10,
    QP_RNR_RETRY = 1 << 11, QP_RQ_PSN = 1 << 12, QP_MAX_QP_RD_ATOMIC = 1 << 13,
    QP_MIN_RNR_TIMER = 1 << 15, QP_SQ_PSN = 1 << 16, QP_MAX_DEST_RD_ATOMIC = 1 << 17,
    QP_DEST_QPN = 1 << 20
};
enum { ACCESS_LOCAL_WRITE = 1, ACCESS_REMOTE_WRITE = 2, ACCESS_REMOTE_READ = 4 };
enum { WR_RDMA_WRITE = 0, WR_SEND_WITH_IMM = 3 };
enum { SEND_SIGNALED = 2, SEND_INLINE = 8 };
enum { WC_SUCCESS = 0, WC_RECV = 128, WC_WITH_IMM = 2 };

#define LEN 65536
#define IMM 0x01020304u
/* The inline QP's slot in the server's region, and the flagged message's length. */
#define SLOT 16384
#define SLOT_LEN 256
#define FLAGGED 64

/* Notification-pipe mode (the "pipe" argument). */
static int pipe_mode;

static void fail(const char *what, int err) {
    printf("FAIL %s: %s\n", what, strerror(err));
    exit(1);
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 31u + 7u); }

static void connect_qp(sluice_rdma_qp *qp, uint32_t peer_ip, uint32_t peer_qpn) {
    struct sluice_rdma_qp_attr a;
    int e;
    memset(&a, 0, sizeof a);
    a.qp_state = QPS_INIT;
    a.access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    e = sluice_rdma_modify_qp(qp, &a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS);
    if (e) fail("to INIT", e);
    memset(&a, 0, sizeof a);
    a.qp_state = QPS_RTR;
    a.path_mtu = 3;
    a.dest_qpn = peer_qpn;
    a.rq_psn = 1;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.dest_ipv4 = peer_ip;
    e = sluice_rdma_modify_qp(qp, &a, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN |
                                          QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER);
    if (e) fail("to RTR", e);
    memset(&a, 0, sizeof a);
    a.qp_state = QPS_RTS;
    a.sq_psn = 1;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    e = sluice_rdma_modify_qp(qp, &a, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT |
                                          QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC);
    if (e) fail("to RTS", e);
    if (sluice_rdma_query_qp(qp, &a) || a.qp_state != QPS_RTS) fail("query", EPROTO);
}

/* Waits (armed event, then poll) for one completion. */
static struct sluice_rdma_wc wait_one(sluice_rdma_cq *cq, int efd) {
    struct sluice_rdma_wc wc;
    for (int rounds = 0; rounds < 2000; rounds++) {
        int n = sluice_rdma_poll_cq(cq, 1, &wc);
        if (n < 0) fail("poll_cq", -n);
        if (n == 1) return wc;
        int e = sluice_rdma_req_notify_cq(cq, 0);
        if (e) fail("req_notify_cq", e);
        n = sluice_rdma_poll_cq(cq, 1, &wc);
        if (n < 0) fail("poll_cq", -n);
        if (n == 1) return wc;
        struct pollfd p = {.fd = efd, .events = POLLIN};
        if (poll(&p, 1, 10) > 0) {
            uint64_t v;
            if (read(efd, &v, sizeof v) < 0) fail("read eventfd", errno);
        }
    }
    printf("FAIL no completion in 20 s\n");
    exit(1);
}

struct side {
    sluice_rdma *dev;
    uint32_t pd, key;
    unsigned char *buf;
    sluice_rdma_cq *cq;
    sluice_rdma_qp *qp;
    int efd;
};

static void open_side(struct side *s) {
    int e = sluice_rdma_open(&s->dev);
    if (e) fail("open", e);
    if ((e = sluice_rdma_alloc_pd(s->dev, &s->pd))) fail("alloc_pd", e);
    /* Plain heap memory: reg_mr makes its pages shared with the engine. */
    s->buf = calloc(1, LEN);
    if (!s->buf) fail("calloc", ENOMEM);
    e = sluice_rdma_reg_mr(s->dev, s->pd, s->buf, LEN,
                           ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ, &s->key);
    if (e) fail("reg_mr", e);
    s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->efd < 0) fail("eventfd", errno);
    uint32_t actual;
    if (pipe_mode) {
        sluice_rdma_cq *none = NULL;
        /* Error paths first: NULL device or out pointers, a bad descriptor. */
        if (sluice_rdma_create_pipe_cq(NULL, 64, -1, &none, &actual) != EINVAL ||
            sluice_rdma_create_pipe_cq(s->dev, 64, -1, NULL, &actual) != EINVAL ||
            sluice_rdma_create_pipe_cq(s->dev, 64, -5, &none, &actual) != EINVAL || none)
            fail("create_pipe_cq error paths", EPROTO);
        e = sluice_rdma_create_pipe_cq(s->dev, 64, s->efd, &s->cq, &actual);
        if (e) fail("create_pipe_cq", e);
    } else if ((e = sluice_rdma_create_cq(s->dev, 64, s->efd, &s->cq, &actual))) {
        fail("create_cq", e);
    }
    if (actual < 64) fail("cq size", EINVAL);
    uint32_t inline_max = pipe_mode ? 1024 : 128;
    struct sluice_rdma_qp_init init = {.pd = s->pd, .max_send_wr = 16, .max_recv_wr = 16,
                                       .max_inline = inline_max, .send_cq = s->cq,
                                       .recv_cq = s->cq};
    struct sluice_rdma_qp_caps caps;
    if (pipe_mode) {
        sluice_rdma_qp *none = NULL;
        struct sluice_rdma_qp_init bad_pd = init, no_cq = init;
        bad_pd.pd = s->pd + 1000;
        no_cq.recv_cq = NULL;
        if (sluice_rdma_create_pipe_qp(NULL, &init, &none, &caps) != EINVAL ||
            sluice_rdma_create_pipe_qp(s->dev, NULL, &none, &caps) != EINVAL ||
            sluice_rdma_create_pipe_qp(s->dev, &no_cq, &none, &caps) != EINVAL ||
            sluice_rdma_create_pipe_qp(s->dev, &bad_pd, &none, &caps) != ENOENT || none)
            fail("create_pipe_qp error paths", EPROTO);
        e = sluice_rdma_create_pipe_qp(s->dev, &init, &s->qp, &caps);
        if (e) fail("create_pipe_qp", e);
    } else if ((e = sluice_rdma_create_qp(s->dev, &init, &s->qp, &caps))) {
        fail("create_qp", e);
    }
    if (caps.qpn != sluice_rdma_qp_num(s->qp) || caps.max_inline < inline_max)
        fail("caps", EINVAL);
}

static unsigned char flagged_byte(size_t i) { return (unsigned char)(i * 13u + 5u); }

/* The server's side of the inline QP: polls its slot for the client's flagged message. */
static void receive_flagged(struct side *s) {
    unsigned char out[SLOT_LEN];
    /* Error paths: NULL device, bad key, out NULL with a length, a slot shorter than the
     * trailer, a slot past the region. */
    if (sluice_rdma_poll_inline_recv(NULL, s->key, SLOT, SLOT_LEN, out, sizeof out) != -EINVAL ||
        sluice_rdma_poll_inline_recv(s->dev, s->key + 1000, SLOT, SLOT_LEN, out, sizeof out) !=
            -ENOENT ||
        sluice_rdma_poll_inline_recv(s->dev, s->key, SLOT, SLOT_LEN, NULL, 8) != -EINVAL ||
        sluice_rdma_poll_inline_recv(s->dev, s->key, SLOT, 4, out, sizeof out) != -EINVAL ||
        sluice_rdma_poll_inline_recv(s->dev, s->key, LEN, SLOT_LEN, out, sizeof out) >= 0)
        fail("poll_inline_recv error paths", EPROTO);
    int64_t n = -EAGAIN;
    for (int rounds = 0; rounds < 20000 && n == -EAGAIN; rounds++) {
        n = sluice_rdma_poll_inline_recv(s->dev, s->key, SLOT, SLOT_LEN, out, sizeof out);
        if (n == -EAGAIN) poll(NULL, 0, 1);
    }
    if (n < 0) fail("poll_inline_recv", (int)-n);
    if (n != FLAGGED) fail("flagged length", EPROTO);
    for (size_t i = 0; i < FLAGGED; i++)
        if (out[i] != flagged_byte(i)) fail("flagged bytes", EPROTO);
    /* The valid byte was cleared: the slot is free again. */
    if (sluice_rdma_poll_inline_recv(s->dev, s->key, SLOT, SLOT_LEN, out, sizeof out) != -EAGAIN)
        fail("the slot still flagged", EPROTO);
}

/* The client's side: error paths, then one flagged message into the server's slot. */
static void send_flagged(struct side *s, unsigned long long addr, unsigned rkey) {
    unsigned char msg[2048];
    for (size_t i = 0; i < sizeof msg; i++) msg[i] = flagged_byte(i);
    if (sluice_rdma_post_send_inline_flagged(NULL, 9, msg, FLAGGED, addr + SLOT, SLOT_LEN, rkey,
                                             1) != EINVAL ||
        sluice_rdma_post_send_inline_flagged(s->qp, 9, NULL, FLAGGED, addr + SLOT, SLOT_LEN,
                                             rkey, 1) != EINVAL ||
        /* Past max_inline (one MTU), and past the slot. */
        sluice_rdma_post_send_inline_flagged(s->qp, 9, msg, sizeof msg, addr + SLOT, 4096, rkey,
                                             1) != EINVAL ||
        sluice_rdma_post_send_inline_flagged(s->qp, 9, msg, FLAGGED, addr + SLOT, FLAGGED, rkey,
                                             1) != EINVAL)
        fail("post_send_inline_flagged error paths", EPROTO);
    int e = sluice_rdma_post_send_inline_flagged(s->qp, 4, msg, FLAGGED, addr + SLOT, SLOT_LEN,
                                                 rkey, 1);
    if (e) fail("post_send_inline_flagged", e);
    /* Carried inline: the buffer may change at once. */
    memset(msg, 0, sizeof msg);
    struct sluice_rdma_wc wc = wait_one(s->cq, s->efd);
    if (wc.wr_id != 4 || wc.status != WC_SUCCESS) fail("flagged completion", EPROTO);
}

static void close_side(struct side *s) {
    int e;
    if ((e = sluice_rdma_destroy_qp(s->qp))) fail("destroy_qp", e);
    if ((e = sluice_rdma_destroy_cq(s->cq))) fail("destroy_cq", e);
    if ((e = sluice_rdma_dereg_mr(s->dev, s->key))) fail("dereg_mr", e);
    if ((e = sluice_rdma_dealloc_pd(s->dev, s->pd))) fail("dealloc_pd", e);
    sluice_rdma_close(s->dev);
    close(s->efd);
}

static int server(void) {
    struct side s;
    open_side(&s);
    struct sluice_rdma_device_attr attr;
    int e = sluice_rdma_query_device(s.dev, &attr);
    if (e) fail("query_device", e);
    printf("server %u %llu %u\n", sluice_rdma_qp_num(s.qp), (unsigned long long)(uintptr_t)s.buf,
           s.key);
    fflush(stdout);
    char ip[64];
    unsigned peer_qpn;
    if (scanf("%63s %u", ip, &peer_qpn) != 2) fail("reading the client", EINVAL);
    struct in_addr in;
    if (inet_pton(AF_INET, ip, &in) != 1) fail("client address", EINVAL);
    connect_qp(s.qp, in.s_addr, peer_qpn);
    struct sluice_rdma_sge sge = {.addr = (uintptr_t)(s.buf + 8192), .length = 1024,
                                  .lkey = s.key};
    struct sluice_rdma_recv_wr rwr = {.wr_id = 42, .sg_list = &sge, .num_sge = 1};
    size_t bad = 99;
    if ((e = sluice_rdma_post_recv(s.qp, &rwr, 1, &bad))) fail("post_recv", e);
    printf("ready\n");
    fflush(stdout);
    struct sluice_rdma_wc wc = wait_one(s.cq, s.efd);
    if (wc.wr_id != 42 || wc.status != WC_SUCCESS || wc.opcode != WC_RECV ||
        wc.byte_len != 100 || !(wc.wc_flags & WC_WITH_IMM) || wc.imm_data != htonl(IMM))
        fail("receive completion", EPROTO);
    /* The WRITE came before the SEND on the same QP: its bytes are there. */
    for (size_t i = 0; i < 4096; i++)
        if (s.buf[i] != pattern(i)) fail("written bytes", EPROTO);
    for (size_t i = 0; i < 100; i++)
        if (s.buf[8192 + i] != (unsigned char)(255 - i)) fail("sent bytes", EPROTO);
    if (pipe_mode) receive_flagged(&s);
    close_side(&s);
    printf("ok\n");
    return 0;
}

static int client(const char *ip, unsigned qpn, unsigned long long addr, unsigned rkey) {
    struct side s;
    open_side(&s);
    struct sluice_rdma_device_attr attr;
    int e = sluice_rdma_query_device(s.dev, &attr);
    if (e) fail("query_device", e);
    char mine[INET_ADDRSTRLEN];
    struct in_addr me = {.s_addr = attr.ipv4};
    inet_ntop(AF_INET, &me, mine, sizeof mine);
    printf("client %s %u\n", mine, sluice_rdma_qp_num(s.qp));
    fflush(stdout);
    char go[16];
    if (scanf("%15s", go) != 1) fail("waiting for the server", EINVAL);
    struct in_addr in;
    if (inet_pton(AF_INET, ip, &in) != 1) fail("server address", EINVAL);
    connect_qp(s.qp, in.s_addr, qpn);
    for (size_t i = 0; i < 4096; i++) s.buf[i] = pattern(i);
    unsigned char msg[100];
    for (size_t i = 0; i < 100; i++) msg[i] = (unsigned char)(255 - i);
    struct sluice_rdma_sge wsge = {.addr = (uintptr_t)s.buf, .length = 4096, .lkey = s.key};
    struct sluice_rdma_sge inl[2] = {{.addr = (uintptr_t)msg, .length = 60},
                                     {.addr = (uintptr_t)(msg + 60), .length = 40}};
    struct sluice_rdma_send_wr wr[2] = {
        {.wr_id = 1, .sg_list = &wsge, .num_sge = 1, .opcode = WR_RDMA_WRITE,
         .send_flags = SEND_SIGNALED, .remote_addr = addr, .rkey = rkey},
        {.wr_id = 2, .sg_list = inl, .num_sge = 2, .opcode = WR_SEND_WITH_IMM,
         .send_flags = SEND_SIGNALED | SEND_INLINE, .imm_data = htonl(IMM)},
    };
    size_t bad = 99;
    if ((e = sluice_rdma_post_send(s.qp, wr, 2, &bad))) fail("post_send", e);
    /* The inline bytes were copied: the buffer may change at once. */
    memset(msg, 0, sizeof msg);
    for (uint64_t want = 1; want <= 2; want++) {
        struct sluice_rdma_wc wc = wait_one(s.cq, s.efd);
        if (wc.wr_id != want || wc.status != WC_SUCCESS) fail("send completion", EPROTO);
    }
    /* A bad opcode is refused at post time, with its index. */
    struct sluice_rdma_send_wr atomic = {.wr_id = 3, .opcode = 6};
    if (sluice_rdma_post_send(s.qp, &atomic, 1, &bad) != EINVAL || bad != 0)
        fail("an atomic opcode was taken", EINVAL);
    if (pipe_mode) send_flagged(&s, addr, rkey);
    close_side(&s);
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[argc - 1], "pipe") == 0) {
        pipe_mode = 1;
        argc--;
    }
    if (argc == 2 && strcmp(argv[1], "server") == 0) return server();
    if (argc == 6 && strcmp(argv[1], "client") == 0)
        return client(argv[2], (unsigned)strtoul(argv[3], NULL, 10),
                      strtoull(argv[4], NULL, 10), (unsigned)strtoul(argv[5], NULL, 10));
    fprintf(stderr, "usage: rdma_ping server [pipe] | rdma_ping client IP QPN ADDR RKEY [pipe]\n");
    return 2;
}
