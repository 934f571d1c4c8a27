//! Benchmark support: generators of large rule repositories.
