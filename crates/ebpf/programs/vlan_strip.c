// VLAN strip (flextoe.txt 5.1): removes one 802.1Q tag by moving the MAC addresses 4 bytes
// towards the payload and advancing the frame's start with bpf_xdp_adjust_head.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

SEC("xdp")
int xdp_vlan_strip(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	unsigned char *p = data;

	if (data + 18 > data_end)
		return XDP_PASS;
	if (*(__u16 *)(p + 12) != bpf_htons(ETH_P_8021Q))
		return XDP_PASS;
	// Destination and source MAC (12 bytes) move over the 4-byte tag.
	for (int i = 11; i >= 0; i--)
		p[i + 4] = p[i];
	if (bpf_xdp_adjust_head(ctx, 4))
		return XDP_ABORTED;
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
