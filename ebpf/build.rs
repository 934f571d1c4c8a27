//! Compiles `qos.bpf.c` and `sockmap.bpf.c` with clang (`-target bpf -O2 -g -mcpu=v3`) into
//! `$OUT_DIR/NAME.bpf.o`, which `src/lib.rs` and `src/sockmap.rs` embed with `include_bytes!`.
//! Set `CLANG` to use another compiler.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    for f in ["qos.bpf.c", "qos_maps.h", "sockmap.bpf.c"] {
        println!("cargo:rerun-if-changed={}", dir.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // Debian keeps <asm/types.h> under the multiarch directory, which -target bpf does not search.
    let multiarch = ["/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu"]
        .into_iter()
        .find(|d| std::path::Path::new(d).join("asm/types.h").exists());
    for name in ["qos", "sockmap"] {
        compile(&clang, &dir, multiarch, &dir.join(format!("{name}.bpf.c")), &out_dir.join(format!("{name}.bpf.o")));
    }
}

fn compile(clang: &str, dir: &std::path::Path, multiarch: Option<&str>, src: &std::path::Path, out: &std::path::Path) {
    let mut cmd = Command::new(clang);
    cmd.args(["-target", "bpf", "-O2", "-g", "-mcpu=v3", "-Wall", "-Werror", "-Wno-unused-function"]);
    cmd.arg("-I").arg(dir);
    if let Some(m) = multiarch {
        cmd.args(["-I", m]);
    }
    cmd.arg("-c").arg(src).arg("-o").arg(out);
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => panic!(
            "fwc-qos: cannot run `{clang}` ({e}). The eBPF QoS program is C compiled with clang \
             (-target bpf). Install clang and the libbpf headers (Debian: `apt-get install clang \
             libbpf-dev linux-libc-dev`) or point CLANG at a clang binary."
        ),
    };
    if !status.success() {
        panic!("fwc-qos: `{cmd:?}` failed ({status}); see the compiler output above");
    }
}
