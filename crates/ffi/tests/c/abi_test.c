/*
 * abi_test.c: the C ABI of Sluice's TCP core (include/sluice.h) from C, as ns-3 will use
 * it. Compiled and run by tests/c_abi.rs under `cargo test -p sluice-ffi`.
 *
 * 1. Two stacks in this process exchange frames through an in-memory wire in virtual time
 *    (10 us each way, ARP included): connect, send 1 MB of a known pattern, receive and
 *    verify it byte for byte, close both ends cleanly (FIN, no RST), until both tables
 *    are empty after TIME-WAIT.
 * 2. Error paths: NULL pointers, closed and stale handles, short buffers, invalid configs
 *    all return error codes, never abort.
 * 3. Hundreds of stacks in one process.
 *
 * Exit status 0 and a last line "abi_test: N checks passed" on success; the first failed
 * check prints its line and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

static unsigned checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* Checks that an expression returns an expected code, printing both if not. */
#define CHECK_CODE(expr, want)                                                          \
    do {                                                                                \
        long long got_ = (long long)(expr);                                             \
        checks++;                                                                       \
        if (got_ != (long long)(want)) {                                                \
            fprintf(stderr, "%s:%d: %s returned %lld (%s), wanted %lld (%s)\n", __FILE__, \
                    __LINE__, #expr, got_, sluice_strerror(got_), (long long)(want),    \
                    sluice_strerror((long long)(want)));                                \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define IP_A 0x0a000001u /* 10.0.0.1 */
#define IP_B 0x0a000002u /* 10.0.0.2 */
#define PORT 5001
#define TOTAL (1u << 20)    /* bytes the client sends */
#define DELAY_NS 10000u     /* one-way delay of the wire */
#define WIRE_SLOTS 8192     /* frames in flight per direction */
#define FRAME_MAX 1514      /* MTU 1500 + Ethernet header */

/* The byte at offset i of the stream: not periodic in any small power of two. */
static uint8_t pattern(uint64_t i) {
    return (uint8_t)((i * 131u + (i >> 11) + 7u) & 0xffu);
}

/* One direction of the wire: a FIFO of frames, each due DELAY_NS after it was sent. */
typedef struct {
    uint64_t at;
    size_t len;
    uint8_t bytes[FRAME_MAX];
} frame;

typedef struct {
    frame *slots;
    size_t head, count;
    uint64_t carried;
} link;

static uint64_t now_ns;

static void link_init(link *l) {
    l->slots = calloc(WIRE_SLOTS, sizeof(frame));
    CHECK(l->slots != NULL);
    l->head = l->count = 0;
    l->carried = 0;
}

/* Moves every frame `from` has to send onto the wire. */
static int pump(sluice_stack *from, link *l) {
    int moved = 0;
    for (;;) {
        CHECK(l->count < WIRE_SLOTS); /* the stacks' windows bound the flight */
        frame *f = &l->slots[(l->head + l->count) % WIRE_SLOTS];
        int64_t n = sluice_stack_poll_transmit(from, now_ns, f->bytes, sizeof f->bytes);
        CHECK(n >= 0);
        if (n == 0)
            return moved;
        f->len = (size_t)n;
        f->at = now_ns + DELAY_NS;
        l->count++;
        moved = 1;
    }
}

/* Hands `to` every frame that has arrived by now. */
static int deliver(link *l, sluice_stack *to) {
    int moved = 0;
    while (l->count > 0 && l->slots[l->head].at <= now_ns) {
        frame *f = &l->slots[l->head];
        CHECK_CODE(sluice_stack_handle_frame(to, now_ns, f->bytes, f->len), SLUICE_ERROR_OK);
        l->head = (l->head + 1) % WIRE_SLOTS;
        l->count--;
        l->carried++;
        moved = 1;
    }
    return moved;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* When anything next happens: a frame arrives or a timer is due (UINT64_MAX: never). */
static uint64_t next_time(sluice_stack *a, sluice_stack *b, const link *ab, const link *ba) {
    uint64_t t = UINT64_MAX, d;
    if (ab->count)
        t = min_u64(t, ab->slots[ab->head].at);
    if (ba->count)
        t = min_u64(t, ba->slots[ba->head].at);
    CHECK(sluice_stack_poll_timeout(a, &d) >= 0);
    t = min_u64(t, d);
    CHECK(sluice_stack_poll_timeout(b, &d) >= 0);
    return min_u64(t, d);
}

static sluice_config config_for(uint32_t ip, uint8_t last_mac_byte) {
    sluice_config c;
    CHECK_CODE(sluice_config_default(&c), SLUICE_ERROR_OK);
    c.ip = ip;
    c.mac[5] = last_mac_byte;
    c.max_connections = 64;
    c.max_listeners = 4;
    c.time_wait_ns = 1000000000ull; /* 1 s of virtual time */
    return c;
}

/* The application on both ends, driven by events. */
typedef struct {
    sluice_listener listener;
    sluice_conn client, server;
    int connected, accepted, shut, client_closed, server_closed;
    uint64_t sent, received, mismatches, acceptable_events, conn_events;
    sluice_conn_info client_info_after_send, server_info_at_eof;
} app;

static uint8_t chunk[65536];

static int client_send(sluice_stack *a, app *p) {
    int moved = 0;
    while (p->connected && p->sent < TOTAL) {
        size_t want = TOTAL - p->sent < sizeof chunk ? TOTAL - p->sent : sizeof chunk;
        for (size_t i = 0; i < want; i++)
            chunk[i] = pattern(p->sent + i);
        int64_t n = sluice_send(a, p->client, chunk, want);
        if (n == SLUICE_ERROR_WOULD_BLOCK)
            break;
        CHECK(n > 0);
        p->sent += (uint64_t)n;
        moved = 1;
    }
    if (p->connected && p->sent == TOTAL && !p->shut) {
        CHECK_CODE(sluice_conn_get_info(a, p->client, &p->client_info_after_send), SLUICE_ERROR_OK);
        CHECK_CODE(sluice_shutdown(a, p->client), SLUICE_ERROR_OK);
        /* Half-closed: sending again is refused with a code. */
        CHECK_CODE(sluice_send(a, p->client, chunk, 1), SLUICE_ERROR_NOT_CONNECTED);
        p->shut = 1;
        moved = 1;
    }
    return moved;
}

static int server_recv(sluice_stack *b, app *p) {
    static uint8_t buf[40000]; /* not a divisor of anything the sender uses */
    int moved = 0;
    while (p->accepted && !p->server_closed) {
        int64_t n = sluice_recv(b, p->server, buf, sizeof buf);
        if (n == SLUICE_ERROR_WOULD_BLOCK)
            break;
        CHECK(n >= 0);
        moved = 1;
        if (n == 0) {
            /* End of stream: everything came; close our side (FIN). */
            CHECK_CODE(sluice_conn_get_info(b, p->server, &p->server_info_at_eof), SLUICE_ERROR_OK);
            CHECK_CODE(sluice_close(b, p->server), SLUICE_ERROR_OK);
            p->server_closed = 1;
            break;
        }
        for (int64_t i = 0; i < n; i++)
            if (buf[i] != pattern(p->received + (uint64_t)i)) {
                if (!p->mismatches)
                    fprintf(stderr, "first mismatch at byte %llu\n",
                            (unsigned long long)(p->received + (uint64_t)i));
                p->mismatches++;
            }
        p->received += (uint64_t)n;
    }
    return moved;
}

static int client_recv(sluice_stack *a, app *p) {
    uint8_t buf[256];
    if (!p->shut || p->client_closed)
        return 0;
    int64_t n = sluice_recv(a, p->client, buf, sizeof buf);
    if (n == SLUICE_ERROR_WOULD_BLOCK)
        return 0;
    CHECK_CODE(n, 0); /* the server sends nothing, then FIN */
    CHECK_CODE(sluice_close(a, p->client), SLUICE_ERROR_OK);
    p->client_closed = 1;
    return 1;
}

static int events(sluice_stack *s, app *p) {
    sluice_event e;
    int moved = 0, r;
    while ((r = sluice_poll_event(s, &e)) == 1) {
        moved = 1;
        if (e.kind == SLUICE_EVENT_KIND_ACCEPTABLE) {
            CHECK(e.listener == p->listener);
            p->acceptable_events++;
            sluice_conn c;
            if (!p->accepted && sluice_accept(s, p->listener, &c) == SLUICE_ERROR_OK) {
                p->server = c;
                p->accepted = 1;
                /* Each stack refuses the other's handle, though both are live. */
                sluice_conn_info info;
                CHECK_CODE(sluice_conn_get_info(s, p->client, &info), SLUICE_ERROR_INVALID_HANDLE);
            }
        } else {
            CHECK(e.kind == SLUICE_EVENT_KIND_CONN);
            CHECK(e.conn == p->client || e.conn == p->server);
            p->conn_events++;
            if (e.conn == p->client && (e.readiness & SLUICE_READY_CONNECTED))
                p->connected = 1;
            CHECK(!(e.readiness & SLUICE_READY_ERROR));
        }
    }
    CHECK_CODE(r, 0);
    return moved;
}

static void transfer(void) {
    sluice_config ca = config_for(IP_A, 1), cb = config_for(IP_B, 2);
    sluice_stack *a = NULL, *b = NULL;
    CHECK_CODE(sluice_stack_new(&ca, &a), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_stack_new(&cb, &b), SLUICE_ERROR_OK);
    CHECK(a != NULL && b != NULL && a != b);
    CHECK_CODE(sluice_stack_max_frame_len(a), FRAME_MAX);

    link ab, ba;
    link_init(&ab);
    link_init(&ba);
    app p;
    memset(&p, 0, sizeof p);
    CHECK_CODE(sluice_listen(b, PORT, 16, &p.listener), SLUICE_ERROR_OK);
    now_ns = 1000;
    CHECK_CODE(sluice_connect(a, now_ns, IP_B, PORT, &p.client), SLUICE_ERROR_OK);
    CHECK(p.client != 0);

    unsigned steps = 0;
    for (;;) {
        int moved = 1;
        while (moved) {
            moved = 0;
            moved |= pump(a, &ab);
            moved |= pump(b, &ba);
            moved |= deliver(&ab, b);
            moved |= deliver(&ba, a);
            moved |= events(a, &p);
            moved |= events(b, &p);
            moved |= client_send(a, &p);
            moved |= server_recv(b, &p);
            moved |= client_recv(a, &p);
        }
        uint64_t t = next_time(a, b, &ab, &ba);
        if (t == UINT64_MAX)
            break; /* nothing in flight, no timer: done */
        CHECK(++steps < 10000000u);
        if (t > now_ns)
            now_ns = t;
        CHECK_CODE(sluice_stack_handle_timeout(a, now_ns), SLUICE_ERROR_OK);
        CHECK_CODE(sluice_stack_handle_timeout(b, now_ns), SLUICE_ERROR_OK);
    }

    /* Every byte came, in order, and both ends closed. */
    CHECK(p.connected && p.accepted);
    CHECK(p.acceptable_events >= 1 && p.conn_events >= 2);
    CHECK(p.sent == TOTAL);
    CHECK(p.received == TOTAL);
    CHECK(p.mismatches == 0);
    CHECK(p.shut && p.client_closed && p.server_closed);

    /* The snapshots taken on the way. */
    CHECK(p.client_info_after_send.state == SLUICE_TCP_STATE_ESTABLISHED);
    CHECK(p.client_info_after_send.bytes_sent == TOTAL);
    CHECK(p.client_info_after_send.cwnd > 0);
    CHECK(p.client_info_after_send.srtt_ns >= 2 * DELAY_NS);
    CHECK(p.client_info_after_send.local_ip == IP_A);
    CHECK(p.client_info_after_send.remote_ip == IP_B);
    CHECK(p.client_info_after_send.remote_port == PORT);
    CHECK(p.client_info_after_send.error == 0);
    CHECK(p.server_info_at_eof.state == SLUICE_TCP_STATE_CLOSE_WAIT);
    CHECK(p.server_info_at_eof.bytes_received == TOTAL);
    CHECK(p.server_info_at_eof.local_port == PORT);
    CHECK(p.server_info_at_eof.remote_port == p.client_info_after_send.local_port);

    /* Closed handles are refused with a code, whatever the call. */
    uint8_t byte = 0;
    sluice_conn_info info;
    CHECK_CODE(sluice_send(a, p.client, &byte, 1), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_recv(a, p.client, &byte, 1), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_conn_get_info(a, p.client, &info), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_shutdown(a, p.client), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_close(a, p.client), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_abort(b, p.server), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_close(b, p.server), SLUICE_ERROR_INVALID_HANDLE);
    /* A handle of one stack means nothing to another. */
    CHECK_CODE(sluice_close(b, p.client), SLUICE_ERROR_INVALID_HANDLE);

    /* A clean close: no RST either way, and TIME-WAIT ran out (the loop ended with no
     * timer), so both tables are empty. */
    sluice_counters ka, kb;
    CHECK_CODE(sluice_stack_counters(a, &ka), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_stack_counters(b, &kb), SLUICE_ERROR_OK);
    CHECK(ka.rst_sent == 0 && kb.rst_sent == 0);
    CHECK(ka.rst_received == 0 && kb.rst_received == 0);
    CHECK(ka.connections == 0 && kb.connections == 0);
    CHECK(ka.malformed == 0 && kb.malformed == 0 && ka.bad_checksum == 0);
    CHECK(ka.frames_tx == ab.carried && kb.frames_tx == ba.carried);
    CHECK(ka.frames_rx == ba.carried && kb.frames_rx == ab.carried);
    CHECK(ab.carried > TOTAL / 1460);
    uint64_t v = 0;
    CHECK_CODE(sluice_stack_counter(a, "frames_tx", &v), SLUICE_ERROR_OK);
    CHECK(v == ka.frames_tx);

    printf("transfer: %u bytes verified in %.3f ms of virtual time, %llu + %llu frames\n",
           TOTAL, (double)now_ns / 1e6, (unsigned long long)ab.carried,
           (unsigned long long)ba.carried);
    sluice_stack_free(a);
    sluice_stack_free(b);
    free(ab.slots);
    free(ba.slots);
}

static void null_pointers(void) {
    sluice_config c;
    sluice_stack *s = NULL;
    sluice_event e;
    sluice_conn_info info;
    sluice_counters k;
    sluice_conn conn = 0;
    sluice_listener l = 0;
    uint64_t t = 0;
    uint8_t buf[FRAME_MAX], mac[6] = {2, 0, 0, 0, 0, 9};

    CHECK_CODE(sluice_config_default(NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_config_default(&c), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_stack_new(NULL, &s), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_new(&c, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_config_check(NULL, NULL, 0), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_config_set_congestion_control(NULL, "reno"), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_config_set_congestion_control(&c, NULL), SLUICE_ERROR_NULL_POINTER);

    /* Every call on a NULL stack. */
    CHECK_CODE(sluice_stack_max_frame_len(NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_handle_frame(NULL, 0, buf, 60), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_poll_transmit(NULL, 0, buf, sizeof buf), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_poll_timeout(NULL, &t), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_handle_timeout(NULL, 0), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_add_neighbor(NULL, IP_B, mac), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_listen(NULL, PORT, 8, &l), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_unlisten(NULL, l), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_accept(NULL, l, &conn), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_connect(NULL, 0, IP_B, PORT, &conn), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_send(NULL, conn, buf, 1), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_recv(NULL, conn, buf, 1), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_shutdown(NULL, conn), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_close(NULL, conn), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_abort(NULL, conn), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_poll_event(NULL, &e), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_conn_get_info(NULL, conn, &info), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_counters(NULL, &k), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_counter(NULL, "frames_rx", &t), SLUICE_ERROR_NULL_POINTER);
    sluice_stack_free(NULL); /* ignored */

    /* NULL arguments on a live stack; nothing happens. */
    CHECK_CODE(sluice_stack_new(&c, &s), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_stack_handle_frame(s, 0, NULL, 60), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_poll_transmit(s, 0, NULL, sizeof buf), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_poll_timeout(s, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_add_neighbor(s, IP_B, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_listen(s, PORT, 8, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_connect(s, 0, IP_B, PORT, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_poll_event(s, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_counters(s, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_counter(s, NULL, &t), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_counter(s, "frames_rx", NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_stack_counters(s, &k), SLUICE_ERROR_OK);
    CHECK(k.connections == 0 && k.frames_rx == 0); /* the refused connect opened nothing */
    CHECK(k.abi_refused == 10);                    /* each refusal above is counted */
    CHECK_CODE(sluice_stack_counter(s, "abi_refused", &t), SLUICE_ERROR_OK);
    CHECK(t == 10);
    /* The refused listen took no port. */
    CHECK_CODE(sluice_listen(s, PORT, 8, &l), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_accept(s, l, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_send(s, conn, NULL, 1), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_recv(s, conn, NULL, 1), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_conn_get_info(s, conn, NULL), SLUICE_ERROR_NULL_POINTER);
    sluice_stack_free(s);
}

static void bad_input(void) {
    sluice_config c;
    sluice_stack *s = NULL;
    char why[128];
    CHECK_CODE(sluice_config_default(&c), SLUICE_ERROR_OK);

    /* Invalid configurations: refused, nothing created, the reason readable. */
    c.mtu = 100;
    CHECK_CODE(sluice_stack_new(&c, &s), SLUICE_ERROR_INVALID_CONFIG);
    CHECK(s == NULL);
    CHECK_CODE(sluice_config_check(&c, why, sizeof why), SLUICE_ERROR_INVALID_CONFIG);
    CHECK(strstr(why, "mtu") != NULL);
    CHECK_CODE(sluice_config_check(&c, why, 4), SLUICE_ERROR_INVALID_CONFIG);
    CHECK(strlen(why) == 3); /* cut to the buffer, NUL-terminated */
    CHECK_CODE(sluice_config_default(&c), SLUICE_ERROR_OK);
    c.congestion_control = 99;
    CHECK_CODE(sluice_stack_new(&c, &s), SLUICE_ERROR_INVALID_CONFIG);
    c.congestion_control = SLUICE_CC_DCTCP;
    c.recovery = 7;
    CHECK_CODE(sluice_stack_new(&c, &s), SLUICE_ERROR_INVALID_CONFIG);
    c.recovery = SLUICE_RECOVERY_SACK;
    c.max_connections = 0;
    CHECK_CODE(sluice_stack_new(&c, &s), SLUICE_ERROR_INVALID_CONFIG);
    CHECK(s == NULL);
    CHECK_CODE(sluice_config_default(&c), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_config_check(&c, why, sizeof why), SLUICE_ERROR_OK);
    CHECK(why[0] == 0);

    /* Congestion control by name. */
    CHECK_CODE(sluice_config_set_congestion_control(&c, "cubic"), SLUICE_ERROR_OK);
    CHECK(c.congestion_control == SLUICE_CC_CUBIC);
    CHECK_CODE(sluice_config_set_congestion_control(&c, "NewReno"), SLUICE_ERROR_OK);
    CHECK(c.congestion_control == SLUICE_CC_NEWRENO);
    CHECK_CODE(sluice_config_set_congestion_control(&c, "vegas"), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK(c.congestion_control == SLUICE_CC_NEWRENO);

    c.max_connections = 8;
    CHECK_CODE(sluice_stack_new(&c, &s), SLUICE_ERROR_OK);

    /* A buffer too small: refused, and the frame (an ARP request for the connect) stays
     * queued for the next, large enough buffer. */
    uint8_t small[64], big[FRAME_MAX];
    sluice_conn conn;
    CHECK_CODE(sluice_connect(s, 0, IP_B, PORT, &conn), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_stack_poll_transmit(s, 0, small, sizeof small), SLUICE_ERROR_BUFFER_TOO_SMALL);
    CHECK_CODE(sluice_stack_poll_transmit(s, 0, big, FRAME_MAX - 1), SLUICE_ERROR_BUFFER_TOO_SMALL);
    int64_t n = sluice_stack_poll_transmit(s, 0, big, sizeof big);
    CHECK(n >= 42); /* the ARP request */
    CHECK(big[12] == 0x08 && big[13] == 0x06);
    CHECK_CODE(sluice_stack_poll_transmit(s, 0, big, sizeof big), 0);
    /* recv: a zero-length buffer cannot tell data from end of stream. */
    CHECK_CODE(sluice_recv(s, conn, big, 0), SLUICE_ERROR_BUFFER_TOO_SMALL);
    CHECK_CODE(sluice_recv(s, conn, big, sizeof big), SLUICE_ERROR_WOULD_BLOCK);
    CHECK_CODE(sluice_send(s, conn, big, 10), SLUICE_ERROR_WOULD_BLOCK); /* not yet open */
    CHECK_CODE(sluice_send(s, conn, NULL, 0), SLUICE_ERROR_WOULD_BLOCK);
    char why2[8];
    CHECK_CODE(sluice_config_check(&c, why2, 0), SLUICE_ERROR_OK);

    /* Garbage frames: dropped and counted, never an error. */
    sluice_counters k;
    memset(big, 0xff, sizeof big);
    CHECK_CODE(sluice_stack_handle_frame(s, 1, big, 60), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_stack_handle_frame(s, 1, big, 3), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_stack_handle_frame(s, 1, NULL, 0), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_stack_counters(s, &k), SLUICE_ERROR_OK);
    CHECK(k.frames_rx == 3);
    CHECK(k.malformed + k.not_for_us == 3);
    CHECK_CODE(sluice_stack_counter(s, "no_such_counter", &k.frames_rx), SLUICE_ERROR_INVALID_ARGUMENT);

    /* Handles never issued, stale and closed. */
    sluice_conn_info info;
    sluice_listener l, l2;
    CHECK_CODE(sluice_conn_get_info(s, 0, &info), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_conn_get_info(s, 0xdeadbeefcafeull, &info), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_conn_get_info(s, conn ^ 1, &info), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_conn_get_info(s, conn, &info), SLUICE_ERROR_OK);
    CHECK(info.state == SLUICE_TCP_STATE_SYN_SENT);
    CHECK_CODE(sluice_close(s, conn), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_conn_get_info(s, conn, &info), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_close(s, conn), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_accept(s, 12345, &conn), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_listen(s, PORT, 8, &l), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_listen(s, PORT, 8, &l2), SLUICE_ERROR_ADDR_IN_USE);
    CHECK_CODE(sluice_listen(s, 0, 8, &l2), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(sluice_accept(s, l, &conn), SLUICE_ERROR_WOULD_BLOCK);
    CHECK_CODE(sluice_unlisten(s, l), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_accept(s, l, &conn), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_unlisten(s, l), SLUICE_ERROR_INVALID_HANDLE);
    /* The same port again: a new handle; the old one stays refused. */
    CHECK_CODE(sluice_listen(s, PORT, 8, &l2), SLUICE_ERROR_OK);
    CHECK(l2 != l);
    CHECK_CODE(sluice_accept(s, l, &conn), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_accept(s, l2, &conn), SLUICE_ERROR_WOULD_BLOCK);
    /* Bad destinations. */
    CHECK_CODE(sluice_connect(s, 2, IP_B, 0, &conn), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(sluice_connect(s, 2, c.ip, PORT, &conn), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(sluice_connect(s, 2, 0xffffffffu, PORT, &conn), SLUICE_ERROR_INVALID_ARGUMENT);
    sluice_stack_free(s);

    /* Every code has a message; other numbers say so. */
    const char *unknown = sluice_strerror(12345);
    CHECK(unknown != NULL && strcmp(unknown, "unknown error code") == 0);
    for (int code = 0; code >= SLUICE_ERROR_POISONED; code--) {
        const char *m = sluice_strerror(code);
        CHECK(m != NULL && m[0] != 0 && strcmp(m, unknown) != 0);
    }
}

/* Hundreds of stacks in one process: each its own host, nothing shared. */
static void many_stacks(void) {
    enum { STACKS = 300 };
    static sluice_stack *stacks[STACKS];
    sluice_config c;
    CHECK_CODE(sluice_config_default(&c), SLUICE_ERROR_OK);
    c.max_connections = 16;
    c.max_listeners = 2;
    for (int i = 0; i < STACKS; i++) {
        c.ip = 0x0a010000u + (uint32_t)i + 1;
        c.seed = (uint64_t)i;
        CHECK_CODE(sluice_stack_new(&c, &stacks[i]), SLUICE_ERROR_OK);
        sluice_listener l;
        CHECK_CODE(sluice_listen(stacks[i], 80, 4, &l), SLUICE_ERROR_OK);
    }
    /* Each opens one connection to the next: its own ARP request, its own state. */
    uint8_t frame[FRAME_MAX];
    for (int i = 0; i < STACKS; i++) {
        sluice_conn conn;
        CHECK_CODE(sluice_connect(stacks[i], 0, 0x0a010000u + (uint32_t)((i + 1) % STACKS) + 1, 80, &conn),
                   SLUICE_ERROR_OK);
        CHECK(sluice_stack_poll_transmit(stacks[i], 0, frame, sizeof frame) > 0);
    }
    for (int i = 0; i < STACKS; i++) {
        sluice_counters k;
        CHECK_CODE(sluice_stack_counters(stacks[i], &k), SLUICE_ERROR_OK);
        CHECK(k.connections == 1 && k.frames_tx == 1);
        sluice_stack_free(stacks[i]);
    }
}

int main(void) {
    null_pointers();
    bad_input();
    many_stacks();
    transfer();
    printf("abi_test: %u checks passed\n", checks);
    return 0;
}
