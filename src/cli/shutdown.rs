//! SIGTERM, SIGINT and SIGHUP end a run gracefully: a systemd or Kubernetes restart must not
//! lose the last window, the pending export or the queued diagnosis-change logs. A thread of
//! signal-hook's turns each signal into a message; the sampling loop waits on that channel
//! instead of sleeping, so it stops at once, finishes the window in progress and flushes.
//!
//! Background jobs of a non-interactive shell start with SIGINT ignored; registering a handler
//! replaces that, so `kill -INT` stops the agent wherever it was started.
//!
//! A second signal, once the flush has begun, ends it at once ([`Shutdown::again`]): the first
//! asked for a graceful stop, the second (Ctrl-C pressed twice, an operator who cannot wait
//! for a collector that does not answer) for an immediate one.

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The stop request, once one arrived.
pub struct Shutdown {
    signals: Receiver<i32>,
    received: Option<i32>,
}

impl Shutdown {
    /// Starts listening for SIGTERM, SIGINT and SIGHUP.
    pub fn install() -> anyhow::Result<Shutdown> {
        let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])
            .map_err(|e| anyhow::anyhow!("installing the signal handlers: {e}"))?;
        let (tx, rx) = channel();
        std::thread::Builder::new()
            .name("gpuslack-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if tx.send(signal).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("starting the signal thread: {e}"))?;
        Ok(Shutdown {
            signals: rx,
            received: None,
        })
    }

    /// Whether a stop was asked for; does not wait.
    pub fn requested(&mut self) -> bool {
        if self.received.is_none() {
            match self.signals.try_recv() {
                Ok(signal) => self.note(signal),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
            }
        }
        self.received.is_some()
    }

    /// Sleeps for `d`, or less if a stop is asked for; returns whether one was.
    pub fn wait(&mut self, d: Duration) -> bool {
        if self.received.is_none() {
            match self.signals.recv_timeout(d) {
                Ok(signal) => self.note(signal),
                Err(RecvTimeoutError::Timeout) => {}
                // The signal thread is gone: keep time without it.
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(d),
            }
        }
        self.received.is_some()
    }

    /// Sends the signal that arrived to `pid` and forgets it, so that the next one is heard
    /// too: `diagnose -- COMMAND` passes signals through to its command. An interactive
    /// Ctrl-C already reached the whole foreground process group, the command included, so a
    /// SIGINT is not sent twice when standard input is a terminal.
    pub fn forward_to(&mut self, pid: u32) {
        let Some(signal) = self.received.take() else {
            return;
        };
        // SAFETY: isatty and kill only read their arguments.
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

    /// Sleeps for `d`, or less if a signal comes on top of one already received: its name
    /// then. A first signal (the run ended on its own and is flushing) is noted, and the
    /// graceful stop it asks for is the one already under way.
    pub fn again(&mut self, d: Duration) -> Option<&'static str> {
        match self.signals.recv_timeout(d) {
            Ok(signal) if self.received.is_some() => Some(name(signal)),
            Ok(signal) => {
                self.note(signal);
                None
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(d);
                None
            }
        }
    }

    /// The signal's name, once one arrived.
    pub fn signal_name(&self) -> Option<&'static str> {
        self.received.map(name)
    }

    fn note(&mut self, signal: i32) {
        self.received = Some(signal);
        let name = self.signal_name().unwrap_or("a signal");
        tracing::info!(
            signal = name,
            "stopping: finishing the window in progress and flushing"
        );
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
