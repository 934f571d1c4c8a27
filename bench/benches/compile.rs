//! Criterion bench: parse + check + select + emit of generated repositories of 1k, 10k and
//! 100k rules (mixed kinds). Run: `cargo bench -p fwc-bench --bench compile`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    for n in [1_000usize, 10_000, 100_000] {
        let tree = fwc_bench::generate(n);
        group.throughput(Throughput::Elements(fwc_bench::rule_count(n) as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &tree, |b, tree| {
            b.iter(|| fwc_compiler::compile(tree, None, None).expect("generated repos compile"))
        });
    }
    group.finish();
}

criterion_group!(benches, compile);
criterion_main!(benches);
