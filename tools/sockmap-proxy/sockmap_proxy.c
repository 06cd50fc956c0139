// SPDX-License-Identifier: GPL-2.0
/* sockmap_proxy: a Linux L4 proxy whose bytes are relayed by the kernel's sockmap.
 *
 *   sockmap_proxy --listen ADDR:PORT --backend ADDR:PORT --bpf sockmap_proxy.bpf.o
 *
 * It accepts a client, connects to the backend, and inserts both sockets in a SOCKHASH
 * keyed by the receiving socket's 4-tuple whose value is the peer socket; the SK_SKB
 * verdict program (sockmap_proxy.bpf.c) then redirects each skb to the peer's egress.
 * What arrived before the insertion (or was passed up while a pair was incomplete) is
 * forwarded by hand. epoll watches both sockets for EOF and errors: an EOF is passed on
 * with shutdown(SHUT_WR) once the peer has had every byte acknowledged; an error, or both
 * EOFs, close the pair. On SIGTERM or SIGINT it prints its counters as key=value lines. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked/received */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

/* Descriptors above this are refused (the pair table is indexed by descriptor). */
#define MAX_FDS 65536
/* How long an EOF waits for the bytes before it to be acknowledged by the peer. */
#define DRAIN_LIMIT_NS (10ull * 1000 * 1000 * 1000)
/* How long bytes read by hand wait for the redirected ones before them (see
 * wait_delivered): normally well under a millisecond. */
#define WAIT_LIMIT_NS (500ull * 1000 * 1000)
#define EVENTS 256
/* TCP_ESTABLISHED of include/net/tcp_states.h (tcpi_state's value). */
#define STATE_ESTABLISHED 1
#define STATE_CLOSE_WAIT 8

/* Must match struct pair_key in sockmap_proxy.bpf.c. */
struct pair_key {
	uint32_t local_ip4;
	uint32_t remote_ip4;
	uint16_t local_port;
	uint16_t remote_port;
};

/* The counters of the BPF program's array map, in its order. */
enum { REDIRECTED_SKBS, REDIRECTED_BYTES, PASSED_SKBS, EMPTY_SKBS, BPF_COUNTERS };

struct pair {
	int fd[2];		/* client, backend */
	struct pair_key key[2];	/* each socket's own 4-tuple */
	int connected;		/* the backend connection is up and both are in the map */
	int eof[2];		/* side i has sent its FIN */
	int shut[2];		/* side i's write side is shut (the other's EOF passed on) */
	uint64_t eof_at[2];	/* when side i's EOF was seen (for the drain limit) */
	uint64_t acked0[2];	/* tcpi_bytes_acked before anything was sent (1 for a SYN) */
	struct pair *next_draining;
	int draining;
};

static struct pair *pairs[MAX_FDS];
static struct pair *draining;
/* Descriptors of pairs closed during one epoll batch, closed after it, so that a
 * descriptor number accept() reuses cannot receive a closed pair's pending event. */
static int doomed[2 * EVENTS + 2];
static int ndoomed;
static volatile sig_atomic_t stop;

static struct {
	uint64_t accepted, paired, closed, backend_failed, closed_early, insert_failed,
	    copied_bytes, resets, drain_timeouts, refused, stale_evicted;
} stats;

static int peers_fd, epfd;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_addr(const char *s, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	char *end;
	long port;

	if (!colon || (size_t)(colon - s) >= sizeof(host))
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	port = strtol(colon + 1, &end, 10);
	if (*end || port <= 0 || port > 65535)
		return -1;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int own_key(int fd, struct pair_key *k)
{
	struct sockaddr_in local, remote;
	socklen_t len = sizeof(local);

	if (getsockname(fd, (struct sockaddr *)&local, &len) < 0)
		return -1;
	len = sizeof(remote);
	if (getpeername(fd, (struct sockaddr *)&remote, &len) < 0)
		return -1;
	memset(k, 0, sizeof(*k));
	k->local_ip4 = local.sin_addr.s_addr;
	k->remote_ip4 = remote.sin_addr.s_addr;
	k->local_port = local.sin_port;
	k->remote_port = remote.sin_port;
	return 0;
}

static void watch(int fd, uint32_t events, int op)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };

	if (epoll_ctl(epfd, op, fd, &ev) < 0)
		fprintf(stderr, "sockmap_proxy: epoll_ctl(%d): %s\n", fd, strerror(errno));
}

static void unlink_draining(struct pair *p)
{
	struct pair **pp;

	if (!p->draining)
		return;
	for (pp = &draining; *pp; pp = &(*pp)->next_draining)
		if (*pp == p) {
			*pp = p->next_draining;
			break;
		}
	p->draining = 0;
}

static void close_pair(struct pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->fd[i] < 0)
			continue;
		if (p->connected)
			bpf_map_delete_elem(peers_fd, &p->key[i]);
		pairs[p->fd[i]] = NULL;
		epoll_ctl(epfd, EPOLL_CTL_DEL, p->fd[i], NULL);
		if (ndoomed < (int)(sizeof(doomed) / sizeof(doomed[0])))
			doomed[ndoomed++] = p->fd[i];
		else
			close(p->fd[i]);
	}
	unlink_draining(p);
	stats.closed++;
	free(p);
}

/* Writes all of buf to fd (non-blocking), waiting for room: used only for the few bytes
 * that reached user space. A peer that takes nothing for 200 ms fails the write (the
 * caller resets the pair): the loop must never stall every other pair, nor SIGTERM. */
static int write_all(int fd, const char *buf, size_t n)
{
	int waits = 0;

	while (n > 0) {
		ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EAGAIN) {
			struct epoll_event ev;
			int one, ready;
			struct epoll_event want = { .events = EPOLLOUT };

			if (++waits > 4 || stop)
				return -1;
			one = epoll_create1(0);
			if (one < 0)
				return -1;
			epoll_ctl(one, EPOLL_CTL_ADD, fd, &want);
			ready = epoll_wait(one, &ev, 1, 50);
			close(one);
			(void)ready;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

static int tcp_info_of(int fd, struct tcp_info *ti)
{
	socklen_t len = sizeof(*ti);

	memset(ti, 0, sizeof(*ti));
	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &len);
}

/* Whether side i has received its peer's FIN (it counts in tcpi_bytes_received). */
static int fin_received(const struct tcp_info *ti)
{
	/* CLOSE_WAIT, LAST_ACK, CLOSING, TIME_WAIT and CLOSE of include/net/tcp_states.h: a
	 * socket in FIN_WAIT2 that gets the FIN goes to CLOSE (a timewait sock takes over),
	 * and the verdict cannot redirect that last skb (the proxy copies it). */
	return ti->tcpi_state == 8 || ti->tcpi_state == 9 || ti->tcpi_state == 11 ||
	       ti->tcpi_state == 6 || ti->tcpi_state == 7;
}

/* Waits (bounded) until side o has had acknowledged every byte side i received before
 * the `chunk` bytes just read from it: redirected skbs leave from a kernel work queue, so
 * bytes written by hand at once could overtake them. Returns -1 (the caller resets the
 * pair) on SIGTERM, when side o can no longer deliver (its peer reset or closed it: the
 * acknowledgements will never come), or after WAIT_LIMIT_NS: a wait here holds up every
 * other pair, so it must stay short (seen in CI: a client gone mid-transfer held the loop
 * 10 s per 64 KiB chunk, the measurement after it served nothing, SIGTERM went unheard). */
static int wait_delivered(struct pair *p, int i, size_t chunk)
{
	uint64_t deadline = now_ns() + WAIT_LIMIT_NS;
	struct tcp_info from, to;
	int o = 1 - i;

	while (tcp_info_of(p->fd[i], &from) == 0 && tcp_info_of(p->fd[o], &to) == 0) {
		uint64_t before = from.tcpi_bytes_received - (uint64_t)fin_received(&from) - chunk;
		struct timespec ms = { 0, 1000000 };

		if (to.tcpi_bytes_acked - p->acked0[o] >= before)
			return 0;
		if (stop || (to.tcpi_state != STATE_ESTABLISHED && to.tcpi_state != STATE_CLOSE_WAIT))
			return -1;
		if (now_ns() > deadline) {
			stats.drain_timeouts++;
			return -1;
		}
		nanosleep(&ms, NULL);
	}
	return -1;
}

/* Forwards what is readable on side i to the other side by hand; returns 1 at EOF,
 * -1 on an error, 0 otherwise. */
static int copy_readable(struct pair *p, int i)
{
	char buf[65536];

	for (;;) {
		ssize_t r = recv(p->fd[i], buf, sizeof(buf), MSG_DONTWAIT);

		if (r > 0) {
			if (wait_delivered(p, i, (size_t)r) < 0)
				return -1;
			if (write_all(p->fd[1 - i], buf, (size_t)r) < 0)
				return -1;
			stats.copied_bytes += (uint64_t)r;
			continue;
		}
		if (r == 0)
			return 1;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? 0 : -1;
	}
}

static void on_eof(struct pair *p, int i)
{
	if (p->eof[i])
		return;
	p->eof[i] = 1;
	p->eof_at[i] = now_ns();
	/* Stop reading side i; errors and hang-ups are still reported. */
	watch(p->fd[i], 0, EPOLL_CTL_MOD);
	if (!p->draining) {
		p->draining = 1;
		p->next_draining = draining;
		draining = p;
	}
}

/* Side i is at EOF: shut the other side's write once it has had every byte side i
 * received acknowledged (the redirected ones leave from a kernel work queue, so a FIN
 * sent at once could overtake them). Returns 1 when the pair is done. */
static int pass_eof(struct pair *p, int i, uint64_t now)
{
	struct tcp_info from, to;
	int o = 1 - i;

	if (p->shut[o])
		return p->eof[o] && p->shut[i];
	if (tcp_info_of(p->fd[i], &from) < 0 || tcp_info_of(p->fd[o], &to) < 0)
		return 1;
	/* bytes_received counts data and side i's FIN (but no SYN); bytes_acked counts an
	 * active opener's SYN, hence the baseline taken before anything was sent. */
	if (to.tcpi_bytes_acked - p->acked0[o] + 1 < from.tcpi_bytes_received) {
		if (now - p->eof_at[i] < DRAIN_LIMIT_NS)
			return 0;
		stats.drain_timeouts++;
	}
	shutdown(p->fd[o], SHUT_WR);
	p->shut[o] = 1;
	return p->eof[o] && p->shut[i];
}

static void check_draining(void)
{
	uint64_t now = now_ns();
	struct pair *p = draining, *next;

	for (; p; p = next) {
		int done = 0, pending = 0;

		next = p->next_draining;
		for (int i = 0; i < 2 && !done; i++) {
			if (!p->eof[i])
				continue;
			done = pass_eof(p, i, now);
			pending |= !p->shut[1 - i];
		}
		if (done)
			close_pair(p);
		else if (!pending)
			unlink_draining(p);
	}
}

/* The tuple `key` is still in the sockhash for another pair: that pair's socket lives
 * on although its peer reused the port, so it is dead; close it. Returns 1 if one was. */
static int evict_stale(const struct pair *self, const struct pair_key *key)
{
	for (int fd = 0; fd < MAX_FDS; fd++) {
		struct pair *q = pairs[fd];

		if (!q || q == self || !q->connected)
			continue;
		for (int i = 0; i < 2; i++)
			if (!memcmp(&q->key[i], key, sizeof(*key))) {
				stats.stale_evicted++;
				close_pair(q);
				return 1;
			}
	}
	return 0;
}

static int established(const struct pair *p)
{
	struct tcp_info ti;

	for (int i = 0; i < 2; i++)
		if (tcp_info_of(p->fd[i], &ti) < 0 || ti.tcpi_state != STATE_ESTABLISHED)
			return 0;
	return 1;
}

/* The backend connection is up: insert both sockets, forward early bytes, watch EOFs. */
static void join(struct pair *p)
{
	int one = 1, err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(p->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
		stats.backend_failed++;
		close_pair(p);
		return;
	}
	/* The sockmap takes only established sockets: a client that has already sent its
	 * FIN (or gone) by now is closed, its bytes unrelayed. */
	if (!established(p)) {
		stats.closed_early++;
		close_pair(p);
		return;
	}
	for (int i = 0; i < 2; i++) {
		struct tcp_info ti;

		setsockopt(p->fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (own_key(p->fd[i], &p->key[i]) < 0 || tcp_info_of(p->fd[i], &ti) < 0) {
			stats.closed_early++;
			close_pair(p);
			return;
		}
		p->acked0[i] = ti.tcpi_bytes_acked;
	}
	for (int i = 0; i < 2; i++) {
		uint32_t peer = (uint32_t)p->fd[1 - i];

		int rc = bpf_map_update_elem(peers_fd, &p->key[i], &peer, BPF_NOEXIST);

		if (rc < 0 && errno == EEXIST && evict_stale(p, &p->key[i]))
			rc = bpf_map_update_elem(peers_fd, &p->key[i], &peer, BPF_NOEXIST);
		if (rc < 0) {
			if (errno == EOPNOTSUPP && !established(p))
				stats.closed_early++; /* a FIN came in meanwhile */
			else if (stats.insert_failed++ == 0)
				fprintf(stderr, "sockmap_proxy: inserting a socket in the sockhash: %s\n",
					strerror(errno));
			if (i == 1) /* the first entry was made */
				bpf_map_delete_elem(peers_fd, &p->key[0]);
			close_pair(p);
			return;
		}
	}
	p->connected = 1;
	stats.paired++;
	for (int i = 0; i < 2; i++) {
		int r;

		/* Bytes that arrived before the insertion wait in the receive queue until the
		 * next segment wakes the verdict. Setting SO_RCVLOWAT calls the socket's
		 * data_ready now (tcp_set_rcvlowat), so the verdict redirects them at once, in
		 * order with whatever follows. */
		setsockopt(p->fd[i], SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
		/* What the verdict passed up (it arrived on the backend between the two
		 * insertions, when its entry was missing) is forwarded by hand. */
		r = copy_readable(p, i);

		if (r < 0) {
			stats.resets++;
			close_pair(p);
			return;
		}
		watch(p->fd[i], EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
		if (r == 1)
			on_eof(p, i);
	}
}

static void on_accept(int lfd, const struct sockaddr_in *backend)
{
	for (;;) {
		int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), b;
		struct pair *p;

		if (c < 0)
			return;
		stats.accepted++;
		b = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c >= MAX_FDS || b < 0 || b >= MAX_FDS || !(p = calloc(1, sizeof(*p)))) {
			stats.refused++;
			close(c);
			if (b >= 0)
				close(b);
			continue;
		}
		p->fd[0] = c;
		p->fd[1] = b;
		pairs[c] = pairs[b] = p;
		if (connect(b, (const struct sockaddr *)backend, sizeof(*backend)) < 0 &&
		    errno != EINPROGRESS) {
			stats.backend_failed++;
			close_pair(p);
			continue;
		}
		/* The client's bytes wait in its receive queue until the pair is joined. */
		watch(c, EPOLLRDHUP, EPOLL_CTL_ADD);
		watch(b, EPOLLOUT, EPOLL_CTL_ADD);
	}
}

static void on_event(int fd, uint32_t events)
{
	struct pair *p = pairs[fd];
	int i;

	if (!p)
		return;
	i = p->fd[0] == fd ? 0 : 1;
	if (!p->connected) {
		if (i == 1 && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			join(p);
		else if (events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
			stats.closed_early++;
			close_pair(p);
		}
		return;
	}
	if (events & EPOLLERR) {
		stats.resets++;
		close_pair(p);
		return;
	}
	if (events & EPOLLIN) {
		/* Passed up by the verdict (no peer entry at that moment), or the EOF. */
		int r = copy_readable(p, i);

		if (r < 0) {
			stats.resets++;
			close_pair(p);
			return;
		}
		if (r == 1)
			on_eof(p, i);
	} else if (events & (EPOLLRDHUP | EPOLLHUP)) {
		on_eof(p, i);
	}
}

static void print_counters(int counters_fd)
{
	uint64_t bpf[BPF_COUNTERS] = { 0 };

	for (uint32_t k = 0; k < BPF_COUNTERS; k++)
		bpf_map_lookup_elem(counters_fd, &k, &bpf[k]);
	printf("accepted=%llu\npaired=%llu\nclosed=%llu\nbackend_failed=%llu\n"
	       "closed_early=%llu\ninsert_failed=%llu\nrefused=%llu\nresets=%llu\n"
	       "drain_timeouts=%llu\nstale_evicted=%llu\n"
	       "copied_bytes=%llu\nredirected_skbs=%llu\nredirected_bytes=%llu\n"
	       "passed_skbs=%llu\nempty_skbs=%llu\n",
	       (unsigned long long)stats.accepted, (unsigned long long)stats.paired,
	       (unsigned long long)stats.closed, (unsigned long long)stats.backend_failed,
	       (unsigned long long)stats.closed_early,
	       (unsigned long long)stats.insert_failed, (unsigned long long)stats.refused,
	       (unsigned long long)stats.resets, (unsigned long long)stats.drain_timeouts,
	       (unsigned long long)stats.stale_evicted,
	       (unsigned long long)stats.copied_bytes,
	       (unsigned long long)bpf[REDIRECTED_SKBS],
	       (unsigned long long)bpf[REDIRECTED_BYTES], (unsigned long long)bpf[PASSED_SKBS],
	       (unsigned long long)bpf[EMPTY_SKBS]);
	fflush(stdout);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: sockmap_proxy --listen ADDR:PORT --backend ADDR:PORT --bpf FILE.bpf.o\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct sockaddr_in listen_sa, backend_sa;
	const char *listen_s = NULL, *backend_s = NULL, *obj_path = NULL;
	struct bpf_object *obj;
	struct bpf_program *prog;
	struct bpf_map *peers, *counters;
	struct epoll_event events[EVENTS];
	struct sigaction sa = { .sa_handler = on_signal };
	struct rlimit nofile = { 65536, 65536 };
	int lfd, one = 1, err;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--listen"))
			listen_s = argv[i + 1];
		else if (!strcmp(argv[i], "--backend"))
			backend_s = argv[i + 1];
		else if (!strcmp(argv[i], "--bpf"))
			obj_path = argv[i + 1];
		else
			usage();
	}
	if (argc % 2 != 1 || !listen_s || !backend_s || !obj_path)
		usage();
	if (parse_addr(listen_s, &listen_sa) < 0 || parse_addr(backend_s, &backend_sa) < 0) {
		fprintf(stderr, "sockmap_proxy: addresses are IPv4 ADDR:PORT\n");
		return 2;
	}
	setrlimit(RLIMIT_NOFILE, &nofile);
	libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
	obj = bpf_object__open_file(obj_path, NULL);
	if (!obj) {
		fprintf(stderr, "sockmap_proxy: open %s: %s\n", obj_path, strerror(errno));
		return 1;
	}
	err = bpf_object__load(obj);
	if (err) {
		fprintf(stderr, "sockmap_proxy: load %s: %s (needs root: CAP_BPF)\n", obj_path,
			strerror(-err));
		return 1;
	}
	prog = bpf_object__find_program_by_name(obj, "sockmap_proxy_verdict");
	peers = bpf_object__find_map_by_name(obj, "peers");
	counters = bpf_object__find_map_by_name(obj, "counters");
	if (!prog || !peers || !counters) {
		fprintf(stderr, "sockmap_proxy: %s lacks the verdict program or its maps\n", obj_path);
		return 1;
	}
	peers_fd = bpf_map__fd(peers);
	/* BPF_SK_SKB_VERDICT (Linux 5.13+): the verdict sees every skb as it arrives, with no
	 * stream parser to frame messages; an L4 proxy has no messages to frame. */
	if (bpf_prog_attach(bpf_program__fd(prog), peers_fd, BPF_SK_SKB_VERDICT, 0) < 0) {
		fprintf(stderr, "sockmap_proxy: attach the verdict to the sockhash: %s\n",
			strerror(errno));
		return 1;
	}

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(lfd, (struct sockaddr *)&listen_sa, sizeof(listen_sa)) < 0 ||
	    listen(lfd, 4096) < 0) {
		fprintf(stderr, "sockmap_proxy: listen on %s: %s\n", listen_s, strerror(errno));
		return 1;
	}
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0) {
		fprintf(stderr, "sockmap_proxy: epoll_create1: %s\n", strerror(errno));
		return 1;
	}
	watch(lfd, EPOLLIN, EPOLL_CTL_ADD);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "sockmap_proxy: listening on %s, backend %s\n", listen_s, backend_s);

	while (!stop) {
		/* Poll often only while an EOF waits for its bytes to be acknowledged. */
		int n = epoll_wait(epfd, events, EVENTS, draining ? 1 : 200);

		for (int k = 0; k < n; k++) {
			if (events[k].data.fd == lfd)
				on_accept(lfd, &backend_sa);
			else
				on_event(events[k].data.fd, events[k].events);
		}
		if (draining)
			check_draining();
		while (ndoomed > 0)
			close(doomed[--ndoomed]);
	}
	print_counters(bpf_map__fd(counters));
	return 0;
}
