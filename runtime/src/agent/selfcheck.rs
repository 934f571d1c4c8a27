//! The self-check after an apply ("magic rollback"): inside the agent's
//! confirm-or-revert, the agent proves that the rules it just applied still let it reach its
//! git remote (a real fetch with a short deadline) and pass the rollout policy's probes (a TCP
//! connect, an HTTP GET answered 2xx). A failure makes the agent revert the apply at once.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use fwc_compiler::artifacts::rollout::Probe;

use super::decide::{self_check_step, SelfCheckPolicy, SelfCheckStep};
use super::git::Mirror;

/// Deadline of each step of the self-check (the fetch, each probe).
pub const SELF_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Run the self-check, retrying with backoff as `policy` says
/// ([`self_check_step`](super::decide::self_check_step)); Err says what failed on the last
/// attempt (and how many were made).
pub fn run(mirror: &Mirror, probes: &[Probe], timeout: Duration, policy: SelfCheckPolicy) -> Result<(), String> {
    let mut attempt = 1;
    loop {
        match self_check_step(policy, attempt, once(mirror, probes, timeout)) {
            SelfCheckStep::Pass => return Ok(()),
            SelfCheckStep::Revert { why } => return Err(why),
            SelfCheckStep::RetryAfter(pause) => {
                tracing::warn!("self-check attempt {attempt} failed; trying again in {pause:?}");
                std::thread::sleep(pause);
                attempt += 1;
            }
        }
    }
}

fn once(mirror: &Mirror, probes: &[Probe], timeout: Duration) -> Result<(), String> {
    if let Err(e) = mirror.fetch(timeout) {
        return Err(format!("the git remote is unreachable after the apply: {e}"));
    }
    for p in probes {
        probe(p, timeout)?;
    }
    Ok(())
}

fn resolve(what: &str, hostport: &str) -> Result<SocketAddr, String> {
    hostport
        .to_socket_addrs()
        .map_err(|e| format!("probe \"{what}\": cannot resolve {hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("probe \"{what}\": {hostport} has no address"))
}

/// One probe of the policy.
pub fn probe(p: &Probe, timeout: Duration) -> Result<(), String> {
    match p {
        Probe::Tcp { name, address } => {
            let a = resolve(name, address)?;
            TcpStream::connect_timeout(&a, timeout).map(drop).map_err(|e| format!("probe \"{name}\": tcp connect to {address} failed: {e}"))
        }
        Probe::Http { name, url } => {
            let Some(rest) = url.strip_prefix("http://") else {
                return Err(format!("probe \"{name}\": only http:// URLs can be probed ({url})"));
            };
            let (hostport, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            let hostport = if hostport.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) { hostport.to_string() } else { format!("{hostport}:80") };
            let a = resolve(name, &hostport)?;
            match crate::metrics::http_request(a, "GET", path, &[], b"") {
                Ok((code, _)) if (200..300).contains(&code) => Ok(()),
                Ok((code, _)) => Err(format!("probe \"{name}\": GET {url} answered {code}")),
                Err(e) => Err(format!("probe \"{name}\": GET {url} failed: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A git remote that is away for a moment during the self-check (moved away, and back
    /// while the agent waits to try again): the self-check passes; away for good, it fails
    /// after every attempt.
    #[test]
    fn a_transient_git_failure_is_retried() {
        if !fwc_testkit::which("git") {
            eprintln!("SKIP a_transient_git_failure_is_retried: git missing");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        fwc_testkit::sh(&format!("cd '{}' && git init -q --bare r.git && git init -q -b main w && cd w && echo 'fwc 1' > fwc.kdl && git add . && git -c user.name=a -c user.email=a@b -c commit.gpgsign=false commit -qm one && git push -q ../r.git HEAD:main", p.display()));
        let url = format!("file://{}/r.git", p.display());
        let m = Mirror::open(&p.join("state"), &url, "main", Duration::from_secs(5)).unwrap();
        m.fetch(Duration::from_secs(5)).unwrap();
        std::fs::rename(p.join("r.git"), p.join("away.git")).unwrap();
        let (from, to) = (p.join("away.git"), p.join("r.git"));
        let back = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::rename(from, to).unwrap();
        });
        // The first attempt fails at once (the remote is away); the second comes after 2 s.
        assert_eq!(run(&m, &[], Duration::from_secs(5), SelfCheckPolicy { attempts: 2, spacing: Duration::from_secs(2) }), Ok(()));
        back.join().unwrap();
        std::fs::rename(p.join("r.git"), p.join("away.git")).unwrap();
        let e = run(&m, &[], Duration::from_secs(5), SelfCheckPolicy { attempts: 3, spacing: Duration::from_millis(10) }).unwrap_err();
        assert!(e.contains("the git remote is unreachable") && e.contains("(3 attempts)"), "{e}");
    }

    #[test]
    fn probes_pass_and_fail() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let ok = Probe::Tcp { name: "t".into(), address: format!("127.0.0.1:{port}") };
        assert_eq!(probe(&ok, Duration::from_secs(5)), Ok(()));
        drop(l);
        let e = probe(&ok, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("probe \"t\": tcp connect"), "{e}");
        let e = probe(&Probe::Http { name: "h".into(), url: "https://example.com/".into() }, Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("only http://"), "{e}");
    }
}
