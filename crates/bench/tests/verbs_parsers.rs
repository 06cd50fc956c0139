//! `sluice bench verbs`'s parsers on outputs captured in the lab (tests/fixtures/verbs/):
//! perftest over Sluice's verbs (ib_write_lat, ib_send_lat, ib_write_bw -q 8, ib_send_bw),
//! sockperf ping-pong over Linux TCP and over Sluice TCP, iperf3 -J over Linux TCP.

use sluice_bench::apps::tools::iperf3;
use sluice_bench::sockperf;
use sluice_bench::verbs::perftest;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.abs().max(1.0)
}

#[test]
fn perftest_latency_tables() {
    let w = perftest::parse_lat(include_str!("fixtures/verbs/ib_write_lat-2.txt")).unwrap();
    assert_eq!((w.bytes, w.iterations), (2, 200));
    assert!(
        close(w.typical_us, 80.39) && close(w.p99_us, 1874.66),
        "{w:?}"
    );
    let s = perftest::parse_lat(include_str!("fixtures/verbs/ib_send_lat-4096.txt")).unwrap();
    assert_eq!((s.bytes, s.iterations), (4096, 200));
    assert!(
        close(s.typical_us, 134.03) && close(s.p99_us, 1819.65),
        "{s:?}"
    );
    // A bandwidth table is not a latency table, and neither is an empty output.
    let bw = include_str!("fixtures/verbs/ib_send_bw-65536-q1.txt");
    assert!(perftest::parse_lat(bw).is_err());
    assert!(perftest::parse_lat("").is_err());
}

#[test]
fn perftest_bandwidth_tables() {
    let w = perftest::parse_bw(include_str!("fixtures/verbs/ib_write_bw-65536-q8.txt")).unwrap();
    // -n 200 -q 8: perftest prints the iterations of all eight QPs.
    assert_eq!((w.bytes, w.iterations), (65536, 1600));
    assert!(
        close(w.avg_mib_per_s, 118.72) && close(w.mpps, 0.0019),
        "{w:?}"
    );
    // MB is 2^20 bytes: 118.72 MiB/s is 0.9959 Gbit/s, and the message rate agrees.
    assert!(close(w.gbps(), 118.72 * 1_048_576.0 * 8.0 / 1e9));
    let from_rate = w.mpps * 1e6 * 65536.0 * 8.0 / 1e9;
    assert!((w.gbps() - from_rate).abs() / from_rate < 0.01, "{w:?}");
    let s = perftest::parse_bw(include_str!("fixtures/verbs/ib_send_bw-65536-q1.txt")).unwrap();
    assert_eq!((s.bytes, s.iterations), (65536, 200));
    assert!(
        close(s.avg_mib_per_s, 48.68) && close(s.mpps, 0.000779),
        "{s:?}"
    );
    let lat = include_str!("fixtures/verbs/ib_write_lat-2.txt");
    assert!(perftest::parse_bw(lat).is_err());
    let cut = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
               65536      200              51.54\n";
    assert!(matches!(
        perftest::parse_bw(cut),
        Err(perftest::ParseError::BadRow(_))
    ));
}

#[test]
fn sockperf_ping_pong_summaries() {
    let l = sockperf::parse(include_str!("fixtures/verbs/sockperf-pp-linux-14.txt")).unwrap();
    assert!(close(l.p50_us, 52.923) && close(l.p99_us, 86.170), "{l:?}");
    assert_eq!(l.round_trips, 11644);
    let s = sockperf::parse(include_str!("fixtures/verbs/sockperf-pp-sluice-4096.txt")).unwrap();
    assert!(
        close(s.p50_us, 155.564) && close(s.p99_us, 231.335),
        "{s:?}"
    );
    assert_eq!(s.round_trips, 3439);
    // A run that never got to its summary (e.g. connection refused) is an error.
    let refused = "sockperf: ERROR: Can`t connect socket (errno=111 Connection refused)\n";
    assert!(sockperf::parse(refused).is_err());
}

#[test]
fn iperf3_json_of_a_lab_run() {
    let json = include_str!("fixtures/verbs/iperf3-linux-65536.json");
    let gbps = iperf3::parse(json).unwrap();
    assert!(close(gbps, 9.033241814017187), "{gbps}");
}
