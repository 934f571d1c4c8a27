//! Golden tests: every directory under `golden/` is a small rule repository. For each host it
//! declares, every artifact and the plan text (from nothing, and from `before/` when the case
//! has one) is compared with the insta snapshots in `golden/<case>/snapshots/`.
//! Review snapshot changes like code: `cargo insta review`.

use std::path::{Path, PathBuf};

use fwc_compiler::read::source::{SourceMap, SourceTree};

fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden")
}

fn cases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(golden_root())
        .expect("golden/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("fwc.kdl").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn hosts(tree: &SourceTree) -> Vec<String> {
    let mut map = SourceMap::default();
    let rs = fwc_compiler::read::syntax::parse_plain(tree, &mut map).expect("golden cases parse");
    fwc_compiler::host_names(&rs)
}

/// One test per case, so one failing case does not hide the others. A new directory under
/// golden/ must be added here too (`every_case_has_a_test` fails until it is).
macro_rules! golden_cases {
    ($($test:ident => $dir:literal,)*) => {
        $(
            #[test]
            fn $test() {
                check_case(&golden_root().join($dir));
            }
        )*
        const LISTED: &[&str] = &[$($dir),*];
    };
}

golden_cases! {
    case_01_minimal => "01-minimal",
    case_02_sets => "02-sets",
    case_03_input_filter => "03-input-filter",
    case_04_chains => "04-chains",
    case_05_addresses => "05-addresses",
    case_06_rates => "06-rates",
    case_07_forward_kernel => "07-forward-kernel",
    case_08_forward_ranges => "08-forward-ranges",
    case_09_forward_multi => "09-forward-multi",
    case_10_forward_ipv6 => "10-forward-ipv6",
    case_11_forward_qos => "11-forward-qos",
    case_12_forward_userspace => "12-forward-userspace",
    case_13_backend_choice => "13-backend-choice",
    case_14_shape => "14-shape",
    case_15_hosts => "15-hosts",
    case_16_templates => "16-templates",
    case_17_warnings => "17-warnings",
    case_18_plan_changes => "18-plan-changes",
    case_19_plan_unchanged => "19-plan-unchanged",
    case_20_multi_file => "20-multi-file",
    case_21_design_example => "21-design-example",
    case_22_forward_chain_and_forwards => "22-forward-chain-and-forwards",
    case_23_plan_reorder_policy => "23-plan-reorder-policy",
    case_24_userspace_drop_policies => "24-userspace-drop-policies",
    case_25_forward_sni => "25-forward-sni",
    case_26_containers => "26-containers",
    case_27_forward_health_kernel => "27-forward-health-kernel",
    case_28_forward_dns_kernel => "28-forward-dns-kernel",
    case_29_icmp_reject_log => "29-icmp-reject-log",
    case_30_source_nat => "30-source-nat",
    case_31_rollout => "31-rollout",
    case_32_header_matches => "32-header-matches",
    case_33_protocols => "33-protocols",
    case_34_prerouting => "34-prerouting",
    case_38_router => "38-router",
    case_40_per_source => "40-per-source",
    // schedules: compiled at the time in the case's `at` file
    case_50_schedule_summer => "50-schedule-summer",
    case_51_schedule_winter => "51-schedule-winter",
    // quota
    case_60_forward_quota => "60-forward-quota",
}

#[test]
fn every_case_has_a_test() {
    let found: Vec<String> = cases().iter().map(|c| c.file_name().unwrap().to_string_lossy().to_string()).collect();
    assert_eq!(found, LISTED, "add the new golden case to the golden_cases! list");
}

/// The time a case is compiled at: its `at` file (RFC 3339; schedules), else the Unix epoch
/// (what `compile` uses).
fn case_time(case: &Path) -> jiff::Timestamp {
    match std::fs::read_to_string(case.join("at")) {
        Ok(t) => t.trim().parse().unwrap_or_else(|e| panic!("{}/at: {e}", case.display())),
        Err(_) => jiff::Timestamp::UNIX_EPOCH,
    }
}

fn check_case(case: &Path) {
    let at = case_time(case);
    let name = case.file_name().unwrap().to_string_lossy().to_string();
    let tree = SourceTree::from_dir(case).unwrap_or_else(|d| panic!("{name}: {d}"));
    let before = case.join("before");
    let old_tree = before.join("fwc.kdl").is_file().then(|| SourceTree::from_dir(&before).unwrap());
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(case.join("snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    // With a rollout policy: each host's plan says its wave, and the fleet by wave is a snapshot.
    let fleet = fwc_compiler::features::rollout::fleet_plan(&tree).unwrap_or_else(|d| panic!("{name}: {d}"));
    settings.bind(|| {
        if fleet.policy.is_some() {
            insta::assert_snapshot!("fleet__waves", fwc_compiler::features::rollout::render_waves(&fleet));
        }
        for host in hosts(&tree) {
            let (art, warnings) = fwc_compiler::compile_at(&tree, Some(&host), Some("golden"), at)
                .unwrap_or_else(|d| panic!("golden case {name}, host {host}:\n{}", d.render(false)));
            for (file, text) in art.files() {
                // nftables.json and manifest.json are compact (one command, one rule per line):
                // their snapshots are the same documents pretty printed, so a change reads as the
                // lines that changed.
                let text = match file {
                    fwc_compiler::artifacts::NFTABLES_FILE => fwc_compiler::artifacts::to_pretty(&*art.nftables).into(),
                    fwc_compiler::artifacts::MANIFEST_FILE => fwc_compiler::artifacts::to_pretty(&art.manifest).into(),
                    _ => text,
                };
                insta::assert_snapshot!(format!("{host}__{file}"), text);
            }
            let plan = fwc_compiler::diff::plan(None, &art);
            let mut text = fwc_compiler::diff::render(&plan, false);
            if let Some(old_tree) = &old_tree {
                let (old, _) = fwc_compiler::compile_at(old_tree, Some(&host), Some("before"), at).expect("before/ compiles");
                text.push_str("\n--- from before/ ---\n");
                text.push_str(&fwc_compiler::diff::render(&fwc_compiler::diff::plan(Some(&old), &art), false));
            }
            if let (Some(w), Some(policy)) = (fleet.host_wave(&host), &fleet.policy) {
                text.push_str("\n--- rollout ---\n");
                text.push_str(&fwc_compiler::features::rollout::render_host_wave(&w, policy));
            }
            if !warnings.is_empty() {
                text.push_str("\n--- warnings ---\n");
                text.push_str(&warnings.to_string());
            }
            insta::assert_snapshot!(format!("{host}__plan"), text);
        }
    });
}

/// Golden output is deterministic: compiling twice gives identical bytes.
#[test]
fn golden_output_is_deterministic() {
    for case in cases() {
        let tree = SourceTree::from_dir(&case).unwrap();
        for host in hosts(&tree) {
            let (a, b) = (fwc_compiler::compile(&tree, Some(&host), None).unwrap().0, fwc_compiler::compile(&tree, Some(&host), None).unwrap().0);
            assert_eq!(a.files(), b.files(), "{} / {host} is not deterministic", case.display());
            // The files as `fwc compile --out` streams them are the same bytes: written from
            // the artifacts, and nftables.json written as it is emitted (then the other three).
            let view = fwc_compiler::load_host(&tree, Some(&host)).unwrap();
            let mut emitted = Vec::new();
            // The other three as `fwc compile --out` writes them after it (the manifest's rules
            // made while it is written).
            let rest: Vec<(&str, Vec<u8>)> = fwc_compiler::emit_view_to(&view, None, jiff::Timestamp::UNIX_EPOCH, &mut emitted, |rest| {
                fwc_compiler::artifacts::JSON_FILE_NAMES.iter().map(|&name| {
                    let mut bytes = Vec::new();
                    rest.write_file(name, &mut bytes).map(|()| (name, bytes))
                }).collect()
            })
            .unwrap();
            assert!(emitted == a.nftables.text().as_bytes(), "{} / {host}: nftables.json written as emitted differs from its text", case.display());
            for (file, text) in a.files() {
                let mut streamed = Vec::new();
                a.write_file(file, &mut streamed).unwrap();
                assert!(streamed == text.as_bytes(), "{} / {host}: {file} streamed differs from its text", case.display());
                if file != fwc_compiler::artifacts::NFTABLES_FILE {
                    let after = &rest.iter().find(|(name, _)| *name == file).expect("every JSON file is written").1;
                    assert!(after == text.as_bytes(), "{} / {host}: {file} after the emitted nftables.json differs", case.display());
                }
            }
        }
    }
}
