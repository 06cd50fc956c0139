//! Admin requests (`sluice ctl`, docs/ctl.md): a client that said Hello asks for the core's
//! connections and listeners with their owners, for every counter, or sets a connection's
//! congestion control or rate. Only uid 0 and the engine's own uid may; lists come back in
//! pages that each fit one control message.

use sluice_engine::{DeviceStats, RunStats};
use sluice_shm::admin::{AdminReply, AdminRequest, ConnRef, ConnRow, ListenerRow, OwnerRow, Page};
use sluice_shm::control::ACCESS_DENIED;
use sluice_tcp::{Algorithm, ConnId, Stack};

use crate::app::Apps;
use crate::owners::Owner;
use crate::shared::Shared;

/// Whether a client of `uid` may make admin requests of an engine running as `engine_uid`.
pub(crate) fn allowed(uid: u32, engine_uid: u32) -> bool {
    uid == 0 || uid == engine_uid
}

/// Answers `req` from a client of `uid`; Err is the reason of a Refused reply. Counted.
pub(crate) fn answer(
    req: AdminRequest,
    (uid, engine_uid): (u32, u32),
    apps: &Apps,
    sh: &mut Shared,
    stack: &mut Stack,
) -> Result<AdminReply, String> {
    if !allowed(uid, engine_uid) {
        sh.counters.admin_denied += 1;
        return Err(format!(
            "{ACCESS_DENIED}: admin requests need uid 0 or the engine's uid {engine_uid}, not {uid}"
        ));
    }
    sh.counters.admin_requests += 1;
    match req {
        AdminRequest::Conns { cursor, max } => Ok(conns(cursor, max, apps, sh, stack)),
        AdminRequest::Listeners { cursor, max } => Ok(listeners(cursor, max, apps, sh, stack)),
        AdminRequest::Counters { cursor, max } => Ok(counters(cursor, max, sh, stack)),
        AdminRequest::SetCongestion { conn, algorithm } => {
            let algorithm: Algorithm = algorithm.parse().map_err(|e| format!("EINVAL: {e}"))?;
            let id = live(stack, conn)?;
            stack
                .set_congestion_control(id, algorithm)
                .map_err(|e| format!("EINVAL: {e}"))?;
            Ok(AdminReply::Done)
        }
        AdminRequest::SetRate { conn, bits_per_sec } => {
            let id = live(stack, conn)?;
            stack
                .set_rate(id, bits_per_sec)
                .map_err(|e| format!("EINVAL: {e}"))?;
            Ok(AdminReply::Done)
        }
        r if r.is_trace() => crate::trace::answer(r, stack),
        // Admitted ones are queued for the hooks (control.rs); only a refusal gets here.
        r if r.is_module() => Err("EINVAL: a module request out of turn".to_string()),
        _ => Err("EINVAL: unknown admin request".to_string()),
    }
}

/// The connection `conn` names, if it is still the one in its slot.
fn live(stack: &Stack, conn: ConnRef) -> Result<ConnId, String> {
    stack
        .next_connection(conn.slot)
        .filter(|r| r.id.slot() == conn.slot && r.id.generation() == conn.generation)
        .map(|r| r.id)
        .ok_or_else(|| {
            format!(
                "ENOENT: no connection {}.{} (it closed, or never was)",
                conn.slot, conn.generation
            )
        })
}

/// The application and slot behind `owner`, named for an operator.
fn owner_row(apps: &Apps, owner: Option<Owner>) -> Option<OwnerRow> {
    let owner = owner?;
    let app = apps.table.get(owner.app as usize)?.as_ref()?;
    Some(OwnerRow {
        name: app.name.clone(),
        pid: app.pid,
        uid: app.creds.uid,
        app: app.id,
        slot: owner.slot,
    })
}

/// A page of live connections from core slot `cursor`: each row costs one step of the
/// core's walk over its table (`Stack::next_connection`), never a scan per row.
fn conns(cursor: u32, max: u32, apps: &Apps, sh: &Shared, stack: &Stack) -> AdminReply {
    let mut page = Page::new(max);
    let mut from = cursor;
    while let Some(c) = stack.next_connection(from) {
        let row = ConnRow {
            id: ConnRef {
                slot: c.id.slot(),
                generation: c.id.generation(),
            },
            local: c.local,
            remote: c.remote,
            state: c.info.state.rfc_name().to_string(),
            owner: owner_row(apps, sh.conns.get(c.id)),
            cwnd: c.info.cwnd,
            ssthresh: c.info.ssthresh,
            srtt_us: c.info.srtt.as_micros() as u64,
            rto_us: c.info.rto.as_micros() as u64,
            snd_wnd: c.info.snd_wnd,
            mss: c.info.mss,
            bytes_acked: c.bytes_acked,
            bytes_received: c.bytes_received,
            unacked: c.info.unacked as u64,
            readable: c.info.readable as u64,
            retrans: u32::from(c.info.fast_retransmits),
            cc: c.info.congestion_control.name().to_string(),
            rate_bps: c.info.rate_bps,
            ecn: c.info.ecn,
        };
        if !page.push(row) {
            return AdminReply::Conns {
                rows: page.rows,
                next: Some(c.id.slot()),
            };
        }
        from = c.id.slot() + 1;
    }
    AdminReply::Conns {
        rows: page.rows,
        next: None,
    }
}

/// A page of listeners from the `cursor`-th (bounded by the core's listener table).
fn listeners(cursor: u32, max: u32, apps: &Apps, sh: &Shared, stack: &Stack) -> AdminReply {
    let mut page = Page::new(max);
    let ip = stack.config().ip;
    for (i, l) in stack.listeners().enumerate().skip(cursor as usize) {
        let row = ListenerRow {
            local: std::net::SocketAddrV4::new(ip, l.port),
            backlog: l.backlog as u64,
            accept_queue: l.accept_queue as u64,
            syn_pending: l.syn_pending as u64,
            cc: l.congestion_control.name().to_string(),
            owner: owner_row(apps, sh.ports.owner_of(l.id, |o| sh.links.mine(o.slot))),
        };
        if !page.push(row) {
            return AdminReply::Listeners {
                rows: page.rows,
                next: Some(i as u32),
            };
        }
    }
    AdminReply::Listeners {
        rows: page.rows,
        next: None,
    }
}

/// The engine loop's counters, named.
fn run_rows(r: &RunStats) -> [(&'static str, u64); 6] {
    [
        ("iterations", r.iterations),
        ("rx_frames", r.rx_frames),
        ("tx_frames", r.tx_frames),
        ("sleeps", r.sleeps),
        ("yields", r.yields),
        ("preemptions", r.preemptions),
    ]
}

/// The device's counters, named.
fn device_rows(d: &DeviceStats) -> [(&'static str, u64); 13] {
    [
        ("rx_frames", d.rx_frames),
        ("rx_truncated", d.rx_truncated),
        ("rx_checksum_completed", d.rx_checksum_completed),
        ("rx_checksum_incomplete", d.rx_checksum_incomplete),
        ("rx_dropped", d.rx_dropped),
        ("rx_syns_shed", d.rx_syns_shed),
        ("tx_frames", d.tx_frames),
        ("tx_dropped", d.tx_dropped),
        ("tx_blocked", d.tx_blocked),
        ("impaired_rx_dropped", d.impaired_rx_dropped),
        ("impaired_rx_reordered", d.impaired_rx_reordered),
        ("impaired_tx_dropped", d.impaired_tx_dropped),
        ("impaired_tx_reordered", d.impaired_tx_reordered),
    ]
}

/// Every counter as (group.name, value): the core's (`tcp.`), the service's (`service.`),
/// the engine loop's (`engine.`) and the device's (`device.`; these two as the engine last
/// handed them over, before its latest sleep or within its last 1024 iterations).
fn all_counters(sh: &Shared, stack: &Stack) -> Vec<(String, u64)> {
    let mut rows: Vec<(String, u64)> = stack
        .counters()
        .rows()
        .iter()
        .map(|(n, v)| (format!("tcp.{n}"), *v))
        .collect();
    // Transmit-side bytes the core touched (header-only TX against staging).
    let t = stack.tx_touch();
    rows.extend([
        ("tcp.tx_touch_payload".to_string(), t.payload),
        ("tcp.tx_touch_staging".to_string(), t.staging),
        ("tcp.tx_touch_checksum".to_string(), t.checksum),
        ("tcp.tx_gather_failed".to_string(), t.gather_failed),
    ]);
    // The service's Display is its list of `name value` lines.
    for line in sh.links.summed(sh.counters).to_string().lines() {
        let mut words = line.split_whitespace();
        if let (Some(n), Some(Ok(v))) = (words.next(), words.next().map(str::parse::<u64>)) {
            rows.push((format!("service.{n}"), v));
        }
    }
    rows.extend(
        stack
            .tracer()
            .counter_rows()
            .map(|(n, v)| (format!("trace.{n}"), v)),
    );
    let (run, device) = sh.engine_stats.unwrap_or_default();
    rows.extend(
        run_rows(&run)
            .iter()
            .map(|(n, v)| (format!("engine.{n}"), *v)),
    );
    rows.extend(
        device_rows(&device)
            .iter()
            .map(|(n, v)| (format!("device.{n}"), *v)),
    );
    rows
}

/// A page of counters from row `cursor`.
fn counters(cursor: u32, max: u32, sh: &Shared, stack: &Stack) -> AdminReply {
    let mut page = Page::new(max);
    let all = all_counters(sh, stack);
    for (i, row) in all.into_iter().enumerate().skip(cursor as usize) {
        if !page.push(row) {
            return AdminReply::Counters {
                rows: page.rows,
                next: Some(i as u32),
            };
        }
    }
    AdminReply::Counters {
        rows: page.rows,
        next: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_the_engines_uid_only() {
        assert!(allowed(0, 1000));
        assert!(allowed(1000, 1000));
        assert!(!allowed(65534, 1000));
        assert!(!allowed(65534, 0));
    }
}
