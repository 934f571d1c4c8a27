fn main() -> std::process::ExitCode { fwc_runtime::cli::main() }
