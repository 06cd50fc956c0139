//! Tracepoints in a running engine (issue 19 item 3) through admin requests: all off at
//! first; turned on, a connection's state changes are reported; data the engine sent and
//! an egress drop module threw away comes back as an RTO loss and a go-back-N
//! retransmission with the connection's addresses; a page of events is bounded and the
//! rest waits; hits and `trace.events_lost` are among the counters.

mod support;

use sluice_ebpf::programs;
use sluice_shm::admin::{to_hex, AdminReply, AdminRequest};
use sluice_shm::trace::{TraceEventRow, TraceField, TraceRow};
use sluice_tcp::TcpState;
use support::{ask_admin, pattern, Client, Net, ENGINE_IP, WAIT};

fn list(admin: &Client) -> Vec<TraceRow> {
    match ask_admin(admin, AdminRequest::TraceList) {
        Ok(AdminReply::Traces { rows, .. }) => rows,
        other => panic!("list: {other:?}"),
    }
}

fn set(admin: &Client, name: &str, on: bool) {
    let req = AdminRequest::TraceSet {
        name: name.into(),
        on,
    };
    assert_eq!(ask_admin(admin, req), Ok(AdminReply::Done));
}

/// Every waiting event, page by page.
fn read_all(admin: &Client, max: u32) -> Vec<TraceEventRow> {
    let mut all = Vec::new();
    loop {
        match ask_admin(admin, AdminRequest::TraceRead { max }) {
            Ok(AdminReply::TraceEvents { rows, pending, .. }) => {
                assert!(rows.len() <= max as usize);
                all.extend(rows);
                if pending == 0 {
                    return all;
                }
            }
            other => panic!("read: {other:?}"),
        }
    }
}

fn field<'a>(e: &'a TraceEventRow, name: &str) -> Option<&'a TraceField> {
    e.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn name(s: &str) -> TraceField {
    TraceField::Name(s.into())
}

fn load_drop(admin: &Client, hook: &str) -> u32 {
    let (bytes, section) = programs::shipped("drop").expect("shipped");
    match ask_admin(
        admin,
        AdminRequest::ModuleLoad {
            hook: hook.into(),
            name: "drop".into(),
            section: section.into(),
            object: to_hex(bytes),
        },
    ) {
        Ok(AdminReply::ModuleLoaded { id }) => id,
        other => panic!("load: {other:?}"),
    }
}

#[test]
fn a_dropped_segment_comes_back_as_an_rto_loss_and_a_retransmission() {
    let mut net = Net::start("trace-rto");
    let mut server = net.attach("server");
    let sc = server.context();
    let l = server.listen(sc, 7, &mut || net.peer.pump());
    let admin = net.attach("admin");
    let rows = list(&admin);
    assert!(rows.iter().all(|r| !r.on && r.hits == 0), "{rows:?}");
    assert!(rows.iter().any(|r| r.name == "retransmit"));
    for tp in ["state", "loss", "retransmit"] {
        set(&admin, tp, true);
    }
    let c = net.peer.connect(ENGINE_IP, 7);
    let rec = server.accept(sc, l, &mut || net.peer.pump());
    net.peer.until("established", |s| {
        (s.state(c).ok() == Some(TcpState::Established)).then_some(())
    });
    // What the engine sends next is thrown away at egress, until the module goes.
    let id = load_drop(&admin, "egress");
    let data = pattern(1000, 3);
    server.write_all(sc, rec.slot, &data, &mut || net.peer.pump());
    let loss = |admin: &Client| list(admin).iter().any(|r| r.name == "loss" && r.hits > 0);
    let deadline = std::time::Instant::now() + WAIT;
    while !loss(&admin) {
        assert!(
            std::time::Instant::now() < deadline,
            "no RTO within {WAIT:?}"
        );
        net.peer.pump();
    }
    assert_eq!(
        ask_admin(&admin, AdminRequest::ModuleUnload { id }),
        Ok(AdminReply::Done)
    );
    assert_eq!(net.peer.read_at_least(c, data.len()), data);
    // Read in pages of 2: the bound holds and nothing is lost between pages.
    let events = read_all(&admin, 2);
    let of = |tp: &str| -> Vec<&TraceEventRow> {
        events.iter().filter(|e| e.tracepoint == tp).collect()
    };
    let states: Vec<_> = of("state")
        .iter()
        .map(|e| (field(e, "from").cloned(), field(e, "to").cloned()))
        .collect();
    assert!(
        states.contains(&(Some(name("SYN-RECEIVED")), Some(name("ESTABLISHED")))),
        "{states:?}"
    );
    let local = std::net::SocketAddrV4::new(ENGINE_IP, 7);
    let rto = of("loss");
    assert!(
        rto.iter()
            .any(|e| field(e, "kind") == Some(&name("rto")) && e.local == Some(local)),
        "{rto:?}"
    );
    let resent = of("retransmit");
    assert!(
        resent
            .iter()
            .any(|e| field(e, "len") == Some(&TraceField::Num(1000))
                && e.remote.is_some_and(|r| r.port() == rec.peer.port())),
        "{resent:?}"
    );
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    // Hits and the lost count are counters too.
    let counters = match ask_admin(
        &admin,
        AdminRequest::Counters {
            cursor: 0,
            max: 1000,
        },
    ) {
        Ok(AdminReply::Counters { rows, .. }) => rows,
        other => panic!("counters: {other:?}"),
    };
    let get = |n: &str| counters.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    assert_eq!(get("trace.events_lost"), Some(0));
    assert!(get("trace.retransmit_hits").is_some_and(|v| v >= 1));
    net.stop();
}

#[test]
fn unknown_names_are_refused_and_all_turns_every_one_on_and_off() {
    let mut net = Net::start("trace-names");
    let admin = net.attach("admin");
    let err = ask_admin(
        &admin,
        AdminRequest::TraceSet {
            name: "nonesuch".into(),
            on: true,
        },
    )
    .unwrap_err();
    assert!(
        err.contains("EINVAL: no tracepoint") && err.contains("ooo"),
        "{err}"
    );
    set(&admin, "all", true);
    assert!(list(&admin).iter().all(|r| r.on));
    // The engine's own stage times arrive with the loop running, no traffic needed.
    let deadline = std::time::Instant::now() + WAIT;
    let stage = loop {
        let events = read_all(&admin, 64);
        if let Some(e) = events.iter().find(|e| e.tracepoint == "stage_time") {
            break e.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no stage_time event");
        net.peer.pump();
    };
    assert!(field(&stage, "ns").is_some() && stage.local.is_none());
    set(&admin, "all", false);
    assert!(list(&admin).iter().all(|r| !r.on));
    net.stop();
}
