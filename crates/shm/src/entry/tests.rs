//! Round trips and bad-input checks of the entry layouts.

use super::*;
use crate::{SpliceOutcome, SpliceReport};
use proptest::prelude::*;

fn command() -> impl Strategy<Value = Command> {
    let ip = any::<[u8; 4]>().prop_map(Ipv4Addr::from);
    let how = prop_oneof![Just(Shut::Read), Just(Shut::Write), Just(Shut::Both)];
    prop_oneof![
        any::<u32>().prop_map(|req| Command::Open { req }),
        (
            any::<u32>(),
            any::<u32>(),
            ip.clone(),
            any::<u16>(),
            any::<(bool, bool)>()
        )
            .prop_map(|(req, slot, ip, port, (addr, reuse_port))| Command::Bind {
                req,
                slot,
                ip,
                port,
                reuse: Reuse {
                    addr,
                    port: reuse_port
                },
            }),
        (any::<u32>(), any::<u32>(), any::<u32>())
            .prop_map(|(req, slot, backlog)| Command::Listen { req, slot, backlog }),
        (any::<u32>(), any::<u32>(), ip, any::<u16>()).prop_map(|(req, slot, ip, port)| {
            Command::Connect {
                req,
                slot,
                ip,
                port,
            }
        }),
        any::<u32>().prop_map(|slot| Command::Send { slot }),
        any::<u32>().prop_map(|slot| Command::Consumed { slot }),
        (any::<u32>(), any::<u32>(), how).prop_map(|(req, slot, how)| Command::Shutdown {
            req,
            slot,
            how
        }),
        (any::<u32>(), any::<bool>()).prop_map(|(slot, abort)| Command::Close { slot, abort }),
        (any::<u32>(), any::<u32>(), any::<bool>())
            .prop_map(|(req, slot, nodelay)| { Command::SetNoDelay { req, slot, nodelay } }),
        (
            any::<u32>(),
            any::<u32>(),
            proptest::sample::select(Congestion::ALL.to_vec())
        )
            .prop_map(|(req, slot, algorithm)| Command::SetCongestion {
                req,
                slot,
                algorithm
            }),
        (any::<u32>(), any::<u32>(), any::<bool>())
            .prop_map(|(req, slot, on)| Command::SetTeardownOffload { req, slot, on }),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(req, slot_a, slot_b)| {
            Command::Splice {
                req,
                slot_a,
                slot_b,
            }
        }),
        any::<u32>().prop_map(|qpn| Command::QpDoorbell { qpn }),
        any::<u32>().prop_map(|ep| Command::MtpDoorbell { ep }),
    ]
}

proptest! {
    #[test]
    fn commands_round_trip(c in command()) {
        prop_assert_eq!(Command::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn completions_round_trip(req: u32, slot: u32, value: u32, errno: i32, done: bool) {
        let c = if done {
            Completion::Done { req, slot, value }
        } else {
            Completion::Failed { req, errno }
        };
        prop_assert_eq!(Completion::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn splice_reports_round_trip(
        handle: u32,
        outcome in proptest::sample::select(SpliceOutcome::ALL.to_vec()),
        a_to_b: u64,
        b_to_a: u64,
    ) {
        let c = Completion::Splice(SpliceReport { handle, outcome, a_to_b, b_to_a });
        prop_assert_eq!(Completion::decode(&c.encode()), Ok(c));
        prop_assert_eq!(c.req(), 0, "a report answers no request");
    }

    /// Any bytes decode to a command or an error, never a panic.
    #[test]
    fn arbitrary_entries_never_panic(bytes in proptest::collection::vec(any::<u8>(), PAYLOAD_BYTES)) {
        let e: Payload = bytes.try_into().unwrap();
        let _ = Command::decode(&e);
        let _ = Completion::decode(&e);
    }
}

proptest! {
    /// The raw-entry accessors read what decoding reads: the opcode, and the request id
    /// exactly when the command carries one.
    #[test]
    fn entry_accessors_agree_with_decoding(c in command()) {
        let e = c.encode();
        prop_assert_eq!(Command::opcode_of(&e), Ok(c.opcode()));
        prop_assert_eq!(Opcode::from_code(c.opcode().code()), Some(c.opcode()));
        prop_assert_eq!(c.opcode().carries_req(), c.req().is_some());
        prop_assert_eq!(Command::req_of(&e), c.req());
    }
}

#[test]
fn an_entry_that_does_not_decode_still_shows_its_request_id() {
    let mut e = [0u8; PAYLOAD_BYTES];
    e[0] = 200;
    e[4..8].copy_from_slice(&7u32.to_le_bytes());
    assert_eq!(Command::opcode_of(&e), Err(EntryError::UnknownOpcode(200)));
    assert_eq!(
        Command::req_of(&e),
        Some(7),
        "an unknown opcode is answered"
    );
    let mut close = Command::Close {
        slot: 3,
        abort: false,
    }
    .encode();
    close[12] = 9;
    assert!(Command::decode(&close).is_err());
    assert_eq!(Command::req_of(&close), None, "Close is never answered");
    let mut shut = Command::Shutdown {
        req: 11,
        slot: 3,
        how: Shut::Both,
    }
    .encode();
    shut[12] = 9;
    assert!(Command::decode(&shut).is_err());
    assert_eq!(Command::req_of(&shut), Some(11));
}

#[test]
fn unknown_opcodes_and_bad_flags_are_errors() {
    let mut e = [0u8; PAYLOAD_BYTES];
    e[0] = 200;
    assert_eq!(Command::decode(&e), Err(EntryError::UnknownOpcode(200)));
    let mut close = Command::Close {
        slot: 3,
        abort: true,
    }
    .encode();
    close[12] = 7;
    assert_eq!(Command::decode(&close), Err(EntryError::BadField("flag")));
}

proptest! {
    /// Every algorithm code outside the known ones is refused as a bad field, whatever
    /// else the entry says; the known ones decode to their algorithm.
    #[test]
    fn congestion_codes_are_checked(req: u32, slot: u32, code: u8) {
        let mut e = Command::SetCongestion { req, slot, algorithm: Congestion::Dctcp }.encode();
        e[12] = code;
        match Congestion::from_code(code) {
            Some(algorithm) => prop_assert_eq!(
                Command::decode(&e),
                Ok(Command::SetCongestion { req, slot, algorithm })
            ),
            None => prop_assert_eq!(Command::decode(&e), Err(EntryError::BadField("algorithm"))),
        }
    }
}

#[test]
fn a_splice_report_with_an_unknown_outcome_is_refused() {
    let mut e = Completion::Splice(SpliceReport {
        handle: 1,
        outcome: SpliceOutcome::Closed,
        a_to_b: 5,
        b_to_a: 6,
    })
    .encode();
    e[8] = 77;
    assert_eq!(Completion::decode(&e), Err(EntryError::BadField("outcome")));
}

#[test]
fn bind_reuse_bits_decode_and_unknown_ones_are_refused() {
    let bind = Command::Bind {
        req: 7,
        slot: 3,
        ip: Ipv4Addr::UNSPECIFIED,
        port: 8080,
        reuse: Reuse {
            addr: true,
            port: true,
        },
    };
    let mut e = bind.encode();
    assert_eq!(e[18], Reuse::ADDR_BIT | Reuse::PORT_BIT);
    // An entry of a library older than the field has a zero byte there: no reuse.
    e[18] = 0;
    assert_eq!(
        Command::decode(&e),
        Ok(Command::Bind {
            req: 7,
            slot: 3,
            ip: Ipv4Addr::UNSPECIFIED,
            port: 8080,
            reuse: Reuse::default(),
        })
    );
    e[18] = 4;
    assert_eq!(Command::decode(&e), Err(EntryError::BadField("reuse")));
}
