// Splice fast path (flextoe.txt appendix B, listing 1; acceltcp.txt 4.3): a frame of a
// spliced connection is rewritten for the other connection and sent straight back out.
// The control plane (the engine's `--splice ebpf`) writes one entry per direction when the
// core hands a splice over, keyed by the 4-tuple the frames arrive on, and deletes both
// when the core reports the splice's end. What the program does not rewrite goes on to the
// core's own splice stage (XDP_PASS), which holds the same splice: SYN, FIN, RST and URG
// (the entry pair is marked closing, so the close is the core's from then on: it watches
// both FINs' ACKs and TIME-WAIT), and options other than none or NOP,NOP,timestamps (SACK
// blocks to move), and frames over the MTU. Checksums are updated by the difference over
// the changed words only (the frame's own must be complete, as on a wire).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// The largest IPv4 packet sent back out as it is (a 1500-byte MTU).
#define MAX_IP_LEN 1500

// The IPv4 addresses and TCP ports as they follow each other in a frame whose IPv4 header
// has no options (network order).
struct splice_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
};

// One direction's rewrite; the byte layout sluice_engine::splice_fast_path writes.
struct splice_rule {
	__u8 remote_mac[6];	// the other peer's next hop
	__u8 local_mac[6];	// ours
	__be32 remote_ip;	// the other peer
	__be16 local_port;	// the other connection's ports
	__be16 remote_port;
	__u32 seq_delta;	// added to SEG.SEQ
	__u32 ack_delta;	// added to SEG.ACK
	__u32 ts_delta;		// added to TSval
	__u32 tsecr_delta;	// subtracted from TSecr (the other direction's ts_delta)
	__u8 wscale_in;		// the window field is scaled up by this,
	__u8 wscale_out;	// and down by this
	__u8 closing;		// a FIN or RST passed: everything goes to the core
	__u8 pad;
	struct splice_key partner;	// the other direction's key
	__u32 pad2;
	__u64 packets;		// frames sent back out
	__u64 bytes;		// their payload bytes (retransmissions included)
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct splice_key);
	__type(value, struct splice_rule);
} splices SEC(".maps");

// The header words the rewrite changes, old and new, for bpf_csum_diff.
struct words {
	__u32 w[9];
};

static __always_inline __u16 fold(__s64 sum)
{
	__u32 c = (__u32)sum;

	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return ~c;
}

SEC("xdp")
int xdp_splice(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct tcphdr *tcp;
	struct splice_key key;
	struct splice_rule *rule, *other;
	struct words before, after;
	__u32 *opts = 0;
	__u32 win, payload;
	__u16 ip_len;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->ihl != 5 || ip->protocol != IPPROTO_TCP)
		return XDP_PASS;
	tcp = (void *)(ip + 1);
	if ((void *)(tcp + 1) > data_end)
		return XDP_PASS;
	key.saddr = ip->saddr;
	key.daddr = ip->daddr;
	key.sport = tcp->source;
	key.dport = tcp->dest;
	rule = bpf_map_lookup_elem(&splices, &key);
	if (!rule)
		return XDP_PASS;	// not spliced: the next stage
	if (rule->closing)
		return XDP_PASS;
	if (tcp->syn || tcp->fin || tcp->rst || tcp->urg) {
		// Connection control: the core's splice stage ends or closes it.
		rule->closing = 1;
		other = bpf_map_lookup_elem(&splices, &rule->partner);
		if (other)
			other->closing = 1;
		return XDP_PASS;
	}
	if (!tcp->ack)
		return XDP_PASS;
	if (tcp->doff == 8) {
		opts = (void *)(tcp + 1);
		if ((void *)(opts + 3) > data_end)
			return XDP_PASS;
		// NOP, NOP, kind 8 length 10: the timestamps a Linux peer puts on each segment.
		if (opts[0] != bpf_htonl(0x0101080a))
			return XDP_PASS;
	} else if (tcp->doff != 5) {
		return XDP_PASS;	// SACK blocks and the like: the core moves them
	}
	ip_len = bpf_ntohs(ip->tot_len);
	// A large (GSO) frame: the core cuts it to the other peer's MTU.
	if (ip_len < 20 + tcp->doff * 4 || ip_len > MAX_IP_LEN)
		return XDP_PASS;
	payload = ip_len - 20 - tcp->doff * 4;

	before.w[0] = ip->saddr;
	before.w[1] = ip->daddr;
	__builtin_memcpy(&before.w[2], tcp, 20);
	before.w[7] = opts ? opts[1] : 0;
	before.w[8] = opts ? opts[2] : 0;

	__builtin_memcpy(eth->h_dest, rule->remote_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, rule->local_mac, ETH_ALEN);
	ip->saddr = ip->daddr;	// ours stays the source
	ip->daddr = rule->remote_ip;
	tcp->source = rule->local_port;
	tcp->dest = rule->remote_port;
	tcp->seq = bpf_htonl(bpf_ntohl(tcp->seq) + rule->seq_delta);
	tcp->ack_seq = bpf_htonl(bpf_ntohl(tcp->ack_seq) + rule->ack_delta);
	win = ((__u32)bpf_ntohs(tcp->window) << (rule->wscale_in & 15)) >> (rule->wscale_out & 15);
	tcp->window = bpf_htons(win > 0xffff ? 0xffff : win);
	if (opts) {
		opts[1] = bpf_htonl(bpf_ntohl(opts[1]) + rule->ts_delta);
		opts[2] = bpf_htonl(bpf_ntohl(opts[2]) - rule->tsecr_delta);
	}

	after.w[0] = ip->saddr;
	after.w[1] = ip->daddr;
	__builtin_memcpy(&after.w[2], tcp, 20);
	after.w[7] = opts ? opts[1] : 0;
	after.w[8] = opts ? opts[2] : 0;
	// RFC 1624: the IPv4 header changed in its addresses only; the TCP checksum field
	// itself is the same in both copies, so it adds nothing to the difference.
	ip->check = fold(bpf_csum_diff(before.w, 8, after.w, 8, ~(__u32)ip->check & 0xffff));
	tcp->check = fold(bpf_csum_diff(before.w, 36, after.w, 36, ~(__u32)tcp->check & 0xffff));

	__sync_fetch_and_add(&rule->packets, 1);
	__sync_fetch_and_add(&rule->bytes, payload);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
