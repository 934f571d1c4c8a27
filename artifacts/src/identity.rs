//! The rule identity: every nft rule and map element that stands for an fwc rule carries the
//! comment `fwc:<kind>:<name>`. Drift detection, counters and `fwc explain` read it back. This
//! module is the one place that writes ([`rule_comment`]) and reads ([`parse_rule_comment`]) it.

use crate::RuleKind;

/// Rule comments are `fwc:<kind>:<name>`.
pub const COMMENT_PREFIX: &str = "fwc:";
/// nft refuses comments longer than this (bytes); longer comments are cut at a char boundary.
pub const MAX_COMMENT: usize = 127;

/// An fwc rule as named in an nft comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId<'a> {
    pub kind: RuleKind,
    pub name: &'a str,
}

impl<'a> RuleId<'a> {
    /// The comment for this rule (see [`rule_comment`]).
    pub fn comment(&self) -> String {
        rule_comment(self.kind, self.name)
    }

    /// Read a comment written by [`rule_comment`] (see [`parse_rule_comment`]).
    pub fn parse(comment: &'a str) -> Option<RuleId<'a>> {
        parse_rule_comment(comment).map(|(kind, name)| RuleId { kind, name })
    }
}

impl std::fmt::Display for RuleId<'_> {
    /// `<kind>:<name>`, the form plans and drift reports use.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.name)
    }
}

/// The comment fwc puts on every nft rule (and map element) that stands for an fwc rule.
/// At most [`MAX_COMMENT`] bytes: a longer name is cut (rule names are limited well below that).
pub fn rule_comment(kind: RuleKind, name: &str) -> String {
    let mut s = format!("{COMMENT_PREFIX}{}:{name}", kind.as_str());
    if s.len() > MAX_COMMENT {
        let mut cut = MAX_COMMENT;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Inverse of [`rule_comment`]: `fwc:forward:web` -> (Forward, "web"). `None` for a comment fwc
/// did not write (another prefix, an unknown kind, no name).
pub fn parse_rule_comment(comment: &str) -> Option<(RuleKind, &str)> {
    let rest = comment.strip_prefix(COMMENT_PREFIX)?;
    let (kind, name) = rest.split_once(':')?;
    if name.is_empty() {
        return None;
    }
    Some((RuleKind::parse(kind)?, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_round_trip_for_every_kind() {
        for kind in RuleKind::ALL {
            for name in ["web", "a:b", "ünïcode-name"] {
                let c = rule_comment(kind, name);
                assert_eq!(parse_rule_comment(&c), Some((kind, name)), "{c}");
                assert_eq!(RuleId::parse(&c).map(|id| id.comment()), Some(c.clone()));
            }
        }
        assert_eq!(rule_comment(RuleKind::Forward, "web"), "fwc:forward:web");
        assert_eq!(RuleId { kind: RuleKind::Filter, name: "ssh" }.to_string(), "filter:ssh");
    }

    #[test]
    fn foreign_comments_are_not_fwc_rules() {
        for c in ["", "fwc:", "fwc:forward", "fwc:forward:", "fwc:bogus:x", "docker:forward:x", "FWC:forward:x"] {
            assert_eq!(parse_rule_comment(c), None, "{c:?}");
        }
    }

    #[test]
    fn long_names_are_cut_at_a_char_boundary() {
        let name = "é".repeat(100);
        let c = rule_comment(RuleKind::Shape, &name);
        assert!(c.len() <= MAX_COMMENT);
        let (kind, cut) = parse_rule_comment(&c).unwrap();
        assert_eq!(kind, RuleKind::Shape);
        assert!(name.starts_with(cut));
    }
}
