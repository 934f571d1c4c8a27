//! The `fwc` command line (being written).
pub fn main() -> std::process::ExitCode { std::process::ExitCode::SUCCESS }
