//! The one runner of the `nft` program: in a network namespace or not, always in UTC,
//! its errors cleaned for people. The backend and the quota code both run nft through it.

use std::io::Write;
use std::process::Command;

use fwc_compiler::artifacts::NFT_TABLE;
use miette::{miette, IntoDiagnostic, Result, WrapErr};
use serde_json::{json, Value};

/// How fwc runs nft: which binary, inside which network namespace.
#[derive(Debug, Clone)]
pub struct NftCmd {
    /// Run nft inside this network namespace (`ip netns exec NAME nft …`).
    pub netns: Option<String>,
    /// The nft binary (default `nft`).
    pub nft: String,
}

impl NftCmd {
    pub fn new(netns: Option<String>) -> NftCmd {
        NftCmd { netns, nft: "nft".into() }
    }

    pub fn command(&self) -> Command {
        let mut c = self.command_in_netns();
        // nft prints `meta hour` in its own local time zone; fwc loads seconds since UTC
        // midnight and compares listings, so every nft it runs reads and prints UTC (schedules).
        c.env("TZ", "UTC");
        c
    }

    fn command_in_netns(&self) -> Command {
        match &self.netns {
            // nft is a process that must run in the namespace: `ip netns exec` is the standard
            // way to start one there, the very command `--netns` is documented as (operators
            // can repeat it by hand), and it reports a missing namespace in iproute2's words.
            // fwc's own queries (links, qdiscs, filters, sysctls) use setns threads instead.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, &self.nft]);
                c
            }
            None => Command::new(&self.nft),
        }
    }

    pub(super) fn where_(&self) -> String {
        match &self.netns {
            Some(ns) => format!(" (netns {ns})"),
            None => String::new(),
        }
    }

    /// Run `nft -j [-c] -f FILE` on a transaction document.
    pub fn run_file(&self, doc: &Value, check: bool) -> Result<()> {
        let mut tmp = tempfile::Builder::new().prefix("fwc-nft-").suffix(".json").tempfile().into_diagnostic()?;
        // One write, not one per JSON token (a 10k-forward ruleset is megabytes).
        tmp.write_all(&serde_json::to_vec(doc).into_diagnostic()?).into_diagnostic()?;
        tmp.flush().into_diagnostic()?;
        let mut c = self.command();
        c.arg("-j");
        if check {
            c.arg("-c");
        }
        c.arg("-f").arg(tmp.path());
        let out = c.output().into_diagnostic().wrap_err("cannot run nft (is nftables installed?)")?;
        if !out.status.success() {
            return Err(miette!(
                "nft {}rejected the transaction{}: {}",
                if check { "-c " } else { "" },
                self.where_(),
                clean_nft_error(&String::from_utf8_lossy(&out.stderr))
            ));
        }
        Ok(())
    }

    /// The live `table inet fwc` with every element, as nft lists it (JSON), or None when it
    /// does not exist. A table holding plain hash sets of addresses (a big set's hash sets and
    /// their shards: no flags, `ipv4_addr` / `ipv6_addr`) is listed tersely, their elements
    /// read from the kernel over netlink ([`super::setdump`]) and every other set and map
    /// listed by itself: nft's JSON of a million elements cost seconds more than the kernel's
    /// dump. Otherwise one `nft -j list table inet fwc`.
    pub fn list_table(&self) -> Result<Option<Value>> {
        let Some(mut terse) = self.list_terse()? else { return Ok(None) };
        let plain = |b: &Value| b.get("flags").is_none() && matches!(b["type"].as_str(), Some("ipv4_addr" | "ipv6_addr"));
        let items = terse["nftables"].as_array_mut().expect("a listing is an array");
        if !items.iter().any(|o| o.get("set").is_some_and(plain)) {
            return self.list_table_whole();
        }
        let hashed: Vec<(String, bool)> =
            items.iter().filter_map(|o| o.get("set").filter(|b| plain(b))).map(|b| (b["name"].as_str().unwrap_or_default().to_string(), b["type"] == "ipv6_addr")).collect();
        let dump = || -> Result<Vec<Vec<std::net::IpAddr>>> { hashed.iter().map(|(n, v6)| super::setdump::addresses(NFT_TABLE, n, *v6)).collect() };
        let mut dumped = match &self.netns {
            Some(ns) => crate::backend::netns::in_netns(ns, dump)?,
            None => dump()?,
        }
        .into_iter();
        for o in items.iter_mut() {
            let Some((kind, body)) = o.as_object_mut().and_then(|m| m.iter_mut().next()) else { continue };
            if kind != "set" && kind != "map" {
                continue;
            }
            let elems = if kind == "set" && plain(body) {
                let addrs = dumped.next().expect("one dump per plain set");
                // The compiler's text of an address (what nft prints, and what it is compared with).
                let text = |a: std::net::IpAddr| match a {
                    std::net::IpAddr::V4(a) => fwc_compiler::emit::addrtext::V4Text::new(a).as_str().to_string(),
                    a => a.to_string(),
                };
                // Sorted as text, the order the comparison sorts elements in: its sorts of
                // the listing (a hash set lists in hash order) then find them in order.
                let mut texts: Vec<String> = addrs.into_iter().map(text).collect();
                texts.sort_unstable();
                texts.into_iter().map(Value::String).collect::<Vec<_>>()
            } else {
                let name = body["name"].as_str().unwrap_or_default().to_string();
                let listed = self.list_object(kind, &name)?;
                let found = listed["nftables"].as_array().into_iter().flatten().find_map(|x| x.get(kind.as_str())?.get("elem").cloned());
                match found {
                    Some(Value::Array(e)) => e,
                    _ => Vec::new(),
                }
            };
            if !elems.is_empty() {
                body["elem"] = Value::Array(elems);
            }
        }
        Ok(Some(terse))
    }

    /// `nft -j list table inet fwc`, or None when the table does not exist.
    fn list_table_whole(&self) -> Result<Option<Value>> {
        let out = self
            .command()
            .args(["-j", "list", "table", "inet", NFT_TABLE])
            .output()
            .into_diagnostic()
            .wrap_err("cannot run nft (is nftables installed?)")?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains("No such file or directory") {
                return Ok(None);
            }
            return Err(miette!("nft list table inet {NFT_TABLE} failed{}: {}", self.where_(), clean_nft_error(&err)));
        }
        serde_json::from_slice(&out.stdout).map(Some).into_diagnostic().wrap_err("nft printed invalid JSON")
    }

    /// The live table without the elements of sets and maps, with handles, or None when it
    /// does not exist: `nft -t -j list ruleset` filtered to `table inet fwc`. (nft 1.0.6 reads
    /// every interval set's elements for `nft -t list table`, not for `list ruleset`: 10 ms
    /// instead of 0.6 s with a 100,000-element set.)
    pub fn list_terse(&self) -> Result<Option<Value>> {
        let all = self.list_ruleset_terse()?;
        let ours = |o: &Value| {
            let Some((kind, body)) = o.as_object().and_then(|m| m.iter().next()) else { return false };
            match kind.as_str() {
                "metainfo" => true,
                "table" => body["family"] == "inet" && body["name"] == NFT_TABLE,
                _ => body["family"] == "inet" && body["table"] == NFT_TABLE,
            }
        };
        let items: Vec<Value> = all["nftables"].as_array().into_iter().flatten().filter(|o| ours(o)).cloned().collect();
        if !items.iter().any(|o| o.get("table").is_some()) {
            return Ok(None);
        }
        Ok(Some(json!({"nftables": items})))
    }

    /// Every table of the namespace without set and map elements (`nft -t -j list ruleset`):
    /// fwc's and other programs' (read only, e.g. for the ports Docker publishes).
    pub fn list_ruleset_terse(&self) -> Result<Value> {
        let out = self
            .command()
            .args(["-t", "-j", "list", "ruleset"])
            .output()
            .into_diagnostic()
            .wrap_err("cannot run nft (is nftables installed?)")?;
        if !out.status.success() {
            return Err(miette!("nft list ruleset failed{}: {}", self.where_(), clean_nft_error(&String::from_utf8_lossy(&out.stderr))));
        }
        serde_json::from_slice(&out.stdout).into_diagnostic().wrap_err("nft printed invalid JSON")
    }

    /// One set or map of fwc's table with its elements (`nft -j list KIND inet fwc NAME`).
    pub fn list_object(&self, kind: &str, name: &str) -> Result<Value> {
        let out = self.command().args(["-j", "list", kind, "inet", NFT_TABLE, name]).output().into_diagnostic().wrap_err("cannot run nft")?;
        if !out.status.success() {
            return Err(miette!("nft list {kind} {name} failed{}: {}", self.where_(), clean_nft_error(&String::from_utf8_lossy(&out.stderr))));
        }
        serde_json::from_slice(&out.stdout).into_diagnostic().wrap_err("nft printed invalid JSON")
    }

    /// The live table in nft's text syntax with handles (`nft -a list table inet fwc`).
    pub fn list_table_text(&self) -> Option<String> {
        let out = self.command().args(["-a", "list", "table", "inet", NFT_TABLE]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

pub(super) fn clean_nft_error(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        "(no message)".into()
    } else {
        s.lines().filter(|l| !l.trim().is_empty()).take(12).collect::<Vec<_>>().join("\n  ")
    }
}
