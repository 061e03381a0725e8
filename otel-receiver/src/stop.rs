//! The stop request an agent or a tick loop waits on. The library installs no signal handler:
//! a program that embeds the agent decides what stops it (the `gpuslack` binary feeds SIGTERM,
//! SIGINT and SIGHUP from its signal thread, a daemon its own shutdown), and hands each request
//! to a [`StopHandle`]. The loops wait on the [`Stop`] end instead of sleeping, so they stop at
//! once, finish the window in progress and flush.
//!
//! A second request, once the flush has begun, ends it at once ([`Stop::again`]): the first
//! asked for a graceful stop, the second (Ctrl-C pressed twice, an operator who cannot wait for
//! a collector that does not answer) for an immediate one.

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::Duration;

/// Why a stop was asked for: a name for the messages (`SIGTERM`, `shutdown`…) and, where it
/// was a signal, its number, so that it can be passed on to a watched command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopCause {
    /// What the messages call it.
    pub name: &'static str,
    /// The signal's number, where the request was a signal.
    pub signal: Option<i32>,
}

impl StopCause {
    /// A request that is not a signal (an embedding program's own shutdown).
    pub const REQUESTED: StopCause = StopCause {
        name: "a stop request",
        signal: None,
    };
}

/// The sending end: cheap to clone, usable from any thread.
#[derive(Debug, Clone)]
pub struct StopHandle {
    tx: Sender<StopCause>,
}

impl StopHandle {
    /// Asks for a stop; a second call during the final flush cuts it short. Returns false once
    /// the agent is gone.
    pub fn stop(&self, cause: StopCause) -> bool {
        self.tx.send(cause).is_ok()
    }
}

/// The receiving end, owned by the loop that stops.
#[derive(Debug)]
pub struct Stop {
    rx: Receiver<StopCause>,
    received: Option<StopCause>,
}

/// A stop handle and the stop it feeds.
pub fn channel_pair() -> (StopHandle, Stop) {
    let (tx, rx) = channel();
    (StopHandle { tx }, Stop { rx, received: None })
}

impl Stop {
    /// A stop that nothing can request: the loop ends on its own (a replay's end, a deadline).
    pub fn never() -> Stop {
        let (handle, stop) = channel_pair();
        // Kept alive with the stop, so waiting on it sleeps instead of finding it closed.
        std::mem::forget(handle);
        stop
    }

    /// Whether a stop was asked for; does not wait.
    pub fn requested(&mut self) -> bool {
        if self.received.is_none() {
            match self.rx.try_recv() {
                Ok(cause) => self.note(cause),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
            }
        }
        self.received.is_some()
    }

    /// Sleeps for `d`, or less if a stop is asked for; returns whether one was.
    pub fn wait(&mut self, d: Duration) -> bool {
        if self.received.is_none() {
            match self.rx.recv_timeout(d) {
                Ok(cause) => self.note(cause),
                Err(RecvTimeoutError::Timeout) => {}
                // Every handle is gone: keep time without them.
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(d),
            }
        }
        self.received.is_some()
    }

    /// Forgets the request that arrived and returns it, so that the next one is heard too:
    /// `diagnose -- COMMAND` passes signals on to its command instead of stopping.
    pub fn take(&mut self) -> Option<StopCause> {
        self.received.take()
    }

    /// Sleeps for `d`, or less if a request comes on top of one already received: its name
    /// then. A first request (the run ended on its own and is flushing) is noted, and the
    /// graceful stop it asks for is the one already under way.
    pub fn again(&mut self, d: Duration) -> Option<&'static str> {
        match self.rx.recv_timeout(d) {
            Ok(cause) if self.received.is_some() => Some(cause.name),
            Ok(cause) => {
                self.note(cause);
                None
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(d);
                None
            }
        }
    }

    /// The request's name, once one arrived.
    pub fn cause_name(&self) -> Option<&'static str> {
        self.received.map(|c| c.name)
    }

    fn note(&mut self, cause: StopCause) {
        self.received = Some(cause);
        tracing::info!(
            signal = cause.name,
            "stopping: finishing the window in progress and flushing"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_ends_a_wait_and_a_second_one_is_heard_as_again() {
        let (handle, mut stop) = channel_pair();
        assert!(!stop.requested());
        assert!(handle.stop(StopCause::REQUESTED));
        assert!(stop.wait(Duration::from_secs(5)));
        assert_eq!(stop.cause_name(), Some("a stop request"));
        assert_eq!(stop.again(Duration::from_millis(1)), None);
        handle.stop(StopCause {
            name: "SIGINT",
            signal: Some(2),
        });
        assert_eq!(stop.again(Duration::from_secs(5)), Some("SIGINT"));
    }

    #[test]
    fn a_taken_request_is_forgotten() {
        let (handle, mut stop) = channel_pair();
        handle.stop(StopCause::REQUESTED);
        assert!(stop.requested());
        assert_eq!(stop.take(), Some(StopCause::REQUESTED));
        assert!(!stop.requested());
    }
}
