//! Message-size distributions W1-W5 of the Homa papers (Montazeri et al., "Homa: A
//! Receiver-Driven Low-Latency Transport Protocol Using Network Priorities", SIGCOMM 2018,
//! Figure 1): W1 Facebook memcached, W2 Google search RPC, W3 Google aggregated RPC, W4
//! Facebook Hadoop, W5 the DCTCP paper's web search.
//!
//! Source: the weights in PlatformLab/HomaModule `util/dist.cc` (commit 9edb958, 2026-07),
//! turned into cumulative fractions and coarsened to the points where the next size would be
//! more than 1.5x the last kept one or the fraction would climb more than 0.05: a sample
//! is rounded up to the next kept size, so means run 10-20 % above the originals'.

use rand::Rng;

/// One of the five workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Facebook memcached (key-value) sizes.
    W1,
    /// Google search RPCs.
    W2,
    /// All of Google's RPCs, aggregated.
    W3,
    /// Facebook Hadoop.
    W4,
    /// DCTCP web search.
    W5,
}

impl Workload {
    /// All five, in order.
    pub const ALL: [Workload; 5] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
    ];

    /// Its short name ("W1".."W5").
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
            Workload::W5 => "W5",
        }
    }

    /// What it was measured on.
    pub fn origin(self) -> &'static str {
        match self {
            Workload::W1 => "Facebook memcached",
            Workload::W2 => "Google search RPC",
            Workload::W3 => "Google aggregated RPC",
            Workload::W4 => "Facebook Hadoop",
            Workload::W5 => "DCTCP web search",
        }
    }

    /// Its CDF: (size in bytes, fraction of messages of at most that size), increasing.
    pub fn points(self) -> &'static [(u64, f64)] {
        match self {
            Workload::W1 => &W1,
            Workload::W2 => &W2,
            Workload::W3 => &W3,
            Workload::W4 => &W4,
            Workload::W5 => &W5,
        }
    }

    /// By name, case-insensitively.
    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(s))
    }
}

/// A size distribution to sample: a workload's CDF, its sizes optionally capped (the
/// simulator cannot afford W4's and W5's largest messages everywhere).
#[derive(Clone, Debug)]
pub struct SizeDist {
    points: Vec<(u64, f64)>,
    mean: f64,
}

impl SizeDist {
    /// `w`'s distribution with sizes above `cap` truncated to `cap` (as Homa's generator
    /// does with its max_length).
    pub fn new(w: Workload, cap: Option<u64>) -> SizeDist {
        Self::from_points(w.points(), cap)
    }

    /// A distribution from CDF points (size, cumulative fraction), sizes capped at `cap`.
    pub fn from_points(raw: &[(u64, f64)], cap: Option<u64>) -> SizeDist {
        let cap = cap.unwrap_or(u64::MAX).max(1);
        let mut points: Vec<(u64, f64)> = Vec::with_capacity(raw.len());
        for &(size, frac) in raw {
            let size = size.min(cap);
            match points.last_mut() {
                Some(last) if last.0 == size => last.1 = frac,
                _ => points.push((size, frac)),
            }
        }
        if let Some(last) = points.last_mut() {
            last.1 = 1.0;
        }
        let mut mean = 0.0;
        let mut prev = 0.0;
        for &(size, frac) in &points {
            mean += size as f64 * (frac - prev);
            prev = frac;
        }
        SizeDist { points, mean }
    }

    /// The mean size in bytes.
    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// The largest size.
    pub fn max(&self) -> u64 {
        self.points.last().map_or(0, |p| p.0)
    }

    /// The fraction of messages of at most `bytes`.
    pub fn cdf(&self, bytes: u64) -> f64 {
        self.points
            .iter()
            .take_while(|&&(size, _)| size <= bytes)
            .last()
            .map_or(0.0, |p| p.1)
    }

    /// One size: the smallest whose cumulative fraction reaches a uniform draw.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let i = self.points.partition_point(|&(_, f)| f < u);
        self.points
            .get(i)
            .or(self.points.last())
            .map_or(1, |p| p.0.max(1))
    }
}

/// W1: (bytes, cumulative fraction), from HomaModule util/dist.cc.
const W1: [(u64, f64); 29] = [
    (8, 0.310940),
    (10, 0.327680),
    (11, 0.417570),
    (14, 0.441550),
    (21, 0.485580),
    (31, 0.508393),
    (45, 0.539361),
    (67, 0.580088),
    (95, 0.627045),
    (127, 0.672612),
    (165, 0.717485),
    (215, 0.764283),
    (280, 0.810777),
    (376, 0.859087),
    (534, 0.908379),
    (780, 0.947937),
    (1141, 0.973267),
    (1669, 0.987495),
    (2441, 0.994604),
    (3570, 0.997819),
    (5221, 0.999163),
    (7635, 0.999691),
    (11164, 0.999889),
    (16326, 0.999961),
    (23874, 0.999986),
    (34911, 0.999995),
    (51051, 0.999998),
    (74653, 0.999999),
    (100000, 1.000000),
];

/// W2: (bytes, cumulative fraction), from HomaModule util/dist.cc.
const W2: [(u64, f64); 44] = [
    (8, 0.170108),
    (32, 0.189008),
    (38, 0.230237),
    (46, 0.271465),
    (58, 0.312693),
    (85, 0.334070),
    (116, 0.340176),
    (151, 0.378344),
    (197, 0.427199),
    (256, 0.463840),
    (269, 0.508496),
    (284, 0.553152),
    (301, 0.597808),
    (320, 0.642464),
    (341, 0.687120),
    (366, 0.731776),
    (394, 0.776432),
    (427, 0.821088),
    (465, 0.865745),
    (539, 0.915172),
    (788, 0.943797),
    (1138, 0.962690),
    (1707, 0.976431),
    (2560, 0.986736),
    (3724, 0.993892),
    (5461, 0.996874),
    (7447, 0.998115),
    (10923, 0.998663),
    (16384, 0.998902),
    (23406, 0.999045),
    (34493, 0.999161),
    (50412, 0.999286),
    (72818, 0.999453),
    (109227, 0.999767),
    (163840, 0.999913),
    (238313, 0.999965),
    (349525, 0.999979),
    (476625, 0.999982),
    (704160, 0.999988),
    (912974, 0.999991),
    (1297841, 0.999995),
    (1644453, 0.999997),
    (2243665, 0.999998),
    (3529904, 1.000000),
];

/// W3: (bytes, cumulative fraction), from HomaModule util/dist.cc.
const W3: [(u64, f64); 51] = [
    (8, 0.064883),
    (32, 0.097324),
    (46, 0.132092),
    (64, 0.155271),
    (70, 0.187988),
    (77, 0.220705),
    (85, 0.253422),
    (96, 0.286139),
    (110, 0.318856),
    (128, 0.351573),
    (146, 0.388155),
    (171, 0.424737),
    (205, 0.461319),
    (256, 0.497901),
    (268, 0.523994),
    (282, 0.550086),
    (296, 0.576179),
    (313, 0.602272),
    (331, 0.628365),
    (352, 0.654457),
    (375, 0.680550),
    (402, 0.706643),
    (433, 0.732736),
    (469, 0.758828),
    (597, 0.807286),
    (843, 0.846426),
    (1229, 0.878420),
    (1843, 0.903788),
    (2731, 0.921908),
    (4096, 0.934955),
    (6046, 0.953893),
    (8957, 0.967789),
    (13435, 0.980219),
    (19962, 0.986740),
    (29943, 0.989863),
    (44772, 0.991932),
    (67025, 0.993428),
    (99970, 0.995924),
    (149435, 0.997454),
    (224152, 0.998229),
    (335632, 0.998911),
    (501350, 0.999450),
    (749820, 0.999655),
    (1124225, 0.999776),
    (1685202, 0.999856),
    (2505735, 0.999909),
    (3710020, 0.999945),
    (5368784, 0.999967),
    (7648594, 0.999982),
    (10668901, 0.999992),
    (15158197, 1.000000),
];

/// W4: (bytes, cumulative fraction), from HomaModule util/dist.cc.
const W4: [(u64, f64); 41] = [
    (294, 0.049780),
    (313, 0.094750),
    (331, 0.144010),
    (365, 0.189580),
    (446, 0.239360),
    (491, 0.283420),
    (513, 0.322460),
    (537, 0.361500),
    (561, 0.400540),
    (587, 0.439580),
    (638, 0.487900),
    (713, 0.537880),
    (859, 0.586700),
    (1277, 0.628200),
    (1865, 0.670260),
    (2742, 0.679350),
    (4030, 0.687720),
    (5887, 0.697770),
    (7830, 0.708200),
    (10373, 0.710800),
    (13741, 0.713400),
    (18203, 0.716000),
    (24115, 0.718600),
    (35808, 0.728640),
    (46763, 0.776760),
    (64921, 0.826190),
    (85305, 0.875060),
    (127441, 0.904240),
    (189618, 0.927540),
    (283277, 0.952570),
    (406302, 0.960010),
    (588723, 0.965600),
    (874164, 0.970990),
    (1290088, 0.976750),
    (1919490, 0.983640),
    (2527289, 0.988300),
    (3430822, 0.990900),
    (4657379, 0.993500),
    (6322443, 0.996100),
    (8582787, 0.998700),
    (10000000, 1.000000),
];

/// W5: (bytes, cumulative fraction), from HomaModule util/dist.cc.
const W5: [(u64, f64); 30] = [
    (1430, 0.025000),
    (2860, 0.050000),
    (4290, 0.075000),
    (5720, 0.100000),
    (7150, 0.125000),
    (10010, 0.157143),
    (14700, 0.178571),
    (20580, 0.216667),
    (23520, 0.250000),
    (26460, 0.283333),
    (33810, 0.328571),
    (42630, 0.371429),
    (52920, 0.419500),
    (63210, 0.465000),
    (73500, 0.510500),
    (110250, 0.549250),
    (164640, 0.581625),
    (246960, 0.606554),
    (364560, 0.621536),
    (529200, 0.642509),
    (784980, 0.675094),
    (1177470, 0.720120),
    (1641990, 0.767568),
    (2400510, 0.815000),
    (3576510, 0.855000),
    (4899510, 0.900000),
    (10291470, 0.902505),
    (15190980, 0.927503),
    (22540980, 0.965004),
    (29400000, 1.000000),
];

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn every_cdf_rises_to_one_and_samples_follow_it() {
        for w in Workload::ALL {
            let p = w.points();
            assert!(
                p.windows(2).all(|x| x[0].0 < x[1].0 && x[0].1 <= x[1].1),
                "{w:?}"
            );
            assert_eq!(p.last().unwrap().1, 1.0);
            let d = SizeDist::new(w, None);
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            let n = 20_000;
            let (median, _) = p.iter().copied().find(|&(_, f)| f >= 0.5).unwrap();
            let below = (0..n).filter(|_| d.sample(&mut rng) <= median).count();
            let frac = below as f64 / n as f64;
            assert!((0.45..0.6).contains(&frac), "{w:?}: {frac}");
        }
        // W1 is tiny, W5 heavy: their means are orders of magnitude apart.
        assert!(SizeDist::new(Workload::W1, None).mean() < 300.0);
        assert!(SizeDist::new(Workload::W5, None).mean() > 2e6);
        assert_eq!(Workload::parse("w3"), Some(Workload::W3));
        let w1 = SizeDist::new(Workload::W1, None);
        assert_eq!(w1.cdf(7), 0.0);
        assert!((w1.cdf(8) - 0.31094).abs() < 1e-6);
        assert_eq!(w1.cdf(u64::MAX), 1.0);
    }

    #[test]
    fn a_cap_truncates_the_tail_and_lowers_the_mean() {
        let full = SizeDist::new(Workload::W5, None);
        let capped = SizeDist::new(Workload::W5, Some(1_000_000));
        assert_eq!(capped.max(), 1_000_000);
        assert!(capped.mean() < full.mean() / 2.0);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!((0..1000).all(|_| capped.sample(&mut rng) <= 1_000_000));
    }
}
