//! The audit log file: appends under a lock, the head file, torn tails preserved and cut.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use super::entry::*;
use super::verify::*;

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
