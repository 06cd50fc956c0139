// Firewall by 5-tuple: a frame whose IPv4 TCP/UDP 5-tuple is a key of `rules` (up to 16384,
// room for `sluice bench extensions`' 10k) is dropped and
// the rule's hit counter incremented; every other frame passes. The control plane writes the
// rules (BTF-style map definition, as libbpf's bpf_helpers.h declares them).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

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
	__uint(max_entries, 16384);
	__type(key, struct five_tuple);
	__type(value, __u64);
} rules SEC(".maps");

SEC("xdp")
int xdp_firewall(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct five_tuple key = {};
	__u16 *ports;
	__u64 *hits;

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
	hits = bpf_map_lookup_elem(&rules, &key);
	if (!hits)
		return XDP_PASS;
	__sync_fetch_and_add(hits, 1);
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
