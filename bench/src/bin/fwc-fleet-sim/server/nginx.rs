//! nginx + fcgiwrap in front of `git http-backend` (Debian's packages), its CPU read from a
//! cpuacct cgroup or the live process tree.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// nginx + fcgiwrap + `git http-backend` on 127.0.0.1 (Debian's packages): smart HTTP under
/// `/rules.git/`, the static `info/refs` under `/static/rules.git/info/refs`. Stopped on drop.
pub(crate) struct Nginx {
    /// A cpuacct (cgroup v1) group holding the server's processes, when one can be made.
    pub(crate) acct: Option<PathBuf>,
    nginx: std::process::Child,
    fcgiwrap: std::process::Child,
    pub(crate) port: u16,
    log: PathBuf,
}

/// A server process that dies with the simulation (also when it is killed), in the cpuacct
/// cgroup `acct` when there is one (so that every descendant's CPU counts, reaped or not).
fn child<'a>(c: &'a mut Command, acct: &Option<PathBuf>) -> &'a mut Command {
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

impl Nginx {
    pub(crate) fn start(root: &Path) -> Nginx {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = root.join("nginx");
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("fcgiwrap.sock");
        let acct = Path::new("/sys/fs/cgroup/cpuacct").join(format!("fwc-sim-{}", std::process::id()));
        let acct = std::fs::create_dir(&acct).is_ok().then_some(acct);
        // The servers' workers outlive their masters by a moment: they are reparented to this
        // process (not to an init that may not reap them) and reaped on drop.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
        let fcgiwrap = child(Command::new("fcgiwrap").args(["-c", "8", "-s"]).arg(format!("unix:{}", sock.display())), &acct).spawn().expect("fcgiwrap (apt install fcgiwrap)");
        let log = dir.join("access.log");
        let conf = format!(
            "daemon off;\n{user}worker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{ worker_connections 4096; }}\n\
             http {{\n access_log {log} combined;\n client_body_temp_path {d}/body;\n fastcgi_temp_path {d}/fcgi;\n proxy_temp_path {d}/proxy;\n\
             uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
             server {{\n  listen 127.0.0.1:{port};\n\
              location = /static/rules.git/info/refs {{ alias {root}/rules.git/info/refs; default_type text/plain; }}\n\
              location /rules.git/ {{\n   client_max_body_size 0;\n   include /etc/nginx/fastcgi_params;\n\
               fastcgi_param SCRIPT_FILENAME /usr/lib/git-core/git-http-backend;\n   fastcgi_param GIT_PROJECT_ROOT {root};\n\
               fastcgi_param GIT_HTTP_EXPORT_ALL \"\";\n   fastcgi_param PATH_INFO $uri;\n   fastcgi_param GIT_PROTOCOL $http_git_protocol;\n\
               fastcgi_pass unix:{sock};\n  }}\n }}\n}}\n",
            user = if unsafe { libc::geteuid() } == 0 { "user root;\n" } else { "" },
            d = dir.display(),
            log = log.display(),
            root = root.display(),
            sock = sock.display(),
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let nginx = child(Command::new("nginx").arg("-c").arg(dir.join("nginx.conf")).arg("-e").arg(dir.join("error.log")), &acct).spawn().expect("nginx (apt install nginx-light)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() || !sock.exists() {
            assert!(Instant::now() < deadline, "nginx/fcgiwrap did not start: {}", std::fs::read_to_string(dir.join("error.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(50));
        }
        Nginx { acct, nginx, fcgiwrap, port, log }
    }

    /// CPU seconds of nginx, fcgiwrap and every process below them: the cgroup's
    /// `cpuacct.usage`, or else the live process tree's times (which miss children reaped
    /// with SIGCHLD ignored: a lower bound).
    pub(crate) fn cpu_s(&self) -> f64 {
        if let Some(ns) = self.acct.as_ref().and_then(|d| std::fs::read_to_string(d.join("cpuacct.usage")).ok()).and_then(|v| v.trim().parse::<f64>().ok()) {
            return ns / 1e9;
        }
        let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let mut procs: Vec<(u32, u32, f64)> = vec![];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
            let f: Vec<&str> = rest.split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            // after the comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
            procs.push((pid, num(1) as u32, (num(11) + num(12) + num(13) + num(14)) / tick));
        }
        let roots = [self.nginx.id(), self.fcgiwrap.id()];
        let mut ours: Vec<u32> = roots.to_vec();
        let mut grew = true;
        while grew {
            grew = false;
            for (pid, ppid, _) in &procs {
                if ours.contains(ppid) && !ours.contains(pid) {
                    ours.push(*pid);
                    grew = true;
                }
            }
        }
        procs.iter().filter(|(pid, _, _)| ours.contains(pid)).map(|p| p.2).sum()
    }

    /// Requests so far: (static refs GETs, smart-HTTP requests).
    pub(crate) fn requests(&self) -> (u64, u64) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let stat = text.lines().filter(|l| l.contains("GET /static/")).count() as u64;
        (stat, text.lines().count() as u64 - stat)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // Each server is its own process group: its workers go with it.
        for c in [&mut self.nginx, &mut self.fcgiwrap] {
            unsafe { libc::kill(-(c.id() as i32), libc::SIGTERM) };
            let _ = c.wait();
        }
        if let Some(d) = &self.acct {
            for pid in std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default().lines().filter_map(|l| l.parse::<i32>().ok()) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            // The group empties when the last worker has exited.
            for _ in 0..50 {
                while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
                if std::fs::remove_dir(d).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
