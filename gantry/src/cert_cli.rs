//! `gantry cert`: makes the cluster's CA and the certificates of the scheduler and the nodes
//! ([`crate::ca`]; see [`gantry_scheduler::tls`] for what each is used for and
//! `deploy/OPERATIONS.md` for the steps).

use crate::ca::{CaError, Role, create_ca, issue};
use std::path::PathBuf;

/// `gantry cert …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CertCommand {
    /// Create the cluster CA (`DIR/ca.pem`, `DIR/ca.key`); keep `ca.key` off the nodes.
    Ca {
        /// Where to write it.
        #[arg(long, default_value = "gantry-ca")]
        dir: PathBuf,
        /// A name for the cluster, in the CA's subject.
        #[arg(long, default_value = "gantry")]
        name: String,
        /// Validity in days.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
    /// Issue the scheduler's certificate for its host names and IP addresses (the first is its
    /// name), served on the agents' endpoint and the REST API.
    Scheduler {
        /// Host names and IP addresses agents and clients reach the scheduler by.
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
        #[command(flatten)]
        issue: IssueArgs,
    },
    /// Issue a node's client certificate: the agent can register only as this node.
    Node {
        /// The node name the agent registers as (its `node_name`, by default the host name).
        name: String,
        #[command(flatten)]
        issue: IssueArgs,
    },
}

/// Where a certificate comes from and goes, and for how long.
#[derive(Debug, Clone, clap::Args)]
pub struct IssueArgs {
    /// The CA directory.
    #[arg(long, default_value = "gantry-ca")]
    ca_dir: PathBuf,
    /// Where to write `NAME.pem` and `NAME.key`.
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Validity in days (397, the longest browsers accept for a server certificate).
    #[arg(long, default_value_t = 397)]
    days: u32,
}

/// Runs a `gantry cert` command; returns what it wrote, one line a file.
pub fn run(command: &CertCommand) -> Result<Vec<String>, CaError> {
    let (cert, key) = match command {
        CertCommand::Ca { dir, name, days } => create_ca(dir, name, *days)?,
        CertCommand::Scheduler { names, issue: i } => {
            issue(&i.ca_dir, Role::Scheduler, names, i.days, &i.out)?
        }
        CertCommand::Node { name, issue: i } => {
            issue(&i.ca_dir, Role::Node, std::slice::from_ref(name), i.days, &i.out)?
        }
    };
    Ok(vec![format!("certificate {}", cert.display()), format!("private key {} (mode 0600)", key.display())])
}
