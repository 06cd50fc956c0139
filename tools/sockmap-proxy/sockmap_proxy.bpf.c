// SPDX-License-Identifier: GPL-2.0
/* The sockmap proxy's data path: an SK_SKB verdict program (attached as
 * BPF_SK_SKB_VERDICT, no stream parser) that sends every skb a proxied socket receives
 * out of its peer socket, with bpf_sk_redirect_hash, so the bytes never reach user space.
 * Built with: clang -O2 -g -target bpf (see build.sh). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* The receiving socket's 4-tuple, every field in network byte order (as user space sees
 * it in getsockname/getpeername). Must match struct pair_key in sockmap_proxy.c. */
struct pair_key {
	__u32 local_ip4;
	__u32 remote_ip4;
	__u16 local_port;
	__u16 remote_port;
};

/* Receiving socket's 4-tuple -> its peer socket: the proxy inserts both directions. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, struct pair_key);
	__type(value, __u32);
} peers SEC(".maps");

/* Counters user space prints on SIGTERM. */
enum counter {
	REDIRECTED_SKBS,
	REDIRECTED_BYTES,
	/* No peer in the map (the pair is being inserted or removed): passed to the
	 * receiving socket, where the proxy reads and forwards it by hand. */
	PASSED_SKBS,
	/* Empty skbs (a FIN's): dropped, since the backlog worker that sends a redirected
	 * skb takes a send of 0 bytes for a broken pipe and sets EPIPE on the peer; the
	 * proxy passes EOFs on itself with shutdown(). */
	EMPTY_SKBS,
	COUNTERS,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);

	if (c)
		__sync_fetch_and_add(c, n);
}

SEC("sk_skb")
int sockmap_proxy_verdict(struct __sk_buff *skb)
{
	struct pair_key key = {};
	__u32 remote_port = skb->remote_port;
	__u32 len = skb->len;

	key.local_ip4 = skb->local_ip4;
	key.remote_ip4 = skb->remote_ip4;
	/* local_port is in host byte order. */
	key.local_port = bpf_htons((__u16)skb->local_port);
	/* remote_port is in network byte order, in the upper 16 bits on little-endian
	 * kernels that shift it there (as the ctx rewrite does for __sk_buff); take it
	 * from wherever it is so the key does not depend on that detail. */
	if (remote_port & 0xffff0000)
		remote_port >>= 16;
	key.remote_port = (__u16)remote_port;

	if (len == 0) {
		count(EMPTY_SKBS, 1);
		return SK_DROP;
	}
	if (bpf_sk_redirect_hash(skb, &peers, &key, 0) == SK_PASS) {
		count(REDIRECTED_SKBS, 1);
		count(REDIRECTED_BYTES, len);
		return SK_PASS;
	}
	count(PASSED_SKBS, 1);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
