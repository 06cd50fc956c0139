//! `sluice experiment flexins-tx --quick` and `flexins-rx --quick` as CI runs them: every
//! WRITE arrives byte-exact, and the header-only and direct paths touch fewer engine bytes
//! per payload byte than the staging ones (a counter comparison, never a timing).

use std::path::PathBuf;

use sluice_experiments::flexins::rx::{self, RxArgs};
use sluice_experiments::flexins::tx::{self, TxArgs};
use sluice_experiments::Common;
use sluice_rdma::stack::{RxPath, TxPath};

fn common(name: &str) -> Common {
    Common {
        quick: true,
        out: std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id())),
        seed: 1,
    }
}

#[test]
fn flexins_tx_quick_is_exact_and_header_only_touches_less() {
    let args = TxArgs {
        common: common("flexins-tx"),
        seconds: None,
    };
    let points = tx::measure(&args).expect("the experiment runs");
    assert_eq!(points.len(), 2 * tx::sizes(true).len());
    for pair in points.chunks(2) {
        let (h, s) = (&pair[0], &pair[1]);
        assert_eq!((h.path, s.path), (TxPath::HeaderOnly, TxPath::Staging));
        for p in pair {
            assert_eq!(p.result.messages, 200, "{:?} {}", p.path, p.size);
            assert!(
                p.result.exact,
                "{:?} {}: a target slot differs",
                p.path, p.size
            );
            assert_eq!(p.result.tx_touch().payload, 200 * p.size);
            assert_eq!(
                p.result.requester_qps.timeouts, 0,
                "nothing is lost on the pair"
            );
        }
        let (ht, st) = (h.result.tx_touch(), s.result.tx_touch());
        assert_eq!(ht.staging, 0);
        assert_eq!(st.staging, st.payload);
        assert!(
            ht.per_payload_byte() < st.per_payload_byte(),
            "{}: header-only {} staging {}",
            h.size,
            ht.per_payload_byte(),
            st.per_payload_byte()
        );
    }
}

#[test]
fn flexins_rx_quick_is_exact_and_direct_touches_less() {
    let args = RxArgs {
        common: common("flexins-rx"),
        seconds: None,
    };
    let points = rx::measure(&args).expect("the experiment runs");
    assert_eq!(points.len(), 2 * rx::working_sets(true).len());
    for pair in points.chunks(2) {
        let (d, s) = (&pair[0], &pair[1]);
        assert_eq!((d.path, s.path), (RxPath::Direct, RxPath::Staging));
        for p in pair {
            assert!(
                p.result.exact,
                "{:?} {}: a target slot differs",
                p.path, p.working_set
            );
            assert_eq!(p.result.rx_touch().payload, 200 * rx::SIZE);
            assert_eq!(
                p.result.requester_qps.timeouts, 0,
                "nothing is lost on the pair"
            );
        }
        let (dt, st) = (d.result.rx_touch(), s.result.rx_touch());
        assert_eq!(dt.staging, 0);
        assert!(st.staging >= st.payload, "the whole frame is staged");
        assert!(dt.per_payload_byte() < st.per_payload_byte());
    }
}

#[test]
fn the_quick_runs_write_their_csv_and_png() {
    let args = TxArgs {
        common: common("flexins-files"),
        seconds: None,
    };
    let report = tx::run(&args).expect("the experiment runs");
    print!("{}", report.render());
    assert_eq!(report.rows.len(), 6);
    assert!(report
        .rows
        .iter()
        .all(|r| r.last().map(String::as_str) == Some("yes")));
    let written = report.write(&args.common.out).expect("the CSV is written");
    let csv = std::fs::read_to_string(&written.csv).expect("readable");
    assert!(csv.starts_with("size,tx path,"), "{csv}");
    assert_eq!(csv.lines().count(), 7);
    if let Ok(png) = written.png {
        assert!(PathBuf::from(&png).exists());
    }
    let _ = std::fs::remove_dir_all(&args.common.out);
}

/// flexins-tx's TCP rows: every transfer exact; header-only TCP sends copy nothing into
/// the core (staging 0) and touch fewer bytes per payload byte than `Stack::send`.
#[test]
fn flexins_tx_tcp_rows_are_exact_and_header_only_touches_less() {
    use sluice_experiments::flexins::tcp;
    let points = tcp::measure(&[64, 65536], 256 << 10);
    for pair in points.chunks(2) {
        let (h, s) = (&pair[0], &pair[1]);
        assert!(h.exact && s.exact, "{} B writes: a stream differs", h.write);
        assert_eq!(h.touched.staging, 0);
        assert_eq!(s.touched.staging, 256 << 10);
        assert_eq!(
            h.touched.payload,
            256 << 10,
            "lossless: each byte framed once"
        );
        assert!(h.touched.per_payload_byte() < s.touched.per_payload_byte());
    }
    assert_eq!(tcp::notes(&points).len(), 4);
}
