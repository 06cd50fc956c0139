// The linked-list traversal offload handler (flexins.txt 5.6; docs/offload.md), as an eBPF
// program of Sluice's offload type (section "offload"): the frame is [0,8) the response
// length (written here), [8,...) the request in and the response out. It follows
// next-pointers in the registered region with bpf_sluice_region_read until the key, at most
// max_hops nodes (and never more than MAX_HOPS: the loop's bound the verifier proves).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static long (*bpf_sluice_region_read)(void *dst, __u32 size, __u64 addr) = (void *)0x5100;

#define VALUE_LEN 64
#define MAX_HOPS 64

struct node {
	__u64 key;
	__u64 next;
	__u8 value[VALUE_LEN];
};

SEC("offload")
int list_traversal(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct node n;
	__u64 head, key;
	__u32 max_hops;

	if (data + 8 + VALUE_LEN > data_end)
		return XDP_ABORTED;
	head = *(__u64 *)(data + 8);
	key = *(__u64 *)(data + 16);
	max_hops = *(__u32 *)(data + 24);
	__builtin_memset(&n, 0, sizeof(n));
	for (int i = 0; i < MAX_HOPS; i++) {
		if (i >= max_hops || head == 0)
			break;
		if (bpf_sluice_region_read(&n, sizeof(n), head) != 0)
			return XDP_ABORTED;
		if (n.key == key) {
			__builtin_memcpy(data + 8, n.value, VALUE_LEN);
			*(__u32 *)data = VALUE_LEN;
			return XDP_TX;
		}
		head = n.next;
	}
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
