//! Traffic quotas of kernel forwards (`quota="500GB/month"`): one named nft quota
//! object per forward, `quota_<rule>` (`quota quota_game { over 500000000000 bytes }`), and
//! the rules that charge every packet of the forward's DNATed flows to it, both directions,
//! and act once it is used up.
//!
//! ```text
//! quota quota_<rule>                 over N bytes (the runtime sets `used` when it creates it)
//! chain quota_in   filter/input/-10    iifname != "lo" ct status dnat jump fwd_quota
//! chain quota_fwd  filter/forward/-10  ct status dnat jump fwd_quota
//! chain quota_out  filter/output/-10   ct status dnat jump fwd_quota
//! chain fwd_quota  (regular)           per forward and protocol:
//!     meta l4proto tcp ct original proto-dst 27015 [ct original ip daddr/saddr …]
//!         quota name "quota_game" drop | reject | limit rate over R bytes/second drop
//! ```
//!
//! A **userspace** forward's clients talk to the forwarder on this host, so their packets pass
//! `input` (to the listen port) and `output` (from it): the same quota object is charged there,
//! by port, with no DNAT involved — the client side of the forwarder's connections, both
//! directions:
//!
//! ```text
//! chain quota_in   …  meta l4proto tcp tcp dport 8443 [ip daddr LISTEN] [ip saddr FROM] quota name "quota_api" drop
//! chain quota_out  …  meta l4proto tcp tcp sport 8443 [ip saddr LISTEN] [ip daddr FROM] quota name "quota_api" drop
//! ```
//!
//! The chains run before the filter chains' `ct state established,related accept`, so every
//! packet is counted: a forward to another host passes `forward` both ways; a local client's
//! packets leave through `output` and the replies come in through `input`; a forward to this
//! host is the other way round. (`iifname != "lo"` in `quota_in`: a local client's packet to a
//! local target passes `output` and then `input` on `lo`, and is counted once.) The quota object
//! counts bytes at layer 3 (IP header included) of every packet that reaches its rule (the
//! kernel lists `used` capped at the limit). The fallback rate is one token
//! bucket per protocol rule. The rules carry the forward's comment and no counter (the
//! forward's counters stay counts of new connections).

use super::expr::*;
use super::fam::*;
use super::family::*;
use super::forwards::*;
use super::names::*;
use super::out::*;
use super::prelude::*;

/// Chain names of the quota chains.
pub(super) mod qchains {
    pub const QUOTA: &str = "fwd_quota";
    pub const QUOTA_IN: &str = "quota_in";
    pub const QUOTA_FWD: &str = "quota_fwd";
    pub const QUOTA_OUT: &str = "quota_out";
}

/// Priority of the quota base chains: before the filter chains (0) and the containers chain (-5).
const QUOTA_PRIO: i32 = -10;

/// Forwards with a quota: kernel ones, userspace ones.
fn quota_forwards<'a>(plan: &HostPlan<'a>) -> (Vec<&'a ForwardRule>, Vec<&'a ForwardRule>) {
    let with = |fs: &[&'a ForwardRule]| fs.iter().copied().filter(|f| f.quota.is_some()).collect();
    (with(&plan.kernel_forwards), with(&plan.userspace_forwards))
}

/// The quota objects of the host's forwards and shapes with a quota, and the quota chains.
pub(super) fn declare_quotas(out: &mut Out, plan: &HostPlan) {
    let (forwards, userspace) = quota_forwards(plan);
    // Shapes' quota objects (their rules are in the class chains: `shape_class_rule`).
    let mut objects: Vec<(String, u64)> = plan
        .shapes
        .iter()
        .filter_map(|sh| sh.quota.as_ref().map(|q| (crate::features::quota::shape_object_name(&sh.name.value), q.value.limit_bytes)))
        .collect();
    objects.extend(forwards.iter().chain(&userspace).map(|f| (crate::features::quota::object_name(&f.name.value), f.quota.as_ref().expect("filtered").value.limit_bytes)));
    objects.sort();
    for (name, bytes) in &objects {
        out.raw_object(&json!({"add": {"quota": {"family": "inet", "table": NFT_TABLE, "name": name, "bytes": bytes, "inv": true}}}));
    }
    if forwards.is_empty() && userspace.is_empty() {
        return;
    }
    out.chain(qchains::QUOTA, None);
    for (name, hook) in QUOTA_HOOKS {
        out.chain(name, Some((NfChainType::Filter, hook, QUOTA_PRIO, NfChainPolicy::Accept)));
    }
}

/// The hooked quota chains.
const QUOTA_HOOKS: [(&str, NfHook); 3] = [(qchains::QUOTA_IN, NfHook::Input), (qchains::QUOTA_FWD, NfHook::Forward), (qchains::QUOTA_OUT, NfHook::Output)];

/// The rules that charge the forwards' packets to their quotas (objects and chains:
/// [`declare_quotas`]).
pub(super) fn quotas(out: &mut Out, plan: &HostPlan) {
    let (forwards, userspace) = quota_forwards(plan);
    if forwards.is_empty() && userspace.is_empty() {
        return;
    }
    for (name, hook) in QUOTA_HOOKS {
        let mut e = Vec::new();
        if hook == NfHook::Input {
            e.push(m(meta(MetaKey::Iifname), Operator::NEQ, s("lo")));
        }
        e.push(ct_status_dnat());
        e.push(jump(qchains::QUOTA));
        out.rule(name, e, None);
    }
    for f in &userspace {
        for (chain, incoming) in [(qchains::QUOTA_IN, true), (qchains::QUOTA_OUT, false)] {
            for e in socket_matches(plan, f, incoming) {
                out.rule(chain, with_action(e, f), Some(rule_comment(RuleKind::Forward, &f.name.value)));
            }
        }
    }
    for f in forwards {
        let comment = rule_comment(RuleKind::Forward, &f.name.value);
        for e in flow_matches(plan, f) {
            out.rule(qchains::QUOTA, with_action(e, f), Some(comment.clone()));
        }
    }
}

/// A shape's quota: the first rule of its class chain `qos_c<id>` (every packet of the shape,
/// after `qos_apply` classified it), `quota name "qshape_<rule>" drop` or the fallback rate
/// (`check` refuses reject: postrouting cannot reject).
pub(super) fn shape_class_rule(out: &mut Out, plan: &HostPlan, c: &crate::artifacts::QosClass) {
    if c.kind != RuleKind::Shape {
        return;
    }
    let Some(sh) = plan.shapes.iter().find(|s| s.name.value == c.rule) else { return };
    let Some(q) = &sh.quota else { return };
    let e = action(Vec::new(), crate::features::quota::shape_object_name(&sh.name.value), q.value.over, false);
    out.rule(&class_chain(c.id), e, Some(rule_comment(RuleKind::Shape, &sh.name.value)));
}

/// `matches` + `quota name "quota_<rule>"` + the over-quota action.
fn with_action(e: Vec<S>, f: &ForwardRule) -> Vec<S> {
    let q = &f.quota.as_ref().expect("a forward with a quota").value;
    action(e, crate::features::quota::object_name(&f.name.value), q.over, f.proto == ForwardProto::Tcp)
}

/// `e` + `quota name "<object>"` + what happens over the quota (`tcp`: reject with a TCP reset).
fn action(mut e: Vec<S>, object: String, over: crate::features::quota::OverQuota, tcp: bool) -> Vec<S> {
    e.push(Statement::Quota(stmt::QuotaOrQuotaRef::QuotaRef(object.into())));
    match over {
        crate::features::quota::OverQuota::Drop => e.push(drop_()),
        crate::features::quota::OverQuota::Reject => e.push(reject(tcp)),
        crate::features::quota::OverQuota::Rate { bytes_per_sec } => {
            let rate = bytes_per_sec.min(u64::from(u32::MAX)) as u32;
            e.push(Statement::Limit(Limit {
                rate,
                rate_unit: Some("bytes".into()),
                per: Some("second".into()),
                // One second's worth: a TCP window's bursts pass, the average holds.
                burst: Some(rate),
                burst_unit: Some("bytes".into()),
                inv: Some(true),
            }));
            e.push(drop_());
        }
    }
    e
}

/// The matches of a userspace forward's client-side packets: to the listen port (`input`,
/// `incoming`) or from it (`output`), per protocol and, with `from=` or a listen address, per
/// family.
fn socket_matches(plan: &HostPlan, f: &ForwardRule, incoming: bool) -> Vec<Vec<S>> {
    let from = f.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let fams: Vec<Option<Fam>> = match (&from, listen_addr(f)) {
        (None, None) => vec![None],
        (None, Some(a)) => vec![Some(Fam::of(&a))],
        (Some(p), a) => families(&[p], a.map(|a| Fam::of(&a))),
    };
    let ports = [f.listen.value.ports];
    let (local, remote) = if incoming { ("daddr", "saddr") } else { ("saddr", "daddr") };
    let mut out = Vec::new();
    for fam in fams {
        for proto in fproto_list(f.proto) {
            let mut v = if incoming { l4_match(Some(fproto(*proto)), Some(&ports), None) } else { l4_match(Some(fproto(*proto)), None, Some(&ports)) };
            if let Some(fam) = fam {
                if let Some(a) = listen_addr(f) {
                    v.push(eq(payload(fam.proto(), local), s(a.to_string())));
                }
                if let Some(a) = from.as_ref().and_then(|p| one_alt(p, fam)) {
                    v.push(a.on(payload(fam.proto(), remote)));
                }
            }
            out.push(v);
        }
    }
    out
}

fn fproto_list(p: ForwardProto) -> &'static [ForwardProto] {
    match p {
        ForwardProto::Both => &[ForwardProto::Tcp, ForwardProto::Udp],
        ForwardProto::Tcp => &[ForwardProto::Tcp],
        ForwardProto::Udp => &[ForwardProto::Udp],
    }
}

/// The matches that pick every packet of a forward's DNATed flows, either direction (by the
/// connection's original tuple): one per protocol (`ct original proto-dst` needs a single
/// protocol before it) and, with `from=` or a listen address, per family.
fn flow_matches(plan: &HostPlan, f: &ForwardRule) -> Vec<Vec<S>> {
    let from = f.from.as_ref().map(|m| addr_parts(plan, &m.value));
    let fams: Vec<Option<Fam>> = match (&from, listen_addr(f)) {
        (None, None) => vec![None],
        (None, Some(a)) => vec![Some(Fam::of(&a))],
        (Some(p), a) => families(&[p], a.map(|a| Fam::of(&a))),
    };
    let mut out = Vec::new();
    for fam in fams {
        for proto in fproto_list(f.proto) {
            let mut v = vec![l4proto_is(*proto), eq(ct_orig("proto-dst"), port_expr(f.listen.value.ports))];
            if let Some(fam) = fam {
                if let Some(a) = listen_addr(f) {
                    v.push(eq(ct_orig_addr(fam, "daddr"), s(a.to_string())));
                }
                if let Some(a) = from.as_ref().and_then(|p| one_alt(p, fam)) {
                    v.push(a.on(ct_orig_addr(fam, "saddr")));
                }
            }
            out.push(v);
        }
    }
    out
}
