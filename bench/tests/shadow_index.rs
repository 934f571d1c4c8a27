//! The `shadowed-rule` lint's index finds exactly what the pairwise scan (kept as the oracle)
//! finds on the benchmark's generated repositories: same shadowed rules, same first cover.

#[test]
fn shadow_index_matches_the_pairwise_scan_on_generated_mixes() {
    for n in [20, 400, 4000] {
        let tree = fwc_bench::generate(n);
        let view = fwc_compiler::load_host(&tree, None).expect("the generated repository loads");
        let indexed = fwc_compiler::lint::shadowed_pairs(&view.map, &view.ruleset, false);
        let scanned = fwc_compiler::lint::shadowed_pairs(&view.map, &view.ruleset, true);
        assert_eq!(indexed, scanned, "{n} rules");
        // Per block of 20, "deny f{b}-6" repeats "deny f{b}-2" (same /24).
        assert_eq!(indexed.len(), n / 20, "{n} rules: the mix has shadowed rules");
    }
}

#[test]
fn shadow_index_matches_the_pairwise_scan_on_a_generated_fleet() {
    let tree = fwc_bench::generate_fleet(6, 400);
    for host in ["h000", "h001", "h002"] {
        let view = fwc_compiler::load_host(&tree, Some(host)).expect("the fleet loads");
        let indexed = fwc_compiler::lint::shadowed_pairs(&view.map, &view.ruleset, false);
        assert_eq!(indexed, fwc_compiler::lint::shadowed_pairs(&view.map, &view.ruleset, true), "host {host}");
    }
}
