//! Properties few rules have, kept out of line: [`More`] holds them boxed, and nothing at all
//! when none is given, so a big repository's rules are not the size of every property there is.

/// The rarely given properties of a rule: what [`More`] holds.
pub trait Rarely: Default + 'static {
    /// None of them (what [`More::get`] gives when nothing was boxed).
    const NONE: &'static Self;
    /// Is none of them given?
    fn is_none(&self) -> bool;
}

/// `T`'s properties, boxed when any is given; `None` when none is (one word in the rule).
#[derive(Debug, Clone, Default)]
pub struct More<T>(Option<Box<T>>);

impl<T: Rarely> More<T> {
    /// `v`, boxed only when it gives any property.
    pub fn new(v: T) -> Self {
        More((!v.is_none()).then(|| Box::new(v)))
    }

    /// The properties (all absent when none was given).
    pub fn get(&self) -> &T {
        self.0.as_deref().unwrap_or(T::NONE)
    }

    /// The properties to change (boxed now if none was given).
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_or_insert_with(Default::default)
    }

    /// The properties to change, when any was given (nothing is boxed for a rule without).
    pub fn given_mut(&mut self) -> Option<&mut T> {
        self.0.as_deref_mut()
    }
}

/// Serialise `v` as field `key` when it is given, else skip the field (serde's
/// `skip_serializing_if = "Option::is_none"`, for the hand-written `Serialize` of a rule whose
/// properties are partly in [`More`]).
pub fn field_if_some<S: serde::ser::SerializeStruct, T: serde::Serialize>(st: &mut S, key: &'static str, v: &Option<T>) -> Result<(), S::Error> {
    match v {
        Some(_) => st.serialize_field(key, v),
        None => st.skip_field(key),
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{FilterRule, ForwardRule};

    /// A big repository holds tens of thousands of rules: their rarely given properties stay
    /// boxed, so a rule without them stays small.
    #[test]
    fn rules_without_rare_properties_stay_small() {
        let (filter, forward) = (std::mem::size_of::<FilterRule>(), std::mem::size_of::<ForwardRule>());
        eprintln!("FilterRule {filter} bytes, ForwardRule {forward} bytes");
        assert!(filter <= 512 && forward <= 512, "FilterRule {filter} bytes, ForwardRule {forward} bytes");
    }
}
