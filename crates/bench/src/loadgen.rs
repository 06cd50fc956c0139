//! `sluice loadgen` (hidden): the Linux client of the bench, on kernel sockets, one thread
//! per connection. `sluice bench` runs it inside a lab namespace with `ip netns exec`.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;

use crate::error::BenchError;
use crate::measure::{self, Measurement};
use crate::plan::{Kind, REQUEST_BYTES};

/// `sluice loadgen`.
#[derive(Args, Debug, Clone)]
pub struct LoadgenArgs {
    /// What to run.
    #[arg(value_enum)]
    pub kind: Kind,
    /// Server to load, IP:PORT.
    #[arg(long)]
    pub target: SocketAddr,
    /// Connections (threads) in parallel.
    #[arg(long, default_value_t = 1)]
    pub conns: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Unmeasured seconds before them.
    #[arg(long, default_value_t = 0.5)]
    pub warmup: f64,
    /// Bytes of each rpc request and response (1 to 1 MiB; the parallelism experiment's
    /// 2 KB RPCs).
    #[arg(long, default_value_t = REQUEST_BYTES, value_parser = request_size)]
    pub size: usize,
}

/// Parses `--size`: 1 to 1 MiB.
fn request_size(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (1..=1 << 20).contains(&n) => Ok(n),
        _ => Err(format!("{v:?} is not a size within 1..=1048576 bytes")),
    }
}

/// How long a read waits before it counts as a stall (and, for request-response, fails).
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What one client thread counted.
struct Tally {
    ops: u64,
    bytes: u64,
    /// Reads that waited a whole read timeout for data (stream workloads).
    stalls: u64,
    hist: Histogram<u64>,
}

/// When measuring starts and stops.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

/// Runs `sluice loadgen` and prints its [`Measurement`] as JSON.
pub fn run(args: &LoadgenArgs) -> Result<(), BenchError> {
    let m = measure_load(args)?;
    let text = serde_json::to_string(&m).map_err(|e| BenchError::Helper {
        what: "loadgen".into(),
        detail: e.to_string(),
    })?;
    println!("{text}");
    Ok(())
}

/// Runs the workload and measures it.
pub fn measure_load(args: &LoadgenArgs) -> Result<Measurement, BenchError> {
    let conns = args.conns.max(1);
    let seconds = args.seconds.max(0.01);
    // Everyone connects first (rpc, stream), then the window opens for all at once.
    let barrier = Arc::new(Barrier::new(conns + 1));
    let begin = Arc::new(std::sync::OnceLock::<Window>::new());
    let handles: Vec<_> = (0..conns)
        .map(|_| {
            let (barrier, begin, a) = (Arc::clone(&barrier), Arc::clone(&begin), args.clone());
            thread::spawn(move || client(&a, &barrier, &begin))
        })
        .collect();
    barrier.wait();
    let start = Instant::now() + Duration::from_secs_f64(args.warmup.max(0.0));
    let window = Window {
        start,
        end: start + Duration::from_secs_f64(seconds),
    };
    let _ = begin.set(window);
    barrier.wait();
    thread::sleep(window.start.saturating_duration_since(Instant::now()));
    let cpu0 = measure::cpu_seconds("/proc/self/stat");
    let mut total = Tally {
        ops: 0,
        bytes: 0,
        stalls: 0,
        hist: measure::histogram(),
    };
    let mut first_error = None;
    let mut per_conn_bytes = Vec::with_capacity(conns);
    let mut stalled = 0;
    for h in handles {
        match h.join() {
            Ok(Ok(t)) => {
                total.ops += t.ops;
                total.bytes += t.bytes;
                total.stalls += t.stalls;
                stalled += (t.stalls > 0) as usize;
                per_conn_bytes.push(t.bytes);
                let _ = total.hist.add(&t.hist);
            }
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(_) => {
                first_error = first_error.or(Some(BenchError::Helper {
                    what: "loadgen".into(),
                    detail: "a client thread panicked".into(),
                }))
            }
        }
    }
    let cpu = measure::cpu_seconds("/proc/self/stat") - cpu0;
    if stalled > 0 {
        eprintln!(
            "sluice loadgen: {stalled} of {conns} connections waited a whole read timeout \
             ({READ_TIMEOUT:?}) for data, {} times in all",
            total.stalls
        );
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(Measurement {
        seconds,
        ops: total.ops,
        bytes: total.bytes,
        latency: measure::latency(&total.hist),
        cpu_seconds: cpu,
        per_conn_bytes: match args.kind {
            Kind::StreamUp | Kind::StreamDown => per_conn_bytes,
            Kind::Rpc | Kind::Connect => Vec::new(),
        },
    })
}

/// A connected kernel socket with latency-friendly options and a timeout against hangs.
fn connect(target: SocketAddr) -> Result<TcpStream, BenchError> {
    let s = TcpStream::connect_timeout(&target, Duration::from_secs(5))
        .map_err(|e| BenchError::io(format!("connect to {target}"), e))?;
    s.set_nodelay(true)
        .and_then(|_| s.set_read_timeout(Some(READ_TIMEOUT)))
        .and_then(|_| s.set_write_timeout(Some(Duration::from_secs(5))))
        .map_err(|e| BenchError::io("socket options", e))?;
    Ok(s)
}

/// One client thread.
fn client(
    args: &LoadgenArgs,
    barrier: &Barrier,
    begin: &std::sync::OnceLock<Window>,
) -> Result<Tally, BenchError> {
    let mut tally = Tally {
        ops: 0,
        bytes: 0,
        stalls: 0,
        hist: measure::histogram(),
    };
    // Connect before the window (the connect workload connects inside it instead).
    let stream = match args.kind {
        Kind::Connect => None,
        _ => match connect(args.target) {
            Ok(s) => Some(s),
            Err(e) => {
                barrier.wait();
                barrier.wait();
                return Err(e);
            }
        },
    };
    barrier.wait();
    barrier.wait();
    let w = *begin
        .get()
        .expect("the window is set before the second barrier");
    let io = |what: &str, e| BenchError::io(format!("{what} {}", args.target), e);
    match (args.kind, stream) {
        (Kind::Rpc, Some(mut s)) => {
            let req = vec![0x5a; args.size];
            let mut resp = vec![0; args.size];
            loop {
                let t0 = Instant::now();
                if t0 >= w.end {
                    break;
                }
                s.write_all(&req).map_err(|e| io("rpc send to", e))?;
                s.read_exact(&mut resp)
                    .map_err(|e| io("rpc recv from", e))?;
                if t0 >= w.start {
                    measure::record(&mut tally.hist, t0.elapsed());
                    tally.ops += 1;
                }
            }
        }
        (Kind::StreamUp, Some(mut s)) => {
            let chunk = vec![0x5a; 256 * 1024];
            loop {
                let now = Instant::now();
                if now >= w.end {
                    break;
                }
                let n = s.write(&chunk).map_err(|e| io("stream to", e))?;
                if now >= w.start {
                    tally.bytes += n as u64;
                }
            }
        }
        (Kind::StreamDown, Some(mut s)) => {
            let mut buf = vec![0; 256 * 1024];
            let local = s
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string());
            let mut received = 0u64;
            loop {
                let now = Instant::now();
                if now >= w.end {
                    break;
                }
                let n = match s.read(&mut buf) {
                    Ok(n) => n,
                    // A connection the server starves is a measurement (zero bytes in the
                    // window, an unfair share), not a failure: wait on until the window ends.
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        tally.stalls += u64::from(now >= w.start);
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => {
                        return Err(io(
                            &format!("stream ({local}, {received} bytes so far) from"),
                            e,
                        ))
                    }
                };
                if !measure::all_source_bytes(&buf[..n]) {
                    return Err(BenchError::Helper {
                        what: format!("stream from {}", args.target),
                        detail: format!(
                            "a byte within {received}..{} differs from what the source sent",
                            received + n as u64
                        ),
                    });
                }
                received += n as u64;
                if n == 0 {
                    return Err(BenchError::Helper {
                        what: format!("stream from {}", args.target),
                        detail: "the server closed early".into(),
                    });
                }
                if now >= w.start {
                    tally.bytes += n as u64;
                }
            }
        }
        (Kind::Connect, _) => {
            let req = [0x5a; REQUEST_BYTES];
            let mut resp = [0; REQUEST_BYTES];
            loop {
                let t0 = Instant::now();
                if t0 >= w.end {
                    break;
                }
                let mut s = connect(args.target)?;
                s.write_all(&req).map_err(|e| io("connect send to", e))?;
                s.read_exact(&mut resp)
                    .map_err(|e| io("connect recv from", e))?;
                drop(s);
                if t0 >= w.start {
                    measure::record(&mut tally.hist, t0.elapsed());
                    tally.ops += 1;
                }
            }
        }
        (_, None) => unreachable!("only connect runs without a connection"),
    }
    Ok(tally)
}
