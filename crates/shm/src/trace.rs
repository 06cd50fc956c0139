//! Tracepoints over the control socket (`sluice ctl trace`, docs/tracepoints.md): the rows
//! of [`crate::admin::AdminReply::Traces`] and [`crate::admin::AdminReply::TraceEvents`].

use std::net::SocketAddrV4;

use serde::{Deserialize, Serialize};

/// A tracepoint: its name, whether it is on, and how often it fired while on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRow {
    /// Its name ("retransmit", ...).
    pub name: String,
    /// Whether it is on.
    pub on: bool,
    /// Times it fired while on.
    pub hits: u64,
}

/// One field of an event: a number or a name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TraceField {
    /// A number (sequence numbers, lengths, windows, nanoseconds).
    Num(u64),
    /// A name (a kind, a reason, a state).
    Name(String),
}

/// One event of the stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEventRow {
    /// The core's time, nanoseconds since the engine started.
    pub time_ns: u64,
    /// The tracepoint's name.
    pub tracepoint: String,
    /// The connection's local address, if the event is a connection's.
    pub local: Option<SocketAddrV4>,
    /// Its remote address.
    pub remote: Option<SocketAddrV4>,
    /// The fields, in the order docs/tracepoints.md lists them.
    pub fields: Vec<(String, TraceField)>,
}

impl std::fmt::Display for TraceField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TraceField::Num(n) => write!(f, "{n}"),
            TraceField::Name(s) => f.write_str(s),
        }
    }
}

/// As perf script prints: seconds, `tcp:NAME`, the connection, `key=value` fields.
impl std::fmt::Display for TraceEventRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self.time_ns;
        write!(
            f,
            "{:>6}.{:09} tcp:{}",
            ns / 1_000_000_000,
            ns % 1_000_000_000,
            self.tracepoint
        )?;
        if let (Some(l), Some(r)) = (self.local, self.remote) {
            write!(f, " {l} > {r}")?;
        }
        for (k, v) in &self.fields {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_prints_as_perf_script_and_its_fields_are_plain_json() {
        let row = TraceEventRow {
            time_ns: 2_000_000_123,
            tracepoint: "loss".into(),
            local: Some("10.0.0.1:80".parse().unwrap()),
            remote: Some("10.0.0.2:4000".parse().unwrap()),
            fields: vec![
                ("kind".into(), TraceField::Name("rto".into())),
                ("seq".into(), TraceField::Num(9)),
            ],
        };
        assert_eq!(
            row.to_string(),
            "     2.000000123 tcp:loss 10.0.0.1:80 > 10.0.0.2:4000 kind=rto seq=9"
        );
        let json = serde_json::to_string(&row.fields).unwrap();
        assert_eq!(json, r#"[["kind","rto"],["seq",9]]"#);
        let back: Vec<(String, TraceField)> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, row.fields);
    }
}
