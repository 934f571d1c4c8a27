/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fwc eBPF QoS: the one header that fixes every map layout.
 *
 * Every field is a fixed-width u32/u64 (or the 4-byte bpf_spin_lock), padding is explicit,
 * and every struct is a multiple of 8 bytes. ebpf/src/maps.rs mirrors each struct with a
 * #[repr(C)] Rust type and a test checks size and every offset, so a change here that is not
 * made there fails `cargo test -p fwc-qos`.
 *
 * Maps (all pinned by name under the pin root, default /sys/fs/bpf/fwc/):
 *   fwc_qos_glob   ARRAY[1]                       struct fwc_qos_glob        (mark mask, fast pass)
 *   fwc_qos_cfg    ARRAY[FWC_QOS_MAX_CLASSES]     struct fwc_qos_class_cfg   (written by the loader)
 *   fwc_qos_state  ARRAY[FWC_QOS_MAX_CLASSES]     struct fwc_qos_class_state (owned by the program)
 *   fwc_qos_stats  PERCPU_ARRAY[FWC_QOS_MAX_CLASSES] struct fwc_qos_stats    (counters)
 *   fwc_qos_cms    ARRAY[FWC_QOS_CMS_DEPTH * FWC_QOS_CMS_WIDTH] __u64        (count-min sketch)
 * Index of cfg/state/stats = class id = (skb->mark & mark_mask) >> mark_shift; index 0 of
 * fwc_qos_stats counts packets that carry no class.
 */
#ifndef FWC_QOS_MAPS_H
#define FWC_QOS_MAPS_H

#include <linux/types.h>

/* Class ids are 1..4095 (QOS_MARK_MASK 0x0fff0000 >> 16); the arrays are indexed by id. */
#define FWC_QOS_MAX_CLASSES 4096

/* Count-min sketch geometry: DEPTH rows of WIDTH cells. */
#define FWC_QOS_CMS_DEPTH 4
#define FWC_QOS_CMS_WIDTH 4096
/* A cell: upper 16 bits = epoch (window number mod 2^16), lower 48 bits = bytes. */
#define FWC_QOS_CMS_EPOCH_SHIFT 48
#define FWC_QOS_CMS_BYTES_MASK ((1ULL << 48) - 1)

/* fwc_qos_class_cfg.flags */
#define FWC_QOS_F_ECN 0x1      /* over rate: CE-mark ECN-capable TCP while debt < ecn_debt */
#define FWC_QOS_F_EDT 0x2      /* over rate: pace with skb->tstamp (root qdisc is fq) */
#define FWC_QOS_F_FASTPASS 0x4 /* short flows may pass over rate, from their own bucket */

/* fwc_qos_glob.flags */
#define FWC_QOS_G_ENABLED 0x1  /* 0 = pass everything untouched (still counted) */

struct fwc_qos_glob {
	__u32 mark_mask;     /* bits of skb->mark that carry the class: 0x0fff0000 */
	__u32 mark_shift;    /* class id = (mark & mask) >> shift: 16 */
	__u32 flags;         /* FWC_QOS_G_* */
	__u32 fp_window_shift; /* sketch window = 2^shift ns; counts halve every window */
	__u64 fp_threshold;  /* a flow whose decayed byte count is below this is short */
	__u64 _reserved;
};                           /* 32 bytes */

struct fwc_qos_class_cfg {
	__u64 rate;      /* bytes per second (wire length); 0 = no such class, pass */
	__u64 burst;     /* bucket depth in bytes */
	__u64 ecn_debt;  /* FWC_QOS_F_ECN: CE-mark while debt (bytes) is below this */
	__u64 fp_budget; /* FWC_QOS_F_FASTPASS: depth (bytes) of the fast-pass bucket */
	__u64 fp_rate;   /* FWC_QOS_F_FASTPASS: refill (bytes/s) of the fast-pass bucket: the most
			    short flows may take over rate, so the rest of the class keeps rate - fp_rate */
	__u64 horizon;   /* FWC_QOS_F_EDT: most debt (bytes) paced before dropping */
	__u32 flags;     /* FWC_QOS_F_* */
	__u32 gen;       /* generation: when it differs from the state's, the bucket restarts full */
};                       /* 56 bytes */

struct fwc_qos_class_state {
	struct bpf_spin_lock lock; /* 4 bytes */
	__u32 gen;       /* cfg.gen this state belongs to */
	__s64 credit;    /* bytes; negative = debt */
	__u64 last_ns;   /* bpf_ktime_get_ns() of the last refill */
	__u64 rem;       /* refill remainder, in byte*ns/s units (< 1e9) */
	__s64 fp_credit; /* fast-pass bucket, bytes (refilled at cfg.fp_rate up to cfg.fp_budget) */
	__u64 fp_rem;    /* its refill remainder */
};                       /* 48 bytes */

struct fwc_qos_stats {
	__u64 passed_pkts;  /* within rate (includes fast-pass, ECN-marked and paced packets) */
	__u64 passed_bytes;
	__u64 paced_pkts;   /* given a later departure time (EDT) */
	__u64 ecn_pkts;     /* CE-marked */
	__u64 dropped_pkts;
	__u64 dropped_bytes;
	__u64 fast_pkts;    /* over rate but let through by the short-flow fast pass */
	__u64 fast_bytes;
};                          /* 64 bytes */

#endif
