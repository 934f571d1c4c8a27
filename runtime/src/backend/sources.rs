//! Drift lines name the KDL line of the rule they are about: every rule in the applied
//! generation's manifest records where it was written (`source`), and [`locate`] adds that
//! position to each drift line that names the rule, in whichever backend's wording.

use fwc_compiler::artifacts::{Manifest, ManifestRule, RuleKind};

/// `lines` with `(file:line:column)` added after each rule they name (the first mention):
/// `chain input: rule filter "ssh" was deleted` ->
/// `chain input: rule filter "ssh" (rules/10-filter.kdl:3:5) was deleted`.
pub fn locate(lines: Vec<String>, manifest: &Manifest) -> Vec<String> {
    lines.into_iter().map(|l| locate_line(l, manifest)).collect()
}

/// Where in `line` a mention of `r` ends, and whether that is inside parentheses already (then
/// the position is added as `, file:line:col`, else as ` (file:line:col)`).
fn mention_end(line: &str, r: &ManifestRule) -> Option<(usize, bool)> {
    let n = &r.name;
    let kind = r.kind.as_str();
    let after = |pat: &str| line.find(pat).map(|i| i + pat.len());
    let prefix = |pat: &str| line.strip_prefix(pat).filter(|rest| rest.starts_with(':') || rest.starts_with(' ')).map(|_| pat.len());
    let outside = |e: Option<usize>| e.map(|e| (e, false));
    let inside = |e: Option<usize>| e.map(|e| (e - 1, true));
    match r.kind {
        // nftables objects: `set office_v4: …`, `set office_v6 was deleted`.
        // A big set's hash sets: `set blocklist_v4_24: …`, their shards `set blocklist_v4_32_s3: …`.
        RuleKind::Set => outside(["_v4", "_v6", ""].iter().find_map(|sfx| {
            let pat = format!("set {n}{sfx}");
            let rest = line.strip_prefix(&pat)?;
            // `_<len>`, or a shard's `_<len>_s<i>`
            let len = match rest.strip_prefix('_') {
                Some(r) if !sfx.is_empty() => {
                    let digits = r.len() - r.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    let shard = r[digits..].strip_prefix("_s").map_or(0, |t| t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len());
                    if digits > 0 && shard > 0 { digits + 2 + shard } else { digits }
                }
                _ => 0,
            };
            let after = &rest[if len > 0 { len + 1 } else { 0 }..];
            (after.starts_with(':') || after.starts_with(' ')).then(|| pat.len() + if len > 0 { len + 1 } else { 0 })
        })),
        // `chain input: policy changed from drop to accept` (the chain's source is its policy=).
        RuleKind::Chain => outside(line.starts_with(&format!("chain {n}: policy")).then(|| format!("chain {n}").len())),
        _ => outside(after(&format!("{kind} \"{n}\"")))
            // nftables map elements: `tcp . 8080 (fwc:forward:web) : 10.0.0.5`.
            .or_else(|| inside(after(&format!("(fwc:{kind}:{n})"))))
            // the forwarder: `forward web: listener missing (…)`.
            .or_else(|| outside(prefix(&format!("forward {n}")).filter(|_| r.kind == RuleKind::Forward)))
            // QoS classes: `QoS class 954 (rule tenant-b): …`.
            .or_else(|| inside(after(&format!("(rule {n})")).filter(|_| r.kind != RuleKind::Filter))),
    }
}

fn locate_line(mut line: String, manifest: &Manifest) -> String {
    for r in manifest.rules.iter().filter(|r| r.source.is_some()) {
        if let Some((end, in_parens)) = mention_end(&line, r) {
            let src = r.source.as_deref().unwrap_or_default();
            line.insert_str(end, &if in_parens { format!(", {src}") } else { format!(" ({src})") });
            return line;
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        let rule = |kind, name: &str, source: Option<&str>| ManifestRule {
            kind,
            name: name.into(),
            chain: None,
            backends: vec![],
            reason: String::new(),
            summary: String::new(),
            digest: String::new(),
            source: source.map(str::to_string),
        };
        Manifest {
            version: 1,
            host: "h".into(),
            commit: None,
            rules: vec![
                rule(RuleKind::Chain, "input", Some("fwc.kdl:4:7")),
                rule(RuleKind::Filter, "ssh", Some("rules/10-filter.kdl:3:5")),
                rule(RuleKind::Filter, "web", None),
                rule(RuleKind::Forward, "web", Some("rules/20-forwards.kdl:2:1")),
                rule(RuleKind::Forward, "web-2", Some("rules/20-forwards.kdl:3:1")),
                rule(RuleKind::Set, "office", Some("fwc.kdl:2:1")),
                rule(RuleKind::Filter, "guests", Some("fwc.kdl:5:5")),
                rule(RuleKind::Shape, "guests", Some("fwc.kdl:9:1")),
            ],
            artifact_hashes: Default::default(),
            setup: Default::default(),
            valid_until: None,
        }
    }

    #[test]
    fn every_wording_gets_the_position() {
        let m = manifest();
        let cases = [
            ("chain input: rule filter \"ssh\" was deleted", "chain input: rule filter \"ssh\" (rules/10-filter.kdl:3:5) was deleted"),
            ("chain input: rule filter \"ssh\" was changed", "chain input: rule filter \"ssh\" (rules/10-filter.kdl:3:5) was changed"),
            ("chain fwd_dnat: rule forward \"web-2\" was deleted", "chain fwd_dnat: rule forward \"web-2\" (rules/20-forwards.kdl:3:1) was deleted"),
            ("chain input: policy changed from drop to accept", "chain input (fwc.kdl:4:7): policy changed from drop to accept"),
            ("set office_v4: elements added outside fwc: 10.9.9.9", "set office_v4 (fwc.kdl:2:1): elements added outside fwc: 10.9.9.9"),
            ("set office_v6 was deleted", "set office_v6 (fwc.kdl:2:1) was deleted"),
            ("set office_v4_24: elements removed: 10.9.0.0", "set office_v4_24 (fwc.kdl:2:1): elements removed: 10.9.0.0"),
            ("set office_v4_32_s3: elements removed: 10.9.0.1", "set office_v4_32_s3 (fwc.kdl:2:1): elements removed: 10.9.0.1"),
            ("map fwd4_addr: elements removed: tcp . 8080 (fwc:forward:web) : 10.0.0.5", "map fwd4_addr: elements removed: tcp . 8080 (fwc:forward:web, rules/20-forwards.kdl:2:1) : 10.0.0.5"),
            ("forward web: listener missing (web tcp 0.0.0.0:8080)", "forward web (rules/20-forwards.kdl:2:1): listener missing (web tcp 0.0.0.0:8080)"),
            ("QoS class 12 (rule guests): missing from the class map", "QoS class 12 (rule guests, fwc.kdl:9:1): missing from the class map"),
            // No position recorded, or a rule fwc does not know: unchanged.
            ("chain input: rule filter \"web\" was deleted", "chain input: rule filter \"web\" was deleted"),
            ("chain input: rule added outside fwc: tcp dport 23 drop", "chain input: rule added outside fwc: tcp dport 23 drop"),
            ("set officers_v4 was deleted", "set officers_v4 was deleted"),
        ];
        for (line, want) in cases {
            assert_eq!(locate(vec![line.to_string()], &m), vec![want.to_string()], "{line}");
        }
    }
}
