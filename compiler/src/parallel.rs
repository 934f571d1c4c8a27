//! An ordered parallel map on scoped threads: items are handed out one at a time in a given
//! schedule, results come back in input order, so output never depends on scheduling. Workers
//! get the parser's big stack (KDL parsing recurses).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::read::limits;

/// How many workers a job of `items` items gets: every core, never more than the items.
pub fn workers(items: usize) -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(items).max(1)
}

/// `items.iter().map(f)` on up to `threads` threads, results in input order. Items are taken
/// in `schedule` order (e.g. largest first, so one big item does not finish last alone);
/// `schedule` must be a permutation of `0..items.len()`. A panic in `f` is resumed here.
pub fn map_scheduled<T: Sync, R: Send>(items: &[T], schedule: &[usize], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    assert_eq!(schedule.len(), items.len(), "the schedule lists every item once");
    if threads <= 1 || items.len() <= 1 {
        return limits::on_big_stack(|| items.iter().map(&f).collect());
    }
    let next = AtomicUsize::new(0);
    let done: Vec<Vec<(usize, R)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.min(items.len()))
            .map(|_| {
                std::thread::Builder::new()
                    .name("fwc-worker".into())
                    .stack_size(limits::PARSER_STACK_BYTES)
                    .spawn_scoped(scope, || {
                        let mut mine = Vec::new();
                        while let Some(&i) = schedule.get(next.fetch_add(1, Ordering::Relaxed)) {
                            mine.push((i, f(&items[i])));
                        }
                        mine
                    })
                    .expect("spawning a worker thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut results: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    for (i, r) in done.into_iter().flatten() {
        results[i] = Some(r);
    }
    results.into_iter().map(|r| r.expect("every item mapped")).collect()
}

/// `items.iter().map(f)` on every core, in input order.
pub fn map_ordered<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let schedule: Vec<usize> = (0..items.len()).collect();
    map_scheduled(items, &schedule, workers(items.len()), f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_input_order_whatever_the_schedule() {
        let items: Vec<u64> = (0..1000).collect();
        let schedule: Vec<usize> = (0..items.len()).rev().collect();
        for threads in [1, 2, 7] {
            let out = map_scheduled(&items, &schedule, threads, |x| x * x);
            assert_eq!(out, items.iter().map(|x| x * x).collect::<Vec<_>>());
        }
        assert!(map_ordered(&[] as &[u8], |x| *x).is_empty());
    }
}
