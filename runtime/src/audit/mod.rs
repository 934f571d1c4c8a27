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
//!
//! The parts: [`entry`] (what one entry says, its canonical form and hash), [`log`] (the file:
//! appends, the head, torn tails), [`verify`] (walking the chain).

mod entry;
mod log;
mod verify;

pub use entry::*;
pub use log::*;
pub use verify::*;

#[cfg(test)]
mod tests;
