//! Why a CLI command failed: the scheduler's refusal, an unreachable scheduler (with the hint
//! where to point the CLI), a bad argument, or the output.

use gantry_scheduler::api::client::ClientError;
use thiserror::Error;

/// Why a command failed. The binary prints it as `gantry: <message>` and exits non-zero.
#[derive(Debug, Error)]
pub enum CliError {
    /// The API refused the request or answered strangely; the message is the scheduler's.
    #[error(transparent)]
    Client(ClientError),
    /// The scheduler could not be reached.
    #[error(
        "{0}; is the scheduler running there? (point the CLI at it with --scheduler URL or GANTRY_SCHEDULER)"
    )]
    Unreachable(ClientError),
    /// An argument is wrong in a way clap cannot see.
    #[error("{0}")]
    Invalid(String),
    /// Writing to standard output failed.
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    /// The I/O runtime could not start.
    #[error("cannot start the I/O runtime: {0}")]
    Runtime(std::io::Error),
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Transport { .. } | ClientError::Timeout { .. } => CliError::Unreachable(e),
            e => CliError::Client(e),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Output(e)
    }
}
