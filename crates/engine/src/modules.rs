//! eBPF modules at the hook points (issue 19 item 1b; flextoe.txt 3.3, 4): an ordered chain
//! of verified programs per point, each run on the frame with the XDP verdicts:
//! - Pass: on to the next program, then the next stage, with the frame as the program left
//!   it (a VLAN tag stripped, the head adjusted);
//! - Drop (XDP_DROP, XDP_ABORTED, an unknown code): the frame is dropped, counted per module;
//! - Tx: at ingress the (possibly modified) frame goes back out of the device
//!   ([`Chain::pop_reflected`]); at egress it is already going out, so it counts as Pass;
//! - Redirect: the frame goes to the control plane's bounded queue
//!   ([`Chain::pop_redirected`]); when that is full the frame is dropped and counted.
//!
//! A run error (a verifier bug caught by the interpreter, maps that do not match) counts and
//! passes the frame: fail-open, so that a broken module cannot black-hole the host.
//! A run allocates nothing: the frame is copied into one reused scratch buffer with
//! [`HEADROOM`] bytes in front for bpf_xdp_adjust_head.

use std::collections::VecDeque;
use std::fmt;

use sluice_ebpf::{Action, Counters, Env, Maps, NoTrace, Program, XdpContext};
use sluice_ebpf_jit::{Compiled, JitError, Mode};

use crate::hook_point::HookPoint;

/// Most modules in one point's chain.
pub const MAX_MODULES: usize = 8;
/// Bytes in front of the frame for bpf_xdp_adjust_head (as XDP_PACKET_HEADROOM).
pub const HEADROOM: usize = 256;
/// Largest frame a chain runs on (a whole GSO segment); larger ones pass unrun, counted.
pub const MAX_FRAME: usize = 65_536 + 128;
/// Frames held for the device (Tx at ingress) or the control plane (Redirect), each.
pub const MAX_PENDING: usize = 256;

/// Names a loaded module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(pub u32);

impl fmt::Display for ModuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A verified program attached at a point, with its maps and counters.
pub struct Module {
    /// Its id, for unload and the maps.
    pub id: ModuleId,
    /// Where it runs.
    pub at: HookPoint,
    /// What the operator called it (the object's file name, or a shipped program's name).
    pub name: String,
    /// The ELF section the program came from.
    pub section: String,
    /// The program.
    pub program: Program,
    /// Its maps, read and written by the control plane between frames.
    pub maps: Maps,
    /// Runs by outcome (runs, passed, dropped, aborted, tx, redirected, run errors).
    pub counters: Counters,
    /// The program compiled by the JIT (sluice-ebpf-jit), if it is; else it is interpreted.
    pub jit: Option<Compiled>,
}

impl Module {
    /// Whether it runs compiled or interpreted.
    pub fn mode(&self) -> Mode {
        if self.jit.is_some() {
            Mode::Jit
        } else {
            Mode::Interp
        }
    }
}

/// What a chain decided for a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// On to the next stage; the frame is `scratch[start..end]` if a program changed it.
    Pass,
    /// Dropped (counted by the module that decided).
    Drop,
    /// Queued to go back out of the device (ingress only).
    Reflect,
    /// Queued for the control plane.
    Redirect,
}

/// Why a module was not attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleAttachError {
    /// [`MAX_MODULES`] modules run at that point already.
    Full(HookPoint),
}

impl fmt::Display for ModuleAttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleAttachError::Full(at) => {
                write!(f, "{MAX_MODULES} modules are attached at {at} already")
            }
        }
    }
}

impl std::error::Error for ModuleAttachError {}

/// Counters of a chain that belong to no module.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainCounters {
    /// Frames larger than [`MAX_FRAME`], passed without running the chain.
    pub too_big: u64,
    /// Frames reflected (Tx at ingress) and sent.
    pub reflected: u64,
    /// Frames redirected to the control plane's queue.
    pub redirected: u64,
    /// Tx or Redirect frames dropped because their queue was full.
    pub queue_full: u64,
    /// Egress frames a module grew past the device's slot: dropped.
    pub egress_too_long: u64,
    /// Modules the JIT refused (they run interpreted).
    pub jit_fallbacks: u64,
}

/// The modules of every point, the scratch buffer and the queues of reflected and
/// redirected frames.
#[derive(Default)]
pub struct Chain {
    modules: Vec<Module>,
    next_id: u32,
    scratch: Vec<u8>,
    reflected: VecDeque<Vec<u8>>,
    redirected: VecDeque<Vec<u8>>,
    /// Buffers of frames already sent or read, reused so the queues do not allocate per frame.
    spare: Vec<Vec<u8>>,
    /// Counters of the chain itself.
    pub counters: ChainCounters,
    /// Interpret every module, even where the JIT is available (`sluice engine --no-jit`).
    pub no_jit: bool,
}

impl Chain {
    /// Attaches `program` with its `maps` at the end of `at`'s chain.
    pub fn attach(
        &mut self,
        at: HookPoint,
        name: &str,
        section: &str,
        program: Program,
        maps: Maps,
    ) -> Result<ModuleId, ModuleAttachError> {
        if self.modules.iter().filter(|m| m.at == at).count() >= MAX_MODULES {
            return Err(ModuleAttachError::Full(at));
        }
        let id = ModuleId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        let jit = match self.no_jit {
            true => None,
            false => match Compiled::compile(&program) {
                Ok(c) => Some(c),
                Err(JitError::Unavailable) => None,
                Err(_) => {
                    self.counters.jit_fallbacks += 1;
                    None
                }
            },
        };
        self.modules.push(Module {
            id,
            at,
            name: name.to_string(),
            section: section.to_string(),
            program,
            maps,
            counters: Counters::default(),
            jit,
        });
        Ok(id)
    }

    /// Detaches module `id`, handing it back (with its maps and counters).
    pub fn detach(&mut self, id: ModuleId) -> Option<Module> {
        let i = self.modules.iter().position(|m| m.id == id)?;
        // Keeps the order of the rest: a chain runs in the order it was loaded.
        Some(self.modules.remove(i))
    }

    /// Every module, in load order.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// Module `id`, for its maps.
    pub fn module_mut(&mut self, id: ModuleId) -> Option<&mut Module> {
        self.modules.iter_mut().find(|m| m.id == id)
    }

    /// Whether a module runs at `at`.
    pub fn has(&self, at: HookPoint) -> bool {
        self.modules.iter().any(|m| m.at == at)
    }

    /// Runs `at`'s chain on `frame`; on Pass, `Some(range)` says where in [`Chain::scratch`]
    /// the modified frame is (None: unchanged).
    pub fn run(
        &mut self,
        at: HookPoint,
        frame: &[u8],
        now_ns: u64,
    ) -> (Verdict, Option<(usize, usize)>) {
        if frame.len() > MAX_FRAME {
            self.counters.too_big += 1;
            return (Verdict::Pass, None);
        }
        if self.scratch.len() < HEADROOM + MAX_FRAME {
            // Once per engine: the one buffer every run reuses.
            self.scratch.resize(HEADROOM + MAX_FRAME, 0);
        }
        self.scratch[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
        let (mut data, mut data_end) = (HEADROOM, HEADROOM + frame.len());
        let mut verdict = Verdict::Pass;
        for m in self.modules.iter_mut().filter(|m| m.at == at) {
            let Some(mut ctx) = XdpContext::new(&mut self.scratch, data, data_end - data) else {
                break;
            };
            let mut env = Env {
                maps: &mut m.maps,
                now_ns,
                cpu: 0,
                trace: &mut NoTrace,
                counters: &mut m.counters,
            };
            let action = match &mut m.jit {
                Some(jit) => jit.run(&mut ctx, &mut env),
                None => sluice_ebpf::run(&m.program, &mut ctx, &mut env),
            };
            let (d, e) = (ctx.data, ctx.data_end);
            match action {
                Ok(Action::Pass) => (data, data_end) = (d, e),
                // Fail-open: counted in the module's run_errors; the frame goes on as it was
                // before this module.
                Err(_) => {}
                Ok(Action::Drop(_)) => return (Verdict::Drop, None),
                Ok(Action::Tx) if at == HookPoint::Egress => (data, data_end) = (d, e),
                Ok(Action::Tx) => {
                    verdict = Verdict::Reflect;
                    (data, data_end) = (d, e);
                    break;
                }
                Ok(Action::Redirect) => {
                    verdict = Verdict::Redirect;
                    (data, data_end) = (d, e);
                    break;
                }
            }
        }
        match verdict {
            Verdict::Pass => {
                let changed = (data, data_end) != (HEADROOM, HEADROOM + frame.len())
                    || self.scratch[data..data_end] != *frame;
                (Verdict::Pass, changed.then_some((data, data_end)))
            }
            Verdict::Reflect | Verdict::Redirect => {
                let full = if verdict == Verdict::Reflect {
                    self.reflected.len() >= MAX_PENDING
                } else {
                    self.redirected.len() >= MAX_PENDING
                };
                if full {
                    self.counters.queue_full += 1;
                    return (Verdict::Drop, None);
                }
                let mut buf = self.spare.pop().unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(&self.scratch[data..data_end]);
                if verdict == Verdict::Reflect {
                    self.reflected.push_back(buf);
                } else {
                    self.counters.redirected += 1;
                    self.redirected.push_back(buf);
                }
                (verdict, None)
            }
            Verdict::Drop => (Verdict::Drop, None),
        }
    }

    /// Counts an egress frame dropped for a slot too small for it.
    pub(crate) fn count_too_long(&mut self) {
        self.counters.egress_too_long += 1;
    }

    /// The scratch buffer a Pass's range points into.
    pub fn scratch(&self) -> &[u8] {
        &self.scratch
    }

    /// The next frame a module sent back out (Tx at ingress); counted as reflected.
    pub fn pop_reflected(&mut self) -> Option<Vec<u8>> {
        let f = self.reflected.pop_front()?;
        self.counters.reflected += 1;
        Some(f)
    }

    /// The next frame a module redirected to the control plane.
    pub fn pop_redirected(&mut self) -> Option<Vec<u8>> {
        self.redirected.pop_front()
    }

    /// Hands a popped frame's buffer back for reuse (bounded like the queues).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < MAX_PENDING {
            self.spare.push(buf);
        }
    }

    /// Whether frames wait to be reflected.
    pub fn has_reflected(&self) -> bool {
        !self.reflected.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::Hooks;
    use sluice_ebpf::programs;

    /// An Ethernet/IPv4/TCP frame (checksums are not the programs' business), optionally
    /// with one 802.1Q tag.
    fn tcp_frame(sport: u16, dport: u16, vlan: bool) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&[0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        f
    }

    fn attach(hooks: &mut Hooks, at: HookPoint, name: &str) -> ModuleId {
        let (bytes, section) = programs::shipped(name).unwrap();
        let (program, maps) = sluice_ebpf::load(bytes, section).unwrap();
        hooks
            .modules_mut()
            .attach(at, name, section, program, maps)
            .unwrap()
    }

    #[test]
    fn the_drop_program_drops_and_counts_and_unload_restores() {
        let mut hooks = Hooks::new();
        let f = tcp_frame(1, 2, false);
        let id = attach(&mut hooks, HookPoint::Ingress, "drop");
        assert!(hooks.is_active(HookPoint::Ingress));
        assert_eq!(hooks.ingress(&f), None);
        assert_eq!(hooks.ingress(&f), None);
        let c = hooks.modules().modules()[0].counters;
        assert_eq!((c.runs, c.dropped), (2, 2));
        // Egress is untouched by an ingress module.
        let mut out = f.clone();
        assert_eq!(hooks.egress(&mut out, f.len()), Some(f.len()));
        let m = hooks.modules_mut().detach(id).unwrap();
        assert_eq!(m.counters.dropped, 2);
        assert!(!hooks.is_active(HookPoint::Ingress));
        assert_eq!(hooks.ingress(&f), Some(&f[..]));
    }

    #[test]
    fn the_firewall_drops_a_five_tuple_the_control_plane_writes() {
        let mut hooks = Hooks::new();
        let id = attach(&mut hooks, HookPoint::Ingress, "firewall");
        let blocked = tcp_frame(40000, 80, false);
        let other = tcp_frame(40000, 81, false);
        assert!(hooks.ingress(&blocked).is_some());
        // struct five_tuple: saddr, daddr, sport, dport (network order), proto, pad.
        let mut key = vec![10, 0, 0, 1, 10, 0, 0, 2];
        key.extend_from_slice(&40000u16.to_be_bytes());
        key.extend_from_slice(&80u16.to_be_bytes());
        key.extend_from_slice(&[6, 0, 0, 0]);
        {
            let mut chain = hooks.modules_mut();
            let m = chain.module_mut(id).unwrap();
            let map = m.maps.id("rules").unwrap();
            m.maps.set(map, &key, &0u64.to_le_bytes(), 0).unwrap();
        }
        assert_eq!(hooks.ingress(&blocked), None);
        assert!(hooks.ingress(&other).is_some());
        let mut chain = hooks.modules_mut();
        let m = chain.module_mut(id).unwrap();
        let map = m.maps.id("rules").unwrap();
        assert_eq!(
            m.maps.get(map, &key).unwrap(),
            Some(&1u64.to_le_bytes()[..])
        );
        m.maps.delete(map, &key).unwrap();
        drop(chain);
        assert!(hooks.ingress(&blocked).is_some());
    }

    #[test]
    fn a_stripped_vlan_tag_stays_stripped_for_the_next_stage() {
        let mut hooks = Hooks::new();
        attach(&mut hooks, HookPoint::Ingress, "vlan_strip");
        let tagged = tcp_frame(1, 2, true);
        let plain = tcp_frame(1, 2, false);
        assert_eq!(hooks.ingress(&tagged), Some(&plain[..]));
        // An untagged frame passes as it is.
        assert_eq!(hooks.ingress(&plain), Some(&plain[..]));
    }

    #[test]
    fn tx_at_ingress_reflects_and_at_egress_passes() {
        let mut hooks = Hooks::new();
        attach(&mut hooks, HookPoint::Ingress, "reflect");
        let f = tcp_frame(1, 2, false);
        assert_eq!(hooks.ingress(&f), None);
        let back = hooks.modules_mut().pop_reflected().unwrap();
        assert_eq!(back[..6], f[6..12]);
        assert_eq!(back[6..12], f[..6]);
        assert_eq!(back[12..], f[12..]);
        assert_eq!(hooks.modules().counters.reflected, 1);

        let mut hooks = Hooks::new();
        attach(&mut hooks, HookPoint::Egress, "reflect");
        let mut buf = f.clone();
        assert_eq!(hooks.egress(&mut buf, f.len()), Some(f.len()));
        // Continues modified (the addresses swapped), not queued.
        assert_eq!(buf[..6], f[6..12]);
        assert!(hooks.modules_mut().pop_reflected().is_none());
        assert_eq!(hooks.modules().modules()[0].counters.tx, 1);
    }

    #[test]
    fn chains_run_in_order_and_are_bounded() {
        let mut hooks = Hooks::new();
        attach(&mut hooks, HookPoint::Ingress, "vlan_strip");
        let fw = attach(&mut hooks, HookPoint::Ingress, "port_counter");
        for _ in 2..MAX_MODULES {
            attach(&mut hooks, HookPoint::Ingress, "null");
        }
        let (program, maps) = sluice_ebpf::load(programs::NULL, "xdp").unwrap();
        assert_eq!(
            hooks
                .modules_mut()
                .attach(HookPoint::Ingress, "null", "xdp", program, maps)
                .unwrap_err(),
            ModuleAttachError::Full(HookPoint::Ingress)
        );
        // The counter after the strip sees the untagged frame's port.
        assert!(hooks.ingress(&tcp_frame(1, 4242, true)).is_some());
        let mut chain = hooks.modules_mut();
        let m = chain.module_mut(fw).unwrap();
        let map = m.maps.id("port_counts").unwrap();
        let v = m.maps.get(map, &4242u32.to_le_bytes()).unwrap().unwrap();
        assert_eq!(v[..8], 1u64.to_le_bytes());
    }
}
