// Bad: calls helper 12 (bpf_tail_call), which is not on the whitelist.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static long (*bpf_not_allowed)(void *ctx) = (void *)12;

SEC("xdp")
int xdp_unknown_helper(struct xdp_md *ctx)
{
	bpf_not_allowed(ctx);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
