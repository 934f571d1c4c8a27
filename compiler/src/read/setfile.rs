//! Set files: `set "firehol" file="lists/firehol_level1.netset"` reads addresses from a plain
//! text file of the repository instead of KDL (its line format: `crate::read::setlines`).
//!
//! Set files live under `lists/` of the repository (like rule files under `rules/`); the
//! [`SourceTree`] holds them for the work tree and for git commits alike.

use crate::diag::{Diagnostic, Diagnostics};
use crate::model::*;
use crate::read::source::{SourceMap, SourceTree, LISTS_DIR};
use crate::read::setlines::parse;
use crate::{read::limits, read::setcache, read::setpatch};

/// Is `path` (as written in `file=`) a path inside the repository (relative, no `..`)?
fn inside_repository(path: &str) -> bool {
    !path.starts_with('/') && !path.contains('\\') && path.split('/').all(|c| c != ".." && !c.is_empty())
}

/// Read the files of every set that names some (`file=`), appending their elements to the
/// set's inline ones. Errors point at the `file=` value (missing file, outside the
/// repository) or at line:column of the set file (bad line).
pub fn load_all(tree: &SourceTree, map: &mut SourceMap, rs: &mut Ruleset) -> Result<(), Diagnostics> {
    let mut diags = Diagnostics::default();
    // Elements of the host so far (inline ones are already counted by limits::check_ruleset).
    let mut total: usize = rs.sets.iter().map(|s| s.elements.len()).sum();
    for set in &mut rs.sets {
        let rule = format!("set \"{}\"", set.name.value);
        for file in &set.files {
            let path = file.value.trim_start_matches("./");
            if !inside_repository(path) {
                diags.push(
                    Diagnostic::error("set-file-outside-repository", format!("set file \"{}\" is outside the repository", file.value))
                        .at(map, file.span, "not a path inside the repository")
                        .rule(&rule)
                        .help(format!("set files are part of the repository: put it under {LISTS_DIR}/ and write file=\"{LISTS_DIR}/<name>\"")),
                );
                continue;
            }
            if !path.starts_with(&format!("{LISTS_DIR}/")) {
                diags.push(
                    Diagnostic::error("set-file-location", format!("set file \"{}\" is not under {LISTS_DIR}/", file.value))
                        .at(map, file.span, "fwc reads set files from lists/")
                        .rule(&rule)
                        .help(format!("move the file to {LISTS_DIR}/ of the repository (as rule files live under rules/) and write file=\"{LISTS_DIR}/…\"")),
                );
                continue;
            }
            let Some(text) = tree.lists.get(path) else {
                let known: Vec<&str> = tree.lists.keys().map(String::as_str).collect();
                let help = match crate::suggest::did_you_mean(path, known.iter().copied()) {
                    Some(s) => format!("did you mean \"{s}\"?"),
                    None => format!("add the file to the repository under {LISTS_DIR}/ (and commit it: the agent reads the commit)"),
                };
                diags.push(
                    Diagnostic::error("missing-set-file", format!("set file \"{}\" does not exist", file.value))
                        .at(map, file.span, "no such file in the repository")
                        .rule(&rule)
                        .help(help),
                );
                continue;
            };
            let id = map.add(path.to_string(), text);
            let before = set.elements.len();
            // One allocation of the right size (a million elements: no doubling on the way),
            // never past the limit.
            let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
            set.elements.reserve(lines.min(limits::MAX_SET_ELEMENTS.saturating_sub(total) + 1));
            let total_before = total;
            let mut add = Adder { elements: &mut set.elements, total: &mut total, past_limit: None, file: id };
            let key = tree.set_cache.0.as_ref().filter(|_| text.len() >= setcache::MIN_BYTES).map(|_| setcache::key(text));
            // A hit: the entry's elements go straight into the set (no copy of them between).
            let cached = match (&tree.set_cache.0, key.as_deref()) {
                (Some(store), Some(k)) => store.get(k).and_then(|bytes| match setcache::decode_with(k, &bytes, |_| {}, |e, off, len| add.push(e, off as usize, len as usize)) {
                    Ok(facts) => Some(facts),
                    Err(why) => {
                        // Elements passed on before the entry turned out unreadable are dropped.
                        add.elements.truncate(before);
                        *add.total = total_before;
                        add.past_limit = None;
                        store.reject(k, &why);
                        None
                    }
                }),
                _ => None,
            };
            // A set that is exactly this file: its layout and manifest take their facts from it.
            let whole = before == 0 && set.files.len() == 1;
            // Not cached, but a previous version of the file is: patch that (the changed lines
            // parsed, the rest taken over) instead of parsing the file whole.
            let patched = match (&cached, &key) {
                (None, Some(_)) if whole => previous_version(&tree.set_cache, path).map(|(old, entry)| setpatch::patch(&old, &entry, text)),
                _ => None,
            };
            let mut patched_merged = None;
            let errors = match (&cached, patched) {
                (Some(_), _) => Vec::new(),
                (None, Some(Ok(p))) => {
                    for (e, offset, len) in p.elems {
                        add.push(e, offset as usize, len as usize);
                    }
                    patched_merged = Some(p.merged);
                    Vec::new()
                }
                (None, Some(Err(errors))) => errors,
                (None, None) => parse(text, |e, offset, len| add.push(e, offset, len)),
            };
            let past_limit = add.past_limit;
            if let Some(span) = past_limit {
                set.elements.truncate(before);
                diags.push(limits::too_many_elements(map, span).rule(&rule));
                return Err(diags);
            }
            if !errors.is_empty() {
                set.elements.truncate(before);
                for e in errors {
                    diags.push(
                        Diagnostic::error("bad-set-file-line", e.message)
                            .at(map, Span { file: id, offset: e.offset as u32, len: e.len as u32 }, "in this set file")
                            .rule(&rule)
                            .help(e.help),
                    );
                }
                continue;
            }
            // What its layout and manifest take from it, from the cache or computed once here
            // (and stored for the next compile, with the text and which entry this path uses).
            if whole {
                let facts = match cached {
                    Some(facts) => {
                        if let (Some(store), Some(key)) = (&tree.set_cache.0, &key) {
                            let last = setcache::last_key(path);
                            if store.get(&last).as_deref() != Some(key.as_bytes()) {
                                store.put(&last, key.as_bytes());
                            }
                        }
                        facts
                    }
                    None => {
                        let facts = setcache::FileFacts {
                            merged: patched_merged.unwrap_or_else(|| crate::place::setlayout::merged_compact(set.elements.iter().map(|e| &e.value))),
                            digest: crate::emit::manifest::set_digest(&set.elements),
                        };
                        if let (Some(store), Some(key)) = (&tree.set_cache.0, &key) {
                            let elems: Vec<(AddrElem, u32, u32)> = set.elements.iter().map(|e| (e.value, e.span.offset, e.span.len)).collect();
                            let entry = setcache::Entry { elems, facts };
                            store.put(key, &setcache::encode(key, &entry));
                            store.put(&setcache::text_key(key), text.as_bytes());
                            store.put(&setcache::last_key(path), key.as_bytes());
                            entry.facts
                        } else {
                            facts
                        }
                    }
                };
                set.from_file = Some(std::sync::Arc::new(facts));
            }
        }
    }
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok(())
    }
}

/// Appends a set file's elements to its set, counting them against the host's limit: past
/// it, only where the first one beyond it is (`past_limit`) is kept.
struct Adder<'s> {
    elements: &'s mut Vec<Spanned<AddrElem>>,
    total: &'s mut usize,
    past_limit: Option<Span>,
    file: u32,
}

impl Adder<'_> {
    fn push(&mut self, e: AddrElem, offset: usize, len: usize) {
        let span = Span { file: self.file, offset: offset as u32, len: len as u32 };
        if *self.total < limits::MAX_SET_ELEMENTS {
            *self.total += 1;
            self.elements.push(Spanned::new(e, span));
        } else if self.past_limit.is_none() {
            self.past_limit = Some(span);
        }
    }
}

/// The cache's entry for a set file's `key`, if the cache is on and holds an intact one (an
/// unusable entry is reported to the store, which warns and drops it).
fn cached_entry(cache: &setcache::SetCache, key: Option<&str>) -> Option<setcache::Entry> {
    let (store, key) = (cache.0.as_ref()?, key?);
    let bytes = store.get(key)?;
    match setcache::decode(key, &bytes) {
        Ok(entry) => Some(entry),
        Err(why) => {
            store.reject(key, &why);
            None
        }
    }
}

/// The previous version of the set file at `path` the cache holds: its text and its entry
/// (the text believed only when it is the text of that entry).
fn previous_version(cache: &setcache::SetCache, path: &str) -> Option<(String, setcache::Entry)> {
    let store = cache.0.as_ref()?;
    let last = store.get(&setcache::last_key(path))?;
    let key = std::str::from_utf8(&last).ok().filter(|k| k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()))?.to_string();
    let entry = cached_entry(cache, Some(&key))?;
    let text_key = setcache::text_key(&key);
    let text = store.get(&text_key)?;
    match String::from_utf8(text) {
        Ok(text) if setcache::key(&text) == key => Some((text, entry)),
        _ => {
            store.reject(&text_key, "it is not the text of its entry");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_paths() {
        assert!(inside_repository("lists/a.netset"));
        for p in ["/etc/passwd", "../x", "lists/../../x", "lists//a", "a\\b"] {
            assert!(!inside_repository(p), "{p}");
        }
    }
}
