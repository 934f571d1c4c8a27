//! Raw kdl-crate parse time of the generated files (to separate kdl's cost from fwc's).
fn main() {
    for n in [1000usize, 10_000] {
        let tree = fwc_bench::generate(n);
        for (path, text) in &tree.files {
            let t = std::time::Instant::now();
            let doc = kdl::KdlDocument::parse_v2(text).unwrap();
            eprintln!("{n} {path} {} bytes {} nodes: {:?}", text.len(), doc.nodes().len(), t.elapsed());
        }
    }
}
