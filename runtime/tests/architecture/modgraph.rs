//! The file-level import graph of one crate, read from its sources, and its import cycles.
//!
//! A file uses another when its code names an item that the other file defines: through a
//! `use` (`crate::…`, `super::…`, `self::…`, a child module's name) or a path written in the
//! code, or a name a `use` brought in. A path ends at the file of the longest module prefix
//! it names; a name a module only re-exports (`pub use child::Thing`) is followed to the file
//! that defines it, so a `mod.rs` that is a facade over its children is not in a cycle with
//! them. A `pub use` counts as a use of its own file only when the file's code names the
//! re-exported item too; `mod child;` declarations are not uses. Comments, string literals
//! and test code (`#[cfg(test)] mod …`, inline or a file of its own) are left out: a unit test
//! may drive the whole pipeline from inside one stage. It is a reader of ordinary Rust, not a compiler: macros that build paths, and
//! `#[path]` attributes, are not followed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The file graph of one crate's `src/`.
pub struct Graph {
    /// Paths relative to `src/`, e.g. `backend/nft.rs`.
    pub files: Vec<String>,
    /// `edges[a]`: the files `a` uses, each with the first line that does.
    pub edges: Vec<BTreeMap<usize, String>>,
    /// Each file's tokens (comments and literals removed), for the purity checks.
    pub tokens: Vec<Vec<String>>,
}

/// Every `.rs` file below `dir`, in directory order.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `backend/nft.rs` -> `["backend", "nft"]`, `engine/mod.rs` -> `["engine"]`, `lib.rs` -> `[]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// Text with comments, string/char literals and attributes' contents blanked (newlines kept).
pub fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep_newlines = |s: &[u8], out: &mut String| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let start = i;
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            keep_newlines(&b[start..i.min(b.len())], &mut out);
        } else if (c == b'r' || (c == b'b' && b.get(i + 1) == Some(&b'r')))
            && !b[..i].last().is_some_and(|p| p.is_ascii_alphanumeric() || *p == b'_')
            && {
                let j = if c == b'b' { i + 2 } else { i + 1 };
                let mut k = j;
                while b.get(k) == Some(&b'#') {
                    k += 1;
                }
                b.get(k) == Some(&b'"')
            }
        {
            // raw string r#"…"#
            let start = i;
            let mut j = if c == b'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && b[j + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
            out.extend(std::iter::repeat_n('\n', b[start..i.min(b.len())].iter().filter(|&&x| x == b'\n').count()));
        } else if c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
            out.extend(std::iter::repeat_n('\n', b[start..i.min(b.len())].iter().filter(|&&x| x == b'\n').count()));
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&x| x == b'\'').map(|p| i + 2 + p)
            } else {
                let ch_len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(i + 1 + ch_len)
            };
            match end {
                Some(e) => {
                    out.push_str("' '");
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Tokens with their line: identifiers, `::`, and single punctuation characters.
fn tokenize(text: &str) -> Vec<(String, usize)> {
    let mut out = vec![];
    let mut line = 1;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\n' {
            line += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_alphanumeric() || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            out.push((text[i..end].to_string(), line));
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            out.push(("::".into(), line));
        } else if !c.is_whitespace() {
            out.push((c.to_string(), line));
        }
    }
    out
}

/// One imported name of a `use` tree: the absolute-or-relative path, the name it is bound to
/// (`None` for a glob), whether it is re-exported.
#[derive(Debug, Clone)]
struct UseItem {
    path: Vec<String>,
    alias: Option<String>,
    public: bool,
    line: usize,
    /// The module the `use` is written in (a file's module plus inline `mod x { … }`).
    scope: Vec<String>,
}

fn parse_use_tree(t: &[(String, usize)], mut i: usize, prefix: &[String], out: &mut Vec<(Vec<String>, Option<String>)>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        let Some((tok, _)) = t.get(i) else { return i };
        match tok.as_str() {
            "{" => {
                i += 1;
                loop {
                    match t.get(i).map(|x| x.0.as_str()) {
                        Some("}") => return i + 1,
                        Some(",") => i += 1,
                        None => return i,
                        _ => i = parse_use_tree(t, i, &path, out),
                    }
                }
            }
            "*" => {
                out.push((path, None));
                return i + 1;
            }
            "::" => i += 1,
            _ if tok.starts_with(|c: char| c.is_alphanumeric() || c == '_') => {
                if tok == "self" && !path.is_empty() && path.len() == prefix.len() && !prefix.is_empty() {
                    // `use a::{self, …}`: the module `a` itself
                } else {
                    path.push(tok.clone());
                }
                i += 1;
                if t.get(i).map(|x| x.0.as_str()) == Some("::") {
                    continue;
                }
                let mut alias = path.last().cloned();
                if t.get(i).map(|x| x.0.as_str()) == Some("as") {
                    alias = t.get(i + 1).map(|x| x.0.clone());
                    i += 2;
                }
                out.push((path, alias));
                return i;
            }
            _ => return i + 1,
        }
    }
}

fn is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

/// Does the file define an item named `name` at its top level (roughly: any item keyword
/// followed by the name)?
fn defines(tokens: &[(String, usize)], name: &str) -> bool {
    tokens.windows(2).any(|w| matches!(w[0].0.as_str(), "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "mod" | "union") && w[1].0 == name)
        || tokens.windows(3).any(|w| w[0].0 == "macro_rules" && w[1].0 == "!" && w[2].0 == name)
}

struct FileInfo {
    module: Vec<String>,
    tokens: Vec<(String, usize)>,
    uses: Vec<UseItem>,
    /// Paths written in the code outside `use` statements: (scope, segments, line).
    paths: Vec<(Vec<String>, Vec<String>, usize)>,
    /// Token positions that belong to `use` statements.
    in_use: BTreeSet<usize>,
    /// Child modules declared `#[cfg(test)] mod name;` (files of test code).
    test_children: Vec<Vec<String>>,
}

/// Is the item at token `i` preceded by `#[cfg(test)]`?
fn cfg_test(tokens: &[(String, usize)], i: usize) -> bool {
    i >= 7 && tokens[i - 7..i].iter().map(|t| t.0.as_str()).eq(["#", "[", "cfg", "(", "test", ")", "]"])
}

fn read_file(rel: &str, text: &str) -> FileInfo {
    let module = module_path(rel);
    let tokens = tokenize(&strip(text));
    let mut uses = vec![];
    let mut paths = vec![];
    let mut in_use = BTreeSet::new();
    // Inline modules: (name, brace depth at which it was opened).
    let mut inline: Vec<(String, usize)> = vec![];
    let mut depth = 0usize;
    let mut pending_mod: Option<String> = None;
    let mut test_children = vec![];
    // Brace depth at which a `#[cfg(test)]` inline module opened (its code is skipped).
    let mut test_depth: Option<usize> = None;
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i].0.as_str();
        let scope = || module.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect::<Vec<_>>();
        match tok {
            "mod" if tokens.get(i + 1).is_some_and(|t| is_ident(&t.0)) && tokens.get(i + 2).is_some_and(|t| t.0 == ";") => {
                if cfg_test(&tokens, i) {
                    test_children.push(scope().into_iter().chain([tokens[i + 1].0.clone()]).collect());
                }
            }
            "mod" if tokens.get(i + 1).is_some_and(|t| is_ident(&t.0)) && tokens.get(i + 2).is_some_and(|t| t.0 == "{") => {
                pending_mod = Some(tokens[i + 1].0.clone());
                if cfg_test(&tokens, i) && test_depth.is_none() {
                    test_depth = Some(depth + 1);
                }
                i += 2;
                continue;
            }
            "{" => {
                depth += 1;
                if let Some(m) = pending_mod.take() {
                    inline.push((m, depth));
                }
            }
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                if test_depth == Some(depth) {
                    test_depth = None;
                }
                depth = depth.saturating_sub(1);
            }
            _ if test_depth.is_some() => {}
            "use" => {
                let public = i > 0 && (tokens[i - 1].0 == "pub" || tokens[i - 1].0 == ")");
                let line = tokens[i].1;
                let start = i;
                let mut items = vec![];
                let mut j = parse_use_tree(&tokens, i + 1, &[], &mut items);
                while j < tokens.len() && tokens[j].0 != ";" {
                    j += 1;
                }
                in_use.extend(start..=j.min(tokens.len() - 1));
                let sc = scope();
                uses.extend(items.into_iter().map(|(path, alias)| UseItem { path, alias, public, line, scope: sc.clone() }));
                i = j + 1;
                continue;
            }
            _ if is_ident(tok) && !(i > 0 && tokens[i - 1].0 == "::") && tokens.get(i + 1).is_some_and(|t| t.0 == "::") => {
                let line = tokens[i].1;
                let mut segs = vec![tok.to_string()];
                let mut j = i + 1;
                while j + 1 < tokens.len() && tokens[j].0 == "::" && is_ident(&tokens[j + 1].0) {
                    segs.push(tokens[j + 1].0.clone());
                    j += 2;
                }
                paths.push((scope(), segs, line));
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    FileInfo { module, tokens, uses, paths, in_use, test_children }
}

impl Graph {
    /// Read every `.rs` file under `src` (a binary's `main.rs` beside a `lib.rs` is its own
    /// crate and left out).
    pub fn read(src: &Path) -> Graph {
        let mut paths = vec![];
        rust_files(src, &mut paths);
        let has_lib = src.join("lib.rs").is_file();
        let mut rels: Vec<String> = paths
            .iter()
            .map(|p| p.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/"))
            .filter(|r| !(has_lib && (r == "main.rs" || r.starts_with("bin/"))))
            .collect();
        rels.sort();
        let mut infos: Vec<FileInfo> = rels.iter().map(|r| read_file(r, &std::fs::read_to_string(src.join(r)).unwrap())).collect();
        let tests: BTreeSet<Vec<String>> = infos.iter().flat_map(|f| f.test_children.iter().cloned()).collect();
        let keep: Vec<bool> = infos.iter().map(|f| !tests.iter().any(|t| f.module.starts_with(t))).collect();
        let mut k = keep.iter();
        rels.retain(|_| *k.next().unwrap());
        let mut k = keep.iter();
        infos.retain(|_| *k.next().unwrap());
        let modules: BTreeMap<Vec<String>, usize> = infos.iter().enumerate().map(|(i, f)| (f.module.clone(), i)).collect();
        let r = Resolver { infos: &infos, modules: &modules };
        let mut edges: Vec<BTreeMap<usize, String>> = vec![BTreeMap::new(); infos.len()];
        for (a, f) in infos.iter().enumerate() {
            let mut add = |b: Option<usize>, line: usize| {
                if let Some(b) = b.filter(|&b| b != a) {
                    edges[a].entry(b).or_insert_with(|| format!("{}:{line}", rels[a]));
                }
            };
            for u in &f.uses {
                if u.public {
                    // A re-export is a use of this file's own only when its code names it too.
                    let named = u.alias.as_ref().is_none_or(|n| f.tokens.iter().enumerate().any(|(k, t)| &t.0 == n && !f.in_use.contains(&k)));
                    if !named {
                        continue;
                    }
                }
                add(r.resolve(a, &u.scope, &u.path, 0), u.line);
            }
            for (scope, segs, line) in &f.paths {
                add(r.resolve(a, scope, segs, 0), *line);
            }
        }
        Graph { files: rels, edges, tokens: infos.into_iter().map(|f| f.tokens.into_iter().map(|t| t.0).collect()).collect() }
    }

    /// The import cycles: strongly connected components of more than one file, each sorted,
    /// in order.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let n = self.files.len();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = vec![];
        let mut next = 0;
        let mut out = vec![];
        // Iterative Tarjan: (node, its successors, position in them).
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            let mut work: Vec<(usize, Vec<usize>, usize)> = vec![(root, self.edges[root].keys().copied().collect(), 0)];
            index[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some((v, succ, pos)) = work.last_mut() {
                let v = *v;
                if *pos < succ.len() {
                    let w = succ[*pos];
                    *pos += 1;
                    if index[w] == usize::MAX {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        work.push((w, self.edges[w].keys().copied().collect(), 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                } else {
                    work.pop();
                    if let Some((u, _, _)) = work.last() {
                        low[*u] = low[*u].min(low[v]);
                    }
                    if low[v] == index[v] {
                        let mut comp = vec![];
                        loop {
                            let w = stack.pop().unwrap();
                            on_stack[w] = false;
                            comp.push(self.files[w].clone());
                            if w == v {
                                break;
                            }
                        }
                        if comp.len() > 1 {
                            comp.sort();
                            out.push(comp);
                        }
                    }
                }
            }
        }
        out.sort();
        out
    }

    /// The edges inside one set of files, as `a -> b (where)` lines: what to cut.
    pub fn explain(&self, files: &[String]) -> Vec<String> {
        let idx: BTreeSet<usize> = files.iter().filter_map(|f| self.files.iter().position(|g| g == f)).collect();
        let mut out = vec![];
        for &a in &idx {
            for (b, at) in &self.edges[a] {
                if idx.contains(b) {
                    out.push(format!("{} -> {} ({at})", self.files[a], self.files[*b]));
                }
            }
        }
        out
    }
}

struct Resolver<'a> {
    infos: &'a [FileInfo],
    modules: &'a BTreeMap<Vec<String>, usize>,
}

impl Resolver<'_> {
    /// The file that defines what `segs` names, written in module `scope` of file `from`.
    fn resolve(&self, from: usize, scope: &[String], segs: &[String], hops: usize) -> Option<usize> {
        if hops > 8 || segs.is_empty() {
            return None;
        }
        let abs = self.absolute(from, scope, segs, 0)?;
        self.resolve_abs(&abs, hops)
    }

    /// `segs` as a path from the crate root, or `None` when it names no module of this crate.
    fn absolute(&self, from: usize, scope: &[String], segs: &[String], hops: usize) -> Option<Vec<String>> {
        if hops > 8 || segs.is_empty() {
            return None;
        }
        let mut base: Vec<String>;
        let mut rest = segs;
        match segs[0].as_str() {
            "crate" => {
                base = vec![];
                rest = &segs[1..];
            }
            "self" => {
                base = scope.to_vec();
                rest = &segs[1..];
            }
            "super" => {
                base = scope.to_vec();
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            first => {
                let child: Vec<String> = scope.iter().cloned().chain([first.to_string()]).collect();
                if self.modules.contains_key(&child) {
                    base = scope.to_vec();
                } else if let Some(u) = self.infos[from].uses.iter().find(|u| u.alias.as_deref() == Some(first) && u.path.len() > 1 && scope.starts_with(&u.scope)) {
                    // A name a `use` brought in: continue from what it names.
                    let target = self.absolute(from, &u.scope, &u.path, hops + 1)?;
                    base = target;
                    rest = &segs[1..];
                } else {
                    return None;
                }
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn resolve_abs(&self, abs: &[String], hops: usize) -> Option<usize> {
        let (file, depth) = (0..=abs.len()).rev().find_map(|k| self.modules.get(&abs[..k]).map(|&f| (f, k)))?;
        let Some(name) = abs.get(depth) else { return Some(file) };
        let info = &self.infos[file];
        // A re-export: follow it to where the item lives.
        if let Some(u) = info.uses.iter().find(|u| u.public && u.alias.as_deref() == Some(name) && u.scope == info.module) {
            if let Some(target) = self.absolute(file, &u.scope, &u.path, 0) {
                let full: Vec<String> = target.into_iter().chain(abs[depth + 1..].iter().cloned()).collect();
                return self.resolve_abs(&full, hops + 1).or(Some(file));
            }
        }
        if !defines(&info.tokens, name) {
            for u in info.uses.iter().filter(|u| u.public && u.alias.is_none() && u.scope == info.module) {
                if let Some(target) = self.absolute(file, &u.scope, &u.path, 0) {
                    if let Some(&g) = self.modules.get(&target) {
                        if defines(&self.infos[g].tokens, name) {
                            return Some(g);
                        }
                    }
                }
            }
        }
        Some(file)
    }
}
