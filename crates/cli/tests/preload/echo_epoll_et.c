/*
 * Edge-triggered epoll echo server (EPOLLET | EPOLLRDHUP, accept4 with SOCK_NONBLOCK,
 * epoll_pwait), as event-driven servers such as nginx are written. Run under `sluice run`.
 * Usage: echo_epoll_et PORT
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF (256 * 1024)

struct conn {
    int fd;
    size_t head, len; /* bytes buffered: buf[head .. head+len) */
    int eof;
    char buf[BUF];
};

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* Moves bytes until neither reading nor writing makes progress; 1 when the connection is done. */
static int pump(struct conn *c) {
    for (;;) {
        int progress = 0;
        if (!c->eof && c->len < BUF) {
            size_t start = (c->head + c->len) % BUF;
            size_t room = start >= c->head ? BUF - start : c->head - start;
            if (room > BUF - c->len) room = BUF - c->len;
            ssize_t n = read(c->fd, c->buf + start, room);
            if (n > 0) { c->len += (size_t)n; progress = 1; }
            else if (n == 0) { c->eof = 1; progress = 1; }
            else if (errno != EAGAIN && errno != EINTR) return 1;
        }
        if (c->len > 0) {
            size_t run = c->head + c->len > BUF ? BUF - c->head : c->len;
            ssize_t n = send(c->fd, c->buf + c->head, run, MSG_NOSIGNAL);
            if (n > 0) { c->head = (c->head + (size_t)n) % BUF; c->len -= (size_t)n; progress = 1; }
            else if (n < 0 && errno != EAGAIN && errno != EINTR) return 1;
        }
        if (c->eof && c->len == 0) return 1;
        if (!progress) return 0;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s PORT\n", argv[0]); return 2; }
    int port = atoi(argv[1]);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0) die("socket");
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
    if (listen(l, 512) < 0) die("listen");
    int acc = 0;
    socklen_t alen = sizeof acc;
    if (getsockopt(l, SOL_SOCKET, SO_ACCEPTCONN, &acc, &alen) < 0 || !acc) die("SO_ACCEPTCONN");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = NULL };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) < 0) die("epoll_ctl listener");
    printf("listening %d\n", port);
    fflush(stdout);
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_pwait(ep, evs, 64, -1, NULL);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_pwait");
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c == NULL) {
                for (;;) {
                    struct sockaddr_in peer;
                    socklen_t plen = sizeof peer;
                    int fd = accept4(l, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0) {
                        if (errno == EAGAIN || errno == EINTR) break;
                        die("accept4");
                    }
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct conn *nc = calloc(1, sizeof *nc);
                    if (!nc) die("calloc");
                    nc->fd = fd;
                    struct epoll_event cev = {
                        .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = nc };
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev) < 0) die("epoll_ctl conn");
                    if (pump(nc)) { close(fd); free(nc); }
                }
                continue;
            }
            if (pump(c)) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                free(c);
            }
        }
    }
}
