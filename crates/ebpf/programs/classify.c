// Flow classification into traffic classes (flextoe.txt 5.1) that feed the flow scheduler's
// rates. Each IPv4 TCP/UDP frame's 5-tuple gets a class: an exact rule in `rules` first, else
// the class of its destination port in `port_class`, else of its source port, else 0 (no
// class; a class out of range counts as none). A classified flow is recorded in `flows` (an
// LRU hash, by the 5-tuple as the frame carries it); the service reads it when a connection
// is established and gives the connection its class's rate from `class_rate` (bits per
// second; 0: the policy's own). Attach at egress (the 5-tuple is then local -> remote; the
// lookup tries either order).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_CLASSES 64

struct five_tuple {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct five_tuple);
	__type(value, __u32);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);  // a port, host order
	__type(value, __u32);
} port_class SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CLASSES);
	__type(key, __u32);  // a class
	__type(value, __u64);
} class_rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct five_tuple);
	__type(value, __u32);
} flows SEC(".maps");

SEC("xdp")
int xdp_classify(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct five_tuple key = {};
	__u16 *ports;
	__u32 port, class = 0, *c;

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
	key.saddr = ip->saddr;
	key.daddr = ip->daddr;
	key.sport = ports[0];
	key.dport = ports[1];
	key.proto = ip->protocol;
	c = bpf_map_lookup_elem(&rules, &key);
	if (c && *c < MAX_CLASSES)
		class = *c;
	if (!class) {
		port = bpf_ntohs(ports[1]);
		c = bpf_map_lookup_elem(&port_class, &port);
		if (c)
			class = *c;
	}
	if (!class) {
		port = bpf_ntohs(ports[0]);
		c = bpf_map_lookup_elem(&port_class, &port);
		if (c)
			class = *c;
	}
	c = bpf_map_lookup_elem(&flows, &key);
	if (c && *c == class)
		return XDP_PASS;
	if (class)
		bpf_map_update_elem(&flows, &key, &class, BPF_ANY);
	else if (c)
		bpf_map_delete_elem(&flows, &key);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
