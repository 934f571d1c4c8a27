//! The git smart-HTTP servers the simulated agents poll: a built-in counting front over
//! `git http-backend` (the default) and real web server stacks (`FWC_SIM_SERVER`), whose
//! processes run in a cpuacct cgroup of their own and are stopped and waited for at the end.

pub(crate) mod builtin;
pub(crate) mod lighttpd;
pub(crate) mod nginx;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::measure::children_cpu_s;

/// A server process that dies with the simulation (also when it is killed), in the cpuacct
/// cgroup `acct` when there is one (so that every descendant's CPU counts, reaped or not).
pub(crate) fn child<'a>(c: &'a mut Command, acct: &Option<PathBuf>) -> &'a mut Command {
    use std::os::unix::process::CommandExt;
    c.stdin(Stdio::null()).process_group(0);
    let procs = acct.as_ref().map(|d| std::ffi::CString::new(d.join("cgroup.procs").to_string_lossy().as_bytes()).unwrap());
    // SAFETY: prctl and a write to a cgroup file between fork and exec (no allocation).
    unsafe {
        c.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(p) = &procs {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
                if fd >= 0 {
                    let mut buf = [0u8; 12];
                    let mut n = libc::getpid() as u32;
                    let mut i = buf.len();
                    loop {
                        i -= 1;
                        buf[i] = b'0' + (n % 10) as u8;
                        n /= 10;
                        if n == 0 {
                            break;
                        }
                    }
                    libc::write(fd, buf[i..].as_ptr().cast(), buf.len() - i);
                    libc::close(fd);
                }
            }
            Ok(())
        })
    }
}

/// A cpuacct (cgroup v1) group for a server's processes, when one can be made (root).
pub(crate) fn acct_group(server: &str) -> Option<PathBuf> {
    let acct = Path::new("/sys/fs/cgroup/cpuacct").join(format!("fwc-sim-{server}-{}", std::process::id()));
    std::fs::create_dir(&acct).is_ok().then_some(acct)
}

/// CPU seconds of everything that ran in the group (`cpuacct.usage`), reaped or not.
pub(crate) fn group_cpu_s(acct: &Path) -> Option<f64> {
    std::fs::read_to_string(acct.join("cpuacct.usage")).ok().and_then(|v| v.trim().parse::<f64>().ok()).map(|ns| ns / 1e9)
}

/// Requests in an access log (one line each): (static refs GETs, smart-HTTP requests).
pub(crate) fn access_log_requests(log: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let stat = text.lines().filter(|l| l.contains("GET /static/")).count() as u64;
    (stat, text.lines().count() as u64 - stat)
}

/// A server's CPU over its whole life, once it is stopped: as its cgroup counted it, and as it
/// reached this process through `wait` (what `../shared/quiet` and `time` see). The two agree
/// when the server waits for its CGI processes; a server that lets the kernel reap them
/// (fcgiwrap ignores SIGCHLD) passes on less than its cgroup counted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stopped {
    pub(crate) cgroup_s: Option<f64>,
    pub(crate) waited_s: f64,
}

/// Stops the servers (each its own process group: its workers go with it), waits for them and
/// for any worker left to this process (a subreaper), and removes the cgroup.
pub(crate) fn stop(children: &mut [&mut Child], acct: &Option<PathBuf>) -> Stopped {
    let before = children_cpu_s();
    for c in children.iter_mut() {
        unsafe { libc::kill(-(c.id() as i32), libc::SIGTERM) };
        let _ = c.wait();
    }
    let mut cgroup_s = None;
    if let Some(d) = acct {
        for pid in std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default().lines().filter_map(|l| l.parse::<i32>().ok()) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // The group empties when the last worker has exited.
        for _ in 0..50 {
            while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
            cgroup_s = group_cpu_s(d);
            if std::fs::remove_dir(d).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
    Stopped { cgroup_s, waited_s: children_cpu_s() - before }
}

/// A web server stack in front of `git http-backend`, chosen by `FWC_SIM_SERVER`.
pub(crate) enum Web {
    Nginx(nginx::Nginx),
    Lighttpd(lighttpd::Lighttpd),
}

impl Web {
    /// `FWC_SIM_SERVER=nginx|lighttpd`, or `None` (the built-in front).
    pub(crate) fn from_env(root: &Path) -> Option<Web> {
        match std::env::var("FWC_SIM_SERVER").as_deref() {
            Ok("nginx") => Some(Web::Nginx(nginx::Nginx::start(root))),
            Ok("lighttpd") => Some(Web::Lighttpd(lighttpd::Lighttpd::start(root))),
            Ok(other) if !other.is_empty() => panic!("FWC_SIM_SERVER={other}: nginx or lighttpd"),
            _ => None,
        }
    }
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Web::Nginx(_) => "nginx+fcgiwrap+git-http-backend",
            Web::Lighttpd(_) => "lighttpd+mod_cgi+git-http-backend",
        }
    }
    pub(crate) fn port(&self) -> u16 {
        match self {
            Web::Nginx(n) => n.port,
            Web::Lighttpd(l) => l.port,
        }
    }
    pub(crate) fn acct(&self) -> &Option<PathBuf> {
        match self {
            Web::Nginx(n) => &n.acct,
            Web::Lighttpd(l) => &l.acct,
        }
    }
    /// CPU seconds of the server's processes so far.
    pub(crate) fn cpu_s(&self) -> f64 {
        match self {
            Web::Nginx(n) => n.cpu_s(),
            Web::Lighttpd(l) => l.cpu_s(),
        }
    }
    /// Requests so far: (static refs GETs, smart-HTTP requests).
    pub(crate) fn requests(&self) -> (u64, u64) {
        match self {
            Web::Nginx(n) => n.requests(),
            Web::Lighttpd(l) => l.requests(),
        }
    }
    pub(crate) fn stop(&mut self) -> Stopped {
        match self {
            Web::Nginx(n) => n.stop(),
            Web::Lighttpd(l) => l.stop(),
        }
    }
}
