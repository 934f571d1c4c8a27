//! Bits of `skb->mark` / `ct mark` fwc uses: the QoS class bits (shared by the nftables rules and
//! the eBPF program) and the forwarder's socket mark. fwc leaves every other bit alone.

/// Bits of `skb->mark` / `ct mark` that carry the QoS class. fwc leaves the other bits alone,
/// so it coexists with other users of marks (kube-proxy, wireguard, …).
pub const QOS_MARK_MASK: u32 = 0x0fff_0000;
/// Shift of the class id inside the mark: `mark = class_id << QOS_MARK_SHIFT`.
pub const QOS_MARK_SHIFT: u32 = 16;
/// Class ids are 1..=QOS_MAX_CLASS_ID (0 means "no class").
pub const QOS_MAX_CLASS_ID: u32 = QOS_MARK_MASK >> QOS_MARK_SHIFT;

/// The socket mark (`SO_MARK`) the userspace forwarder puts on its upstream sockets, so the
/// `output` chain can let its connections to DNS-named targets out (there is no address to
/// match). Bit 13: outside [`QOS_MARK_MASK`] (`0x0fff0000`), so it never collides with a QoS
/// class and the eBPF program ignores it; and clear of the low bits others are known to use:
/// kube-proxy / kubelet mark 0x4000 (masquerade) and 0x8000 (KUBE-MARK-DROP — kubelet's
/// KUBE-FIREWALL drops `mark & 0x8000` in OUTPUT, so 0x8000 would drop the forwarder's traffic
/// on Kubernetes nodes), Cilium 0x0f00, Istio 0x539. Only processes with `CAP_NET_ADMIN` can
/// set `SO_MARK`, so the accept is no hole for unprivileged users.
pub const FORWARDER_SOCKET_MARK: u32 = 0x0000_2000;
const _: () = assert!(FORWARDER_SOCKET_MARK & QOS_MARK_MASK == 0);
