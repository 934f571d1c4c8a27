//! Lints: rules that are valid but almost certainly not what the operator meant. Warnings
//! with spans (`fwc check --deny-warnings` turns them into a failing exit for CI):
//! - `no-ssh-allow`: `input policy=drop` and no `allow` that lets SSH (tcp/22) in;
//! - `shadowed-rule`: a rule that an earlier rule of the same chain fully covers (never hit);
//! - `forward-denied`: a forward whose `from=` sources the chain it passes denies entirely;
//! - `unused-set`: a set no rule uses;
//! - `published-port-open`: a `containers` allow that restricts a published port's clients
//!   while the containers policy (accept) lets everyone else in anyway.
//!
//! "Covers" is decided exactly on the match properties (protocol, ports, addresses as
//! intervals, interfaces, host selector); a rule with `rate=` never covers another (it stops
//! matching over the rate), nor does a rule with `icmp-type=`/`state=` or a `log` rule (which
//! ends nothing); a dynamic set only covers itself.

use std::collections::{BTreeMap, BTreeSet};

use crate::diag::{Diagnostic, Diagnostics};
use crate::model::*;
use crate::place::select::place_forward;
use crate::read::source::SourceMap;

mod hull;
mod shadow_index;
use hull::{proto_covers, selector_key, AddrHull, Hull};
use shadow_index::ShadowIndex;

/// The chains the `shadowed-rule` lint looks at.
const SHADOW_CHAINS: [ChainKind; 4] = [ChainKind::Input, ChainKind::Forward, ChainKind::Output, ChainKind::Containers];

/// Every `shadowed-rule` finding of `rs` as `(chain, shadowed rule, first covering rule)`,
/// rule indices within the chain (all its blocks in file order). `reference_scan` compares
/// every pair of rules instead of using the index: the oracle the index is tested against
/// (`bench/tests/shadow_index.rs`, and the random chains here); not for production use.
#[doc(hidden)]
pub fn shadowed_pairs(map: &SourceMap, rs: &Ruleset, reference_scan: bool) -> Vec<(ChainKind, usize, usize)> {
    let mut l = Linter { map, rs, out: Diagnostics::default(), intervals: BTreeMap::new() };
    let mut out = Vec::new();
    for kind in SHADOW_CHAINS {
        let (rules, _) = l.chain(kind);
        out.extend(l.first_covers(&rules, reference_scan).into_iter().map(|(j, i)| (kind, j, i)));
    }
    out
}

/// The port SSH listens on in the lockout lint.
pub const SSH_PORT: u16 = 22;

/// Every lint warning of `rs`.
pub fn lint(map: &SourceMap, rs: &Ruleset) -> Diagnostics {
    let mut l = Linter { map, rs, out: Diagnostics::default(), intervals: BTreeMap::new() };
    l.ssh_lockout();
    l.shadowed();
    l.forwards_denied();
    l.unused_sets();
    l.published_ports_open();
    l.out
}

/// Sorted, merged address intervals: [IPv4, IPv6].
type Intervals = [Vec<(u128, u128)>; 2];

struct Linter<'a> {
    map: &'a SourceMap,
    rs: &'a Ruleset,
    out: Diagnostics,
    /// Intervals of static sets, computed once per set.
    intervals: BTreeMap<&'a str, Option<Intervals>>,
}

fn merge<'e>(elems: impl Iterator<Item = &'e AddrElem>) -> Intervals {
    crate::place::setlayout::merged(elems)
}

/// Is every interval of `b` inside the union `a` (both merged)?
fn contains(a: &Intervals, b: &Intervals) -> bool {
    (0..2).all(|f| {
        b[f].iter().all(|&(lo, hi)| {
            let i = a[f].partition_point(|&(_, ahi)| ahi < lo);
            a[f].get(i).is_some_and(|&(alo, ahi)| alo <= lo && hi <= ahi)
        })
    })
}

/// Do `a` and `b` share an address?
fn intersects(a: &Intervals, b: &Intervals) -> bool {
    (0..2).any(|f| {
        b[f].iter().any(|&(lo, hi)| {
            let i = a[f].partition_point(|&(_, ahi)| ahi < lo);
            a[f].get(i).is_some_and(|&(alo, _)| alo <= hi)
        })
    })
}

fn ports_cover(a: Option<&[PortRange]>, b: Option<&[PortRange]>) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => b.iter().all(|r| {
            // Walk r's ports through a's ranges (they may be split over several).
            let mut next = u32::from(r.lo);
            let mut sorted: Vec<PortRange> = a.to_vec();
            sorted.sort();
            for s in sorted {
                if u32::from(s.lo) <= next && next <= u32::from(s.hi) {
                    next = u32::from(s.hi) + 1;
                }
            }
            next > u32::from(r.hi)
        }),
    }
}

/// A rule that stops matching over a rate, narrows by ICMP type or connection state, holds
/// only at times (`during=`, `until=`), or decides nothing (`log`): counted as covering no
/// other rule (conservative: no false alarm).
fn never_covers(r: &FilterRule) -> bool {
    r.rate.is_some() || r.icmp_types.is_some() || r.state.is_some() || !r.action.is_terminal() || r.schedule.is_some() || narrows_headers(r)
}

/// A rule with a header match the coverage test does not model (ICMP codes, TCP flags,
/// packet types, reverse-path filtering) or a negated list: it neither covers another (it may match less than its
/// other properties say) nor is covered (a negated list matches more than the list).
fn narrows_headers(r: &FilterRule) -> bool {
    r.icmp_codes.is_some() || r.tcp_flags.is_some() || r.pkttypes.is_some() || r.negate.any() || r.rpfilter.is_some()
}

fn same_or_any<T: PartialEq>(a: Option<&T>, b: Option<&T>) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(x), Some(y)) => x == y,
        (Some(_), None) => false,
    }
}

impl<'a> Linter<'a> {
    fn warn(&mut self, code: &str, rule: &str, msg: String, span: Span, label: &str, help: String) {
        self.out.push(Diagnostic::warning(code, msg).at(self.map, span, label).rule(rule).help(help));
    }

    fn line_of(&self, span: Span) -> String {
        let f = self.map.file(span.file);
        format!("{}:{}", f.path, f.line_col(span.offset as usize).0)
    }

    /// Intervals of an address match; None for "any". A dynamic set has no intervals
    /// (`Some(None)`): it is compared by name only.
    fn addr(&mut self, m: &'a AddrMatch) -> Option<Intervals> {
        match m {
            AddrMatch::Literal(l) => Some(merge(l.iter())),
            AddrMatch::Set(name) => {
                let rs = self.rs;
                self.intervals
                    .entry(name.as_str())
                    .or_insert_with(|| {
                        let s = rs.sets.iter().find(|s| &s.name.value == name)?;
                        s.dynamic.is_none().then(|| match &s.from_file {
                            Some(facts) => [facts.merged[0].to_vec(), facts.merged[1].to_vec()],
                            None => merge(s.elements.iter().map(|e| &e.value)),
                        })
                    })
                    .clone()
            }
        }
    }

    /// Does address match `a` cover `b` (None = any address)?
    fn addr_covers(&mut self, a: Option<&'a Spanned<AddrMatch>>, b: Option<&'a Spanned<AddrMatch>>) -> bool {
        match (a, b) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => {
                if let (AddrMatch::Set(x), AddrMatch::Set(y)) = (&a.value, &b.value) {
                    if x == y {
                        return true;
                    }
                }
                match (self.addr(&a.value), self.addr(&b.value)) {
                    (Some(ia), Some(ib)) => contains(&ia, &ib),
                    _ => false,
                }
            }
        }
    }

    /// Could address matches `a` and `b` share an address (None = any)?
    fn addr_meets(&mut self, a: Option<&'a Spanned<AddrMatch>>, b: Option<&'a Spanned<AddrMatch>>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => match (self.addr(&a.value), self.addr(&b.value)) {
                (Some(ia), Some(ib)) => intersects(&ia, &ib),
                _ => true,
            },
            _ => true,
        }
    }

    /// Does rule `a` match every packet rule `b` matches?
    fn covers(&mut self, a: &'a FilterRule, b: &'a FilterRule) -> bool {
        !never_covers(a)
            && !b.negate.any()
            && selector_key(&a.on).is_none_or(|k| Some(k) == selector_key(&b.on))
            && proto_covers(a.proto.as_ref().map(|p| p.value), b.proto.as_ref().map(|p| p.value))
            && ports_cover(a.ports.as_ref().map(|p| p.value.as_slice()), b.ports.as_ref().map(|p| p.value.as_slice()))
            && ports_cover(a.sports.as_ref().map(|p| p.value.as_slice()), b.sports.as_ref().map(|p| p.value.as_slice()))
            && same_or_any(a.iif.as_ref().map(|i| &i.value), b.iif.as_ref().map(|i| &i.value))
            && same_or_any(a.oif.as_ref().map(|i| &i.value), b.oif.as_ref().map(|i| &i.value))
            && self.addr_covers(a.from.as_ref(), b.from.as_ref())
            && self.addr_covers(a.to.as_ref(), b.to.as_ref())
    }

    /// The rules of one chain kind, all blocks concatenated in file order, and its policy.
    fn chain(&self, kind: ChainKind) -> (Vec<&'a FilterRule>, Option<&'a Spanned<Policy>>) {
        let mut rules = Vec::new();
        let mut policy = None;
        for c in self.rs.chains.iter().filter(|c| c.kind == kind) {
            if c.policy.is_some() {
                policy = c.policy.as_ref();
            }
            rules.extend(c.rules.iter());
        }
        (rules, policy)
    }

    /// With the containers policy `accept` (Docker's own behaviour), an `allow` restricted to
    /// some clients restricts nothing unless a later deny/reject closes its ports to the rest.
    fn published_ports_open(&mut self) {
        let (rules, policy) = self.chain(ChainKind::Containers);
        if policy.is_some_and(|p| p.value == Policy::Drop) {
            return;
        }
        for (j, a) in rules.iter().enumerate() {
            if a.action != Action::Allow || (a.from.is_none() && a.iif.is_none()) {
                continue;
            }
            let ports = a.ports.as_ref().map(|p| p.value.as_slice());
            let closed = rules[j + 1..].iter().any(|d| {
                d.action != Action::Allow
                    && d.rate.is_none()
                    && d.schedule.is_none()
                    && d.from.is_none()
                    && d.iif.is_none()
                    && selector_key(&d.on).is_none()
                    && proto_covers(d.proto.as_ref().map(|p| p.value), a.proto.as_ref().map(|p| p.value))
                    && ports_cover(d.ports.as_ref().map(|p| p.value.as_slice()), ports)
                    && self.addr_covers(d.to.as_ref(), a.to.as_ref())
            });
            if closed {
                continue;
            }
            let what = match ports {
                Some(p) => format!("published port {}", p.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(",")),
                None => "published ports".into(),
            };
            let name = &a.name.value;
            let msg = format!("{what} stays open to everyone: \"{name}\" allows some clients, but the containers policy is accept, so every other client reaches it too");
            let help = format!("write `containers policy=drop {{ … }}` (only allowed published ports are reachable), or add a `deny` for the same proto/port after \"{name}\"");
            self.warn("published-port-open", &format!("allow \"{name}\""), msg, a.name.span, "restricts nothing", help);
        }
    }

    fn ssh_lockout(&mut self) {
        let (rules, policy) = self.chain(ChainKind::Input);
        let Some(policy) = policy.filter(|p| p.value.is_closed()) else { return };
        let ssh = [PortRange::single(SSH_PORT)];
        let allows_ssh = rules.iter().any(|r| {
            r.action == Action::Allow
                && r.state.as_ref().is_none_or(|s| s.value.contains(&CtState::New))
                && proto_covers(r.proto.as_ref().map(|p| p.value), Some(Proto::Tcp))
                && ports_cover(r.ports.as_ref().map(|p| p.value.as_slice()), Some(&ssh))
                && r.iif.is_none()
                && r.sports.is_none()
                && r.to.is_none()
                && !r.negate.any()
                && r.pkttypes.is_none()
        });
        if !allows_ssh {
            self.warn(
                "no-ssh-allow",
                "input chain",
                format!("input policy={} and no rule allows SSH (tcp port 22): applying this over SSH locks you out", policy.value.as_str()),
                policy.span,
                "drops everything not allowed",
                "add allow \"ssh\" proto=tcp port=22 from=\"@admins\" (fwc apply also refuses a ruleset that drops its own SSH session unless --allow-lockout)".into(),
            );
        }
    }

    fn shadowed(&mut self) {
        for kind in SHADOW_CHAINS {
            let (rules, _) = self.chain(kind);
            for (j, i) in self.first_covers(&rules, false) {
                let (a, b) = (rules[i], rules[j]);
                let rule = format!("{} \"{}\"", b.action.as_str(), b.name.value);
                let at = self.line_of(a.name.span);
                self.warn(
                    "shadowed-rule",
                    &rule,
                    format!("rule \"{}\" is never reached: \"{}\" ({at}) earlier in the {} chain matches everything it matches", b.name.value, a.name.value, kind.as_str()),
                    b.name.span,
                    "never matches",
                    format!("remove \"{}\", narrow \"{}\", or move \"{}\" above it", b.name.value, a.name.value, b.name.value),
                );
            }
        }
    }

    /// Each rule of `rules` that an earlier rule covers, with the first such rule:
    /// `(shadowed, first cover)` as indices into `rules`. Found with [`ShadowIndex`];
    /// `reference_scan` instead compares every pair (quadratic: the tests' oracle only).
    fn first_covers(&mut self, rules: &[&'a FilterRule], reference_scan: bool) -> Vec<(usize, usize)> {
        let hulls: Vec<Hull> = rules.iter().map(|r| self.hull(r)).collect();
        let mut out = Vec::new();
        if reference_scan {
            for j in 0..rules.len() {
                if let Some(i) = (0..j).find(|&i| hulls[i].may_cover(&hulls[j]) && self.covers(rules[i], rules[j])) {
                    out.push((j, i));
                }
            }
            return out;
        }
        let index = ShadowIndex::new(rules, &hulls);
        for j in 0..rules.len() {
            let first = index.first_cover(j, |cands| {
                cands.iter().copied().find(|&i| hulls[i as usize].may_cover(&hulls[j]) && self.covers(rules[i as usize], rules[j]))
            });
            if let Some(i) = first {
                out.push((j, i));
            }
        }
        out
    }

    /// The bounds of a rule's match properties (see [`Hull`]).
    fn hull(&mut self, r: &'a FilterRule) -> Hull {
        let ports = |p: &Option<Spanned<Vec<PortRange>>>| {
            p.as_ref().map(|p| (p.value.iter().map(|r| r.lo).min().unwrap_or(0), p.value.iter().map(|r| r.hi).max().unwrap_or(0)))
        };
        let mut addr = |m: &'a Option<Spanned<AddrMatch>>| match m {
            None => AddrHull::Any,
            Some(m) => match self.addr(&m.value) {
                None => AddrHull::Unknown,
                Some(iv) => AddrHull::Bounds(iv.map(|v| v.first().map(|f| (f.0, v.last().expect("non-empty").1)))),
            },
        };
        Hull {
            rate: never_covers(r),
            proto: r.proto.as_ref().map(|p| p.value),
            ports: ports(&r.ports),
            sports: ports(&r.sports),
            from: addr(&r.from),
            to: addr(&r.to),
        }
    }

    fn forwards_denied(&mut self) {
        let rs = self.rs;
        let shared = crate::place::select::sni_listeners_any_host(rs);
        for f in &rs.forwards {
            let Some(from) = &f.from else { continue };
            let (backends, _) = place_forward(f, shared.get(f.name.value.as_str()));
            let kind = if backends.contains(&crate::artifacts::BackendKind::Userspace) { ChainKind::Input } else { ChainKind::Forward };
            let (rules, _) = self.chain(kind);
            let proto = match f.proto {
                ForwardProto::Tcp => Proto::Tcp,
                ForwardProto::Udp => Proto::Udp,
                ForwardProto::Both => Proto::Both,
            };
            for r in rules.into_iter().filter(|r| r.action.is_terminal()) {
                let plain = r.rate.is_none() && r.schedule.is_none() && r.state.is_none() && r.icmp_types.is_none() && !narrows_headers(r) && r.on.is_none() && r.iif.is_none() && r.oif.is_none() && r.sports.is_none() && r.ports.is_none() && r.to.is_none();
                if r.action == Action::Allow {
                    if self.addr_meets(r.from.as_ref(), Some(from)) {
                        break; // an allow may let some of them through first
                    }
                    continue;
                }
                if plain && proto_covers(r.proto.as_ref().map(|p| p.value), Some(proto)) && self.addr_covers(r.from.as_ref(), Some(from)) {
                    let rule = format!("forward \"{}\"", f.name.value);
                    let at = self.line_of(r.name.span);
                    self.warn(
                        "forward-denied",
                        &rule,
                        format!(
                            "forward \"{}\" forwards nobody: every source its from= allows is denied by \"{}\" ({at}) in the {} chain, which its connections pass",
                            f.name.value,
                            r.name.value,
                            kind.as_str()
                        ),
                        from.span,
                        "all of these are denied",
                        format!("remove the forward, change its from=, or let these sources through before \"{}\"", r.name.value),
                    );
                    break;
                }
            }
        }
    }

    fn unused_sets(&mut self) {
        let rs = self.rs;
        let mut used = BTreeSet::new();
        let mut note = |m: &Option<Spanned<AddrMatch>>| {
            if let Some(Spanned { value: AddrMatch::Set(n), .. }) = m {
                used.insert(n.clone());
            }
        };
        for c in &rs.chains {
            for r in &c.rules {
                note(&r.from);
                note(&r.to);
            }
        }
        for f in &rs.forwards {
            note(&f.from);
        }
        for s in &rs.shapes {
            note(&s.from);
            note(&s.to);
        }
        for s in &rs.snats {
            note(&s.from);
            note(&s.dst);
        }
        for s in &rs.sets {
            if !used.contains(&s.name.value) {
                let rule = format!("set \"{}\"", s.name.value);
                self.warn(
                    "unused-set",
                    &rule,
                    format!("set \"{}\" is used by no rule", s.name.value),
                    s.name.span,
                    "declared here",
                    format!("use it (from=\"@{}\") or remove it", s.name.value),
                );
            }
        }
    }
}

/// `apply` over SSH: would the compiled ruleset drop a *new* connection of the SSH session
/// described by `ssh_connection` (the `SSH_CONNECTION` variable sshd sets: `client_ip
/// client_port server_ip server_port`)? The running session survives (established flows take
/// the fast path), but the next login would not. Evaluated on the artifacts themselves with
/// the pure evaluator. `Some(why)`: it would be dropped or rejected; `None`: accepted, or the
/// variable cannot be read (nothing to protect then).
pub fn ssh_session_refusal(artifacts: &crate::artifacts::Artifacts, ssh_connection: &str) -> Option<String> {
    use crate::eval::{Evaluator, FlowSpec, Origin, Verdict, L4};
    let parts: Vec<&str> = ssh_connection.split_whitespace().collect();
    let [client, cport, server, sport] = parts.as_slice() else { return None };
    let ip = |s: &str| s.parse::<std::net::IpAddr>().ok().map(|a| a.to_canonical());
    let (client, server) = (ip(client)?, ip(server)?);
    let (cport, sport) = (cport.parse::<u16>().ok()?, sport.parse::<u16>().ok()?);
    let spec = FlowSpec { proto: Some(L4::Tcp), from: (Some(client), Some(cport)), to: (Some(server), Some(sport)), origin: Some(Origin::Input), ..FlowSpec::default() };
    let flow = spec.build().ok()?;
    let explained = Evaluator::new(artifacts).ok()?.explain(&flow).ok()?;
    (explained.verdict != Verdict::Accept).then(|| {
        format!(
            "this ruleset would {} a new SSH connection from {client} to {server}:{sport} (your own session's peer and port; decided by {}): the next login would be locked out",
            explained.verdict.as_str(),
            explained.decided_by.what
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(s: &str) -> Intervals {
        let elems: Vec<AddrElem> = s.split(',').map(|e| crate::read::units::parse_addr(e).unwrap()).collect();
        merge(elems.iter())
    }

    #[test]
    fn ssh_session_refusal_evaluates_the_artifacts() {
        let art = |kdl: &str| {
            let tree = crate::read::source::SourceTree::from_files([("fwc.kdl".to_string(), kdl.to_string())]);
            crate::compile(&tree, None, None).unwrap().0
        };
        let conn = "192.0.2.10 50000 198.51.100.1 2222";
        let locked = art("fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\n");
        let why = ssh_session_refusal(&locked, conn).expect("port 2222 is not allowed");
        assert!(why.contains("drop a new SSH connection from 192.0.2.10 to 198.51.100.1:2222"), "{why}");
        let open = art("fwc 1\ninput policy=drop {\n    allow \"ssh\" proto=tcp port=2222 from=\"192.0.2.0/24\"\n}\n");
        assert_eq!(ssh_session_refusal(&open, conn), None);
        let rejected = art("fwc 1\ninput {\n    reject \"no\" from=\"192.0.2.10\"\n}\n");
        assert!(ssh_session_refusal(&rejected, "::ffff:192.0.2.10 1 198.51.100.1 22").unwrap().contains("would reject"));
        assert_eq!(ssh_session_refusal(&locked, "garbage"), None);
    }

    /// The per-rule bounds only ever reject pairs the exact test rejects too: over every pair
    /// of a varied chain, `covers` implies `may_cover`.
    #[test]
    fn hull_is_a_necessary_condition_of_covers() {
        let kdl = r#"fwc 1
set "office" "198.51.100.0/24" "2001:db8::/48"
set "one" "198.51.100.7"
set "empty"
set "banned" dynamic=#true
input {
    allow "any"
    allow "web" proto=tcp port="80,443,8000-9000"
    allow "p443" proto=tcp port=443
    allow "p8080" proto=tcp port=8080 sport="1024-65535"
    allow "both" proto=both port=53
    allow "udp53" proto=udp port=53
    allow "office" from="@office"
    allow "one" from="@one" proto=tcp
    allow "v6" from="2001:db8::/32"
    allow "v6-small" from="2001:db8:0:1::/64" port=22 proto=tcp
    allow "mixed" from="198.51.0.0/16,2001:db8::/32"
    allow "to" to="192.0.2.0/24"
    allow "to-one" to="192.0.2.9" proto=udp port=9
    deny "banned" from="@banned"
    deny "banned-ssh" from="@banned" proto=tcp port=22
    deny "empty" from="@empty"
    deny "range" from="203.0.113.10-203.0.113.20"
    deny "in-range" from="203.0.113.12" in=eth0
    allow "rated" proto=tcp port=25 rate="10/second"
    allow "smtp" proto=tcp port=25
}
"#;
        let tree = crate::read::source::SourceTree::from_files([("fwc.kdl".to_string(), kdl.to_string())]);
        let view = crate::load_host(&tree, None).unwrap_or_else(|e| panic!("{e:?}"));
        let mut l = Linter { map: &view.map, rs: &view.ruleset, out: Diagnostics::default(), intervals: BTreeMap::new() };
        let (rules, _) = l.chain(ChainKind::Input);
        let hulls: Vec<Hull> = rules.iter().map(|r| l.hull(r)).collect();
        let mut covering = 0;
        for (i, a) in rules.iter().enumerate() {
            for (j, b) in rules.iter().enumerate() {
                if l.covers(a, b) {
                    covering += 1;
                    assert!(hulls[i].may_cover(&hulls[j]), "{} covers {} but its bounds reject it", a.name.value, b.name.value);
                }
            }
        }
        assert!(covering > rules.len() + 10, "the case exercises covering pairs ({covering})");
    }

    /// The index finds exactly what the pairwise scan finds (same shadowed rules, same first
    /// cover) on random small chains drawn from a vocabulary where covering is common:
    /// overlapping ports, nested prefixes of both families, static and dynamic sets,
    /// interfaces, host selectors and rates.
    #[test]
    fn shadow_index_matches_the_pairwise_scan_on_random_chains() {
        let pick = |rng: &mut fastrand::Rng, xs: &[&'static str]| xs[rng.usize(..xs.len())];
        let protos = ["", "", " proto=tcp", " proto=udp", " proto=both"];
        let ports = ["", "", " port=22", " port=\"20-30\"", " port=\"22,80\"", " port=\"1-1000\"", " port=80", " port=\"1-65535\""];
        let sports = ["", "", "", " sport=\"1024-65535\"", " sport=53"];
        // Per family (IPv4, IPv6, both): `from` and `to` of one rule are drawn from one.
        let addrs: [&[&str]; 3] = [
            &["10.0.0.0/8", "10.1.0.0/16", "10.1.2.3", "10.1.2.0-10.1.3.255", "@one", "0.0.0.0/0"],
            &["2001:db8::/32", "2001:db8:1::/48", "@v6", "::/0"],
            &["10.0.0.0/8,2001:db8::/32", "@office", "@banned"],
        ];
        let ifs = ["", "", "", " in=eth0", " in=eth1"];
        let ons = ["", "", "", " on=\"role=edge\"", " on=\"edge-1\""];
        let extras = ["", "", "", "", " rate=\"5/second\"", " log=#true"];
        let actions = ["allow", "deny", "reject"];
        let mut found = 0;
        for seed in 0..400u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut kdl = String::from("fwc 1\nset \"office\" \"10.1.0.0/16\" \"2001:db8:1::/48\"\nset \"one\" \"10.1.2.3\"\nset \"v6\" \"2001:db8:1:2::/64\"\nset \"banned\" dynamic=#true\nhost \"edge-1\" {\n    labels role=edge\n}\n");
            for chain in ["input", "output"] {
                kdl.push_str(&format!("{chain} {{\n"));
                for r in 0..rng.usize(2..40) {
                    let port = pick(&mut rng, &ports);
                    let proto = if port.is_empty() { pick(&mut rng, &protos) } else { [" proto=tcp", " proto=udp", " proto=both"][rng.usize(..3)] };
                    let sport = if port.is_empty() { "" } else { pick(&mut rng, &sports) };
                    let fam = addrs[rng.usize(..3)];
                    let mut addr = |key: &str| if rng.bool() { format!(" {key}=\"{}\"", pick(&mut rng, fam)) } else { String::new() };
                    let (from, to) = (addr("from"), addr("to"));
                    let iface = if chain == "output" { pick(&mut rng, &ifs).replace(" in=", " out=") } else { pick(&mut rng, &ifs).to_string() };
                    kdl.push_str(&format!(
                        "    {} \"{chain}{r}\"{proto}{port}{sport}{from}{to}{iface}{}{}\n",
                        pick(&mut rng, &actions),
                        pick(&mut rng, &ons),
                        pick(&mut rng, &extras)
                    ));
                }
                kdl.push_str("}\n");
            }
            let tree = crate::read::source::SourceTree::from_files([("fwc.kdl".to_string(), kdl.clone())]);
            // Some draws are refused (e.g. `from` and `to` of different families): skip them.
            let view = crate::load_host(&tree, Some("edge-1")).unwrap_or_else(|e| panic!("{}\n{kdl}", e.0[0].message));
            let indexed = shadowed_pairs(&view.map, &view.ruleset, false);
            assert_eq!(indexed, shadowed_pairs(&view.map, &view.ruleset, true), "seed {seed}:\n{kdl}");
            found += indexed.len();
        }
        assert!(found > 1000, "the chains exercise shadowing ({found} findings)");
    }

    #[test]
    fn interval_containment() {
        assert!(contains(&iv("10.0.0.0/8"), &iv("10.1.0.0/16,10.2.3.4")));
        assert!(contains(&iv("10.0.0.0/9,10.128.0.0/9"), &iv("10.127.0.0-10.128.0.5")), "adjacent ranges merge");
        assert!(!contains(&iv("10.0.0.0/8"), &iv("10.0.0.0/8,11.0.0.1")));
        assert!(!contains(&iv("10.0.0.0/8"), &iv("2001:db8::1")), "other family");
        assert!(intersects(&iv("10.0.0.0/8"), &iv("192.0.2.1,10.9.9.9")));
        assert!(!intersects(&iv("10.0.0.0/8"), &iv("192.0.2.1")));
    }

    #[test]
    fn ports_and_protocols() {
        let p = |s: &[(u16, u16)]| s.iter().map(|&(lo, hi)| PortRange { lo, hi }).collect::<Vec<_>>();
        assert!(ports_cover(Some(&p(&[(1, 100), (101, 200)])), Some(&p(&[(50, 150)]))));
        assert!(!ports_cover(Some(&p(&[(1, 100)])), Some(&p(&[(50, 150)]))));
        assert!(!ports_cover(Some(&p(&[(22, 22)])), None));
        assert!(ports_cover(None, Some(&p(&[(22, 22)]))));
        assert!(proto_covers(Some(Proto::Both), Some(Proto::Udp)));
        assert!(!proto_covers(Some(Proto::Tcp), Some(Proto::Both)));
        assert!(!proto_covers(Some(Proto::Tcp), None));
    }
}
