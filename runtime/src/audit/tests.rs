//! The audit log's tests: appends, the chain's checks, torn tails, the head.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use fwc_compiler::artifacts::{BackendKind, Manifest};
use serde_json::Value;

use super::*;

fn rec(action: Action, commit: &str) -> Record {
    Record {
        host: "h1".into(),
        action: Some(action),
        commit: Some(commit.into()),
        result: Some(Outcome::Ok),
        duration_ms: 5,
        ..Default::default()
    }
}

fn log3() -> (tempfile::TempDir, AuditLog) {
    let d = tempfile::tempdir().unwrap();
    let log = AuditLog::in_state_dir(d.path());
    for c in ["a", "b", "c"] {
        log.append(rec(Action::Apply, c)).unwrap();
    }
    (d, log)
}

fn lines(log: &AuditLog) -> Vec<String> {
    fs::read_to_string(&log.path).unwrap().lines().map(str::to_string).collect()
}

fn write_lines(log: &AuditLog, l: &[String]) {
    fs::write(&log.path, l.iter().map(|s| format!("{s}\n")).collect::<String>()).unwrap();
}

#[test]
fn time_format() {
    assert_eq!(rfc3339_millis(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)), "2023-11-14T22:13:20.123Z");
    assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339_millis(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
}

#[test]
fn chain_is_valid_and_sequential() {
    let (_d, log) = log3();
    let rep = log.verify().unwrap();
    assert!(rep.ok(), "{rep:?}");
    assert_eq!(rep.entries, 3);
    let e = log.entries().unwrap();
    assert_eq!(e.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(e[0].prev_hash, GENESIS);
    assert_eq!(e[1].prev_hash, e[0].hash);
    assert_eq!(log.last().unwrap().unwrap().seq, 3);
}

#[test]
fn edit_is_detected_with_line() {
    let (_d, log) = log3();
    let mut l = lines(&log);
    l[1] = l[1].replace("\"commit\":\"b\"", "\"commit\":\"x\"");
    write_lines(&log, &l);
    let rep = log.verify().unwrap();
    assert_eq!(rep.findings.len(), 1, "{rep:?}");
    assert_eq!((rep.findings[0].line, rep.findings[0].problem), (2, Problem::Edited));
}

#[test]
fn edit_with_recomputed_hash_is_detected_on_next_line() {
    let (_d, log) = log3();
    let mut l = lines(&log);
    let mut v: Value = serde_json::from_str(&l[1]).unwrap();
    v["result"] = Value::String("failed".into());
    v["hash"] = Value::String(entry_hash(&v));
    l[1] = serde_json::to_string(&v).unwrap();
    write_lines(&log, &l);
    let rep = log.verify().unwrap();
    assert_eq!(rep.findings.len(), 1, "{rep:?}");
    assert_eq!((rep.findings[0].line, rep.findings[0].problem), (3, Problem::Edited));
    assert!(rep.findings[0].message.contains("line 2 was edited"));
}

#[test]
fn added_field_is_detected() {
    let (_d, log) = log3();
    let mut l = lines(&log);
    l[0] = l[0].replacen('{', "{\"note\":\"hi\",", 1);
    write_lines(&log, &l);
    let rep = log.verify().unwrap();
    assert_eq!((rep.findings[0].line, rep.findings[0].problem), (1, Problem::Edited));
}

#[test]
fn deletion_in_the_middle_is_detected() {
    let (_d, log) = log3();
    let mut l = lines(&log);
    l.remove(1);
    write_lines(&log, &l);
    let rep = log.verify().unwrap();
    assert_eq!(rep.findings.len(), 1, "{rep:?}");
    assert_eq!((rep.findings[0].line, rep.findings[0].problem), (2, Problem::Deleted));
}

#[test]
fn deletion_of_the_newest_is_detected_by_head() {
    let (_d, log) = log3();
    let mut l = lines(&log);
    l.pop();
    write_lines(&log, &l);
    let rep = log.verify().unwrap();
    assert_eq!(rep.findings.len(), 1, "{rep:?}");
    assert_eq!(rep.findings[0].problem, Problem::Deleted);
    assert!(rep.findings[0].message.contains("records seq 3"), "{rep:?}");
}

#[test]
fn deletion_of_the_newest_with_the_head_is_detected() {
    // Regression: deleting audit.head and the newest lines together said "chain intact".
    let (_d, log) = log3();
    let mut l = lines(&log);
    l.pop();
    write_lines(&log, &l);
    fs::remove_file(&log.head_path).unwrap();
    let rep = log.verify().unwrap();
    assert_eq!(rep.findings.len(), 1, "{rep:?}");
    assert_eq!(rep.findings[0].problem, Problem::Deleted);
    assert!(rep.findings[0].message.contains("audit.head is missing"), "{rep:?}");
}

#[test]
fn no_log_at_all_is_a_finding() {
    // Regression: with both files gone, verify said "chain intact".
    let (_d, log) = log3();
    fs::remove_file(&log.path).unwrap();
    fs::remove_file(&log.head_path).unwrap();
    let rep = log.verify().unwrap();
    assert!(!rep.ok());
    assert_eq!(rep.findings[0].problem, Problem::Missing);
    assert!(rep.findings[0].message.contains("no audit log"), "{rep:?}");
    // The log gone, the head kept: deleted.
    let (_d2, log2) = log3();
    fs::remove_file(&log2.path).unwrap();
    assert_eq!(log2.verify().unwrap().findings[0].problem, Problem::Deleted);
}

#[test]
fn reorder_is_detected() {
    let (_d, log) = log3();
    let mut l = lines(&log);
    l.swap(1, 2);
    write_lines(&log, &l);
    let rep = log.verify().unwrap();
    assert!(rep.findings.iter().any(|f| f.line == 3 && f.problem == Problem::Reordered), "{rep:?}");
    assert!(!rep.ok());
}

#[test]
fn torn_tail_is_reported_preserved_and_recovered() {
    let (_d, log) = log3();
    let full = fs::read_to_string(&log.path).unwrap();
    // A crash in the middle of writing entry 4.
    let mut f = OpenOptions::new().append(true).open(&log.path).unwrap();
    f.write_all(b"{\"seq\":4,\"time\":\"2024-").unwrap();
    drop(f);
    let rep = log.verify().unwrap();
    assert_eq!(rep.findings.len(), 1, "{rep:?}");
    assert_eq!((rep.findings[0].line, rep.findings[0].problem), (4, Problem::Torn));
    let (e, torn) = log.append(rec(Action::Apply, "d")).unwrap();
    assert_eq!(e.seq, 4);
    assert_eq!(torn, Some(TornTail { line: 4, offset: full.len() as u64, bytes: 22 }));
    let preserved = fs::read_to_string(&log.torn_path).unwrap();
    assert!(preserved.contains("{\"seq\":4,\"time\":\"2024-"), "{preserved}");
    let rep = log.verify().unwrap();
    assert!(rep.ok(), "{rep:?}");
    assert_eq!(rep.torn_recovered.len(), 1);
}

#[test]
fn head_lagging_by_one_is_fine() {
    let (_d, log) = log3();
    let l = lines(&log);
    // As if the process died between the append and the head update of entry 3.
    let v: Value = serde_json::from_str(&l[1]).unwrap();
    let head = Head { seq: 2, hash: v["hash"].as_str().unwrap().into() };
    fs::write(&log.head_path, serde_json::to_string(&head).unwrap()).unwrap();
    assert!(log.verify().unwrap().ok());
}

#[test]
fn changes_per_backend() {
    use fwc_compiler::artifacts::ManifestRule;
    use fwc_compiler::model::RuleKind;
    let rule = |name: &str, b: Vec<BackendKind>, d: &str| ManifestRule {
        kind: RuleKind::Forward,
        name: name.into(),
        chain: None,
        backends: b,
        reason: String::new(),
        summary: String::new(),
        digest: d.into(),
        source: None,
    };
    let m = |rules| Manifest { version: 1, host: "h".into(), commit: None, rules, artifact_hashes: Default::default(), setup: Default::default(), valid_until: None };
    let a = m(vec![rule("a", vec![BackendKind::Nftables], "1"), rule("b", vec![BackendKind::Nftables, BackendKind::Qos], "1")]);
    let b = m(vec![rule("a", vec![BackendKind::Nftables], "2"), rule("c", vec![BackendKind::Userspace], "1")]);
    let c = changes_between(Some(&a), &b);
    assert_eq!(c["nftables"].changed, vec!["forward:a"]);
    assert_eq!(c["nftables"].removed, vec!["forward:b"]);
    assert_eq!(c["qos"].removed, vec!["forward:b"]);
    assert_eq!(c["userspace"].added, vec!["forward:c"]);
    assert!(changes_between(Some(&b), &b).is_empty());
}
