// Leaf-spine: the fabric and workload of `sluice experiment ooo` (Laminar Table 2's shape)
// in ns-3, hosts running Sluice's core (--stack sluice) or ns-3's own TCP (--stack ns3).
//
// Spines and leaves are ns-3 IPv4 routers with static routes; every switch port is a
// point-to-point link with a SluiceStepMarkQueueDisc (mark CE at K, drop when full). The
// workload: persistent channels (every host to the first host of every other rack, and two
// per host to random hosts in other racks); Poisson partition-aggregate queries (fan-in
// workers answer 8 KB at once) and Poisson background transfers of web-search sizes at a
// fraction of each host's link; every message timed from queued to last byte read and its
// bytes verified. Prints the FCT percentiles, a summary, the ns-3 run's cost (wall clock,
// peak memory, events/s) and, with --csv, `sluice experiment ooo`'s columns and more.
// See docs/ns3.md.
#include "../model/message-channels.h"
#include "../model/sluice-stack.h"
#include "../model/step-mark-queue-disc.h"

#include "ns3/boolean.h"
#include "ns3/command-line.h"
#include "ns3/data-rate.h"
#include "ns3/global-value.h"
#include "ns3/internet-stack-helper.h"
#include "ns3/ipv4-address-helper.h"
#include "ns3/ipv4-static-routing-helper.h"
#include "ns3/ipv4.h"
#include "ns3/point-to-point-helper.h"
#include "ns3/point-to-point-net-device.h"
#include "ns3/queue.h"
#include "ns3/queue-disc.h"
#include "ns3/queue-size.h"
#include "ns3/rng-seed-manager.h"
#include "ns3/simulator.h"
#include "ns3/string.h"
#include "ns3/traffic-control-helper.h"
#include "ns3/uinteger.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

/// Size of each worker's answer in a partition-aggregate query (ooo.rs ANSWER_BYTES).
constexpr uint64_t kAnswerBytes = 8 * 1024;

/// Background sizes: the DCTCP paper's web-search distribution, coarsely (ooo.rs).
const std::vector<std::pair<uint64_t, double>> kBackgroundSizes = {
    {6000, 0.15},
    {20000, 0.15},
    {50000, 0.2},
    {130000, 0.1},
    {670000, 0.1},
    {1300000, 0.1},
    {3300000, 0.1},
    {6700000, 0.1},
};

/// The q-quantile (0..1) of `v` by nearest rank (flows.rs `quantile`); NaN for none.
double
Quantile(std::vector<double> v, double q)
{
    if (v.empty())
    {
        return std::nan("");
    }
    std::sort(v.begin(), v.end());
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

/// One message of the workload, at `at` after every channel is open.
struct Arrival
{
    double at;
    uint32_t channel;
    uint64_t bytes;
    MessageChannels::Class cls;
};

/// "a.b.c.d" for 10.(1 + leaf).(1 + slot).`last`.
Ipv4Address
HostNet(uint32_t leaf, uint32_t slot, uint32_t last)
{
    return Ipv4Address((10u << 24) | ((1 + leaf) << 16) | ((1 + slot) << 8) | last);
}

/// The workload's start, run once every channel is open.
std::function<void()>* g_begin = nullptr;

void
Begin()
{
    (*g_begin)();
}

} // namespace

int
main(int argc, char* argv[])
{
    std::string stackKind = "sluice";
    std::string cc = "dctcp";
    uint32_t spines = 4;
    uint32_t leaves = 6;
    uint32_t hostsPerLeaf = 8;
    uint32_t hosts = 0;
    uint32_t fanIn = 12;
    double qps = 4000;
    double load = 0.5;
    double ms = 100;
    double drainSeconds = 5;
    bool quick = false;
    std::string hostBandwidth = "10Gbps";
    std::string uplinkBandwidth = "40Gbps";
    std::string delay = "2us";
    // ooo's 200 KB port queues and K = 65 x 1500 B, in 1500 B packets.
    uint32_t queuePackets = 136;
    uint32_t ecnK = 65;
    uint32_t ooo = 64;
    uint32_t seed = 1;
    std::string csv;
    std::string workload;

    CommandLine cmd(__FILE__);
    cmd.AddValue("stack", "Hosts' transport: sluice (Sluice's core) or ns3 (ns-3's TCP)", stackKind);
    cmd.AddValue("cc", "Congestion control (dctcp, newreno)", cc);
    cmd.AddValue("spines", "Spine switches", spines);
    cmd.AddValue("leaves", "Leaf switches", leaves);
    cmd.AddValue("hosts-per-leaf", "Hosts under each leaf", hostsPerLeaf);
    cmd.AddValue("hosts", "Hosts in all (overrides --hosts-per-leaf: hosts / leaves each)", hosts);
    cmd.AddValue("quick", "ooo's --quick size: 2 spines, 2 leaves, 4 hosts each, fan-in 4, "
                          "2000 queries/s, 20 ms",
                 quick);
    cmd.AddValue("fan-in", "Workers answering each query", fanIn);
    cmd.AddValue("qps", "Queries per second, whole fabric", qps);
    cmd.AddValue("load", "Background load, fraction of each host's link", load);
    cmd.AddValue("ms", "Arrivals for this many ms after every channel is open", ms);
    cmd.AddValue("drain", "Most seconds to wait for the last messages after the arrivals", drainSeconds);
    cmd.AddValue("host-bandwidth", "Host link rate", hostBandwidth);
    cmd.AddValue("uplink-bandwidth", "Leaf-spine link rate", uplinkBandwidth);
    cmd.AddValue("delay", "One-way delay of every link", delay);
    cmd.AddValue("queue", "Switch port queue, packets", queuePackets);
    cmd.AddValue("ecn-k", "Switch port ECN marking threshold K, packets", ecnK);
    cmd.AddValue("ooo", "Sluice hosts: out-of-order intervals per connection (0..64)", ooo);
    cmd.AddValue("seed", "Seed of the run (ns-3's RNG, the workload, the stacks)", seed);
    cmd.AddValue("csv", "Write the summary as CSV to this file", csv);
    cmd.AddValue("workload",
                 "Replay this workload (channels and arrivals as the ns3_crosscheck example "
                 "writes them) instead of drawing one",
                 workload);
    cmd.Parse(argc, argv);
    if (quick)
    {
        spines = 2;
        leaves = 2;
        hostsPerLeaf = 4;
        fanIn = 4;
        qps = 2000;
        ms = 20;
    }
    if (hosts > 0)
    {
        hostsPerLeaf = leaves == 0 ? 0 : hosts / leaves;
    }
    bool sluice = stackKind == "sluice";
    if (!sluice && stackKind != "ns3")
    {
        std::cerr << "leaf_spine: --stack is sluice or ns3" << std::endl;
        return 2;
    }
    if (spines == 0 || leaves < 2 || leaves > 250 || hostsPerLeaf == 0 || hostsPerLeaf > 250 ||
        fanIn == 0 || seed == 0 || !(ms > 0) || !(qps >= 0) || !(load >= 0) || ecnK == 0 ||
        queuePackets < ecnK)
    {
        std::cerr << "leaf_spine: need --spines >= 1, 2 <= --leaves <= 250, 1 <= hosts per leaf <= 250, "
                     "--fan-in >= 1, --seed >= 1, --ms > 0, 1 <= --ecn-k <= --queue"
                  << std::endl;
        return 2;
    }
    std::string error;
    if (!sluice && !MessageChannels::ConfigureNs3Tcp(cc, &error))
    {
        std::cerr << "leaf_spine: " << error << std::endl;
        return 2;
    }
    // Again, so that --ns3::TcpSocketBase::X=... given by hand overrides those defaults.
    cmd.Parse(argc, argv);
    auto wallStart = std::chrono::steady_clock::now();
    uint32_t n = leaves * hostsPerLeaf;

    // Routers rewrite the IPv4 header (TTL); Sluice's hosts verify its checksum.
    GlobalValue::Bind("ChecksumEnabled", BooleanValue(true));
    RngSeedManager::SetSeed(seed);

    NodeContainer spineNodes;
    NodeContainer leafNodes;
    NodeContainer hostNodes;
    spineNodes.Create(spines);
    leafNodes.Create(leaves);
    hostNodes.Create(n);
    InternetStackHelper internet;
    internet.Install(spineNodes);
    internet.Install(leafNodes);
    if (!sluice)
    {
        internet.Install(hostNodes);
    }

    TrafficControlHelper stepMark;
    // DCTCP's switch (RFC 8257 3.1), as in Sluice's simulator, on every switch port.
    stepMark.SetRootQueueDisc("ns3::SluiceStepMarkQueueDisc",
                              "MarkThreshold", UintegerValue(ecnK),
                              "MaxSize", QueueSizeValue(QueueSize(std::to_string(queuePackets) + "p")));
    TrafficControlHelper fifo;
    QueueDiscContainer ports;

    // Uplinks: every leaf to every spine, addresses from 172.16/12 (a /30 each).
    PointToPointHelper uplink;
    uplink.SetDeviceAttribute("DataRate", StringValue(uplinkBandwidth));
    uplink.SetChannelAttribute("Delay", StringValue(delay));
    // The queue lives in the queue disc; the device keeps one packet.
    uplink.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1p"));
    Ipv4AddressHelper address;
    address.SetBase("172.16.0.0", "255.255.255.252");
    // upLeaf[l][s]: leaf l's address on its link to spine s; upSpine likewise.
    std::vector<std::vector<Ipv4Address>> upLeaf(leaves, std::vector<Ipv4Address>(spines));
    std::vector<std::vector<Ipv4Address>> upSpine(leaves, std::vector<Ipv4Address>(spines));
    std::vector<std::vector<uint32_t>> upLeafIf(leaves, std::vector<uint32_t>(spines));
    std::vector<std::vector<uint32_t>> upSpineIf(leaves, std::vector<uint32_t>(spines));
    for (uint32_t l = 0; l < leaves; l++)
    {
        for (uint32_t s = 0; s < spines; s++)
        {
            NetDeviceContainer link = uplink.Install(leafNodes.Get(l), spineNodes.Get(s));
            ports.Add(stepMark.Install(link));
            Ipv4InterfaceContainer ifs = address.Assign(link);
            address.NewNetwork();
            upLeaf[l][s] = ifs.GetAddress(0);
            upSpine[l][s] = ifs.GetAddress(1);
            upLeafIf[l][s] = ifs.Get(0).second;
            upSpineIf[l][s] = ifs.Get(1).second;
        }
    }

    // Host links: host `slot` of leaf l is 10.(1+l).(1+slot).2, its leaf port .1 (a /24).
    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", StringValue(hostBandwidth));
    access.SetChannelAttribute("Delay", StringValue(delay));
    access.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1p"));
    // A host's own device queue takes whatever burst its stack emits at once.
    std::vector<Ptr<SluiceStack>> stacks(n);
    std::vector<Ipv4Address> ips(n);
    std::vector<Mac48Address> gateway(n);
    MessageChannels channels(sluice, 7000);
    for (uint32_t i = 0; i < n; i++)
    {
        uint32_t l = i / hostsPerLeaf;
        uint32_t slot = i % hostsPerLeaf;
        Ptr<Node> host = hostNodes.Get(i);
        NetDeviceContainer link = access.Install(host, leafNodes.Get(l));
        DynamicCast<PointToPointNetDevice>(link.Get(0))->GetQueue()->SetMaxSize(QueueSize("10000p"));
        ports.Add(stepMark.Install(link.Get(1)));
        address.SetBase(HostNet(l, slot, 0), "255.255.255.0");
        address.Assign(NetDeviceContainer(link.Get(1)));
        ips[i] = HostNet(l, slot, 2);
        gateway[i] = Mac48Address::ConvertFrom(link.Get(1)->GetAddress());
        if (sluice)
        {
            Ptr<SluiceStack> stack = CreateObject<SluiceStack>();
            stack->SetAttribute("CongestionControl", StringValue(cc));
            stack->SetAttribute("OooIntervals", UintegerValue(ooo));
            // An aggregator talks to every host outside its rack: more than the default
            // 256 neighbors from 288 hosts on.
            stack->SetAttribute("NeighborCache", UintegerValue(std::max<uint32_t>(256, 2 * n)));
            stack->SetAttribute("Seed", UintegerValue(uint64_t(seed) * 1000 + i));
            if (!stack->Install(host, link.Get(0), ips[i], &error))
            {
                std::cerr << "leaf_spine: sluice config refused: " << error << std::endl;
                return 2;
            }
            host->AggregateObject(stack);
            stacks[i] = stack;
        }
        else
        {
            Ipv4InterfaceContainer ifs = address.Assign(NetDeviceContainer(link.Get(0)));
            fifo.Uninstall(link.Get(0));
            Ipv4StaticRoutingHelper routing;
            routing.GetStaticRouting(host->GetObject<Ipv4>())
                ->SetDefaultRoute(HostNet(l, slot, 1), ifs.Get(0).second);
        }
        channels.AddHost(host, ips[i], stacks[i]);
    }

    // Routes. A leaf sends host j of another leaf over spine (j + leaf) % spines: ECMP by
    // destination (ns-3's static routing has no flow hash; Sluice's simulator hashes the
    // flow). A spine sends each leaf's /16 down to it.
    Ipv4StaticRoutingHelper routing;
    for (uint32_t l = 0; l < leaves; l++)
    {
        Ptr<Ipv4StaticRouting> r = routing.GetStaticRouting(leafNodes.Get(l)->GetObject<Ipv4>());
        for (uint32_t j = 0; j < n; j++)
        {
            uint32_t dl = j / hostsPerLeaf;
            if (dl == l)
            {
                continue;
            }
            uint32_t s = (j + l) % spines;
            r->AddNetworkRouteTo(HostNet(dl, j % hostsPerLeaf, 0),
                                 Ipv4Mask("255.255.255.0"),
                                 upSpine[l][s],
                                 upLeafIf[l][s]);
        }
    }
    for (uint32_t s = 0; s < spines; s++)
    {
        Ptr<Ipv4StaticRouting> r = routing.GetStaticRouting(spineNodes.Get(s)->GetObject<Ipv4>());
        for (uint32_t l = 0; l < leaves; l++)
        {
            r->AddNetworkRouteTo(Ipv4Address((10u << 24) | ((1 + l) << 16)),
                                 Ipv4Mask("255.255.0.0"),
                                 upLeaf[l][s],
                                 upSpineIf[l][s]);
        }
    }

    // The workload, as ooo.rs builds it (its own seeded generator: the same distributions,
    // not the same draws).
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    auto pick = [&](uint32_t below) {
        return static_cast<uint32_t>(std::uniform_int_distribution<uint32_t>(0, below - 1)(rng));
    };
    std::vector<Arrival> arrivalsGiven;
    bool replayed = false;
    std::vector<std::vector<uint32_t>> answers(n);
    std::vector<std::vector<uint32_t>> background(n);
    std::vector<std::pair<uint32_t, uint32_t>> ends;
    for (uint32_t l = 0; l < leaves; l++)
    {
        uint32_t agg = l * hostsPerLeaf;
        for (uint32_t w = 0; w < n; w++)
        {
            if (w / hostsPerLeaf != l)
            {
                answers[agg].push_back(static_cast<uint32_t>(ends.size()));
                ends.emplace_back(w, agg);
            }
        }
    }
    for (uint32_t src = 0; src < n; src++)
    {
        for (int k = 0; k < 2; k++)
        {
            uint32_t dst;
            do
            {
                dst = pick(n);
            } while (dst / hostsPerLeaf == src / hostsPerLeaf);
            background[src].push_back(static_cast<uint32_t>(ends.size()));
            ends.emplace_back(src, dst);
        }
    }
    if (!workload.empty())
    {
        // The very channels and arrivals Sluice's simulator ran (crates/experiments'
        // ns3_crosscheck --workload): the cross-check then compares models, not draws.
        std::ifstream in(workload);
        std::vector<std::pair<uint32_t, uint32_t>> given;
        std::vector<Arrival> replay;
        std::string kind;
        bool bad = !in;
        while (!bad && in >> kind)
        {
            if (kind == "c")
            {
                uint32_t a = 0;
                uint32_t b = 0;
                bad = !(in >> a >> b) || a >= n || b >= n || a == b;
                given.emplace_back(a, b);
            }
            else if (kind == "a")
            {
                uint64_t atNs = 0;
                uint32_t ch = 0;
                uint64_t size = 0;
                std::string cls;
                bad = !(in >> atNs >> ch >> size >> cls) || ch >= given.size() || size == 0 ||
                      (cls != "fg" && cls != "bg");
                replay.push_back({static_cast<double>(atNs) / 1e9,
                                  ch,
                                  size,
                                  cls == "fg" ? MessageChannels::FOREGROUND : MessageChannels::BACKGROUND});
            }
            else
            {
                bad = true;
            }
        }
        if (bad || given.empty())
        {
            std::cerr << "leaf_spine: --workload " << workload
                      << ": not a workload for this fabric (lines 'c SRC DST', 'a AT_NS CHANNEL BYTES fg|bg')"
                      << std::endl;
            return 2;
        }
        ends = given;
        arrivalsGiven = replay;
        replayed = true;
    }
    if (sluice)
    {
        // The core has no default gateway: every peer is reached at the leaf port's MAC.
        for (auto [src, dst] : ends)
        {
            if (!stacks[src]->AddNeighbor(ips[dst], gateway[src]) ||
                !stacks[dst]->AddNeighbor(ips[src], gateway[dst]))
            {
                std::cerr << "leaf_spine: the core refused a static neighbor" << std::endl;
                return 2;
            }
        }
    }
    if (!channels.Listen(&error))
    {
        std::cerr << "leaf_spine: " << error << std::endl;
        return 2;
    }
    for (auto [src, dst] : ends)
    {
        channels.Open(src, dst, MicroSeconds(1));
    }

    std::vector<double> cdf;
    double mass = 0;
    double meanBg = 0;
    for (auto [bytes, p] : kBackgroundSizes)
    {
        mass += p;
        cdf.push_back(mass);
        meanBg += static_cast<double>(bytes) * p;
    }
    double hostBps = DataRate(hostBandwidth).GetBitRate();
    double bgRate = load * hostBps / 8.0 / meanBg;
    double horizon = ms / 1e3;
    auto exp = [&](double rate) { return -std::log(std::max(unit(rng), 1e-12)) / rate; };
    std::vector<Arrival> arrivals;
    if (replayed)
    {
        arrivals = arrivalsGiven;
        qps = 0;
        bgRate = 0;
        for (const Arrival& x : arrivals)
        {
            horizon = std::max(horizon, x.at);
        }
    }
    if (qps > 0)
    {
        for (double t = exp(qps); t < horizon; t += exp(qps))
        {
            const std::vector<uint32_t>& chans = answers[pick(leaves) * hostsPerLeaf];
            std::vector<uint32_t> picked;
            while (picked.size() < std::min<size_t>(fanIn, chans.size()))
            {
                uint32_t c = chans[pick(static_cast<uint32_t>(chans.size()))];
                if (std::find(picked.begin(), picked.end(), c) == picked.end())
                {
                    picked.push_back(c);
                }
            }
            for (uint32_t c : picked)
            {
                arrivals.push_back({t, c, kAnswerBytes, MessageChannels::FOREGROUND});
            }
        }
    }
    if (bgRate > 0)
    {
        for (uint32_t src = 0; src < n; src++)
        {
            for (double t = exp(bgRate); t < horizon; t += exp(bgRate))
            {
                double u = unit(rng) * mass;
                size_t k = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
                uint64_t bytes = kBackgroundSizes[std::min(k, cdf.size() - 1)].first;
                arrivals.push_back({t, background[src][pick(2)], bytes, MessageChannels::BACKGROUND});
            }
        }
    }

    // Arrivals start once every channel is open (as ooo.rs waits for them); the run ends
    // when every message is read, or --drain seconds after the last arrival.
    Time started = Seconds(0);
    bool draining = false;
    std::function<void()> checkDone;
    checkDone = [&]() {
        if (channels.GetOutstanding() == 0 || !channels.GetError().empty())
        {
            Simulator::Stop();
            return;
        }
        Simulator::Schedule(MicroSeconds(100), checkDone);
    };
    std::function<void()> begin = [&]() {
        started = Simulator::Now();
        for (const Arrival& a : arrivals)
        {
            Simulator::Schedule(Seconds(a.at), &MessageChannels::Send, &channels, a.channel, a.bytes, a.cls);
        }
        draining = true;
        Simulator::Schedule(Seconds(horizon), checkDone);
        Simulator::Stop(Seconds(horizon + drainSeconds));
    };
    g_begin = &begin;
    channels.OnAllOpen(MakeCallback(&Begin));
    Simulator::Schedule(Seconds(1), [&]() {
        if (!draining)
        {
            Simulator::Stop();
        }
    });
    Simulator::Run();
    if (!draining)
    {
        std::cerr << "leaf_spine: channels did not open: " << channels.GetOpen() << " of "
                  << channels.GetChannels() << " within 1 s"
                  << (channels.GetError().empty() ? "" : " (" + channels.GetError() + ")") << std::endl;
        Simulator::Destroy();
        return 1;
    }
    Time end = Simulator::Now();
    uint64_t events = Simulator::GetEventCount();

    std::vector<double> fg;
    std::vector<double> bg;
    std::vector<double> all;
    uint64_t bytes = 0;
    Time last = started;
    for (const auto& c : channels.GetCompletions())
    {
        double fctMs = c.fct.GetSeconds() * 1e3;
        (c.cls == MessageChannels::FOREGROUND ? fg : bg).push_back(fctMs);
        all.push_back(fctMs);
        bytes += c.bytes;
        last = std::max(last, c.end);
    }
    double gbps = last > started ? static_cast<double>(bytes) * 8 / (last - started).GetSeconds() / 1e9 : 0;
    uint64_t drops = 0;
    uint64_t marks = 0;
    for (uint32_t i = 0; i < ports.GetN(); i++)
    {
        const QueueDisc::Stats& st = ports.Get(i)->GetStats();
        drops += st.nTotalDroppedPackets;
        marks += st.nTotalMarkedPackets;
    }
    uint64_t rtos = 0;
    uint64_t retx = 0;
    uint64_t hostDropped = 0;
    for (auto& s : stacks)
    {
        if (s)
        {
            sluice_counters c = s->GetCounters();
            rtos += c.timeouts;
            retx += c.retransmitted_bytes;
            hostDropped += s->GetTxDropped() + s->GetRxDropped();
        }
    }
    bool verified = channels.IsVerified();
    uint64_t outstanding = channels.GetOutstanding();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wallStart).count();
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double maxrssMb = static_cast<double>(usage.ru_maxrss) / 1024.0;
    size_t flows = all.size();
    std::printf("leaf-spine: %u spines x %u leaves x %u hosts, %s hosts, %s, %zu channels, %zu messages "
                "(%zu foreground, %zu background) in %.0f ms of arrivals, seed %u\n",
                spines, leaves, hostsPerLeaf, sluice ? "sluice" : "ns-3 TCP", cc.c_str(),
                static_cast<size_t>(channels.GetChannels()), arrivals.size(), fg.size(), bg.size(), ms, seed);
    std::printf("fct: fg p50 %.4f ms p90 %.4f ms p99 %.4f ms p99.9 %.4f ms; bg p50 %.4f ms p90 %.4f ms "
                "p99 %.4f ms p99.9 %.4f ms; all p50 %.4f ms p99 %.4f ms\n",
                Quantile(fg, 0.5), Quantile(fg, 0.9), Quantile(fg, 0.99), Quantile(fg, 0.999),
                Quantile(bg, 0.5), Quantile(bg, 0.9), Quantile(bg, 0.99), Quantile(bg, 0.999),
                Quantile(all, 0.5), Quantile(all, 0.99));
    std::printf("summary: %zu of %zu messages completed, %s, %llu bytes, %.3f Gbit/s aggregate, "
                "%llu port drops, %llu ECN marks, %s RTOs, %s bytes retransmitted, %llu frames "
                "dropped at the hosts' devices%s%s\n",
                flows, arrivals.size(), verified ? "verified" : "NOT verified",
                static_cast<unsigned long long>(bytes), gbps,
                static_cast<unsigned long long>(drops), static_cast<unsigned long long>(marks),
                sluice ? std::to_string(rtos).c_str() : "-",
                sluice ? std::to_string(retx).c_str() : "-",
                static_cast<unsigned long long>(hostDropped),
                channels.GetError().empty() ? "" : ", error: ",
                channels.GetError().c_str());
    std::printf("cost: %u hosts, %.3f s simulated, %.2f s wall, %.1f MB maxrss, %llu events, "
                "%.0f events/s\n",
                n, end.GetSeconds(), wall, maxrssMb, static_cast<unsigned long long>(events),
                wall > 0 ? static_cast<double>(events) / wall : 0);
    if (!csv.empty())
    {
        std::ofstream out(csv);
        out << "cc,ooo,fg p90 ms,fg p99.9 ms,bg p90 ms,bg p99.9 ms,flows,retx MB,"
               "stack,hosts,fct p50 ms,fct p99 ms,fg p50 ms,fg p99 ms,Gbit/s,ECN marks,tail drops,"
               "RTOs,completed,verified,wall s,maxrss MB,events,events/s\n";
        out << cc << "," << (sluice ? std::to_string(ooo) : "-") << "," << Quantile(fg, 0.9) << ","
            << Quantile(fg, 0.999) << "," << Quantile(bg, 0.9) << "," << Quantile(bg, 0.999) << ","
            << flows << "," << (sluice ? std::to_string(retx / 1e6) : "-") << ","
            << stackKind << "," << n << "," << Quantile(all, 0.5) << "," << Quantile(all, 0.99) << ","
            << Quantile(fg, 0.5) << "," << Quantile(fg, 0.99) << "," << gbps << "," << marks << ","
            << drops << "," << (sluice ? std::to_string(rtos) : "-") << "," << flows << ","
            << (verified ? 1 : 0) << "," << wall << "," << maxrssMb << "," << events << ","
            << (wall > 0 ? static_cast<double>(events) / wall : 0) << "\n";
        if (!out)
        {
            std::cerr << "leaf_spine: cannot write " << csv << std::endl;
            Simulator::Destroy();
            return 2;
        }
    }
    if (outstanding > 0)
    {
        std::printf("%s", channels.DescribeStuck(5).c_str());
    }
    Simulator::Destroy();
    bool ok = verified && outstanding == 0 && channels.GetError().empty();
    return ok ? 0 : 1;
}
