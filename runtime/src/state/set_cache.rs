//! The set-file cache on disk: `<state dir>/sets/<key>.set`, one entry per set file content
//! (`fwc_compiler::read::setcache` decides what an entry holds and checks it on every read). Used by
//! `fwc apply`, `fwc plan` and the agent's compile, so a million-line set file that did not
//! change is not parsed again.
//!
//! Entries are written aside and renamed into place, so concurrent `fwc apply` and agents only
//! ever see whole entries; an entry is read only from a directory and a file owned by this
//! user and not writable by others (the checksum inside detects damage, not a forger). Beside
//! an entry, the file's text (`<key>-text.set`) and, per set file path, which entry it last
//! used (`<hash>-last.set`): a changed file is patched from that previous version. The newest
//! [`MAX_ENTRIES`] files are kept.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use fwc_compiler::read::setcache::{SetCache, SetFileStore};

/// Subdirectory of the state dir.
pub const SETS_DIR: &str = "sets";
/// Files kept (the newest by use): the entries and texts of the last few versions of a
/// repository's set files, and their pointers.
pub const MAX_ENTRIES: usize = 16;

/// A [`SetFileStore`] in a directory.
#[derive(Debug, Clone)]
pub struct DirSetStore {
    dir: PathBuf,
}

impl DirSetStore {
    /// The cache of the state dir `state_dir`, as the compiler takes it.
    pub fn cache(state_dir: &Path) -> SetCache {
        SetCache::new(Arc::new(DirSetStore { dir: state_dir.join(SETS_DIR) }))
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.set"))
    }

    /// Is `meta` ours and not writable by anyone else?
    fn trusted(meta: &fs::Metadata) -> bool {
        meta.uid() == super::euid() && meta.permissions().mode() & 0o022 == 0
    }

    /// Drop the oldest entries beyond [`MAX_ENTRIES`], and temporary files a process that was
    /// stopped mid-write left behind (older than an hour).
    fn prune(&self) {
        let Ok(rd) = fs::read_dir(&self.dir) else { return };
        let now = SystemTime::now();
        let mut entries: Vec<(SystemTime, PathBuf)> = Vec::new();
        for e in rd.flatten() {
            let Some(modified) = e.metadata().ok().and_then(|m| m.modified().ok()) else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".set") {
                entries.push((modified, e.path()));
            } else if name.ends_with(".tmp") && now.duration_since(modified).is_ok_and(|age| age.as_secs() > 3600) {
                let _ = fs::remove_file(e.path());
            }
        }
        if entries.len() <= MAX_ENTRIES {
            return;
        }
        entries.sort();
        for (_, p) in &entries[..entries.len() - MAX_ENTRIES] {
            let _ = fs::remove_file(p);
        }
    }
}

impl SetFileStore for DirSetStore {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        if !Self::trusted(&fs::metadata(&self.dir).ok()?) {
            return None;
        }
        let path = self.path(key);
        let f = fs::File::open(&path).ok()?;
        if !Self::trusted(&f.metadata().ok()?) {
            return None;
        }
        let bytes = fs::read(&path).ok()?;
        // Used now: pruning keeps the entries in use.
        let _ = f.set_modified(SystemTime::now());
        Some(bytes)
    }

    fn put(&self, key: &str, bytes: &[u8]) {
        if super::create_private_dir(&self.dir).is_err() {
            return;
        }
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.dir.join(format!(".{key}.{}.{n}.tmp", std::process::id()));
        // 0600 from the start, whatever the umask (every file of the state dir is).
        let written = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).and_then(|mut f| f.write_all(bytes));
        if written.and_then(|()| fs::rename(&tmp, self.path(key))).is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        self.prune();
    }

    fn reject(&self, key: &str, why: &str) {
        let path = self.path(key);
        eprintln!("warning: ignoring the set-file cache entry {} ({why}); reading the set file instead", path.display());
        let _ = fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fwc_compiler::read::source::SourceTree;

    /// A set file big enough to be cached, and the repository using it.
    fn tree(seed: u32, n: u32) -> SourceTree {
        let mut x = seed.wrapping_mul(2_654_435_761) | 1;
        let mut list = String::from("# generated\n");
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let a = std::net::Ipv4Addr::from(x);
            match i % 10 {
                0 => list.push_str(&format!("{}.0/24\n", a.octets()[..3].iter().map(u8::to_string).collect::<Vec<_>>().join("."))),
                1 => list.push_str(&format!("2001:db8:{:x}::{:x}\n", x >> 16, x & 0xffff)),
                _ => list.push_str(&format!("{a}\n")),
            }
        }
        SourceTree::from_files([
            ("fwc.kdl".to_string(), "fwc 1\nset \"big\" file=\"lists/big.netset\"\ninput {\n    deny \"big\" from=\"@big\"\n}\n".to_string()),
            ("lists/big.netset".to_string(), list),
        ])
    }

    fn compile(t: &SourceTree) -> Vec<u8> {
        let (a, _) = fwc_compiler::compile(t, None, Some("c0ffee")).expect("compiles");
        a.files().into_iter().flat_map(|(name, text)| [name.as_bytes(), text.as_bytes()].concat()).collect()
    }

    /// The entries (not the texts and pointers beside them).
    fn entries(state: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(state.join(SETS_DIR))
            .map(|d| d.flatten().map(|e| e.path()).filter(|p| !p.file_stem().unwrap().to_string_lossy().contains('-')).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The tree of `tree(seed, n)` with its list's lines edited by `edit`.
    fn edited(seed: u32, n: u32, edit: impl FnOnce(&mut Vec<String>)) -> SourceTree {
        let mut t = tree(seed, n);
        let list = t.lists.get_mut("lists/big.netset").unwrap();
        let mut lines: Vec<String> = list.lines().map(str::to_string).collect();
        edit(&mut lines);
        *list = lines.join("\n") + "\n";
        t
    }

    #[test]
    fn patched_compiles_are_byte_identical_to_cold_ones() {
        // Each edit of the list, compiled with the cache holding the list before it (so patched
        // from it), then back: the artifacts are those of a compile without a cache.
        type Edit = fn(&mut Vec<String>);
        let edits: [(&str, Edit); 7] = [
            ("add", |l| l.insert(2000, "198.51.100.7".into())),
            ("remove", |l| drop(l.remove(3001))),
            ("change", |l| l[4000] = "203.0.113.0/25".into()),
            ("reorder", |l| l.swap(100, 5000)),
            ("duplicate", |l| l.insert(10, l[4321].clone())),
            ("comments", |l| {
                l.insert(7, "# added comment".into());
                l[20].push_str(" ; trailing");
            }),
            ("neighbour", |l| {
                let a: std::net::Ipv4Addr = l.iter().rev().find_map(|x| x.parse().ok()).unwrap();
                l.push(std::net::Ipv4Addr::from(u32::from(a) ^ 1).to_string());
            }),
        ];
        /// The store, noting which previous texts were read (a patch was made from them).
        struct Noting(DirSetStore, std::sync::Mutex<usize>);
        impl SetFileStore for Noting {
            fn get(&self, key: &str) -> Option<Vec<u8>> {
                *self.1.lock().unwrap() += usize::from(key.ends_with("-text"));
                self.0.get(key)
            }
            fn put(&self, key: &str, bytes: &[u8]) {
                self.0.put(key, bytes)
            }
            fn reject(&self, key: &str, why: &str) {
                panic!("{key} rejected: {why}")
            }
        }
        let state = tempfile::tempdir().unwrap();
        let store = Arc::new(Noting(DirSetStore { dir: state.path().join(SETS_DIR) }, Default::default()));
        let cached = |mut t: SourceTree| {
            t.set_cache = SetCache::new(store.clone());
            compile(&t)
        };
        let base = tree(4, 6000);
        let cold_base = compile(&base);
        assert_eq!(cached(base.clone()), cold_base, "the first version: a miss");
        for (what, edit) in edits {
            let next = edited(4, 6000, edit);
            let cold = compile(&next);
            let read = *store.1.lock().unwrap();
            assert_eq!(cached(next), cold, "{what}: patched from the list before it");
            assert_eq!(*store.1.lock().unwrap(), read + 1, "{what}: the previous text was read");
            assert_eq!(cached(base.clone()), cold_base, "{what}: back (a hit)");
        }
    }

    #[test]
    fn a_damaged_previous_version_is_ignored() {
        let state = tempfile::tempdir().unwrap();
        let mut t = tree(11, 6000);
        t.set_cache = DirSetStore::cache(state.path());
        compile(&t);
        let dir = state.path().join(SETS_DIR);
        let text = fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).find(|p| p.to_string_lossy().ends_with("-text.set")).unwrap();
        // The stored text of the previous version changed: not believed, the file is parsed.
        let mut bytes = fs::read(&text).unwrap();
        bytes[100] = if bytes[100] == b'1' { b'2' } else { b'1' };
        fs::write(&text, &bytes).unwrap();
        let mut next = edited(11, 6000, |l| l.push("198.51.100.7".into()));
        let cold = compile(&next);
        next.set_cache = DirSetStore::cache(state.path());
        assert_eq!(compile(&next), cold);
        assert!(!text.exists(), "the damaged text is dropped");
        // A damaged previous entry, the same.
        let [a, b] = entries(state.path()).try_into().unwrap();
        for e in [&a, &b] {
            let mut bytes = fs::read(e).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 1;
            fs::write(e, &bytes).unwrap();
        }
        let mut third = edited(11, 6000, |l| l.push("198.51.100.8".into()));
        let cold = compile(&third);
        third.set_cache = DirSetStore::cache(state.path());
        assert_eq!(compile(&third), cold);
    }

    #[test]
    fn cached_compiles_are_byte_identical_to_cold_ones() {
        let state = tempfile::tempdir().unwrap();
        for (seed, n) in [(1, 6000), (2, 7000), (3, 9001)] {
            let cold = compile(&tree(seed, n));
            let mut t = tree(seed, n);
            t.set_cache = DirSetStore::cache(state.path());
            assert_eq!(compile(&t), cold, "miss (writes the entry), seed {seed}");
            let stored = entries(state.path());
            assert_eq!(compile(&t), cold, "hit, seed {seed}");
            assert_eq!(entries(state.path()), stored, "a hit writes nothing");
        }
        assert_eq!(entries(state.path()).len(), 3);
        // Beside each entry its text, and the list's pointer to the last one.
        assert_eq!(fs::read_dir(state.path().join(SETS_DIR)).unwrap().count(), 7);
    }

    #[test]
    fn a_corrupt_or_foreign_entry_is_ignored_and_dropped() {
        let state = tempfile::tempdir().unwrap();
        let mut t = tree(9, 6000);
        let cold = compile(&t);
        t.set_cache = DirSetStore::cache(state.path());
        compile(&t);
        let [entry] = entries(state.path()).try_into().unwrap();
        // A flipped byte in the middle (an element's address): detected, the file is read again.
        let mut bytes = fs::read(&entry).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        fs::write(&entry, &bytes).unwrap();
        assert_eq!(compile(&t), cold);
        // Rewritten intact by that compile, then replaced by another file's entry.
        let other = tree(10, 6000);
        let mut o = other.clone();
        o.set_cache = DirSetStore::cache(state.path());
        compile(&o);
        let other_entry = entries(state.path()).into_iter().find(|p| *p != entry).unwrap();
        fs::copy(&other_entry, &entry).unwrap();
        assert_eq!(compile(&t), cold);
        // Truncated.
        fs::write(&entry, &fs::read(&entry).unwrap()[..100]).unwrap();
        assert_eq!(compile(&t), cold);
        // Its checksum matches but a byte follows its last field: refused only after every
        // element was passed on to the set, which drops them again (not read twice).
        let mut body = fs::read(&entry).unwrap();
        body.truncate(body.len() - 32);
        body.push(0);
        let sum = <sha2::Sha256 as sha2::Digest>::digest(&body);
        body.extend_from_slice(&sum);
        fs::write(&entry, &body).unwrap();
        assert_eq!(compile(&t), cold);
        assert_ne!(fs::read(&entry).unwrap(), body, "dropped, and written again by that compile");
        // A cache dir others may write to is not read at all.
        fs::set_permissions(state.path().join(SETS_DIR), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(DirSetStore { dir: state.path().join(SETS_DIR) }.get(entry.file_stem().unwrap().to_str().unwrap()).is_none());
    }

    #[test]
    fn only_the_newest_entries_are_kept() {
        let state = tempfile::tempdir().unwrap();
        let store = DirSetStore { dir: state.path().join(SETS_DIR) };
        for i in 0..MAX_ENTRIES + 3 {
            store.put(&format!("{i:064x}"), b"x");
        }
        assert_eq!(entries(state.path()).len(), MAX_ENTRIES);
    }
}
