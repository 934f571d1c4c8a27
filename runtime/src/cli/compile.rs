//! `fwc check`, `fwc compile`, `fwc plan --from`, `fwc fmt`, `fwc schema`, `fwc completions`:
//! the commands that only read rule files. (being written)
use std::process::ExitCode;
use super::Global;

#[derive(Debug, clap::Args)] pub struct CheckArgs {}
#[derive(Debug, clap::Args)] pub struct CompileArgs {}
#[derive(Debug, clap::Args)] pub struct PlanArgs {}
#[derive(Debug, clap::Args)] pub struct FmtArgs {}
#[derive(Debug, clap::Args)] pub struct SchemaArgs {}
#[derive(Debug, clap::Args)] pub struct CompletionsArgs {}
pub fn check(_: CheckArgs, _: &Global) -> miette::Result<ExitCode> { Ok(ExitCode::SUCCESS) }
pub fn compile(_: CompileArgs, _: &Global) -> miette::Result<ExitCode> { Ok(ExitCode::SUCCESS) }
pub fn plan(_: PlanArgs, _: &Global) -> miette::Result<ExitCode> { Ok(ExitCode::SUCCESS) }
pub fn fmt(_: FmtArgs, _: &Global) -> miette::Result<ExitCode> { Ok(ExitCode::SUCCESS) }
pub fn schema(_: SchemaArgs, _: &Global) -> miette::Result<ExitCode> { Ok(ExitCode::SUCCESS) }
pub fn completions(_: CompletionsArgs) -> miette::Result<ExitCode> { Ok(ExitCode::SUCCESS) }
