//! An interpreter of `nftables.json` as fwc emits it: chains, jumps/gotos/returns, verdict
//! maps, named and anonymous sets (prefixes, ranges, concatenations), DNAT maps, SNAT and
//! masquerade, `ct` state, status and marks, ICMP types, `fib daddr type`, mark mangling,
//! log (matching goes on) and every kind of reject. It reads the JSON, not the emitter's
//! code: an expression it does not know is an [`EvalError::Unsupported`], never a guess.
//!
//! [`table`] reads the JSON; [`hooks`] runs a hook's chains, [`rule`] one rule's statements,
//! [`expr`] its expressions against the [`packet`]; [`describe`] puts matches in words.

mod describe;
mod expr;
mod hooks;
mod packet;
mod rule;
mod table;

pub use describe::describe_matches;
pub use hooks::{run_hook, HookResult};
pub use packet::{Packet, Val};
pub use rule::{Effect, Hit};
pub use table::{ChainDef, EvalError, Hook, RuleDef, Table, Verdict};
