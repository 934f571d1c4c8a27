// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * fwc eBPF QoS: a tc classifier on the egress of shaped interfaces (TCX, fallback clsact).
 *
 * class id = (skb->mark & glob.mark_mask) >> glob.mark_shift. Each class has a token bucket
 * (rate bytes/s, burst bytes) charged with the packet's wire length. Credit is signed: a packet
 * is admitted while credit >= 0 and may push it negative (debt, at most one packet). Over rate:
 *   - FWC_QOS_F_EDT: stamp skb->tstamp = now + debt/rate (fq paces it), drop past `horizon`;
 *   - else FWC_QOS_F_ECN and the packet is ECN-capable TCP and debt < ecn_debt: CE-mark, pass;
 *   - else drop.
 * Short-flow fast pass (FWC_QOS_F_FASTPASS): a count-min sketch keeps a decaying byte count
 * per 5-tuple; a packet of a flow whose count is below glob.fp_threshold that would be dropped
 * is let through when the class's fast-pass bucket (fp_rate bytes/s, fp_budget deep) has credit
 * and the class debt is below one burst, so short requests are not dropped behind an elephant
 * of the same class. It is charged to both buckets: the class's long-term rate holds, short
 * flows take at most fp_rate over rate, and the rest of the class keeps rate - fp_rate.
 *
 * Only TC_ACT_OK and TC_ACT_SHOT are returned (TC_ACT_STOLEN would pass under TCX).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "qos_maps.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fwc_qos_glob);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fwc_qos_glob SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FWC_QOS_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct fwc_qos_class_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fwc_qos_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FWC_QOS_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct fwc_qos_class_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fwc_qos_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FWC_QOS_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct fwc_qos_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fwc_qos_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FWC_QOS_CMS_DEPTH * FWC_QOS_CMS_WIDTH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fwc_qos_cms SEC(".maps");

#define NSEC_PER_SEC 1000000000ULL
/* Refill at most this much elapsed time at once; keeps elapsed*rate inside u64 for rates up to
 * 2^64 / 8e9 ~ 2.3e9 bytes/s (the loader refuses faster classes). */
#define MAX_ELAPSED_NS (8ULL * NSEC_PER_SEC)

enum verdict { V_PASS, V_FAST, V_ECN, V_PACE, V_DROP };

/* Add el ns worth of rate to a bucket (remainder carried in *rem), capped at depth. */
static __always_inline __s64 refill(__s64 credit, __u64 *rem, __u64 el, __u64 rate, __u64 depth)
{
	__u64 t = el * rate + *rem;
	credit += (__s64)(t / NSEC_PER_SEC);
	*rem = t % NSEC_PER_SEC;
	if (credit > (__s64)depth) {
		credit = (__s64)depth;
		*rem = 0;
	}
	return credit;
}

struct pkt {
	__u64 hash;  /* 5-tuple hash, 0 when the packet could not be parsed */
	__u8 tcp;    /* IPv4/IPv6 TCP */
	__u8 ect;    /* ECN field is ECT(0) or ECT(1) */
};

static __always_inline __u64 mix64(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* Parse just enough: L3 offset (Ethernet or raw IP), protocol, ECN bits, ports. */
static __always_inline void parse(struct __sk_buff *skb, struct pkt *p)
{
	__u8 b[40];
	__u32 off = 0;
	__u16 proto = bpf_ntohs((__u16)skb->protocol);
	__u8 l4 = 0;
	__u64 h = 0x9e3779b97f4a7c15ULL;

	p->hash = 0;
	p->tcp = 0;
	p->ect = 0;
	if (proto != ETH_P_IP && proto != ETH_P_IPV6)
		return;
	/* Ethernet devices have a 14-byte header in front at tc egress; L3 devices none. */
	if (bpf_skb_load_bytes(skb, 12, b, 3) == 0 && (((__u16)b[0] << 8) | b[1]) == proto &&
	    (b[2] >> 4) == (proto == ETH_P_IP ? 4 : 6))
		off = ETH_HLEN;

	if (proto == ETH_P_IP) {
		if (bpf_skb_load_bytes(skb, off, b, 20))
			return;
		if ((b[0] >> 4) != 4)
			return;
		__u32 ihl = (b[0] & 0xf) * 4;
		p->ect = (b[1] & 3) != 0;
		l4 = b[9];
		__u32 sa = ((__u32)b[12] << 24) | ((__u32)b[13] << 16) | ((__u32)b[14] << 8) | b[15];
		__u32 da = ((__u32)b[16] << 24) | ((__u32)b[17] << 16) | ((__u32)b[18] << 8) | b[19];
		h = mix64(h ^ (((__u64)sa << 32) | da));
		h = mix64(h ^ l4);
		/* fragments after the first carry no ports */
		if ((((__u16)(b[6] & 0x1f) << 8) | b[7]) != 0)
			goto done;
		off += ihl < 20 ? 20 : (ihl > 60 ? 60 : ihl);
	} else {
		if (bpf_skb_load_bytes(skb, off, b, 40))
			return;
		if ((b[0] >> 4) != 6)
			return;
		__u8 tc = (__u8)(((b[0] & 0xf) << 4) | (b[1] >> 4));
		p->ect = (tc & 3) != 0;
		l4 = b[6];
		__u64 w[4];
		__builtin_memcpy(w, b + 8, 32);
		h = mix64(h ^ w[0]);
		h = mix64(h ^ w[1]);
		h = mix64(h ^ w[2]);
		h = mix64(h ^ w[3]);
		h = mix64(h ^ l4);
		off += 40; /* extension headers: hashed without ports */
	}
	p->tcp = l4 == IPPROTO_TCP;
	if (l4 == IPPROTO_TCP || l4 == IPPROTO_UDP) {
		__u8 ports[4];
		if (bpf_skb_load_bytes(skb, off, ports, 4) == 0) {
			__u32 pp = ((__u32)ports[0] << 24) | ((__u32)ports[1] << 16) |
				   ((__u32)ports[2] << 8) | ports[3];
			h = mix64(h ^ pp);
		}
	}
done:
	p->hash = h | 1; /* never 0 */
}

/* Add `len` to the flow's cells and return its (decayed) byte count, before this packet. */
static __always_inline __u64 cms_update(__u64 hash, __u64 len, __u64 now, __u32 window_shift)
{
	__u64 epoch = (now >> (window_shift & 63)) & 0xffff;
	__u32 h1 = (__u32)hash, h2 = (__u32)(hash >> 32) | 1;
	__u64 est = FWC_QOS_CMS_BYTES_MASK;

#pragma unroll
	for (int i = 0; i < FWC_QOS_CMS_DEPTH; i++) {
		__u32 idx = i * FWC_QOS_CMS_WIDTH + ((h1 + i * h2) & (FWC_QOS_CMS_WIDTH - 1));
		__u64 *cell = bpf_map_lookup_elem(&fwc_qos_cms, &idx);
		if (!cell)
			return 0;
		__u64 c = *cell;
		__u64 bytes = c & FWC_QOS_CMS_BYTES_MASK;
		__u64 diff = (epoch - (c >> FWC_QOS_CMS_EPOCH_SHIFT)) & 0xffff;
		bytes = diff >= 48 ? 0 : bytes >> diff;
		if (bytes < est)
			est = bytes;
		bytes += len;
		if (bytes > FWC_QOS_CMS_BYTES_MASK)
			bytes = FWC_QOS_CMS_BYTES_MASK;
		/* Racy across CPUs by design: a lost update only under-counts a flow. */
		*cell = (epoch << FWC_QOS_CMS_EPOCH_SHIFT) | bytes;
	}
	return est;
}

SEC("classifier")
int fwc_qos(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct fwc_qos_glob *g = bpf_map_lookup_elem(&fwc_qos_glob, &zero);
	if (!g)
		return TC_ACT_OK;
	__u32 id = g->mark_mask ? (skb->mark & g->mark_mask) >> (g->mark_shift & 31) : 0;
	if (id >= FWC_QOS_MAX_CLASSES)
		id = 0;
	__u64 len = skb->wire_len ? skb->wire_len : skb->len;

	struct fwc_qos_stats *st = bpf_map_lookup_elem(&fwc_qos_stats, &id);
	if (!st)
		return TC_ACT_OK;
	struct fwc_qos_class_cfg *cfg = id ? bpf_map_lookup_elem(&fwc_qos_cfg, &id) : 0;
	if (!cfg || cfg->rate == 0 || !(g->flags & FWC_QOS_G_ENABLED)) {
		st->passed_pkts++;
		st->passed_bytes += len;
		return TC_ACT_OK;
	}
	struct fwc_qos_class_state *s = bpf_map_lookup_elem(&fwc_qos_state, &id);
	if (!s)
		return TC_ACT_OK;

	__u64 rate = cfg->rate, burst = cfg->burst;
	__u32 flags = cfg->flags, gen = cfg->gen;
	__u64 ecn_debt = cfg->ecn_debt, fp_budget = cfg->fp_budget, fp_rate = cfg->fp_rate;
	__u64 horizon = cfg->horizon;
	__u64 now = bpf_ktime_get_ns();

	struct pkt p = {};
	int short_flow = 0;
	if (flags & (FWC_QOS_F_FASTPASS | FWC_QOS_F_ECN))
		parse(skb, &p);
	if ((flags & FWC_QOS_F_FASTPASS) && p.hash)
		short_flow = cms_update(p.hash, len, now, g->fp_window_shift) < g->fp_threshold;

	enum verdict v;
	__s64 debt_after = 0;
	bpf_spin_lock(&s->lock);
	if (s->gen != gen) {
		s->gen = gen;
		s->credit = (__s64)burst;
		s->fp_credit = (__s64)fp_budget;
		s->last_ns = now;
		s->rem = 0;
		s->fp_rem = 0;
	} else if (now > s->last_ns) {
		__u64 el = now - s->last_ns;
		s->last_ns = now;
		if (el >= MAX_ELAPSED_NS) {
			s->credit = (__s64)burst;
			s->fp_credit = (__s64)fp_budget;
			s->rem = 0;
			s->fp_rem = 0;
		} else {
			s->credit = refill(s->credit, &s->rem, el, rate, burst);
			s->fp_credit = refill(s->fp_credit, &s->fp_rem, el, fp_rate, fp_budget);
		}
	}
	__s64 credit = s->credit;
	__u64 debt = credit < 0 ? (__u64)(-credit) : 0;
	if (credit >= 0) {
		v = V_PASS;
	} else if (flags & FWC_QOS_F_EDT) {
		v = debt < horizon ? V_PACE : V_DROP;
	} else if (short_flow && s->fp_credit > 0 && debt < burst) {
		v = V_FAST;
		s->fp_credit -= (__s64)len;
	} else if ((flags & FWC_QOS_F_ECN) && p.tcp && p.ect && debt < ecn_debt) {
		v = V_ECN;
	} else {
		v = V_DROP;
	}
	if (v != V_DROP)
		s->credit = credit - (__s64)len;
	debt_after = debt;
	bpf_spin_unlock(&s->lock);

	switch (v) {
	case V_DROP:
		st->dropped_pkts++;
		st->dropped_bytes += len;
		return TC_ACT_SHOT;
	case V_PACE: {
		__u64 t = now + debt_after * NSEC_PER_SEC / rate;
		if (t > skb->tstamp)
			skb->tstamp = t;
		st->paced_pkts++;
		break;
	}
	case V_ECN:
		if (bpf_skb_ecn_set_ce(skb))
			st->ecn_pkts++;
		break;
	case V_FAST:
		st->fast_pkts++;
		st->fast_bytes += len;
		break;
	default:
		break;
	}
	st->passed_pkts++;
	st->passed_bytes += len;
	return TC_ACT_OK;
}
