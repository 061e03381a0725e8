//! gpuslack: tells whether a GPU is really working. A thin command line over the
//! `gpuslack-receiver` pipeline; each subcommand lives in its own module under `cli/`.

mod cli;
mod no_libcuda;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
