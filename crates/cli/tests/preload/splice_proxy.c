/*
 * splice_proxy.c: a tiny TCP proxy for the preload tests. It listens on PORT, accepts
 * CLIENTS connections, connects each to BACKEND_IP:BACKEND_PORT and splices the two with
 * the shim's extension call sluice_splice_fds (found with dlsym: it is not linked against
 * the shim); then it waits for every splice's end with sluice_splice_wait and prints one
 * line per splice: "splice OUTCOME A_TO_B B_TO_A" (the engine's counts plus what was
 * forwarded before the splice), and "done" at the end.
 *
 * usage: splice_proxy PORT BACKEND_IP BACKEND_PORT CLIENTS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sluice.h"

typedef int (*splice_fds_fn)(int, int);
typedef int (*splice_wait_fn)(int, int, struct sluice_splice_stats *);

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: splice_proxy PORT BACKEND_IP BACKEND_PORT CLIENTS\n");
        return 2;
    }
    int clients = atoi(argv[4]);
    splice_fds_fn splice_fds = (splice_fds_fn)dlsym(RTLD_DEFAULT, "sluice_splice_fds");
    splice_wait_fn splice_wait = (splice_wait_fn)dlsym(RTLD_DEFAULT, "sluice_splice_wait");
    if (!splice_fds || !splice_wait) {
        fprintf(stderr, "the shim's splice calls are not there: %s\n", dlerror());
        return 1;
    }
    /* A descriptor that is not an engine socket is refused. */
    if (splice_fds(0, 1) != -1 || (errno != ENOTSOCK && errno != EBADF)) {
        fprintf(stderr, "stdin/stdout were not refused (errno %d)\n", errno);
        return 1;
    }
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)atoi(argv[1]));
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 64)) {
        perror("listen");
        return 1;
    }
    printf("listening %s\n", argv[1]);
    fflush(stdout);
    struct sockaddr_in back = {0};
    back.sin_family = AF_INET;
    back.sin_port = htons((unsigned short)atoi(argv[3]));
    inet_pton(AF_INET, argv[2], &back.sin_addr);
    int *handles = calloc((size_t)clients, sizeof *handles);
    for (int i = 0; i < clients; i++) {
        int c = accept(l, NULL, NULL);
        int b = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || b < 0 || connect(b, (struct sockaddr *)&back, sizeof back)) {
            perror("accept/connect");
            return 1;
        }
        handles[i] = splice_fds(c, b);
        if (handles[i] < 0) {
            perror("sluice_splice_fds");
            return 1;
        }
        /* The engine owns the connections now; reads fail, closing is allowed. */
        char x;
        if (read(c, &x, 1) != -1 || errno != EBADFD) {
            fprintf(stderr, "a read of a spliced socket did not fail with EBADFD\n");
            return 1;
        }
        close(c);
        close(b);
    }
    for (int i = 0; i < clients; i++) {
        struct sluice_splice_stats st;
        if (splice_wait(handles[i], -1, &st) != 1) {
            perror("sluice_splice_wait");
            return 1;
        }
        printf("splice %d %llu %llu\n", st.outcome,
               (unsigned long long)(st.a_to_b + st.forwarded_a_to_b),
               (unsigned long long)(st.b_to_a + st.forwarded_b_to_a));
    }
    printf("done\n");
    return 0;
}
