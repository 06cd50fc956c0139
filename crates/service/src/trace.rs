//! Tracepoint requests (`sluice ctl trace`, docs/tracepoints.md): list the core's
//! tracepoints, turn them on or off, and take pages of events off its ring. Answered
//! between frames with the core at hand, as the other admin requests.

use sluice_shm::admin::{AdminReply, AdminRequest, Page};
use sluice_shm::trace::{TraceEventRow, TraceField, TraceRow};
use sluice_tcp::trace::FieldValue;
use sluice_tcp::{Stack, TraceEvent};

/// Answers a trace request; Err is the reason of a Refused reply.
pub(crate) fn answer(req: AdminRequest, stack: &mut Stack) -> Result<AdminReply, String> {
    match req {
        AdminRequest::TraceList => Ok(list(stack)),
        AdminRequest::TraceSet { name, on } => {
            stack
                .tracer_mut()
                .set_by_name(&name, on)
                .map_err(|e| format!("EINVAL: {e}"))?;
            Ok(AdminReply::Done)
        }
        AdminRequest::TraceRead { max } => Ok(read(stack, max)),
        _ => Err("EINVAL: not a trace request".to_string()),
    }
}

fn list(stack: &Stack) -> AdminReply {
    let t = stack.tracer();
    AdminReply::Traces {
        rows: t
            .list()
            .map(|(tp, on, hits)| TraceRow {
                name: tp.name().to_string(),
                on,
                hits,
            })
            .collect(),
        lost: t.lost(),
    }
}

/// Events off the ring, oldest first, while they fit one page; the rest wait for the next.
fn read(stack: &mut Stack, max: u32) -> AdminReply {
    let mut page = Page::new(max);
    let tracer = stack.tracer_mut();
    while let Some(e) = tracer.front() {
        if !page.push(row(e)) {
            break;
        }
        tracer.pop();
    }
    AdminReply::TraceEvents {
        rows: page.rows,
        lost: tracer.lost(),
        pending: tracer.pending() as u64,
    }
}

/// An event as the control socket carries it.
pub(crate) fn row(e: &TraceEvent) -> TraceEventRow {
    TraceEventRow {
        time_ns: e.at.as_nanos(),
        tracepoint: e.tracepoint().name().to_string(),
        local: e.conn.map(|c| c.0),
        remote: e.conn.map(|c| c.1),
        fields: e
            .data
            .fields()
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    FieldValue::Num(n) => TraceField::Num(n),
                    FieldValue::Name(s) => TraceField::Name(s.to_string()),
                };
                (k.to_string(), v)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_tcp::{Config, Instant, TraceData, Tracepoint};
    use sluice_wire::EthernetAddress;

    fn stack() -> Stack {
        let cfg = Config::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            std::net::Ipv4Addr::new(10, 0, 0, 1),
        );
        Stack::new(cfg).unwrap()
    }

    #[test]
    fn a_read_takes_what_fits_and_leaves_the_rest() {
        let mut s = stack();
        answer(
            AdminRequest::TraceSet {
                name: "stage_time".into(),
                on: true,
            },
            &mut s,
        )
        .unwrap();
        for i in 0..5 {
            let data = TraceData::StageTime { stage: "rx", ns: i };
            s.tracer_mut().record(Instant::from_nanos(i), None, data);
        }
        let Ok(AdminReply::TraceEvents { rows, pending, .. }) =
            answer(AdminRequest::TraceRead { max: 2 }, &mut s)
        else {
            panic!("not events");
        };
        assert_eq!((rows.len(), pending), (2, 3));
        assert_eq!(rows[1].fields[1], ("ns".to_string(), TraceField::Num(1)));
        let Ok(AdminReply::Traces { rows, .. }) = answer(AdminRequest::TraceList, &mut s) else {
            panic!("not a list");
        };
        let st = rows.iter().find(|r| r.name == "stage_time").unwrap();
        assert!(st.on && st.hits == 5, "{st:?}");
        assert_eq!(rows.len(), Tracepoint::ALL.len());
        let err = answer(
            AdminRequest::TraceSet {
                name: "bogus".into(),
                on: true,
            },
            &mut s,
        )
        .unwrap_err();
        assert!(err.starts_with("EINVAL: no tracepoint"), "{err}");
    }
}
