/*
 * mtp_test.c: the C ABI of Sluice's MTP transport (sluice_mtp_* in include/sluice.h) from
 * C. Compiled and run by tests/c_abi.rs under `cargo test -p sluice-ffi`.
 *
 * 1. Two MTP stacks in this process exchange messages through an in-memory wire in
 *    virtual time (10 us each way): each sends the other 100 messages of 1 B to 100 KB
 *    with varied priorities; every message arrives byte-exact with its sender, id,
 *    priority and length, every one is in a READABLE event at the receiver and a
 *    DELIVERED event at the sender, exactly once.
 * 2. Error paths: NULL pointers, a stale (unbound) and a foreign endpoint, a short frame
 *    buffer, a short receive buffer (the message stays), bad destinations, an invalid
 *    config, a garbage frame: error codes and counters, never an abort.
 * 3. Hundreds of MTP stacks in one process, each with an endpoint and a message queued.
 *
 * Exit status 0 and a last line "mtp_test: N checks passed" on success; the first failed
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
#define PORT_A 7001
#define PORT_B 7002
#define MESSAGES 100
#define MAX_MESSAGE (100u * 1024u)
#define DELAY_NS 10000u /* one-way delay of the wire */
#define WIRE_SLOTS 8192 /* frames in flight per direction */
#define FRAME_MAX 1514  /* MTU 1500 + Ethernet header */

static const uint8_t MAC_A[6] = {2, 0, 0, 0, 0, 1};
static const uint8_t MAC_B[6] = {2, 0, 0, 0, 0, 2};

/* Message i's length: 1 B and 100 KB among them, the rest spread between. */
static size_t message_len(unsigned i) {
    if (i == 0)
        return 1;
    if (i == MESSAGES - 1)
        return MAX_MESSAGE;
    return 1 + (size_t)((i * 2654435761u) % MAX_MESSAGE);
}

/* Byte k of message i from the sender `side` (0: A, 1: B). */
static uint8_t pattern(unsigned side, unsigned i, size_t k) {
    return (uint8_t)((k * 131u + i * 17u + side * 101u + (k >> 9)) & 0xffu);
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
static int pump(sluice_mtp_stack *from, link *l) {
    int moved = 0;
    for (;;) {
        CHECK(l->count < WIRE_SLOTS);
        frame *f = &l->slots[(l->head + l->count) % WIRE_SLOTS];
        int64_t n = sluice_mtp_stack_poll_transmit(from, now_ns, f->bytes, sizeof f->bytes);
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
static int deliver(link *l, sluice_mtp_stack *to) {
    int moved = 0;
    while (l->count > 0 && l->slots[l->head].at <= now_ns) {
        frame *f = &l->slots[l->head];
        CHECK_CODE(sluice_mtp_stack_handle_frame(to, now_ns, f->bytes, f->len), SLUICE_ERROR_OK);
        l->head = (l->head + 1) % WIRE_SLOTS;
        l->count--;
        l->carried++;
        moved = 1;
    }
    return moved;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* One host's application: what it sent, what it received, what its events said. */
typedef struct {
    unsigned side;
    uint32_t ip, peer_ip;
    uint16_t port, peer_port;
    sluice_mtp_stack *stack;
    sluice_mtp_endpoint ep;
    int64_t sent_id[MESSAGES];
    unsigned delivered_events[MESSAGES];
    unsigned received[MESSAGES];
    unsigned readable_events, received_total, delivered_total, mismatches, other_events;
} host;

static uint8_t message[MAX_MESSAGE];

static void host_init(host *h, unsigned side) {
    sluice_mtp_config c;
    memset(h, 0, sizeof *h);
    h->side = side;
    h->ip = side ? IP_B : IP_A;
    h->peer_ip = side ? IP_A : IP_B;
    h->port = side ? PORT_B : PORT_A;
    h->peer_port = side ? PORT_A : PORT_B;
    CHECK_CODE(sluice_mtp_config_default(&c), SLUICE_ERROR_OK);
    c.ip = h->ip;
    memcpy(c.mac, side ? MAC_B : MAC_A, 6);
    CHECK_CODE(sluice_mtp_config_check(&c, NULL, 0), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_stack_new(&c, &h->stack), SLUICE_ERROR_OK);
    CHECK(h->stack != NULL);
    CHECK_CODE(sluice_mtp_set_neighbor(h->stack, h->peer_ip, side ? MAC_A : MAC_B), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_bind(h->stack, h->port, &h->ep), SLUICE_ERROR_OK);
    CHECK(h->ep != 0);
    CHECK_CODE(sluice_mtp_local_port(h->stack, h->ep), h->port);
}

/* Queues all MESSAGES messages to the peer (each id returned once). */
static void send_all(host *h) {
    for (unsigned i = 0; i < MESSAGES; i++) {
        size_t len = message_len(i);
        for (size_t k = 0; k < len; k++)
            message[k] = pattern(h->side, i, k);
        int64_t id = sluice_mtp_send(h->stack, now_ns, h->ep, h->peer_ip, h->peer_port,
                                     (uint8_t)(i % 4), 0, message, len);
        CHECK(id >= 0);
        for (unsigned j = 0; j < i; j++)
            CHECK(h->sent_id[j] != id);
        h->sent_id[i] = id;
    }
}

/* The index of the peer's message `id` (by its first byte pattern and length), or -1. */
static int index_of(const int64_t *ids, uint32_t id) {
    for (unsigned i = 0; i < MESSAGES; i++)
        if (ids[i] == (int64_t)id)
            return (int)i;
    return -1;
}

/* Takes events and received messages; `peer_ids` are the ids the peer's sends returned. */
static int serve(host *h, const int64_t *peer_ids) {
    int moved = 0;
    sluice_mtp_event e;
    while (sluice_mtp_poll_event(h->stack, &e) == 1) {
        moved = 1;
        if (e.kind == SLUICE_MTP_EVENT_KIND_READABLE) {
            CHECK(e.endpoint == h->ep);
            h->readable_events++;
        } else if (e.kind == SLUICE_MTP_EVENT_KIND_DELIVERED) {
            int i = index_of(h->sent_id, e.msg_id);
            CHECK(i >= 0);
            CHECK(e.endpoint == h->ep);
            CHECK(e.at_ns <= now_ns && e.at_ns > 0);
            h->delivered_events[i]++;
            h->delivered_total++;
        } else {
            h->other_events++;
        }
    }
    for (;;) {
        sluice_mtp_message_info info;
        int64_t n = sluice_mtp_recv(h->stack, h->ep, message, sizeof message, &info);
        if (n == SLUICE_ERROR_WOULD_BLOCK)
            break;
        CHECK(n >= 0);
        moved = 1;
        int i = index_of(peer_ids, info.msg_id);
        CHECK(i >= 0);
        CHECK((size_t)n == message_len((unsigned)i));
        CHECK(info.len == (uint64_t)n);
        CHECK(info.src_ip == h->peer_ip && info.src_port == h->peer_port);
        CHECK(info.priority == (uint8_t)(i % 4) && info.tc == 0);
        for (int64_t k = 0; k < n; k++)
            if (message[k] != pattern(1 - h->side, (unsigned)i, (size_t)k))
                h->mismatches++;
        h->received[i]++;
        h->received_total++;
    }
    return moved;
}

static void exchange(void) {
    host a, b;
    link ab, ba;
    host_init(&a, 0);
    host_init(&b, 1);
    link_init(&ab);
    link_init(&ba);
    now_ns = 1000;
    send_all(&a);
    send_all(&b);

    unsigned steps = 0;
    for (;;) {
        int moved = 1;
        while (moved) {
            moved = 0;
            moved |= pump(a.stack, &ab);
            moved |= pump(b.stack, &ba);
            moved |= deliver(&ab, b.stack);
            moved |= deliver(&ba, a.stack);
            moved |= serve(&a, b.sent_id);
            moved |= serve(&b, a.sent_id);
        }
        uint64_t t = UINT64_MAX, d;
        if (ab.count)
            t = min_u64(t, ab.slots[ab.head].at);
        if (ba.count)
            t = min_u64(t, ba.slots[ba.head].at);
        CHECK(sluice_mtp_stack_poll_timeout(a.stack, &d) >= 0);
        t = min_u64(t, d);
        CHECK(sluice_mtp_stack_poll_timeout(b.stack, &d) >= 0);
        t = min_u64(t, d);
        int done = a.received_total == MESSAGES && b.received_total == MESSAGES &&
                   a.delivered_total == MESSAGES && b.delivered_total == MESSAGES &&
                   ab.count == 0 && ba.count == 0;
        if (done || t == UINT64_MAX)
            break;
        CHECK(++steps < 10000000);
        if (t > now_ns)
            now_ns = t;
        CHECK(now_ns < 10000000000ull); /* 10 s of virtual time is far more than enough */
        CHECK_CODE(sluice_mtp_stack_handle_timeout(a.stack, now_ns), SLUICE_ERROR_OK);
        CHECK_CODE(sluice_mtp_stack_handle_timeout(b.stack, now_ns), SLUICE_ERROR_OK);
    }

    host *hosts[2] = {&a, &b};
    uint64_t bytes = 0;
    for (unsigned s = 0; s < 2; s++) {
        host *h = hosts[s];
        CHECK(h->received_total == MESSAGES);
        CHECK(h->delivered_total == MESSAGES);
        CHECK(h->readable_events == MESSAGES);
        CHECK(h->mismatches == 0);
        CHECK(h->other_events == 0);
        for (unsigned i = 0; i < MESSAGES; i++) {
            CHECK(h->received[i] == 1);
            CHECK(h->delivered_events[i] == 1);
            bytes += message_len(i);
        }
        sluice_mtp_counters k;
        CHECK_CODE(sluice_mtp_stack_counters(h->stack, &k), SLUICE_ERROR_OK);
        CHECK(k.messages_delivered == MESSAGES);
        CHECK(k.messages_acked == MESSAGES);
        CHECK(k.messages_failed == 0);
        CHECK(k.malformed == 0 && k.bad_checksum == 0 && k.abi_refused == 0);
        CHECK(k.frames_out == (s == 0 ? ab.carried : ba.carried));
        CHECK(k.frames_in == (s == 0 ? ba.carried : ab.carried));
        uint64_t srtt = 0;
        CHECK_CODE(sluice_mtp_srtt(h->stack, h->peer_ip, &srtt), 1);
        CHECK(srtt >= 2 * DELAY_NS);
    }
    printf("exchange: %u messages each way, %llu bytes verified, %llu ns of virtual time\n",
           MESSAGES, (unsigned long long)bytes, (unsigned long long)now_ns);
    sluice_mtp_stack_free(a.stack);
    sluice_mtp_stack_free(b.stack);
    free(ab.slots);
    free(ba.slots);
}

static void error_paths(void) {
    sluice_mtp_config c;
    sluice_mtp_stack *a = NULL, *b = NULL;
    sluice_mtp_endpoint ep = 0, other = 0;
    uint8_t buf[FRAME_MAX], small[100];
    char why[128];

    /* NULL everywhere a pointer goes. */
    CHECK_CODE(sluice_mtp_config_default(NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_config_check(NULL, why, sizeof why), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_config_default(&c), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_stack_new(NULL, &a), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_new(&c, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_max_frame_len(NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_handle_frame(NULL, 0, buf, 10), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_poll_transmit(NULL, 0, buf, sizeof buf), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_poll_timeout(NULL, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_handle_timeout(NULL, 0), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_set_neighbor(NULL, IP_B, MAC_B), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_bind(NULL, 1, &ep), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_unbind(NULL, 1), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_local_port(NULL, 1), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_send(NULL, 0, 1, IP_B, 1, 0, 0, buf, 1), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_recv(NULL, 1, buf, sizeof buf, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_next_len(NULL, 1), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_poll_event(NULL, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_counters(NULL, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_srtt(NULL, IP_B, NULL), SLUICE_ERROR_NULL_POINTER);
    sluice_mtp_stack_free(NULL);

    /* An invalid config: refused with its reason, no stack made. */
    c.max_endpoints = 0;
    CHECK_CODE(sluice_mtp_config_check(&c, why, sizeof why), SLUICE_ERROR_INVALID_CONFIG);
    CHECK(strstr(why, "max_endpoints") != NULL);
    CHECK_CODE(sluice_mtp_stack_new(&c, &a), SLUICE_ERROR_INVALID_CONFIG);
    CHECK(a == NULL);

    CHECK_CODE(sluice_mtp_config_default(&c), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_stack_new(&c, &a), SLUICE_ERROR_OK);
    c.ip = IP_B;
    memcpy(c.mac, MAC_B, 6);
    CHECK_CODE(sluice_mtp_stack_new(&c, &b), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_stack_max_frame_len(a), FRAME_MAX);

    /* NULL arguments on a live stack. */
    CHECK_CODE(sluice_mtp_set_neighbor(a, IP_B, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_bind(a, PORT_A, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_poll_timeout(a, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_handle_frame(a, 0, NULL, 10), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_poll_transmit(a, 0, NULL, sizeof buf), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_poll_event(a, NULL), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_stack_counters(a, NULL), SLUICE_ERROR_NULL_POINTER);

    CHECK_CODE(sluice_mtp_set_neighbor(a, IP_B, MAC_B), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_set_neighbor(b, IP_A, MAC_A), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_bind(a, PORT_A, &ep), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_bind(a, PORT_A, &other), SLUICE_ERROR_ADDR_IN_USE);
    CHECK_CODE(sluice_mtp_bind(b, 0, &other), SLUICE_ERROR_OK); /* ephemeral */
    CHECK(sluice_mtp_local_port(b, other) >= 49152);
    CHECK_CODE(sluice_mtp_send(a, 0, ep, IP_B, 1, 0, 0, NULL, 5), SLUICE_ERROR_NULL_POINTER);
    CHECK_CODE(sluice_mtp_recv(a, ep, NULL, 5, NULL), SLUICE_ERROR_NULL_POINTER);

    /* A foreign endpoint (b's on a), a made-up one, bad destinations. */
    CHECK_CODE(sluice_mtp_send(a, 0, other, IP_B, 1, 0, 0, buf, 1), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_mtp_local_port(a, 0), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_mtp_recv(a, ep + 1, buf, sizeof buf, NULL), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_mtp_send(a, 0, ep, IP_B, 0, 0, 0, buf, 1), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(sluice_mtp_send(a, 0, ep, 0xffffffffu, 9, 0, 0, buf, 1), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(sluice_mtp_recv(a, ep, buf, sizeof buf, NULL), SLUICE_ERROR_WOULD_BLOCK);
    CHECK_CODE(sluice_mtp_next_len(a, ep), SLUICE_ERROR_WOULD_BLOCK);

    /* A short frame buffer takes nothing: the data packet comes out of the next call. */
    uint16_t b_port = (uint16_t)sluice_mtp_local_port(b, other);
    memset(message, 0x5a, 3000);
    CHECK(sluice_mtp_send(a, 0, ep, IP_B, b_port, 0, 0, message, 3000) >= 0);
    CHECK_CODE(sluice_mtp_stack_poll_transmit(a, 0, small, sizeof small), SLUICE_ERROR_BUFFER_TOO_SMALL);
    CHECK_CODE(sluice_mtp_stack_poll_transmit(a, 0, buf, FRAME_MAX - 1), SLUICE_ERROR_BUFFER_TOO_SMALL);
    int64_t n;
    unsigned frames = 0;
    while ((n = sluice_mtp_stack_poll_transmit(a, 0, buf, sizeof buf)) > 0) {
        CHECK_CODE(sluice_mtp_stack_handle_frame(b, 10, buf, (size_t)n), SLUICE_ERROR_OK);
        frames++;
    }
    CHECK(n == 0 && frames >= 3);

    /* A short receive buffer: an error, and the message stays first in line. */
    sluice_mtp_message_info info;
    CHECK_CODE(sluice_mtp_recv(b, other, small, sizeof small, &info), SLUICE_ERROR_BUFFER_TOO_SMALL);
    CHECK_CODE(sluice_mtp_recv(b, other, NULL, 0, NULL), SLUICE_ERROR_BUFFER_TOO_SMALL);
    CHECK_CODE(sluice_mtp_next_len(b, other), 3000);
    CHECK_CODE(sluice_mtp_recv(b, other, message, sizeof message, &info), 3000);
    CHECK(info.len == 3000 && info.src_ip == IP_A && info.src_port == PORT_A);
    CHECK(message[0] == 0x5a && message[2999] == 0x5a);
    CHECK_CODE(sluice_mtp_recv(b, other, message, sizeof message, &info), SLUICE_ERROR_WOULD_BLOCK);

    /* A garbage frame is dropped and counted, not an error. */
    memset(buf, 0xee, 60);
    CHECK_CODE(sluice_mtp_stack_handle_frame(b, 20, buf, 60), SLUICE_ERROR_OK);
    sluice_mtp_counters k;
    CHECK_CODE(sluice_mtp_stack_counters(b, &k), SLUICE_ERROR_OK);
    CHECK(k.malformed + k.not_for_us == 1);
    CHECK(k.messages_delivered == 1);
    CHECK(k.abi_refused == 2); /* the two short receives */

    /* A stale endpoint: unbound, every call with it is refused; the port binds anew. */
    CHECK_CODE(sluice_mtp_unbind(a, ep), SLUICE_ERROR_OK);
    CHECK_CODE(sluice_mtp_unbind(a, ep), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_mtp_send(a, 0, ep, IP_B, b_port, 0, 0, buf, 1), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_mtp_recv(a, ep, buf, sizeof buf, NULL), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_mtp_local_port(a, ep), SLUICE_ERROR_INVALID_HANDLE);
    sluice_mtp_endpoint again = 0;
    CHECK_CODE(sluice_mtp_bind(a, PORT_A, &again), SLUICE_ERROR_OK);
    CHECK(again != ep);
    CHECK_CODE(sluice_mtp_send(a, 0, ep, IP_B, b_port, 0, 0, buf, 1), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_CODE(sluice_mtp_stack_counters(a, &k), SLUICE_ERROR_OK);
    CHECK(k.abi_refused > 10);
    sluice_mtp_stack_free(a);
    sluice_mtp_stack_free(b);
}

/* No global state: STACKS stacks at once, each bound and with a message queued. */
#define STACKS 300
static void many_stacks(void) {
    static sluice_mtp_stack *stacks[STACKS];
    for (unsigned i = 0; i < STACKS; i++) {
        sluice_mtp_config c;
        sluice_mtp_endpoint ep;
        CHECK_CODE(sluice_mtp_config_default(&c), SLUICE_ERROR_OK);
        c.ip = 0x0a010000u + i;
        c.mac[4] = (uint8_t)(i >> 8);
        c.mac[5] = (uint8_t)i;
        CHECK_CODE(sluice_mtp_stack_new(&c, &stacks[i]), SLUICE_ERROR_OK);
        CHECK_CODE(sluice_mtp_bind(stacks[i], 9000, &ep), SLUICE_ERROR_OK);
        CHECK(sluice_mtp_send(stacks[i], 0, ep, IP_B, 9000, 0, 0, (const uint8_t *)"x", 1) >= 0);
    }
    for (unsigned i = 0; i < STACKS; i++)
        sluice_mtp_stack_free(stacks[i]);
    printf("many: %u MTP stacks\n", STACKS);
}

int main(void) {
    exchange();
    error_paths();
    many_stacks();
    printf("mtp_test: %u checks passed\n", checks);
    return 0;
}
