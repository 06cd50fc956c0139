//! `sluice lab up|down`: builds and removes the namespace lab.

use crate::error::CliError;
use clap::{Args, Subcommand};

/// `sluice lab`.
#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Builds the namespaces sluice-a (engine), sluice-b (Linux clients), sluice-k (Linux server).
    Up(LabUpArgs),
    /// Removes them (and the switched lab's).
    Down,
}

/// `sluice lab up`.
#[derive(Args, Debug)]
pub struct LabUpArgs {
    /// Also build the switched lab: namespace sluice-s for `sluice switch --lab`, with an
    /// uplink port into br0, and Linux client namespaces sluice-c1..cN (10.77.0.101..)
    /// behind it.
    #[arg(long)]
    switch: bool,
    /// Client namespaces behind the switch (1 to 64; implies --switch; default 2).
    #[arg(long)]
    clients: Option<u8>,
    /// Build the MTP lab instead: engines A (sluice-a) and E (sluice-e) joined only through
    /// two `sluice switch` namespaces (sluice-m1, sluice-m2) with two links between them;
    /// prints the two switches' command lines.
    #[arg(long, conflicts_with_all = ["switch", "clients"])]
    mtp: bool,
}

/// Runs `sluice lab up|down`.
pub fn run(cmd: &LabCommand) -> Result<(), CliError> {
    let lab = sluice_lab::Lab::new();
    match cmd {
        LabCommand::Up(LabUpArgs { mtp: true, .. }) => {
            lab.up_mtp()?;
            for s in sluice_lab::MtpSwitch::ALL {
                let args = sluice_lab::mtp_switch_args(s, sluice_lab::UPLINK_IMPAIRMENTS);
                println!("{s:?}: sluice switch {}", args.join(" "));
            }
        }
        LabCommand::Up(LabUpArgs {
            switch: false,
            clients: None,
            ..
        }) => lab.up()?,
        LabCommand::Up(LabUpArgs { clients, .. }) => lab.up_switched(clients.unwrap_or(2))?,
        LabCommand::Down => lab.down()?,
    }
    Ok(())
}
