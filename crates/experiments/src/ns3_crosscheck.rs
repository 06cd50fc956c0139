//! The scenarios of the ns-3 cross-check (issue 22, `scripts/ns3.sh crosscheck`) in Sluice's
//! own simulator: the dumbbell of `ns3/scenarios/dumbbell.cc` and the leaf-spine of
//! `ns3/scenarios/leaf_spine.cc` (the `ooo` experiment's fabric and workload with its sizes
//! as parameters), each reporting what the ns-3 programs report, so the same core can be
//! compared across two simulators and against ns-3's own TCP.

use std::time::Duration;

use rand::distributions::{Distribution, WeightedIndex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_sim::{LinkConfig, Sim};
use sluice_tcp::{Config, Stack};

use crate::drain::{check, drain};
use crate::error::ExperimentError;
use crate::fabric::{self, FabricSpec};
use crate::flows::{quantile, Class, Flows};
use crate::ooo::{fabric_spec, open_channels, Channels, ANSWER_BYTES, BACKGROUND_SIZES};

/// Bytes of an Ethernet frame carrying a full 1500-byte IPv4 packet (queues in the ns-3
/// scenarios count packets, Sluice's simulator counts bytes).
const FRAME: usize = 1514;

/// The dumbbell: `flows` senders behind one switch, their receivers behind another.
#[derive(Clone, Debug)]
pub struct DumbbellSpec {
    /// Sender/receiver pairs, one flow each.
    pub flows: usize,
    /// Bytes per flow.
    pub bytes: u64,
    /// Bottleneck rate, bits per second.
    pub bottleneck_bps: u64,
    /// Bottleneck one-way delay.
    pub bottleneck_delay: Duration,
    /// Host link rate, bits per second.
    pub access_bps: u64,
    /// Host link one-way delay.
    pub access_delay: Duration,
    /// Bottleneck queue, packets.
    pub queue_packets: usize,
    /// ECN marking threshold K, packets (marked at K or more queued).
    pub ecn_k_packets: usize,
    /// Congestion control: "dctcp" or "newreno".
    pub cc: String,
    /// Out-of-order intervals per connection (ns-3's TCP receiver keeps every segment).
    pub ooo_intervals: usize,
    /// Nagle's algorithm on the hosts (ns-3's TCP runs without: `TcpNoDelay`).
    pub nagle: bool,
    /// Seed of the run.
    pub seed: u64,
    /// Simulated time allowed.
    pub seconds: f64,
}

/// The leaf-spine: the `ooo` experiment's fabric and workload, sizes as parameters.
#[derive(Clone, Debug)]
pub struct LeafSpineSpec {
    /// The fabric.
    pub fabric: FabricSpec,
    /// Workers answering each query.
    pub fan_in: usize,
    /// Queries per second, whole fabric.
    pub queries_per_sec: f64,
    /// Background load as a fraction of each host's link.
    pub background_load: f64,
    /// Arrivals stop after this much virtual time; the run then drains.
    pub duration: Duration,
    /// Out-of-order intervals per connection.
    pub ooo_intervals: usize,
    /// SACK scoreboard ranges per connection (`Config::sack_scoreboard`; the core's 8).
    pub sack_scoreboard: usize,
    /// Nagle's algorithm on the hosts (ns-3's TCP runs without: `TcpNoDelay`).
    pub nagle: bool,
    /// Congestion control: "dctcp" or "newreno".
    pub cc: String,
    /// Seed of the run.
    pub seed: u64,
    /// Keep the workload drawn ([`Outcome::workload`]), for ns-3's leaf-spine to replay.
    pub keep_workload: bool,
}

impl LeafSpineSpec {
    /// The `ooo` experiment's size (`quick`: its --quick size), with `ms` of arrivals.
    pub fn ooo(quick: bool, ms: u64, seed: u64) -> Self {
        LeafSpineSpec {
            fabric: fabric_spec(quick),
            fan_in: if quick { 4 } else { 12 },
            queries_per_sec: if quick { 2_000.0 } else { 4_000.0 },
            background_load: 0.5,
            duration: Duration::from_millis(ms),
            ooo_intervals: 64,
            sack_scoreboard: 8,
            nagle: true,
            cc: "dctcp".into(),
            seed,
            keep_workload: false,
        }
    }
}

/// What a run reports, as the ns-3 scenarios do.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Completion times of every finished message (flow), ms.
    pub fct_ms: Vec<f64>,
    /// Those of the foreground (partition-aggregate answers; the dumbbell's flows).
    pub fg_ms: Vec<f64>,
    /// Those of the background transfers.
    pub bg_ms: Vec<f64>,
    /// Messages started.
    pub messages: usize,
    /// Bytes delivered over the span from the first start to the last byte, Gbit/s.
    pub gbps: f64,
    /// Retransmission timeouts of all hosts.
    pub rtos: u64,
    /// Bytes retransmitted by all hosts.
    pub retransmitted_bytes: u64,
    /// Simulator events processed.
    pub events: u64,
    /// Frames every link's queue dropped (tail drops), both directions.
    pub tail_drops: u64,
    /// Frames every link marked CE, both directions.
    pub ecn_marks: u64,
    /// The leaf-spine's channels and arrivals when asked for (`--workload` of
    /// ns3/scenarios/leaf_spine.cc): lines `c SRC DST` in channel order, then
    /// `a AT_NS CHANNEL BYTES fg|bg`, the time counted from when every channel is open.
    pub workload: Option<String>,
}

impl Outcome {
    /// The `q`-quantile of all completion times, ms (NaN for none).
    pub fn fct(&self, q: f64) -> f64 {
        quantile(&mut self.fct_ms.clone(), q)
    }

    /// The CSV the ns-3 scenarios' `--csv` share with it: a header line and one row.
    pub fn csv(&self) -> String {
        let mut fg = self.fg_ms.clone();
        let mut bg = self.bg_ms.clone();
        format!(
            "fct p50 ms,fct p99 ms,Gbit/s,completed,messages,fg p90 ms,fg p99.9 ms,bg p90 ms,\
             bg p99.9 ms,RTOs,retx MB,events,tail drops,ECN marks\n\
             {},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            self.fct(0.5),
            self.fct(0.99),
            self.gbps,
            self.fct_ms.len(),
            self.messages,
            quantile(&mut fg, 0.9),
            quantile(&mut fg, 0.999),
            quantile(&mut bg, 0.9),
            quantile(&mut bg, 0.999),
            self.rtos,
            self.retransmitted_bytes as f64 / 1e6,
            self.events,
            self.tail_drops,
            self.ecn_marks,
        )
    }
}

/// Applies congestion control `cc` ("dctcp" or "newreno") to a host's configuration.
fn apply_cc(c: &mut Config, cc: &str) -> Result<(), ExperimentError> {
    c.congestion_control = cc_algorithm(cc)?;
    Ok(())
}

/// The algorithm `cc` names: "dctcp" or "newreno".
fn cc_algorithm(cc: &str) -> Result<sluice_tcp::Algorithm, ExperimentError> {
    match cc {
        "dctcp" => Ok(sluice_tcp::Algorithm::Dctcp),
        "newreno" | "reno" => Ok(sluice_tcp::Algorithm::NewReno),
        other => Err(ExperimentError::Usage(format!(
            "--cc: dctcp or newreno, not '{other}'"
        ))),
    }
}

/// Sums the hosts' timeouts and retransmitted bytes.
fn host_counters(sim: &Sim<Stack>, hosts: &[sluice_sim::NodeId]) -> (u64, u64) {
    hosts
        .iter()
        .filter_map(|&h| sim.host(h))
        .map(|s| (s.counters().timeouts, s.counters().retransmitted_bytes))
        .fold((0, 0), |(a, b), (t, r)| (a + t, b + r))
}

/// Sums tail drops and CE marks over links `0..links`, both directions.
fn link_counters(sim: &Sim<Stack>, links: usize) -> (u64, u64) {
    (0..links)
        .map(|i| sim.link_stats(sluice_sim::LinkId(i)))
        .fold((0, 0), |(d, m), (ab, ba)| {
            (
                d + ab.queue_drops + ba.queue_drops,
                m + ab.ecn_marked + ba.ecn_marked,
            )
        })
}

/// Runs the dumbbell in Sluice's simulator: hosts on two switches, the switches joined by
/// the bottleneck (a queue of `queue_packets` frames marking past K-1 full frames, so a
/// full-sized arrival to K queued is marked as in the ns-3 queue disc).
pub fn dumbbell(spec: &DumbbellSpec) -> Result<Outcome, ExperimentError> {
    if spec.flows == 0 || spec.ecn_k_packets == 0 || spec.queue_packets < spec.ecn_k_packets {
        return Err(ExperimentError::Usage(
            "need --flows >= 1 and 1 <= --ecn-k <= --queue".into(),
        ));
    }
    let mut sim: Sim<Stack> = Sim::new(spec.seed);
    let left = sim.add_static_switch();
    let right = sim.add_static_switch();
    let bottleneck = LinkConfig::new(spec.bottleneck_bps, spec.bottleneck_delay)
        .with_queue(spec.queue_packets * FRAME)
        .with_queue_packets(spec.queue_packets)
        .with_ecn((spec.ecn_k_packets - 1) * FRAME);
    let core = sim.connect(left, right, bottleneck)?;
    // Host links take any burst, as the ns-3 hosts' 10000-packet device queues do.
    let access = LinkConfig::new(spec.access_bps, spec.access_delay).with_queue(10_000 * FRAME);
    let n = 2 * spec.flows;
    let mut nodes = Vec::with_capacity(n);
    let mut ips = Vec::with_capacity(n);
    let mut links = Vec::with_capacity(n);
    for i in 0..n {
        let (mac, ip) = fabric::host_addr(i);
        let mut c = Config::new(mac, ip);
        c.seed = spec.seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
        c.ooo_intervals = spec.ooo_intervals;
        c.nagle = spec.nagle;
        apply_cc(&mut c, &spec.cc)?;
        let mut stack =
            Stack::new(c).map_err(|e| ExperimentError::Usage(format!("host config: {e}")))?;
        for j in (0..n).filter(|&j| j != i) {
            let (m, a) = fabric::host_addr(j);
            stack.add_neighbor(a, m);
        }
        let node = sim.add_host(stack);
        let switch = if i < spec.flows { left } else { right };
        links.push(sim.connect(node, switch, access.clone())?);
        nodes.push(node);
        ips.push(ip);
    }
    for (i, &link) in links.iter().enumerate() {
        let mac = fabric::host_addr(i).0 .0;
        let home_left = i < spec.flows;
        sim.add_route(if home_left { left } else { right }, mac, &[link])?;
        sim.add_route(if home_left { right } else { left }, mac, &[core])?;
    }
    let mut flows = Flows::new(&mut sim, &nodes, &ips)?;
    // Starts spread over the first 100 us, as the ns-3 dumbbell's.
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let mut starts: Vec<(Duration, usize)> = (0..spec.flows)
        .map(|i| (Duration::from_nanos(rng.gen_range(1_000..101_000)), i))
        .collect();
    starts.sort();
    let begin = sim.now();
    for &(at, i) in &starts {
        let _ = sim.run_until(begin + at, |now, hosts| {
            flows.step(now, hosts);
            false
        });
        let chan = flows.open(&mut sim, i, spec.flows + i)?;
        flows.send(&mut sim, chan, spec.bytes, Class::Foreground)?;
        check(&flows)?;
    }
    let deadline = begin + Duration::from_secs_f64(spec.seconds);
    let _ = sim.run_until(deadline, |now, hosts| {
        flows.step(now, hosts);
        flows.idle()
    });
    check(&flows)?;
    let first = starts.first().map_or(Duration::ZERO, |s| s.0);
    let fct_ms: Vec<f64> = flows
        .done
        .iter()
        .map(|c| c.fct.as_secs_f64() * 1e3)
        .collect();
    // The span ends with the last flow: its start plus its completion time.
    let last = flows
        .done
        .iter()
        .map(|c| starts[c.channel].0.as_secs_f64() + c.fct.as_secs_f64())
        .fold(0.0, f64::max);
    let delivered: u64 = flows.done.iter().map(|c| c.bytes).sum();
    let span = last - first.as_secs_f64();
    let (rtos, retransmitted_bytes) = host_counters(&sim, &nodes);
    // The bottleneck and a link per host.
    let (tail_drops, ecn_marks) = link_counters(&sim, 1 + n);
    Ok(Outcome {
        fg_ms: fct_ms.clone(),
        fct_ms,
        bg_ms: Vec::new(),
        messages: spec.flows,
        gbps: if span > 0.0 {
            delivered as f64 * 8.0 / span / 1e9
        } else {
            0.0
        },
        rtos,
        retransmitted_bytes,
        events: sim.stats().events,
        tail_drops,
        ecn_marks,
        workload: None,
    })
}

/// Runs the leaf-spine in Sluice's simulator: `ooo`'s `run_one` with its sizes as
/// parameters and one congestion control and fidelity.
pub fn leaf_spine(spec: &LeafSpineSpec) -> Result<Outcome, ExperimentError> {
    let seed = spec.seed;
    let algorithm = cc_algorithm(&spec.cc)?;
    // ooo's fabric and channels, two background channels per host, tables for 4096
    // connections so larger fabrics fit.
    let Channels {
        mut sim,
        fab,
        mut flows,
        answers,
        background,
        mut rng,
    } = open_channels(&spec.fabric, seed, 2, 4096, &mut |c| {
        c.ooo_intervals = spec.ooo_intervals;
        c.sack_scoreboard = spec.sack_scoreboard;
        c.nagle = spec.nagle;
        c.congestion_control = algorithm;
    })?;
    let per_leaf = spec.fabric.hosts_per_leaf;
    let sizes = WeightedIndex::new(BACKGROUND_SIZES.iter().map(|(_, p)| *p))
        .map_err(|e| ExperimentError::Usage(e.to_string()))?;
    let mean_bg: f64 = BACKGROUND_SIZES.iter().map(|(b, p)| *b as f64 * p).sum();
    let bg_rate = spec.background_load * spec.fabric.host_bps as f64 / 8.0 / mean_bg;
    let horizon = spec.duration.as_secs_f64();
    let exp = |rng: &mut ChaCha8Rng, rate: f64| -rng.gen::<f64>().max(1e-12).ln() / rate;
    // (time, channel, bytes, class)
    let mut arrivals: Vec<(Duration, usize, u64, Class)> = Vec::new();
    if spec.queries_per_sec > 0.0 {
        let mut t = exp(&mut rng, spec.queries_per_sec);
        while t < horizon {
            let chans = &answers[rng.gen_range(0..spec.fabric.leaves) * per_leaf];
            let mut picked = Vec::with_capacity(spec.fan_in);
            while picked.len() < spec.fan_in.min(chans.len()) {
                let c = chans[rng.gen_range(0..chans.len())];
                if !picked.contains(&c) {
                    picked.push(c);
                }
            }
            for c in picked {
                arrivals.push((
                    Duration::from_secs_f64(t),
                    c,
                    ANSWER_BYTES,
                    Class::Foreground,
                ));
            }
            t += exp(&mut rng, spec.queries_per_sec);
        }
    }
    if bg_rate > 0.0 {
        for chans in &background {
            let mut t = exp(&mut rng, bg_rate);
            while t < horizon {
                let bytes = BACKGROUND_SIZES[sizes.sample(&mut rng)].0;
                let chan = chans[rng.gen_range(0..chans.len())];
                arrivals.push((Duration::from_secs_f64(t), chan, bytes, Class::Background));
                t += exp(&mut rng, bg_rate);
            }
        }
    }
    arrivals.sort_by_key(|a| a.0);
    let messages = arrivals.len();
    let workload = spec.keep_workload.then(|| {
        let mut w = String::new();
        let mut k = 0;
        while let Some((src, dst)) = flows.ends(k) {
            w.push_str(&format!("c {src} {dst}\n"));
            k += 1;
        }
        for (at, chan, bytes, class) in &arrivals {
            let class = if *class == Class::Foreground {
                "fg"
            } else {
                "bg"
            };
            w.push_str(&format!("a {} {chan} {bytes} {class}\n", at.as_nanos()));
        }
        w
    });
    let start = sim.now();
    for (at, chan, bytes, class) in arrivals {
        let _ = sim.run_until(start + at, |now, hosts| {
            flows.step(now, hosts);
            false
        });
        flows.send(&mut sim, chan, bytes, class)?;
        check(&flows)?;
    }
    drain(&mut sim, &mut flows, Duration::from_secs(5), "messages")?;
    let ms = |class: Option<Class>| -> Vec<f64> {
        flows
            .done
            .iter()
            .filter(|c| class.is_none_or(|k| c.class == k))
            .map(|c| c.fct.as_secs_f64() * 1e3)
            .collect()
    };
    let delivered: u64 = flows.done.iter().map(|c| c.bytes).sum();
    let span = sim.now().saturating_since(start).as_secs_f64();
    let (rtos, retransmitted_bytes) = host_counters(&sim, &fab.hosts);
    // A link per host and one per leaf and spine (hosts' egress queues included).
    let links = fab.hosts.len() + spec.fabric.leaves * spec.fabric.spines;
    let (tail_drops, ecn_marks) = link_counters(&sim, links);
    Ok(Outcome {
        fct_ms: ms(None),
        fg_ms: ms(Some(Class::Foreground)),
        bg_ms: ms(Some(Class::Background)),
        messages,
        gbps: if span > 0.0 {
            delivered as f64 * 8.0 / span / 1e9
        } else {
            0.0
        },
        rtos,
        retransmitted_bytes,
        events: sim.stats().events,
        tail_drops,
        ecn_marks,
        workload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumbbell_flows_complete_within_the_bottleneck() {
        let spec = DumbbellSpec {
            flows: 2,
            bytes: 200_000,
            bottleneck_bps: 1_000_000_000,
            bottleneck_delay: Duration::from_micros(10),
            access_bps: 10_000_000_000,
            access_delay: Duration::from_micros(1),
            queue_packets: 200,
            ecn_k_packets: 20,
            cc: "dctcp".into(),
            ooo_intervals: 1,
            nagle: true,
            seed: 1,
            seconds: 0.1,
        };
        let o = dumbbell(&spec).unwrap();
        assert_eq!(o.fct_ms.len(), 2);
        // 400 KB at 1 Gbit/s take at least 3.2 ms; the aggregate cannot beat the link.
        assert!(o.fct(0.99) >= 3.2, "{o:?}");
        assert!(o.gbps > 0.3 && o.gbps <= 1.0, "{o:?}");
        // Two initial windows fit the 200-frame queue; DCTCP's K = 20 marks on the way.
        assert_eq!(o.tail_drops, 0, "{o:?}");
        assert!(o.ecn_marks > 0, "{o:?}");
        let csv = o.csv();
        assert!(csv.starts_with("fct p50 ms,fct p99 ms,Gbit/s,completed,messages"));
        assert_eq!(csv.lines().nth(1).unwrap().split(',').nth(3), Some("2"));
    }

    #[test]
    fn leaf_spine_quick_completes_every_message() {
        let mut spec = LeafSpineSpec::ooo(true, 2, 1);
        spec.keep_workload = true;
        let o = leaf_spine(&spec).unwrap();
        assert!(o.messages > 0);
        // The workload written for ns-3: every channel, then every arrival.
        let w = o.workload.unwrap();
        let channels = w.lines().filter(|l| l.starts_with("c ")).count();
        // 2 aggregators x 4 workers in the other rack, 2 background channels per host.
        assert_eq!(channels, 2 * 4 + 8 * 2);
        assert_eq!(
            w.lines().filter(|l| l.starts_with("a ")).count(),
            o.messages
        );
        assert_eq!(o.fct_ms.len(), o.messages);
        assert!(o.fg_ms.iter().all(|&t| t > 0.0));
    }

    #[test]
    fn without_nagle_an_answer_does_not_wait_a_round_trip() {
        // An 8 KB answer ends in a partial segment, which Nagle holds until the full ones
        // are acknowledged: the matched setting (ns-3's TcpNoDelay) must shorten the p50.
        let mut spec = LeafSpineSpec::ooo(true, 1, 1);
        let with = leaf_spine(&spec).unwrap();
        spec.nagle = false;
        let without = leaf_spine(&spec).unwrap();
        assert_eq!(without.fct_ms.len(), without.messages);
        assert!(
            without.fct(0.5) < 0.8 * with.fct(0.5),
            "p50 {} without Nagle, {} with",
            without.fct(0.5),
            with.fct(0.5)
        );
    }

    #[test]
    fn an_unknown_congestion_control_is_refused() {
        let mut spec = LeafSpineSpec::ooo(true, 1, 1);
        spec.cc = "vegas".into();
        let e = leaf_spine(&spec).unwrap_err();
        assert!(e.to_string().contains("vegas"), "{e}");
    }
}
