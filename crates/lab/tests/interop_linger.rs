//! Issue 14, "Also fix": `sluice sink --count 1` against a Linux client whose view of the
//! close depends on the sink's FIN, and the sink's first FIN is lost (needs root: the test
//! is `#[ignore]`d, and scripts/test.sh runs it as root).
//!
//! Before, the engine returned right after sending that FIN, so the Linux client waited in
//! FIN-WAIT-2 for an end that never came (73 s were seen). Now the engine lingers until the
//! FIN, retransmitted on the RTO, is acknowledged: the client reads its end of stream.

mod lab_support;

use std::thread;
use std::time::Duration;

use lab_support::{lab, linux, MIB};
use sluice_device::{is_tcp_fin, TxFilter};
use sluice_engine::apps::SinkApp;
use sluice_engine::setup::{self, Backend, EngineOptions};
use sluice_engine::{AppStatus, Engine};
use sluice_lab::presets::LabPreset;
use sluice_lab::ENGINE_IP;
use sluice_tcp::Closing;

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn sink_count_retransmits_its_lost_fin_before_it_exits() {
    let lab = lab();
    let engine = thread::spawn(|| {
        let engine =
            setup::open(&EngineOptions::lab(Backend::AfPacket)).expect("engine opens in sluice-a");
        let clock = engine.clock();
        let Engine { stack, device, .. } = engine;
        let mut first = true;
        let lose_first_fin = move |frame: &[u8]| {
            let lose = first && is_tcp_fin(frame);
            first &= !lose;
            lose
        };
        let mut engine = Engine::with_clock(stack, TxFilter::new(device, lose_first_fin), clock);
        let mut sink = SinkApp::new(5001);
        sink.stop_after = Some(1);
        sink.print = false;
        let status = engine
            .run(&mut sink, Some(Duration::from_secs(60)))
            .expect("engine runs");
        (
            status,
            sink.reports,
            engine.device.dropped(),
            engine.stack.closing(),
        )
    });
    thread::sleep(Duration::from_millis(300));
    // The client half-closes, then reads until the sink's FIN (b'' at end of stream); a
    // timeout there is the FIN that never came.
    let out = linux(
        &lab,
        &format!(
            "import socket\n\
             s=socket.create_connection(('{ENGINE_IP}',5001),timeout=20)\n\
             s.sendall(b'x'*{n}); s.shutdown(socket.SHUT_WR)\n\
             print('eof' if s.recv(1)==b'' else 'data'); s.close()",
            n = MIB
        ),
    );
    let (status, reports, dropped, closing) = engine.join().expect("engine thread");
    assert_eq!(status, AppStatus::Done);
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].bytes, MIB);
    assert_eq!(dropped, 1, "the sink's first FIN was lost");
    assert_eq!(out, "eof", "the Linux client read the end of stream");
    assert_eq!(closing, Closing::default(), "the FIN was acknowledged");
    lab.teardown().expect("lab down");
}
