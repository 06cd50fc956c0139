//! Modules run compiled by the JIT where it is available, interpreted with `no_jit`, and a
//! chain gives the same verdicts, frames and counters either way.

use sluice_ebpf::programs;
use sluice_ebpf_jit::Mode;
use sluice_engine::modules::{Chain, Verdict};
use sluice_engine::HookPoint;

fn frame(dport: u16, vlan: bool) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2, 0x0f, 0xa0]);
    f.extend_from_slice(&dport.to_be_bytes());
    f.resize(f.len() + 16, 0);
    f
}

fn chain(no_jit: bool) -> Chain {
    let mut c = Chain::default();
    c.no_jit = no_jit;
    for name in ["vlan_strip", "port_counter", "firewall"] {
        let (bytes, section) = programs::shipped(name).unwrap();
        let (p, maps) = sluice_ebpf::load(bytes, section).unwrap();
        c.attach(HookPoint::Ingress, name, section, p, maps)
            .unwrap();
    }
    let fw = c.modules()[2].id;
    let m = c.module_mut(fw).unwrap();
    let rules = m.maps.id("rules").unwrap();
    let mut key = vec![10, 0, 0, 1, 10, 0, 0, 2, 0x0f, 0xa0, 0, 81, 6, 0, 0, 0];
    key.truncate(16);
    m.maps.set(rules, &key, &0u64.to_le_bytes(), 0).unwrap();
    c
}

#[test]
fn a_chain_runs_the_same_compiled_and_interpreted() {
    let (mut jit, mut interp) = (chain(false), chain(true));
    let want = if sluice_ebpf_jit::available() {
        Mode::Jit
    } else {
        Mode::Interp
    };
    assert!(jit.modules().iter().all(|m| m.mode() == want));
    assert!(interp.modules().iter().all(|m| m.mode() == Mode::Interp));
    assert_eq!(jit.counters.jit_fallbacks, 0);
    let mut drops = 0;
    for (k, f) in [
        frame(80, true),
        frame(81, false),
        frame(81, true),
        frame(22, false),
    ]
    .iter()
    .enumerate()
    {
        let a = jit.run(HookPoint::Ingress, f, k as u64);
        let a_frame = a.1.map(|(s, e)| jit.scratch()[s..e].to_vec());
        let b = interp.run(HookPoint::Ingress, f, k as u64);
        let b_frame = b.1.map(|(s, e)| interp.scratch()[s..e].to_vec());
        assert_eq!((a.0, a_frame), (b.0, b_frame), "frame {k}");
        drops += u32::from(a.0 == Verdict::Drop);
    }
    assert_eq!(drops, 2, "port 81 is a firewall rule, tagged or not");
    for (x, y) in jit.modules().iter().zip(interp.modules()) {
        assert_eq!(x.counters, y.counters, "{}", x.name);
        let dump = |m: &sluice_engine::modules::Module| {
            (0..m.maps.len())
                .flat_map(|id| {
                    m.maps
                        .iter(id)
                        .unwrap()
                        .map(|(k, v)| (k.to_vec(), v.to_vec()))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(dump(x), dump(y), "{}", x.name);
    }
}
