//! Comparing the live table with the applied `nftables.json`: the drift fwc reports, and what
//! the next apply must repair (the elements changed outside fwc, or a whole-table replace).

use fwc_compiler::artifacts::{NftDoc, NFT_TABLE};
use miette::Result;
use serde_json::Value;

use super::doc::is_empty_doc;
use super::normalize::{accept_dns_installs, accept_health_rewrites, element_order, elements_drifted, normalize_with, split_hash_elements, structure};
use super::{counters, describe_drift, diff, lazy, NftBackend, Repair, ELEMENTS_CHANGED};
use crate::backend::Observation;

impl NftBackend {
    /// Compare the live table with the expected `nftables.json`.
    pub fn drift(&mut self, expected: &NftDoc) -> Result<Observation> {
        let live = self.cmd.list_table()?;
        self.drift_of(expected, live.as_ref())
    }

    /// [`Self::drift`] against a listing already taken (`list_table`), so a caller that also
    /// needs [`hash_of_listing`] lists a large table once.
    pub fn drift_of(&mut self, expected: &NftDoc, live: Option<&Value>) -> Result<Observation> {
        self.compare(expected, live, false)
    }

    /// Compare `live` with the kernel's rendering of `expected`; `terse`: `live` was listed
    /// without set elements, so they are left out of the comparison.
    pub(super) fn compare(&mut self, expected: &NftDoc, live: Option<&Value>, terse: bool) -> Result<Observation> {
        // A big set's hash sets are left out of the scratch-namespace rendering
        // (a million elements loaded and listed back on every plan after a change): the
        // kernel lists their elements as emitted, so they are compared as text. Terse: the
        // skeleton (no element is compared).
        let (want, hashed) = if terse {
            (self.canonical(&structure(&lazy::skeleton(expected)))?, Vec::new())
        } else {
            let (doc, hashed) = split_hash_elements(expected);
            (self.canonical(&doc)?, hashed)
        };
        let want_empty = is_empty_doc(&lazy::skeleton(expected))?;
        let mut obs = Observation::default();
        match live {
            None if want_empty => {}
            None => obs.drift.push(format!("table inet {NFT_TABLE} is missing (deleted outside fwc?)")),
            Some(live) => {
                if want_empty {
                    obs.drift.push(format!("table inet {NFT_TABLE} exists but fwc has nothing applied"));
                } else {
                    let (mut want, mut live) = (normalize_with(&want, !terse), normalize_with(&live, !terse));
                    for (name, mut elems) in hashed {
                        if let Some(Value::Object(b)) = want.objects.get_mut(&("set".to_string(), name)) {
                            if !elems.is_empty() {
                                elems.sort_unstable_by(element_order);
                                b.insert("elem".into(), Value::Array(elems));
                            }
                        }
                    }
                    accept_health_rewrites(&want, &mut live);
                    accept_dns_installs(&want, &mut live);
                    // The text listing (rules in nft syntax for the report) is a second full
                    // listing: taken only when there is drift to describe.
                    let plain = describe_drift(&want, &live, None);
                    if plain.is_empty() {
                        obs.drift = vec![];
                    } else {
                        // The text listing only renders changed rules: with the rules as
                        // applied (drift in set elements: a second listing of a big set costs
                        // as much as the first, 20 s at 1M), the plain description is complete.
                        obs.drift = if want.rules == live.rules {
                            plain
                        } else {
                            let text = self.cmd.list_table_text();
                            describe_drift(&want, &live, text.as_deref())
                        };
                        // The diff assumes the live elements are the applied ones: when they
                        // are not, the next apply of this backend replaces the table whole.
                        if let Some(set) = elements_drifted(&want, &live) {
                            // Naming the elements, from the drift description.
                            let what = obs.drift.iter().find_map(|d| d.strip_prefix(&format!("{set}: ")));
                            let reason = match what {
                                Some(w) => format!("{ELEMENTS_CHANGED}{set} were changed outside fwc ({w})"),
                                None => format!("{ELEMENTS_CHANGED}{set} were changed outside fwc"),
                            };
                            // Only those elements are put back when nothing else drifted.
                            self.repair = diff::repair(&want, &live).map(|(counts, batch)| Repair { reason: reason.clone(), counts, batch });
                            self.full_replace = Some(reason);
                        }
                    }
                }
                obs.counters = counters(&live);
                if !terse {
                    obs.per_source = crate::backend::persource::fill(&live);
                }
            }
        }
        Ok(obs)
    }
}
