//! `sluice experiment parallelism --quick` end to end in the lab (needs root): every row of
//! the parallelism and scaling tables completed, Linux in the same run, redis answered every
//! request of its rows, the sequencing table printed, and `--cores` refusals in the CLI. No
//! timing is asserted.

use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn parallelism_quick_completes_every_layout_scaling_and_redis_row_beside_linux() {
    let lab = sluice_lab::LabGuard::require();
    sluice_lab::require_programs(&["redis-server", "redis-benchmark", "redis-cli"]);
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("parallelism_quick: skipped: the experiment needs 2 cores");
        return;
    }
    let out = std::env::temp_dir().join(format!("sluice-exp-par-{}", std::process::id()));
    let run = sluice()
        .args(["experiment", "parallelism", "--quick", "--no-lock", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("sequencing step"), "{stdout}");
    // The flow-group assignment was printed at each multi-core engine's start.
    assert!(
        stderr.contains("thread 1: pre 1, protocol 1, post 1"),
        "{stderr}"
    );
    let mut csv = csv::Reader::from_path(out.join("parallelism.csv")).unwrap();
    let rows: Vec<Vec<String>> = csv
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    let servers = |table: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r[0] == table)
            .map(|r| r[1].to_string())
            .collect()
    };
    assert_eq!(
        servers("parallelism"),
        [
            "engine run-to-completion (1 core)",
            "engine pipelined (2 cores)",
            "engine replicated (2 cores)",
            "engine flow-groups (2 cores)",
            "linux",
        ],
        "{rows:?}"
    );
    // --quick: 1 and 16 connections, each on 1 core, 2 cores and Linux.
    assert_eq!(servers("scaling").len(), 6, "{rows:?}");
    let redis = [
        "engine 1 core",
        "engine 2 cores",
        "engine flow-groups (2 cores)",
        "linux",
    ];
    assert_eq!(servers("redis-set"), redis, "{rows:?}");
    assert_eq!(servers("redis-get"), redis, "{rows:?}");
    for r in &rows {
        // The service refuses flow groups until it can run them (issue 20): that row then
        // says why instead of failing the run; every other row measured.
        if r[0].starts_with("redis-") && r[1] == "engine flow-groups (2 cores)" && r[4] == "refused"
        {
            let why = format!("{} {}: refused: ", r[0], r[1]);
            let line = stdout.lines().find_map(|l| l.strip_prefix(why.as_str()));
            assert!(
                line.is_some_and(|l| l.contains("flow-groups")),
                "the reason below the table: {stdout}"
            );
            continue;
        }
        let ops: f64 = r[4]
            .parse()
            .unwrap_or_else(|_| panic!("row failed: {r:?}\n{stderr}"));
        assert!(ops > 0.0, "{r:?}");
        assert_ne!(r[7], "n/a", "CPU per operation: {r:?}");
        assert_ne!(r[8], "n/a", "a ratio to the base: {r:?}");
        assert_ne!(r[9], "n/a", "a ratio to Linux: {r:?}");
        if r[0].starts_with("redis-") {
            // What redis itself counted over the test (INFO), below the table.
            let prefix = format!("{} {}: ", r[0], r[1]);
            let line = stdout
                .lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .unwrap_or_else(|| panic!("no count for {prefix:?}:\n{stdout}"));
            let n: Vec<u64> = line
                .split(", ")
                .map(|f| f.split(' ').next().unwrap().parse().unwrap())
                .collect();
            assert_eq!(n.len(), 3, "{line}");
            assert!(n[0] >= 1000, "a few thousand requests: {line}");
            assert!(n[1] >= n[0], "redis answered every request: {line}");
            assert_eq!(n[2], 0, "no error reply: {line}");
        }
    }
    std::fs::remove_dir_all(out).unwrap();
    lab.teardown().unwrap();
}

#[test]
fn cores_flags_are_refused_where_they_cannot_run() {
    for (args, says) in [
        (
            &[
                "engine",
                "--lab",
                "--cores",
                "2",
                "--module",
                "ingress=vlan_strip",
            ][..],
            "takes no modules yet",
        ),
        (
            &["echo", "--port", "7", "--backend", "sim", "--cores", "2"][..],
            "--cores",
        ),
        (
            &["sink", "--port", "7", "--lab", "--cores", "65"][..],
            "--cores 65: must be within 1..=",
        ),
        (
            &[
                "source",
                "--connect",
                "10.77.0.2:9",
                "--bytes",
                "1",
                "--lab",
                "--layout",
                "pipelined",
            ][..],
            "give --cores 2",
        ),
    ] {
        let run = sluice().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// Waits at most 30 s for `child` to exit; kills it and fails the test otherwise.
fn wait_exit(mut child: std::process::Child, what: &str) -> std::process::Output {
    for _ in 0..300 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    panic!(
        "{what} did not exit: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The digests of "N bytes sha256 HEX" lines, sorted.
fn digests(stdout: &str) -> Vec<String> {
    let mut d: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.split_once(" sha256 ").map(|(_, h)| h.trim().to_string()))
        .collect();
    d.sort();
    d
}

#[test]
#[ignore = "root: needs the namespace lab (scripts/test.sh runs it as root)"]
fn sink_and_source_on_two_cores_through_the_cli() {
    use std::process::Stdio;
    let lab = sluice_lab::LabGuard::require();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("sink_and_source_on_two_cores: skipped: 2 cores needed");
        return;
    }
    // The sink on 2 flow groups: --count 4 counts the connections of both.
    let sink = sluice()
        .args(["sink", "--lab", "--port", "5001", "--cores", "2"])
        .args(["--count", "4", "--linger", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = format!(
        "import socket,time,os,hashlib,threading\n\
         def connect():\n\
         \x20   end=time.time()+20\n\
         \x20   while True:\n\
         \x20       try: return socket.create_connection(('{ip}',5001),timeout=30)\n\
         \x20       except (ConnectionRefusedError, socket.timeout):\n\
         \x20           if time.time()>end: raise\n\
         \x20           time.sleep(0.2)\n\
         socks=[connect() for _ in range(4)]\n\
         data=[os.urandom(1<<20) for _ in range(4)]\n\
         def send(i):\n\
         \x20   socks[i].sendall(data[i]); socks[i].shutdown(socket.SHUT_WR)\n\
         \x20   socks[i].recv(1); socks[i].close()\n\
         ts=[threading.Thread(target=send,args=(i,)) for i in range(4)]\n\
         [t.start() for t in ts]; [t.join() for t in ts]\n\
         [print('x sha256', hashlib.sha256(d).hexdigest()) for d in data]",
        ip = sluice_lab::ENGINE_IP,
    );
    let sent = lab
        .exec(sluice_lab::NS_CLIENT, &["python3", "-c", &script])
        .unwrap();
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let out = wait_exit(sink, "sluice sink --cores 2 --count 4");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("thread 1: pre 1, protocol 1, post 1"),
        "{stderr}"
    );
    let got = digests(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(got.len(), 4, "{stderr}");
    assert_eq!(got, digests(&String::from_utf8_lossy(&sent.stdout)));

    // The source on 2 flow groups (its connection is group 0's) to a Linux sink.
    let ip = sluice_lab::command::find(sluice_lab::command::IP).unwrap();
    let server = std::process::Command::new(ip)
        .args([
            "netns",
            "exec",
            sluice_lab::NS_CLIENT,
            "python3",
            "-u",
            "-c",
        ])
        .arg(format!(
            "import socket,hashlib\n\
             l=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             l.bind(('{}',6001)); l.listen(1); l.settimeout(30)\n\
             print('ready',flush=True)\n\
             c,_=l.accept(); h=hashlib.sha256(); n=0\n\
             while True:\n\
             \x20   b=c.recv(1<<16)\n\
             \x20   if not b: break\n\
             \x20   h.update(b); n+=len(b)\n\
             print(n,'bytes sha256',h.hexdigest())",
            sluice_lab::CLIENT_IP
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let source = sluice()
        .args(["source", "--lab", "--cores", "2", "--bytes", "1048576"])
        .args(["--connect", &format!("{}:6001", sluice_lab::CLIENT_IP)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sent = wait_exit(source, "sluice source --cores 2");
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let received = wait_exit(server, "the Linux sink");
    let theirs = digests(&String::from_utf8_lossy(&received.stdout));
    assert_eq!(theirs.len(), 1);
    assert_eq!(digests(&String::from_utf8_lossy(&sent.stdout)), theirs);
    assert!(String::from_utf8_lossy(&received.stdout).contains("1048576 bytes"));
    lab.teardown().unwrap();
}
