// Bad: a loop whose end no bound proves (the Collatz sequence of the ingress ifindex).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_unbounded_loop(struct xdp_md *ctx)
{
	__u32 n = ctx->ingress_ifindex;

	while (n > 1)
		n = (n & 1) ? 3 * n + 1 : n / 2;
	return XDP_PASS + n;
}

char _license[] SEC("license") = "GPL";
