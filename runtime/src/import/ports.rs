//! Ports as the original wrote them, held to what fwc accepts (1-65535, `a-b` with a <= b)
//! before the rules are rendered: firewalld takes `port="22 "` (normalized here) and
//! iptables and firewalld load port 0 or out-of-range values, which fwc's own check would
//! refuse after the import. A rule with such a port is refused by its origin instead.

use super::model::*;

/// A port list normalized (`22`, `80,443`, `8000-8100`; spaces dropped), or why not.
pub fn normalize(raw: &str) -> Result<String, String> {
    let mut out = Vec::new();
    for part in raw.split(',') {
        let part: String = part.chars().filter(|c| !c.is_whitespace()).collect();
        let (a, b) = part.split_once(['-', ':']).unwrap_or((&part, &part));
        let num = |s: &str| s.parse::<u32>().ok().filter(|n| (1..=65535).contains(n));
        match (num(a), num(b)) {
            (Some(x), Some(y)) if x == y => out.push(x.to_string()),
            (Some(x), Some(y)) if x < y => out.push(format!("{x}-{y}")),
            (Some(_), Some(_)) => return Err(format!("the port range `{part}` runs backwards")),
            _ => return Err(format!("port `{}`: fwc's ports are 1-65535", raw.trim())),
        }
    }
    Ok(out.join(","))
}

/// Does a port list cover every port, 0 to 65535 (`0-65535`, `0:65535`)?
fn every_port(p: &Option<String>) -> bool {
    p.as_deref().is_some_and(|p| {
        let p: String = p.chars().filter(|c| !c.is_whitespace()).collect();
        p.split(',').any(|r| matches!(r.split_once(['-', ':']), Some(("0", "65535"))))
    })
}

/// Normalize every port of `imp`; a rule, forward or NAT whose port fwc cannot take becomes a
/// refusal naming its origin.
pub fn check(imp: &mut Imported) {
    let mut refused = Vec::new();
    let mut fix = |slot: &mut Option<String>, origin: &str| -> bool {
        let Some(p) = slot.as_deref() else { return true };
        match normalize(p) {
            Ok(n) => {
                *slot = Some(n);
                true
            }
            Err(what) => {
                refused.push(Refusal { origin: origin.to_string(), what, hint: "a packet to port 0 or beyond 65535 does not exist: leave the rule out of the original".into() });
                false
            }
        }
    };
    for c in &mut imp.chains {
        for r in &mut c.rules {
            // `udp dport 0-65535` (port 0 included) is every port: no port match at all.
            if every_port(&r.cond.port) && !r.cond.not.port {
                r.cond.port = None;
            }
            if every_port(&r.cond.sport) && !r.cond.not.sport {
                r.cond.sport = None;
            }
        }
        c.rules.retain_mut(|r| fix(&mut r.cond.port, &r.origin) && fix(&mut r.cond.sport, &r.origin));
    }
    imp.nats.retain_mut(|n| fix(&mut n.port, &n.origin));
    imp.forwards.retain_mut(|f| {
        let listen_ok = match f.listen.rsplit_once(':') {
            Some((addr, p)) => match normalize(p) {
                Ok(n) => {
                    f.listen = format!("{addr}:{n}");
                    true
                }
                Err(_) => fix(&mut Some(p.to_string()), &f.origin),
            },
            None => true,
        };
        listen_ok
    });
    imp.refused.extend(refused);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_normalized_or_refused() {
        assert_eq!(normalize("22 ").as_deref(), Ok("22"));
        assert_eq!(normalize("80, 443").as_deref(), Ok("80,443"));
        assert_eq!(normalize("8000-8010").as_deref(), Ok("8000-8010"));
        assert_eq!(normalize("8000:8010").as_deref(), Ok("8000-8010"));
        for bad in ["0", "99999", "", "x", "10-5"] {
            assert!(normalize(bad).is_err(), "{bad}");
        }
        assert!(every_port(&Some("0-65535".into())) && every_port(&Some("22, 0:65535".into())));
        assert!(!every_port(&Some("1-65535".into())) && !every_port(&None));
    }
}
