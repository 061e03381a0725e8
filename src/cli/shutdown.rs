//! SIGTERM, SIGINT and SIGHUP end a run gracefully: a systemd or Kubernetes restart must not
//! lose the last window, the pending export or the queued diagnosis-change logs. A thread of
//! signal-hook's turns each signal into a stop request of the library's ([`Stop`]); the
//! sampling loop waits on it instead of sleeping, so it stops at once, finishes the window in
//! progress and flushes.
//!
//! Background jobs of a non-interactive shell start with SIGINT ignored; registering a handler
//! replaces that, so `kill -INT` stops the agent wherever it was started.
//!
//! A second signal, once the flush has begun, ends it at once ([`Stop::again`]).

use std::time::Duration;

use gpuslack_receiver::stop::{channel_pair, Stop, StopCause};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The stop request, fed by this process's signals.
pub struct Shutdown {
    stop: Stop,
}

impl Shutdown {
    /// Starts listening for SIGTERM, SIGINT and SIGHUP.
    pub fn install() -> anyhow::Result<Shutdown> {
        let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])
            .map_err(|e| anyhow::anyhow!("installing the signal handlers: {e}"))?;
        let (handle, stop) = channel_pair();
        std::thread::Builder::new()
            .name("gpuslack-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    let cause = StopCause {
                        name: name(signal),
                        signal: Some(signal),
                    };
                    if !handle.stop(cause) {
                        break;
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("starting the signal thread: {e}"))?;
        Ok(Shutdown { stop })
    }

    /// The library's end of it, for the agent and the tick loop.
    pub fn stop(&mut self) -> &mut Stop {
        &mut self.stop
    }

    /// Whether a stop was asked for; does not wait.
    #[allow(dead_code)]
    pub fn requested(&mut self) -> bool {
        self.stop.requested()
    }

    /// Sleeps for `d`, or less if a stop is asked for; returns whether one was.
    pub fn wait(&mut self, d: Duration) -> bool {
        self.stop.wait(d)
    }

    /// Sends the signal that arrived to `pid` and forgets it, so that the next one is heard
    /// too: `diagnose -- COMMAND` passes signals through to its command.
    pub fn forward_to(&mut self, pid: u32) {
        if let Some(cause) = self.stop.take() {
            pass_on(cause, pid);
        }
    }
}

/// Passes a signal on to `pid`. An interactive Ctrl-C already reached the whole foreground
/// process group, the command included, so a SIGINT is not sent twice when standard input is
/// a terminal.
pub fn pass_on(cause: StopCause, pid: u32) {
    let Some(signal) = cause.signal else { return };
    // SAFETY: isatty only reads its argument.
    let interactive = unsafe { libc::isatty(0) } == 1;
    if signal == SIGINT && interactive {
        return;
    }
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: sends a signal to one process; an error (gone already) changes nothing.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

fn name(signal: i32) -> &'static str {
    match signal {
        SIGTERM => "SIGTERM",
        SIGINT => "SIGINT",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}
