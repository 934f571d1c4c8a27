//! `nftables.json`: the complete `table inet fwc` as libnftables JSON commands, loadable with
//! `nft -j -f` (the runtime deletes the old table in the same transaction; nothing here deletes
//! or flushes). Typed objects of the `nftables` crate are used for everything the crate can
//! express; raw JSON only for what it cannot (map-level `counter` statements, element comments).
//! Each object is serialised into the file's text as it is emitted (`writer`): no JSON tree of
//! the whole document is built, and named sets stream their elements.
//!
//! # Structure
//!
//! ```text
//! table inet fwc
//!   set <name>_v4 / <name>_v6           every AddrSet, type ipv{4,6}_addr, flags interval (maybe empty)
//!   set <name>_v4_<len> / <name>_v6_<len>  instead, for a big static set: plain hash sets, one
//!                                     per prefix length, matched `ip saddr & <mask> @<name>_v4_<len>`
//!                                     (`crate::place::setlayout`; one rule per length, see below)
//!   set <name>_v4_<len>_s<i>          instead, for a hash set above `SHARD_MAX` elements: its
//!                                     shards by address bits (one rule per shard, see below)
//!   map fwd4_addr, fwd6_addr             inet_proto . inet_service : ipv{4,6}_addr   (hash, counter)
//!   map fwd4_port, fwd6_port             inet_proto . inet_service : inet_service    (hash)
//!   map fwd4r_addr, fwd6r_addr           inet_proto . inet_service : ipv{4,6}_addr   (interval, counter)
//!   map fwd4r_port, fwd6r_port           inet_proto . inet_service : inet_service    (interval)
//!   map fwd4_keep, fwd6_keep             inet_proto . inet_service : ipv{4,6}_addr   (interval, counter)
//!   set fwd_ports_tcp, fwd_ports_udp     inet_service (interval): listen ports of kernel forwards
//!   chain input    filter/input/0     ct state established,related accept; iif lo accept;
//!                                     icmpv6 neighbour discovery accept; ct state invalid drop;
//!                                     user rules; userspace listener accepts;
//!                                     ct status dnat accept (kernel forwards to a local target)
//!   chain forward  filter/forward/0   ct state established,related accept; jump fwd_guard;
//!                                     user rules; ct status dnat accept
//!   chain output   filter/output/0    ct state established,related accept; jump fwd_guard;
//!                                     oif lo accept; icmpv6 neighbour discovery accept;
//!                                     forwarder accepts (IP targets; FORWARDER_SOCKET_MARK for
//!                                     DNS targets); ct status dnat accept; user rules
//!                                     (policy=drop: iifname <container bridge> accept)
//!   -- only with a `containers` block (docs/containers.md):
//!   chain containers   filter/forward/-5  ct state new ct status dnat oifname <bridge> jump containers_rules
//!   chain containers_rules                 the block's rules (ct original proto-dst / ip daddr); policy drop
//!   -- only with kernel forwards:
//!   chain fwd_guard                   (regular, only with max-conns / conn-rate) the guards
//!   chain fwd_dnat                    (regular) the DNAT rules, see below
//!   chain prerouting   nat/prerouting/-100   fib daddr type local jump fwd_dnat
//!   chain nat_output   nat/output/-100       fib daddr type local jump fwd_dnat   (local clients)
//!   chain postrouting  nat/postrouting/100   masquerade fwc's DNAT flows (see below); then
//!                                     the user's masquerade/snat rules (also without forwards)
//!   -- only with QoS classes:
//!   set qos_p<id>                     inet_service (interval): a shape's ports
//!   chain qos_classify                (regular, capped forwards) new flow -> `ct mark` class bits
//!   chain qos_mark     filter/prerouting/-150  ct state new jump qos_classify  (capped forwards)
//!   chain qos_mark_out filter/output/-150      ct state new jump qos_classify  (capped forwards)
//!   chain qos_c<id>                   (regular) meta mark set meta mark & ~MASK | id<<16
//!   chain qos_apply    filter/postrouting/-150 forwards: ct direction {original,reply}
//!                                     ct mark & MASK vmap {…}; then shapes, per packet
//!   -- only with traffic quotas (`quota=`; see `quota`):
//!   quota quota_<forward> / qshape_<shape>   over N bytes (the runtime restores `used`)
//!   chain quota_in / quota_fwd / quota_out   filter/{input,forward,output}/-10: ct status dnat
//!                                     jump fwd_quota; userspace forwards by listen port
//!   chain fwd_quota                   (regular) kernel forwards' flows -> quota name … drop|reject|limit
//!   (a shape's quota is the first rule of its class chain qos_c<id>)
//! ```
//!
//! # Kernel forwards
//!
//! A forward with one target, no `from=` and no listen address is a *map forward*: it adds
//! elements to the maps and costs no rule, so `fwd_dnat` always ends with the same six rules
//! however many forwards there are:
//!
//! ```text
//! meta nfproto ipv4 meta l4proto {tcp,udp} dnat ip to meta l4proto . th dport map @fwd4_addr  : meta l4proto . th dport map @fwd4_port
//! meta nfproto ipv4 meta l4proto {tcp,udp} dnat ip to meta l4proto . th dport map @fwd4r_addr : meta l4proto . th dport map @fwd4r_port
//! meta nfproto ipv4 meta l4proto {tcp,udp} dnat ip to meta l4proto . th dport map @fwd4_keep
//! (the same for ipv6 / ip6)
//! ```
//!
//! A key missing from a map ends that rule, so a packet falls through to the next one.
//! nft 1.0.6 cannot read a map whose *data* is a concatenation (`ipv4_addr . inet_service`)
//! from JSON ("Invalid map type"), so address and port live in two maps with the same keys.
//! Forwards of a single listen port (nearly all) go to the *hash* maps `*_addr` / `*_port`:
//! an interval map with a concatenated key uses the kernel's pipapo backend, whose insert cost
//! grows with the set size (10,000 forwards: ~2 s of `nft -j -f` in interval maps, ~0.3 s in
//! hash maps; docs/performance.md). Listen port *ranges* need interval maps: `*r_addr` /
//! `*r_port` for a range with a fixed target port or mapped onto another range (which keeps
//! the offset by listing each port in `*r_port`), and `*_keep` for a range whose target keeps
//! the port (no target port, or the same range). Exact ports are looked up first.
//! Forwards with several targets (`numgen inc mod N map {…}`), `from=` or a listen address get
//! their own rules, placed before the map rules (those with `from=`/listen address first). A map
//! forward whose key would overlap an earlier one is emitted as its own rule after the map rules
//! (hash maps refuse duplicate keys, interval maps overlaps, and an exact port would shadow a
//! range across the maps; `check` reports the conflict).
//!
//! Masquerade of forwards: only fwc's own DNAT flows. Postrouting matches `ct status dnat` together with the
//! connection's *original* destination port (`ct original proto-dst`) in `fwd_ports_tcp` /
//! `fwd_ports_udp`, the listen ports of every kernel forward. (nft cannot put `ct original
//! proto-dst` into a concatenation, hence one set per protocol.) Docker's DNAT flows are left
//! alone unless docker publishes a port fwc also forwards, which would conflict anyway. No mark
//! bits are used for this, so fwc only ever touches `QOS_MARK_MASK`.
//!
//! `max-conns` and `conn-rate` are enforced for new DNATed flows of the forward
//! (`ct state new ct status dnat meta l4proto … ct original proto-dst …`) with `ct count over N`
//! (reject) and `limit rate over` (drop; burst: the rule's, else the count — what the userspace
//! forwarder does). The guards live in one regular chain, `fwd_guard`, jumped to from the filter
//! `forward` chain (remote clients) and from `output` (clients on the host itself: nat output
//! has already DNATed their flow; the jump precedes `oif lo accept`, since the output hook
//! keeps the pre-DNAT oif, `lo`, for a connection to a local listen address). The `ct count` list and the token bucket belong to the rule,
//! so both paths share one limit. Each guard is one rule, counting its own connections: a
//! `proto="both"` forward gets one per protocol, a forward whose `from=` has both address
//! families one per family (so the limits apply per protocol / family).
//!
//! # Forwards and the filter chains
//!
//! A forward's new connection is judged by the user rules of the chain it passes, and only
//! then accepted by fwc (the accept stands in for the chain's policy): a kernel forward to
//! another host is DNATed in prerouting and routed through `forward`, so `forward`'s user
//! rules see it (destination already the target: `th dport`/`daddr` are the target's); a
//! userspace forward's client connects to the forwarder on this host, so `input`'s user rules
//! see it (destination = the listen port). The forward's own `from=` is an extra condition
//! on top (no DNAT / no accept for other sources). Packets of accepted flows take the
//! `ct state established,related accept` fast path at the top of each chain.
//!
//! # Output with `policy=drop`
//!
//! `output` accepts, before the user rules: neighbour discovery (as `input`); the userspace
//! forwarder's connections to IP-literal targets (daddr + protocol + target ports of every
//! userspace forward); packets whose mark carries [`FORWARDER_SOCKET_MARK`] (the forwarder sets
//! it with `SO_MARK` on its upstream sockets; the only way to let connections to DNS-named
//! targets out, emitted when a userspace forward has one); and, with kernel forwards, the DNATed
//! flows of local clients (`ct status dnat accept`, after the guards).
//!
//! # Source NAT (`masquerade`, `snat`)
//!
//! The user's source NAT rules follow fwc's masquerade of forwards in `postrouting` (declared
//! on its own when there are no kernel forwards), in file order, one rule per address family:
//! `oifname … ip saddr … counter masquerade` / `… snat ip to <to>`; comment
//! `fwc:masquerade:<name>` / `fwc:snat:<name>` (see `snat`).
//!
//! # `policy=reject`
//!
//! The chain's kernel policy is `drop`; after fwc's trailing accepts of forwards, rules with
//! the comment `fwc:chain:<chain>` reject the rest (`meta l4proto tcp reject with tcp reset`,
//! then `reject` — ICMP(v6) port unreachable — or the chain block's `reject-with=`), so a
//! forward still passes a rejecting chain (see `filters`).
//!
//! # Big sets
//!
//! A static set above `setlayout::INTERVAL_MAX` networks per family is a plain hash set per
//! prefix length (`crate::place::setlayout` decides, with controlled prefix expansion). A rule matching
//! it is emitted once per length (and per combination, when both `from` and `to` are such
//! sets): `ip saddr & 255.255.255.0 @bl_v4_24 … drop`, `ip saddr @bl_v4_32 … drop`, all with the
//! rule's comment. The networks are disjoint, so a packet takes at most one of the copies and
//! the copies' counters add up to the rule's. A hash set above `setlayout::SHARD_MAX` elements
//! is split into shards by the address bits after those all its elements share (so listing
//! each kernel set stays about linear: the kernel's dump of a hash set is quadratic in its
//! size); a rule is emitted once per shard, a prefix compare before the lookup:
//! `ip saddr 16.0.0.0/4 ip saddr @bl_v4_32_s1 … drop`. A negated match looks the address up in
//! every shard (`!=`), and so do the other users of a set's alternatives (NAT, quotas, QoS:
//! correct, one lookup per shard). Rules that must stay one nft rule (a `rate` or
//! `log-rate` limit, a forward's guards and round robin, shapes) never see such a set: `select` keeps the
//! sets they use as interval sets (`family::one_alt` asserts it).
//!
//! # Counters and comments
//!
//! Every rule that stands for an fwc rule carries `counter` and the comment
//! `fwc:<kind>:<name>` (see [`rule_comment`] / [`parse_rule_comment`]). NAT chains only see the
//! first packet of a flow, so forward counters count new connections. Map forwards have no rule:
//! their elements in `fwd{4,6}_addr` / `fwd{4,6}r_addr` / `fwd{4,6}_keep` carry the comment
//! and a per-element counter (the maps have a `counter` statement). The `qos_c<id>` rules count
//! every packet and byte of their class.
//!
//! # QoS marks
//!
//! Capped kernel forwards mark the *flow*: a new flow matching one (proto + listen port on a
//! local address, plus `from=`/listen address) gets its class pair into the `ct mark`:
//! `ct mark set ct mark & ~MASK | (up_id << 16)` (classification happens before DNAT, at mangle
//! priority, in prerouting and output). `qos_apply` copies it to each packet's `meta mark`,
//! touching only the mask bits. nft 1.0.6 cannot OR two registers
//! (`meta mark & ~MASK | ct mark & MASK`), so the copy is a verdict map from the ct-mark class
//! bits to one small chain per class that ORs in a constant. Original direction gets the up
//! class, replies the down class (`up_id + 1`).
//!
//! Shapes are classified *per packet* in `qos_apply` (postrouting, where both `iifname` and
//! `oifname` are known, before the tc egress program), by `goto qos_c<id>`:
//! - `dev` + `direction`: egress (default) matches packets leaving through `dev`
//!   (`oifname`), ingress packets that arrived on `dev` (`iifname`; without `dev`, every packet
//!   that arrived at all, `iif != 0`). Without `dev` an egress shape matches every interface.
//! - `from` / `to` / `proto` / `port` describe the *connection* as its first packet saw it
//!   (`ct original ip saddr`, `… daddr`, `meta l4proto`, `ct original proto-dst @qos_p<id>`),
//!   so both directions of a matching connection are charged where they pass `dev`:
//!   `shape from=<lan> dev=<lan-if>` shapes the downloads of that LAN.
//! - A packet gets one class. Forward classes come first (a packet whose flow carries a
//!   forward class for its direction never reaches the shape rules); then the shapes, **most
//!   specific first**: ordered by the number of match properties (`dev`, `from`, `to`,
//!   `proto`, `port`; more first), ties by name. So a catch-all `shape dev=eth0` never shadows
//!   `shape from=@guests dev=eth0`. The order depends only on the rules, not on file
//!   positions, so a rule's digest in the plan covers everything that decides precedence.
//! - Per-packet cost grows with the number of shapes (a few compares each).
//!
//! The class chain `qos_c<id>` counts every packet and byte charged to the class.

mod containers;
mod expr;
mod fam;
mod family;
mod filters;
mod forwards;
mod names;
mod out;
mod persource;
mod prelude;
mod qos_marks;
/// Schedules: the `meta day . meta hour` match of `during=`.
mod schedule;
mod quota;
mod rule_parts;
mod snat;
#[cfg(test)]
mod tests;
mod writer;

use prelude::*;

use containers::*;
use fam::*;
use filters::*;
use forwards::*;
pub use forwards::{health_dispatch, health_probe_targets, kernel_dns};
pub use names::*;
use out::*;
pub use writer::Streamed;
use qos_marks::*;
use snat::*;

/// The nftables ruleset of one host: `{"nftables": [ {"add": …}, … ]}`. Objects (table, sets,
/// maps, chains) come first, then the rules, each in the order below.
pub fn emit(plan: &HostPlan) -> NftDoc {
    let mut out = Out::default();
    ruleset(&mut out, plan);
    out.finish()
}

/// [`emit`] written into `w` as it is produced, in blocks, and hashed on the way: the text of
/// the whole document is never held. The same bytes as [`emit`]'s text; returns their sha256
/// and length.
pub fn emit_to(plan: &HostPlan, w: &mut dyn std::io::Write) -> std::io::Result<Streamed> {
    let mut out = Out::streaming(w);
    ruleset(&mut out, plan);
    out.finish_streamed()
}

/// Every command of the ruleset: all objects, then (from [`Out::start_rules`]) the rules. The
/// few rules written beside their chains' declarations (health-checked forwards) are kept until
/// then; the objects of QoS and quotas are declared before the first filter rule.
fn ruleset(out: &mut Out, plan: &HostPlan) {
    out.add(NfListObject::Table(Table { family: NfFamily::INet, name: NFT_TABLE.into(), handle: None }));
    named_sets(out, plan);
    persource::declare_sets(out, plan);
    let mut nat = KernelForwards::of(plan);
    if let Some(nat) = &mut nat {
        nat.declare_maps(out, plan);
    }
    declare_filter_chains(out, plan);
    let guards = forward_guards(plan);
    if !guards.is_empty() {
        out.chain(chains::FWD_GUARD, None);
    }
    if nat.is_some() {
        declare_nat_chains(out);
        health_chains(out, plan);
        dns_chains(out, plan);
    } else if !plan.snats.is_empty() {
        declare_snat_chain(out);
    }
    declare_qos(out, plan);
    quota::declare_quotas(out, plan);
    out.start_rules();
    for c in &plan.chains {
        match c.kind {
            ChainKind::Containers => containers_chain_rules(out, plan, c),
            _ => filter_chain_rules(out, plan, c, !guards.is_empty(), nat.is_some()),
        }
    }
    for (e, comment, elem_stmts) in guards {
        out.rule_with_elem_stmts(chains::FWD_GUARD, e, Some(comment), elem_stmts);
    }
    if let Some(nat) = &nat {
        nat.rules(out, plan);
    }
    snat_rules(out, plan);
    qos(out, plan);
    quota::quotas(out, plan);
}

/// Both halves (v4, v6) of every set, always: each an interval set, or (a big static set) hash
/// sets, one per prefix length (`crate::place::setlayout`).
fn named_sets(out: &mut Out, plan: &HostPlan) {
    for set in &plan.sets {
        let name = &set.name.value;
        if let Some(d) = set.dynamic {
            out.dynamic_set(set_name(name, false), Fam::V4, d);
            out.dynamic_set(set_name(name, true), Fam::V6, d);
            continue;
        }
        let layout = &plan.layouts[name.as_str()];
        for (fam, f) in FAMS.into_iter().zip(&layout.fams) {
            let v6 = fam == Fam::V6;
            match &f.kind {
                LayoutKind::Interval => out.named_addr_set(set_name(name, v6), fam, f.merged.iter()),
                LayoutKind::Hash { targets, shards, .. } => {
                    for (&(len, _), sh) in targets.iter().zip(shards) {
                        match sh {
                            None => out.hash_addr_set(hash_set_name(name, v6, len), fam, f, len, None),
                            Some(sh) => {
                                for &(i, net, _) in &sh.parts {
                                    out.hash_addr_set(shard_set_name(name, v6, len, i), fam, f, len, Some((net, sh.len)));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
