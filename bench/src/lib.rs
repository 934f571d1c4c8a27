//! Benchmark support: a generator of large, realistic rule repositories (mixed kinds) used by
//! the criterion compiler bench and by `fwc-bench-compile` (time and peak memory per size).

use fwc_compiler::read::source::SourceTree;

/// A repository with `n` rules: per 20 rules, 2 sets of 8 addresses, 10 filter rules (set
/// and literal matches, port lists, rates) in three chains (6 in `input`, 2 in `forward`, 2
/// in `output`), 6 single-target kernel forwards, 1 multi-target
/// forward, 1 capped forward (QoS) — capped ones stop at 1,000 so the class space is not
/// exceeded — and 1 userspace forward (DNS target) or shape every other block.
pub fn generate(n: usize) -> SourceTree {
    let mut fwc = String::from("fwc 1\n");
    let mut filters = String::from("input policy=drop {\n");
    let mut forward_chain = String::from("forward policy=drop {\n");
    let mut output_chain = String::from("output policy=accept {\n");
    let mut forwards = String::new();
    let blocks = n.div_ceil(20);
    for b in 0..blocks {
        let (hi, lo) = ((b / 250) % 250, b % 250);
        for s in 0..2 {
            fwc.push_str(&format!("set \"s{b}-{s}\" {{\n"));
            for e in 0..8 {
                fwc.push_str(&format!("    - \"10.{hi}.{lo}.{}\"\n", s * 100 + e * 4));
            }
            fwc.push_str("}\n");
        }
        for r in 0..10 {
            let line = match r % 4 {
                0 => format!("    allow \"f{b}-{r}\" proto=tcp port={} from=\"@s{b}-{}\"\n", 1 + (b * 10 + r) % 60000, r % 2),
                1 => format!("    allow \"f{b}-{r}\" proto=udp port=\"{},{}\" rate=\"50/second\"\n", 1 + b % 60000, 2 + b % 60000),
                2 => format!("    deny \"f{b}-{r}\" from=\"172.{hi}.{lo}.0/24\" log=#true\n"),
                _ => format!("    reject \"f{b}-{r}\" proto=tcp port=\"{}-{}\" from=\"2001:db8:{b:x}::/48\"\n", 1000 + r, 1100 + r),
            };
            match r {
                4 | 7 => forward_chain.push_str(&line),
                8 | 9 => output_chain.push_str(&line),
                _ => filters.push_str(&line),
            }
        }
        let port = |k: usize| 1024 + (b * 9 + k) % 60000;
        for k in 0..6 {
            forwards.push_str(&format!("forward \"k{b}-{k}\" listen=\":{}\" to=\"10.200.{hi}.{lo}:{}\"\n", port(k), 80 + k));
        }
        forwards.push_str(&format!("forward \"m{b}\" listen=\":{}\" to=\"10.201.{hi}.{lo}:80,10.202.{hi}.{lo}:80\"\n", port(6)));
        if b < 1000 {
            forwards.push_str(&format!("forward \"q{b}\" listen=\":{}\" to=\"10.203.{hi}.{lo}:80\" bandwidth=\"{}mbit\"\n", port(7), 10 + b % 90));
        } else {
            forwards.push_str(&format!("forward \"q{b}\" proto=udp listen=\":{}\" to=\"10.203.{hi}.{lo}:80\"\n", port(7)));
        }
        if b % 2 == 0 {
            forwards.push_str(&format!("forward \"u{b}\" listen=\":{}\" to=\"svc-{b}.internal:443\" proxy-protocol=2\n", port(8)));
        } else if b < 1000 {
            forwards.push_str(&format!("shape \"sh{b}\" from=\"10.{hi}.{lo}.0/24\" rate=\"20mbit\" dev=\"eth1\"\n"));
        } else {
            forwards.push_str(&format!("forward \"u{b}\" proto=udp listen=\":{}\" to=\"10.204.{hi}.{lo}\"\n", port(8)));
        }
    }
    for chain in [forward_chain, output_chain] {
        filters.push_str("}\n");
        filters.push_str(&chain);
    }
    filters.push_str("}\n");
    SourceTree::from_files([
        ("fwc.kdl".to_string(), fwc),
        ("rules/filter.kdl".to_string(), filters),
        ("rules/forwards.kdl".to_string(), forwards),
    ])
}

/// What `fwc compile --out` does once the files are read: the host's view (the only host),
/// the parse's freed memory given back, `nftables.json` written into `open(NFTABLES_FILE)` as it
/// is emitted, then the other three files into theirs.
pub fn compile_like_the_cli(tree: &SourceTree, mut open: impl FnMut(&str) -> Box<dyn std::io::Write>) {
    use fwc_compiler::artifacts::{JSON_FILE_NAMES, NFTABLES_FILE};
    let view = fwc_compiler::load_host(tree, None).unwrap_or_else(|e| panic!("{e:?}"));
    fwc_runtime::cli::compile::release_freed_memory();
    let mut nft = open(NFTABLES_FILE);
    fwc_compiler::emit_view_to(&view, None, jiff::Timestamp::UNIX_EPOCH, &mut nft, |rest| {
        for name in JSON_FILE_NAMES {
            rest.write_file(name, &mut open(name))?;
        }
        Ok(())
    })
    .expect("write the artifact files");
}

/// Number of rules (filter rules, forwards, shapes, sets) in a generated tree.
pub fn rule_count(n: usize) -> usize {
    n.div_ceil(20) * 20
}

/// A fleet: `hosts` hosts (labels `role` = edge/db/app in turn, `region` eu/us, vars `wan`
/// and `ip`) sharing the `generate(rules)` repository, plus per-role rules selected with
/// `on=` and a template rendered per host (its own LAN rule, forwards to every db host from
/// edges, a shape on its WAN). What `fwc check` / `fwc compile --all-hosts` see in a fleet.
pub fn generate_fleet(hosts: usize, rules: usize) -> SourceTree {
    let mut files: std::collections::BTreeMap<String, String> = generate(rules).files.into_iter().collect();
    let roles = ["edge", "db", "app"];
    let fwc = files.get_mut("fwc.kdl").expect("generate writes fwc.kdl");
    for h in 0..hosts {
        let region = if h % 2 == 0 { "eu" } else { "us" };
        fwc.push_str(&format!(
            "host \"h{h:03}\" {{\n    labels role={} region={region}\n    vars wan=eth{} ip=\"198.18.{}.{}\"\n}}\n",
            roles[h % 3],
            h % 4,
            h / 250,
            1 + h % 250
        ));
    }
    files.insert(
        "rules/roles.kdl".into(),
        "output policy=accept {\n    deny \"no-smtp\" proto=tcp port=25 on=\"role=app\"\n    allow \"eu-metrics\" proto=tcp port=9100 on=\"region=eu\"\n}\nforward \"edge-web\" listen=\":8443\" to=\"10.9.0.1:443,10.9.0.2:443\" on=\"role=edge\"\n".into(),
    );
    files.insert(
        "rules/per-host.kdl.j2".into(),
        "forward \"to-db-{{ host.name }}\" listen=\":7000\" to=\"{% for h in hosts if h.labels.role == 'db' %}{{ h.vars.ip }}:5432{% if not loop.last %},{% endif %}{% endfor %}\" on=\"role=edge\"\nshape \"wan-{{ host.name }}\" dev=\"{{ host.vars.wan }}\" rate=\"100mbit\"\n".into(),
    );
    SourceTree::from_files(files)
}
