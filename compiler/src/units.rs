//! Units (being written)
