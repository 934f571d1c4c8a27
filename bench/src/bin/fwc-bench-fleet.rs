//! A fleet compiled host by host (each host parsing the repository, as before) and all at once
//! (`compile_all`: one parse, every core): `fwc-bench-fleet HOSTS RULES` -> JSON line.

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("numbers"));
    let hosts = args.next().unwrap_or(100);
    let rules = args.next().unwrap_or(1000);
    let tree = fwc_bench::generate_fleet(hosts, rules);
    let t = std::time::Instant::now();
    let names = fwc_compiler::ParsedRepo::parse(&tree).expect("parses").host_names();
    for h in &names {
        fwc_compiler::compile(&tree, Some(h), None).expect("compiles");
    }
    let serial = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    fwc_compiler::compile_all(&tree, None).expect("compiles");
    let parallel = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    fwc_compiler::check_fleet(&tree).expect("checks");
    let check = t.elapsed().as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{{\"hosts\":{hosts},\"rules\":{rules},\"cores\":{cores},\"serial_compile_seconds\":{serial:.3},\"compile_all_seconds\":{parallel:.3},\"check_fleet_seconds\":{check:.3}}}"
    );
}
