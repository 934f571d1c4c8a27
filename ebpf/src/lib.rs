//! fwc's eBPF QoS dataplane: the tc/TCX token-bucket program (`qos.bpf.c`, built by build.rs
//! with clang) and its loader.
//!
//! [`Qos::open`] loads and verifies the object once per process, reuses the maps pinned under the
//! pin root (default [`DEFAULT_PIN_ROOT`]) so class state and counters survive a restart,
//! atomically switches every pinned TCX link and every clsact filter of its namespace to the
//! freshly loaded program (no gap for traffic)
//! and pins the program. [`Qos::attach`] attaches with TCX (pinned link per interface) and falls
//! back to a clsact filter; [`Qos::set_class`] updates a class in place. See docs/qos.md.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use aya::maps::{Array, Map, MapData, PerCpuArray};
use aya::programs::links::FdLink;
use aya::programs::tc::{self, SchedClassifier, TcAttachOptions, TcAttachType};
use aya::programs::LinkOrder;
use aya::{Ebpf, EbpfLoader};

mod error;
pub mod maps;
pub mod pin_root;
pub mod rtnl;
pub mod sockmap;
pub mod sys;

pub use error::QosError;
pub use maps::{ClassCfg, ClassState, Glob, Stats};
pub use pin_root::{pin_root_for, DEFAULT_PIN_ROOT};

/// Pin name of the program inside the pin root.
pub const PROG_PIN: &str = "prog";
/// Directory (inside the pin root) of the pinned TCX links, one per interface name.
pub const LINKS_DIR: &str = "links";
/// Directory (inside the pin root) holding the owner record: one empty directory named after
/// the state dir that manages this dataplane (percent-encoded), see fwc-runtime's QoS backend.
pub const OWNER_DIR: &str = "owner";

/// Fastest class the program accepts (its refill arithmetic stays in u64 below this).
pub const MAX_RATE: u64 = 2_000_000_000;
/// Default fast-pass threshold: flows with fewer (decayed) bytes than this are short.
pub const DEFAULT_FP_THRESHOLD: u64 = 64 * 1024;
/// Default sketch window: 2^27 ns = 134 ms; counts halve every window.
pub const DEFAULT_FP_WINDOW_SHIFT: u32 = 27;

/// Bytes aligned like `A` (BPF objects are ELF files aya reads in place).
#[repr(C)]
pub(crate) struct AlignedAs<A, B: ?Sized> {
    pub(crate) _align: [A; 0],
    pub(crate) bytes: B,
}
static OBJECT: &AlignedAs<u64, [u8]> =
    &AlignedAs { _align: [], bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/qos.bpf.o")) };

/// The compiled BPF object (ELF), 8-byte aligned.
pub fn object() -> &'static [u8] {
    &OBJECT.bytes
}

type Result<T> = std::result::Result<T, QosError>;

fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> QosError {
    move |e| QosError(format!("{what}: {e}"))
}

/// How the program is attached to an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// A TCX egress link, pinned under `<root>/links/<ifname>`.
    Tcx,
    /// A clsact egress filter (kernels without TCX, or when TCX attach failed).
    Clsact,
}

/// The derived per-class knobs for a (rate, burst) pair; see docs/qos.md.
pub fn class_cfg(rate: u64, burst: u64, edt: bool) -> ClassCfg {
    let burst = burst.max(2 * 1514);
    ClassCfg {
        rate,
        burst,
        // CE-mark ECN-capable TCP for up to a quarter bucket of debt before dropping.
        ecn_debt: (burst / 4).max(3028),
        // Short flows pass over rate from their own bucket: a quarter of the class bucket deep
        // (at least above one 64 KiB GSO packet of the elephant), refilled at half the class
        // rate, so a crowd of short flows can never take more than half from the rest.
        fp_budget: (burst / 4).max(96 * 1024),
        fp_rate: rate / 2,
        // EDT: pace at most one second ahead, drop beyond.
        horizon: rate.max(64 * 1024),
        flags: maps::F_ECN | maps::F_FASTPASS | if edt { maps::F_EDT } else { 0 },
        gen: 0,
    }
}

/// Does `ifname` (in the calling thread's network namespace) have `fq` as its root qdisc?
/// Only then can EDT timestamps pace; otherwise the program polices (ECN/drop).
pub fn root_qdisc_is_fq(ifname: &str) -> Result<bool> {
    let index = sys::ifindex(ifname).ok_or_else(|| QosError(format!("interface {ifname} does not exist")))?;
    let kind = rtnl::root_qdisc_kind(index).map_err(err(format!("reading the root qdisc of {ifname} (route netlink)")))?;
    Ok(kind.as_deref() == Some("fq"))
}

/// Make sure `root` can hold pins: mount bpffs at /sys/fs/bpf when it is not mounted and the
/// root lies below it, then create the directory.
pub fn ensure_pin_root(root: &Path) -> Result<()> {
    let sys = Path::new("/sys/fs/bpf");
    if root.starts_with(sys) && !sys::is_bpffs(sys) {
        sys::mount_bpffs(sys).map_err(err("mounting bpffs at /sys/fs/bpf"))?;
        eprintln!(
            "fwc-qos: mounted a bpffs at /sys/fs/bpf. In a private mount namespace (e.g. under \
             `ip netns exec`) pins made there vanish with the process: use `nsenter --net=...`"
        );
    }
    std::fs::create_dir_all(root.join(LINKS_DIR)).map_err(err(format!("creating {}", root.display())))?;
    if !sys::is_bpffs(root) {
        return Err(QosError(format!("{} is not on a BPF filesystem (mount -t bpf bpf DIR)", root.display())));
    }
    Ok(())
}

/// The QoS dataplane: program (when loaded by this process) and the pinned maps.
pub struct Qos {
    root: PathBuf,
    ebpf: Option<Ebpf>,
    glob: Array<MapData, Glob>,
    cfg: Array<MapData, ClassCfg>,
    state: Array<MapData, ClassState>,
    stats: PerCpuArray<MapData, Stats>,
    /// Attach with clsact even where TCX works (tests of the fallback).
    pub force_clsact: bool,
}

fn open_map(root: &Path, name: &str) -> Result<Map> {
    let p = root.join(name);
    let data = MapData::from_pin(&p).map_err(err(format!("opening pinned map {}", p.display())))?;
    Map::from_map_data(data).map_err(err(format!("map {}", p.display())))
}

/// Expected (value size, max entries) of every pinned map, to refuse incompatible old pins.
fn expected_maps() -> [(&'static str, u32, u32); 5] {
    use std::mem::size_of;
    [
        (maps::MAP_GLOB, size_of::<Glob>() as u32, 1),
        (maps::MAP_CFG, size_of::<ClassCfg>() as u32, maps::MAX_CLASSES),
        (maps::MAP_STATE, size_of::<ClassState>() as u32, maps::MAX_CLASSES),
        (maps::MAP_STATS, size_of::<Stats>() as u32, maps::MAX_CLASSES),
        (maps::MAP_CMS, 8, maps::CMS_DEPTH * maps::CMS_WIDTH),
    ]
}

impl Qos {
    /// Load and verify the program, adopt (or create) the pinned maps under `root`, switch every
    /// pinned TCX link to the new program atomically and pin the program. Safe to call while a
    /// previous instance's program is shaping traffic: there is no moment without a program.
    pub fn open(root: impl AsRef<Path>) -> Result<Qos> {
        let root = root.as_ref().to_path_buf();
        ensure_pin_root(&root)?;
        for (name, vsize, max) in expected_maps() {
            let p = root.join(name);
            if p.exists() {
                let info = aya::maps::MapInfo::from_pin(&p).map_err(err(format!("reading {}", p.display())))?;
                if info.value_size() != vsize || info.max_entries() != max {
                    return Err(QosError(format!(
                        "pinned map {} has value size {} and {} entries, this fwc expects {vsize} and {max}: \
                         run `fwc qos detach` to remove the old dataplane first",
                        p.display(),
                        info.value_size(),
                        info.max_entries()
                    )));
                }
            }
        }
        let mut ebpf = EbpfLoader::new()
            .default_map_pin_directory(&root)
            .load(object())
            .map_err(err("loading the eBPF QoS object"))?;
        {
            let prog: &mut SchedClassifier = ebpf
                .program_mut(maps::PROG_NAME)
                .ok_or_else(|| QosError("program fwc_qos missing from the object".into()))?
                .try_into()
                .map_err(err("program fwc_qos"))?;
            prog.load().map_err(|e| QosError(format!("verifier rejected fwc_qos: {e:?}")))?;
            let fd = prog.fd().map_err(err("program fd"))?;
            // Adopt: every pinned TCX link now runs the new program (atomic per link).
            // A link whose attachment is gone (`bpftool link detach`, the interface removed)
            // is severed: its pin is dropped and `attach` makes a new one where needed.
            for (ifname, link) in pinned_links(&root) {
                let lfd = sys::obj_get(&link).map_err(err(format!("opening {}", link.display())))?;
                match sys::link_update(&lfd, fd.as_fd()) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOLINK) => {
                        std::fs::remove_file(&link).map_err(err(format!("removing the severed link {}", link.display())))?;
                    }
                    Err(e) => return Err(QosError(format!("switching the link of {ifname}: {e}"))),
                }
            }
            // Adopt: every clsact filter of ours (interfaces of this namespace) is replaced in
            // place (same priority and handle) by the new program.
            for ifname in interfaces() {
                if let Some((prio, handle)) = clsact_filter(&ifname)? {
                    let link = tc::SchedClassifierLink::attached(&ifname, TcAttachType::Egress, prio, handle.into(), None)
                        .map_err(err(format!("the clsact filter of {ifname}")))?;
                    let id = prog.attach_to_link(link).map_err(err(format!("replacing the clsact filter of {ifname}")))?;
                    // The filter must outlive this process: dropping the link would delete it.
                    std::mem::forget(prog.take_link(id).map_err(err("taking the clsact link"))?);
                }
            }
            let pin = root.join(PROG_PIN);
            let _ = std::fs::remove_file(&pin);
            prog.pin(&pin).map_err(err(format!("pinning {}", pin.display())))?;
        }
        let mut q = Qos::from_root(root, Some(ebpf))?;
        let g = q.glob()?;
        if g.mark_mask == 0 {
            q.set_glob(&Glob {
                mark_mask: fwc_artifacts::QOS_MARK_MASK,
                mark_shift: fwc_artifacts::QOS_MARK_SHIFT,
                flags: maps::G_ENABLED,
                fp_window_shift: DEFAULT_FP_WINDOW_SHIFT,
                fp_threshold: DEFAULT_FP_THRESHOLD,
                _reserved: 0,
            })?;
        }
        Ok(q)
    }

    /// Open the pinned maps only (no program load): for `fwc qos stats` and observing.
    pub fn open_pinned(root: impl AsRef<Path>) -> Result<Qos> {
        let root = root.as_ref().to_path_buf();
        if !root.join(maps::MAP_CFG).exists() {
            return Err(QosError(format!("no fwc QoS dataplane pinned under {}", root.display())));
        }
        Qos::from_root(root, None)
    }

    fn from_root(root: PathBuf, ebpf: Option<Ebpf>) -> Result<Qos> {
        let conv = |name: &str| err::<aya::maps::MapError>(format!("map {name}"));
        Ok(Qos {
            glob: open_map(&root, maps::MAP_GLOB)?.try_into().map_err(conv(maps::MAP_GLOB))?,
            cfg: open_map(&root, maps::MAP_CFG)?.try_into().map_err(conv(maps::MAP_CFG))?,
            state: open_map(&root, maps::MAP_STATE)?.try_into().map_err(conv(maps::MAP_STATE))?,
            stats: open_map(&root, maps::MAP_STATS)?.try_into().map_err(conv(maps::MAP_STATS))?,
            root,
            ebpf,
            force_clsact: false,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn glob(&self) -> Result<Glob> {
        self.glob.get(&0, 0).map_err(err("reading fwc_qos_glob"))
    }

    pub fn set_glob(&mut self, g: &Glob) -> Result<()> {
        self.glob.set(0, g, 0).map_err(err("writing fwc_qos_glob"))
    }

    /// Set the mark mask (class id = (mark & mask) >> trailing zeros of mask).
    pub fn set_mark_mask(&mut self, mask: u32) -> Result<()> {
        let mut g = self.glob()?;
        g.mark_mask = mask;
        g.mark_shift = if mask == 0 { 0 } else { mask.trailing_zeros() };
        self.set_glob(&g)
    }

    pub fn class(&self, id: u32) -> Result<ClassCfg> {
        self.cfg.get(&id, 0).map_err(err(format!("reading class {id}")))
    }

    pub fn class_state(&self, id: u32) -> Result<ClassState> {
        self.state.get(&id, 0).map_err(err(format!("reading state of class {id}")))
    }

    /// Create or update class `id` in place. An existing class keeps its bucket (credit and
    /// debt carry over, clamped to the new burst); a new one starts with a full bucket.
    pub fn set_class(&mut self, id: u32, c: &ClassCfg) -> Result<()> {
        if id == 0 || id >= maps::MAX_CLASSES {
            return Err(QosError(format!("class id {id} outside 1..{}", maps::MAX_CLASSES)));
        }
        if c.rate == 0 || c.rate > MAX_RATE {
            return Err(QosError(format!("class {id}: rate {} bytes/s outside 1..={MAX_RATE}", c.rate)));
        }
        let old = self.class(id)?;
        let mut c = *c;
        c.gen = if old.rate == 0 { old.gen.wrapping_add(1).max(1) } else { old.gen };
        self.cfg.set(id, c, 0).map_err(err(format!("writing class {id}")))
    }

    /// Remove class `id`: its packets pass unshaped from now on.
    pub fn remove_class(&mut self, id: u32) -> Result<()> {
        let old = self.class(id)?;
        if old.rate == 0 {
            return Ok(());
        }
        let c = ClassCfg { gen: old.gen, ..ClassCfg::default() };
        self.cfg.set(id, c, 0).map_err(err(format!("removing class {id}")))
    }

    /// Every configured class (rate > 0), by id.
    pub fn classes(&self) -> Result<Vec<(u32, ClassCfg)>> {
        let mut v = Vec::new();
        for id in 1..maps::MAX_CLASSES {
            let c = self.class(id)?;
            if c.rate != 0 {
                v.push((id, c));
            }
        }
        Ok(v)
    }

    /// Counters of class `id` summed over CPUs (id 0 = packets without a class).
    pub fn stats(&self, id: u32) -> Result<Stats> {
        let per_cpu = self.stats.get(&id, 0).map_err(err(format!("reading counters of class {id}")))?;
        let mut s = Stats::default();
        for v in per_cpu.iter() {
            s.add(v);
        }
        Ok(s)
    }

    fn prog(&mut self) -> Result<&mut SchedClassifier> {
        let ebpf = self.ebpf.as_mut().ok_or_else(|| QosError("the program is not loaded (opened pins only)".into()))?;
        ebpf.program_mut(maps::PROG_NAME)
            .ok_or_else(|| QosError("program fwc_qos missing".into()))?
            .try_into()
            .map_err(err("program fwc_qos"))
    }

    fn link_pin(&self, ifname: &str) -> PathBuf {
        self.root.join(LINKS_DIR).join(ifname)
    }

    /// How (if at all) the program is attached to `ifname` (in this thread's network namespace),
    /// as the kernel says: see [`attachment`].
    pub fn attached(&self, ifname: &str) -> Option<AttachMode> {
        attachment(ifname)
    }

    /// Id of the program this process loaded (None when it opened the pins only).
    pub fn loaded_prog_id(&self) -> Option<u32> {
        let ebpf = self.ebpf.as_ref()?;
        let prog: &SchedClassifier = ebpf.program(maps::PROG_NAME)?.try_into().ok()?;
        sys::prog_id(prog.fd().ok()?.as_fd()).ok()
    }

    /// Are the pins under the root still this instance's: the pinned program is the one this
    /// process loaded and every map pin exists? False after `fwc qos detach` or after another
    /// process re-created the dataplane; the instance must then be opened again.
    pub fn pins_intact(&self) -> bool {
        let Some(mine) = self.loaded_prog_id() else { return false };
        pinned_prog_id(&self.root) == Some(mine) && expected_maps().iter().all(|(n, _, _)| self.root.join(n).exists())
    }

    /// Attach to the egress of `ifname` unless already attached: TCX link pinned under
    /// `<root>/links/<ifname>`, else a clsact filter.
    pub fn attach(&mut self, ifname: &str) -> Result<AttachMode> {
        if sys::ifindex(ifname).is_none() {
            return Err(QosError(format!("no interface {ifname}")));
        }
        if let Some(m) = self.attached(ifname) {
            return Ok(m);
        }
        let pin = self.link_pin(ifname);
        let _ = std::fs::remove_file(&pin); // a stale link of a vanished interface
        let force_clsact = self.force_clsact;
        let prog = self.prog()?;
        if !force_clsact {
            match prog.attach_with_options(ifname, TcAttachType::Egress, TcAttachOptions::TcxOrder(LinkOrder::default())) {
                Ok(id) => {
                    let link = prog.take_link(id).map_err(err("taking the TCX link"))?;
                    let fd: FdLink = link.try_into().map_err(err("TCX link"))?;
                    fd.pin(&pin).map_err(err(format!("pinning {}", pin.display())))?;
                    return Ok(AttachMode::Tcx);
                }
                Err(e) => tracing_fallback(ifname, &e),
            }
        }
        match tc::qdisc_add_clsact(ifname) {
            Ok(()) => {}
            Err(tc::TcError::NetlinkError(e)) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(QosError(format!("adding clsact to {ifname}: {e}"))),
        }
        let id = prog
            .attach_with_options(ifname, TcAttachType::Egress, TcAttachOptions::Netlink(Default::default()))
            .map_err(err(format!("attaching to {ifname} (clsact)")))?;
        let link = prog.take_link(id).map_err(err("taking the clsact link"))?;
        // The filter must outlive this process: dropping the link would delete it.
        std::mem::forget(link);
        Ok(AttachMode::Clsact)
    }

    /// Detach from `ifname` (both TCX and clsact). Missing attachments are not an error.
    pub fn detach(&mut self, ifname: &str) -> Result<()> {
        detach_iface(&self.root, ifname)
    }

    /// Interfaces with a pinned TCX link (whether or not the link is still alive).
    pub fn tcx_links(&self) -> Vec<String> {
        pinned_links(&self.root).into_iter().map(|(n, _)| n).collect()
    }

    /// Run the program once on `packet` (an Ethernet frame) with `skb->mark = mark` through
    /// BPF_PROG_TEST_RUN. Returns (verdict, packet after the program, skb->tstamp after).
    pub fn test_run(&mut self, mark: u32, wire_len: u32, packet: &[u8]) -> Result<TestRunOut> {
        use aya::TestRun;
        let mut ctx = [0u8; SK_BUFF_SIZE];
        ctx[SK_BUFF_MARK..SK_BUFF_MARK + 4].copy_from_slice(&mark.to_ne_bytes());
        ctx[SK_BUFF_WIRE_LEN..SK_BUFF_WIRE_LEN + 4].copy_from_slice(&wire_len.to_ne_bytes());
        let mut ctx_out = [0u8; SK_BUFF_SIZE];
        let mut data_out = vec![0u8; packet.len() + 256];
        let prog = self.prog()?;
        let r = prog
            .test_run(aya::TestRunOptions {
                data_in: Some(packet),
                data_out: Some(&mut data_out),
                ctx_in: Some(&ctx),
                ctx_out: Some(&mut ctx_out),
                repeat: 1,
                ..Default::default()
            })
            .map_err(err("BPF_PROG_TEST_RUN"))?;
        data_out.truncate(r.data_size_out as usize);
        let tstamp = u64::from_ne_bytes(ctx_out[SK_BUFF_TSTAMP..SK_BUFF_TSTAMP + 8].try_into().unwrap());
        Ok(TestRunOut { verdict: r.return_value as i32, packet: data_out, tstamp })
    }
}

/// `struct __sk_buff` (uapi/linux/bpf.h): size and the offsets the tests set.
const SK_BUFF_SIZE: usize = 192;
const SK_BUFF_MARK: usize = 8;
const SK_BUFF_TSTAMP: usize = 152;
const SK_BUFF_WIRE_LEN: usize = 160;

/// TC verdicts the program returns.
pub const TC_ACT_OK: i32 = 0;
pub const TC_ACT_SHOT: i32 = 2;

#[derive(Debug, Clone)]
pub struct TestRunOut {
    pub verdict: i32,
    pub packet: Vec<u8>,
    pub tstamp: u64,
}

/// How fwc's program (`fwc_qos`) is attached to the egress of `ifname`, asking the kernel:
/// TCX through BPF_PROG_QUERY (Debian 12's bpftool cannot list TCX), clsact through the tc
/// filter list. A pinned link whose attachment is gone (`bpftool link detach`, the interface
/// re-created) does not count.
pub fn attachment(ifname: &str) -> Option<AttachMode> {
    tcx_prog_ids(ifname).map(|ids| !ids.is_empty()).unwrap_or(false).then_some(AttachMode::Tcx)
        .or_else(|| clsact_attached(ifname).then_some(AttachMode::Clsact))
}

/// Ids of the `fwc_qos` programs attached to the TCX egress of `ifname` (BPF_PROG_QUERY);
/// `None` when the kernel cannot be asked (no such interface, no TCX).
pub fn tcx_prog_ids(ifname: &str) -> Option<Vec<u32>> {
    let (_, progs) = SchedClassifier::query_tcx(ifname, TcAttachType::Egress).ok()?;
    Some(progs.iter().filter(|p| p.name_as_str() == Some(maps::PROG_NAME)).map(|p| p.id()).collect())
}

/// Id of the program pinned under `root`, if the pin is there.
pub fn pinned_prog_id(root: &Path) -> Option<u32> {
    let fd = sys::obj_get(&root.join(PROG_PIN)).ok()?;
    sys::prog_id(fd.as_fd()).ok()
}

fn tracing_fallback(ifname: &str, e: &aya::programs::ProgramError) {
    eprintln!("fwc-qos: TCX attach on {ifname} failed ({e}); falling back to clsact");
}

fn pinned_links(root: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(root.join(LINKS_DIR))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// fwc's clsact egress filter on `ifname`, if any: (priority, handle). Ours is the one aya
/// named after the program (`TCA_BPF_NAME`), or one that runs a program called `fwc_qos`
/// (attached by hand, `tc filter add … bpf object-pinned …`); any other filter is foreign.
/// `Ok(None)` when there is none or no such interface.
pub fn clsact_filter(ifname: &str) -> Result<Option<(u16, u32)>> {
    let Some(index) = sys::ifindex(ifname) else { return Ok(None) };
    let filters = rtnl::egress_bpf_filters(index).map_err(err(format!("listing the clsact filters of {ifname} (route netlink)")))?;
    let ours = |f: &rtnl::BpfFilter| {
        f.name.as_deref() == Some(maps::PROG_NAME)
            || f.prog_id.is_some_and(|id| {
                aya::programs::loaded_programs()
                    .flatten()
                    .any(|p| p.id() == id && p.name_as_str() == Some(maps::PROG_NAME))
            })
    };
    Ok(filters.iter().find(|f| ours(f)).map(|f| (f.priority, f.handle)))
}

fn clsact_attached(ifname: &str) -> bool {
    clsact_filter(ifname).ok().flatten().is_some()
}

fn detach_iface(root: &Path, ifname: &str) -> Result<()> {
    let pin = root.join(LINKS_DIR).join(ifname);
    match std::fs::remove_file(&pin) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(QosError(format!("removing {}: {e}", pin.display()))),
    }
    if sys::ifindex(ifname).is_some() {
        match tc::qdisc_detach_program(ifname, TcAttachType::Egress, maps::PROG_NAME) {
            Ok(()) => {}
            Err(tc::TcError::IoError(e)) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(QosError(format!("detaching the clsact filter from {ifname}: {e}"))),
        }
    }
    Ok(())
}

/// Interfaces of the calling thread's network namespace.
pub fn interfaces() -> Vec<String> {
    let mut v = Vec::new();
    // SAFETY: if_nameindex returns an array terminated by a zero entry; freed below.
    unsafe {
        let p = libc::if_nameindex();
        if p.is_null() {
            return v;
        }
        let mut i = 0;
        loop {
            let e = *p.add(i);
            if e.if_index == 0 || e.if_name.is_null() {
                break;
            }
            v.push(std::ffi::CStr::from_ptr(e.if_name).to_string_lossy().into_owned());
            i += 1;
        }
        libc::if_freenameindex(p);
    }
    v
}

/// Remove everything fwc attached and pinned under `root`: TCX links, clsact filters named
/// `fwc_qos` on every interface of this network namespace, the program and the maps.
pub fn detach_all(root: impl AsRef<Path>) -> Result<()> {
    let root = root.as_ref();
    for (ifname, _) in pinned_links(root) {
        detach_iface(root, &ifname)?;
    }
    for ifname in interfaces() {
        let _ = tc::qdisc_detach_program(&ifname, TcAttachType::Egress, maps::PROG_NAME);
    }
    if root.exists() {
        let _ = std::fs::remove_dir(root.join(LINKS_DIR));
        if let Ok(rd) = std::fs::read_dir(root.join(OWNER_DIR)) {
            for e in rd.flatten() {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(root.join(OWNER_DIR));
        let _ = std::fs::remove_file(root.join(PROG_PIN));
        for (name, _, _) in expected_maps() {
            let _ = std::fs::remove_file(root.join(name));
        }
        std::fs::remove_dir(root).map_err(err(format!("removing {}", root.display())))?;
    }
    Ok(())
}
