//! The self-check after an apply ("magic rollback", issue 23): inside the agent's
//! confirm-or-revert, the agent proves that the rules it just applied still let it reach its
//! git remote (a real fetch with a short deadline) and pass the rollout policy's probes (a TCP
//! connect, an HTTP GET answered 2xx). A failure makes the agent revert the apply at once.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use fwc_compiler::artifacts::rollout::Probe;

use super::git::Mirror;

/// Deadline of each step of the self-check (the fetch, each probe).
pub const SELF_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Run the self-check; Err says what failed.
pub fn run(mirror: &Mirror, probes: &[Probe], timeout: Duration) -> Result<(), String> {
    // Two attempts: one lost packet must not revert a good commit.
    let fetched = mirror.fetch(timeout).or_else(|_| mirror.fetch(timeout));
    if let Err(e) = fetched {
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
