// Bad: reads 8 bytes at offset 8 of a map value declared 8 bytes long.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} small SEC(".maps");

SEC("xdp")
int xdp_value_too_small(struct xdp_md *ctx)
{
	__u32 key = 1;
	__u64 *v = bpf_map_lookup_elem(&small, &key);

	if (!v)
		return XDP_PASS;
	return v[1] == 7 ? XDP_DROP : XDP_PASS;
}

char _license[] SEC("license") = "GPL";
