//! The outside names every file of the nft emitter uses: the `nftables` crate's typed objects,
//! the rule model and the host's plan. Only names from outside `emit::nft`: each file imports
//! its siblings by name, so that the files' imports run one way (`mod.rs` drives, the concern
//! files use the helpers below them, the helpers use nothing above).

pub(super) use std::borrow::Cow;
pub(super) use std::collections::HashSet;
pub(super) use std::net::IpAddr;

pub(super) use nftables::expr::{
    BinaryOperation, Expression, Fib, FibFlag, FibResult, Map as MapExpr, Meta, MetaKey, NamedExpression, NgMode, Numgen, Payload,
    PayloadField, Prefix, Range, SetItem, Verdict, CT, CTDir,
};
pub(super) use nftables::schema::{Chain, Map, NfCmd, NfListObject, NfObject, Rule, Set, SetFlag, SetType, SetTypeValue, Table};
pub(super) use nftables::stmt::{
    self, CTCount, Counter, JumpTarget, Limit, Log, Mangle, Match, Operator, Reject, RejectType, Statement, NAT,
};
pub(super) use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook, RejectCode};
pub(super) use serde_json::{json, Value};

pub(super) use crate::artifacts::{NftDoc, QosDirection, NFT_TABLE, QOS_MARK_MASK, QOS_MARK_SHIFT};
pub(super) use crate::model::*;
pub(super) use crate::place::select::{ChainPlan, HostPlan};
pub(super) use crate::place::setlayout::LayoutKind;
