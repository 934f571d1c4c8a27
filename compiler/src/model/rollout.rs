//! `rollout { wave … probe … }` as written: the fleet rollout policy's declarations with the
//! spans `check` needs.

use serde::Serialize;

use super::span::{Span, Spanned};
use super::values::Selector;

/// `rollout { wave … probe … }` as written: the fleet rollout policy with the spans `check`
/// needs. [`crate::features::rollout`] checks it and compiles it to [`fwc_artifacts::rollout::RolloutPolicy`].
#[derive(Debug, Clone, Serialize)]
pub struct RolloutDecl {
    pub waves: Vec<WaveDecl>,
    pub probes: Vec<ProbeDecl>,
    /// `window allow=… / deny=…` nodes that parsed (span: the node).
    pub windows: Vec<Spanned<fwc_artifacts::rollout::Window>>,
    /// `on-failure="halt"|"rollback"`.
    pub on_failure: Option<Spanned<fwc_artifacts::rollout::OnFailure>>,
    /// `missing-timeout="10m"`, in seconds.
    pub missing_timeout_secs: Option<Spanned<u64>>,
    /// `self-check-attempts=3`.
    pub self_check_attempts: Option<Spanned<u64>>,
    /// `self-check-spacing="1s"`, in milliseconds.
    pub self_check_spacing_ms: Option<Spanned<u64>>,
    /// The `rollout` node's name.
    #[serde(skip)]
    pub span: Span,
}

/// `wave "canary" on="role=canary" soak="10m" max-unavailable=1 max-parallel="25%" { gate … }`
#[derive(Debug, Clone, Serialize)]
pub struct WaveDecl {
    pub name: Spanned<String>,
    /// `on=`: the selector and its text as written (the policy carries the text).
    pub on: Option<Spanned<(Selector, String)>>,
    pub percent: Option<Spanned<u8>>,
    pub soak_secs: Option<Spanned<u64>>,
    pub max_unavailable: Option<Spanned<fwc_artifacts::rollout::MaxUnavailable>>,
    pub max_parallel: Option<Spanned<fwc_artifacts::rollout::MaxParallel>>,
    pub gates: Vec<GateDecl>,
    #[serde(skip)]
    pub span: Span,
}

/// `gate "errors" query="…" max=0.01 allow-empty=#true`
#[derive(Debug, Clone, Serialize)]
pub struct GateDecl {
    pub name: Spanned<String>,
    pub query: Option<Spanned<String>>,
    pub max: Option<Spanned<f64>>,
    pub min: Option<Spanned<f64>>,
    pub allow_empty: bool,
    /// `grace="2m"`: seconds a gate without an answer is waited for before it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_secs: Option<Spanned<u64>>,
    #[serde(skip)]
    pub span: Span,
}

/// `probe "api" tcp="198.18.0.1:443"` / `probe "health" http="http://…/healthz"`
#[derive(Debug, Clone, Serialize)]
pub struct ProbeDecl {
    pub name: Spanned<String>,
    pub probe: Option<Spanned<fwc_artifacts::rollout::Probe>>,
    #[serde(skip)]
    pub span: Span,
}
