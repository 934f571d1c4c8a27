//! Target resolution: IP literals directly; DNS names from the hosts file, then from the name
//! servers of /etc/resolv.conf through hickory-resolver, with a cache that honours the records'
//! TTLs within [`MIN_TTL`, `MAX_TTL`]. A stale entry is served at once while a background task
//! refreshes it, so accepts never wait on DNS once a name has been resolved.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fwc_artifacts::{DNS_MAX_TTL_SECS, DNS_MIN_TTL_SECS};
use hickory_resolver::config::{LookupIpStrategy, ResolveHosts};
use hickory_resolver::proto::op::Query;
use hickory_resolver::proto::rr::{Name, RecordType};
use hickory_resolver::{Hosts, TokioResolver};

/// Answers are re-resolved after their TTL, but never sooner than this…
pub const MIN_TTL: Duration = Duration::from_secs(DNS_MIN_TTL_SECS);
/// …and never later than this.
pub const MAX_TTL: Duration = Duration::from_secs(DNS_MAX_TTL_SECS);
/// Hosts-file answers have no TTL: the file is read again at every lookup, and its answers
/// count as [`MIN_TTL`] so an edit is seen within that.
pub const HOSTS_TTL: Duration = MIN_TTL;
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// One name's addresses and how long they may be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub addrs: Vec<IpAddr>,
    /// The records' TTL clamped to [`MIN_TTL`, `MAX_TTL`] (hosts file: [`HOSTS_TTL`]).
    pub ttl: Duration,
    /// Where the answer came from: `hosts` or `dns`.
    pub source: &'static str,
}

/// Clamp a record TTL into the bounds.
pub fn clamp_ttl(ttl: Duration) -> Duration {
    ttl.clamp(MIN_TTL, MAX_TTL)
}

/// The DNS client: the hosts file first, then the system's name servers.
pub struct Dns {
    client: Result<TokioResolver, String>,
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns").field("ready", &self.client.is_ok()).finish()
    }
}

impl Dns {
    /// From /etc/resolv.conf (name servers, search, ndots). A missing or unreadable file makes
    /// every DNS lookup fail with that reason (the hosts file still answers).
    pub fn system() -> Dns {
        let client = TokioResolver::builder_tokio()
            .map(|mut b| {
                let o = b.options_mut();
                o.use_hosts_file = ResolveHosts::Never; // read here, at every lookup
                o.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
                o.timeout = Duration::from_secs(2);
                o.positive_max_ttl = Some(MAX_TTL);
                o.negative_max_ttl = Some(MIN_TTL);
                b
            })
            .and_then(|b| b.build())
            .map_err(|e| format!("cannot read the resolver configuration (/etc/resolv.conf): {e}"));
        Dns { client }
    }

    /// Every address of `name` (A before AAAA), with the TTL to keep them for. "Not found" is
    /// `io::ErrorKind::NotFound`.
    pub async fn lookup(&self, name: &str) -> io::Result<Answer> {
        if let Some(addrs) = hosts_file(name) {
            return Ok(Answer { addrs, ttl: HOSTS_TTL, source: "hosts" });
        }
        let client = self.client.as_ref().map_err(|e| io::Error::other(e.clone()))?;
        let res = tokio::time::timeout(LOOKUP_TIMEOUT, client.lookup_ip(name)).await;
        match res {
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("resolving {name} timed out"))),
            Ok(Err(e)) if e.is_no_records_found() || e.is_nx_domain() => {
                Err(io::Error::new(io::ErrorKind::NotFound, format!("{name} does not resolve: {e}")))
            }
            Ok(Err(e)) => Err(io::Error::other(format!("cannot resolve {name}: {e}"))),
            Ok(Ok(l)) => {
                let addrs: Vec<IpAddr> = l.iter().collect();
                if addrs.is_empty() {
                    return Err(io::Error::new(io::ErrorKind::NotFound, format!("{name} has no address")));
                }
                let ttl = clamp_ttl(l.valid_until().saturating_duration_since(Instant::now()));
                Ok(Answer { addrs, ttl, source: "dns" })
            }
        }
    }
}

/// The hosts file's addresses for `name` (A, then AAAA), read now.
fn hosts_file(name: &str) -> Option<Vec<IpAddr>> {
    let hosts = Hosts::from_system().ok()?;
    let name = Name::from_str(name).ok()?;
    let mut out = Vec::new();
    for rt in [RecordType::A, RecordType::AAAA] {
        if let Some(l) = hosts.lookup_static_host(&Query::query(name.clone(), rt)) {
            out.extend(l.answers().iter().filter_map(|r| r.data.ip_addr()));
        }
    }
    (!out.is_empty()).then_some(out)
}

#[derive(Debug)]
pub struct Resolver {
    dns: Dns,
    cache: Mutex<HashMap<String, Entry>>,
}

#[derive(Debug, Clone)]
struct Entry {
    addrs: Arc<Vec<IpAddr>>,
    expires: Instant,
    refreshing: bool,
}

/// Parse an IP literal, with or without brackets.
pub fn literal(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

impl Resolver {
    pub fn new() -> Arc<Resolver> {
        Arc::new(Resolver { dns: Dns::system(), cache: Mutex::new(HashMap::new()) })
    }

    /// The DNS client (for callers that need the TTL themselves).
    pub fn dns(&self) -> &Dns {
        &self.dns
    }

    /// All addresses of `host:port`, in resolver order.
    pub async fn resolve(self: &Arc<Self>, host: &str, port: u16) -> io::Result<Arc<Vec<SocketAddr>>> {
        let ips = self.resolve_ips(host).await?;
        Ok(Arc::new(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()))
    }

    async fn resolve_ips(self: &Arc<Self>, host: &str) -> io::Result<Arc<Vec<IpAddr>>> {
        if let Some(ip) = literal(host) {
            return Ok(Arc::new(vec![ip]));
        }
        let key = host.to_string();
        let cached = self.cache.lock().unwrap().get(&key).cloned();
        match cached {
            Some(e) if Instant::now() < e.expires => Ok(e.addrs),
            Some(e) => {
                // Serve stale, refresh in the background (once).
                let spawn = {
                    let mut c = self.cache.lock().unwrap();
                    match c.get_mut(&key) {
                        Some(ent) if !ent.refreshing => {
                            ent.refreshing = true;
                            true
                        }
                        _ => false,
                    }
                };
                if spawn {
                    let me = Arc::clone(self);
                    tokio::spawn(async move {
                        let _ = me.lookup(key).await;
                    });
                }
                Ok(e.addrs)
            }
            None => self.lookup(key).await,
        }
    }

    /// Resolve every name now (used when a config is committed) so first connections are fast.
    pub fn warm(self: &Arc<Self>, names: impl IntoIterator<Item = (String, u16)>) {
        for (h, p) in names {
            if literal(&h).is_none() {
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    let _ = me.resolve(&h, p).await;
                });
            }
        }
    }

    async fn lookup(&self, key: String) -> io::Result<Arc<Vec<IpAddr>>> {
        let res = self.dns.lookup(&key).await;
        let mut c = self.cache.lock().unwrap();
        match res {
            Ok(a) => {
                let addrs = Arc::new(a.addrs);
                c.insert(key, Entry { addrs: addrs.clone(), expires: Instant::now() + a.ttl, refreshing: false });
                Ok(addrs)
            }
            Err(e) => match c.get_mut(&key) {
                // Keep serving the last good answer when a refresh fails (tried again after
                // the minimum TTL).
                Some(ent) => {
                    ent.refreshing = false;
                    ent.expires = Instant::now() + MIN_TTL;
                    Ok(ent.addrs.clone())
                }
                None => Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_clamped_to_the_bounds() {
        assert_eq!(clamp_ttl(Duration::from_secs(1)), MIN_TTL);
        assert_eq!(clamp_ttl(Duration::from_secs(300)), Duration::from_secs(300));
        assert_eq!(clamp_ttl(Duration::from_secs(86_400)), MAX_TTL);
    }
}
