//! Which scheduler a command talks to, and with which token and CA certificate.

use super::{CliError, DEFAULT_SCHEDULER};
use gantry_scheduler::api::client::Client;

/// Which scheduler to talk to.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// The scheduler's REST address.
    #[arg(long = "scheduler", env = "GANTRY_SCHEDULER", default_value = DEFAULT_SCHEDULER, value_name = "URL")]
    pub scheduler: String,
    /// Bearer token for a scheduler with `[security] tokens_file` (visible in the process list:
    /// prefer --token-file).
    #[arg(long, env = "GANTRY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// A file holding the bearer token (used when no --token or GANTRY_TOKEN is given). Without
    /// either, a loopback scheduler gets the token of `gantry dev` started in this directory
    /// (./gantry-dev/cli-token), if there is one.
    #[arg(long = "token-file", env = "GANTRY_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// The cluster CA certificate (`gantry cert ca`'s `ca.pem`) for an `https://` scheduler.
    #[arg(long = "ca-cert", env = "GANTRY_CA_CERT", value_name = "PEM")]
    pub ca_cert: Option<std::path::PathBuf>,
}

impl Connection {
    /// A client of this scheduler, sending the token if there is one.
    pub fn client(&self) -> Result<Client, CliError> {
        Ok(Client::with_ca(&self.scheduler, self.ca_cert.as_deref())?.with_token(self.token()?))
    }

    /// The token to send: `--token`/`GANTRY_TOKEN`, else the token file's
    /// (`--token-file`/`GANTRY_TOKEN_FILE`; unreadable is an error), else the token of a
    /// `gantry dev` started in this directory for a loopback scheduler (skipped if unreadable),
    /// else none.
    pub fn token(&self) -> Result<Option<String>, CliError> {
        if let Some(token) = self.token.as_ref().filter(|t| !t.is_empty()) {
            return Ok(Some(token.clone()));
        }
        if let Some(path) = self.token_file.as_ref().filter(|p| !p.as_os_str().is_empty()) {
            return crate::token_file::read(path).map(Some).map_err(CliError::Invalid);
        }
        Ok(crate::token_file::dev_default(&self.scheduler).and_then(|p| crate::token_file::read(&p).ok()))
    }
}
