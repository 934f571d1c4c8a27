//! Authentication of the git webhook (`POST /hooks/git`): the shared secret, checked against
//! GitHub's and fwc's HMAC-SHA256 signatures or GitLab's token, in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The shared secret of `POST /hooks/git`.
#[derive(Clone)]
pub struct WebhookSecret(Vec<u8>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl WebhookSecret {
    /// The secret, without surrounding whitespace (files usually end with a newline).
    pub fn new(secret: &[u8]) -> WebhookSecret {
        let s = std::str::from_utf8(secret).map(|s| s.trim().as_bytes().to_vec()).unwrap_or_else(|_| secret.to_vec());
        WebhookSecret(s)
    }

    /// Is the request authentic? Accepts `X-Hub-Signature-256: sha256=<hex hmac>` (GitHub,
    /// Gitea, Forgejo, Gogs), `X-Gitea-Signature: <hex hmac>` and `X-Gitlab-Token: <secret>`.
    /// All comparisons are constant time.
    pub fn check(&self, headers: &[(String, String)], body: &[u8]) -> bool {
        if self.0.is_empty() {
            return false;
        }
        let get = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim());
        let hmac_ok = |hexsig: &str| -> bool {
            let Ok(sig) = hex::decode(hexsig) else { return false };
            let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("hmac takes any key length");
            mac.update(body);
            mac.verify_slice(&sig).is_ok()
        };
        if let Some(v) = get("x-fwc-signature") {
            // fwc's own scheme: the timestamp is signed with the body (see `replay`).
            let Some(ts) = get("x-fwc-timestamp") else { return false };
            let Some(hexsig) = v.strip_prefix("sha256=") else { return false };
            let Ok(sig) = hex::decode(hexsig) else { return false };
            let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("hmac takes any key length");
            mac.update(ts.as_bytes());
            mac.update(b".");
            mac.update(body);
            return mac.verify_slice(&sig).is_ok();
        }
        if let Some(v) = get("x-hub-signature-256") {
            return v.strip_prefix("sha256=").is_some_and(hmac_ok);
        }
        if let Some(v) = get("x-gitea-signature") {
            return hmac_ok(v);
        }
        if let Some(v) = get("x-gitlab-token") {
            return constant_time_eq(v.as_bytes(), &self.0);
        }
        false
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    // Hash both sides first so the comparison time does not depend on the length either.
    use sha2::Digest;
    use subtle::ConstantTimeEq;
    Sha256::digest(a).as_slice().ct_eq(Sha256::digest(b).as_slice()).into()
}

/// `sha256=<hex>` for a body, as GitHub sends it (for tests and the bench).
pub fn github_signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("hmac takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// `X-Fwc-Signature` of fwc's own webhook scheme: `sha256=<hex HMAC of "<timestamp>.<body>">`,
/// sent with `X-Fwc-Timestamp: <timestamp>` (unix seconds).
pub fn fwc_signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("hmac takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}
