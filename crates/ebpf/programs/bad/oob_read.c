// Bad: proves 14 bytes of Ethernet header, then reads the IPv4 protocol byte at offset 23.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_oob_read(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	unsigned char *p = data;

	if (data + 14 > data_end)
		return XDP_PASS;
	if (p[23] == 6)
		return XDP_DROP;
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
