//! Time each compiler phase on a generated repository: `fwc-bench-phases 10000`.
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let tree = fwc_bench::generate(n);
    let t = std::time::Instant::now();
    let mut map = fwc_compiler::read::source::SourceMap::default();
    let rs = fwc_compiler::read::syntax::parse_plain(&tree, &mut map).unwrap();
    eprintln!("parse   {:?}", t.elapsed());
    let t = std::time::Instant::now();
    fwc_compiler::check::check(&map, &rs).unwrap();
    eprintln!("check   {:?}", t.elapsed());
    let host = fwc_compiler::place::select::implicit_host();
    let t = std::time::Instant::now();
    let plan = fwc_compiler::place::select::plan_host(&rs, &host);
    eprintln!("select  {:?}", t.elapsed());
    let t = std::time::Instant::now();
    let nft = fwc_compiler::emit::nft::emit(&plan);
    eprintln!("nft     {:?}", t.elapsed());
    let t = std::time::Instant::now();
    let q = fwc_compiler::emit::qos::emit(&plan);
    let f = fwc_compiler::emit::forward::emit(&plan);
    eprintln!("qos+fwd {:?}", t.elapsed());
    let t = std::time::Instant::now();
    let _m = fwc_compiler::emit::manifest::emit(&plan, &map, None, nft.sha256(), &q, &f);
    eprintln!("manifest {:?}", t.elapsed());
}
