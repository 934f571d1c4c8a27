//! Walking the audit chain: edited, deleted, reordered entries and torn tails, by line.

use serde::Serialize;
use serde_json::Value;

use super::entry::*;

/// The kind of a problem `verify` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Problem {
    /// Content changed after it was written.
    Edited,
    /// One or more entries are missing.
    Deleted,
    /// Entries are out of order.
    Reordered,
    /// The last line is incomplete (a crash during a write).
    Torn,
    /// A line that is not an audit entry at all.
    Corrupt,
    /// There is no audit log (nor head) at all.
    Missing,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// 1-based line number in `audit.jsonl`.
    pub line: usize,
    pub problem: Problem,
    pub message: String,
}

/// The result of [`AuditLog::verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Complete lines checked.
    pub entries: usize,
    /// Seq and hash of the last entry.
    pub last_seq: Option<u64>,
    pub last_hash: Option<String>,
    pub findings: Vec<Finding>,
    /// Headers of torn tails that were recovered earlier (preserved in `audit.jsonl.torn`).
    pub torn_recovered: Vec<String>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Verify the bytes of a log (with its head, when known).
pub fn verify_bytes(bytes: &[u8], head: Option<&Head>, torn_recovered: Vec<String>) -> VerifyReport {
    let mut rep = VerifyReport { torn_recovered, ..Default::default() };
    let mut prev_seq: u64 = 0;
    let mut prev_hash = GENESIS.to_string();
    let mut prev_line = 0usize;
    let mut pos = 0usize;
    let mut lineno = 0usize;
    while pos < bytes.len() {
        lineno += 1;
        let end = bytes[pos..].iter().position(|&b| b == b'\n').map(|p| pos + p);
        let Some(end) = end else {
            rep.findings.push(Finding {
                line: lineno,
                problem: Problem::Torn,
                message: format!(
                    "line {lineno}: incomplete last line ({} bytes, no newline): a write was torn by a crash; \
                     the next append preserves it in {TORN_FILE}",
                    bytes.len() - pos
                ),
            });
            break;
        };
        let raw = &bytes[pos..end];
        pos = end + 1;
        let v: Value = match std::str::from_utf8(raw).ok().and_then(|s| serde_json::from_str(s).ok()) {
            Some(v @ Value::Object(_)) => v,
            _ => {
                rep.findings.push(Finding { line: lineno, problem: Problem::Corrupt, message: format!("line {lineno}: not a JSON object") });
                continue;
            }
        };
        rep.entries += 1;
        let seq = v.get("seq").and_then(Value::as_u64).unwrap_or(0);
        let stored = v.get("hash").and_then(Value::as_str).unwrap_or("").to_string();
        let stored_prev = v.get("prev_hash").and_then(Value::as_str).unwrap_or("").to_string();
        let computed = entry_hash(&v);
        if computed != stored {
            rep.findings.push(Finding {
                line: lineno,
                problem: Problem::Edited,
                message: format!("line {lineno} (seq {seq}): content does not match its hash: the entry was edited"),
            });
        }
        if seq <= prev_seq && lineno > 1 {
            rep.findings.push(Finding {
                line: lineno,
                problem: Problem::Reordered,
                message: format!("line {lineno}: seq {seq} comes after seq {prev_seq} (line {prev_line}): entries were reordered"),
            });
        } else if seq != prev_seq + 1 {
            rep.findings.push(Finding {
                line: lineno,
                problem: Problem::Deleted,
                message: format!(
                    "line {lineno}: seq {seq} follows seq {prev_seq}: {} entr{} deleted before this line",
                    seq.saturating_sub(prev_seq + 1),
                    if seq.saturating_sub(prev_seq + 1) == 1 { "y was" } else { "ies were" }
                ),
            });
        } else if stored_prev != prev_hash {
            // seq is in order but the chain breaks: the entry before was edited with its
            // hash recomputed (or replaced).
            rep.findings.push(Finding {
                line: lineno,
                problem: Problem::Edited,
                message: format!(
                    "line {lineno} (seq {seq}): prev_hash does not match the hash of line {prev_line}: \
                     line {prev_line} was edited or replaced"
                ),
            });
        }
        prev_seq = seq;
        prev_hash = stored;
        prev_line = lineno;
    }
    rep.last_seq = if rep.entries > 0 { Some(prev_seq) } else { None };
    rep.last_hash = if rep.entries > 0 { Some(prev_hash.clone()) } else { None };
    if let Some(h) = head {
        let last = rep.last_seq.unwrap_or(0);
        let torn_pending = rep.findings.iter().any(|f| f.problem == Problem::Torn);
        if h.seq > last && !(torn_pending && h.seq == last + 1) {
            rep.findings.push(Finding {
                line: lineno + 1,
                problem: Problem::Deleted,
                message: format!(
                    "the log ends at seq {last} but {HEAD_FILE} records seq {}: the newest {} entr{} deleted",
                    h.seq,
                    h.seq - last,
                    if h.seq - last == 1 { "y was" } else { "ies were" }
                ),
            });
        } else if h.seq == last && last > 0 && rep.last_hash.as_deref() != Some(h.hash.as_str()) {
            rep.findings.push(Finding {
                line: prev_line,
                problem: Problem::Edited,
                message: format!("line {prev_line} (seq {last}): hash differs from the one in {HEAD_FILE}: the last entry was replaced"),
            });
        }
    }
    rep
}
