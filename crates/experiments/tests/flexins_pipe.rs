//! `sluice experiment flexins-pipe --quick` as CI runs it: every WRITE and every round
//! trip arrives byte-exact, doorbell mode rings a doorbell per WRITE and pipe mode none
//! (the engine takes pipe lines instead), and the CSV holds every row. Counters and bytes,
//! never a timing. Two engines in this process; no root needed.

use std::path::PathBuf;

use sluice_experiments::flexins::pipe::{self, PipeArgs, QP_COUNTS};
use sluice_experiments::flexins::rtt::Path;
use sluice_experiments::flexins::verbs_side::Mode;
use sluice_experiments::Common;

#[test]
fn flexins_pipe_quick_is_exact_and_pipes_ring_no_doorbell() {
    let out = std::env::temp_dir().join(format!("sluice-flexins-pipe-{}", std::process::id()));
    let args = PipeArgs {
        common: Common {
            quick: true,
            out: out.clone(),
            seed: 1,
        },
        ops: None,
    };
    let r = pipe::measure(&args).expect("the experiment runs");
    assert_eq!(r.submit.len(), 2 * QP_COUNTS.len());
    for (p, (qps, mode)) in r.submit.iter().zip(
        QP_COUNTS
            .iter()
            .flat_map(|&q| [(q, Mode::Doorbell), (q, Mode::Pipe)]),
    ) {
        assert_eq!((p.qps, p.mode), (qps, mode));
        assert!(p.exact, "{mode:?} {qps}: {:?}", p.mismatch);
        assert_eq!(p.writes, 200 + 1000);
        match mode {
            Mode::Doorbell => {
                assert!(p.doorbells_per_op >= 1.0, "{qps}: {}", p.doorbells_per_op);
                assert_eq!(p.pipe_lines_per_op, 0.0);
            }
            Mode::Pipe => {
                assert_eq!(p.doorbells_per_op, 0.0, "{qps}: pipes ring no doorbell");
                assert!(p.pipe_lines_per_op >= 1.0, "{qps}: {}", p.pipe_lines_per_op);
            }
        }
    }
    assert_eq!(
        r.rtt.iter().map(|p| p.path).collect::<Vec<_>>(),
        Path::ALL.to_vec()
    );
    for p in &r.rtt {
        assert!(p.exact, "{}: a message differs", p.path.name());
        assert_eq!(p.trips, 300);
        assert_eq!(p.engine_cpu_us.is_none(), p.path == Path::LinuxTcp);
    }

    let report = pipe::report(&r);
    print!("{}", report.render());
    assert_eq!(report.rows.len(), 2 * QP_COUNTS.len() + Path::ALL.len());
    assert!(report
        .rows
        .iter()
        .all(|row| row.last().map(String::as_str) == Some("yes")));
    let written = report.write(&out).expect("the CSV is written");
    let csv = std::fs::read_to_string(&written.csv).expect("readable");
    assert!(csv.starts_with("table,row,QPs,"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + report.rows.len());
    assert!(written.csv.ends_with("flexins-pipe.csv"));
    if let Ok(png) = written.png {
        assert!(PathBuf::from(&png).exists());
    }
    let _ = std::fs::remove_dir_all(&out);
}
