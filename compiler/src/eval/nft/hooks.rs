//! Running a hook: its base chains in priority order, each with its jumps, gotos and returns,
//! to a verdict.

use super::describe::describe_matches;
use super::packet::Packet;
use super::rule::{eval_rule, Flowctl, Hit};
use super::table::{ChainDef, EvalError, Table, Verdict};

/// The outcome of running one hook's base chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResult {
    pub verdict: Verdict,
    /// The rule that gave a terminal verdict, or `None` for a chain policy / no chain.
    pub decided_by: Option<Hit>,
    /// The base chain whose policy decided (when `decided_by` is `None` and a chain ran).
    pub policy_of: Option<String>,
}

/// Run every base chain of `hook` in priority order, recording matching rules in `hits`.
/// `nat` chains see only a connection's first packet; so does every evaluation here.
/// With `skip_nat`, `nat` chains are left out (packets after a connection's first).
pub fn run_hook(t: &Table, hook: &str, p: &mut Packet, hits: &mut Vec<Hit>, skip_nat: bool) -> Result<HookResult, EvalError> {
    let mut last = HookResult { verdict: Verdict::Accept, decided_by: None, policy_of: None };
    // A packet without a connection (`invalid`) passes no nat chain (nf_nat_inet_fn).
    let skip_nat = skip_nat || p.ct_state == "invalid";
    for base in t.base_chains(hook) {
        if skip_nat && base.hook.as_ref().is_some_and(|h| h.kind == "nat") {
            continue;
        }
        if !base.hook.as_ref().is_none_or(|h| h.sees(p.daddr.is_ipv6())) {
            continue;
        }
        let policy = base.hook.as_ref().map_or(Verdict::Accept, |h| h.policy);
        let (verdict, by) = run_chain(t, base, policy, p, hits)?;
        last = HookResult { verdict, policy_of: by.is_none().then(|| base.name.clone()), decided_by: by };
        if verdict != Verdict::Accept {
            return Ok(last);
        }
    }
    Ok(last)
}

/// Run a base chain (with its jumps) to a verdict: `(verdict, deciding rule or None = policy)`.
pub(super) fn run_chain(t: &Table, base: &ChainDef, policy: Verdict, p: &mut Packet, hits: &mut Vec<Hit>) -> Result<(Verdict, Option<Hit>), EvalError> {
    // Stack of (chain, next rule index) to return to.
    let mut stack: Vec<(&ChainDef, usize)> = Vec::new();
    let mut chain = base;
    let mut i = 0;
    loop {
        if i >= chain.rules.len() {
            match stack.pop() {
                Some((c, at)) => {
                    chain = c;
                    i = at;
                    continue;
                }
                None => return Ok((policy, None)),
            }
        }
        let rule = &chain.rules[i];
        let mut hit = Hit { chain: chain.name.clone(), index: i, matches: describe_matches(&rule.expr), identity: rule.comment.clone(), effects: Vec::new(), notes: Vec::new() };
        let ctl = eval_rule(t, chain, i, rule, p, &mut hit)?;
        i += 1;
        let Some(ctl) = ctl else { continue };
        hits.push(hit.clone());
        let target = |name: &str| t.chains.get(name).ok_or_else(|| EvalError::UnknownChain { from: chain.name.clone(), to: name.to_string() });
        match ctl {
            Flowctl::Next => {}
            Flowctl::Verdict(v) => return Ok((v, Some(hit))),
            Flowctl::Jump(name) => {
                let next = target(&name)?;
                if stack.len() >= 16 {
                    return Err(EvalError::TooDeep(base.name.clone()));
                }
                stack.push((chain, i));
                chain = next;
                i = 0;
            }
            Flowctl::Goto(name) => {
                chain = target(&name)?;
                i = 0;
            }
            Flowctl::Return => match stack.pop() {
                Some((c, at)) => {
                    chain = c;
                    i = at;
                }
                None => return Ok((policy, None)),
            },
        }
    }
}
