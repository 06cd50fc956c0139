//! Unmodified libibverbs programs over Sluice (root, lab; issue 16): two engines, A in
//! sluice-a (10.77.0.1) and E in sluice-e (10.77.0.4); each program runs under
//! `sluice run --verbs`, which makes the Sluice provider's device `sluice0` visible to it, and
//! its TCP connection exchange goes through its engine's TCP (the preload library).
//!
//! - `ibv_devices` lists sluice0; `ibv_devinfo` shows the port and the engine's GID;
//! - `ibv_rc_pingpong` (SEND/RECV) between the engines: both sides count every byte, by
//!   polling and in event mode (`-e`: completion channels);
//! - `ib_write_bw -n 1000` (RDMA WRITE, tx depth 128): perftest's table shows the 1000
//!   iterations of 64 KiB, and both engines count the work requests and completions.
//!
//! `#[ignore]`d (scripts/test.sh runs them as root); when asked for, they fail if the lab,
//! ibverbs-utils or perftest is missing.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{counter, preload, Proc, Setup, SLUICE};

/// The second engine's address and interface (sluice_lab::netns).
const ENGINE2: &str = "10.77.0.4";

/// Engine E in sluice-e, beside `setup`'s engine A.
struct SecondEngine {
    socket: PathBuf,
    proc: Proc,
}

impl SecondEngine {
    fn start(setup: &Setup) -> SecondEngine {
        let socket = setup.dir.join("engine-e.sock");
        let mut proc = setup.spawn_in_ns(
            sluice_lab::NS_ENGINE2,
            "sluice engine (E)",
            &[
                SLUICE,
                "engine",
                "--iface",
                sluice_lab::ENGINE2_IFACE,
                "--ip",
                &format!("{ENGINE2}/24"),
                "--idle-us",
                "20",
                "--socket",
                socket.to_str().expect("utf-8"),
            ],
        );
        proc.wait_for("ready", Duration::from_secs(30));
        SecondEngine { socket, proc }
    }

    /// `sluice run --verbs -- PROGRAM` on engine E.
    fn run(&self, setup: &Setup, name: &str, program: &[&str]) -> Proc {
        let preload = preload();
        let mut args = vec![
            SLUICE,
            "run",
            "--verbs",
            "--socket",
            self.socket.to_str().expect("utf-8"),
            "--preload",
            preload.to_str().expect("utf-8"),
            "--",
        ];
        args.extend_from_slice(program);
        setup.spawn_in_ns(sluice_lab::NS_ENGINE2, name, &args)
    }

    fn stop(mut self) -> String {
        let status = self.proc.terminate(Duration::from_secs(10));
        let out = self.proc.output();
        assert!(status.success(), "engine E exited with {status}:\n{out}");
        out
    }
}

fn require(programs: &[&str]) {
    sluice_lab::require_lab();
    sluice_lab::require_programs(programs);
}

/// Runs `program` as server on E and as client on A (with E's address last), both to the
/// end; returns (client output, server output).
fn client_server(setup: &Setup, e: &SecondEngine, program: &[&str]) -> (String, String) {
    let mut server = e.run(setup, "server", program);
    // The server listens on TCP 18515 for the connection exchange once its device is open.
    std::thread::sleep(Duration::from_millis(1500));
    let mut client_args: Vec<&str> = program.to_vec();
    client_args.push(ENGINE2);
    let mut client = setup.run_with("client", &["--verbs"], &client_args, false);
    let c = client.wait_exit(Duration::from_secs(120));
    let s = server.wait_exit(Duration::from_secs(30));
    let (co, so) = (client.output(), server.output());
    assert!(
        c.success() && s.success(),
        "{program:?}: client {c}, server {s}\n--- client:\n{co}\n--- server:\n{so}"
    );
    (co, so)
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn ibverbs_utils_see_the_device_and_rc_pingpong_runs_between_two_engines() {
    require(&["ibv_devices", "ibv_devinfo", "ibv_rc_pingpong"]);
    let mut setup = Setup::up_with("verbs-pingpong", &["--idle-us", "20"]);
    let e = SecondEngine::start(&setup);

    let mut devices = setup.run_with("ibv_devices", &["--verbs"], &["ibv_devices"], false);
    assert!(devices.wait_exit(Duration::from_secs(30)).success());
    assert!(devices.output().contains("sluice0"), "{}", devices.output());
    let mut info = setup.run_with("ibv_devinfo", &["--verbs"], &["ibv_devinfo", "-v"], false);
    assert!(info.wait_exit(Duration::from_secs(30)).success());
    let info = info.output();
    for want in ["PORT_ACTIVE", "Ethernet", "::ffff:10.77.0.1", "RoCE v2"] {
        assert!(info.contains(want), "no {want:?} in ibv_devinfo:\n{info}");
    }

    // 1000 round trips of 4 KiB SENDs (page-aligned buffers, -g 0: RoCEv2's GID).
    let (client, server) = client_server(
        &setup,
        &e,
        &[
            "ibv_rc_pingpong",
            "-d",
            "sluice0",
            "-g",
            "0",
            "-n",
            "1000",
            "-s",
            "4096",
        ],
    );
    // rc_pingpong counts size x iterations x 2 (both directions) on each side.
    for (side, out) in [("client", &client), ("server", &server)] {
        assert!(
            out.contains("8192000 bytes in") && out.contains("1000 iters in"),
            "{side} did not move every byte:\n{out}"
        );
    }
    // Again in event mode (-e): completion channels from libsluice_preload.so, events from
    // the engines.
    let (client, server) = client_server(
        &setup,
        &e,
        &[
            "ibv_rc_pingpong",
            "-d",
            "sluice0",
            "-g",
            "0",
            "-n",
            "200",
            "-s",
            "1024",
            "-e",
        ],
    );
    for (side, out) in [("client", &client), ("server", &server)] {
        assert!(
            out.contains("409600 bytes in") && out.contains("200 iters in"),
            "{side} (-e) did not move every byte:\n{out}"
        );
    }
    let e_out = e.stop();
    let a_out = setup.stop_engine();
    for out in [&a_out, &e_out] {
        // 1000 SENDs and the receives rc_pingpong posts (500 up front, one per completion).
        assert!(counter(out, "wqes") >= 2000, "{out}");
        assert!(counter(out, "verbs_completions") >= 2000, "{out}");
        assert_eq!(counter(out, "bad_wqes"), 0, "{out}");
        // Event mode waits for a completion event per round trip at least.
        assert!(counter(out, "verbs_events") >= 200, "{out}");
        assert_eq!(counter(out, "verbs_events_dropped"), 0, "{out}");
    }
    setup.teardown();
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn ib_write_bw_writes_a_thousand_messages_between_two_engines() {
    require(&["ib_write_bw"]);
    let mut setup = Setup::up_with("verbs-write-bw", &["--idle-us", "20"]);
    let e = SecondEngine::start(&setup);
    let (client, _server) = client_server(
        &setup,
        &e,
        &[
            "ib_write_bw",
            "-d",
            "sluice0",
            "-x",
            "0",
            "-F",
            "-n",
            "1000",
            "-s",
            "65536",
        ],
    );
    // The result row: #bytes #iterations BW-peak BW-average MsgRate.
    let row: Vec<&str> = client
        .lines()
        .map(str::split_whitespace)
        .map(Iterator::collect::<Vec<_>>)
        .find(|w| w.len() == 5 && w[0] == "65536")
        .unwrap_or_else(|| panic!("no result row in:\n{client}"));
    assert_eq!(row[1], "1000", "{client}");
    let average: f64 = row[3].parse().expect("a bandwidth");
    assert!(average > 0.0, "{client}");
    let e_out = e.stop();
    let a_out = setup.stop_engine();
    // The client posted every WRITE (plus perftest's warm-up ones) and polled completions.
    assert!(counter(&a_out, "wqes") >= 1000, "{a_out}");
    assert!(counter(&a_out, "verbs_completions") >= 1, "{a_out}");
    assert_eq!(counter(&a_out, "bad_wqes"), 0, "{a_out}");
    assert_eq!(counter(&e_out, "bad_wqes"), 0, "{e_out}");
    setup.teardown();
}

/// The provider library the tests' `sluice run` uses is the one this workspace built.
#[test]
fn the_provider_is_built_beside_the_sluice_binary() {
    let dir = std::path::Path::new(SLUICE).parent().expect("a directory");
    let found = [
        dir.join("libsluice_verbs.so"),
        dir.join("deps/libsluice_verbs.so"),
    ]
    .into_iter()
    .any(|p| p.is_file());
    assert!(
        found,
        "libsluice_verbs.so is neither in {} nor in its deps/",
        dir.display()
    );
}
