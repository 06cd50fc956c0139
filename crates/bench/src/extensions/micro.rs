//! In-process microbenchmarks: the engine's hook path (`sluice_engine::Hooks::ingress` and
//! `egress`) run over the frames of a 64 B RPC for each row, and each shipped program under
//! the interpreter and the JIT. The setup (frames, rules, filter) is fixed; only the wall
//! clock around the loops varies, and it is read here, never in a test.

use std::hint::black_box;
use std::time::Instant;

use sluice_ebpf::{programs, Action, Counters, Env, Maps, NoTrace, Program, RunError, XdpContext};
use sluice_engine::cbpf::{self, Insn};
use sluice_engine::hooks::{Points, Tap};
use sluice_engine::{HookPoint, Hooks};

use super::rows::{firewall_rule, Cell, Extension, MicroResult, Missing, FIREWALL_RULES};

/// The programs of the interpreter-vs-JIT section (flextoe.txt 5.1's modules).
pub const JIT_PROGRAMS: [&str; 4] = ["null", "vlan_strip", "firewall", "port_counter"];
/// Payload bytes of the RPC frames (sockperf's 64 B messages).
const PAYLOAD: usize = 64;
/// Headroom the interpreter's context leaves before the frame (as the engine's scratch).
const HEADROOM: usize = 256;
/// The snap length of the bench's capture tap (sluice capture's default keeps whole frames).
const SNAPLEN: usize = 65_535;
/// Bytes of the tap's ring: records wrap around in it, as a capture ring does.
const TAP_RING: usize = 1 << 20;

/// A TCP segment of the lab's RPC: Ethernet (one 802.1Q tag if `vlan`), IPv4, TCP with the
/// timestamp option, PSH|ACK and a 64 B payload, `src:sport -> dst:dport`. Checksums are not
/// the hooks' business and stay zero.
pub fn rpc_frame(vlan: bool, src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x4d]);
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 32 + PAYLOAD) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x10, 0, 0, 0, 0x20, 0]);
    // Data offset 8 words (20 + 12 bytes of NOP, NOP, timestamps), PSH|ACK, window 512.
    f.extend_from_slice(&[0x80, 0x18, 0x02, 0x00, 0, 0, 0, 0]);
    f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    f.extend((0..PAYLOAD).map(|i| i as u8));
    f
}

/// The client's request as the engine receives it (port 11111, sockperf's), optionally
/// tagged, and the engine's reply as it sends it.
pub fn rpc_frames(vlan: bool) -> (Vec<u8>, Vec<u8>) {
    let (client, engine) = ([10, 77, 0, 2], [10, 77, 0, 1]);
    (
        rpc_frame(vlan, client, 40000, engine, 11111),
        rpc_frame(false, engine, 11111, client, 40000),
    )
}

/// A capture tap as the engine's (filter, then a copy of the frame cut at the snap length)
/// writing into a ring of its own instead of a socket: the hook path's share of capture.
struct RingTap {
    filter: Option<cbpf::Program>,
    ring: Vec<u8>,
    at: usize,
    captured: std::rc::Rc<std::cell::Cell<u64>>,
}

impl Tap for RingTap {
    fn frame(&mut self, _at: HookPoint, frame: &[u8]) {
        let wire = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        if self
            .filter
            .as_ref()
            .is_some_and(|p| p.run(frame, wire) == 0)
        {
            return;
        }
        let n = frame.len().min(SNAPLEN).min(self.ring.len());
        if self.at + n > self.ring.len() {
            self.at = 0;
        }
        self.ring[self.at..self.at + n].copy_from_slice(&frame[..n]);
        self.at += n;
        self.captured.set(self.captured.get() + 1);
    }

    fn poll_closed(&mut self) -> bool {
        false
    }
}

/// A shipped program and its maps, the firewall's holding [`FIREWALL_RULES`] rules.
fn load(name: &str) -> Result<(Program, Maps, &'static str), Missing> {
    let (bytes, section) =
        programs::shipped(name).ok_or_else(|| Missing::Failed(format!("no program {name}")))?;
    let (program, mut maps) =
        sluice_ebpf::load(bytes, section).map_err(|e| Missing::Failed(format!("{name}: {e}")))?;
    if name == "firewall" {
        let rules = maps
            .id("rules")
            .ok_or_else(|| Missing::Failed("the firewall has no map `rules`".into()))?;
        for i in 0..FIREWALL_RULES {
            maps.set(rules, &firewall_rule(i), &0u64.to_le_bytes(), 0)
                .map_err(|e| Missing::Failed(format!("firewall rule {i}: {e}")))?;
        }
    }
    Ok((program, maps, section))
}

/// Entries of the firewall's `rules` map.
fn rules_held(maps: &Maps) -> Option<u64> {
    let id = maps.id("rules")?;
    Some(maps.map(id)?.len() as u64)
}

/// Hooks set up as row `ext` runs them in the lab: its module at ingress, or a capture tap
/// at both points (with `filter` for the filtered row); and the frames it sees.
fn hooks_for(
    ext: Extension,
    filter: &[Insn],
    captured: &std::rc::Rc<std::cell::Cell<u64>>,
) -> Result<(Hooks, Option<u64>), Missing> {
    let mut hooks = Hooks::new();
    let mut rules = None;
    if let Some(name) = ext.module() {
        let (program, maps, section) = load(name)?;
        rules = rules_held(&maps);
        hooks
            .modules_mut()
            .attach(HookPoint::Ingress, name, section, program, maps)
            .map_err(|e| Missing::Failed(e.to_string()))?;
    }
    if let Some(filtered) = ext.capture() {
        let filter = if filtered {
            Some(cbpf::Program::new(filter).map_err(|e| Missing::Failed(format!("filter: {e}")))?)
        } else {
            None
        };
        let tap = RingTap {
            filter,
            ring: vec![0; TAP_RING],
            at: 0,
            captured: captured.clone(),
        };
        hooks
            .attach(Points::BOTH, Box::new(tap))
            .map_err(|e| Missing::Failed(e.to_string()))?;
    }
    Ok((hooks, rules))
}

/// Row `ext`'s hook path: `iterations` RPC request frames through ingress and as many
/// replies through egress (after a tenth as many unmeasured); ns per frame.
pub fn hook_path(ext: Extension, filter: &[Insn], iterations: u64) -> Cell<MicroResult> {
    if ext == Extension::Tracepoints {
        return tracepoints_hook_path(iterations);
    }
    let captured = std::rc::Rc::new(std::cell::Cell::new(0));
    let (mut hooks, firewall_rules) = hooks_for(ext, filter, &captured)?;
    let (rx, tx) = rpc_frames(ext == Extension::VlanStrip);
    let mut slot = tx.clone();
    let mut run = |n: u64| {
        for _ in 0..n {
            black_box(hooks.ingress(black_box(&rx)).map(<[u8]>::len));
            black_box(hooks.egress(black_box(&mut slot), tx.len()));
        }
    };
    run(iterations / 10);
    let began = Instant::now();
    run(iterations);
    let elapsed = began.elapsed();
    let frames = 2 * iterations;
    let module_runs = hooks
        .modules()
        .modules()
        .iter()
        .map(|m| m.counters.runs)
        .sum();
    Ok(MicroResult {
        ns_per_frame: elapsed.as_nanos() as f64 / frames.max(1) as f64,
        frames,
        module_runs,
        captured: captured.get(),
        firewall_rules,
    })
}

/// The tracepoints row's hook path: none. Tracepoints fire inside the TCP core and around
/// the engine's stages, not at `Hooks`; their cost is the lab row's engine CPU per operation
/// against the baseline's.
fn tracepoints_hook_path(_iterations: u64) -> Cell<MicroResult> {
    Err(Missing::NotApplicable(
        "tracepoints fire in the core, not at the hooks: see engine us/op",
    ))
}

/// A frame placed at [`HEADROOM`] in `buf` for a program run.
fn place(buf: &mut [u8], frame: &[u8]) {
    buf[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
}

/// The frame a program of the interpreter-vs-JIT section runs on: the RPC request, tagged
/// for VLAN strip (so it strips).
fn jit_frame(name: &str) -> Vec<u8> {
    rpc_frames(name == "vlan_strip").0
}

/// `name` under the interpreter (`sluice_ebpf::run`): ns per frame over `iterations` (the
/// frame is copied in before each run, as VLAN strip rewrites it; both engines pay that).
pub fn interpreter(name: &'static str, iterations: u64) -> Cell<f64> {
    let (program, mut maps, _) = load(name)?;
    per_frame(name, iterations, &mut maps, |ctx, env| {
        sluice_ebpf::run(&program, ctx, env)
    })
}

/// `name` under the JIT (crates/ebpf-jit): ns per frame, measured as [`interpreter`] is.
pub fn jit(name: &'static str, iterations: u64) -> Cell<f64> {
    if !sluice_ebpf_jit::available() {
        return Err(Missing::Failed(
            "no JIT on this machine (x86-64 Linux only)".into(),
        ));
    }
    let (program, mut maps, _) = load(name)?;
    let mut code = sluice_ebpf_jit::Compiled::compile(&program)
        .map_err(|e| Missing::Failed(format!("{name}: {e}")))?;
    per_frame(name, iterations, &mut maps, |ctx, env| code.run(ctx, env))
}

/// Times `exec` (one runtime's run of `name`) over `iterations` runs after a tenth as many
/// unmeasured, the frame copied in before each; ns per frame.
fn per_frame(
    name: &'static str,
    iterations: u64,
    maps: &mut Maps,
    mut exec: impl FnMut(&mut XdpContext<'_>, &mut Env<'_>) -> Result<Action, RunError>,
) -> Cell<f64> {
    let frame = jit_frame(name);
    let mut buf = vec![0u8; HEADROOM + frame.len()];
    let mut counters = Counters::default();
    let mut trace = NoTrace;
    let mut failed = None;
    let mut run = |n: u64| {
        for _ in 0..n {
            place(&mut buf, &frame);
            let Some(mut ctx) = XdpContext::new(&mut buf, HEADROOM, frame.len()) else {
                failed = Some("the frame does not fit its buffer".to_string());
                return;
            };
            let mut env = Env {
                maps: &mut *maps,
                now_ns: 0,
                cpu: 0,
                trace: &mut trace,
                counters: &mut counters,
            };
            // Each row's frame passes (the firewall's rules do not match it): anything else
            // means the bench measured some other path.
            match black_box(exec(&mut ctx, &mut env)) {
                Ok(Action::Pass) => {}
                Ok(other) => {
                    failed = Some(format!("returned {other:?}, not Pass"));
                    return;
                }
                Err(e) => {
                    failed = Some(e.to_string());
                    return;
                }
            }
        }
    };
    run(iterations / 10);
    let began = Instant::now();
    run(iterations);
    let elapsed = began.elapsed();
    if let Some(why) = failed {
        return Err(Missing::Failed(format!("{name}: {why}")));
    }
    Ok(elapsed.as_nanos() as f64 / iterations.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tcp port 11111`, as libpcap compiles it (`tcpdump -dd`), for the filtered tap.
    const PORT_11111: [(u16, u8, u8, u32); 20] = [
        (0x28, 0, 0, 12),
        (0x15, 0, 6, 0x86dd),
        (0x30, 0, 0, 20),
        (0x15, 0, 15, 6),
        (0x28, 0, 0, 54),
        (0x15, 12, 0, 11111),
        (0x28, 0, 0, 56),
        (0x15, 10, 11, 11111),
        (0x15, 0, 10, 0x800),
        (0x30, 0, 0, 23),
        (0x15, 0, 8, 6),
        (0x28, 0, 0, 20),
        (0x45, 6, 0, 0x1fff),
        (0xb1, 0, 0, 14),
        (0x48, 0, 0, 14),
        (0x15, 2, 0, 11111),
        (0x48, 0, 0, 16),
        (0x15, 0, 1, 11111),
        (0x6, 0, 0, 262_144),
        (0x6, 0, 0, 0),
    ];

    fn filter() -> Vec<Insn> {
        PORT_11111
            .iter()
            .map(|&(c, t, f, k)| Insn::new(c, t, f, k))
            .collect()
    }

    #[test]
    fn every_built_row_runs_its_extension_on_each_frame() {
        let n = 50;
        for ext in Extension::ALL {
            let r = hook_path(ext, &filter(), n);
            if ext == Extension::Tracepoints {
                assert!(matches!(r, Err(Missing::NotApplicable(_))), "{r:?}");
                continue;
            }
            let r = r.unwrap();
            // The warm-up's runs count too: a tenth more.
            let runs = if ext.module().is_some() {
                n + n / 10
            } else {
                0
            };
            assert_eq!(r.module_runs, runs, "{ext:?}");
            assert_eq!(r.frames, 2 * n);
            assert!(r.ns_per_frame.is_finite() && r.ns_per_frame >= 0.0);
            let captured = match ext.capture() {
                Some(_) => 2 * (n + n / 10),
                None => 0,
            };
            // Both frames are port 11111's: the filter keeps them all, as no filter does.
            assert_eq!(r.captured, captured, "{ext:?}");
            let rules = (ext == Extension::Firewall).then_some(u64::from(FIREWALL_RULES));
            assert_eq!(r.firewall_rules, rules);
        }
    }

    #[test]
    fn the_filter_runs_and_keeps_only_what_it_matches() {
        let insns = filter();
        let p = cbpf::Program::new(&insns).unwrap();
        let (rx, tx) = rpc_frames(false);
        assert_ne!(p.run(&rx, rx.len() as u32), 0);
        assert_ne!(p.run(&tx, tx.len() as u32), 0);
        let other = rpc_frame(false, [10, 77, 0, 2], 40000, [10, 77, 0, 1], 7000);
        assert_eq!(p.run(&other, other.len() as u32), 0);
    }

    #[test]
    fn the_rows_frames_pass_their_modules_as_in_the_lab() {
        // VLAN strip leaves the untagged request; the firewall passes it (no rule matches).
        let (tagged, _) = rpc_frames(true);
        let (plain, _) = rpc_frames(false);
        assert_eq!(tagged.len(), plain.len() + 4);
        let cap = std::rc::Rc::new(std::cell::Cell::new(0));
        let (mut hooks, _) = hooks_for(Extension::VlanStrip, &[], &cap).unwrap();
        assert_eq!(hooks.ingress(&tagged), Some(&plain[..]));
        let (mut hooks, rules) = hooks_for(Extension::Firewall, &[], &cap).unwrap();
        assert_eq!(rules, Some(10_000));
        assert_eq!(hooks.ingress(&plain), Some(&plain[..]));
        assert_eq!(hooks.modules().modules()[0].counters.dropped, 0);
    }

    #[test]
    fn the_interpreter_and_the_jit_run_each_program() {
        for name in JIT_PROGRAMS {
            let ns = interpreter(name, 20).unwrap();
            assert!(ns.is_finite() && ns >= 0.0, "{name}: {ns}");
            if sluice_ebpf_jit::available() {
                let ns = jit(name, 20).unwrap();
                assert!(ns.is_finite() && ns >= 0.0, "{name}: {ns}");
            } else {
                assert!(matches!(jit(name, 20), Err(Missing::Failed(_))));
            }
        }
    }
}
