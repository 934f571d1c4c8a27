//! Test support shared by every privileged fwc test: a privilege gate that prints SKIP (or
//! fails under `FWC_REQUIRE_PRIVILEGED=1`), and guard types that create network namespaces,
//! veth pairs and processes named `fwc-t-*` and remove them on drop, also when a test panics.

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Returns true when the test may run privileged work. Without root it prints a SKIP line
/// and returns false, unless `FWC_REQUIRE_PRIVILEGED=1`, in which case it panics.
pub fn privileged(test: &str) -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["ip", "nft"].iter().all(|t| which(t));
    if root && tools {
        return true;
    }
    let why = if !root { "not root" } else { "ip or nft not installed" };
    if std::env::var("FWC_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("{test}: privileged test cannot run ({why}) but FWC_REQUIRE_PRIVILEGED=1");
    }
    eprintln!("SKIP {test}: {why}");
    false
}

/// Is `tool` on PATH?
pub fn which(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// Is the external tool a test checks its output with (promtool, lintian, ...) installed?
/// Without it the test prints SKIP and returns false, unless CI (`CI` or
/// `FWC_REQUIRE_PRIVILEGED` set), where scripts/setup.sh installs it and its absence fails.
pub fn tool(test: &str, tool: &str, package: &str) -> bool {
    if which(tool) {
        return true;
    }
    if std::env::var_os("CI").is_some() || std::env::var_os("FWC_REQUIRE_PRIVILEGED").is_some() {
        panic!("{test}: {tool} is required in CI (scripts/setup.sh installs the Debian package {package})");
    }
    eprintln!("SKIP {test}: {tool} not installed (Debian package {package})");
    false
}

/// Run a command, panic with its stderr when it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Run a shell command line, panic when it fails; returns stdout.
pub fn sh(line: &str) -> String {
    String::from_utf8_lossy(&run(Command::new("sh").arg("-c").arg(line)).stdout).into_owned()
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call, `fwc-t-<tag><pid%10000>-<n>`, short enough for
/// interface names (15 bytes max) when `tag` is at most 2 characters.
pub fn unique_name(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("fwc-t-{tag}{}{n}", std::process::id() % 10000)
}

/// Call `probe` (every `every`) until it returns `Ok`; panic with `what` and the last `Err`
/// after `limit`. Returns the value and how long it took.
pub fn poll_until<T, E: std::fmt::Debug>(
    what: &str,
    limit: std::time::Duration,
    every: std::time::Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> (T, std::time::Duration) {
    let t0 = std::time::Instant::now();
    loop {
        match probe() {
            Ok(v) => return (v, t0.elapsed()),
            Err(e) => assert!(t0.elapsed() < limit, "{what}: still {e:?} after {:?}", t0.elapsed()),
        }
        std::thread::sleep(every);
    }
}

/// A rule repository `DIR/repo` holding `fwc.kdl` with `kdl`; returns its path.
pub fn rule_repo(dir: &std::path::Path, kdl: &str) -> std::path::PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("fwc.kdl"), kdl).unwrap();
    repo
}

/// A network namespace that is deleted (with everything in it) on drop.
pub struct Netns {
    pub name: String,
    children: Vec<Child>,
}

impl Netns {
    /// Create `fwc-t-…` with loopback up.
    pub fn new(tag: &str) -> Netns {
        let name = unique_name(tag);
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name, children: Vec::new() };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// A command that runs inside the namespace.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Run argv inside the namespace; panic on failure; returns stdout.
    pub fn exec(&self, argv: &[&str]) -> String {
        let mut c = self.cmd(argv[0]);
        c.args(&argv[1..]);
        String::from_utf8_lossy(&run(&mut c).stdout).into_owned()
    }

    /// Run argv inside the namespace and return the raw output, whatever the exit status.
    pub fn try_exec(&self, argv: &[&str]) -> Output {
        let mut c = self.cmd(argv[0]);
        c.args(&argv[1..]);
        c.output().unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"))
    }

    /// Run a shell line inside the namespace; panic on failure; returns stdout.
    pub fn sh(&self, line: &str) -> String {
        self.exec(&["sh", "-c", line])
    }

    /// Start a long-running process in the namespace; it is killed when the guard drops.
    pub fn spawn(&mut self, argv: &[&str]) -> u32 {
        let mut c = self.cmd(argv[0]);
        c.args(&argv[1..]).stdin(Stdio::null());
        let child = c.spawn().unwrap_or_else(|e| panic!("cannot spawn {argv:?}: {e}"));
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// Start `FWC forward --state-dir STATE` (FWC: the fwc binary under test) in this
    /// namespace, killed with its other processes, and wait for its control socket.
    pub fn spawn_forwarder(&mut self, fwc: &str, state: &std::path::Path) {
        std::fs::create_dir_all(state).unwrap();
        let fwd = Command::new("ip")
            .args(["netns", "exec", &self.name, fwc, "forward", "--state-dir", state.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.adopt(fwd);
        let sock = state.join("forwarder.sock");
        let t0 = std::time::Instant::now();
        while !sock.exists() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(sock.exists(), "the forwarder did not create {}", sock.display());
    }

    /// Keep a child started elsewhere (e.g. with extra pipes) so it is killed on drop.
    pub fn adopt(&mut self, child: Child) {
        self.children.push(child);
    }

    /// Write `/etc/netns/<name>/<file>` (e.g. `resolv.conf`, `hosts`): `ip netns exec` mounts
    /// it over `/etc/<file>` for processes started afterwards. Removed with the namespace.
    pub fn etc_file(&mut self, file: &str, content: &str) {
        let dir = std::path::Path::new("/etc/netns").join(&self.name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        std::fs::write(dir.join(file), content).unwrap_or_else(|e| panic!("cannot write {file} for {}: {e}", self.name));
    }

    /// Path of this namespace's handle, for `setns` from a test thread.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Kill anything else still running inside, then delete the namespace.
        let _ = Command::new("ip").args(["netns", "pids", &self.name]).output().map(|o| {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        });
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = std::fs::remove_dir_all(std::path::Path::new("/etc/netns").join(&self.name));
        // What `fwc apply --netns NAME` pinned for the namespace's QoS maps and programs.
        let _ = std::fs::remove_dir_all(std::path::Path::new("/sys/fs/bpf").join(format!("fwc-netns-{}", self.name)));
    }
}

/// Join two namespaces with a veth pair and give each end an address (CIDR notation, IPv4
/// or IPv6, any number). The pair disappears with either namespace.
pub fn veth(a: &Netns, a_addrs: &[&str], b: &Netns, b_addrs: &[&str]) -> (String, String) {
    let an = unique_name("a");
    let bn = unique_name("b");
    run(Command::new("ip").args(["link", "add", &an, "netns", &a.name, "type", "veth", "peer", "name", &bn, "netns", &b.name]));
    for (ns, dev, addrs) in [(a, &an, a_addrs), (b, &bn, b_addrs)] {
        for addr in addrs {
            ns.exec(&["ip", "addr", "add", addr, "dev", dev, "nodad"]);
        }
        ns.exec(&["ip", "link", "set", dev, "up"]);
    }
    (an, bn)
}

/// Three namespaces: client <-> fwc host <-> backend, as every dataplane test uses.
///
/// Addresses: client 198.18.1.2/24 + 2001:db8:1::2/64, host 198.18.1.1 + 2001:db8:1::1 on
/// the client side and 198.18.2.1/24 + 2001:db8:2::1/64 on the backend side, backend
/// 198.18.2.2 + 2001:db8:2::2. The client routes via the host; the backend has **no** route
/// back to the client (so a working forward proves masquerade). Forwarding is enabled on the host.
pub struct Topology {
    pub client: Netns,
    pub host: Netns,
    pub backend: Netns,
    /// Interface names: (client side of host, backend side of host).
    pub host_if_client: String,
    pub host_if_backend: String,
    pub client_if: String,
    pub backend_if: String,
}

impl Topology {
    pub fn new() -> Topology {
        let client = Netns::new("c");
        let host = Netns::new("h");
        let backend = Netns::new("b");
        let (client_if, host_if_client) =
            veth(&client, &["198.18.1.2/24", "2001:db8:1::2/64"], &host, &["198.18.1.1/24", "2001:db8:1::1/64"]);
        let (host_if_backend, backend_if) =
            veth(&host, &["198.18.2.1/24", "2001:db8:2::1/64"], &backend, &["198.18.2.2/24", "2001:db8:2::2/64"]);
        client.exec(&["ip", "route", "add", "default", "via", "198.18.1.1"]);
        client.exec(&["ip", "-6", "route", "add", "default", "via", "2001:db8:1::1"]);
        host.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        host.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
        Topology { client, host, backend, host_if_client, host_if_backend, client_if, backend_if }
    }
}

impl Default for Topology {
    fn default() -> Self {
        Self::new()
    }
}

/// The environment variable through which [`rerun_without_path`] tells the re-run its argument.
const RERUN_VAR: &str = "FWC_T_RERUN";

/// Inside a re-run started by [`rerun_without_path`]: the argument it was given; `None` in
/// the ordinary run.
pub fn rerun_arg() -> Option<String> {
    std::env::var(RERUN_VAR).ok()
}

/// Run the test `name` of this test binary again, in a child process whose PATH is empty (no
/// `ip`, no `tc`, no tool at all), handing it `arg` (read there with [`rerun_arg`]). Shows that
/// code under test asks the kernel itself instead of shelling out. Panics when the re-run fails.
pub fn rerun_without_path(name: &str, arg: &str) {
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("PATH", "")
        .env(RERUN_VAR, arg)
        .output()
        .unwrap_or_else(|e| panic!("cannot re-run {name}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name}, re-run with an empty PATH, failed:\n{text}");
    assert!(text.contains("1 passed"), "{name}, re-run with an empty PATH, ran no test:\n{text}");
}

/// A Prometheus server (Debian's `prometheus`) on a free loopback port scraping `targets` as job
/// `job` every `interval` (e.g. `"1s"`; also the scrape timeout), its data in a fresh temporary
/// directory. Killed and removed on drop, also when the test panics.
pub struct Prometheus {
    child: Child,
    /// `127.0.0.1:PORT` of its HTTP API.
    pub addr: std::net::SocketAddr,
    dir: std::path::PathBuf,
}

impl Prometheus {
    pub fn start(job: &str, targets: &[std::net::SocketAddr], interval: &str) -> Prometheus {
        let dir = std::env::temp_dir().join(unique_name("prom"));
        std::fs::create_dir_all(&dir).unwrap();
        let list = targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!("global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\nscrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{list}]\n"),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus: {e}"));
        Prometheus { child, addr, dir }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A finished command's stdout and stderr as one text (for assertion messages).
pub fn output_text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The flows `fwc import --verify` printed as differing (`differs:` lines), each with the
/// original's verdict line after it, when every one is a routed flow that a DNAT without a
/// destination address rewrites (fwc's forwards take only what is addressed to the host);
/// `Err` names the first other difference.
pub fn routed_dnat_differences(verify_output: &str) -> Result<usize, String> {
    let lines: Vec<&str> = verify_output.lines().collect();
    let mut n = 0;
    for (i, l) in lines.iter().enumerate().filter(|(_, l)| l.starts_with("differs:")) {
        let original = lines.get(i + 1).copied().unwrap_or_default();
        if !(l.ends_with("(forward)") && original.contains("(dnat to ")) {
            return Err(format!("not a routed DNAT flow:\n{l}\n{original}"));
        }
        n += 1;
    }
    Ok(n)
}

/// The commands of an nftables JSON batch as `op kind` strings (`delete element`, `add set`, …).
pub fn batch_ops(batch: &[serde_json::Value]) -> Vec<String> {
    batch
        .iter()
        .map(|c| {
            let (op, inner) = c.as_object().expect("a batch command is an object").iter().next().expect("one command");
            format!("{op} {}", inner.as_object().and_then(|o| o.keys().next()).map_or("", String::as_str))
        })
        .collect()
}

/// xorshift64*: a deterministic, seeded random source for property tests (no dependency).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-enough in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}
