//! `sluice ctl trace list|on|off|stream`: the engine's tracepoints (docs/tracepoints.md).
//! `stream` polls the engine's event ring and prints one line per event as perf script
//! does (or one JSON object per line), until `--count` events or an interrupt.

use std::io::Write;
use std::time::Duration;

use clap::Subcommand;
use serde::Serialize;
use sluice_shm::admin::{AdminReply, AdminRequest};
use sluice_shm::trace::{TraceEventRow, TraceField, TraceRow};

use crate::cmd::ctl_session::{to_json, CtlError, Session, JSON_SCHEMA};

/// How long `stream` waits before asking again when the ring was empty.
const POLL: Duration = Duration::from_millis(50);
/// Events asked for per read (the engine sends fewer when they would not fit one page).
const READ_ROWS: u32 = 256;

/// `sluice ctl trace ...`.
#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Every tracepoint, whether it is on, and its hits.
    List {
        /// One JSON document instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Turns a tracepoint (or all) on.
    On {
        /// A tracepoint's name (as `trace list` prints it), or `all`.
        name: String,
    },
    /// Turns a tracepoint (or all) off.
    Off {
        /// A tracepoint's name, or `all`.
        name: String,
    },
    /// Prints events as they come, one line each (perf script style).
    Stream {
        /// Stop after this many events.
        #[arg(long)]
        count: Option<u64>,
        /// One JSON object per line instead.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct TracesDoc<'a> {
    schema: u32,
    lost: u64,
    tracepoints: &'a [TraceRow],
}

/// An event as `stream --json` prints it: the fields as one object.
#[derive(Serialize)]
struct EventDoc<'a> {
    time_ns: u64,
    tracepoint: &'a str,
    local: Option<String>,
    remote: Option<String>,
    fields: serde_json::Map<String, serde_json::Value>,
}

/// Runs a `trace` subcommand; what it returns is printed (`stream` prints as it goes).
pub(crate) fn run(session: &Session, cmd: &TraceCommand) -> Result<String, CtlError> {
    match cmd {
        TraceCommand::List { json } => {
            let (rows, lost) = match session.ask(AdminRequest::TraceList)? {
                AdminReply::Traces { rows, lost } => (rows, lost),
                other => return Err(CtlError::Unexpected(format!("{other:?}"))),
            };
            if *json {
                to_json(&TracesDoc {
                    schema: JSON_SCHEMA,
                    lost,
                    tracepoints: &rows,
                })
            } else {
                Ok(list_table(&rows, lost))
            }
        }
        TraceCommand::On { name } | TraceCommand::Off { name } => {
            let on = matches!(cmd, TraceCommand::On { .. });
            match session.ask(AdminRequest::TraceSet {
                name: name.clone(),
                on,
            })? {
                AdminReply::Done => Ok(format!(
                    "tracepoint {name}: {}\n",
                    if on { "on" } else { "off" }
                )),
                other => Err(CtlError::Unexpected(format!("{other:?}"))),
            }
        }
        TraceCommand::Stream { count, json } => {
            stream(session, *count, *json)?;
            Ok(String::new())
        }
    }
}

fn list_table(rows: &[TraceRow], lost: u64) -> String {
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(4);
    let mut out = format!("{:<width$} {:<3} HITS\n", "NAME", "ON");
    for r in rows {
        let on = if r.on { "on" } else { "off" };
        out += &format!("{:<width$} {on:<3} {}\n", r.name, r.hits);
    }
    out += &format!("events lost: {lost}\n");
    out
}

/// Reads pages of events and prints each as it comes.
fn stream(session: &Session, count: Option<u64>, json: bool) -> Result<(), CtlError> {
    let mut printed = 0u64;
    let mut lost_seen = None;
    let mut stdout = std::io::stdout().lock();
    let fail = |e: std::io::Error| CtlError::Output(e.to_string());
    while count.is_none_or(|c| printed < c) {
        let want = count.map_or(READ_ROWS, |c| (c - printed).min(READ_ROWS.into()) as u32);
        let (rows, lost, pending) = match session.ask(AdminRequest::TraceRead { max: want })? {
            AdminReply::TraceEvents {
                rows,
                lost,
                pending,
            } => (rows, lost, pending),
            other => return Err(CtlError::Unexpected(format!("{other:?}"))),
        };
        if let Some(before) = lost_seen.filter(|&b| lost > b) {
            eprintln!(
                "sluice ctl trace: {} events lost (ring full)",
                lost - before
            );
        }
        lost_seen = Some(lost);
        for r in &rows {
            let line = if json { event_json(r)? } else { r.to_string() };
            writeln!(stdout, "{line}").map_err(fail)?;
            printed += 1;
        }
        stdout.flush().map_err(fail)?;
        if rows.is_empty() && pending == 0 {
            std::thread::sleep(POLL);
        }
    }
    Ok(())
}

fn event_json(r: &TraceEventRow) -> Result<String, CtlError> {
    let fields = r
        .fields
        .iter()
        .map(|(k, v)| {
            let v = match v {
                TraceField::Num(n) => serde_json::Value::from(*n),
                TraceField::Name(s) => serde_json::Value::from(s.as_str()),
            };
            (k.clone(), v)
        })
        .collect();
    let doc = EventDoc {
        time_ns: r.time_ns,
        tracepoint: &r.tracepoint,
        local: r.local.map(|a| a.to_string()),
        remote: r.remote.map(|a| a.to_string()),
        fields,
    };
    serde_json::to_string(&doc).map_err(|e| CtlError::Output(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_has_a_line_per_tracepoint_and_the_lost_count() {
        let rows = [
            TraceRow {
                name: "drop".into(),
                on: false,
                hits: 0,
            },
            TraceRow {
                name: "retransmit".into(),
                on: true,
                hits: 12,
            },
        ];
        assert_eq!(
            list_table(&rows, 3),
            "NAME       ON  HITS\ndrop       off 0\nretransmit on  12\nevents lost: 3\n"
        );
    }

    #[test]
    fn an_event_in_json_has_its_fields_as_an_object() {
        let r = TraceEventRow {
            time_ns: 5,
            tracepoint: "ooo".into(),
            local: None,
            remote: None,
            fields: vec![("seq".into(), TraceField::Num(1))],
        };
        assert_eq!(
            event_json(&r).unwrap(),
            r#"{"time_ns":5,"tracepoint":"ooo","local":null,"remote":null,"fields":{"seq":1}}"#
        );
    }
}
