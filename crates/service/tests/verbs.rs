//! Verbs in service mode (docs/verbs.md) through the raw client: the control-path verbs,
//! a QP taken RESET -> INIT -> RTR -> RTS against a plain RDMA stack on the other end of
//! the wire, RDMA WRITE, READ, SEND/RECV with immediate both ways, inline SEND; and bad
//! input: unsealed memory, a bad lkey, an entry that does not decode, another
//! application's QP, an unknown peer, and detach cleaning up.

mod support;

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::time::Instant as StdInstant;

use sluice_device::PairConfig;
use sluice_rdma::qp::{SendOp, SendWr, Sge};
use sluice_rdma::stack::PeerAddr;
use sluice_rdma::verbs::{WcOpcode, WorkCompletion};
use sluice_shm::verbs::wqe::send_flags;
use sluice_shm::verbs::{RecvWqe, SendWqe, VerbsReply, VerbsRequest, WqeSge, WrOpcode};
use sluice_shm::{EventFd, MappedFile};
use support::client::Client;
use support::verbs::*;
use support::*;

const APP_BASE: u64 = 0x7000_0000;
const APP_LEN: u64 = 8192;
const EINVAL: i32 = 22;
const ENOENT: i32 = 2;
const EAGAIN: i32 = 11;
const ENOMEM: i32 = 12;

/// What one application set up: a domain, one region over a memfd it also maps, a CQ
/// and a QP.
struct Setup {
    ctx: u32,
    pd: u32,
    key: u32,
    mem: MappedFile,
    cq: AppCq,
    qp: AppQp,
}

fn setup(c: &mut Client) -> Setup {
    setup_with(c, None)
}

/// [`setup`] with a completion channel on the CQ.
fn setup_with(c: &mut Client, channel: Option<std::os::fd::BorrowedFd<'_>>) -> Setup {
    let ctx = c.context();
    let VerbsReply::Pd { pd } = ask(c, VerbsRequest::AllocPd, &[]) else {
        panic!("AllocPd refused");
    };
    let fd = memfd(APP_LEN, true);
    let mem = MappedFile::map(fd.try_clone().unwrap(), 0, APP_LEN).unwrap();
    let reg = VerbsRequest::RegMr {
        pd,
        addr: APP_BASE,
        len: APP_LEN,
        access: ALL_ACCESS,
        file_offset: 0,
    };
    let VerbsReply::Mr { key } = ask(c, reg, &[fd.as_fd()]) else {
        panic!("RegMr refused");
    };
    let cq = create_cq(c, 64, channel);
    let qp = create_qp(c, pd, cq.cq, 236);
    Setup {
        ctx,
        pd,
        key,
        mem,
        cq,
        qp,
    }
}

fn engine_addr() -> PeerAddr {
    PeerAddr {
        ip: ENGINE_IP,
        mac: PairConfig::default().macs[0],
    }
}

/// Takes the engine's QP to RTS towards the peer's, and the peer's towards it.
fn connect(net: &mut Net, c: &Client, s: &Setup) {
    let peer_qpn = net.peer.rdma.qpn;
    for to in 1..=3 {
        assert_eq!(modify(c, s.qp.qpn, to, peer_qpn, PEER_IP), VerbsReply::Done);
    }
    net.peer.rdma.connect(s.qp.qpn, engine_addr());
}

fn sge(addr: u64, length: u32, lkey: u32) -> Option<WqeSge> {
    Some(WqeSge { addr, length, lkey })
}

fn wqe(wr_id: u64, opcode: WrOpcode, sge: Option<WqeSge>, remote_addr: u64, rkey: u32) -> SendWqe {
    SendWqe {
        wr_id,
        opcode,
        flags: send_flags::SIGNALED,
        sge,
        inline_len: 0,
        remote_addr,
        rkey,
        imm: 0,
        resp_len: 0,
    }
}

/// Pumps until the peer has `n` completions.
fn peer_wcs(net: &mut Net, n: usize) -> Vec<WorkCompletion> {
    let deadline = StdInstant::now() + WAIT;
    let mut out = Vec::new();
    while out.len() < n {
        out.extend(net.peer.rdma.poll());
        assert!(StdInstant::now() < deadline, "the peer completed {out:?}");
        net.peer.pump();
    }
    out
}

#[test]
fn rc_write_read_send_and_recv_between_an_application_and_a_peer() {
    let mut net = Net::start("verbs-rc");
    let mut c = net.attach("verbs");
    let VerbsReply::Device(dev) = ask(&c, VerbsRequest::QueryDevice, &[]) else {
        panic!("QueryDevice");
    };
    assert_eq!(dev.ip, ENGINE_IP);
    assert_eq!(dev.active_mtu, 3, "MTU 1500: IBV_MTU_1024");
    assert_eq!((dev.max_inline, dev.max_sge), (256, 1));
    let mut s = setup(&mut c);
    let peer_qpn = net.peer.rdma.qpn;
    let peer_key = net.peer.rdma.key.0;
    // A receive posted in INIT, as ibv_rc_pingpong does.
    assert_eq!(modify(&c, s.qp.qpn, 1, peer_qpn, PEER_IP), VerbsReply::Done);
    let recv = RecvWqe {
        wr_id: 500,
        sge: sge(APP_BASE + 4096, 1024, s.key),
    };
    post_recv(&mut s.qp, recv);
    ring(&mut c, s.ctx, s.qp.qpn);
    for to in 2..=3 {
        assert_eq!(
            modify(&c, s.qp.qpn, to, peer_qpn, PEER_IP),
            VerbsReply::Done
        );
    }
    net.peer.rdma.connect(s.qp.qpn, engine_addr());
    let VerbsReply::QpAttrs(a) = ask(&c, VerbsRequest::QueryQp { qpn: s.qp.qpn }, &[]) else {
        panic!("QueryQp");
    };
    assert_eq!(
        (a.qp_state, a.dest_qpn, a.dest_ip),
        (3, peer_qpn, Some(PEER_IP))
    );

    // RDMA WRITE: the application's bytes land in the peer's memory.
    let data = pattern(3000, 1);
    assert!(s.mem.write_at(0, &data));
    let w = wqe(
        1,
        WrOpcode::RdmaWrite,
        sge(APP_BASE, 3000, s.key),
        PEER_BASE + 100,
        peer_key,
    );
    post_send(&mut s.qp, w, &[]);
    ring(&mut c, s.ctx, s.qp.qpn);
    let e = next_cqe(&mut s.cq, &mut || net.peer.pump());
    assert_eq!((e.wr_id, e.status, e.opcode, e.byte_len), (1, 0, 1, 3000));
    assert_eq!(&net.peer.rdma.mem.0[100..3100], &data[..]);

    // RDMA READ: the peer's bytes land in the application's memfd.
    let far = pattern(2000, 2);
    net.peer.rdma.mem.0[8000..10000].copy_from_slice(&far);
    let r = wqe(
        2,
        WrOpcode::RdmaRead,
        sge(APP_BASE + 5000, 2000, s.key),
        PEER_BASE + 8000,
        peer_key,
    );
    post_send(&mut s.qp, r, &[]);
    ring(&mut c, s.ctx, s.qp.qpn);
    let e = next_cqe(&mut s.cq, &mut || net.peer.pump());
    assert_eq!((e.wr_id, e.status, e.opcode, e.byte_len), (2, 0, 2, 2000));
    let mut got = vec![0u8; 2000];
    assert!(s.mem.read_at(5000, &mut got));
    assert_eq!(got, far);

    // SEND with immediate into the peer's receive; then an inline SEND.
    net.peer.rdma.post_recv(900, 20000, 1024);
    net.peer.rdma.post_recv(901, 21000, 1024);
    let mut send = wqe(3, WrOpcode::SendWithImm, sge(APP_BASE, 512, s.key), 0, 0);
    send.imm = 0x1122_3344u32.to_be();
    post_send(&mut s.qp, send, &[]);
    let inline = pattern(236, 3);
    post_send(&mut s.qp, wqe(4, WrOpcode::Send, None, 0, 0), &inline);
    ring(&mut c, s.ctx, s.qp.qpn);
    let e = next_cqe(&mut s.cq, &mut || net.peer.pump());
    assert_eq!((e.wr_id, e.status, e.opcode, e.byte_len), (3, 0, 0, 512));
    let e = next_cqe(&mut s.cq, &mut || net.peer.pump());
    assert_eq!((e.wr_id, e.status, e.opcode, e.byte_len), (4, 0, 0, 236));
    let wcs = peer_wcs(&mut net, 2);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].opcode, wcs[0].byte_len),
        (900, WcOpcode::Recv, 512)
    );
    assert_eq!(wcs[0].imm, Some(0x1122_3344));
    assert_eq!(&net.peer.rdma.mem.0[20000..20512], &data[..512]);
    assert_eq!(
        (wcs[1].wr_id, wcs[1].byte_len, wcs[1].imm),
        (901, 236, None)
    );
    assert_eq!(&net.peer.rdma.mem.0[21000..21236], &inline[..]);

    // The peer's SEND with immediate lands in the receive posted in INIT.
    let back = pattern(700, 4);
    net.peer.rdma.mem.0[30000..30700].copy_from_slice(&back);
    net.peer.rdma.post_send(SendWr {
        wr_id: 77,
        op: SendOp::Send {
            imm: Some(0xabcd_ef01),
        },
        sge: Sge {
            addr: PEER_BASE + 30000,
            len: 700,
            lkey: net.peer.rdma.key,
        },
        signaled: true,
        solicited: false,
    });
    let e = next_cqe(&mut s.cq, &mut || net.peer.pump());
    assert_eq!(
        (e.wr_id, e.status, e.opcode, e.byte_len),
        (500, 0, 128, 700)
    );
    assert_eq!((e.flags, e.imm), (2, 0xabcd_ef01u32.to_be()));
    assert_eq!((e.qp_num, e.src_qp), (s.qp.qpn, peer_qpn));
    let mut got = vec![0u8; 700];
    assert!(s.mem.read_at(4096, &mut got));
    assert_eq!(got, back);
    assert_eq!(peer_wcs(&mut net, 1)[0].wr_id, 77);

    let counters = net.stop();
    assert_eq!(counters.bad_wqes, 0);
    assert_eq!(counters.wqes, 5, "one receive, four sends");
    assert!(counters.verbs_completions >= 5);
}

#[test]
fn bad_input_is_refused_or_completes_in_error_and_is_counted() {
    let mut net = Net::start("verbs-bad");
    let mut c = net.attach("verbs");
    let mut s = setup(&mut c);
    // An unsealed memfd, a memfd shorter than the region, a domain not owned.
    let reg = |pd, len| VerbsRequest::RegMr {
        pd,
        addr: 0,
        len,
        access: ALL_ACCESS,
        file_offset: 0,
    };
    let loose = memfd(4096, false);
    assert_eq!(errno(ask(&c, reg(s.pd, 4096), &[loose.as_fd()])), EINVAL);
    let short = memfd(4096, true);
    assert_eq!(errno(ask(&c, reg(s.pd, 8192), &[short.as_fd()])), EINVAL);
    assert_eq!(
        errno(ask(&c, reg(s.pd + 100, 4096), &[short.as_fd()])),
        ENOENT
    );
    assert_eq!(errno(ask(&c, reg(s.pd, 4096), &[])), EINVAL, "no memfd");
    // The domain is in use; the CQ too.
    assert_eq!(
        errno(ask(&c, VerbsRequest::DeallocPd { pd: s.pd }, &[])),
        16
    );
    assert_eq!(
        errno(ask(&c, VerbsRequest::DestroyCq { cq: s.cq.cq }, &[])),
        16
    );
    // A peer whose MAC is not known yet: EAGAIN, and an ARP request goes out.
    assert_eq!(modify(&c, s.qp.qpn, 1, 0x99, PEER_IP), VerbsReply::Done);
    let stranger = Ipv4Addr::new(10, 9, 0, 77);
    assert_eq!(errno(modify(&c, s.qp.qpn, 2, 0x99, stranger)), EAGAIN);

    // Another application names this one's QP: refused, and its doorbell ignored.
    let mut other = net.attach("other");
    let octx = other.context();
    let q = VerbsRequest::QueryQp { qpn: s.qp.qpn };
    assert_eq!(errno(ask(&other, q, &[])), ENOENT);
    ring(&mut other, octx, s.qp.qpn);
    net.until_counters("the stranger's doorbell", |c| c.verbs_not_owned >= 2);

    // A bad lkey: LOC_PROT_ERR, and the QP is in ERR.
    connect(&mut net, &c, &s);
    let peer_key = net.peer.rdma.key.0;
    let w = wqe(
        7,
        WrOpcode::RdmaWrite,
        sge(APP_BASE, 64, s.key ^ 0x100),
        PEER_BASE,
        peer_key,
    );
    post_send(&mut s.qp, w, &[]);
    ring(&mut c, s.ctx, s.qp.qpn);
    let e = next_cqe(&mut s.cq, &mut || net.peer.pump());
    assert_eq!((e.wr_id, e.status), (7, 4), "IBV_WC_LOC_PROT_ERR");
    let VerbsReply::QpAttrs(a) = ask(&c, VerbsRequest::QueryQp { qpn: s.qp.qpn }, &[]) else {
        panic!("QueryQp");
    };
    assert_eq!(a.qp_state, 6, "IBV_QPS_ERR");

    // An entry that does not decode, on a fresh QP: an error completion naming its
    // wr_id, the QP in ERR, counted.
    let mut qp2 = create_qp(&c, s.pd, s.cq.cq, 0);
    let mut junk = wqe(8, WrOpcode::Send, None, 0, 0).encode();
    junk[1] = 9; // an opcode this transport does not carry (atomics)
    assert!(qp2.sq.push(&junk).unwrap());
    assert_eq!(modify(&c, qp2.qpn, 1, 0x99, PEER_IP), VerbsReply::Done);
    ring(&mut c, s.ctx, qp2.qpn);
    let e = next_cqe(&mut s.cq, &mut || net.peer.pump());
    assert_eq!(
        (e.wr_id, e.status, e.qp_num),
        (8, 2, qp2.qpn),
        "IBV_WC_LOC_QP_OP_ERR"
    );
    let VerbsReply::QpAttrs(a) = ask(&c, VerbsRequest::QueryQp { qpn: qp2.qpn }, &[]) else {
        panic!("QueryQp");
    };
    assert_eq!(a.qp_state, 6);
    let counters = net.until_counters("counted", |c| c.bad_wqes >= 1);
    assert_eq!(counters.bad_wqes, 1);
    assert!(counters.verbs_arp_waits >= 1);
    assert!(counters.verbs_refused >= 5);
    drop(qp2.rq);
}

#[test]
fn detach_destroys_what_an_application_held() {
    let mut net = Net::start_with("verbs-detach", |sc| {
        sc.verbs_limits.max_qps = 1;
        sc.verbs_limits.max_cqs = 1;
    });
    let mut first = net.attach("first");
    let s = setup(&mut first);
    connect(&mut net, &first, &s);
    // The device is full: a second application gets nothing.
    let mut second = net.attach("second");
    let _ = second.context();
    let VerbsReply::Pd { pd } = ask(&second, VerbsRequest::AllocPd, &[]) else {
        panic!("AllocPd");
    };
    assert_eq!(
        errno(ask(
            &second,
            VerbsRequest::CreateCq { cqe: 8, token: 1 },
            &[]
        )),
        ENOMEM
    );
    drop(s);
    drop(first);
    net.until_counters("the first detached", |c| c.apps_detached >= 1);
    // Its CQ and QP are gone: the second gets them.
    let cq = create_cq(&second, 8, None);
    let qp = create_qp(&second, pd, cq.cq, 0);
    assert_eq!(
        ask(&second, VerbsRequest::DestroyQp { qpn: qp.qpn }, &[]),
        VerbsReply::Done
    );
    assert_eq!(
        ask(&second, VerbsRequest::DestroyCq { cq: cq.cq }, &[]),
        VerbsReply::Done
    );
    assert_eq!(
        ask(&second, VerbsRequest::DeallocPd { pd }, &[]),
        VerbsReply::Done
    );
}

/// The peer SENDs 16 bytes, solicited or not.
fn peer_send(net: &mut Net, wr_id: u64, solicited: bool) {
    let lkey = net.peer.rdma.key;
    net.peer.rdma.post_send(SendWr {
        wr_id,
        op: SendOp::Send { imm: None },
        sge: Sge {
            addr: PEER_BASE,
            len: 16,
            lkey,
        },
        signaled: false,
        solicited,
    });
}

#[test]
fn an_armed_completion_queue_signals_its_channel_once_per_arming() {
    let mut net = Net::start("verbs-events");
    let mut c = net.attach("verbs");
    let channel = EventFd::new().unwrap();
    let mut s = setup_with(&mut c, Some(channel.as_fd()));
    connect(&mut net, &c, &s);
    for i in 0..4 {
        let wr = RecvWqe {
            wr_id: 600 + i,
            sge: sge(APP_BASE + 64 * i, 64, s.key),
        };
        post_recv(&mut s.qp, wr);
    }
    ring(&mut c, s.ctx, s.qp.qpn);
    let arm = c.region.verbs_arm(s.cq.queue).unwrap();
    // Armed for the next completion: signalled, and disarmed.
    arm.store(1, std::sync::atomic::Ordering::SeqCst);
    peer_send(&mut net, 1, false);
    assert_eq!(next_cqe(&mut s.cq, &mut || net.peer.pump()).wr_id, 600);
    assert!(channel.drain(), "the channel was signalled");
    assert_eq!(arm.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Not armed: no signal.
    peer_send(&mut net, 2, false);
    assert_eq!(next_cqe(&mut s.cq, &mut || net.peer.pump()).wr_id, 601);
    assert!(!channel.drain());
    // Armed for solicited completions: an unsolicited one passes, a solicited one signals.
    arm.store(2, std::sync::atomic::Ordering::SeqCst);
    peer_send(&mut net, 3, false);
    assert_eq!(next_cqe(&mut s.cq, &mut || net.peer.pump()).wr_id, 602);
    assert!(!channel.drain());
    assert_eq!(
        arm.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "still armed"
    );
    peer_send(&mut net, 4, true);
    assert_eq!(next_cqe(&mut s.cq, &mut || net.peer.pump()).wr_id, 603);
    assert!(channel.drain());
    assert_eq!(net.stop().verbs_events, 2);
}

/// Waits for the next line of a completion pipe, pumping meanwhile.
fn next_pipe_cqe(
    pipe: &mut sluice_shm::PipeConsumer,
    net: &mut Net,
) -> sluice_shm::verbs::pipe::PipeCqe {
    let deadline = StdInstant::now() + WAIT;
    loop {
        if let Some(e) = pipe.pop() {
            return sluice_shm::verbs::pipe::PipeCqe::decode(&e).expect("a completion line");
        }
        assert!(
            StdInstant::now() < deadline,
            "no completion within {WAIT:?}"
        );
        net.peer.pump();
    }
}

/// Bad lines in a work-request pipe (docs/verbs.md "Notification pipes", "Bad input"):
/// garbage and a line for a QP the application does not own are counted and dropped; a
/// request naming its QP that does not decode, and an inline request whose continuation is
/// cut short, complete in error on that QP's CQ through the completion pipe. The engine
/// keeps serving, without a doorbell.
#[test]
fn bad_pipe_lines_are_counted_or_complete_in_error() {
    use sluice_shm::verbs::pipe::PipeSend;
    use sluice_shm::{PipeConsumer, PipeKind, PipeProducer};
    let mut net = Net::start("verbs-pipe-bad");
    let mut c = net.attach("verbs");
    let ctx = c.context();
    let VerbsReply::Pd { pd } = ask(&c, VerbsRequest::AllocPd, &[]) else {
        panic!("AllocPd refused");
    };
    let VerbsReply::Cq { cq, .. } = ask(&c, VerbsRequest::CreatePipeCq { cqe: 64, token: 1 }, &[])
    else {
        panic!("CreatePipeCq refused");
    };
    let pipe_qp = |context| VerbsRequest::CreatePipeQp {
        pd,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 8,
        max_recv_wr: 8,
        max_inline: 128,
        context,
    };
    let VerbsReply::PipeQp { qpn, core, .. } = ask(&c, pipe_qp(ctx), &[]) else {
        panic!("CreatePipeQp refused");
    };
    let VerbsReply::PipeQp { qpn: qpn2, .. } = ask(&c, pipe_qp(ctx), &[]) else {
        panic!("CreatePipeQp refused");
    };
    // A context out of the layout, a queue-mode CQ for a pipe QP: refused.
    assert_eq!(errno(ask(&c, pipe_qp(10_000), &[])), EINVAL);
    let qcq = create_cq(&c, 8, None);
    let mixed = VerbsRequest::CreatePipeQp {
        pd,
        send_cq: qcq.cq,
        recv_cq: cq,
        max_send_wr: 8,
        max_recv_wr: 8,
        max_inline: 0,
        context: ctx,
    };
    assert_eq!(errno(ask(&c, mixed, &[])), EINVAL);
    let mut work = PipeProducer::new(c.region.clone(), ctx, core, PipeKind::Work).unwrap();
    let mut done = PipeConsumer::new(c.region.clone(), ctx, core, PipeKind::Completion, 1).unwrap();

    // Garbage, and a request for a QP that is not this application's.
    assert!(work.push(&[0xee; sluice_shm::PAYLOAD_BYTES]).unwrap());
    let stranger = PipeSend {
        qpn: 0x00ff_fff0,
        wqe: wqe(1, WrOpcode::Send, None, 0, 0),
    };
    assert!(work.push(&stranger.encode()).unwrap());
    let counters = net.until_counters("garbage and a stranger's QP", |c| {
        c.verbs_pipe_garbage >= 1 && c.verbs_not_owned >= 1
    });
    assert_eq!(counters.verbs_pipe_garbage, 1);

    // A request of its own QP with an opcode this transport does not carry.
    let mut junk = PipeSend {
        qpn,
        wqe: wqe(8, WrOpcode::Send, None, 0, 0),
    }
    .encode();
    junk[1] = 9;
    assert!(work.push(&junk).unwrap());
    let e = next_pipe_cqe(&mut done, &mut net);
    assert_eq!(
        (e.cq, e.cqe.wr_id, e.cqe.status, e.cqe.qp_num),
        (cq, 8, 2, qpn)
    );

    // An inline SEND of 100 bytes (two continuation lines) whose second line is garbage.
    let mut w = wqe(9, WrOpcode::Send, None, 0, 0);
    w.flags |= send_flags::INLINE;
    w.inline_len = 100;
    assert!(work.push(&PipeSend { qpn: qpn2, wqe: w }.encode()).unwrap());
    assert!(work.push(&SendWqe::encode_inline(&[7; 62])).unwrap());
    assert!(work.push(&[0x11; sluice_shm::PAYLOAD_BYTES]).unwrap());
    let e = next_pipe_cqe(&mut done, &mut net);
    assert_eq!((e.cqe.wr_id, e.cqe.status, e.cqe.qp_num), (9, 2, qpn2));
    // The engine publishes its counters between iterations: wait for the snapshot that
    // has taken every line, then check nothing more was counted.
    let counters = net.until_counters("bad requests counted", |c| {
        c.bad_wqes >= 2 && c.verbs_pipe_lines >= 4
    });
    assert_eq!(counters.verbs_doorbells, 0, "no doorbell in pipe mode");
    assert_eq!(counters.verbs_pipe_lines, 4, "four requests or stray lines");
}
