//! The eBPF QoS backend: writes `qos.json`'s classes into the pinned class map of the
//! `fwc-qos` program and attaches it (TCX, clsact fallback) to the egress of every interface
//! that has a class; detaches where no class remains.
//!
//! - prepare: validate the classes, resolve their interfaces, load and verify the program
//!   (reusing the pinned maps; nothing about shaping changes).
//! - commit: write every class in place (an existing class keeps its bucket), attach where
//!   new, detach where unused, then remove classes that are gone.
//! - rollback: the same with the previous artifacts, or remove everything without them.
//! - observe: class map and attachments vs. expected; per-rule counters.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fwc_compiler::artifacts::{Artifacts, BackendKind, QosArtifact, QosClass, QOS_MAX_CLASS_ID};
use fwc_qos::{ClassCfg, Qos, Stats};
use miette::{miette, Result};

use super::{Backend, Observation, QosPackets, RuleCounter};

/// One class as it will be written: id, map entry, resolved interfaces.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedClass {
    pub id: u32,
    pub rule: String,
    pub cfg: ClassCfg,
    pub interfaces: Vec<String>,
}

/// What prepare validated and commit will make live.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QosPlan {
    pub mark_mask: u32,
    pub classes: Vec<PlannedClass>,
    /// Union of every class's interfaces.
    pub interfaces: BTreeSet<String>,
}

pub struct QosBackend {
    pin_root: PathBuf,
    qos: Option<Qos>,
    staged: Option<QosPlan>,
    /// Why no pin root outlives this process (`ip netns exec` without the host's bpffs):
    /// prepare refuses classes, observe reports them as drift.
    unusable: Option<String>,
    /// The state dir that manages this dataplane (`fwc apply`, the agent): recorded in the
    /// pin root, and a dataplane another state dir manages is refused.
    owner: Option<PathBuf>,
    /// A commit of this transaction started: only then has rollback anything to undo (a
    /// refused prepare must leave the dataplane, maybe another owner's, untouched).
    committed: bool,
    /// This transaction's prepare created the pin root (loading pins the maps): a rollback
    /// before commit removes it again, so a failed first apply leaves no pins behind.
    created_pins: bool,
}

impl Default for QosBackend {
    fn default() -> Self {
        QosBackend::new(fwc_qos::DEFAULT_PIN_ROOT)
    }
}

impl QosBackend {
    /// A backend that pins under `pin_root` (default `/sys/fs/bpf/fwc`).
    pub fn new(pin_root: impl AsRef<Path>) -> QosBackend {
        QosBackend { pin_root: pin_root.as_ref().to_path_buf(), qos: None, staged: None, unusable: None, owner: None, committed: false, created_pins: false }
    }

    /// Managed by the state dir `state_dir`: one owner per network namespace.
    pub fn owned_by(mut self, state_dir: &Path) -> QosBackend {
        self.owner = Some(std::fs::canonicalize(state_dir).unwrap_or_else(|_| absolute(state_dir)));
        self
    }

    /// The state dirs recorded as owners of the pin root.
    fn owners(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.pin_root.join(fwc_qos::OWNER_DIR))
            .map(|rd| rd.flatten().map(|e| decode_owner(&e.file_name().to_string_lossy())).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Refuse a dataplane that another state dir manages.
    fn check_owner(&self) -> Result<()> {
        let Some(me) = &self.owner else { return Ok(()) };
        let me = me.display().to_string();
        if let Some(other) = self.owners().into_iter().find(|o| *o != me) {
            return Err(miette!(
                help = format!(
                    "use --state-dir {other} for this namespace; or, to move it to {me}, first remove what {other} applied \
                     (`fwc rollback --state-dir {other}` back to nothing, or `fwc qos detach --pin-dir {}`)",
                    self.pin_root.display()
                ),
                "the eBPF QoS dataplane of this network namespace ({}) is managed by the fwc state dir {other}, not {me}: \
                 one owner per namespace, nothing was changed",
                self.pin_root.display()
            ));
        }
        Ok(())
    }

    /// Record this backend's state dir as the owner (after a commit).
    fn claim(&self) -> Result<()> {
        let Some(me) = &self.owner else { return Ok(()) };
        let dir = self.pin_root.join(fwc_qos::OWNER_DIR).join(encode_owner(&me.display().to_string()));
        std::fs::create_dir_all(&dir).map_err(|e| miette!("eBPF QoS: cannot record the owner {}: {e}", dir.display()))
    }

    /// The backend `fwc apply` uses for `netns` (`None`: this process's namespace), pinned on
    /// a bpffs that outlives the process ([`fwc_qos::pin_root::resolve`]). When there is none,
    /// any class is refused in prepare, before anything changes, with what to do instead.
    pub fn for_namespace(netns: Option<&str>) -> QosBackend {
        match fwc_qos::pin_root::resolve(netns) {
            Ok(root) => QosBackend::new(root),
            Err(e) => QosBackend { unusable: Some(e.to_string()), ..QosBackend::new(fwc_qos::pin_root_for(netns)) },
        }
    }

    pub fn pin_root(&self) -> &Path {
        &self.pin_root
    }

    fn pinned(&self) -> bool {
        self.pin_root.join(fwc_qos::maps::MAP_CFG).exists()
    }

    /// The loaded dataplane, loading it when needed. A cached instance whose pins are gone or
    /// were replaced (`fwc qos detach`, another process re-created them) is dropped and loaded
    /// again, so a long-running agent heals without a restart.
    fn loaded(&mut self) -> Result<&mut Qos> {
        if self.qos.as_ref().is_some_and(|q| !q.pins_intact()) {
            tracing::info!("eBPF QoS pins under {} changed since they were loaded; loading again", self.pin_root.display());
            self.qos = None;
        }
        if self.qos.is_none() {
            let q = Qos::open(&self.pin_root).map_err(|e| miette!("eBPF QoS: {e}"))?;
            self.qos = Some(q);
        }
        Ok(self.qos.as_mut().unwrap())
    }

    /// Per-class counters (summed over CPUs) of the live dataplane, by class id; empty when
    /// nothing is pinned. Id 0 holds the packets that carry no class.
    pub fn class_stats(&self) -> Result<BTreeMap<u32, Stats>> {
        if !self.pinned() {
            return Ok(BTreeMap::new());
        }
        let q = Qos::open_pinned(&self.pin_root).map_err(|e| miette!("eBPF QoS: {e}"))?;
        let mut m = BTreeMap::new();
        m.insert(0, q.stats(0).map_err(|e| miette!("{e}"))?);
        for (id, _) in q.classes().map_err(|e| miette!("{e}"))? {
            m.insert(id, q.stats(id).map_err(|e| miette!("{e}"))?);
        }
        Ok(m)
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
}

/// A state dir path as one bpffs file name: `%`, `/` and `.` (bpffs refuses names with a dot)
/// percent-encoded (reversible, readable).
fn encode_owner(path: &str) -> String {
    path.replace('%', "%25").replace('/', "%2F").replace('.', "%2E")
}

fn decode_owner(name: &str) -> String {
    name.replace("%2F", "/").replace("%2E", ".").replace("%25", "%")
}

/// Validate `qos.json` and turn it into map entries and interfaces (pure apart from reading
/// which interfaces exist and which root qdisc they have).
pub fn plan(a: &QosArtifact) -> Result<QosPlan> {
    let mut classes = Vec::new();
    let mut all = BTreeSet::new();
    if a.classes.is_empty() {
        return Ok(QosPlan { mark_mask: a.mark_mask, ..Default::default() });
    }
    if a.mark_mask == 0 {
        return Err(miette!("qos.json: mark_mask is 0 but there are classes"));
    }
    let shift = a.mark_mask.trailing_zeros();
    let max_id = a.mark_mask >> shift;
    let live = up_interfaces()?;
    let mut seen = BTreeSet::new();
    for c in &a.classes {
        let what = format!("QoS class {} (rule {:?}, {:?})", c.id, c.rule, c.direction);
        if c.id == 0 || c.id > max_id || c.id > QOS_MAX_CLASS_ID || c.id >= fwc_qos::maps::MAX_CLASSES {
            return Err(miette!("{what}: id outside 1..={}", max_id.min(QOS_MAX_CLASS_ID)));
        }
        if !seen.insert(c.id) {
            return Err(miette!("{what}: duplicate class id"));
        }
        if c.mark != c.id << shift || c.mark & !a.mark_mask != 0 {
            return Err(miette!("{what}: mark {:#x} is not id << {shift} inside mask {:#x}", c.mark, a.mark_mask));
        }
        if c.rate_bytes_per_sec == 0 || c.rate_bytes_per_sec > fwc_qos::MAX_RATE {
            return Err(miette!("{what}: rate {} bytes/s outside 1..={}", c.rate_bytes_per_sec, fwc_qos::MAX_RATE));
        }
        let interfaces = resolve_interfaces(c, &live)?;
        if interfaces.is_empty() {
            return Err(miette!("{what}: no interface to shape (none is up besides loopback)"));
        }
        // EDT pacing only where every interface of the class has fq as root qdisc.
        let mut edt = true;
        for i in &interfaces {
            edt &= fwc_qos::root_qdisc_is_fq(i).map_err(|e| miette!("{what}: {e}"))?;
        }
        all.extend(interfaces.iter().cloned());
        classes.push(PlannedClass {
            id: c.id,
            rule: c.rule.clone(),
            cfg: fwc_qos::class_cfg(c.rate_bytes_per_sec, c.burst_bytes, edt),
            interfaces,
        });
    }
    Ok(QosPlan { mark_mask: a.mark_mask, classes, interfaces: all })
}

fn resolve_interfaces(c: &QosClass, live: &[String]) -> Result<Vec<String>> {
    if c.interfaces.is_empty() {
        return Ok(live.iter().filter(|i| i.as_str() != "lo").cloned().collect());
    }
    for i in &c.interfaces {
        if fwc_qos::sys::ifindex(i).is_none() {
            return Err(miette!("QoS class {} (rule {:?}): interface {i} does not exist", c.id, c.rule));
        }
    }
    Ok(c.interfaces.clone())
}

/// Interfaces that are up, in the calling thread's network namespace, sorted (route netlink,
/// as `ip link show up` lists them).
pub fn up_interfaces() -> Result<Vec<String>> {
    fwc_qos::rtnl::up_links().map_err(|e| miette!("eBPF QoS: cannot list the interfaces that are up (route netlink): {e}"))
}

impl QosBackend {
    /// Make `plan` live: classes in place, attach where new, detach where unused.
    fn apply_plan(&mut self, plan: &QosPlan) -> Result<()> {
        if plan.classes.is_empty() && !self.pinned() {
            return Ok(()); // nothing was ever shaped here, nothing to do
        }
        let q = self.loaded()?;
        let e = |e: fwc_qos::QosError| miette!("eBPF QoS: {e}");
        if plan.mark_mask != 0 {
            q.set_mark_mask(plan.mark_mask).map_err(e)?;
        }
        for c in &plan.classes {
            q.set_class(c.id, &c.cfg).map_err(e)?;
        }
        for i in &plan.interfaces {
            q.attach(i).map_err(e)?;
        }
        // detach where no class remains: pinned TCX links and clsact filters elsewhere
        let mut gone: BTreeSet<String> = q.tcx_links().into_iter().collect();
        for i in fwc_qos::interfaces() {
            if !plan.interfaces.contains(&i) && q.attached(&i).is_some() {
                gone.insert(i);
            }
        }
        for i in gone.difference(&plan.interfaces) {
            q.detach(i).map_err(e)?;
        }
        let keep: BTreeSet<u32> = plan.classes.iter().map(|c| c.id).collect();
        for (id, _) in q.classes().map_err(e)? {
            if !keep.contains(&id) {
                q.remove_class(id).map_err(e)?;
            }
        }
        Ok(())
    }

    /// Compare the live dataplane with `plan`, one line per object: the pins (program and
    /// maps), each class in the class map, the mark mask, and the attachment of each
    /// interface as the kernel reports it (BPF_PROG_QUERY for TCX, the tc filter list for
    /// clsact) — missing where a class needs it, present where none does, or running another
    /// program than the pinned one.
    pub fn drift(&self, plan: &QosPlan) -> Result<Vec<String>> {
        let mut drift = Vec::new();
        let root = self.pin_root.display();
        if !self.pinned() {
            if !plan.classes.is_empty() {
                drift.push(format!("eBPF QoS: nothing pinned under {root} (the dataplane was removed, e.g. by `fwc qos detach`)"));
                for c in &plan.classes {
                    drift.push(format!("QoS class {} (rule {}): missing (no class map)", c.id, c.rule));
                }
            }
            drift.extend(self.attachment_drift(plan, None));
            return Ok(drift);
        }
        let prog = fwc_qos::pinned_prog_id(&self.pin_root);
        if prog.is_none() && !plan.classes.is_empty() {
            drift.push(format!("eBPF QoS: program pin {root}/{} missing", fwc_qos::PROG_PIN));
        }
        let q = Qos::open_pinned(&self.pin_root).map_err(|e| miette!("eBPF QoS: {e}"))?;
        let live: BTreeMap<u32, ClassCfg> = q.classes().map_err(|e| miette!("{e}"))?.into_iter().collect();
        for c in &plan.classes {
            match live.get(&c.id) {
                None => drift.push(format!("QoS class {} (rule {}): missing from the class map", c.id, c.rule)),
                Some(l) => {
                    let mut want = c.cfg;
                    want.gen = l.gen;
                    if *l != want {
                        drift.push(format!(
                            "QoS class {} (rule {}): live rate {} burst {} flags {:#x}, expected rate {} burst {} flags {:#x}",
                            c.id, c.rule, l.rate, l.burst, l.flags, want.rate, want.burst, want.flags
                        ));
                    }
                }
            }
        }
        let want: BTreeSet<u32> = plan.classes.iter().map(|c| c.id).collect();
        for id in live.keys().filter(|id| !want.contains(id)) {
            drift.push(format!("QoS class {id}: live but not in qos.json"));
        }
        drift.extend(self.attachment_drift(plan, prog));
        if plan.mark_mask != 0 && !plan.classes.is_empty() {
            let g = q.glob().map_err(|e| miette!("{e}"))?;
            if g.mark_mask != plan.mark_mask {
                drift.push(format!("QoS mark mask is {:#x}, expected {:#x}", g.mark_mask, plan.mark_mask));
            }
        }
        Ok(drift)
    }
}

impl QosBackend {
    /// Attachment drift: interfaces a class needs without the program, interfaces with the
    /// program that no class needs, TCX attachments running another program than `pinned`.
    fn attachment_drift(&self, plan: &QosPlan, pinned: Option<u32>) -> Vec<String> {
        let mut drift = Vec::new();
        for i in &plan.interfaces {
            match fwc_qos::attachment(i) {
                None => drift.push(format!("eBPF QoS program not attached to {i} (egress)")),
                Some(fwc_qos::AttachMode::Tcx) => {
                    let ids = fwc_qos::tcx_prog_ids(i).unwrap_or_default();
                    if let Some(p) = pinned.filter(|p| !ids.contains(p)) {
                        drift.push(format!("eBPF QoS on {i} runs program id {ids:?}, not the pinned program {p}"));
                    }
                }
                Some(fwc_qos::AttachMode::Clsact) => {}
            }
        }
        if self.pinned() || !plan.classes.is_empty() {
            for i in fwc_qos::interfaces() {
                if !plan.interfaces.contains(&i) && fwc_qos::attachment(&i).is_some() {
                    drift.push(format!("eBPF QoS program attached to {i}, which no class needs"));
                }
            }
        }
        drift
    }
}

impl Backend for QosBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Qos
    }

    fn prepare(&mut self, next: &Artifacts) -> Result<()> {
        self.committed = false;
        let p = plan(&next.qos)?;
        if let (Some(why), false) = (&self.unusable, p.classes.is_empty()) {
            let rules: BTreeSet<&str> = p.classes.iter().map(|c| c.rule.as_str()).collect();
            return Err(miette!(
                "refusing to apply {} ({} QoS class(es)): {why}",
                rules.into_iter().collect::<Vec<_>>().join(", "),
                p.classes.len()
            ));
        }
        self.created_pins = false;
        if !p.classes.is_empty() || self.pinned() {
            self.check_owner()?;
            let was_pinned = self.pinned();
            self.loaded()?; // load + verify the object now: a refusal stops the apply here
            self.created_pins = !was_pinned && self.pinned();
        }
        self.staged = Some(p);
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        let p = self.staged.take().ok_or_else(|| miette!("eBPF QoS: commit without prepare"))?;
        self.committed = true;
        self.apply_plan(&p)?;
        if !p.classes.is_empty() {
            self.claim()?;
        }
        Ok(())
    }

    fn rollback(&mut self, previous: Option<&Artifacts>) -> Result<()> {
        self.staged = None;
        if !std::mem::replace(&mut self.committed, false) {
            // Nothing of this transaction reached the dataplane; only the maps pinned by its
            // prepare, when there were none before, are taken away again.
            if std::mem::replace(&mut self.created_pins, false) {
                self.qos = None;
                fwc_qos::detach_all(&self.pin_root).map_err(|e| miette!("eBPF QoS: {e}"))?;
            }
            return Ok(());
        }
        match previous {
            Some(prev) => {
                let p = plan(&prev.qos)?;
                self.apply_plan(&p)
            }
            None => {
                self.qos = None;
                if self.pin_root.exists() {
                    fwc_qos::detach_all(&self.pin_root).map_err(|e| miette!("eBPF QoS: {e}"))?;
                }
                Ok(())
            }
        }
    }

    fn observe(&mut self, expected: &Artifacts) -> Result<Observation> {
        let p = plan(&expected.qos)?;
        let mut drift = self.drift(&p)?;
        if let (Some(why), false) = (&self.unusable, p.classes.is_empty()) {
            drift.insert(0, format!("eBPF QoS: {why}"));
        }
        let stats = self.class_stats()?;
        let mut per_rule: BTreeMap<(String, fwc_compiler::model::RuleKind), (u64, u64)> = BTreeMap::new();
        for c in &expected.qos.classes {
            if let Some(s) = stats.get(&c.id) {
                let e = per_rule.entry((c.rule.clone(), c.kind)).or_default();
                e.0 += s.passed_pkts;
                e.1 += s.passed_bytes;
            }
        }
        let counters = per_rule
            .into_iter()
            .map(|((rule, kind), (packets, bytes))| RuleCounter { rule, kind, backend: BackendKind::Qos, packets, bytes })
            .collect();
        let mut qos_packets = Vec::new();
        for c in &expected.qos.classes {
            let Some(s) = stats.get(&c.id) else { continue };
            let class = format!("{}/{}", c.rule, if c.direction == fwc_compiler::artifacts::QosDirection::Up { "up" } else { "down" });
            for (action, packets) in
                [("passed", s.passed_pkts), ("paced", s.paced_pkts), ("ecn", s.ecn_pkts), ("fastpass", s.fast_pkts), ("dropped", s.dropped_pkts)]
            {
                qos_packets.push(QosPackets { class: class.clone(), action, packets });
            }
        }
        Ok(Observation { drift, counters, qos_packets, ..Default::default() })
    }
}
