//! The fleet-rollout contract: the rollout policy as the compiler hands it out (compiled from
//! `rollout { wave … }`), and the rollout state file the controller commits to the rollout ref
//! and every agent reads. Plain data plus the stable host hash; no decisions live here.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The branch (in the rule repository) whose tip holds the rollout state: `refs/heads/fwc-rollout`.
pub const DEFAULT_ROLLOUT_BRANCH: &str = "fwc-rollout";

/// The one file at the root of the rollout branch's tree.
pub const ROLLOUT_STATE_FILE: &str = "rollout.json";

/// Version of [`RolloutState`]'s format.
pub const ROLLOUT_STATE_VERSION: u32 = 1;

/// Percent buckets are computed on this many slots (so `percent=0.5` would be expressible).
pub const HOST_BUCKETS: u32 = 10_000;

/// The stable bucket of a host in `0..HOST_BUCKETS`: the first 8 bytes of SHA-256 of
/// `"fwc-rollout:" + host` as a big-endian integer, modulo [`HOST_BUCKETS`]. It depends on the
/// host name only, so a host's wave never changes between commits or when other hosts come
/// and go.
pub fn host_bucket(host: &str) -> u32 {
    let digest = Sha256::new().chain_update(b"fwc-rollout:").chain_update(host.as_bytes()).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(HOST_BUCKETS)) as u32
}

/// `rollout { … }` as compiled: the waves in order. A repository without `rollout` has no policy
/// (and the agent behaves as without a fleet rollout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutPolicy {
    /// In promotion order; the last wave takes every host not in an earlier one.
    pub waves: Vec<Wave>,
    /// Checks every agent runs after each apply, besides fetching the git remote (the
    /// self-check); a failure reverts the apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<Probe>,
    /// `window allow=… / deny=…`: when the controller may promote a wave (starting a rollout
    /// included). Empty = any time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<Window>,
    /// `on-failure=`: whether a halt for a host's failure sends the promoted hosts back to
    /// `stable` (`rollback`) or lets them keep the commit (`halt`, the default; a host that
    /// failed has already reverted itself).
    #[serde(default, skip_serializing_if = "OnFailure::is_default")]
    pub on_failure: OnFailure,
    /// `missing-timeout=`: how long the controller waits for the missing hosts of the wave
    /// being promoted (beyond `max-unavailable`) before it pauses the rollout, naming them
    /// (seconds). A missing host never halts a rollout.
    #[serde(default = "default_missing_timeout", skip_serializing_if = "is_default_missing_timeout")]
    pub missing_timeout_secs: u64,
    /// `self-check-attempts=`: how often an agent tries its self-check after an apply before it
    /// reverts the apply (at least 1).
    #[serde(default = "default_self_check_attempts", skip_serializing_if = "is_default_self_check_attempts")]
    pub self_check_attempts: u32,
    /// `self-check-spacing=`: the pause before the self-check's second attempt, doubling after
    /// each failure (milliseconds).
    #[serde(default = "default_self_check_spacing", skip_serializing_if = "is_default_self_check_spacing")]
    pub self_check_spacing_ms: u64,
}

/// Default of `self-check-attempts=`: 3.
pub const DEFAULT_SELF_CHECK_ATTEMPTS: u32 = 3;
/// Default of `self-check-spacing=`: 1 s (then 2 s).
pub const DEFAULT_SELF_CHECK_SPACING_MS: u64 = 1000;

fn default_self_check_attempts() -> u32 {
    DEFAULT_SELF_CHECK_ATTEMPTS
}

fn is_default_self_check_attempts(n: &u32) -> bool {
    *n == DEFAULT_SELF_CHECK_ATTEMPTS
}

fn default_self_check_spacing() -> u64 {
    DEFAULT_SELF_CHECK_SPACING_MS
}

fn is_default_self_check_spacing(ms: &u64) -> bool {
    *ms == DEFAULT_SELF_CHECK_SPACING_MS
}

/// Default of `missing-timeout=`: 10 minutes.
pub const DEFAULT_MISSING_TIMEOUT_SECS: u64 = 600;

fn default_missing_timeout() -> u64 {
    DEFAULT_MISSING_TIMEOUT_SECS
}

fn is_default_missing_timeout(s: &u64) -> bool {
    *s == DEFAULT_MISSING_TIMEOUT_SECS
}

/// `rollout on-failure=…`: what an automatic halt does to the promoted hosts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// Stop promoting; every host keeps what it has (a host that failed reverted itself).
    #[default]
    Halt,
    /// Stop promoting and send every promoted host back to `stable`.
    Rollback,
}

impl OnFailure {
    pub fn is_default(&self) -> bool {
        *self == OnFailure::Halt
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Halt => "halt",
            OnFailure::Rollback => "rollback",
        }
    }
}

/// A promotion window: allowed or denied, the weekly window (days and minutes, `end_min` up
/// to 1440 = 24:00, exclusive) and its zone: local time is UTC + `offset_min`, or follows the
/// named `tz`. Serialized flat, as [`WindowFields`] (the artifact's form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WindowFields", into = "WindowFields")]
pub struct Window {
    /// `allow=` (true) or `deny=` (false).
    pub allow: bool,
    /// The window, the one shape of weekly windows (the compiler's schedules hold it too).
    pub window: crate::window::DayWindow,
    /// `tz=`: minutes east of UTC (0 = UTC).
    pub offset_min: i16,
    /// `tz=` a named zone of the tz database (`Europe/Berlin`): local time follows its
    /// daylight saving; `offset_min` is then 0 and unused.
    pub tz: Option<String>,
}

/// A promotion window: on `days`, from `start_min` to `end_min` (minutes after local midnight,
/// `end_min` up to 1440 = 24:00, exclusive), local time being UTC + `offset_min`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Window")]
#[serde(deny_unknown_fields)]
pub struct WindowFields {
    /// `allow=` (true) or `deny=` (false).
    pub allow: bool,
    /// Days of the week, 0 = Monday … 6 = Sunday, ascending.
    pub days: Vec<u8>,
    pub start_min: u16,
    pub end_min: u16,
    /// `tz=`: minutes east of UTC (0 = UTC).
    #[serde(default)]
    pub offset_min: i16,
    /// `tz=` a named zone of the tz database (`Europe/Berlin`): local time follows its
    /// daylight saving; `offset_min` is then 0 and unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
}

impl From<WindowFields> for Window {
    fn from(f: WindowFields) -> Window {
        Window { allow: f.allow, window: crate::window::DayWindow { days: f.days, start_min: f.start_min, end_min: f.end_min }, offset_min: f.offset_min, tz: f.tz }
    }
}

impl From<Window> for WindowFields {
    fn from(w: Window) -> WindowFields {
        WindowFields { allow: w.allow, days: w.window.days, start_min: w.window.start_min, end_min: w.window.end_min, offset_min: w.offset_min, tz: w.tz }
    }
}

impl JsonSchema for Window {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        WindowFields::schema_name()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        WindowFields::json_schema(generator)
    }
}

/// One wave of a rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Wave {
    pub name: String,
    pub select: WaveSelect,
    /// How long this wave must have been fully applied and healthy before the next one is
    /// promoted (seconds; 0 = none).
    #[serde(default)]
    pub soak_secs: u64,
    /// How many hosts of this wave may be missing (not reporting) without halting the rollout.
    #[serde(default)]
    pub max_unavailable: MaxUnavailable,
    /// PromQL gates that must hold before the *next* wave is promoted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<Gate>,
    /// `max-parallel=`: at most this many of the wave's hosts apply at once, in stable-hash
    /// order; the next batch when the previous one reports applied and healthy. None: the
    /// whole wave at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<MaxParallel>,
}

/// `max-parallel=`: a count of hosts or a percentage of the wave (at least one host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MaxParallel {
    Hosts(u32),
    Percent(u8),
}

impl MaxParallel {
    /// The batch size for a wave of `hosts` hosts (at least 1).
    pub fn batch(self, hosts: usize) -> usize {
        match self {
            MaxParallel::Hosts(n) => n as usize,
            MaxParallel::Percent(p) => hosts * p as usize / 100,
        }
        .max(1)
    }
}

/// How a wave picks its hosts (among the hosts no earlier wave took).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WaveSelect {
    /// `on="role=canary"` / `on="host-1"`: the selector text, matched exactly as a rule's `on=`.
    On(String),
    /// `percent=50`: hosts whose [`host_bucket`] is below `percent * 100` (of the hosts left).
    Percent(u8),
    /// Neither: every host left (only meaningful, and required, for the last wave).
    Rest,
}

/// `max-unavailable=`: a count of hosts or a percentage of the wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MaxUnavailable {
    Hosts(u32),
    Percent(u8),
}

impl Default for MaxUnavailable {
    fn default() -> Self {
        MaxUnavailable::Hosts(0)
    }
}

/// A health gate: a PromQL expression whose value is compared with a threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub name: String,
    /// PromQL; an instant query. Every sample of the result must satisfy the comparison (an
    /// empty result fails the gate unless `allow_empty`).
    pub query: String,
    pub op: GateOp,
    pub threshold: f64,
    #[serde(default)]
    pub allow_empty: bool,
    /// `grace=`: how long a gate that gives no answer (its query fails, or returns nothing
    /// without `allow_empty`) is waited for (nothing is promoted, nothing halts) before it
    /// counts as failing; counted from the rollout state's last transition. 0: at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub grace_secs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GateOp {
    /// `max=`: value <= threshold.
    AtMost,
    /// `min=`: value >= threshold.
    AtLeast,
}

/// A check the agent runs after an apply (inside confirm-or-revert).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Probe {
    /// TCP connect to `host:port`.
    Tcp { name: String, address: String },
    /// HTTP GET; success is a 2xx status.
    Http { name: String, url: String },
}

/// Where a rollout stands. `rollout.json` at the root of the rollout branch's tip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutState {
    /// [`ROLLOUT_STATE_VERSION`].
    pub version: u32,
    /// The branch of rules being rolled out (e.g. `main`).
    pub branch: String,
    /// The commit being rolled out (40 hex).
    pub commit: String,
    /// The last fully rolled-out commit; `None` before the first rollout completes.
    pub stable: Option<String>,
    /// The wave names of the policy in `commit`, in order (so agents and people can read the
    /// state without compiling).
    pub waves: Vec<String>,
    /// Index into `waves` of the highest promoted wave; `None` = none promoted yet.
    pub promoted: Option<usize>,
    pub phase: RolloutPhase,
    /// With `phase = halted`: promoted hosts go back to `stable`.
    #[serde(default)]
    pub rollback: bool,
    /// Why the last transition happened, for people.
    pub reason: String,
    /// RFC 3339 UTC time of the last transition.
    pub since: String,
    /// RFC 3339 UTC time the `promoted` wave was promoted (the soak clock).
    pub promoted_at: Option<String>,
    /// Counts the transitions: every state has a higher generation than the one it was built
    /// on. Agents accept a new state only when its commit descends from the last state they
    /// accepted and its generation is higher (a replayed older state is refused).
    #[serde(default)]
    pub generation: u64,
    /// The state commit this state was decided from (None: the first state).
    #[serde(default)]
    pub predecessor: Option<String>,
    /// The commit whose `rollout` policy governs this rollout (its waves, batches and
    /// timeouts): the stable commit's when it has one, so a commit that drops or weakens the
    /// policy is itself rolled out wave by wave. None: `commit`'s own (states written before
    /// this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_commit: Option<String>,
    /// `max-parallel` of the promoted wave: hosts of that wave whose [`host_bucket`] is below
    /// this may apply; None: every host of the wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_below: Option<u32>,
    /// The last operator `resume` of this rollout: a host whose self-check reverted `commit`
    /// before it tries the commit again, and the controller waits for it (until
    /// `missing-timeout` after the resume) instead of halting on its old failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<Resumed>,
}

/// When a rollout was resumed by an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resumed {
    /// The generation of the state the resume wrote.
    pub generation: u64,
    /// RFC 3339 UTC time of the resume.
    pub at: String,
}

impl RolloutState {
    /// The commit whose policy places hosts in waves.
    pub fn policy_commit(&self) -> &str {
        self.policy_commit.as_deref().unwrap_or(&self.commit)
    }
}

/// The state of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RolloutPhase {
    /// Waves are being promoted.
    Progressing,
    /// An operator paused it: no further promotion; hosts keep what they have.
    Paused,
    /// A failure or an operator halted it: no further promotion; with `rollback`, promoted
    /// hosts return to `stable`.
    Halted,
    /// Every wave applied: `commit` is now also `stable`.
    Complete,
    /// An operator ended it: no further promotion; hosts keep what they have until the next
    /// rollout starts.
    Stopped,
}

impl RolloutPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutPhase::Progressing => "progressing",
            RolloutPhase::Paused => "paused",
            RolloutPhase::Halted => "halted",
            RolloutPhase::Complete => "complete",
            RolloutPhase::Stopped => "stopped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window holds the one `DayWindow` in memory and keeps the artifact's flat form on the
    /// wire: the same fields in the same order, unknown fields refused, the zone optional.
    #[test]
    fn window_keeps_its_flat_artifact_form() {
        let w = Window { allow: false, window: crate::window::DayWindow { days: vec![4], start_min: 900, end_min: 1440 }, offset_min: 60, tz: None };
        let text = serde_json::to_string(&w).unwrap();
        assert_eq!(text, r#"{"allow":false,"days":[4],"start_min":900,"end_min":1440,"offset_min":60}"#);
        assert_eq!(serde_json::from_str::<Window>(&text).unwrap(), w);
        let named = r#"{"allow":true,"days":[0],"start_min":540,"end_min":1020,"tz":"Europe/Berlin"}"#;
        let w: Window = serde_json::from_str(named).unwrap();
        assert_eq!((w.offset_min, w.tz.as_deref(), w.window.end_min), (0, Some("Europe/Berlin"), 1020));
        assert!(serde_json::from_str::<Window>(r#"{"allow":true,"days":[0],"start_min":1,"end_min":2,"x":1}"#).is_err());
        let schema = serde_json::to_value(schemars::schema_for!(Window)).unwrap();
        assert_eq!(schema["additionalProperties"], false);
        assert!(schema["properties"]["days"].is_object() && schema["properties"].get("window").is_none(), "{schema}");
    }

    #[test]
    fn host_bucket_is_stable_and_spread() {
        // Pinned: changing the hash would move hosts between waves of running rollouts.
        assert_eq!(host_bucket("edge-1"), host_bucket("edge-1"));
        let below_half = (0..2000).filter(|i| host_bucket(&format!("host-{i}")) < HOST_BUCKETS / 2).count();
        assert!((900..1100).contains(&below_half), "{below_half} of 2000 in the lower half");
    }

    #[test]
    fn state_round_trips() {
        let s = RolloutState {
            version: ROLLOUT_STATE_VERSION,
            branch: "main".into(),
            commit: "a".repeat(40),
            stable: None,
            waves: vec!["canary".into(), "all".into()],
            promoted: Some(0),
            phase: RolloutPhase::Progressing,
            rollback: false,
            reason: "new tip".into(),
            since: "2026-11-26T12:00:00Z".into(),
            promoted_at: Some("2026-11-26T12:00:00Z".into()),
            generation: 3,
            predecessor: Some("b".repeat(40)),
            policy_commit: None,
            batch_below: None,
            resumed: None,
        };
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<RolloutState>(&text).unwrap(), s);
    }
}
