//! The interfaces an nft file names by index (`iif`/`oif`, which nft resolves when it loads
//! the file: "Interface does not exist" in a scratch namespace), so the import can create them
//! there as links and the file loads as it does on its own host. Pure: text in, names out.

use std::collections::{BTreeMap, BTreeSet};

/// Names after `iif`/`oif` (a word, a quoted string, `$variable` of a `define`, or a `{ … }`
/// list of those), without `lo`; only valid interface names (1–15 characters, no `/`).
pub fn by_index(text: &str) -> BTreeSet<String> {
    let mut defines: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        let l = line.split('#').next().unwrap_or_default().trim();
        if let Some(rest) = l.strip_prefix("define ") {
            if let Some((k, v)) = rest.split_once('=') {
                defines.insert(k.trim().to_string(), v.trim().trim_end_matches(';').to_string());
            }
        }
    }
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let l = line.split('#').next().unwrap_or_default();
        let words: Vec<&str> = l.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            if !matches!(*w, "iif" | "oif") {
                continue;
            }
            let mut rest = words[i + 1..].iter().copied().skip_while(|x| matches!(*x, "!=" | "=="));
            let Some(first) = rest.next() else { continue };
            let values: Vec<String> = if first.starts_with('{') {
                let mut items = vec![first.trim_start_matches('{').to_string()];
                for x in rest {
                    items.push(x.to_string());
                    if x.contains('}') {
                        break;
                    }
                }
                items.iter().flat_map(|x| x.split(',')).map(|x| x.trim_matches(|c| c == '}' || c == '{').to_string()).collect()
            } else {
                vec![first.to_string()]
            };
            for v in values {
                let v = match v.strip_prefix('$') {
                    Some(var) => defines.get(var).cloned().unwrap_or_default(),
                    None => v,
                };
                for name in v.trim_matches(|c| c == '{' || c == '}').split(',') {
                    let name = name.trim().trim_matches('"');
                    if !name.is_empty() && name != "lo" && name.len() <= 15 && !name.contains(['/', ' ', '$', ';']) {
                        out.insert(name.to_string());
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::by_index;

    #[test]
    fn interfaces_named_by_index_are_found() {
        let text = "define wan = \"ppp0\"\ndefine lans = { \"br0\", \"wlan0\" }\ntable inet f {\n chain i {\n  iif lo accept\n  iif \"wan0\" tcp dport 22 accept\n  iif $wan drop\n  oif { eth1, \"eth2\" } accept\n  iif != eth3 drop\n  iif $lans accept\n  iifname \"notme\" accept # iif commented\n }\n}\n";
        let got: Vec<String> = by_index(text).into_iter().collect();
        assert_eq!(got, ["br0", "eth1", "eth2", "eth3", "ppp0", "wan0", "wlan0"]);
    }
}
