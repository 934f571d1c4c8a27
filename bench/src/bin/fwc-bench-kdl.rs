//! Raw parse time of the generated files: the `kdl` crate (used by `fwc fmt`) and fwc's own
//! reader (the compile path), to separate parsing from the rest of the compiler.
fn main() {
    for n in [1000usize, 10_000] {
        let tree = fwc_bench::generate(n);
        for (path, text) in &tree.files {
            let t = std::time::Instant::now();
            let doc = kdl::KdlDocument::parse_v2(text).unwrap();
            let kdl_time = t.elapsed();
            let t = std::time::Instant::now();
            let ours = fwc_compiler::read::kdl_reader::read(text).unwrap();
            let reader_time = t.elapsed();
            assert_eq!(doc.nodes().len(), ours.nodes().len());
            eprintln!("{n} {path} {} bytes {} nodes: kdl crate {kdl_time:?}, fwc reader {reader_time:?}", text.len(), doc.nodes().len());
        }
    }
}
