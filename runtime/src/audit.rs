//! The audit log: `<state-dir>/audit.jsonl`, one JSON object per line, append-only, fsynced,
//! hash-chained.
//!
//! Every entry carries `prev_hash` (the `hash` of the entry before it; 64 zeros for the first)
//! and `hash` = sha256 over the *canonical* entry without its `hash` field (keys sorted
//! recursively, compact JSON, see [`canonical_json`]). Canonicalising the parsed JSON (not a
//! Rust struct) means a field added by hand is covered too.
//!
//! [`verify`] walks the chain and reports, with the line number:
//! - an **edited** entry: its content no longer matches its hash (or, when the editor also
//!   recomputed the hash, the next entry's `prev_hash` no longer matches);
//! - a **deleted** entry: a gap in `seq` together with a broken `prev_hash`; deleting the newest
//!   entries is caught by `audit.head` (seq + hash of the last entry, replaced atomically after
//!   every append), which must match the last line (or lag it by exactly one entry: a crash
//!   between the append and the head update);
//! - **reordered** entries: `seq` going backwards;
//! - a **torn** last line: a crash in the middle of a write (no trailing newline).
//!
//! Crash recovery: [`AuditLog::append`] first looks at the end of the file. A torn tail (bytes
//! after the last newline) is never silently dropped: it is copied to `audit.jsonl.torn` with a
//! header naming the offset and time, fsynced, and only then cut from the log; the recovery is
//! returned to the caller (the agent logs it) and reported by `fwc audit verify`. The agent
//! writes an entry only after the action it records has finished, and keeps an intent file
//! until the entry is durable (see `agent::Journal`), so a torn entry is re-written by the
//! agent after restart: no entry is lost and none is duplicated.
//!
//! Appends hold an exclusive `flock` on the log, so `fwc apply` and `fwc agent` may share it.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use fwc_compiler::artifacts::{BackendKind, Manifest};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// File name of the log inside the state dir.
pub const AUDIT_FILE: &str = "audit.jsonl";
/// Seq and hash of the newest entry, replaced atomically after every append.
pub const HEAD_FILE: &str = "audit.head";
/// Where torn tails found after a crash are preserved.
pub const TORN_FILE: &str = "audit.jsonl.torn";
/// `prev_hash` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A commit was applied (or its apply failed and was rolled back: see `result`).
    Apply,
    /// The host went back to previously applied artifacts on request.
    Rollback,
    /// A commit was refused before anything was applied (signature, compile error, …).
    Refuse,
    /// The live state differs from the applied artifacts (reported, `--drift alert`).
    Drift,
    /// Drift was repaired by re-applying the applied artifacts (`--drift heal`).
    Heal,
    /// The agent started on an existing state and took it over without touching traffic.
    Adopt,
    /// The fleet rollout holds the host back from the rollout's commit (not promoted, halted,
    /// paused, stopped, an unverified state): recorded when the reason or the state changes.
    Hold,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Apply => "apply",
            Action::Rollback => "rollback",
            Action::Refuse => "refuse",
            Action::Drift => "drift",
            Action::Heal => "heal",
            Action::Adopt => "adopt",
            Action::Hold => "hold",
        }
    }
}

/// How it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Done; the host runs what the entry names.
    Ok,
    /// Failed and rolled back: the host still runs the previous state.
    RolledBack,
    /// Failed before any backend changed anything (prepare: a ruleset the kernel refuses, a
    /// program that does not load): nothing to roll back; the host runs what it ran.
    Aborted,
    /// Failed and the rollback failed too: the host may be in a mixed state.
    Failed,
    /// Not attempted (refusals, drift in alert mode).
    Refused,
    /// Reported only.
    Reported,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::RolledBack => "rolled_back",
            Outcome::Aborted => "aborted",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
            Outcome::Reported => "reported",
        }
    }
}

/// Rule changes on one backend, as `kind:name`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BackendChanges {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

impl BackendChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// What the caller fills in; `seq`, `time`, `prev_hash` and `hash` are added by [`AuditLog::append`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub host: String,
    pub action: Option<Action>,
    pub commit: Option<String>,
    pub previous_commit: Option<String>,
    pub author: Option<String>,
    pub signer: Option<String>,
    /// backend name (`nftables`, `qos`, `userspace`) -> changes.
    pub changes: BTreeMap<String, BackendChanges>,
    pub result: Option<Outcome>,
    /// Why (refusal reason, failure, drift description).
    pub detail: Option<String>,
    pub duration_ms: u64,
}

/// One line of `audit.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditEntry {
    /// 1, 2, 3, … without gaps.
    pub seq: u64,
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub host: String,
    pub action: Action,
    pub commit: Option<String>,
    pub previous_commit: Option<String>,
    /// Commit author, `Name <email>`.
    pub author: Option<String>,
    /// Who signed the commit (the allowed-signers principal or the GPG key), when verified.
    pub signer: Option<String>,
    pub changes: BTreeMap<String, BackendChanges>,
    pub result: Outcome,
    pub detail: Option<String>,
    pub duration_ms: u64,
    pub prev_hash: String,
    pub hash: String,
}

/// `audit.head`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

/// JSON with object keys sorted at every level, no whitespace: the bytes that are hashed.
pub fn canonical_json(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, sort(v))).collect();
                let mut out = serde_json::Map::new();
                for (k, v) in sorted {
                    out.insert(k.clone(), v);
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sort(v)).expect("json values serialize")
}

/// sha256 (hex) of the canonical form of `entry` without its `hash` field.
pub fn entry_hash(entry: &Value) -> String {
    let mut v = entry.clone();
    if let Value::Object(m) = &mut v {
        m.remove("hash");
    }
    hex::encode(Sha256::digest(canonical_json(&v).as_bytes()))
}

/// Rule changes per backend between two manifests (None = nothing applied before).
pub fn changes_between(prev: Option<&Manifest>, next: &Manifest) -> BTreeMap<String, BackendChanges> {
    type Key = (String, BackendKind);
    let index = |m: &Manifest| -> BTreeMap<Key, String> {
        let mut out = BTreeMap::new();
        for r in &m.rules {
            for b in &r.backends {
                out.insert((format!("{}:{}", r.kind.as_str(), r.name), *b), r.digest.clone());
            }
        }
        out
    };
    let before = prev.map(index).unwrap_or_default();
    let after = index(next);
    let mut out: BTreeMap<String, BackendChanges> = BTreeMap::new();
    for ((rule, b), digest) in &after {
        match before.get(&(rule.clone(), *b)) {
            None => out.entry(b.as_str().to_string()).or_default().added.push(rule.clone()),
            Some(d) if d != digest => out.entry(b.as_str().to_string()).or_default().changed.push(rule.clone()),
            Some(_) => {}
        }
    }
    for (rule, b) in before.keys() {
        if !after.contains_key(&(rule.clone(), *b)) {
            out.entry(b.as_str().to_string()).or_default().removed.push(rule.clone());
        }
    }
    out
}

/// A torn tail found (and preserved) when the log was opened for writing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// Line number the torn bytes were on.
    pub line: usize,
    pub offset: u64,
    pub bytes: usize,
}

/// The audit log of one state dir.
#[derive(Debug, Clone)]
pub struct AuditLog {
    pub path: PathBuf,
    pub head_path: PathBuf,
    pub torn_path: PathBuf,
}

impl AuditLog {
    pub fn in_state_dir(dir: &Path) -> AuditLog {
        AuditLog { path: dir.join(AUDIT_FILE), head_path: dir.join(HEAD_FILE), torn_path: dir.join(TORN_FILE) }
    }

    /// Append one entry (fsynced) and return it with its seq and hashes. A torn tail left by
    /// a crash is preserved and cut first; it is returned so the caller can report it.
    pub fn append(&self, rec: Record) -> std::io::Result<(AuditEntry, Option<TornTail>)> {
        if let Some(d) = self.path.parent() {
            crate::state::create_private_dir(d).map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        let mut f = OpenOptions::new().create(true).read(true).append(true).mode(0o600).open(&self.path)?;
        // std's flock(LOCK_EX), released when `f` is closed at the end of this function.
        f.lock()?;
        let torn = self.cut_torn_tail(&mut f)?;
        let last = last_line(&mut f)?;
        let (seq, prev_hash) = match last {
            None => (1, GENESIS.to_string()),
            Some(line) => {
                let v: Value = serde_json::from_str(&line)
                    .map_err(|e| std::io::Error::other(format!("the last audit entry is not JSON ({e}); run `fwc audit verify`")))?;
                let seq = v.get("seq").and_then(Value::as_u64).unwrap_or(0);
                let hash = v.get("hash").and_then(Value::as_str).unwrap_or("").to_string();
                (seq + 1, hash)
            }
        };
        let entry = AuditEntry {
            seq,
            time: rfc3339_millis(SystemTime::now()),
            host: rec.host,
            action: rec.action.unwrap_or(Action::Apply),
            commit: rec.commit,
            previous_commit: rec.previous_commit,
            author: rec.author,
            signer: rec.signer,
            changes: rec.changes,
            result: rec.result.unwrap_or(Outcome::Ok),
            detail: rec.detail,
            duration_ms: rec.duration_ms,
            prev_hash,
            hash: String::new(),
        };
        let mut v = serde_json::to_value(&entry).expect("entries serialize");
        let hash = entry_hash(&v);
        v["hash"] = Value::String(hash.clone());
        let mut line = serde_json::to_string(&v).expect("entries serialize");
        line.push('\n');
        // One write(2) of the whole line with O_APPEND, then fsync: a crash leaves either the
        // whole line, nothing, or a torn tail that the next append preserves and reports.
        f.write_all(line.as_bytes())?;
        f.sync_data()?;
        let head = Head { seq, hash: hash.clone() };
        crate::state::write_atomic(&self.head_path, serde_json::to_string(&head).expect("head serializes").as_bytes())
            .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        Ok((AuditEntry { hash, ..entry }, torn))
    }

    /// Preserve and cut bytes after the last newline (a write torn by a crash).
    fn cut_torn_tail(&self, f: &mut File) -> std::io::Result<Option<TornTail>> {
        let len = f.metadata()?.len();
        if len == 0 {
            return Ok(None);
        }
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] == b'\n' {
            return Ok(None);
        }
        let start = last_newline_before(f, len)?.map(|p| p + 1).unwrap_or(0);
        let mut torn = vec![0u8; (len - start) as usize];
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut torn)?;
        let line = count_lines_before(f, start)? + 1;
        let mut t = crate::state::open_append_private(&self.torn_path)?;
        writeln!(
            t,
            "# {} torn tail of {} at line {line}, byte offset {start}, {} bytes:",
            rfc3339_millis(SystemTime::now()),
            self.path.display(),
            torn.len()
        )?;
        t.write_all(&torn)?;
        t.write_all(b"\n")?;
        t.sync_all()?;
        f.set_len(start)?;
        f.sync_all()?;
        Ok(Some(TornTail { line, offset: start, bytes: torn.len() }))
    }

    /// Every complete entry, parsed (for `fwc audit show`); unparsable lines are errors.
    pub fn entries(&self) -> std::io::Result<Vec<AuditEntry>> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if !line.ends_with('\n') {
                break; // torn tail: reported by verify
            }
            let e: AuditEntry = serde_json::from_str(line.trim_end())
                .map_err(|e| std::io::Error::other(format!("{}:{}: not an audit entry: {e}", self.path.display(), i + 1)))?;
            out.push(e);
        }
        Ok(out)
    }

    /// The newest entry, if any.
    pub fn last(&self) -> std::io::Result<Option<AuditEntry>> {
        let mut f = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match last_line(&mut f)? {
            None => Ok(None),
            Some(l) => serde_json::from_str(&l).map(Some).map_err(std::io::Error::other),
        }
    }

    /// Check the whole chain; see the module docs.
    pub fn verify(&self) -> std::io::Result<VerifyReport> {
        let bytes = match fs::read(&self.path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let head_text = match fs::read_to_string(&self.head_path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let head: Option<Head> = head_text.as_deref().and_then(|t| serde_json::from_str(t).ok());
        let torn_recovered = fs::read_to_string(&self.torn_path)
            .map(|t| t.lines().filter(|l| l.starts_with("# ")).map(|l| l[2..].to_string()).collect())
            .unwrap_or_default();
        let Some(bytes) = bytes else {
            // No log: either nothing was ever recorded here, or the log went (with its head).
            let message = match &head {
                Some(h) => format!("the log is missing but {HEAD_FILE} records seq {}: the log was deleted", h.seq),
                None => "no audit log (nothing was recorded in this state dir, or the log and its head were deleted)".to_string(),
            };
            let problem = if head.is_some() { Problem::Deleted } else { Problem::Missing };
            return Ok(VerifyReport { findings: vec![Finding { line: 0, problem, message }], torn_recovered, ..Default::default() });
        };
        let mut rep = verify_bytes(&bytes, head.as_ref(), torn_recovered);
        if rep.entries > 0 && head.is_none() {
            // The head is written after every append; a log without one had its newest entries
            // cut together with the head (or the head was edited into nonsense).
            let why = if head_text.is_some() { "is not a valid head" } else { "is missing" };
            rep.findings.push(Finding {
                line: rep.entries + 1,
                problem: Problem::Deleted,
                message: format!(
                    "{HEAD_FILE} {why}: the newest entries may have been deleted together with it \
                     (the log now ends at seq {})",
                    rep.last_seq.unwrap_or(0)
                ),
            });
        }
        Ok(rep)
    }
}

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

// ---------------------------------------------------------------------------------------------
// small file helpers

/// Offset of the last `\n` strictly before `end`.
fn last_newline_before(f: &mut File, end: u64) -> std::io::Result<Option<u64>> {
    let mut pos = end;
    let mut buf = vec![0u8; 8192];
    while pos > 0 {
        let n = buf.len().min(pos as usize);
        pos -= n as u64;
        f.seek(SeekFrom::Start(pos))?;
        f.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            return Ok(Some(pos + i as u64));
        }
    }
    Ok(None)
}

fn count_lines_before(f: &mut File, end: u64) -> std::io::Result<usize> {
    f.seek(SeekFrom::Start(0))?;
    let mut r = std::io::BufReader::new(f.take(end));
    let mut buf = [0u8; 8192];
    let mut n = 0;
    loop {
        let k = r.read(&mut buf)?;
        if k == 0 {
            return Ok(n);
        }
        n += buf[..k].iter().filter(|&&b| b == b'\n').count();
    }
}

/// The last complete line (without its newline), ignoring a torn tail.
fn last_line(f: &mut File) -> std::io::Result<Option<String>> {
    let len = f.metadata()?.len();
    let Some(end) = last_newline_before(f, len)? else { return Ok(None) };
    let start = last_newline_before(f, end)?.map(|p| p + 1).unwrap_or(0);
    let mut buf = vec![0u8; (end - start) as usize];
    f.seek(SeekFrom::Start(start))?;
    f.read_exact(&mut buf)?;
    String::from_utf8(buf).map(Some).map_err(std::io::Error::other)
}

/// `2024-05-01T12:34:56.789Z`.
pub fn rfc3339_millis(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t.max(UNIX_EPOCH)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
