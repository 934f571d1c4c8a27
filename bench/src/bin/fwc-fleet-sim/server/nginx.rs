//! nginx + fcgiwrap in front of `git http-backend` (Debian's packages), its CPU read from a
//! cpuacct cgroup or the live process tree.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{access_log_requests, acct_group, child, group_cpu_s, stop, Stopped};

/// nginx + fcgiwrap + `git http-backend` on 127.0.0.1 (Debian's packages): smart HTTP under
/// `/rules.git/`, the static `info/refs` under `/static/rules.git/info/refs`. Stopped on drop.
pub(crate) struct Nginx {
    /// A cpuacct (cgroup v1) group holding the server's processes, when one can be made.
    pub(crate) acct: Option<PathBuf>,
    nginx: std::process::Child,
    fcgiwrap: std::process::Child,
    pub(crate) port: u16,
    log: PathBuf,
    stopped: Option<Stopped>,
}

impl Nginx {
    pub(crate) fn start(root: &Path) -> Nginx {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = root.join("nginx");
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("fcgiwrap.sock");
        let acct = acct_group("nginx");
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
        Nginx { acct, nginx, fcgiwrap, port, log, stopped: None }
    }

    /// CPU seconds of nginx, fcgiwrap and every process below them: the cgroup's
    /// `cpuacct.usage`, or else the live process tree's times (which miss children reaped
    /// with SIGCHLD ignored: a lower bound).
    pub(crate) fn cpu_s(&self) -> f64 {
        if let Some(s) = self.acct.as_ref().and_then(|d| group_cpu_s(d)) {
            return s;
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
        access_log_requests(&self.log)
    }
}

impl Nginx {
    /// Stops the servers and waits for them (see [`stop`]).
    pub(crate) fn stop(&mut self) -> Stopped {
        if self.stopped.is_none() {
            self.stopped = Some(stop(&mut [&mut self.nginx, &mut self.fcgiwrap], &self.acct));
        }
        self.stopped.unwrap()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}
