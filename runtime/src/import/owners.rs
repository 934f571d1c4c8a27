//! User and group names an original refers to (nft `meta skuid "www-data"`, iptables `-m owner
//! --uid-owner www-data`), which nft and iptables resolve while loading: a name the importing
//! host does not have would stop the load ("User does not exist"). The import gives such names
//! made-up ids in a scratch mount namespace (see `source.rs`); the rules that match them are
//! then refused by name and line like any owner match. Pure: text in, names out.

use std::collections::BTreeSet;

/// (users, groups) named in `text`, numbers left out.
pub fn named(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut users, mut groups) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        let l = line.split('#').next().unwrap_or_default();
        let words: Vec<&str> = l.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let into = match *w {
                "skuid" | "--uid-owner" => &mut users,
                "skgid" | "--gid-owner" => &mut groups,
                _ => continue,
            };
            let mut rest = words[i + 1..].iter().copied().skip_while(|x| matches!(*x, "!=" | "==" | "!"));
            let Some(first) = rest.next() else { continue };
            let mut items = vec![first.to_string()];
            if first.starts_with('{') && !first.contains('}') {
                for x in rest {
                    items.push(x.to_string());
                    if x.contains('}') {
                        break;
                    }
                }
            }
            for item in items.iter().flat_map(|x| x.split(',')) {
                let name = item.trim_matches(|c| matches!(c, '{' | '}' | '"' | ' '));
                let ok = !name.is_empty() && name.len() <= 32 && !name.chars().all(|c| c.is_ascii_digit() || c == '-') && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if ok {
                    into.insert(name.to_string());
                }
            }
        }
    }
    (users, groups)
}

/// `base` (an `/etc/passwd` or `/etc/group` text) with an entry for each of `names` it lacks,
/// ids from 60001 up; `None` when it lacks none.
pub fn with_entries(base: &str, names: &BTreeSet<String>, group: bool) -> Option<String> {
    let have: BTreeSet<&str> = base.lines().filter_map(|l| l.split(':').next()).collect();
    let missing: Vec<&String> = names.iter().filter(|n| !have.contains(n.as_str())).collect();
    if missing.is_empty() {
        return None;
    }
    let mut out = base.trim_end().to_string();
    for (i, n) in missing.into_iter().enumerate() {
        let id = 60001 + i;
        out.push('\n');
        out.push_str(&if group { format!("{n}:x:{id}:") } else { format!("{n}:x:{id}:{id}::/nonexistent:/usr/sbin/nologin") });
    }
    out.push('\n');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_names_are_found_and_added_when_missing() {
        let (u, g) = named("meta skuid \"debian-tor\" accept\nmeta skgid { \"www\", 33 } drop\n-A OUTPUT -m owner --uid-owner proxy -j ACCEPT\nmeta skuid 1000-2000 accept\n");
        assert_eq!(u.into_iter().collect::<Vec<_>>(), ["debian-tor", "proxy"]);
        assert_eq!(g.iter().cloned().collect::<Vec<_>>(), ["www"]);
        let p = with_entries("root:x:0:\nwww:x:33:\n", &g, true);
        assert_eq!(p, None);
        let p = with_entries("root:x:0:0::/root:/bin/sh\n", &["debian-tor".to_string()].into(), false).unwrap();
        assert!(p.ends_with("debian-tor:x:60001:60001::/nonexistent:/usr/sbin/nologin\n"), "{p}");
    }
}
