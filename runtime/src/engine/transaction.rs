//! The apply transaction over every backend (docs/design.md "Apply: one transaction over three
//! backends"):
//!
//! 1. **prepare** every backend (nothing visible changes);
//! 2. set the sysctls the ruleset needs (reported; restored if the apply fails);
//! 3. **commit** every backend, in order;
//! 4. **verify**: observe every backend and require zero drift;
//! 5. record the new generation in the state dir (atomic).
//!
//! Any failure rolls every backend back to the previously applied artifacts (or to nothing),
//! restores the sysctls, leaves the state dir unchanged and returns an [`ApplyFailure`] naming
//! the backend, the phase and the reason. The caller holds the state-dir lock.

use std::fmt;
use std::time::{Duration, Instant};

use fwc_compiler::artifacts::{Artifacts, BackendKind, ForwardArtifact, Manifest, QosArtifact, ARTIFACT_VERSION};
use serde::Serialize;

use crate::backend::nft::{injected_failure, injected_stall, NftBackend};
use crate::backend::forward::ForwardBackend;
use crate::backend::netns::InNetns;
use crate::backend::qos::QosBackend;
use crate::backend::Backend;
use crate::state::StateLock;

/// Options of one apply.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Recorded in `applied.json`: where the artifacts came from.
    pub source: String,
    /// Network namespace the host's dataplane lives in (sysctls are read/written there).
    pub netns: Option<String>,
    /// Do not set sysctls (they are still checked and reported).
    pub no_sysctl: bool,
    /// Replace fwc's nftables table whole instead of applying a diff, for this reason (the
    /// plan found set elements changed outside fwc, which a diff does not repair).
    pub nft_full_replace: Option<String>,
    /// Accept a whole-table replace the diff cannot avoid (`fwc apply --allow-replace`); it
    /// discards counters, per-source tracking and limit state the plan otherwise keeps, so
    /// without this such an apply is refused and nothing changes.
    pub allow_replace: bool,
}

/// The backends `fwc apply` and the agent drive, in commit order:
/// - nftables (filter, NAT, marks), caching its kernel renderings in `<state_dir>/cache`
///   (derived data: safe to delete, ignored by [`crate::state::dir_digest`]);
/// - eBPF QoS, pinned under `/sys/fs/bpf/fwc` (with `--netns NS`, or run inside the named
///   namespace NS: `/sys/fs/bpf/fwc-netns-NS`, every call made from inside the namespace, so
///   only its interfaces are touched), on a bpffs that outlives the process (under
///   `ip netns exec` the host's, reached through `/proc/PID/root`; none: classes refused);
/// - the userspace forwarder, reached over the control socket in `state_dir` (started, detached
///   and inside the namespace, when listeners are wanted and none runs).
///
/// A backend with nothing to do (no classes, no listeners, nothing applied before) is a no-op.
pub fn default_backends(netns: Option<&str>, state_dir: &std::path::Path) -> Vec<Box<dyn Backend>> {
    let nft = NftBackend::new(netns.map(str::to_string)).with_cache_dir(state_dir.join(crate::state::CACHE_DIR));
    let qos: Box<dyn Backend> = match netns {
        None => Box::new(QosBackend::for_namespace(None).owned_by(state_dir)),
        Some(ns) => Box::new(InNetns::new(ns, QosBackend::for_namespace(Some(ns)).owned_by(state_dir))),
    };
    vec![Box::new(nft), qos, Box::new(ForwardBackend::new(state_dir).starting(netns))]
}

/// A phase of the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Prepare,
    Sysctl,
    Commit,
    Verify,
    Record,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prepare => "prepare",
            Phase::Sysctl => "sysctl",
            Phase::Commit => "commit",
            Phase::Verify => "verify",
            Phase::Record => "record",
        }
    }
}

/// Why an apply failed and what the rollback did.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyFailure {
    pub phase: Phase,
    /// The backend that failed (None for sysctl / state-dir failures).
    pub backend: Option<BackendKind>,
    pub reason: String,
    /// Per backend: `ok` or the rollback error. JSON: `[{"backend": "nftables", "result":
    /// "ok"}, {"backend": "qos", "result": "failed", "error": "…"}]`.
    #[serde(serialize_with = "rollback_results")]
    pub rollback: Vec<(BackendKind, Result<(), String>)>,
    /// Commit the host is back on (None = nothing applied before).
    pub restored_commit: Option<String>,
    pub had_previous: bool,
}

fn rollback_results<S: serde::Serializer>(v: &[(BackendKind, Result<(), String>)], s: S) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for (backend, r) in v {
        let item = match r {
            Ok(()) => serde_json::json!({"backend": backend, "result": "ok"}),
            Err(e) => serde_json::json!({"backend": backend, "result": "failed", "error": e}),
        };
        seq.serialize_element(&item)?;
    }
    seq.end()
}

impl fmt::Display for ApplyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.backend {
            Some(b) => write!(f, "apply failed: backend {} failed in {}: {}", b.as_str(), self.phase.as_str(), self.reason)?,
            None => write!(f, "apply failed in {}: {}", self.phase.as_str(), self.reason)?,
        }
        if self.phase == Phase::Prepare {
            return write!(f, "\nNothing was changed: no backend committed; the state dir is unchanged.");
        }
        let failed: Vec<_> = self.rollback.iter().filter_map(|(k, r)| r.as_ref().err().map(|e| format!("{}: {e}", k.as_str()))).collect();
        if failed.is_empty() {
            let to = match (&self.restored_commit, self.had_previous) {
                (Some(c), _) => format!("the previously applied state (commit {c})"),
                (None, true) => "the previously applied state".to_string(),
                (None, false) => "nothing (no previous apply): fwc's table and listeners are removed".to_string(),
            };
            write!(f, "\nEvery backend is back on {to}; the state dir is unchanged.")
        } else {
            write!(f, "\nROLLBACK FAILED for {}; the host may be in a mixed state — run `fwc status` and `fwc rollback`.", failed.join("; "))
        }
    }
}

impl std::error::Error for ApplyFailure {}

/// What a successful apply did.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub generation: String,
    pub commit: Option<String>,
    pub previous_commit: Option<String>,
    pub backends: Vec<BackendKind>,
    pub sysctls: Vec<SysctlStatus>,
    pub prepare_ms: u64,
    pub commit_ms: u64,
    pub verify_ms: u64,
    pub total_ms: u64,
}

// ---------------------------------------------------------------------------------------------
// sysctls

/// A sysctl a ruleset needs (listed in the manifest by the compiler).
pub use fwc_compiler::artifacts::SysctlSetting as SysctlNeed;

/// A needed sysctl and what the host has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SysctlStatus {
    pub key: String,
    pub want: String,
    /// Value before fwc touched it (None = could not be read).
    pub was: Option<String>,
    /// fwc changed it in this apply.
    pub changed: bool,
    pub reason: String,
}

impl fmt::Display for SysctlStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let was = self.was.as_deref().unwrap_or("?");
        if self.changed {
            write!(f, "{} = {} (was {was}; {})", self.key, self.want, self.reason)
        } else if was == self.want {
            write!(f, "{} = {} (already set; {})", self.key, self.want, self.reason)
        } else {
            write!(f, "{} should be {} (is {was}; {})", self.key, self.want, self.reason)
        }
    }
}

/// The sysctls `artifacts` need, as the compiler listed them in the manifest (forwarding for
/// kernel forwards to other hosts, per address family used; `route_localnet` for forwards to
/// 127.0.0.0/8). Nothing is derived from `nftables.json`.
pub fn needed_sysctls(artifacts: &Artifacts) -> Vec<SysctlNeed> {
    artifacts.manifest.setup.sysctls.clone()
}

/// `/proc/sys/net/ipv4/ip_forward` for `net.ipv4.ip_forward` (None for a key that could
/// leave /proc/sys).
fn sysctl_path(key: &str) -> Option<std::path::PathBuf> {
    let ok = !key.is_empty() && key.split('.').all(|p| !p.is_empty() && !p.contains('/'));
    ok.then(|| std::path::Path::new("/proc/sys").join(key.replace('.', "/")))
}

/// Run `f` in network namespace `netns` (a thread that joined it: /proc/sys/net shows the
/// namespace of the thread that opens it), or here.
fn in_ns<T: Send>(netns: Option<&str>, f: impl FnOnce() -> Result<T, String> + Send) -> Result<T, String> {
    match netns {
        Some(ns) => crate::backend::netns::in_netns(ns, || f().map_err(|e| miette::miette!("{e}"))).map_err(|e| e.to_string()),
        None => f(),
    }
}

/// A sysctl's value, read from /proc/sys (in `netns` if given).
pub fn read_sysctl(netns: Option<&str>, key: &str) -> Option<String> {
    let path = sysctl_path(key)?;
    in_ns(netns, move || std::fs::read_to_string(&path).map(|v| v.trim().to_string()).map_err(|e| e.to_string())).ok()
}

/// Set a sysctl by writing /proc/sys (in `netns` if given); no `sysctl` binary needed.
pub fn write_sysctl(netns: Option<&str>, key: &str, value: &str) -> Result<(), String> {
    let path = sysctl_path(key).ok_or_else(|| format!("\"{key}\" is not a sysctl name"))?;
    in_ns(netns, move || std::fs::write(&path, format!("{value}\n")).map_err(|e| format!("cannot set {key}={value} ({}): {e}", path.display())))
}

/// What the host has for each needed sysctl (nothing is changed).
pub fn check_sysctls(artifacts: &Artifacts, netns: Option<&str>) -> Vec<SysctlStatus> {
    needed_sysctls(artifacts)
        .into_iter()
        .map(|n| SysctlStatus { was: read_sysctl(netns, &n.key), key: n.key, want: n.value, changed: false, reason: n.reason })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// the transaction

/// Apply `next` through `backends`, as described in the module docs. `lock` must be held.
pub fn transaction(
    backends: &mut [Box<dyn Backend>],
    lock: &StateLock,
    next: &Artifacts,
    opts: &ApplyOptions,
) -> Result<ApplyReport, ApplyFailure> {
    let t0 = Instant::now();
    let previous = lock.dir.current().map_err(|e| ApplyFailure {
        phase: Phase::Prepare,
        backend: None,
        reason: format!("cannot read the state dir: {e}"),
        rollback: vec![],
        restored_commit: None,
        had_previous: false,
    })?;
    let prev_art = previous.as_ref().map(|g| &g.artifacts);
    let mut sysctl_changed: Vec<(String, String)> = Vec::new();

    let fail = |backends: &mut [Box<dyn Backend>], phase: Phase, backend: Option<BackendKind>, reason: String, sysctl_changed: &[(String, String)]| {
        tracing::warn!(phase = phase.as_str(), ?backend, %reason, "apply failed, rolling back");
        let mut rollback = Vec::new();
        for b in backends.iter_mut().rev() {
            let r = b.rollback_from(prev_art, next).map_err(|e| chain(&e));
            rollback.push((b.kind(), r));
        }
        rollback.reverse();
        for (key, old) in sysctl_changed {
            if let Err(e) = write_sysctl(opts.netns.as_deref(), key, old) {
                tracing::warn!("cannot restore {key}: {e}");
            }
        }
        ApplyFailure {
            phase,
            backend,
            reason,
            rollback,
            restored_commit: previous.as_ref().and_then(|g| g.meta.commit.clone()),
            had_previous: previous.is_some(),
        }
    };

    // Every backend a rule needs must be present.
    let present: Vec<BackendKind> = backends.iter().map(|b| b.kind()).collect();
    for r in &next.manifest.rules {
        for k in &r.backends {
            if !present.contains(k) {
                let reason = format!(
                    "{} \"{}\" needs the {} backend, which is not available in this fwc{}",
                    r.kind.as_str(),
                    r.name,
                    k.as_str(),
                    if *k == BackendKind::Userspace { " (start the forwarder: `fwc forward --state-dir DIR`)" } else { "" }
                );
                return Err(fail(backends, Phase::Prepare, Some(*k), reason, &[]));
            }
        }
    }

    // 1. prepare (each backend changes only what differs from the previous artifacts)
    for b in backends.iter_mut() {
        b.allow_replace(opts.allow_replace);
        b.set_base(prev_art, opts.nft_full_replace.as_deref().filter(|_| b.kind() == BackendKind::Nftables));
    }
    for i in 0..backends.len() {
        let kind = backends[i].kind();
        let r = if kind != BackendKind::Nftables && injected_failure("prepare", kind) {
            Err(miette::miette!("injected failure (FWC_TEST_FAIL)"))
        } else {
            backends[i].prepare(next)
        };
        if let Err(e) = r {
            return Err(fail(backends, Phase::Prepare, Some(kind), chain(&e), &[]));
        }
    }
    let t_prepared = t0.elapsed();

    // 2. sysctls
    let mut sysctls = Vec::new();
    for need in needed_sysctls(next) {
        let was = read_sysctl(opts.netns.as_deref(), &need.key);
        let mut st = SysctlStatus { key: need.key.clone(), want: need.value.clone(), was: was.clone(), changed: false, reason: need.reason };
        if was.as_deref() != Some(need.value.as_str()) && !opts.no_sysctl {
            if let Err(e) = write_sysctl(opts.netns.as_deref(), &need.key, &need.value) {
                return Err(fail(backends, Phase::Sysctl, None, e, &sysctl_changed));
            }
            if let Some(w) = was {
                sysctl_changed.push((need.key.clone(), w));
            }
            st.changed = true;
        }
        sysctls.push(st);
    }

    // 3. commit
    std::thread::sleep(injected_stall("commit"));
    let t_commit = Instant::now();
    for i in 0..backends.len() {
        let kind = backends[i].kind();
        let r = if kind != BackendKind::Nftables && injected_failure("commit", kind) {
            Err(miette::miette!("injected failure (FWC_TEST_FAIL)"))
        } else {
            backends[i].commit()
        };
        if let Err(e) = r {
            return Err(fail(backends, Phase::Commit, Some(kind), chain(&e), &sysctl_changed));
        }
    }
    let commit_ms = t_commit.elapsed();

    // 4. verify
    let t_verify = Instant::now();
    for i in 0..backends.len() {
        let kind = backends[i].kind();
        let r = if injected_failure("verify", kind) {
            Ok(crate::backend::Observation { drift: vec!["injected drift (FWC_TEST_FAIL)".into()], ..Default::default() })
        } else {
            backends[i].observe(next)
        };
        match r {
            Ok(obs) if obs.in_sync() => {}
            Ok(obs) => {
                let drift = crate::backend::sources::locate(obs.drift, &next.manifest);
                let reason = format!("the live state differs from what was committed:\n  {}", drift.join("\n  "));
                return Err(fail(backends, Phase::Verify, Some(kind), reason, &sysctl_changed));
            }
            Err(e) => return Err(fail(backends, Phase::Verify, Some(kind), chain(&e), &sysctl_changed)),
        }
    }
    let verify_ms = t_verify.elapsed();

    // 5. record
    let sysctl_lines: Vec<String> = sysctls.iter().map(|s| format!("{}={}", s.key, s.want)).collect();
    let generation = match lock.record_applied(next, &opts.source, &sysctl_lines) {
        Ok(g) => g,
        Err(e) => return Err(fail(backends, Phase::Record, None, format!("cannot record the applied state: {}", chain(&e)), &sysctl_changed)),
    };
    Ok(ApplyReport {
        generation,
        commit: next.manifest.commit.clone(),
        previous_commit: previous.as_ref().and_then(|g| g.meta.commit.clone()),
        backends: present,
        sysctls,
        prepare_ms: ms(t_prepared),
        commit_ms: ms(commit_ms),
        verify_ms: ms(verify_ms),
        total_ms: ms(t0.elapsed()),
    })
}

/// `outer: inner: innermost` of a miette report, on one logical line per cause.
pub fn chain(e: &miette::Report) -> String {
    e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ")
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Artifacts that remove everything fwc owns (reverting the very first apply).
pub fn empty_artifacts(host: &str) -> Artifacts {
    Artifacts {
        nftables: serde_json::json!({"nftables": []}).into(),
        qos: QosArtifact { version: ARTIFACT_VERSION, mark_mask: fwc_compiler::artifacts::QOS_MARK_MASK, classes: vec![] },
        forward: ForwardArtifact { version: ARTIFACT_VERSION, listeners: vec![], kernel_health: vec![], kernel_dns: vec![] },
        manifest: Manifest {
            version: ARTIFACT_VERSION,
            host: host.to_string(),
            commit: None,
            rules: vec![],
            artifact_hashes: Default::default(),
            setup: Default::default(),
            valid_until: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(rules: &str) -> Artifacts {
        let tree = fwc_compiler::read::source::SourceTree::from_files([("fwc.kdl".to_string(), format!("fwc 1\n{rules}"))]);
        fwc_compiler::compile(&tree, None, None).expect("compiles").0
    }

    /// The sysctls come from the manifest the compiler wrote, per kernel forward target family;
    /// userspace forwards and addresses elsewhere in the rules need none.
    #[test]
    fn sysctls_follow_kernel_forward_targets() {
        assert!(needed_sysctls(&empty_artifacts("h")).is_empty());
        let a = compiled(
            r#"forward "web" listen=":8080" to="198.18.2.2:80"
forward "v6" listen=":8443" to="[2001:db8:2::2]:443"
forward "dns" listen=":9000" to="example.com:80"
input { allow "lo" from="127.0.0.1" }"#,
        );
        let keys: Vec<_> = needed_sysctls(&a).into_iter().map(|n| n.key).collect();
        assert_eq!(keys, vec!["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"]);
        let a = compiled(r#"forward "local" listen=":8080" to="127.0.0.1:80""#);
        let keys: Vec<_> = needed_sysctls(&a).into_iter().map(|n| n.key).collect();
        assert_eq!(keys, vec!["net.ipv4.conf.all.route_localnet"]);
        // A DNS target alone is a kernel forward to whatever the name resolves to: IPv4
        // forwarding (A records; the listen address is not IPv6). In userspace it needs none.
        let a = compiled(r#"forward "dns" listen=":9000" to="example.com:80""#);
        let keys: Vec<_> = needed_sysctls(&a).into_iter().map(|n| n.key).collect();
        assert_eq!(keys, vec!["net.ipv4.ip_forward"]);
        let a = compiled(r#"forward "dns" listen=":9000" to="example.com:80" backend="userspace""#);
        assert!(needed_sysctls(&a).is_empty());
    }
}
