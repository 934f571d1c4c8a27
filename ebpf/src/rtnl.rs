//! Route-netlink queries of the calling thread's network namespace: which links are up, the
//! root qdisc of a link, the bpf filters on a link's clsact egress hook. Messages come from
//! `netlink-packet-route` over a blocking `netlink-sys` socket (no iproute2, no async runtime).
//!
//! A netlink socket belongs to the network namespace of the thread that opens it, so a thread
//! that joined a namespace with setns(2) (fwc-runtime's `backend::netns`) asks that namespace.

use std::io;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::tc::{TcAttribute, TcFilterBpfOption, TcHandle, TcMessage, TcOption};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// One network interface as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// Administratively up (`IFF_UP`), what `ip link show up` lists.
    pub up: bool,
}

/// A bpf classifier on a link's clsact egress hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfFilter {
    /// The filter's priority (`tc filter … pref N`).
    pub priority: u16,
    /// The filter's handle.
    pub handle: u32,
    /// `TCA_BPF_NAME`: the name the attacher gave (aya: the program name; tc: `file:[section]`).
    pub name: Option<String>,
    /// `TCA_BPF_ID`: id of the program the filter runs.
    pub prog_id: Option<u32>,
}

/// Every link of this namespace, by index.
pub fn links() -> io::Result<Vec<Link>> {
    let mut v: Vec<Link> = dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(l),
            _ => None,
        })
        .map(|l| Link {
            index: l.header.index,
            up: l.header.flags.contains(LinkFlags::Up),
            name: l
                .attributes
                .into_iter()
                .find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n),
                    _ => None,
                })
                .unwrap_or_default(),
        })
        .collect();
    v.sort_by_key(|l| l.index);
    Ok(v)
}

/// Names of the links that are up, sorted by name.
pub fn up_links() -> io::Result<Vec<String>> {
    let mut v: Vec<String> = links()?.into_iter().filter(|l| l.up).map(|l| l.name).collect();
    v.sort();
    Ok(v)
}

/// The kind (`fq`, `noqueue`, `mq`, …) of the root qdisc of the link with index `ifindex`;
/// `None` when it has none.
pub fn root_qdisc_kind(ifindex: u32) -> io::Result<Option<String>> {
    // The kernel dumps the qdiscs of every link; pick the root one of ours (as `tc` does).
    let msgs = dump(RouteNetlinkMessage::GetQueueDiscipline(TcMessage::with_index(ifindex as i32)))?;
    Ok(msgs.into_iter().find_map(|m| match m {
        RouteNetlinkMessage::NewQueueDiscipline(q) if q.header.index == ifindex as i32 && q.header.parent == TcHandle::ROOT => {
            kind(&q.attributes)
        }
        _ => None,
    }))
}

/// The bpf filters on the clsact egress hook of the link with index `ifindex` (empty when it
/// has no clsact qdisc).
pub fn egress_bpf_filters(ifindex: u32) -> io::Result<Vec<BpfFilter>> {
    let mut req = TcMessage::with_index(ifindex as i32);
    req.header.parent = TcHandle { major: TcHandle::CLSACT.major, minor: TcHandle::MIN_EGRESS };
    let msgs = match dump(RouteNetlinkMessage::GetTrafficFilter(req)) {
        Ok(m) => m,
        // No clsact qdisc: no filters (the kernel answers EINVAL for a missing parent).
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    let mut v = vec![];
    for m in msgs {
        let RouteNetlinkMessage::NewTrafficFilter(f) = m else { continue };
        // A filter list starts with one entry per (priority, protocol) that carries no handle.
        if kind(&f.attributes).as_deref() != Some("bpf") || u32::from(f.header.handle.clone()) == 0 {
            continue;
        }
        let (mut name, mut prog_id) = (None, None);
        for a in &f.attributes {
            if let TcAttribute::Options(opts) = a {
                for o in opts {
                    match o {
                        TcOption::Bpf(TcFilterBpfOption::ProgName(n)) => name = Some(n.clone()),
                        TcOption::Bpf(TcFilterBpfOption::ProgId(id)) => prog_id = Some(*id),
                        _ => {}
                    }
                }
            }
        }
        v.push(BpfFilter { priority: (f.header.info >> 16) as u16, handle: f.header.handle.into(), name, prog_id });
    }
    Ok(v)
}

fn kind(attrs: &[TcAttribute]) -> Option<String> {
    attrs.iter().find_map(|a| match a {
        TcAttribute::Kind(k) => Some(k.clone()),
        _ => None,
    })
}

/// Send one dump request and collect the answers until `NLMSG_DONE`.
fn dump(req: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
    let mut sock = Socket::new(NETLINK_ROUTE)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    let mut msg = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(req));
    msg.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    msg.header.sequence_number = 1;
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    sock.send(&buf, 0)?;
    let bad = |e: netlink_packet_core::DecodeError| io::Error::new(io::ErrorKind::InvalidData, format!("route netlink answer: {e}"));
    let mut out = vec![];
    loop {
        let (data, _) = sock.recv_from_full()?;
        let mut off = 0;
        while off < data.len() {
            let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[off..]).map_err(bad)?;
            let len = m.header.length as usize;
            match m.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) if e.code.is_some() => return Err(e.to_io()),
                NetlinkPayload::InnerMessage(i) => out.push(i),
                _ => {}
            }
            if len == 0 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "route netlink answer: message of length 0"));
            }
            off += len.next_multiple_of(4);
        }
    }
}
