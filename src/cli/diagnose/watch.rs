//! `gpuslack diagnose -- COMMAND`: runs a job and reports on the GPUs it used, for as long as
//! it ran. The command inherits standard input, output and error; SIGTERM, SIGHUP (and SIGINT
//! not already sent by the terminal) are passed to it; its exit code is gpuslack's. Every GPU is
//! sampled, and the report keeps those on which a process of the command's tree appeared, with
//! the time and energy the job spent in each verdict: the cost of its slack.
//!
//! A command that cannot start exits as a shell's would: 127 when it is not found, 126 when
//! it is found but cannot be executed, never 1, which would read as the job's own failure. The
//! command is sent SIGTERM should gpuslack die first (SIGKILL, the OOM killer): it is not left
//! running, unwatched, after its watcher.

use std::collections::BTreeSet;
use std::io;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result};
use gpuslack_receiver::attribution::descendants;
use gpuslack_receiver::attribution::procfs::Procfs;
use gpuslack_receiver::report::{duration, HumanReport, SourceLabel};

use super::{show, Args};
use crate::cli::live;
use crate::cli::shutdown::Shutdown;

/// The command's exit code as gpuslack's: its own, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// A shell's exit code for a command it cannot find.
pub const EXIT_NOT_FOUND: u8 = 127;
/// A shell's exit code for a command it found and cannot execute.
pub const EXIT_CANNOT_EXECUTE: u8 = 126;

/// Why `program` did not start, said on stderr, and the shell's exit code for it.
fn cannot_start(program: &str, e: &io::Error) -> ExitCode {
    let (code, why) = match e.kind() {
        // A script whose `#!` interpreter is missing fails with ENOENT too, yet is there.
        io::ErrorKind::NotFound if program.contains('/') && Path::new(program).exists() => (
            EXIT_CANNOT_EXECUTE,
            "found, but its interpreter (the #! line) was not",
        ),
        io::ErrorKind::NotFound if program.contains('/') => (EXIT_NOT_FOUND, "no such file"),
        io::ErrorKind::NotFound => (EXIT_NOT_FOUND, "not found on PATH"),
        io::ErrorKind::PermissionDenied => (
            EXIT_CANNOT_EXECUTE,
            "found, but not executable (no execute permission, or a directory)",
        ),
        _ => (EXIT_CANNOT_EXECUTE, "found, but could not be executed"),
    };
    errln!("gpuslack: cannot run {program:?}: {why} ({e})");
    ExitCode::from(code)
}

/// Has the kernel send `command`'s process SIGTERM when gpuslack dies, however it dies: a
/// SIGKILLed watcher must not leave the job running, unwatched, its exit code lost. (The
/// signal follows the death of the thread that spawned the command: the main thread, which
/// lives as long as gpuslack. A set-user-ID program clears it when it is executed.)
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls may be made: prctl and getppid are plain system calls, and the
    // errors are built from an errno without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            // gpuslack may have died between fork and prctl: then no signal will come, and
            // the child has been handed to another parent. It does not start.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let sampling = args.sampling.sampling()?;
    let mut shutdown = Shutdown::install()?;
    let program = &args.command[0];
    let mut command = Command::new(program);
    command.args(&args.command[1..]);
    die_with_parent(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Ok(cannot_start(program, &e)),
    };
    let pid = child.id();
    let mut source = match live::open(sampling) {
        Ok(source) => source,
        Err(e) => {
            errln!("gpuslack: cannot watch {program:?}'s GPUs ({e}); running it unwatched");
            loop {
                if let Some(status) = child.try_wait().context("waiting for the command")? {
                    return Ok(exit_code(status));
                }
                if shutdown.wait(Duration::from_millis(200)) {
                    shutdown.forward_to(pid);
                }
            }
        }
    };
    let mut pipeline = args
        .pipeline
        .pipeline_for_live(source.facts())?
        .tolerating_clock_steps();
    let procfs = Procfs::system();
    let mut report = HumanReport::default();
    let mut used: BTreeSet<u32> = BTreeSet::new();
    let mut tree = descendants(&procfs.parents(), pid);
    let started = std::time::Instant::now();
    let mut last_tree = started;
    let mut exited = None;
    let attributor = live::attributor(&args.sampling, &source);
    live::run_ticks_until(
        &mut source,
        attributor,
        None,
        &mut shutdown,
        live::OnSignal::ForwardTo(pid),
        |samples| {
            if last_tree.elapsed() >= Duration::from_secs(1) {
                tree = descendants(&procfs.parents(), pid);
                last_tree = std::time::Instant::now();
            }
            for s in &samples {
                if let Some(processes) = &s.processes {
                    if processes.iter().any(|p| tree.contains(&p.pid)) {
                        used.insert(s.gpu);
                    }
                }
                for r in pipeline.push(s)? {
                    report.add(r);
                }
            }
            exited = child.try_wait().context("waiting for the command")?;
            Ok(match exited {
                Some(_) => ControlFlow::Break(()),
                None => ControlFlow::Continue(()),
            })
        },
    )?;
    let status = match exited {
        Some(status) => status,
        None => child.wait().context("waiting for the command")?,
    };
    for r in pipeline.finish() {
        report.add(r);
    }
    report.retain_gpus(&used);
    let command = args.command.join(" ");
    let ran = started.elapsed().as_secs_f64();
    if used.is_empty() {
        errln!(
            "gpuslack: {command:?} ran {} and used no GPU that gpuslack could see",
            duration(ran)
        );
    } else {
        let label = SourceLabel::Live {
            host: super::hostname(),
            job: Some(format!(
                "the job `{command}` ({} on GPU {})",
                duration(ran),
                list(&used)
            )),
        };
        show(args, &report, &label, |gpu| {
            pipeline.diagnoser().facts(gpu).clone()
        })?;
        if let Some(line) = slack_line(args, &report) {
            errln!("gpuslack: {line}");
        }
    }
    Ok(exit_code(status))
}

fn list(gpus: &BTreeSet<u32>) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The bottom line on stderr too, where a report written as JSON to a file leaves the
/// terminal empty: how much of the job's GPU time was slack and what to try first.
fn slack_line(args: &Args, report: &HumanReport) -> Option<String> {
    let prices = args.prices().ok()?;
    let bottom = report.bottom_line(&prices);
    bottom.top_cause?;
    Some(bottom.text(&prices))
}
