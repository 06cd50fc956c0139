/* MTP messages from C (docs/mtp.md "Messages in service mode"): binds a port, sends
 * messages of 0, 1, 1400 and 100000 bytes to an echoing peer, and checks that each comes
 * back byte for byte and that each send completes successfully. Then it exits without
 * closing its endpoint: the engine cleans up after it (the test binds the port again).
 *
 *   mtp_ping <peer-ipv4> <peer-port> <own-port>      (SLUICE_SOCKET names the engine)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sluice.h"

static int fail(const char *what, int err) {
    printf("%s: %s\n", what, strerror(err < 0 ? -err : err));
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: mtp_ping <peer-ipv4> <peer-port> <own-port>\n");
        return 2;
    }
    struct in_addr peer;
    if (inet_pton(AF_INET, argv[1], &peer) != 1) return 2;
    uint16_t peer_port = (uint16_t)atoi(argv[2]);
    sluice_mtp *m = NULL;
    int r = sluice_mtp_bind((uint16_t)atoi(argv[3]), &m);
    if (r != 0) return fail("bind", r);
    static unsigned char out[100000], in[100000];
    const size_t sizes[] = {0, 1, 1400, 100000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        for (size_t i = 0; i < n; i++) out[i] = (unsigned char)(i * 7 + k);
        uint32_t id = 0;
        r = sluice_mtp_send(m, peer.s_addr, peer_port, out, n, 0, 0, &id);
        if (r != 0) return fail("send", r);
        int sent = 0, got = 0;
        while (!sent || !got) {
            struct sluice_mtp_completion c;
            int p = sluice_mtp_poll(m, &c);
            if (p < 0) return fail("poll", p);
            if (p == 1) {
                if (c.kind != 1 || c.id != id || c.status != 0 || c.len != n) {
                    printf("completion kind %u id %llu status %u len %u\n", c.kind,
                           (unsigned long long)c.id, c.status, c.len);
                    return 1;
                }
                sent = 1;
                continue;
            }
            uint32_t src = 0, msg_id = 0;
            uint16_t sport = 0;
            ssize_t len = sluice_mtp_recv(m, in, sizeof in, &src, &sport, &msg_id);
            if (len >= 0) {
                if ((size_t)len != n || memcmp(in, out, n) != 0 || src != peer.s_addr ||
                    sport != peer_port) {
                    printf("message %zu: %zd bytes from port %u, not the %zu sent\n", k, len,
                           sport, n);
                    return 1;
                }
                got = 1;
                continue;
            }
            if (len != -EAGAIN) return fail("recv", (int)len);
            int w = sluice_mtp_wait(m, 20000);
            if (w < 0) return fail("wait", w);
            if (w == 0) {
                printf("timed out on message %zu (sent %d, echoed %d)\n", k, sent, got);
                return 1;
            }
        }
    }
    puts("ok");
    /* No sluice_mtp_close: exiting detaches, and the engine unbinds the port. */
    return 0;
}
