//! `#[repr(C)]` mirrors of the structs in `ebpf/qos_maps.h`. The tests at the bottom pin every
//! size and offset to the header's; change both together.

/// Class ids index arrays of this size (`FWC_QOS_MAX_CLASSES`).
pub const MAX_CLASSES: u32 = 4096;
// Class ids of the compiler's mark mask fit the arrays.
const _: () = assert!(fwc_artifacts::QOS_MAX_CLASS_ID < MAX_CLASSES);
/// Count-min sketch rows and cells per row.
pub const CMS_DEPTH: u32 = 4;
pub const CMS_WIDTH: u32 = 4096;

/// `fwc_qos_class_cfg.flags`
pub const F_ECN: u32 = 0x1;
pub const F_EDT: u32 = 0x2;
pub const F_FASTPASS: u32 = 0x4;
/// `fwc_qos_glob.flags`
pub const G_ENABLED: u32 = 0x1;

/// Map names (also the pin file names under the pin root).
pub const MAP_GLOB: &str = "fwc_qos_glob";
pub const MAP_CFG: &str = "fwc_qos_cfg";
pub const MAP_STATE: &str = "fwc_qos_state";
pub const MAP_STATS: &str = "fwc_qos_stats";
pub const MAP_CMS: &str = "fwc_qos_cms";
/// The program's name in the object (and the tc filter name under clsact).
pub const PROG_NAME: &str = "fwc_qos";

/// `struct fwc_qos_glob`: one entry, key 0.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Glob {
    pub mark_mask: u32,
    pub mark_shift: u32,
    pub flags: u32,
    /// Sketch window is 2^fp_window_shift ns; counts halve every window.
    pub fp_window_shift: u32,
    /// A flow whose decayed byte count is below this takes the fast pass.
    pub fp_threshold: u64,
    pub _reserved: u64,
}

/// `struct fwc_qos_class_cfg`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassCfg {
    /// Bytes per second; 0 = no class.
    pub rate: u64,
    pub burst: u64,
    pub ecn_debt: u64,
    /// Depth of the fast-pass bucket (bytes).
    pub fp_budget: u64,
    /// Refill of the fast-pass bucket (bytes/s): the most short flows may take over rate.
    pub fp_rate: u64,
    pub horizon: u64,
    pub flags: u32,
    /// Generation: bumped when a class is (re)created so the program restarts its bucket full.
    pub gen: u32,
}

/// `struct fwc_qos_class_state` (read-only for user space; `lock` is the bpf_spin_lock).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassState {
    pub lock: u32,
    pub gen: u32,
    pub credit: i64,
    pub last_ns: u64,
    pub rem: u64,
    pub fp_credit: i64,
    pub fp_rem: u64,
}

/// `struct fwc_qos_stats` (per CPU; [`crate::Qos::stats`] sums them).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub passed_pkts: u64,
    pub passed_bytes: u64,
    pub paced_pkts: u64,
    pub ecn_pkts: u64,
    pub dropped_pkts: u64,
    pub dropped_bytes: u64,
    pub fast_pkts: u64,
    pub fast_bytes: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.passed_pkts += o.passed_pkts;
        self.passed_bytes += o.passed_bytes;
        self.paced_pkts += o.paced_pkts;
        self.ecn_pkts += o.ecn_pkts;
        self.dropped_pkts += o.dropped_pkts;
        self.dropped_bytes += o.dropped_bytes;
        self.fast_pkts += o.fast_pkts;
        self.fast_bytes += o.fast_bytes;
    }
}

// SAFETY: plain old data, every bit pattern valid, no padding (checked by the tests below).
unsafe impl aya::Pod for Glob {}
unsafe impl aya::Pod for ClassCfg {}
unsafe impl aya::Pod for ClassState {}
unsafe impl aya::Pod for Stats {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Offsets as laid out by `qos_maps.h` (C rules: natural alignment, explicit padding).
    #[test]
    fn glob_layout() {
        assert_eq!(size_of::<Glob>(), 32);
        assert_eq!(offset_of!(Glob, mark_mask), 0);
        assert_eq!(offset_of!(Glob, mark_shift), 4);
        assert_eq!(offset_of!(Glob, flags), 8);
        assert_eq!(offset_of!(Glob, fp_window_shift), 12);
        assert_eq!(offset_of!(Glob, fp_threshold), 16);
        assert_eq!(offset_of!(Glob, _reserved), 24);
    }

    #[test]
    fn class_cfg_layout() {
        assert_eq!(size_of::<ClassCfg>(), 56);
        assert_eq!(offset_of!(ClassCfg, rate), 0);
        assert_eq!(offset_of!(ClassCfg, burst), 8);
        assert_eq!(offset_of!(ClassCfg, ecn_debt), 16);
        assert_eq!(offset_of!(ClassCfg, fp_budget), 24);
        assert_eq!(offset_of!(ClassCfg, fp_rate), 32);
        assert_eq!(offset_of!(ClassCfg, horizon), 40);
        assert_eq!(offset_of!(ClassCfg, flags), 48);
        assert_eq!(offset_of!(ClassCfg, gen), 52);
    }

    #[test]
    fn class_state_layout() {
        assert_eq!(size_of::<ClassState>(), 48);
        assert_eq!(offset_of!(ClassState, lock), 0);
        assert_eq!(offset_of!(ClassState, gen), 4);
        assert_eq!(offset_of!(ClassState, credit), 8);
        assert_eq!(offset_of!(ClassState, last_ns), 16);
        assert_eq!(offset_of!(ClassState, rem), 24);
        assert_eq!(offset_of!(ClassState, fp_credit), 32);
        assert_eq!(offset_of!(ClassState, fp_rem), 40);
    }

    #[test]
    fn stats_layout() {
        assert_eq!(size_of::<Stats>(), 64);
        let offs = [
            offset_of!(Stats, passed_pkts),
            offset_of!(Stats, passed_bytes),
            offset_of!(Stats, paced_pkts),
            offset_of!(Stats, ecn_pkts),
            offset_of!(Stats, dropped_pkts),
            offset_of!(Stats, dropped_bytes),
            offset_of!(Stats, fast_pkts),
            offset_of!(Stats, fast_bytes),
        ];
        assert_eq!(offs, [0, 8, 16, 24, 32, 40, 48, 56]);
    }

    /// The header and these constants agree (the header is the source of truth).
    #[test]
    fn header_constants_match() {
        let h = include_str!("../qos_maps.h");
        let def = |name: &str| -> String {
            let line = h.lines().find(|l| l.starts_with(&format!("#define {name} "))).unwrap_or_else(|| panic!("{name} missing"));
            line.split_whitespace().nth(2).unwrap().to_string()
        };
        assert_eq!(def("FWC_QOS_MAX_CLASSES"), MAX_CLASSES.to_string());
        assert_eq!(def("FWC_QOS_CMS_DEPTH"), CMS_DEPTH.to_string());
        assert_eq!(def("FWC_QOS_CMS_WIDTH"), CMS_WIDTH.to_string());
        assert_eq!(def("FWC_QOS_F_ECN"), format!("0x{F_ECN:x}"));
        assert_eq!(def("FWC_QOS_F_EDT"), format!("0x{F_EDT:x}"));
        assert_eq!(def("FWC_QOS_F_FASTPASS"), format!("0x{F_FASTPASS:x}"));
        assert_eq!(def("FWC_QOS_G_ENABLED"), format!("0x{G_ENABLED:x}"));
        // every struct in the header is mirrored here
        for s in ["fwc_qos_glob", "fwc_qos_class_cfg", "fwc_qos_class_state", "fwc_qos_stats"] {
            assert!(h.contains(&format!("struct {s} {{")), "{s}");
        }
        assert_eq!(h.matches("\nstruct fwc_").count(), 4, "a new struct in qos_maps.h needs a mirror here");
    }
}
