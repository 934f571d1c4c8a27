//! Scalar values several node kinds read: names, interface names, host selectors, address matches,
//! DNS names.

use std::collections::BTreeMap;

use crate::model::*;
use crate::read::units::{self, UnitError};

pub(super) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 48
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

pub(super) fn valid_ifname(s: &str) -> bool {
    !s.is_empty() && s.len() <= 15 && !s.contains(['/', ' ', '\t', '"', '\\']) && s != "." && s != ".."
}

pub(super) fn parse_ifname(s: &str) -> Result<String, UnitError> {
    if valid_ifname(s) {
        Ok(s.to_string())
    } else {
        Err(UnitError {
            message: format!("\"{s}\" is not an interface name"),
            help: "interface names are 1-15 characters without spaces or `/`, e.g. in=\"eth0\"".into(),
        })
    }
}

/// `on=` text -> a selector: a host name, or `label=value` pairs that must all match.
pub fn parse_selector(s: &str) -> Result<Selector, UnitError> {
    let help = "write on=\"edge-1\" (a host name) or on=\"role=edge,region=eu\" (labels that must all match)";
    if !s.contains('=') {
        return if valid_name(s) { Ok(Selector::Name(s.to_string())) } else { Err(UnitError { message: format!("\"{s}\" is not a host name"), help: help.into() }) };
    }
    let mut labels = BTreeMap::new();
    for part in s.split(',') {
        match part.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
                labels.insert(k.trim().to_string(), v.trim().to_string());
            }
            _ => return Err(UnitError { message: format!("\"{part}\" in \"{s}\" is not label=value"), help: help.into() }),
        }
    }
    Ok(Selector::Labels(labels))
}

pub(super) fn parse_addr_match(s: &str) -> Result<AddrMatch, UnitError> {
    if let Some(name) = s.strip_prefix('@') {
        if !valid_name(name) {
            return Err(UnitError { message: format!("\"{s}\" is not a set reference"), help: "write from=\"@setname\"".into() });
        }
        return Ok(AddrMatch::Set(name.to_string()));
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        out.push(units::parse_addr(part)?);
    }
    Ok(AddrMatch::Literal(out))
}

pub(super) fn looks_like_ipv4(s: &str) -> bool {
    s.chars().all(|c| c.is_ascii_digit() || c == '.') && s.contains('.')
}

pub(super) fn valid_dns_name(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-') && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}
