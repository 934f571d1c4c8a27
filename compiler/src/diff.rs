//! Diff (being written)
