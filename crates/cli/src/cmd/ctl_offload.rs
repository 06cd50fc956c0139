//! `sluice ctl offload load|unload|list`: offload handlers on the engine's QPs
//! (docs/offload.md "Through the engine's service"). A handler is an eBPF object (section
//! `offload`) or `LIB.so:NAME`, a handler of a Rust handler library on the engine's host.

use std::path::Path;

use clap::Subcommand;
use serde::Serialize;
use sluice_shm::admin::{to_hex, AdminReply, AdminRequest, OffloadRow, OffloadSource, MAX_OBJECT};

use crate::cmd::ctl_session::{to_json, CtlError, Session, JSON_SCHEMA};

/// `sluice ctl offload ...`.
#[derive(Subcommand, Debug)]
pub enum OffloadCommand {
    /// Registers HANDLER for OPCODE on queue pair QPN, with the memory regions of the QP's
    /// owner it may access (`--region KEY`, repeated).
    Load {
        /// The queue pair's number (decimal or 0x hex).
        qpn: String,
        /// The offload opcode (decimal or 0x hex).
        opcode: String,
        /// FILE.o (eBPF, section `offload`) or LIB.so:NAME (a Rust handler library's handler).
        handler: String,
        /// A memory region's key (decimal or 0x hex) the handler may access.
        #[arg(long = "region")]
        regions: Vec<String>,
    },
    /// Unregisters the handler of OPCODE on QPN.
    Unload {
        /// The queue pair's number.
        qpn: String,
        /// The offload opcode.
        opcode: String,
    },
    /// The registered handlers with their request and error counts.
    List {
        /// One JSON document instead of the table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct OffloadsDoc<'a> {
    schema: u32,
    handlers: &'a [OffloadRow],
}

/// A number in decimal or 0x hex.
fn number(s: &str, what: &str) -> Result<u32, CtlError> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| CtlError::Argument(format!("{what} {s:?}: not a number")))
}

/// What HANDLER names: an eBPF object's bytes, or a library's handler.
fn source(handler: &str) -> Result<OffloadSource, CtlError> {
    if let Some((lib, name)) = handler.rsplit_once(".so:") {
        let path = std::path::absolute(Path::new(&format!("{lib}.so")))
            .map_err(|e| CtlError::Argument(format!("{handler}: {e}")))?;
        return Ok(OffloadSource::Rust {
            path: path.to_string_lossy().into_owned(),
            handler: name.to_string(),
        });
    }
    let bytes =
        std::fs::read(handler).map_err(|e| CtlError::Argument(format!("{handler}: {e}")))?;
    if bytes.len() > MAX_OBJECT {
        return Err(CtlError::Argument(format!(
            "{handler}: {} bytes, more than an admin message carries ({MAX_OBJECT})",
            bytes.len()
        )));
    }
    let name = Path::new(handler)
        .file_name()
        .map_or_else(|| handler.to_string(), |n| n.to_string_lossy().into_owned());
    Ok(OffloadSource::Ebpf {
        name,
        object: to_hex(&bytes),
    })
}

/// Runs an `offload` subcommand; what it returns is printed.
pub(crate) fn run(session: &Session, cmd: &OffloadCommand) -> Result<String, CtlError> {
    let done = |r: AdminReply, line: String| match r {
        AdminReply::Done => Ok(line),
        other => Err(CtlError::Unexpected(format!("{other:?}"))),
    };
    match cmd {
        OffloadCommand::Load {
            qpn,
            opcode,
            handler,
            regions,
        } => {
            let (qpn, opcode) = (number(qpn, "QPN")?, number(opcode, "opcode")?);
            let mrs = regions
                .iter()
                .map(|k| number(k, "region key"))
                .collect::<Result<Vec<_>, _>>()?;
            let req = AdminRequest::OffloadLoad {
                qpn,
                opcode,
                handler: source(handler)?,
                mrs,
            };
            done(
                session.ask(req)?,
                format!("offload opcode {opcode:#x} on qp {qpn:#x}: {handler}\n"),
            )
        }
        OffloadCommand::Unload { qpn, opcode } => {
            let (qpn, opcode) = (number(qpn, "QPN")?, number(opcode, "opcode")?);
            done(
                session.ask(AdminRequest::OffloadUnload { qpn, opcode })?,
                format!("offload opcode {opcode:#x} on qp {qpn:#x}: unloaded\n"),
            )
        }
        OffloadCommand::List { json } => {
            let rows = match session.ask(AdminRequest::OffloadList)? {
                AdminReply::Offloads { rows } => rows,
                other => return Err(CtlError::Unexpected(format!("{other:?}"))),
            };
            if *json {
                to_json(&OffloadsDoc {
                    schema: JSON_SCHEMA,
                    handlers: &rows,
                })
            } else {
                Ok(table(&rows))
            }
        }
    }
}

fn table(rows: &[OffloadRow]) -> String {
    let mut out = format!(
        "{:<8} {:<10} {:<5} {:<5} {:>9} {:>7} {:<24} NAME\n",
        "QPN", "OPCODE", "APP", "KIND", "REQUESTS", "ERRORS", "REGIONS"
    );
    for r in rows {
        let regions: Vec<String> = r
            .regions
            .iter()
            .map(|(a, l)| format!("{a:#x}+{l}"))
            .collect();
        let regions = if regions.is_empty() {
            "-".to_string()
        } else {
            regions.join(",")
        };
        out += &format!(
            "{:<8} {:<10} {:<5} {:<5} {:>9} {:>7} {:<24} {}\n",
            format!("{:#x}", r.qpn),
            format!("{:#x}", r.opcode),
            r.app,
            r.kind,
            r.requests,
            r.errors,
            regions,
            r.name
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_and_handlers_are_told_apart() {
        assert_eq!(number("0x1234", "x").unwrap(), 0x1234);
        assert_eq!(number("17", "x").unwrap(), 17);
        assert!(number("0xzz", "x").is_err());
        match source("/opt/h/libsluice_offload_examples.so:list_traversal").unwrap() {
            OffloadSource::Rust { path, handler } => {
                assert_eq!(path, "/opt/h/libsluice_offload_examples.so");
                assert_eq!(handler, "list_traversal");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            source("/nonexistent/offload_list.o"),
            Err(CtlError::Argument(_))
        ));
    }

    #[test]
    fn the_table_has_a_row_per_handler() {
        let rows = [OffloadRow {
            qpn: 0x11,
            opcode: 0x1234,
            app: 2,
            kind: "rust".into(),
            name: "/x/lib.so:batched_read".into(),
            regions: vec![(0x7000_0000, 4096)],
            requests: 9,
            errors: 1,
        }];
        let t = table(&rows);
        assert_eq!(t.lines().count(), 2);
        assert!(t.contains("0x1234") && t.contains("0x70000000+4096") && t.contains(" 9 "));
    }
}
