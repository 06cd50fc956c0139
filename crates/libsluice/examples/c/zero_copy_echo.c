/*
 * zero_copy_echo: exercises libsluice's zero-copy C API end to end.
 *
 *   zero_copy_echo server N            accepts N connections and echoes each one without
 *                                      copying through a buffer of its own: rx_peek ->
 *                                      tx_reserve -> memcpy (ring to ring) -> tx_commit ->
 *                                      rx_consume; prints "listening PORT" first
 *   zero_copy_echo client IP PORT N BYTES
 *                                      opens N connections, sends BYTES of a known pattern
 *                                      on each (non-blocking sends), verifies the echo in
 *                                      place with rx_peek, and prints "ok"
 *
 * Both wait with sluice_poll_many, without a deadline: how long the peer takes is not
 * this program's to judge (on a loaded machine it may not run for seconds), and a side that
 * gave up would exit without closing, so the engine would reset its peer's connections
 * mid-stream (the caller bounds the whole run instead). The engine is found through
 * $SLUICE_SOCKET. Exit status 0 on success.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "sluice.h"

#define MAX_CONNS 64
/* sluice_poll_many's timeout for "until something is ready". */
#define WAIT_FOREVER -1

static int fail(const char *what) {
    fprintf(stderr, "zero_copy_echo: %s: %s\n", what, strerror(errno));
    return 1;
}

/* The byte at position i of connection c. */
static unsigned char pattern(size_t i, int c) {
    return (unsigned char)(i * 31u + (size_t)c * 7u + (i >> 9));
}

struct echo {
    sluice_socket *s;
    int eof;      /* the client finished sending */
    int shut;     /* we sent our FIN */
    size_t echoed;
};

/* Echoes what is readable on e as far as the TX ring has room; 0, or -1 on error. */
static int echo_some(struct echo *e) {
    for (;;) {
        const void *in;
        ssize_t n = sluice_rx_peek(e->s, &in);
        if (n < 0) {
            return errno == EAGAIN ? 0 : -1;
        }
        if (n == 0) {
            e->eof = 1;
            return 0;
        }
        void *out;
        ssize_t room = sluice_tx_reserve(e->s, &out);
        if (room < 0) {
            return errno == EAGAIN ? 0 : -1;
        }
        size_t len = (size_t)(n < room ? n : room);
        memcpy(out, in, len); /* RX ring to TX ring: the only copy */
        if (sluice_tx_commit(e->s, len) < 0 || sluice_rx_consume(e->s, len) < 0) {
            return -1;
        }
        e->echoed += len;
    }
}

static int server(int nconns) {
    sluice_socket *l = sluice_socket_open();
    if (!l) return fail("socket");
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = 0;
    if (sluice_bind(l, &a) < 0) return fail("bind");
    if (sluice_listen(l, 128) < 0) return fail("listen");
    if (sluice_getsockname(l, &a) < 0) return fail("getsockname");
    printf("listening %u\n", (unsigned)ntohs(a.sin_port));
    fflush(stdout);

    struct echo conns[MAX_CONNS];
    struct sluice_pollfd fds[MAX_CONNS];
    for (int i = 0; i < nconns; i++) {
        struct sockaddr_in peer;
        conns[i].s = sluice_accept(l, &peer);
        if (!conns[i].s) return fail("accept");
        if (sluice_set_nonblocking(conns[i].s, 1) < 0) return fail("nonblocking");
        if (sluice_set_nodelay(conns[i].s, 1) < 0) return fail("nodelay");
        conns[i].eof = conns[i].shut = 0;
        conns[i].echoed = 0;
    }
    sluice_close(l);

    int open = nconns;
    while (open > 0) {
        size_t n = 0;
        for (int i = 0; i < nconns; i++) {
            struct echo *e = &conns[i];
            if (e->shut) continue;
            if (echo_some(e) < 0) return fail("echo");
            if (e->eof && !e->shut) {
                /* Everything read was committed to the TX ring: the FIN follows it. */
                if (sluice_shutdown(e->s, SHUT_WR) < 0) return fail("shutdown");
                e->shut = 1;
                open--;
                continue;
            }
            fds[n].socket = e->s;
            fds[n].events = SLUICE_POLLIN;
            fds[n].revents = 0;
            /* Waiting for room in the TX ring, not for input, when input is waiting. */
            if (sluice_available(e->s) > 0) fds[n].events = SLUICE_POLLOUT;
            n++;
        }
        if (n > 0 && sluice_poll_many(fds, n, WAIT_FOREVER) < 0) return fail("poll (server)");
    }
    size_t total = 0;
    for (int i = 0; i < nconns; i++) {
        total += conns[i].echoed;
        sluice_close(conns[i].s);
    }
    printf("echoed %zu bytes on %d connections\n", total, nconns);
    return 0;
}

struct flow {
    sluice_socket *s;
    int id;
    size_t sent, received;
    int shut, done;
};

static int client(const char *ip, int port, int nconns, size_t bytes) {
    struct flow flows[MAX_CONNS];
    struct sluice_pollfd fds[MAX_CONNS];
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        fprintf(stderr, "zero_copy_echo: bad address %s\n", ip);
        return 2;
    }
    for (int i = 0; i < nconns; i++) {
        struct flow *f = &flows[i];
        f->s = sluice_socket_open();
        if (!f->s) return fail("socket");
        if (sluice_connect(f->s, &a) < 0) return fail("connect");
        struct sockaddr_in peer;
        if (sluice_getpeername(f->s, &peer) < 0) return fail("getpeername");
        if (peer.sin_port != a.sin_port) {
            fprintf(stderr, "zero_copy_echo: wrong peer port\n");
            return 1;
        }
        if (sluice_set_nonblocking(f->s, 1) < 0) return fail("nonblocking");
        f->id = i;
        f->sent = f->received = 0;
        f->shut = f->done = 0;
    }
    unsigned char chunk[4096];
    int left = nconns;
    while (left > 0) {
        size_t n = 0;
        for (int i = 0; i < nconns; i++) {
            struct flow *f = &flows[i];
            if (f->done) continue;
            /* Send what fits. */
            while (f->sent < bytes) {
                size_t len = bytes - f->sent < sizeof chunk ? bytes - f->sent : sizeof chunk;
                for (size_t k = 0; k < len; k++) chunk[k] = pattern(f->sent + k, f->id);
                ssize_t w = sluice_send(f->s, chunk, len);
                if (w < 0) {
                    if (errno == EAGAIN) break;
                    return fail("send");
                }
                f->sent += (size_t)w;
            }
            if (f->sent == bytes && !f->shut) {
                if (sluice_shutdown(f->s, SHUT_WR) < 0) return fail("client shutdown");
                f->shut = 1;
            }
            /* Verify the echo where it lies in the RX ring. */
            for (;;) {
                const void *data;
                ssize_t r = sluice_rx_peek(f->s, &data);
                if (r < 0) {
                    if (errno == EAGAIN) break;
                    return fail("rx_peek");
                }
                if (r == 0) {
                    if (f->received != bytes) {
                        fprintf(stderr,
                                "zero_copy_echo: connection %d ended after %zu of %zu bytes"
                                " (poll bits 0x%x, error %d)\n",
                                f->id, f->received, bytes, (unsigned)sluice_poll(f->s, 0, 0),
                                sluice_socket_error(f->s));
                        return 1;
                    }
                    f->done = 1;
                    left--;
                    break;
                }
                const unsigned char *p = data;
                for (ssize_t k = 0; k < r; k++) {
                    if (p[k] != pattern(f->received + (size_t)k, f->id)) {
                        fprintf(stderr, "zero_copy_echo: connection %d: byte %zu differs\n",
                                f->id, f->received + (size_t)k);
                        return 1;
                    }
                }
                f->received += (size_t)r;
                if (sluice_rx_consume(f->s, (size_t)r) < 0) return fail("rx_consume");
            }
            if (f->done) continue;
            fds[n].socket = f->s;
            fds[n].events = SLUICE_POLLIN | (f->sent < bytes ? SLUICE_POLLOUT : 0);
            fds[n].revents = 0;
            n++;
        }
        if (n > 0 && sluice_poll_many(fds, n, WAIT_FOREVER) < 0) return fail("poll (client)");
    }
    for (int i = 0; i < nconns; i++) sluice_close(flows[i].s);
    printf("ok %d connections, %zu bytes each\n", nconns, bytes);
    return 0;
}

int main(int argc, char **argv) {
    if (sluice_attach(NULL) < 0) return fail("attach");
    if (argc == 3 && strcmp(argv[1], "server") == 0) {
        int n = atoi(argv[2]);
        if (n < 1 || n > MAX_CONNS) return 2;
        return server(n);
    }
    if (argc == 6 && strcmp(argv[1], "client") == 0) {
        int n = atoi(argv[4]);
        if (n < 1 || n > MAX_CONNS) return 2;
        return client(argv[2], atoi(argv[3]), n, (size_t)strtoull(argv[5], NULL, 10));
    }
    fprintf(stderr, "usage: %s server N | client IP PORT N BYTES\n", argv[0]);
    return 2;
}
