//! The fleet's rules repository: the git command line and the generated fwc.kdl.

use std::path::Path;
use std::process::Command;

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.name=sim", "-c", "user.email=sim@example.com", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

pub(crate) fn rules(hosts: usize, marker: &str) -> String {
    let policy = "rollout {\n    wave \"canary\" on=\"role=canary\"\n    wave \"early\" percent=10\n    wave \"all\"\n}\n";
    // A marker starting with "nopolicy" drops the rollout block (a commit that removes the policy).
    let mut s = format!("fwc 1\n// {marker}\n{}", if marker.starts_with("nopolicy") { "" } else { policy });
    for i in 0..hosts {
        let role = if i < 10 { "canary" } else { "web" };
        s.push_str(&format!("host \"host-{i:04}\" {{\n    labels role={role}\n}}\n"));
    }
    s.push_str("input policy=drop {\n    allow \"ssh\" proto=tcp port=22\n}\n");
    s
}
