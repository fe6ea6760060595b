//! Each command attempt's supervisor (a *shim*, as container runtimes call theirs): a small
//! process, the worker's own executable started again in shim mode ([`SHIM_ARG`]), that is the
//! parent of the attempt's command and
//!
//! - kills everything in the attempt's confinement when its worker dies (the worker holds the
//!   write end of the shim's stdin: `kill -9` of the worker closes it, and the shim reads
//!   end-of-file);
//! - freezes it when the worker's lease with the coordinator ([`crate::lease`]) runs out without
//!   a renewal — a worker that is stopped (`SIGSTOP`), hung, or cut off from its coordinator, or
//!   whose coordinator is paused, renews nothing — and thaws it when a renewal comes (the worker
//!   sends one only once the coordinator confirmed the attempt is still its own; otherwise the
//!   worker kills it), and kills it when no renewal came for so long after the lease's end that
//!   the coordinator has certainly given the worker up (`crate::lease::frozen_limit`: a worker
//!   that never gets back would otherwise keep it frozen for ever),
//!
//! so that no attempt runs on beside the replacement the coordinator places once it has given
//! the worker up.
//!
//! The protocol, one line per message:
//!
//! ```text
//! worker → shim (stdin)   {"argv":[…],"cgroups":[…],"kill":{…},"lease_end":N}   once, first
//!                         renew N                    the lease now ends at N (boot-clock ms; thaws)
//! shim → worker (stdout)  pid N                      the command started as process N
//!                         error TEXT                 it could not be started
//!                         fenced TEXT                the shim killed it, and why
//!                         exit N                     it ended; N is the raw wait status
//! ```
//!
//! The command's stdout and stderr are the shim's file descriptors 3 and 4 (the log files); its
//! stdin is `/dev/null`; its environment and work dir are the shim's. The command runs in its own
//! process group and joins the attempt's cgroups between fork and exec, and dies with its shim
//! (`PR_SET_PDEATHSIG`); the shim runs in a process group of its own, so a Ctrl-C at the
//! worker's terminal does not reach it, and outside the attempt's cgroups, so killing them does
//! not kill it. The shim's own messages go to its stderr, the worker's log.
//!
//! # Layout
//! - `protocol`: the messages, their text and parsing (pure);
//! - `serve`: the shim process;
//! - `client`: the worker's side, which starts a shim and talks to it.

mod client;
mod protocol;
mod serve;

pub use client::Supervisor;
pub use protocol::{SHIM_ARG, Spec, Status};
pub use serve::main;
