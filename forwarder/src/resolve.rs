//! Target resolution: IP literals directly, DNS names (hosts file included) through tokio's
//! `lookup_host` with a cache. A stale entry is served at once while a background task
//! refreshes it, so accepts never wait on DNS once a name has been resolved.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// System resolvers do not expose TTLs through getaddrinfo; entries are refreshed after this.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Resolver {
    ttl: Duration,
    cache: Mutex<HashMap<(String, u16), Entry>>,
}

#[derive(Debug, Clone)]
struct Entry {
    addrs: Arc<Vec<SocketAddr>>,
    fetched: Instant,
    refreshing: bool,
}

/// Parse an IP literal, with or without brackets.
pub fn literal(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

impl Resolver {
    pub fn new(ttl: Duration) -> Arc<Resolver> {
        Arc::new(Resolver { ttl, cache: Mutex::new(HashMap::new()) })
    }

    /// All addresses of `host:port`, in resolver order.
    pub async fn resolve(self: &Arc<Self>, host: &str, port: u16) -> io::Result<Arc<Vec<SocketAddr>>> {
        if let Some(ip) = literal(host) {
            return Ok(Arc::new(vec![SocketAddr::new(ip, port)]));
        }
        let key = (host.to_string(), port);
        let cached = self.cache.lock().unwrap().get(&key).cloned();
        match cached {
            Some(e) if e.fetched.elapsed() < self.ttl => Ok(e.addrs),
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

    async fn lookup(&self, key: (String, u16)) -> io::Result<Arc<Vec<SocketAddr>>> {
        let res = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((key.0.clone(), key.1))).await;
        let res = match res {
            Ok(Ok(it)) => {
                let v: Vec<SocketAddr> = it.collect();
                if v.is_empty() {
                    Err(io::Error::new(io::ErrorKind::NotFound, format!("{} has no address", key.0)))
                } else {
                    Ok(Arc::new(v))
                }
            }
            Ok(Err(e)) => Err(io::Error::new(e.kind(), format!("cannot resolve {}: {e}", key.0))),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("resolving {} timed out", key.0))),
        };
        let mut c = self.cache.lock().unwrap();
        match res {
            Ok(addrs) => {
                c.insert(key, Entry { addrs: addrs.clone(), fetched: Instant::now(), refreshing: false });
                Ok(addrs)
            }
            Err(e) => match c.get_mut(&key) {
                // Keep serving the last good answer when a refresh fails.
                Some(ent) => {
                    ent.refreshing = false;
                    Ok(ent.addrs.clone())
                }
                None => Err(e),
            },
        }
    }
}
