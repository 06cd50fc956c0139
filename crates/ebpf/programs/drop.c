// Drops every frame.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp/drop_all")
int xdp_drop_all(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
