//! The output document: objects (table, sets, maps, chains) first, then rules, in emission
//! order, each written as text when it is added (`writer`); named sets' elements are
//! streamed, NAT maps built as JSON directly.

use super::writer::{Add, AddrSetBody, Document, HashSetBody, Members};
use super::*;

#[derive(Default)]
pub(super) struct Out {
    objects: Document,
    rules: Members,
}

fn cmd(obj: NfListObject<'static>) -> NfObject<'static> {
    NfObject::CmdObject(NfCmd::Add(obj))
}

impl Out {
    pub(super) fn add(&mut self, obj: NfListObject<'static>) {
        self.objects.push(&cmd(obj));
    }

    pub(super) fn chain(&mut self, name: &str, base: Option<(NfChainType, NfHook, i32, NfChainPolicy)>) {
        let mut c = Chain { family: NfFamily::INet, table: NFT_TABLE.into(), name: name.to_string().into(), ..Chain::default() };
        if let Some((t, hook, prio, policy)) = base {
            c._type = Some(t);
            c.hook = Some(hook);
            c.prio = Some(prio);
            c.policy = Some(policy);
        }
        self.add(NfListObject::Chain(c));
    }

    pub(super) fn rule(&mut self, chain: &str, expr: Vec<S>, comment: Option<String>) {
        let r = Rule {
            family: NfFamily::INet,
            table: NFT_TABLE.into(),
            chain: chain.to_string().into(),
            expr: expr.into(),
            handle: None,
            index: None,
            comment: comment.map(Cow::Owned),
        };
        self.rules.push(&cmd(NfListObject::Rule(r)));
    }

    /// A named address set (interval) with the merged intervals `elems`, written directly.
    pub(super) fn named_addr_set(&mut self, name: String, fam: Fam, elems: impl Iterator<Item = (u128, u128)> + Clone) {
        self.objects.push(&Add("set", AddrSetBody { table: NFT_TABLE, name, fam, elems }));
    }

    /// The hash set of prefix length `len` of a big static set: network addresses, no flags.
    pub(super) fn hash_addr_set(&mut self, name: String, fam: Fam, layout: &crate::setlayout::FamLayout, len: u32) {
        self.objects.push_hash_set(&HashSetBody { table: NFT_TABLE, name, fam, layout, len });
    }

    /// A `dynamic=#true` set: `flags interval, timeout` (other programs add addresses, CIDRs
    /// or ranges, with or without their own timeout), the default `timeout` and `size`, no
    /// elements. Raw JSON: the crate keeps flags in a HashSet, whose order is not deterministic.
    pub(super) fn dynamic_set(&mut self, name: String, fam: Fam, d: DynamicSet) {
        let mut set = json!({
            "family": "inet", "table": NFT_TABLE, "name": name,
            "type": match fam { Fam::V4 => "ipv4_addr", Fam::V6 => "ipv6_addr" },
            "flags": ["interval", "timeout"],
        });
        if let Some(t) = d.timeout_s {
            set["timeout"] = json!(t);
        }
        if let Some(s) = d.size {
            set["size"] = json!(s);
        }
        self.objects.push(&Add("set", set));
    }

    pub(super) fn port_set(&mut self, name: &str, ports: &[PortRange]) {
        let elems: Vec<E> = merged_ports(ports).into_iter().map(port_expr).collect();
        self.interval_set(name.to_string(), SetType::InetService, elems);
    }

    /// A named interval set of `set_type` holding `elems`.
    pub(super) fn interval_set(&mut self, name: String, set_type: SetType, elems: Vec<E>) {
        let set = Set {
            family: NfFamily::INet,
            table: NFT_TABLE.into(),
            name: name.into(),
            handle: None,
            set_type: SetTypeValue::Single(set_type),
            policy: None,
            flags: Some(HashSet::from([SetFlag::Interval])),
            elem: (!elems.is_empty()).then(|| elems.into()),
            timeout: None,
            gc_interval: None,
            size: None,
            comment: None,
        };
        self.add(NfListObject::Set(Box::new(set)));
    }

    /// A `inet_proto . inet_service : <data>` map: a hash map for exact keys, an interval map
    /// when keys may be port ranges. Elements are `[key, value]` JSON pairs (built raw: element
    /// comments need fields the crate would serialize as null).
    pub(super) fn fwd_map(&mut self, name: &str, data: SetType, elems: Vec<Value>, interval: bool, counters: bool) {
        let map = Map {
            family: NfFamily::INet,
            table: NFT_TABLE.into(),
            name: name.to_string().into(),
            handle: None,
            set_type: SetTypeValue::Concatenated(Cow::Owned(vec![SetType::InetProto, SetType::InetService])),
            map: SetTypeValue::Single(data),
            policy: None,
            flags: interval.then(|| HashSet::from([SetFlag::Interval])),
            elem: None,
            timeout: None,
            gc_interval: None,
            size: None,
            comment: None,
        };
        let mut v = serde_json::to_value(cmd(NfListObject::Map(Box::new(map)))).expect("maps serialize");
        let obj = v["add"]["map"].as_object_mut().expect("map object");
        if !elems.is_empty() {
            obj.insert("elem".into(), Value::Array(elems));
        }
        if counters {
            // A map-level statement: every element gets its own counter.
            obj.insert("stmt".into(), json!([{"counter": null}]));
        }
        self.objects.push(&v);
    }
}

pub(super) fn ev<T: serde::Serialize>(x: &T) -> Value {
    serde_json::to_value(x).expect("expressions serialize")
}

/// `{"elem": {"val": key, "comment": c}}`: a map key with a comment.
pub(super) fn commented(key: E, comment: &str) -> Value {
    json!({"elem": {"val": ev(&key), "comment": comment}})
}

impl Out {
    /// The finished document: objects, then rules.
    pub(super) fn finish(self) -> NftDoc {
        NftDoc::from_pretty_text(self.objects.finish(self.rules))
    }
}
