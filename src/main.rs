//! gpuslack: tells whether a GPU is really working. A thin command line over the
//! `gpuslack-receiver` pipeline; each subcommand lives in its own module under `cli/`.

mod cli;
mod no_libcuda;

use std::process::ExitCode;

/// mimalloc, not glibc's malloc. An offline replay builds each window on one thread,
/// diagnoses it on a second and writes its line on a third, so most of its memory is freed by
/// another thread than the one that allocated it. glibc serialises such frees on the
/// allocating thread's arena lock: a day's replay on four cores took 2.2–2.4 s, 0.6 s of it in
/// the kernel, against 1.5 s with mimalloc, whose frees from other threads go to a list the
/// owner collects (docs/benchmarks.md, "Fifth pass"). Its `no_thp` feature keeps it from
/// advising its memory into transparent huge pages: each first touch of one would add 2 MiB
/// to a run that needs a few. The library sets no allocator; a program embedding it chooses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    cli::main()
}
