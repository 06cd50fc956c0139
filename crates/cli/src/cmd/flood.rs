//! `sluice flood`: spoofed SYNs at a set rate from a lab namespace, with the rate achieved.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Args;
use sluice_lab::flood::{flood, FloodSpec, DEFAULT_SOURCES};
use sluice_lab::{BRIDGE, ENGINE_IP, ENGINE_MAC, KERNEL_IP, KERNEL_MAC, NS_CLIENT};
use sluice_wire::EthernetAddress;

use crate::error::CliError;

/// `sluice flood`.
#[derive(Args, Debug)]
pub struct FloodArgs {
    /// Address and port to flood (the lab's engine 10.77.0.1 or Linux 10.77.0.3, or any
    /// with --dst-mac).
    #[arg(long)]
    target: SocketAddrV4,
    /// SYNs per second; 0 sends as fast as one core can.
    #[arg(long, default_value_t = 300_000)]
    rate: u64,
    /// How long to flood.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// The interface to send on.
    #[arg(long, default_value = BRIDGE)]
    iface: String,
    /// The namespace to send from ("" for this one).
    #[arg(long, default_value = NS_CLIENT)]
    netns: String,
    /// The next hop's MAC (aa:bb:cc:dd:ee:ff); known for the lab's engine and Linux.
    #[arg(long, value_parser = parse_mac)]
    dst_mac: Option<EthernetAddress>,
    /// The spoofed sources, a prefix (default 198.18.0.0/15).
    #[arg(long, value_parser = parse_prefix)]
    sources: Option<(Ipv4Addr, u8)>,
    /// Seed of the sources, ports and sequence numbers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Runs `sluice flood`: floods, then prints what it achieved.
pub fn run(args: &FloodArgs) -> Result<(), CliError> {
    if !(args.seconds > 0.0 && args.seconds <= 86_400.0) {
        return Err(CliError::usage("--seconds must be in (0, 86400]"));
    }
    let dst_mac = match (args.dst_mac, *args.target.ip()) {
        (Some(mac), _) => mac,
        (None, ip) if ip == ENGINE_IP => EthernetAddress(ENGINE_MAC),
        (None, ip) if ip == KERNEL_IP => EthernetAddress(KERNEL_MAC),
        (None, ip) => {
            return Err(CliError::usage(format!(
                "--dst-mac: the next hop's MAC towards {ip} is not known; give it"
            )))
        }
    };
    sluice_lab::check_root().map_err(CliError::Lab)?;
    let spec = FloodSpec {
        iface: args.iface.clone(),
        netns: (!args.netns.is_empty()).then(|| args.netns.clone()),
        dst_mac,
        target: args.target,
        sources: args.sources.unwrap_or(DEFAULT_SOURCES),
        rate: args.rate,
        duration: Duration::from_secs_f64(args.seconds),
        seed: args.seed,
    };
    let report = flood(&spec, &AtomicBool::new(false)).map_err(CliError::Lab)?;
    println!(
        "sent {} SYNs in {:.2} s: {:.0} SYN/s (refused by the socket: {})",
        report.sent,
        report.seconds,
        report.rate(),
        report.dropped
    );
    Ok(())
}

/// A MAC written aa:bb:cc:dd:ee:ff.
fn parse_mac(s: &str) -> Result<EthernetAddress, String> {
    let bytes: Vec<u8> = s
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{s:?} is not a MAC: {e}"))?;
    let mac: [u8; 6] = bytes
        .try_into()
        .map_err(|_| format!("{s:?} is not a MAC: six bytes, colon-separated"))?;
    Ok(EthernetAddress(mac))
}

/// A prefix written a.b.c.d/len.
fn parse_prefix(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (ip, len) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not a prefix: a.b.c.d/len"))?;
    let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{ip:?}: {e}"))?;
    let len: u8 = len.parse().map_err(|e| format!("{len:?}: {e}"))?;
    if len > 32 {
        return Err(format!("/{len}: at most 32"));
    }
    Ok((ip, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_and_prefixes_parse() {
        assert_eq!(
            parse_mac("02:77:00:00:00:01").unwrap(),
            EthernetAddress(ENGINE_MAC)
        );
        assert!(parse_mac("02:77:00:00:00").is_err());
        assert!(parse_mac("zz:77:00:00:00:01").is_err());
        assert_eq!(
            parse_prefix("198.18.0.0/15").unwrap(),
            (Ipv4Addr::new(198, 18, 0, 0), 15)
        );
        assert!(parse_prefix("198.18.0.0/33").is_err());
        assert!(parse_prefix("198.18.0.0").is_err());
    }
}
