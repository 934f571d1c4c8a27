//! The nftables artifact ([`NftDoc`]): kept as the exact text of `nftables.json` when the
//! compiler wrote it (no JSON tree is built to compile), parsed into a `serde_json::Value` only
//! when a consumer reads it as a tree (the runtime's diff, drift and evaluation).

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;


/// `{"nftables": [...]}`: its file text, its tree, or both. At least one is always present;
/// the other is derived on first use. Dereferences to the tree. The text is shared between
/// clones (a generation, the plan and the diff's base hold the same tens of MB of a big set's
/// document once).
#[derive(Clone, Default)]
pub struct NftDoc {
    text: OnceLock<Arc<String>>,
    value: OnceLock<Value>,
    /// sha256 of the text, once computed (or known from a check of the file).
    digest: OnceLock<String>,
}

impl NftDoc {
    /// A document from the exact bytes of `nftables.json` as the compiler writes them
    /// ([`crate::nfttext`]). The caller guarantees the text is that: it is not parsed here.
    pub fn from_pretty_text(text: String) -> NftDoc {
        NftDoc { text: OnceLock::from(Arc::new(text)), value: OnceLock::new(), digest: OnceLock::new() }
    }

    /// [`NftDoc::from_pretty_text`] of a file whose sha256 the caller has just computed.
    pub fn from_pretty_text_with_digest(text: String, sha256: String) -> NftDoc {
        NftDoc { text: OnceLock::from(Arc::new(text)), value: OnceLock::new(), digest: OnceLock::from(sha256) }
    }

    /// sha256 of [`NftDoc::text`] (hex), computed once per document.
    pub fn sha256(&self) -> &str {
        self.digest.get_or_init(|| crate::sha256_hex(self.text().as_bytes()))
    }

    /// The file's bytes ([`crate::nfttext`]: a command per line, an element per line).
    pub fn text(&self) -> &str {
        self.text.get_or_init(|| Arc::new(crate::nfttext::render(self.value.get().expect("an NftDoc holds text or value"))))
    }

    /// The file's text if the document holds it (not serialised from the tree): readers that
    /// can work on the text (element diffs of big sets, digests) need not parse it.
    pub fn raw_text(&self) -> Option<&str> {
        self.text.get().map(|t| t.as_str())
    }

    /// The document as a JSON tree (parsed on first use).
    pub fn value(&self) -> &Value {
        self.value.get_or_init(|| {
            serde_json::from_str(self.text.get().expect("an NftDoc holds text or value").as_str()).expect("the compiler writes valid JSON")
        })
    }

    /// The tree, owned.
    pub fn into_value(self) -> Value {
        let NftDoc { text, value, .. } = self;
        match value.into_inner() {
            Some(v) => v,
            None => serde_json::from_str(text.into_inner().expect("an NftDoc holds text or value").as_str()).expect("valid JSON"),
        }
    }
}

impl From<Value> for NftDoc {
    fn from(v: Value) -> NftDoc {
        NftDoc { text: OnceLock::new(), value: OnceLock::from(v), digest: OnceLock::new() }
    }
}

impl std::ops::Deref for NftDoc {
    type Target = Value;
    fn deref(&self) -> &Value {
        self.value()
    }
}

/// Editing the tree (tests that corrupt an artifact on purpose) drops the text, which is
/// written again from the edited tree.
impl std::ops::DerefMut for NftDoc {
    fn deref_mut(&mut self) -> &mut Value {
        self.value();
        self.text = OnceLock::new();
        self.digest = OnceLock::new();
        self.value.get_mut().expect("parsed above")
    }
}

impl PartialEq for NftDoc {
    fn eq(&self, other: &NftDoc) -> bool {
        match (self.text.get(), other.text.get()) {
            (Some(a), Some(b)) if a == b => true,
            _ => self.value() == other.value(),
        }
    }
}

impl std::fmt::Debug for NftDoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.value(), f)
    }
}

impl Serialize for NftDoc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for NftDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NftDoc, D::Error> {
        Value::deserialize(d).map(NftDoc::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_tree_agree_both_ways() {
        let v = serde_json::json!({"nftables": [{"add": {"table": {"family": "inet", "name": "fwc"}}}]});
        let from_tree = NftDoc::from(v.clone());
        let from_text = NftDoc::from_pretty_text(crate::nfttext::render(&v));
        assert_eq!(from_tree.text(), from_text.text());
        assert_eq!(*from_text, v);
        assert_eq!(from_tree, from_text);
        let mut edited = from_text.clone();
        edited["nftables"].as_array_mut().unwrap().clear();
        assert_eq!(edited.text(), "{\"nftables\":[]}\n");
    }

    #[test]
    fn clones_share_the_text_and_an_edit_does_not_reach_them() {
        let doc = NftDoc::from_pretty_text(crate::nfttext::render(&serde_json::json!({"nftables": [{"add": {"table": {"family": "inet", "name": "fwc"}}}]})));
        let copy = doc.clone();
        // One text for both: a big set's document is not copied per holder.
        assert!(std::ptr::eq(doc.raw_text().unwrap(), copy.raw_text().unwrap()));
        assert_eq!(copy.sha256(), doc.sha256());
        let mut edited = copy.clone();
        edited["nftables"].as_array_mut().unwrap().clear();
        assert_eq!(edited.text(), "{\"nftables\":[]}\n");
        assert_ne!(doc.text(), edited.text());
        assert_eq!(copy, doc);
    }
}
