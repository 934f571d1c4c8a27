//! lighttpd with mod_cgi in front of `git http-backend` (Debian's packages). lighttpd waits
//! for its CGI processes, so their CPU reaches this process when it stops and waits for
//! lighttpd: a run under `../shared/quiet` counts the server as the benchmark's own work
//! (nginx's fcgiwrap lets the kernel reap its CGIs, and their CPU reaches nobody).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{access_log_requests, acct_group, child, group_cpu_s, stop, Stopped};

/// lighttpd + mod_cgi + `git http-backend` on 127.0.0.1: smart HTTP under `/rules.git/`, the
/// static `info/refs` under `/static/rules.git/info/refs` (the same URLs as nginx's). Stopped
/// on drop.
pub(crate) struct Lighttpd {
    /// A cpuacct (cgroup v1) group holding the server's processes, when one can be made.
    pub(crate) acct: Option<PathBuf>,
    lighttpd: std::process::Child,
    pub(crate) port: u16,
    log: PathBuf,
    stopped: Option<Stopped>,
}

impl Lighttpd {
    pub(crate) fn start(root: &Path) -> Lighttpd {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = root.join("lighttpd");
        std::fs::create_dir_all(&dir).unwrap();
        let acct = acct_group("lighttpd");
        // A CGI that outlives lighttpd is reparented to this process and reaped by `stop`.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
        let log = dir.join("access.log");
        // `/rules.git` is aliased to the CGI itself: lighttpd passes the rest of the path as
        // PATH_INFO (`/info/refs`, `/git-upload-pack`) and http-backend finds the repository
        // at GIT_PROJECT_ROOT + PATH_INFO less the service.
        let conf = format!(
            "server.document-root = \"{root}\"\nserver.bind = \"127.0.0.1\"\nserver.port = {port}\n\
             server.errorlog = \"{d}/error.log\"\nserver.max-fds = 16384\nserver.max-connections = 4096\n\
             server.modules = ( \"mod_alias\", \"mod_setenv\", \"mod_cgi\", \"mod_accesslog\" )\n\
             accesslog.filename = \"{log}\"\nmimetype.assign = ( \"\" => \"text/plain\" )\n\
             alias.url = ( \"/static/rules.git/info/refs\" => \"{root}/rules.git/info/refs\",\n\
             \x20             \"/rules.git\" => \"/usr/lib/git-core/git-http-backend\" )\n\
             $HTTP[\"url\"] =~ \"^/rules\\.git/\" {{\n  cgi.assign = ( \"\" => \"\" )\n\
             \x20 setenv.set-environment = ( \"GIT_PROJECT_ROOT\" => \"{root}/rules.git\", \"GIT_HTTP_EXPORT_ALL\" => \"\" )\n}}\n",
            d = dir.display(),
            log = log.display(),
            root = root.display(),
        );
        std::fs::write(dir.join("lighttpd.conf"), conf).unwrap();
        let lighttpd = child(Command::new("lighttpd").arg("-D").arg("-f").arg(dir.join("lighttpd.conf")), &acct).spawn().expect("lighttpd (apt install lighttpd)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "lighttpd did not start: {}", std::fs::read_to_string(dir.join("error.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(50));
        }
        Lighttpd { acct, lighttpd, port, log, stopped: None }
    }

    /// CPU seconds of lighttpd and its CGIs: the cgroup's `cpuacct.usage`, or else lighttpd's
    /// own times with those of the CGIs it has waited for (a running CGI is missing: a lower
    /// bound between polls).
    pub(crate) fn cpu_s(&self) -> f64 {
        if let Some(s) = self.acct.as_ref().and_then(|d| group_cpu_s(d)) {
            return s;
        }
        let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.lighttpd.id())).unwrap_or_default();
        let f: Vec<f64> = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("").split_whitespace().map(|v| v.parse().unwrap_or(0.0)).collect();
        // after the comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
        (11..=14).map(|i| f.get(i).copied().unwrap_or(0.0)).sum::<f64>() / tick
    }

    /// Requests so far: (static refs GETs, smart-HTTP requests).
    pub(crate) fn requests(&self) -> (u64, u64) {
        access_log_requests(&self.log)
    }

    /// Stops lighttpd and waits for it (see [`stop`]).
    pub(crate) fn stop(&mut self) -> Stopped {
        if self.stopped.is_none() {
            self.stopped = Some(stop(&mut [&mut self.lighttpd], &self.acct));
        }
        self.stopped.unwrap()
    }
}

impl Drop for Lighttpd {
    fn drop(&mut self) {
        self.stop();
    }
}
