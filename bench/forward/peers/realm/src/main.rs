//! `realm-peer LISTEN_ADDR TARGET_ADDR`: one realm TCP relay endpoint (splice zero-copy, as
//! the realm binary does on Linux), on a multi-threaded tokio runtime like fwc's forwarder.

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 3 {
        eprintln!("usage: realm-peer LISTEN_ADDR TARGET_ADDR   (e.g. 127.0.0.1:6101 127.0.0.1:5201)");
        std::process::exit(2);
    }
    let endpoint = realm_core::endpoint::Endpoint {
        laddr: a[1].parse().expect("LISTEN_ADDR"),
        raddr: realm_core::endpoint::RemoteAddr::SocketAddr(a[2].parse().expect("TARGET_ADDR")),
        bind_opts: Default::default(),
        conn_opts: Default::default(),
        extra_raddrs: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    rt.block_on(realm_core::tcp::run_tcp(endpoint)).expect("relay");
}
