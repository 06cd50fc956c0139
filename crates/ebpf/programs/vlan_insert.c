// VLAN insert (flextoe.txt 5.1, the egress half of vlan_strip.c): pushes one 802.1Q tag whose
// VID and PCP come from the array map `vlan` (entry 0), so the control plane retags a running
// link (`sluice ctl map set ID vlan 00000000 VALUE`); VID 0 turns it off. A frame that is
// already tagged passes as it is (no double tagging).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct vlan_conf {
	__u16 vid;  // 1..4094; 0: off (frames pass untagged)
	__u8 pcp;   // priority code point, 0..7
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct vlan_conf);
} vlan SEC(".maps");

SEC("xdp")
int xdp_vlan_insert(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	unsigned char *p;
	struct vlan_conf *conf;
	__u32 key = 0;
	__u16 tci;

	conf = bpf_map_lookup_elem(&vlan, &key);
	if (!conf || (conf->vid & 0x0fff) == 0)
		return XDP_PASS;
	tci = ((__u16)(conf->pcp & 7) << 13) | (conf->vid & 0x0fff);
	if (data + ETH_HLEN > data_end)
		return XDP_PASS;
	p = data;
	if (*(__u16 *)(p + 12) == bpf_htons(ETH_P_8021Q))
		return XDP_PASS;
	// Four bytes of headroom in front for the tag; the packet pointers are stale after it.
	if (bpf_xdp_adjust_head(ctx, -4))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	p = data;
	if (data + ETH_HLEN + 4 > data_end)
		return XDP_ABORTED;
	// Destination and source MAC (12 bytes) move 4 bytes towards the new start.
	for (int i = 0; i < 12; i++)
		p[i] = p[i + 4];
	*(__u16 *)(p + 12) = bpf_htons(ETH_P_8021Q);
	*(__u16 *)(p + 14) = bpf_htons(tci);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
