//! Fleets compile in parallel with one shared parse: `compile_all` and `check_fleet` of a
//! 100-host repository give exactly what compiling / checking each host on its own gives,
//! in the same order, every time.

use fwc_compiler::diag::Diagnostics;

fn serial_check(tree: &fwc_compiler::read::source::SourceTree, hosts: &[String]) -> Diagnostics {
    let per_host = hosts
        .iter()
        .map(|h| match fwc_compiler::load_host(tree, Some(h)) {
            Ok(v) => v.warnings,
            Err(e) => e,
        })
        .collect();
    fwc_compiler::merge_unique(per_host)
}

fn json(d: &Diagnostics) -> String {
    serde_json::to_string(&d.0).unwrap()
}

#[test]
fn a_fleet_compiles_in_parallel_exactly_as_host_by_host() {
    let tree = fwc_bench::generate_fleet(100, 20);
    let fleet = fwc_compiler::compile_all(&tree, Some("abc123")).expect("the fleet compiles");
    assert_eq!(fleet.len(), 100);
    for h in &fleet {
        let (serial, warnings) = fwc_compiler::compile(&tree, Some(&h.host), Some("abc123")).expect("each host compiles");
        assert_eq!(h.artifacts.files(), serial.files(), "host {}", h.host);
        assert_eq!(json(&h.warnings), json(&warnings), "host {}", h.host);
    }
    let names: Vec<&str> = fleet.iter().map(|h| h.host.as_str()).collect();
    assert_eq!(names[..3], ["h000", "h001", "h002"], "hosts in declaration order");
    // Templates rendered per host: each has its own shape, edges their db forward.
    assert!(fleet[0].artifacts.manifest.rules.iter().any(|r| r.name == "to-db-h000"));
    assert!(fleet[1].artifacts.manifest.rules.iter().any(|r| r.name == "wan-h001"));
    // The same again: no dependence on scheduling.
    let again = fwc_compiler::compile_all(&tree, Some("abc123")).unwrap();
    assert!(fleet.iter().zip(&again).all(|(a, b)| a.host == b.host && a.artifacts.files() == b.artifacts.files()));
}

#[test]
fn a_fleet_checks_in_parallel_exactly_as_host_by_host() {
    let tree = fwc_bench::generate_fleet(100, 20);
    let fleet = fwc_compiler::check_fleet(&tree).expect("the fleet checks");
    assert_eq!(fleet.hosts.len(), 100);
    assert_eq!(json(&fleet.warnings), json(&serial_check(&tree, &fleet.hosts)));
    assert_eq!(json(&fwc_compiler::check_all(&tree).unwrap()), json(&fleet.warnings));

    // Errors of every host, each once, in host order.
    let mut files = tree.files.clone();
    files.insert("rules/broken.kdl.j2".into(), "forward \"x-{{ host.name }}\" listen=\":1\" to=\"@nope\"\n".into());
    let broken = fwc_compiler::read::source::SourceTree::from_files(files);
    let errs = fwc_compiler::check_fleet(&broken).expect_err("every host fails");
    let serial = serial_check(&broken, &fleet.hosts);
    assert_eq!(json(&errs), json(&serial));
    assert!(errs.0.len() >= 100, "one error per host at least: {}", errs.0.len());
    assert_eq!(json(&fwc_compiler::compile_all(&broken, None).expect_err("fails")), json(&serial));
}
