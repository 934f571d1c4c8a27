//! The state dir (`--state-dir`, default `/var/lib/fwc`): what fwc last applied, what it
//! applied before that (for `fwc rollback` and automatic rollback), and a lock.
//!
//! Layout:
//!
//! ```text
//! D/lock              flock(2) target: held exclusively for the whole of an apply / rollback / confirm
//! D/state.json        {"version":1,"current":"gen-000007","previous":"gen-000006"}  (the only mutable file)
//! D/gen-000007/       one immutable generation: nftables.json qos.json forward.json manifest.json
//!                     + applied.json (commit, host, hashes, applied time, source)
//! D/confirm.json      present while an `fwc apply --confirm` waits for `fwc confirm`
//! D/confirm.log       what the background reverter did
//! D/cache/            derived data: the kernel's rendering of recent nftables.json (for drift)
//! D/blobs/<sha256>    chunks of big element lists, shared by the generations that have them
//! ```
//!
//! A generation whose `nftables.json` is big (a blocklist of a million elements) stores it in
//! pieces instead ([`parts`]: `nftables.json.parts`, the text outside element lists inline and
//! each list in content-defined chunks under `D/blobs/`), so the next generation writes only
//! the chunks that changed. It is put together byte for byte and checked against the same
//! digest as a whole file.
//!
//! Trust: the state dir is 0700 and every file in it 0600 whatever the umask (created with
//! those modes and chmod-ed explicitly); the lock file lives in that directory, so no other
//! user can open it, let alone flock it; a state dir or lock file owned by another user is
//! refused. Every generation is verified against the sha256 digests in its `applied.json`
//! before anything of it is loaded: a mismatch is refused with an error naming the file (`fwc rollback`, the confirm reverter, `status`, plan and apply all read through
//! [`StateDir::generation`]).
//!
//! A new generation is written into a temp dir, every file fsynced, the dir renamed into place
//! and the state dir fsynced; only then is `state.json` replaced (temp + fsync + rename + dir
//! fsync). A crash at any point leaves either the old or the new `state.json`, and both point
//! at complete generations. Generations other than current and previous are removed afterwards.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use fwc_compiler::artifacts::{sha256_hex, Artifacts};
use miette::{miette, IntoDiagnostic, Result, WrapErr};
use serde::{Deserialize, Serialize};

pub mod agent_journal;
pub mod parts;
mod private_dir;
pub mod set_cache;

pub use private_dir::create_private_dir;
use private_dir::euid;

pub const DEFAULT_STATE_DIR: &str = "/var/lib/fwc";
const STATE_FILE: &str = "state.json";
const LOCK_FILE: &str = "lock";
pub const APPLIED_FILE: &str = "applied.json";
pub const CONFIRM_FILE: &str = "confirm.json";
pub const CONFIRM_LOG: &str = "confirm.log";
/// Derived data (the kernel's rendering of applied rulesets); safe to delete.
pub const CACHE_DIR: &str = "cache";

/// `state.json`: which generations are current and previous.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatePointer {
    pub version: u32,
    pub current: Option<String>,
    pub previous: Option<String>,
}

/// `applied.json` of a generation: when and what was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedMeta {
    /// Git commit of the rule repository (from the manifest), when known.
    pub commit: Option<String>,
    pub host: String,
    /// Seconds since the epoch (UTC) and the same as RFC 3339.
    pub applied_unix: u64,
    pub applied_at: String,
    /// sha256 of each artifact file as stored in the generation.
    pub hashes: std::collections::BTreeMap<String, String>,
    /// Where the artifacts came from (a rule repository, an artifact dir, a plan file, "rollback").
    pub source: String,
    /// Sysctls fwc set for this ruleset (`key=value`).
    #[serde(default)]
    pub sysctls: Vec<String>,
}

/// Generations read by this process, by [`memo_key`] (the two most recent).
static GENERATIONS: std::sync::Mutex<Vec<(Vec<(PathBuf, u64, i64, i64, u64)>, Generation)>> = std::sync::Mutex::new(Vec::new());

/// Identity of a generation's files as they are now: path, size, mtime (s, ns), inode of every
/// file of the generation dir and of every chunk it refers to. None: cannot tell (no memo).
fn memo_key(dir: &Path, blobs: &Path) -> Option<Vec<(PathBuf, u64, i64, i64, u64)>> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir).ok()?.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>().ok()?;
    paths.extend(parts::blobs_of(dir).into_iter().map(|b| blobs.join(b)));
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let m = fs::metadata(&p).ok()?;
            Some((p, m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
        })
        .collect()
}

/// One applied generation, read back from the state dir.
#[derive(Debug, Clone)]
pub struct Generation {
    pub name: String,
    pub dir: PathBuf,
    pub artifacts: Artifacts,
    pub meta: AppliedMeta,
}

/// A pending confirmation (`fwc apply --confirm`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingConfirm {
    /// Random token shared with the reverter process, so a later apply's confirm file is never
    /// mistaken for this one.
    pub token: String,
    /// Generation that must be confirmed.
    pub generation: String,
    /// Unix seconds after which the reverter rolls back.
    pub deadline_unix: u64,
    /// Pid of the reverter process.
    pub reverter_pid: Option<u32>,
    /// Network namespace the apply targeted (the reverter uses the same).
    pub netns: Option<String>,
}

/// A state dir. Reading needs no lock; every change goes through a [`StateLock`].
#[derive(Debug, Clone)]
pub struct StateDir {
    pub path: PathBuf,
}

/// An exclusive flock on `D/lock`, released on drop (or when the process dies).
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    pub dir: StateDir,
}

impl StateDir {
    pub fn new(path: impl Into<PathBuf>) -> StateDir {
        StateDir { path: path.into() }
    }

    /// Create the state dir (and its cache dir) 0700, or make an existing one 0700; refuse
    /// one owned by another user.
    fn ensure(&self) -> Result<()> {
        create_private_dir(&self.path)?;
        check_owner(&self.path)?;
        create_private_dir(&self.path.join(CACHE_DIR))
    }

    /// Take the exclusive lock, waiting for another apply to finish (`wait`), or failing at once.
    pub fn lock(&self, wait: bool) -> Result<StateLock> {
        self.lock_within(if wait { None } else { Some(std::time::Duration::ZERO) })
    }

    /// Take the exclusive lock, waiting at most `timeout` for another holder to release it
    /// (None: as long as it takes).
    pub fn lock_within(&self, timeout: Option<std::time::Duration>) -> Result<StateLock> {
        self.ensure()?;
        let path = self.path.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .into_diagnostic()
            .wrap_err_with(|| format!("cannot open lock file {}", path.display()))?;
        // A lock file made by another user (or by an older fwc, 0644) is not trusted as is.
        let meta = file.metadata().into_diagnostic()?;
        if meta.uid() != euid() {
            return Err(miette!(
                help = "remove it (as root) and run the command again",
                "lock file {} belongs to uid {}, not to the user running fwc (uid {}): refusing to share a lock with it",
                path.display(),
                meta.uid(),
                euid()
            ));
        }
        if meta.permissions().mode() & 0o7777 != 0o600 {
            file.set_permissions(fs::Permissions::from_mode(0o600)).into_diagnostic()?;
        }
        // std's flock(2): held until `file` is closed (StateLock dropped).
        let locked = match timeout {
            None => file.lock().map_err(std::fs::TryLockError::Error),
            Some(t) => {
                let deadline = std::time::Instant::now() + t;
                loop {
                    match file.try_lock() {
                        Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                            std::thread::sleep(std::time::Duration::from_millis(50))
                        }
                        r => break r,
                    }
                }
            }
        };
        match locked {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let waited = timeout.filter(|t| !t.is_zero()).map(|t| format!(" (waited {:.1} s)", t.as_secs_f64())).unwrap_or_default();
                return Err(miette!(
                    help = "try again when it has finished, or wait longer with --lock-timeout",
                    "another fwc command holds the state lock {}{waited}",
                    path.display()
                ));
            }
            Err(std::fs::TryLockError::Error(err)) => {
                return Err(err).into_diagnostic().wrap_err_with(|| format!("flock {}", path.display()))
            }
        }
        Ok(StateLock { _file: file, dir: self.clone() })
    }

    pub fn pointer(&self) -> Result<StatePointer> {
        let path = self.path.join(STATE_FILE);
        match fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .into_diagnostic()
                .wrap_err_with(|| format!("corrupt state file {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StatePointer { version: 1, ..Default::default() }),
            Err(e) => Err(e).into_diagnostic().wrap_err_with(|| format!("cannot read {}", path.display())),
        }
    }

    /// Read generation `name`, after checking every artifact file against the sha256 digest
    /// recorded in its `applied.json`: a file that differs is refused, nothing is loaded.
    pub fn generation(&self, name: &str) -> Result<Generation> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(miette!("state file {} names generation {name:?}, which is not a generation name", self.path.join(STATE_FILE).display()));
        }
        let dir = self.path.join(name);
        let meta_path = dir.join(APPLIED_FILE);
        let meta: AppliedMeta = serde_json::from_str(
            &fs::read_to_string(&meta_path).into_diagnostic().wrap_err_with(|| format!("cannot read {}", meta_path.display()))?,
        )
        .into_diagnostic()
        .wrap_err_with(|| format!("corrupt {}", meta_path.display()))?;
        let blobs = self.path.join(parts::BLOBS_DIR);
        // A generation is immutable: read (and verified) once per process while its files
        // are unchanged (an apply reads the current one for the plan, the transaction and the
        // audit record; a big one is tens of MB to put together and hash).
        let key = memo_key(&dir, &blobs);
        if let Some(g) = key.as_ref().and_then(|k| GENERATIONS.lock().ok()?.iter().find(|(mk, _)| mk == k).map(|(_, g)| g.clone())) {
            return Ok(g);
        }
        let nftables = verify_digests(&dir, &meta, &blobs)?;
        let nftables = String::from_utf8(nftables).map_err(|_| miette!("{}: nftables.json is not UTF-8", dir.display()))?;
        let sha = meta.hashes.get(fwc_compiler::artifacts::NFTABLES_FILE).cloned();
        let artifacts = Artifacts::read_dir_with(&dir, nftables, sha).into_diagnostic()?;
        let g = Generation { name: name.to_string(), dir, artifacts, meta };
        if let (Some(k), Ok(mut memo)) = (key, GENERATIONS.lock()) {
            memo.insert(0, (k, g.clone()));
            memo.truncate(2);
        }
        Ok(g)
    }

    /// The last applied generation, if any.
    pub fn current(&self) -> Result<Option<Generation>> {
        match self.pointer()?.current {
            Some(name) => self.generation(&name).map(Some),
            None => Ok(None),
        }
    }

    /// The generation applied before the current one, if any.
    pub fn previous(&self) -> Result<Option<Generation>> {
        match self.pointer()?.previous {
            Some(name) => self.generation(&name).map(Some),
            None => Ok(None),
        }
    }

    pub fn pending_confirm(&self) -> Result<Option<PendingConfirm>> {
        let path = self.path.join(CONFIRM_FILE);
        match fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t).map(Some).into_diagnostic().wrap_err_with(|| format!("corrupt {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).into_diagnostic(),
        }
    }

    /// Append a line to `confirm.log` (best effort).
    pub fn log_confirm(&self, line: &str) {
        if let Ok(mut f) = open_append_private(&self.path.join(CONFIRM_LOG)) {
            let _ = writeln!(f, "{} {line}", rfc3339(now_unix()));
            let _ = f.sync_all();
        }
    }
}

impl StateLock {
    /// Record `artifacts` as the new current generation; the old current becomes previous.
    /// Atomic: see the module docs. Returns the new generation's name.
    pub fn record_applied(
        &self,
        artifacts: &Artifacts,
        source: &str,
        sysctls: &[String],
    ) -> Result<String> {
        let ptr = self.dir.pointer()?;
        let name = next_gen_name(&self.dir.path, &ptr)?;
        let files = artifacts.files();
        let mut hashes = std::collections::BTreeMap::new();
        for (f, text) in &files {
            // nftables.json: its digest is computed once per document (or known from the check
            // of the file it was read from).
            let h = if *f == fwc_compiler::artifacts::NFTABLES_FILE { artifacts.nftables.sha256().to_string() } else { sha256_hex(text.as_bytes()) };
            hashes.insert(f.to_string(), h);
        }
        // The chunks of the generation applied until now, for the new one to share.
        let before = ptr.current.as_ref().and_then(|c| self.dir.generation(c).ok());
        let now = now_unix();
        let meta = AppliedMeta {
            commit: artifacts.manifest.commit.clone(),
            host: artifacts.manifest.host.clone(),
            applied_unix: now,
            applied_at: rfc3339(now),
            hashes,
            source: source.to_string(),
            sysctls: sysctls.to_vec(),
        };
        let tmp = self.dir.path.join(format!(".tmp-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        DirBuilder::new().mode(0o700).create(&tmp).into_diagnostic().wrap_err_with(|| format!("cannot create {}", tmp.display()))?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o700)).into_diagnostic()?;
        let mut all: Vec<(&str, std::borrow::Cow<str>)> = files;
        all.push((APPLIED_FILE, fwc_compiler::artifacts::to_pretty(&meta).into()));
        for (f, text) in &all {
            // A big nftables.json goes in pieces, sharing the chunks the last one has.
            let prev = before.as_ref().and_then(|g| Some((g.artifacts.nftables.raw_text()?, g.dir.as_path())));
            if *f == fwc_compiler::artifacts::NFTABLES_FILE && parts::store(text, prev, &tmp, &self.dir.path.join(parts::BLOBS_DIR), write_synced)?.is_some() {
                continue;
            }
            write_synced(&tmp.join(f), text.as_bytes())?;
        }
        fsync_dir(&tmp)?;
        let dest = self.dir.path.join(&name);
        fs::rename(&tmp, &dest).into_diagnostic().wrap_err_with(|| format!("cannot rename {} to {}", tmp.display(), dest.display()))?;
        fsync_dir(&self.dir.path)?;
        let new_ptr = StatePointer { version: 1, current: Some(name.clone()), previous: ptr.current.clone() };
        self.write_pointer(&new_ptr)?;
        self.gc(&new_ptr);
        Ok(name)
    }

    /// After `fwc rollback` (or a confirm timeout): make `previous` current again, and keep
    /// the generation we left as the new previous (so a second rollback goes forward again).
    pub fn swap_current_previous(&self) -> Result<()> {
        let ptr = self.dir.pointer()?;
        let new_ptr = StatePointer { version: 1, current: ptr.previous.clone(), previous: ptr.current.clone() };
        self.write_pointer(&new_ptr)
    }

    /// Replace `state.json` atomically.
    pub fn write_pointer(&self, ptr: &StatePointer) -> Result<()> {
        write_atomic(&self.dir.path.join(STATE_FILE), fwc_compiler::artifacts::to_pretty(ptr).as_bytes())
    }

    pub fn set_pending_confirm(&self, p: Option<&PendingConfirm>) -> Result<()> {
        let path = self.dir.path.join(CONFIRM_FILE);
        match p {
            Some(p) => write_atomic(&path, fwc_compiler::artifacts::to_pretty(p).as_bytes()),
            None => {
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).into_diagnostic(),
                }
                fsync_dir(&self.dir.path)
            }
        }
    }

    /// Remove generations other than current and previous, and stale temp dirs.
    fn gc(&self, ptr: &StatePointer) {
        let Ok(rd) = fs::read_dir(&self.dir.path) else { return };
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            let keep = Some(&n) == ptr.current.as_ref() || Some(&n) == ptr.previous.as_ref();
            if (n.starts_with("gen-") || n.starts_with(".tmp-")) && !keep {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        // Chunks no kept generation refers to (and temp files of a killed write).
        let blobs = self.dir.path.join(parts::BLOBS_DIR);
        let Ok(rd) = fs::read_dir(&blobs) else { return };
        let used: std::collections::HashSet<String> =
            [&ptr.current, &ptr.previous].into_iter().flatten().flat_map(|g| parts::blobs_of(&self.dir.path.join(g))).collect();
        for e in rd.flatten() {
            if !used.contains(&*e.file_name().to_string_lossy()) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

fn next_gen_name(dir: &Path, ptr: &StatePointer) -> Result<String> {
    let mut max = 0u64;
    for n in [&ptr.current, &ptr.previous].into_iter().flatten() {
        if let Some(v) = n.strip_prefix("gen-").and_then(|s| s.parse::<u64>().ok()) {
            max = max.max(v);
        }
    }
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Some(v) = e.file_name().to_string_lossy().strip_prefix("gen-").and_then(|s| s.parse::<u64>().ok()) {
                max = max.max(v);
            }
        }
    }
    Ok(format!("gen-{:06}", max + 1))
}

/// The state dir must belong to the user running fwc: anyone else who owns it could replace
/// what fwc applies.
fn check_owner(path: &Path) -> Result<()> {
    let meta = fs::metadata(path).into_diagnostic()?;
    if meta.uid() != euid() {
        return Err(miette!(
            help = "use a state dir owned by this user (root for the system one), e.g. the default /var/lib/fwc",
            "state dir {} belongs to uid {}, not to the user running fwc (uid {}): refusing to trust it",
            path.display(),
            meta.uid(),
            euid()
        ));
    }
    Ok(())
}

/// Open `path` for appending, creating it 0600 (logs of the state dir).
pub fn open_append_private(path: &Path) -> std::io::Result<File> {
    let f = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

/// Check every file of generation `dir` against the digests in its `applied.json`; the bytes of
/// its `nftables.json` (stored whole or in pieces, see [`parts`]).
fn verify_digests(dir: &Path, meta: &AppliedMeta, blobs: &Path) -> Result<Vec<u8>> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tampered = |what: String| {
        miette!(
            help = "the state dir may have been edited or damaged; re-apply from the rule repository (`fwc apply`) to record a fresh generation",
            "generation {name} in {} does not match its recorded digests: {what}; refusing to load it",
            dir.parent().unwrap_or(dir).display()
        )
    };
    let mut nftables = Vec::new();
    for file in [
        fwc_compiler::artifacts::NFTABLES_FILE,
        fwc_compiler::artifacts::QOS_FILE,
        fwc_compiler::artifacts::FORWARD_FILE,
        fwc_compiler::artifacts::MANIFEST_FILE,
    ] {
        let Some(want) = meta.hashes.get(file) else {
            return Err(tampered(format!("{APPLIED_FILE} records no digest for {file}")));
        };
        let path = dir.join(file);
        let bytes = if file == fwc_compiler::artifacts::NFTABLES_FILE && !path.exists() && dir.join(parts::PARTS_FILE).exists() {
            parts::assemble(dir, blobs).map_err(|e| tampered(format!("{file}: {e}")))?
        } else {
            fs::read(&path).into_diagnostic().wrap_err_with(|| format!("cannot read {}", path.display()))?
        };
        let got = sha256_hex(&bytes);
        if &got != want {
            return Err(tampered(format!("{file} has sha256 {}…, {APPLIED_FILE} records {}…", &got[..12], &want[..want.len().min(12)])));
        }
        if file == fwc_compiler::artifacts::NFTABLES_FILE {
            nftables = bytes;
        }
    }
    Ok(nftables)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot write {}", path.display()))?;
    f.set_permissions(fs::Permissions::from_mode(0o600)).into_diagnostic()?;
    f.write_all(bytes).into_diagnostic()?;
    f.sync_all().into_diagnostic()?;
    Ok(())
}

/// Write `path` atomically: temp file in the same dir, fsync, rename, fsync the dir.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    write_synced(&tmp, bytes)?;
    fs::rename(&tmp, path).into_diagnostic().wrap_err_with(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    fsync_dir(dir)
}

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).into_diagnostic().wrap_err_with(|| format!("cannot fsync {}", dir.display()))
}

pub fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// `2024-05-01T12:34:56Z` for a unix time (UTC), formatted by humantime.
pub fn rfc3339(unix: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + std::time::Duration::from_secs(unix)).to_string()
}

/// A digest of everything in the state dir except the lock file and the cache: equal
/// digests mean the state dir is unchanged (tests use it to prove a failed apply wrote nothing).
pub fn dir_digest(dir: &Path) -> String {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            // Not applied state: the lock, derived caches, and the audit log (which records
            // failed attempts too, by design).
            if rel == LOCK_FILE || rel == CACHE_DIR || rel.starts_with("cache/") || rel.starts_with("audit.") {
                continue;
            }
            if p.is_dir() {
                out.push((format!("{rel}/"), Vec::new()));
                walk(base, &p, out);
            } else {
                out.push((rel, fs::read(&p).unwrap_or_default()));
            }
        }
    }
    let mut all = Vec::new();
    walk(dir, dir, &mut all);
    all.sort();
    let mut buf = Vec::new();
    for (n, b) in all {
        buf.extend_from_slice(n.as_bytes());
        buf.push(0);
        buf.extend_from_slice(sha256_hex(&b).as_bytes());
        buf.push(b'\n');
    }
    sha256_hex(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_values() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_714_566_896), "2024-05-01T12:34:56Z");
    }

    #[test]
    fn the_state_lock_excludes_a_second_holder_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().join("state"));
        let held = state.lock(false).expect("first lock");
        // flock locks belong to the open file description: a second open in this process
        // conflicts exactly like another fwc apply would.
        let err = state.lock(false).err().expect("second lock refused while the first is held");
        assert!(format!("{err}").contains("another fwc command holds the state lock"), "{err}");
        // A bounded wait gives up after the timeout.
        let t0 = std::time::Instant::now();
        let err = state.lock_within(Some(std::time::Duration::from_millis(300))).err().expect("still held");
        assert!(t0.elapsed() >= std::time::Duration::from_millis(300) && format!("{err}").contains("waited 0.3 s"), "{err}");
        drop(held);
        let _again = state.lock(false).expect("free again once dropped");
        drop(_again);
        let _waited = state.lock(true).expect("a waiting lock on a free file returns at once");
    }
}
