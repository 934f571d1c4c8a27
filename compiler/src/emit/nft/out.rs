//! The output document: objects (table, sets, maps, chains) first, then rules, in emission
//! order, each written as text when it is added (`writer`); named sets' elements are
//! streamed, NAT maps built as JSON directly. The emitter declares every object before
//! [`Out::start_rules`]; the rules after it go straight into the document (and on to its
//! writer, when it streams), the few written before it are kept until then.

use super::writer::{Add, AddrSetBody, Document, HashSetBody, Members, Streamed};
use super::expr::*;
use super::fam::*;
use super::prelude::*;

#[derive(Default)]
pub(super) struct Out<'w> {
    doc: Document<'w>,
    /// Rules written before the last object, appended by [`Out::start_rules`].
    early: Members,
    rules_started: bool,
}

fn cmd(obj: NfListObject<'static>) -> NfObject<'static> {
    NfObject::CmdObject(NfCmd::Add(obj))
}

/// `{"add": {"rule": …}}` in fwc's table.
fn rule_cmd(chain: &str, expr: Vec<S>, comment: Option<String>) -> NfObject<'static> {
    let r = Rule {
        family: NfFamily::INet,
        table: NFT_TABLE.into(),
        chain: chain.to_string().into(),
        expr: expr.into(),
        handle: None,
        index: None,
        comment: comment.map(Cow::Owned),
    };
    cmd(NfListObject::Rule(r))
}

impl<'w> Out<'w> {
    /// A document passed on to `w` as it is written (see [`Document::streaming`]).
    pub(super) fn streaming(w: &'w mut dyn std::io::Write) -> Out<'w> {
        Out { doc: Document::streaming(w), ..Out::default() }
    }
}

impl Out<'_> {
    /// Every object has been declared: the rules kept so far follow them, and every later
    /// rule goes straight into the document.
    pub(super) fn start_rules(&mut self) {
        self.doc.append(std::mem::take(&mut self.early));
        self.rules_started = true;
    }

    /// Append an object (table, set, map, chain, quota): they all precede the first rule.
    fn object<T: serde::Serialize + ?Sized>(&mut self, v: &T) {
        assert!(!self.rules_started, "every nft object is declared before the rules (Out::start_rules)");
        self.doc.push(v);
    }

    /// Append a rule command.
    fn rule_text<T: serde::Serialize + ?Sized>(&mut self, v: &T) {
        if self.rules_started {
            self.doc.push(v);
        } else {
            self.early.push(v);
        }
    }

    pub(super) fn add(&mut self, obj: NfListObject<'static>) {
        self.object(&cmd(obj));
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
        let several_fib_flags = expr.iter().any(|st| matches!(st, Statement::Match(Match { left: Expression::Named(NamedExpression::Fib(f)), .. }) if f.flags.len() > 1));
        if several_fib_flags {
            // The crate keeps fib flags in a hash set: written in nft's order, the same every run.
            let mut v = serde_json::to_value(rule_cmd(chain, expr, comment)).expect("nftables JSON serializes");
            for e in v.pointer_mut("/add/rule/expr").and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(flags) = e.pointer_mut("/match/left/fib/flags").and_then(Value::as_array_mut) {
                    let order = ["saddr", "daddr", "mark", "iif", "oif"];
                    flags.sort_by_key(|f| order.iter().position(|o| f == o));
                }
            }
            return self.rule_text(&v);
        }
        self.rule_text(&rule_cmd(chain, expr, comment));
    }

    /// A rule whose `set` statement (`update @s { key limit … }`) carries per-element
    /// statements `elem_stmts` (per-source limits): the crate has no field for them.
    pub(super) fn rule_with_elem_stmts(&mut self, chain: &str, expr: Vec<S>, comment: Option<String>, elem_stmts: Option<Value>) {
        let Some(stmts) = elem_stmts else { return self.rule(chain, expr, comment) };
        let mut v = serde_json::to_value(rule_cmd(chain, expr, comment)).expect("rules serialize");
        for e in v["add"]["rule"]["expr"].as_array_mut().into_iter().flatten() {
            if let Some(set) = e.get_mut("set").and_then(Value::as_object_mut) {
                set.insert("stmt".into(), stmts.clone());
            }
        }
        self.rule_text(&v);
    }

    /// A set declared as raw JSON (`{"family": …, "name": …}`): flags in a fixed order.
    pub(super) fn raw_set(&mut self, set: Value) {
        self.object(&Add("set", set));
    }

    /// [`Out::rule`] with one raw JSON statement inserted at `pos` of `expr` (a statement the
    /// `nftables` crate has no type for: the schedule's `meta day . meta hour` match).
    pub(super) fn rule_with(&mut self, chain: &str, expr: Vec<S>, comment: Option<String>, pos: usize, extra: &Value) {
        let mut v = serde_json::to_value(rule_cmd(chain, expr, comment)).expect("nftables JSON serializes");
        if let Some(list) = v.pointer_mut("/add/rule/expr").and_then(Value::as_array_mut) {
            list.insert(pos.min(list.len()), extra.clone());
        }
        self.rule_text(&v);
    }

    /// A named address set (interval) with the merged intervals `elems`, written directly.
    pub(super) fn named_addr_set(&mut self, name: String, fam: Fam, elems: impl Iterator<Item = (u128, u128)> + Clone) {
        self.object(&Add("set", AddrSetBody { table: NFT_TABLE, name, fam, elems }));
    }

    /// The hash set of prefix length `len` of a big static set: network addresses, no flags.
    pub(super) fn hash_addr_set(&mut self, name: String, fam: Fam, layout: &crate::place::setlayout::FamLayout, len: u32, within: Option<(u128, u32)>) {
        assert!(!self.rules_started, "every nft object is declared before the rules (Out::start_rules)");
        self.doc.push_hash_set(&HashSetBody { table: NFT_TABLE, name, fam, layout, len, within });
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
        self.object(&Add("set", set));
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
    /// when keys may be port ranges. Its elements are written straight into the text (the
    /// map's own fields go through the crate; element comments need fields it would
    /// serialize as null).
    pub(super) fn fwd_map(&mut self, name: &str, data: SetType, elems: Vec<MapElem>, interval: bool, counters: bool) {
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
        let head = serde_json::to_value(&map).expect("maps serialize");
        self.object(&Add("map", MapBody { head: head.as_object().expect("a map is an object"), elems: &elems, counters }));
    }
}

/// A map's body: the fields the crate writes, then its elements, then (`counters`) the
/// map-level statement that gives every element its own counter.
struct MapBody<'a> {
    head: &'a serde_json::Map<String, Value>,
    elems: &'a [MapElem],
    counters: bool,
}

impl serde::Serialize for MapBody<'_> {
    fn serialize<Ser: serde::Serializer>(&self, ser: Ser) -> Result<Ser::Ok, Ser::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(None)?;
        for (k, v) in self.head {
            m.serialize_entry(k, v)?;
        }
        if !self.elems.is_empty() {
            m.serialize_entry("elem", self.elems)?;
        }
        if self.counters {
            m.serialize_entry("stmt", &[json!({"counter": null})])?;
        }
        m.end()
    }
}

impl Out<'_> {
    /// An object built as raw JSON (`{"add": {"quota": …}}`: the crate's quota object holds
    /// 32-bit byte counts).
    pub(super) fn raw_object(&mut self, v: &Value) {
        self.object(v);
    }
}

/// One element of a NAT map, kept as what it says rather than as a JSON value (a host with
/// tens of thousands of forwards held them all as trees): `[key, data]`, the key
/// `{"concat": [proto, port or range]}`, with the forward's comment where the element carries
/// one (`{"elem": {"val": key, "comment": c}}`).
pub(super) struct MapElem {
    pub proto: &'static str,
    pub key: PortRange,
    pub comment: Option<String>,
    pub data: MapData,
}

/// The data of a NAT map element: the target address, or the target port.
pub(super) enum MapData {
    Addr(IpAddr),
    Port(u16),
}

impl serde::Serialize for MapElem {
    fn serialize<Ser: serde::Serializer>(&self, ser: Ser) -> Result<Ser::Ok, Ser::Error> {
        use serde::ser::{SerializeMap, SerializeTuple};
        struct Commented<'a>(&'a E, &'a str);
        impl serde::Serialize for Commented<'_> {
            fn serialize<Ser: serde::Serializer>(&self, ser: Ser) -> Result<Ser::Ok, Ser::Error> {
                struct Elem<'a>(&'a E, &'a str);
                impl serde::Serialize for Elem<'_> {
                    fn serialize<Ser: serde::Serializer>(&self, ser: Ser) -> Result<Ser::Ok, Ser::Error> {
                        let mut m = ser.serialize_map(Some(2))?;
                        m.serialize_entry("val", self.0)?;
                        m.serialize_entry("comment", self.1)?;
                        m.end()
                    }
                }
                let mut m = ser.serialize_map(Some(1))?;
                m.serialize_entry("elem", &Elem(self.0, self.1))?;
                m.end()
            }
        }
        let key = concat(vec![s(self.proto), port_expr(self.key)]);
        let mut t = ser.serialize_tuple(2)?;
        match &self.comment {
            Some(c) => t.serialize_element(&Commented(&key, c))?,
            None => t.serialize_element(&key)?,
        }
        match self.data {
            MapData::Addr(ip) => t.serialize_element(&crate::emit::addrtext::AddrStr(ip))?,
            MapData::Port(p) => t.serialize_element(&p)?,
        }
        t.end()
    }
}

impl Out<'_> {
    /// The finished document, kept whole: objects, then rules.
    pub(super) fn finish(mut self) -> NftDoc {
        self.start_rules();
        NftDoc::from_pretty_text(self.doc.finish())
    }

    /// The finished document passed on to its writer: its sha256 and length.
    pub(super) fn finish_streamed(mut self) -> std::io::Result<Streamed> {
        self.start_rules();
        self.doc.finish_streamed()
    }
}
