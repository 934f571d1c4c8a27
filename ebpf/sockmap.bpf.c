// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * fwc sockmap redirection: an sk_skb stream verdict program for the userspace forwarder's
 * established TCP connections. Both sockets of a connection sit in `fwc_peers`, each under the
 * other's socket cookie; data arriving on one is sent out of the other (egress redirect)
 * inside the kernel, without a wakeup of the forwarder per chunk. A socket whose peer entry
 * is gone drops what arrives (bpf_sk_redirect_hash returns SK_DROP): the forwarder removes
 * the entries only when the connection ends.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, __u64);   /* socket cookie of the receiving socket */
	__type(value, __u32); /* the socket its data goes out of */
} fwc_peers SEC(".maps");

SEC("sk_skb/stream_verdict")
int fwc_redirect(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);

	return bpf_sk_redirect_hash(skb, &fwc_peers, &cookie, 0);
}
