// Per-connection counters: packets and bytes per IPv4 TCP/UDP 4-tuple in an LRU hash (the
// least recently seen connection makes room for a new one). The key is the 4-tuple in a
// canonical order (the lower address, then port, first), so both directions of a connection
// share one entry: `a_to_b` counts frames from the key's first endpoint, `b_to_a` the others.
// At ingress that is what the host received; a spliced pair's two directions both pass there.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct four_tuple {
	__u32 addr_a;  // network order; (addr_a, port_a) <= (addr_b, port_b) as numbers
	__u32 addr_b;
	__u16 port_a;
	__u16 port_b;
	__u8 proto;
	__u8 pad[3];
};

struct conn_count {
	__u64 a_to_b_packets;
	__u64 a_to_b_bytes;
	__u64 b_to_a_packets;
	__u64 b_to_a_bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct four_tuple);
	__type(value, struct conn_count);
} conns SEC(".maps");

SEC("xdp")
int xdp_conn_counter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct four_tuple key = {};
	struct conn_count zero = {}, *c;
	__u16 *ports;
	__u32 s, d;
	__u16 sp, dp;
	__u64 len = data_end - data;
	int swap;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	ports = (void *)ip + ip->ihl * 4;
	if ((void *)(ports + 2) > data_end)
		return XDP_PASS;
	s = bpf_ntohl(ip->saddr);
	d = bpf_ntohl(ip->daddr);
	sp = bpf_ntohs(ports[0]);
	dp = bpf_ntohs(ports[1]);
	swap = s > d || (s == d && sp > dp);
	key.addr_a = swap ? ip->daddr : ip->saddr;
	key.addr_b = swap ? ip->saddr : ip->daddr;
	key.port_a = swap ? ports[1] : ports[0];
	key.port_b = swap ? ports[0] : ports[1];
	key.proto = ip->protocol;
	c = bpf_map_lookup_elem(&conns, &key);
	if (!c) {
		// A new connection (or one the LRU evicted): insert zeros, then count.
		if (bpf_map_update_elem(&conns, &key, &zero, BPF_NOEXIST) &&
		    bpf_map_update_elem(&conns, &key, &zero, BPF_ANY))
			return XDP_PASS;
		c = bpf_map_lookup_elem(&conns, &key);
		if (!c)
			return XDP_PASS;
	}
	if (swap) {
		__sync_fetch_and_add(&c->b_to_a_packets, 1);
		__sync_fetch_and_add(&c->b_to_a_bytes, len);
	} else {
		__sync_fetch_and_add(&c->a_to_b_packets, 1);
		__sync_fetch_and_add(&c->a_to_b_bytes, len);
	}
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
