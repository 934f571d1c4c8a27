//! The controller's check that the rollout state it builds on is one the agents trust.
//!
//! Agents that require signed commits (`--allowed-signers`, `--gpg-home`) verify the state
//! commit at the rollout ref like a rule commit and hold (`unverified_state`) on one that does
//! not verify. The controller is stateless: it copies what it reads (the stable commit, the
//! promoted wave, the generation) into the next state and signs that. Built on a forged or
//! unsigned state, it would launder it: the next state verifies, and every agent follows what
//! the forger wrote. So the controller verifies the state it read with the same trust policy
//! the agents use (the same options) and refuses to build on one that does not verify, naming
//! why (unsigned, or the key that signed it), the newest earlier state that does verify, and
//! how to go on from it.
//!
//! Pure: the verification results come in, a verdict goes out.

/// What verifying the rollout state found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateTrust<'a> {
    /// The state commit at the rollout ref (None: no rollout yet, nothing to verify).
    pub state_commit: Option<&'a str>,
    /// The trust policy is in force (`--allowed-signers` or `--gpg-home` given).
    pub required: bool,
    /// The verification of the state commit: Ok(signer) or why it failed.
    pub verified: Result<Option<String>, String>,
    /// The newest earlier state commit (an ancestor on the rollout ref) that verifies, if any.
    pub last_trusted: Option<&'a str>,
    pub rollout_branch: &'a str,
}

/// None: the controller may build on the state (it verifies, there is none, or no trust
/// policy is in force). Some(why): refused, with what to do.
pub fn untrusted(t: &StateTrust) -> Option<String> {
    if !t.required {
        return None;
    }
    let commit = t.state_commit?;
    let why = t.verified.as_ref().err()?;
    let short = |c: &str| c[..c.len().min(12)].to_string();
    let branch = t.rollout_branch;
    let next = match t.last_trusted {
        Some(good) => format!(
            "The newest earlier state that verifies is {}: if the states after it are not yours, go on from it: `git push --force origin {good}:refs/heads/{branch}`, then run the controller again.",
            short(good)
        ),
        None => format!(
            "No earlier state on {branch} verifies either: if the states are yours, the controller signs with a key the trust policy does not list (give it one that is listed: --sign-key, --gpg-sign-key), or the trust options differ from the agents' (give the same --allowed-signers / --gpg-home)."
        ),
    };
    Some(format!(
        "the rollout state {} at {branch} is not trusted: {why}. Agents that require signatures refuse it too (held `unverified_state`); a state built on it would carry what it says to every host, so nothing was decided or pushed. Inspect it: `git log --show-signature -p {branch}`. {next}",
        short(commit)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "5555555555555555555555555555555555555555";
    const G: &str = "4444444444444444444444444444444444444444";

    fn t(required: bool, state: Option<&'static str>, verified: Result<Option<String>, String>, last: Option<&'static str>) -> Option<String> {
        untrusted(&StateTrust { state_commit: state, required, verified, last_trusted: last, rollout_branch: "fwc-rollout" })
    }

    #[test]
    fn only_a_state_that_fails_verification_under_a_policy_is_refused() {
        let bad = || Err::<Option<String>, String>("the commit is not signed, and signatures are required".to_string());
        let restore = format!("git push --force origin {G}:refs/heads/fwc-rollout");
        let unsigned_says = ["555555555555", "not signed", "unverified_state", restore.as_str()];
        // (name, verdict, refused?, must contain)
        let rows: Vec<(&str, Option<String>, bool, &[&str])> = vec![
            ("no trust policy: nothing to check", t(false, Some(S), bad(), None), false, &[]),
            ("no state yet: nothing to build on", t(true, None, bad(), None), false, &[]),
            ("verified", t(true, Some(S), Ok(Some("ops@example.com".into())), None), false, &[]),
            ("unsigned, an earlier state verifies", t(true, Some(S), bad(), Some(G)), true, &unsigned_says),
            (
                "signed by a key outside the policy, none earlier",
                t(true, Some(S), Err("the signing key SHA256:abc is not in /etc/fwc/allowed".into()), None),
                true,
                &["SHA256:abc", "No earlier state", "--sign-key", "--allowed-signers"],
            ),
        ];
        for (name, got, refused, parts) in rows {
            assert_eq!(got.is_some(), refused, "{name}: {got:?}");
            for p in parts {
                assert!(got.as_deref().unwrap_or("").contains(p), "{name}: {p:?} missing in {got:?}");
            }
        }
    }
}
