//! `sluice ctl [--socket PATH] conns|counters|set-cc|set-rate`: a control tool for a running
//! engine in the style of `ss -tni` and `nstat` (docs/ctl.md). It attaches like an
//! application (Hello), then sends admin requests (uid 0 or the engine's uid only) and
//! follows each list's pages to the end. `module load|unload|list` and `map
//! dump|get|set|delete` manage the engine's eBPF modules and their maps (docs/ebpf.md).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;
use sluice_shm::admin::{
    from_hex, to_hex, AdminReply, AdminRequest, ConnRow, ListenerRow, ModuleRow, MAX_OBJECT,
};

use crate::cmd::ctl_offload::OffloadCommand;
use crate::cmd::ctl_session::{to_json, Session};
pub use crate::cmd::ctl_session::{CtlError, JSON_SCHEMA};
use crate::cmd::ctl_trace::TraceCommand;
use crate::cmd::module_file;
use sluice::admin::PAGE_ROWS;
use sluice_shm::control::{DEFAULT_SOCKET, SOCKET_ENV};

/// Arguments of `sluice ctl`.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The engine's control socket (default: $SLUICE_SOCKET, else /run/sluice/engine.sock).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: CtlCommand,
}

/// What `sluice ctl` does.
#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// Listeners and connections with their state and congestion variables (like `ss -tni`).
    Conns {
        /// One JSON document instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Counters of the core, the service, the engine loop and the device (like `nstat`).
    Counters {
        /// One JSON document instead of `name value` lines.
        #[arg(long)]
        json: bool,
        /// Show counters that are zero too.
        #[arg(long)]
        all: bool,
        /// Only counters whose name contains this (case-insensitive).
        pattern: Option<String>,
    },
    /// Sets a connection's congestion control (dctcp, timely, reno, cubic, bbr).
    SetCc {
        /// The connection: its id as `conns` prints it (SLOT.GENERATION), or
        /// LOCAL_IP:PORT-REMOTE_IP:PORT.
        conn: String,
        /// The algorithm.
        algorithm: String,
    },
    /// Fixes a connection's rate in bits per second (0: its policy's own rate again).
    SetRate {
        /// The connection, as for set-cc.
        conn: String,
        /// Bits per second.
        bits_per_sec: u64,
    },
    /// eBPF modules at the hook points: load, unload, list.
    #[command(subcommand)]
    Module(ModuleCommand),
    /// A module's maps: dump, get, set, delete (keys and values as hex bytes).
    #[command(subcommand)]
    Map(MapCommand),
    /// Tracepoints: list, on, off, stream (docs/tracepoints.md).
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Offload handlers on QPs: load, unload, list (docs/offload.md).
    #[command(subcommand)]
    Offload(OffloadCommand),
}

/// `sluice ctl module ...`.
#[derive(Subcommand, Debug)]
pub enum ModuleCommand {
    /// Loads FILE.o[:SECTION] (or a shipped program's name) at HOOK (ingress, established or
    /// egress); prints its id.
    Load {
        /// ingress, established or egress.
        hook: String,
        /// FILE.o[:SECTION], or firewall, vlan_strip, port_counter, drop, null, reflect, splice.
        object: String,
    },
    /// Unloads module ID.
    Unload {
        /// The module's id (as `module list` prints it).
        id: u32,
    },
    /// The loaded modules with their counters.
    List {
        /// One JSON document instead of the table.
        #[arg(long)]
        json: bool,
    },
}

/// `sluice ctl map ...`.
#[derive(Subcommand, Debug)]
pub enum MapCommand {
    /// Every entry of a map (array entries that are all zeros are left out).
    Dump {
        /// The module's id.
        module: u32,
        /// The map's name.
        map: String,
        /// One JSON document instead of `key: ... value: ...` lines.
        #[arg(long)]
        json: bool,
    },
    /// One key's value.
    Get {
        /// The module's id.
        module: u32,
        /// The map's name.
        map: String,
        /// The key as hex bytes: "0a 00 00 01" or 0a000001.
        key: String,
    },
    /// Inserts or replaces a key's value.
    Set {
        /// The module's id.
        module: u32,
        /// The map's name.
        map: String,
        /// The key as hex bytes.
        key: String,
        /// The value as hex bytes.
        value: String,
    },
    /// Deletes a key.
    Delete {
        /// The module's id.
        module: u32,
        /// The map's name.
        map: String,
        /// The key as hex bytes.
        key: String,
    },
}

/// The JSON document of `conns --json` (docs/ctl.md).
#[derive(Serialize)]
struct ConnsDoc<'a> {
    schema: u32,
    listeners: &'a [ListenerRow],
    connections: &'a [ConnRow],
}

/// The JSON document of `counters --json`.
#[derive(Serialize)]
struct CountersDoc<'a> {
    schema: u32,
    counters: std::collections::BTreeMap<&'a str, u64>,
}

/// Runs `sluice ctl`.
pub fn run(args: &CtlArgs) -> Result<(), CtlError> {
    let path = args
        .socket
        .clone()
        .or_else(|| std::env::var_os(SOCKET_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
    let session = Session::open(&path)?;
    let out = match &args.command {
        CtlCommand::Conns { json } => {
            let listeners = session.listeners()?;
            let conns = session.conns()?;
            if *json {
                to_json(&ConnsDoc {
                    schema: JSON_SCHEMA,
                    listeners: &listeners,
                    connections: &conns,
                })?
            } else {
                conns_table(&listeners, &conns)
            }
        }
        CtlCommand::Counters { json, all, pattern } => {
            let rows = session.counters()?;
            let pattern = pattern.as_deref().map(str::to_lowercase);
            let shown = rows.iter().filter(|(name, value)| {
                (*all || *value != 0)
                    && pattern
                        .as_deref()
                        .is_none_or(|p| name.to_lowercase().contains(p))
            });
            if *json {
                to_json(&CountersDoc {
                    schema: JSON_SCHEMA,
                    counters: shown.map(|(n, v)| (n.as_str(), *v)).collect(),
                })?
            } else {
                let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
                shown.map(|(n, v)| format!("{n:<width$} {v}\n")).collect()
            }
        }
        CtlCommand::SetCc { conn, algorithm } => {
            let id = session.resolve(conn)?;
            expect_done(session.ask(AdminRequest::SetCongestion {
                conn: id,
                algorithm: algorithm.clone(),
            })?)?;
            format!(
                "connection {}.{}: congestion control {algorithm}\n",
                id.slot, id.generation
            )
        }
        CtlCommand::SetRate { conn, bits_per_sec } => {
            let id = session.resolve(conn)?;
            expect_done(session.ask(AdminRequest::SetRate {
                conn: id,
                bits_per_sec: *bits_per_sec,
            })?)?;
            format!(
                "connection {}.{}: rate {bits_per_sec} bit/s\n",
                id.slot, id.generation
            )
        }
        CtlCommand::Module(cmd) => module(&session, cmd)?,
        CtlCommand::Map(cmd) => map(&session, cmd)?,
        CtlCommand::Trace(cmd) => crate::cmd::ctl_trace::run(&session, cmd)?,
        CtlCommand::Offload(cmd) => crate::cmd::ctl_offload::run(&session, cmd)?,
    };
    use std::io::Write;
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(|e| CtlError::Output(e.to_string()))
}

/// `sluice ctl module ...`.
fn module(session: &Session, cmd: &ModuleCommand) -> Result<String, CtlError> {
    match cmd {
        ModuleCommand::Load { hook, object } => {
            let m = module_file::read(object, MAX_OBJECT)
                .map_err(|e| CtlError::Argument(e.to_string()))?;
            match session.ask(AdminRequest::ModuleLoad {
                hook: hook.clone(),
                name: m.name.clone(),
                section: m.section.clone(),
                object: to_hex(&m.bytes),
            })? {
                AdminReply::ModuleLoaded { id } => Ok(format!(
                    "module {id}: {} ({}) at {hook}\n",
                    m.name, m.section
                )),
                other => Err(CtlError::Unexpected(format!("{other:?}"))),
            }
        }
        ModuleCommand::Unload { id } => {
            expect_done(session.ask(AdminRequest::ModuleUnload { id: *id })?)?;
            Ok(format!("module {id} unloaded\n"))
        }
        ModuleCommand::List { json } => {
            let rows = match session.ask(AdminRequest::ModuleList)? {
                AdminReply::Modules { rows } => rows,
                other => return Err(CtlError::Unexpected(format!("{other:?}"))),
            };
            if *json {
                to_json(&ModulesDoc {
                    schema: JSON_SCHEMA,
                    modules: &rows,
                })
            } else {
                Ok(modules_table(&rows))
            }
        }
    }
}

/// `sluice ctl map ...`.
fn map(session: &Session, cmd: &MapCommand) -> Result<String, CtlError> {
    let hex = |what: &str, s: &str| {
        from_hex(s)
            .map(|b| to_hex(&b))
            .map_err(|e| CtlError::Argument(format!("{what}: {e}")))
    };
    match cmd {
        MapCommand::Dump { module, map, json } => {
            let rows = session.all_pages(
                |cursor| AdminRequest::MapDump {
                    module: *module,
                    map: map.clone(),
                    cursor,
                    max: PAGE_ROWS,
                },
                |reply| match reply {
                    AdminReply::MapEntries { rows, next } => Ok((rows, next)),
                    other => Err(other),
                },
            )?;
            if *json {
                let entries: Vec<MapEntry> = rows
                    .iter()
                    .map(|(k, v)| MapEntry {
                        key: spaced(k),
                        value: spaced(v),
                    })
                    .collect();
                to_json(&MapDoc {
                    schema: JSON_SCHEMA,
                    module: *module,
                    map,
                    entries,
                })
            } else {
                Ok(rows
                    .iter()
                    .map(|(k, v)| format!("key: {}  value: {}\n", spaced(k), spaced(v)))
                    .collect())
            }
        }
        MapCommand::Get { module, map, key } => {
            match session.ask(AdminRequest::MapGet {
                module: *module,
                map: map.clone(),
                key: hex("key", key)?,
            })? {
                AdminReply::MapValue { value } => Ok(format!("{}\n", spaced(&value))),
                other => Err(CtlError::Unexpected(format!("{other:?}"))),
            }
        }
        MapCommand::Set {
            module,
            map,
            key,
            value,
        } => {
            expect_done(session.ask(AdminRequest::MapSet {
                module: *module,
                map: map.clone(),
                key: hex("key", key)?,
                value: hex("value", value)?,
            })?)?;
            Ok(String::new())
        }
        MapCommand::Delete { module, map, key } => {
            expect_done(session.ask(AdminRequest::MapDelete {
                module: *module,
                map: map.clone(),
                key: hex("key", key)?,
            })?)?;
            Ok(String::new())
        }
    }
}

/// Hex as bpftool prints it: byte pairs separated by spaces.
fn spaced(hex: &str) -> String {
    let pairs: Vec<&str> = hex
        .as_bytes()
        .chunks(2)
        .map(|p| std::str::from_utf8(p).unwrap_or("??"))
        .collect();
    pairs.join(" ")
}

/// `module list --json`.
#[derive(Serialize)]
struct ModulesDoc<'a> {
    schema: u32,
    modules: &'a [ModuleRow],
}

/// One entry of `map dump --json`.
#[derive(Serialize)]
struct MapEntry {
    key: String,
    value: String,
}

/// `map dump --json`.
#[derive(Serialize)]
struct MapDoc<'a> {
    schema: u32,
    module: u32,
    map: &'a str,
    entries: Vec<MapEntry>,
}

/// The module table: one line per module.
fn modules_table(rows: &[ModuleRow]) -> String {
    let mut out = format!(
        "{:<4} {:<8} {:<16} {:<14} {:<6} {:>6} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6}  maps\n",
        "id",
        "hook",
        "name",
        "section",
        "exec",
        "insns",
        "runs",
        "passed",
        "dropped",
        "tx",
        "redirect",
        "errors"
    );
    for r in rows {
        out += &format!(
            "{:<4} {:<8} {:<16} {:<14} {:<6} {:>6} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6}  {}\n",
            r.id,
            r.hook,
            r.name,
            r.section,
            r.exec,
            r.insns,
            r.runs,
            r.passed,
            r.dropped,
            r.tx,
            r.redirected,
            r.run_errors,
            r.maps.join(",")
        );
    }
    out
}

/// A set request's answer.
fn expect_done(reply: AdminReply) -> Result<(), CtlError> {
    match reply {
        AdminReply::Done => Ok(()),
        other => Err(CtlError::Unexpected(format!("{other:?}"))),
    }
}

/// The owner column: `app:"NAME",pid=P,uid=U,slot=S` (ss's `users:` column), or `-`.
fn owner(o: &Option<sluice_shm::admin::OwnerRow>) -> String {
    match o {
        Some(o) => format!(
            "app:(\"{}\",pid={},uid={},id={},slot={})",
            o.name, o.pid, o.uid, o.app, o.slot
        ),
        None => "-".into(),
    }
}

/// Milliseconds with three decimals, as ss prints rtt and rto.
fn ms(us: u64) -> String {
    format!("{}.{:03}", us / 1000, us % 1000)
}

/// The table of `conns`: listeners, then connections each with a detail line.
fn conns_table(listeners: &[ListenerRow], conns: &[ConnRow]) -> String {
    let mut out = format!(
        "{:<13} {:>6} {:>6} {:<21} {:<21} {:<8} {}\n",
        "State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port", "Id", "Process"
    );
    for l in listeners {
        out += &format!(
            "{:<13} {:>6} {:>6} {:<21} {:<21} {:<8} {}\n\t cc:{} syn_pending:{}\n",
            "LISTEN",
            l.accept_queue,
            l.backlog,
            l.local.to_string(),
            "0.0.0.0:*",
            "-",
            owner(&l.owner),
            l.cc,
            l.syn_pending
        );
    }
    for c in conns {
        let ssthresh = if c.ssthresh == u32::MAX {
            String::new()
        } else {
            format!(" ssthresh:{}", c.ssthresh)
        };
        let rate = if c.rate_bps == 0 {
            String::new()
        } else {
            format!(" rate:{}bps", c.rate_bps)
        };
        out += &format!(
            "{:<13} {:>6} {:>6} {:<21} {:<21} {:<8} {}\n\t {}{} mss:{} cwnd:{}{} rtt:{} rto:{} \
             snd_wnd:{} retrans:{} bytes_acked:{} bytes_received:{}{}\n",
            c.state,
            c.readable,
            c.unacked,
            c.local.to_string(),
            c.remote.to_string(),
            format!("{}.{}", c.id.slot, c.id.generation),
            owner(&c.owner),
            c.cc,
            if c.ecn { " ecn" } else { "" },
            c.mss,
            c.cwnd,
            ssthresh,
            ms(c.srtt_us),
            ms(c.rto_us),
            c.snd_wnd,
            c.retrans,
            c.bytes_acked,
            c.bytes_received,
            rate
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_shm::admin::ConnRef;
    use std::net::{Ipv4Addr, SocketAddrV4};

    #[test]
    fn the_table_has_a_line_and_a_detail_line_per_connection() {
        let c = ConnRow {
            id: ConnRef {
                slot: 3,
                generation: 1,
            },
            local: SocketAddrV4::new(Ipv4Addr::new(10, 9, 0, 1), 7),
            remote: SocketAddrV4::new(Ipv4Addr::new(10, 9, 0, 2), 49152),
            state: "ESTABLISHED".into(),
            owner: None,
            cwnd: 14480,
            ssthresh: u32::MAX,
            srtt_us: 1234,
            rto_us: 200_000,
            snd_wnd: 65535,
            mss: 1448,
            bytes_acked: 10,
            bytes_received: 20,
            unacked: 0,
            readable: 5,
            retrans: 2,
            cc: "cubic".into(),
            rate_bps: 0,
            ecn: false,
        };
        let t = conns_table(&[], &[c]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[1].starts_with("ESTABLISHED"), "{t}");
        assert!(
            lines[1].contains("10.9.0.2:49152") && lines[1].contains("3.1"),
            "{t}"
        );
        assert!(
            lines[2].contains("cwnd:14480 rtt:1.234 rto:200.000")
                && lines[2].contains("retrans:2 bytes_acked:10 bytes_received:20")
                && !lines[2].contains("ssthresh"),
            "{t}"
        );
    }

    #[test]
    fn counters_takes_all_and_a_pattern() {
        let args = CtlArgs::try_parse_from_for_test(&["ctl", "counters", "--all", "TCP."]);
        match args.command {
            CtlCommand::Counters { all, pattern, .. } => {
                assert!(all);
                assert_eq!(pattern.as_deref(), Some("TCP."));
            }
            other => panic!("{other:?}"),
        }
    }

    impl CtlArgs {
        fn try_parse_from_for_test(argv: &[&str]) -> CtlArgs {
            #[derive(clap::Parser)]
            struct Top {
                #[command(flatten)]
                ctl: CtlArgs,
            }
            use clap::Parser;
            Top::try_parse_from(argv).expect("parses").ctl
        }
    }
}
