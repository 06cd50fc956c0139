// Per-port counter: frames and bytes per IPv4 TCP/UDP destination port in an array map,
// declared the legacy way (SEC("maps") struct bpf_map_def) so both map styles are exercised.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// libbpf 1.x no longer declares it; the layout the loader reads.
struct bpf_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
};

struct port_count {
	__u64 frames;
	__u64 bytes;
};

struct bpf_map_def SEC("maps") port_counts = {
	.type = BPF_MAP_TYPE_ARRAY,
	.key_size = sizeof(__u32),
	.value_size = sizeof(struct port_count),
	.max_entries = 65536,
};

SEC("xdp")
int xdp_port_counter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	__u16 *ports;
	__u32 port;
	struct port_count *count;

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
	port = bpf_ntohs(ports[1]);
	count = bpf_map_lookup_elem(&port_counts, &port);
	if (!count)
		return XDP_PASS;
	__sync_fetch_and_add(&count->frames, 1);
	__sync_fetch_and_add(&count->bytes, data_end - data);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
