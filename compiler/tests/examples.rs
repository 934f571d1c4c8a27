//! Every example repository compiles for every host it declares, and (privileged) every
//! nftables.json produced by the examples and the golden cases passes `nft -j -c -f` inside a
//! fresh network namespace.

use std::path::{Path, PathBuf};

use fwc_compiler::read::source::{SourceMap, SourceTree};

fn repos(under: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(under);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("fwc.kdl").is_file()).collect();
    dirs.sort();
    dirs
}

/// (repo, host, nftables.json text) for every host of every repository under `under`.
fn compiled(under: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for dir in repos(under) {
        let tree = SourceTree::from_dir(&dir).unwrap_or_else(|d| panic!("{}: {d}", dir.display()));
        let mut map = SourceMap::default();
        let rs = fwc_compiler::read::syntax::parse_plain(&tree, &mut map).unwrap();
        for host in fwc_compiler::host_names(&rs) {
            let (art, _) = fwc_compiler::compile(&tree, Some(&host), None)
                .unwrap_or_else(|d| panic!("{} / {host}:\n{}", dir.display(), d.render(false)));
            out.push((dir.display().to_string(), host, fwc_compiler::artifacts::to_pretty(&art.nftables)));
        }
    }
    out
}

#[test]
fn every_example_compiles() {
    let all = compiled("examples");
    let repos: std::collections::BTreeSet<_> = all.iter().map(|(r, _, _)| r.clone()).collect();
    assert!(repos.len() >= 3, "quickstart, edge-host and fleet at least: {repos:?}");
    for name in ["quickstart", "edge-host", "fleet"] {
        assert!(repos.iter().any(|r| r.ends_with(name)), "examples/{name} missing");
    }
    // The fleet declares three hosts and all of them compile.
    assert_eq!(all.iter().filter(|(r, _, _)| r.ends_with("fleet")).count(), 3);
}

#[test]
fn every_nftables_json_passes_nft_check() {
    if !fwc_testkit::privileged("every_nftables_json_passes_nft_check") {
        return;
    }
    let ns = fwc_testkit::Netns::new("ck");
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, (repo, host, json)) in compiled("examples").into_iter().chain(compiled("golden")).enumerate() {
        let file = dir.path().join(format!("{i}.json"));
        std::fs::write(&file, &json).unwrap();
        let out = ns.try_exec(&["nft", "-j", "-c", "-f", file.to_str().unwrap()]);
        if !out.status.success() {
            failures.push(format!("{repo} / {host}: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    assert!(failures.is_empty(), "nft -j -c rejected:\n{}", failures.join("\n"));
}

/// The ```kdl blocks of a docs page, each a complete `fwc.kdl` (`fwc 1` added when the block
/// leaves it out): they must compile without errors, and their warnings are returned.
fn doc_examples(page: &str) -> Vec<(String, Vec<String>)> {
    doc_examples_but(page, |_| false)
}

/// [`doc_examples`] without the blocks `skip` names (those that need files beside `fwc.kdl`).
fn doc_examples_but(page: &str, skip: impl Fn(&str) -> bool) -> Vec<(String, Vec<String>)> {
    kdl_blocks_but(page, skip)
        .into_iter()
        .map(|src| {
            let tree = SourceTree::from_files([("fwc.kdl".to_string(), src.clone())]);
            let (_, warnings) =
                fwc_compiler::compile(&tree, None, None).unwrap_or_else(|d| panic!("docs/{page} example does not compile:\n{src}\n{}", d.render(false)));
            (src, warnings.0.iter().map(|w| w.code.clone()).collect())
        })
        .collect()
}

/// The ```kdl blocks of a docs page, `fwc 1` added when a block leaves it out.
fn kdl_blocks(page: &str) -> Vec<String> {
    kdl_blocks_but(page, |_| false)
}

/// [`kdl_blocks`] without the blocks `skip` names.
fn kdl_blocks_but(page: &str, skip: impl Fn(&str) -> bool) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs").join(page);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```kdl") => block = Some(String::new()),
            (Some(b), "```") if skip(b) => block = None,
            (Some(b), "```") => {
                out.push(if b.starts_with("fwc 1") { b.clone() } else { format!("fwc 1\n{b}") });
                block = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

/// docs/fleet.md's policies (fleets of several hosts): every host checks without a warning,
/// and the page's `fwc plan --waves` output is what the first example gives.
#[test]
fn docs_fleet_examples_compile() {
    let blocks = kdl_blocks("fleet.md");
    assert!(blocks.len() >= 2, "{blocks:?}");
    for src in &blocks {
        let tree = SourceTree::from_files([("fwc.kdl".to_string(), src.clone())]);
        let warnings = fwc_compiler::check_all(&tree).unwrap_or_else(|d| panic!("docs/fleet.md example does not compile:\n{src}\n{}", d.render(false)));
        assert!(warnings.is_empty(), "docs/fleet.md example warns:\n{src}\n{}", warnings.render(false));
        let plan = fwc_compiler::features::rollout::fleet_plan(&tree).unwrap();
        assert!(plan.policy.is_some() && plan.hosts.iter().all(|h| h.wave.is_some()), "{plan:?}");
    }
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fleet.md")).unwrap();
    let tree = SourceTree::from_files([("fwc.kdl".to_string(), blocks[0].clone())]);
    let shown = fwc_compiler::features::rollout::render_waves(&fwc_compiler::features::rollout::fleet_plan(&tree).unwrap());
    assert!(page.contains(&format!("$ fwc plan --waves\n{shown}```")), "docs/fleet.md should show:\n{shown}");
    let one = fwc_compiler::features::rollout::fleet_plan(&tree).unwrap();
    let line = fwc_compiler::features::rollout::render_host_wave(&one.host_wave("web-2").unwrap(), one.policy.as_ref().unwrap());
    assert!(page.contains(&line), "docs/fleet.md should show:\n{line}");
}

#[test]
fn docs_containers_examples_compile() {
    let examples = doc_examples("containers.md");
    assert!(examples.len() >= 3, "{examples:?}");
    // The page's warning example warns, and only that one.
    let warned: Vec<&(String, Vec<String>)> = examples.iter().filter(|(_, w)| w.iter().any(|c| c.ends_with("published-port-open"))).collect();
    assert_eq!(warned.len(), 1, "{examples:?}");
    assert!(warned[0].0.contains("\"grafana\"") && !warned[0].0.contains("policy=drop"), "{warned:?}");
}

/// The forms imported rulesets use: every docs/rules.md example that shows one
/// compiles, and each form has one. (Older examples of the page are fragments that lean on
/// sets declared elsewhere; golden/ covers those constructs.)
#[test]
fn docs_rules_examples_of_the_imported_forms_compile() {
    const FORMS: &[&str] = &["icmp-type=", "reject-with=", "log-rate=", "log-prefix=", "log \"", "state=", "policy=reject", "masquerade \"", "snat \""];
    let examples = doc_examples_but("rules.md", |b| !FORMS.iter().any(|f| b.contains(f)));
    for form in FORMS {
        assert!(examples.iter().any(|(src, _)| src.contains(form)), "no docs/rules.md example uses {form}");
    }
}

/// docs/rules.md's per-source examples compile, use every per-source property,
/// and compile to the sets and fail-closed rules the page describes.
#[test]
fn docs_rules_per_source_examples_compile() {
    const PROPS: &[&str] =
        &["rate-per-source=", "conn-rate-per-source=", "max-conns-per-source=", "per-source-prefix6=", "per-source-size="];
    let examples = doc_examples_but("rules.md", |b| !b.contains("per-source"));
    assert!(examples.len() >= 2, "{examples:?}");
    for p in PROPS {
        assert!(examples.iter().any(|(src, _)| src.contains(p)), "no docs/rules.md example uses {p}");
    }
    let first = &examples[0].0;
    assert!(first.contains("allow \"ssh\" proto=tcp port=22 rate-per-source=\"5/minute burst 5\" max-conns-per-source=3"), "the issue's form: {first}");
    let tree = SourceTree::from_files([("fwc.kdl".to_string(), first.clone())]);
    let (art, _) = fwc_compiler::compile(&tree, None, None).unwrap();
    let nft = fwc_compiler::artifacts::to_pretty(&art.nftables);
    for set in ["_ps_input_ssh_r_v4", "_ps_input_ssh_c_v6", "_ps_fwd_web_r_v4", "_ps_fwd_web_c_v6"] {
        assert!(nft.contains(&format!("\"{set}\"")), "{set} missing:\n{nft}");
    }
    let manifest = serde_json::to_string(&art.manifest).unwrap();
    assert!(manifest.contains("per-source rate 5/minute burst 5 max-conns 3 (sources by IPv4 /32 IPv6 /64; tracks up to 65536 sources per family, when full new sources are refused)"), "{manifest}");
}

/// Schedules: docs/rules.md's examples with `during=` / `until=` compile without a
/// warning (a scheduled rule shadows nothing), at a time before every `until=`.
#[test]
fn docs_rules_schedule_examples_compile() {
    let blocks = kdl_blocks_but("rules.md", |b| !b.contains("during=") && !b.contains("until="));
    assert!(!blocks.is_empty(), "no docs/rules.md example with during= or until=");
    let at: jiff::Timestamp = "2026-12-01T08:00:00Z".parse().unwrap();
    for src in &blocks {
        let tree = SourceTree::from_files([("fwc.kdl".to_string(), src.clone())]);
        let (art, warnings) = fwc_compiler::compile_at(&tree, None, None, at).unwrap_or_else(|d| panic!("docs/rules.md example does not compile:\n{src}\n{}", d.render(false)));
        assert!(warnings.is_empty(), "docs/rules.md example warns:\n{src}\n{}", warnings.render(false));
        assert!(art.manifest.valid_until.is_some(), "{src}");
    }
}

/// quota: every docs/rules.md example with a quota compiles, and the form
/// that introduced quotas is one of them.
#[test]
fn docs_rules_quota_examples_compile() {
    let examples = doc_examples_but("rules.md", |b| !b.contains("quota="));
    assert!(!examples.is_empty(), "docs/rules.md has no quota example");
    let issue = r#"forward "game" listen=":27015" to="198.19.0.2:27015" proto=both quota="500GB/month" quota-reset-day=1 over-quota="drop""#;
    assert!(examples.iter().any(|(src, _)| src.contains(issue)), "the issue's form is not among the examples");
    for (src, warnings) in &examples {
        assert!(warnings.is_empty(), "{src}: {warnings:?}");
    }
}
