// Dumbbell: N Sluice senders -> router -> bottleneck -> router -> N Sluice receivers.
//
// The hosts run Sluice's TCP core (SluiceStack), not ns-3's Internet stack; the two routers
// run ns-3's IPv4 forwarding with static routes. The bottleneck is point-to-point (full
// duplex) with a FIFO marking ECN at a step threshold (DCTCP's K); host links are
// point-to-point too, or CSMA (Ethernet, with ARP between router and host) with
// --access=csma. With --stack ns3 the hosts run ns-3's own TCP instead (TcpDctcp or
// TcpNewReno, SACK, ECN for DCTCP), over the same links and queues.
// Prints one line per flow and a summary; --csv=FILE writes the summary's columns as
// `sluice experiment incast` names them. Exit status 1 when a flow was not verified or
// did not complete. See docs/ns3.md.
#include "../model/message-channels.h"
#include "../model/sluice-bulk.h"
#include "../model/sluice-rpc.h"
#include "../model/sluice-stack.h"
#include "../model/step-mark-queue-disc.h"

#include "ns3/boolean.h"
#include "ns3/command-line.h"
#include "ns3/csma-helper.h"
#include "ns3/global-value.h"
#include "ns3/internet-stack-helper.h"
#include "ns3/ipv4-address-helper.h"
#include "ns3/ipv4-static-routing-helper.h"
#include "ns3/ipv4.h"
#include "ns3/point-to-point-helper.h"
#include "ns3/queue-disc.h"
#include "ns3/queue-size.h"
#include "ns3/random-variable-stream.h"
#include "ns3/rng-seed-manager.h"
#include "ns3/simulator.h"
#include "ns3/string.h"
#include "ns3/traffic-control-helper.h"
#include "ns3/uinteger.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

/// The q-quantile (0..1) of `v` by nearest rank; 0 for none.
double
Quantile(std::vector<double> v, double q)
{
    if (v.empty())
    {
        return 0;
    }
    std::sort(v.begin(), v.end());
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

/// Jain's fairness index of `v`.
double
Jain(const std::vector<double>& v)
{
    double sum = 0;
    double squares = 0;
    for (double x : v)
    {
        sum += x;
        squares += x * x;
    }
    return squares == 0 ? 0 : sum * sum / (static_cast<double>(v.size()) * squares);
}

/// A host: its SluiceStack on the access link's device; false (with the reason printed)
/// when the attributes are refused.
Ptr<SluiceStack>
AddHost(Ptr<Node> host,
        Ptr<NetDevice> device,
        Ipv4Address ip,
        const std::string& cc,
        uint32_t ooo,
        const std::string& recovery,
        uint64_t seed)
{
    Ptr<SluiceStack> stack = CreateObject<SluiceStack>();
    stack->SetAttribute("CongestionControl", StringValue(cc));
    stack->SetAttribute("OooIntervals", UintegerValue(ooo));
    stack->SetAttribute("Recovery", StringValue(recovery));
    stack->SetAttribute("Seed", UintegerValue(seed));
    std::string error;
    if (!stack->Install(host, device, ip, &error))
    {
        std::cerr << "dumbbell: sluice config refused: " << error << std::endl;
        return nullptr;
    }
    host->AggregateObject(stack);
    return stack;
}

/// The dumbbell's flows over ns-3's TCP (--stack ns3): flow i is one message of `bytes`
/// on a channel from sender i to receiver i, queued when the channel starts to connect, so
/// its time runs from the connect to the last byte read as a Sluice flow's does. Prints
/// the lines and the CSV of the Sluice run (RTOs and retransmissions: "-").
int
RunNs3Tcp(NodeContainer& senders,
          NodeContainer& receivers,
          QueueDiscContainer& queues,
          uint32_t flows,
          uint64_t bytes,
          Time stop,
          Ptr<UniformRandomVariable> jitter,
          const std::string& cc,
          const std::string& bandwidth,
          uint32_t seed,
          const std::string& csv)
{
    MessageChannels channels(false, 5001);
    for (uint32_t side = 0; side < 2; side++)
    {
        NodeContainer& hosts = side == 0 ? senders : receivers;
        for (uint32_t i = 0; i < flows; i++)
        {
            channels.AddHost(hosts.Get(i), hosts.Get(i)->GetObject<Ipv4>()->GetAddress(1, 0).GetLocal(), nullptr);
        }
    }
    std::string error;
    if (!channels.Listen(&error))
    {
        std::cerr << "dumbbell: " << error << std::endl;
        return 2;
    }
    std::vector<Time> starts;
    for (uint32_t i = 0; i < flows; i++)
    {
        Time start = MicroSeconds(1 + jitter->GetValue(0, 100));
        uint32_t ch = channels.Open(i, flows + i, start);
        starts.push_back(start);
        Simulator::Schedule(start, &MessageChannels::Send, &channels, ch, bytes, MessageChannels::FOREGROUND);
    }
    Simulator::Stop(stop);
    Simulator::Run();
    std::vector<Time> ends(flows, stop);
    std::vector<bool> complete(flows, false);
    for (const auto& c : channels.GetCompletions())
    {
        ends[c.channel] = c.end;
        complete[c.channel] = true;
    }
    uint32_t completed = 0;
    uint64_t delivered = 0;
    std::vector<double> fctMs;
    std::vector<double> gbps;
    Time spanStart = stop;
    Time spanEnd = Seconds(0);
    bool verified = channels.IsVerified();
    for (uint32_t i = 0; i < flows; i++)
    {
        uint64_t got = channels.GetBytesRead(i);
        double elapsed = (ends[i] - starts[i]).GetSeconds();
        double rate = elapsed > 0 ? got * 8 / elapsed / 1e9 : 0;
        completed += complete[i];
        delivered += got;
        gbps.push_back(rate);
        spanStart = std::min(spanStart, starts[i]);
        spanEnd = std::max(spanEnd, ends[i]);
        if (complete[i])
        {
            fctMs.push_back(elapsed * 1e3);
        }
        std::printf("flow %u %s -> %s: %llu bytes delivered, %s, %s",
                    i,
                    (std::ostringstream() << senders.Get(i)->GetObject<Ipv4>()->GetAddress(1, 0).GetLocal()).str().c_str(),
                    (std::ostringstream() << receivers.Get(i)->GetObject<Ipv4>()->GetAddress(1, 0).GetLocal()).str().c_str(),
                    static_cast<unsigned long long>(got),
                    verified ? "verified" : "NOT verified",
                    complete[i] ? "completed" : "not completed");
        if (complete[i])
        {
            std::printf(" in %.3f ms", elapsed * 1e3);
        }
        std::printf(", %.3f Gbit/s\n", rate);
    }
    uint64_t drops = 0;
    uint64_t marks = 0;
    for (uint32_t i = 0; i < queues.GetN(); i++)
    {
        const QueueDisc::Stats& st = queues.Get(i)->GetStats();
        drops += st.nTotalDroppedPackets;
        marks += st.nTotalMarkedPackets;
    }
    double aggregate = spanEnd > spanStart
                           ? static_cast<double>(delivered) * 8 / (spanEnd - spanStart).GetSeconds() / 1e9
                           : 0;
    std::printf("summary: %u flows, %u completed, %u verified, %llu bytes delivered, "
                "%.3f Gbit/s aggregate, Jain %.3f, fct p50 %.3f ms p99 %.3f ms, "
                "%llu bottleneck drops, %llu ECN marks, - RTOs (ns-3 TCP, %s, %s, seed %u)%s%s\n",
                flows,
                completed,
                verified ? flows : 0,
                static_cast<unsigned long long>(delivered),
                aggregate,
                Jain(gbps),
                Quantile(fctMs, 0.5),
                Quantile(fctMs, 0.99),
                static_cast<unsigned long long>(drops),
                static_cast<unsigned long long>(marks),
                cc.c_str(),
                bandwidth.c_str(),
                seed,
                channels.GetError().empty() ? "" : ", error: ",
                channels.GetError().c_str());
    if (!csv.empty())
    {
        std::ofstream out(csv);
        out << "senders,policy,Gbit/s,Jain,fct p50 ms,fct p99 ms,rpc p50 us,rpc p99 us,rpc ops,"
               "tail drops,ECN marks,RTOs,retx MB,completed,verified\n";
        out << flows << "," << cc << "," << aggregate << "," << Jain(gbps) << ","
            << Quantile(fctMs, 0.5) << "," << Quantile(fctMs, 0.99) << ",0,0,0," << drops << ","
            << marks << ",-,-," << completed << "," << (verified ? flows : 0) << "\n";
    }
    Simulator::Destroy();
    bool ok = verified && (bytes == 0 || completed == flows) && channels.GetError().empty();
    return ok ? 0 : 1;
}

} // namespace

int
main(int argc, char* argv[])
{
    uint32_t flows = 4;
    double seconds = 0.1;
    std::string bandwidth = "1Gbps";
    std::string delay = "10us";
    std::string accessBandwidth = "10Gbps";
    std::string accessDelay = "1us";
    std::string accessKind = "p2p";
    std::string cc = "dctcp";
    std::string recovery = "sack";
    uint32_t ooo = 1;
    uint64_t bytes = 1000000;
    uint32_t rpc = 0;
    uint32_t queuePackets = 200;
    uint32_t ecnK = 20;
    uint32_t seed = 1;
    std::string csv;
    std::string stackKind = "sluice";

    CommandLine cmd(__FILE__);
    cmd.AddValue("stack", "Hosts' transport: sluice (Sluice's core) or ns3 (ns-3's TCP)", stackKind);
    cmd.AddValue("flows", "Bulk flows (sender/receiver pairs)", flows);
    cmd.AddValue("seconds", "Simulated seconds", seconds);
    cmd.AddValue("bandwidth", "Bottleneck rate", bandwidth);
    cmd.AddValue("delay", "Bottleneck one-way delay", delay);
    cmd.AddValue("access-bandwidth", "Host link rate", accessBandwidth);
    cmd.AddValue("access-delay", "Host link one-way delay", accessDelay);
    cmd.AddValue("access", "Host links: p2p (point-to-point) or csma (Ethernet, ARP)", accessKind);
    cmd.AddValue("cc", "Congestion control (dctcp, newreno, cubic, bbr, timely)", cc);
    cmd.AddValue("recovery", "Loss recovery (sack, gobackn)", recovery);
    cmd.AddValue("ooo", "Out-of-order intervals per connection (0..64)", ooo);
    cmd.AddValue("bytes", "Bytes per bulk flow (0: send until the end)", bytes);
    cmd.AddValue("rpc", "Closed-loop 64 B RPC flows beside the bulk flows", rpc);
    cmd.AddValue("queue", "Bottleneck queue, packets", queuePackets);
    cmd.AddValue("ecn-k", "Bottleneck ECN marking threshold, packets", ecnK);
    cmd.AddValue("seed", "Seed of the run (ns-3's RNG and the stacks')", seed);
    cmd.AddValue("csv", "Write the summary as CSV to this file", csv);
    cmd.Parse(argc, argv);
    bool sluice = stackKind == "sluice";
    if (!sluice && stackKind != "ns3")
    {
        std::cerr << "dumbbell: --stack is sluice or ns3" << std::endl;
        return 2;
    }
    if (!sluice)
    {
        std::string error;
        if (!MessageChannels::ConfigureNs3Tcp(cc, &error) || rpc > 0 || accessKind != "p2p")
        {
            std::cerr << "dumbbell: --stack ns3: "
                      << (error.empty() ? "no --rpc, p2p access links only" : error) << std::endl;
            return 2;
        }
        // Again, so that --ns3::TcpSocketBase::X=... given by hand overrides those defaults.
        cmd.Parse(argc, argv);
    }
    if (accessKind != "p2p" && accessKind != "csma")
    {
        std::cerr << "dumbbell: --access is p2p or csma" << std::endl;
        return 2;
    }
    if (flows == 0 || rpc > flows || seed == 0 || !(seconds > 0) || ecnK == 0 || queuePackets < ecnK)
    {
        std::cerr << "dumbbell: need --flows >= 1, --rpc <= --flows, --seed >= 1, "
                     "--seconds > 0, 1 <= --ecn-k <= --queue"
                  << std::endl;
        return 2;
    }

    // ns-3's routers rewrite the IPv4 header (TTL); without this its checksum would be 0
    // and the Sluice hosts, which verify checksums, would drop every frame.
    GlobalValue::Bind("ChecksumEnabled", BooleanValue(true));
    RngSeedManager::SetSeed(seed);

    NodeContainer senders;
    NodeContainer receivers;
    NodeContainer routers;
    senders.Create(flows);
    receivers.Create(flows);
    routers.Create(2);
    InternetStackHelper internet;
    internet.Install(routers);
    if (!sluice)
    {
        internet.Install(senders);
        internet.Install(receivers);
    }

    PointToPointHelper bottleneck;
    bottleneck.SetDeviceAttribute("DataRate", StringValue(bandwidth));
    bottleneck.SetChannelAttribute("Delay", StringValue(delay));
    // The queue lives in the queue disc (RED below); the device keeps one packet.
    bottleneck.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1p"));
    NetDeviceContainer core = bottleneck.Install(routers.Get(0), routers.Get(1));
    TrafficControlHelper stepMark;
    // DCTCP's switch (RFC 8257 3.1), as in Sluice's simulator: mark ECN-capable packets
    // arriving to K or more queued, drop only when the queue is full. (ns-3's RED with
    // MinTh = K would also drop SYNs and non-ECN flows' packets from K on.)
    stepMark.SetRootQueueDisc("ns3::SluiceStepMarkQueueDisc",
                         "MarkThreshold", UintegerValue(ecnK),
                         "MaxSize", QueueSizeValue(QueueSize(std::to_string(queuePackets) + "p")));
    QueueDiscContainer queues = stepMark.Install(core);
    Ipv4AddressHelper address;
    address.SetBase("10.0.0.0", "255.255.255.252");
    address.Assign(core);

    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", StringValue(accessBandwidth));
    access.SetChannelAttribute("Delay", StringValue(accessDelay));
    // A host's device queue takes whatever burst the core emits at once (its send window).
    access.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("10000p"));
    // CSMA is half duplex in ns-3 3.37 (one sender at a time on a channel): at 10x the
    // bottleneck's rate a host link is still never the bottleneck.
    CsmaHelper csma;
    csma.SetChannelAttribute("DataRate", StringValue(accessBandwidth));
    csma.SetChannelAttribute("Delay", StringValue(accessDelay));
    csma.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("10000p"));
    TrafficControlHelper fifo;

    std::vector<Ptr<SluiceStack>> senderStacks;
    std::vector<Ptr<SluiceStack>> receiverStacks;
    for (uint32_t side = 0; side < 2; side++)
    {
        NodeContainer& hosts = side == 0 ? senders : receivers;
        Ptr<Node> router = routers.Get(side);
        for (uint32_t i = 0; i < flows; i++)
        {
            NetDeviceContainer link = accessKind == "csma"
                                          ? csma.Install(NodeContainer(hosts.Get(i), router))
                                          : access.Install(hosts.Get(i), router);
            std::ostringstream net;
            net << "10." << (side + 1) << "." << (i + 1) << ".0";
            address.SetBase(net.str().c_str(), "255.255.255.0");
            // The router's side gets .1; the host's .2 is Sluice's, outside ns-3's IPv4.
            address.Assign(NetDeviceContainer(link.Get(1)));
            fifo.Uninstall(link.Get(1));
            if (!sluice)
            {
                // ns-3's TCP host: .2 on its own IPv4, the router its default route.
                Ipv4InterfaceContainer ifs = address.Assign(NetDeviceContainer(link.Get(0)));
                fifo.Uninstall(link.Get(0));
                Ipv4StaticRoutingHelper hostRouting;
                std::ostringstream gw;
                gw << "10." << (side + 1) << "." << (i + 1) << ".1";
                hostRouting.GetStaticRouting(hosts.Get(i)->GetObject<Ipv4>())
                    ->SetDefaultRoute(Ipv4Address(gw.str().c_str()), ifs.Get(0).second);
                continue;
            }
            std::ostringstream host;
            host << "10." << (side + 1) << "." << (i + 1) << ".2";
            Ptr<SluiceStack> stack = AddHost(hosts.Get(i),
                                             link.Get(0),
                                             Ipv4Address(host.str().c_str()),
                                             cc,
                                             ooo,
                                             recovery,
                                             uint64_t(seed) * 1000003 + hosts.Get(i)->GetId());
            if (!stack)
            {
                return 2;
            }
            // The core has no default gateway: the far host is reached at the router's MAC
            // (on CSMA the router still ARPs for the host, and the core answers).
            std::ostringstream peer;
            peer << "10." << (2 - side) << "." << (i + 1) << ".2";
            stack->AddNeighbor(Ipv4Address(peer.str().c_str()),
                               Mac48Address::ConvertFrom(link.Get(1)->GetAddress()));
            (side == 0 ? senderStacks : receiverStacks).push_back(stack);
        }
    }
    Ipv4StaticRoutingHelper routing;
    for (uint32_t side = 0; side < 2; side++)
    {
        Ptr<Ipv4> ipv4 = routers.Get(side)->GetObject<Ipv4>();
        int32_t out = ipv4->GetInterfaceForDevice(core.Get(side));
        Ipv4Address nextHop = side == 0 ? Ipv4Address("10.0.0.2") : Ipv4Address("10.0.0.1");
        Ipv4Address far = side == 0 ? Ipv4Address("10.2.0.0") : Ipv4Address("10.1.0.0");
        routing.GetStaticRouting(ipv4)->AddNetworkRouteTo(far, Ipv4Mask("255.255.0.0"), nextHop, out);
    }

    Time stop = Seconds(seconds);
    Ptr<UniformRandomVariable> jitter = CreateObject<UniformRandomVariable>();
    if (!sluice)
    {
        return RunNs3Tcp(senders, receivers, queues, flows, bytes, stop, jitter, cc, bandwidth, seed, csv);
    }
    std::vector<Ptr<SluiceBulkSource>> sources;
    std::vector<Ptr<SluiceBulkSink>> sinks;
    std::vector<Ptr<SluiceRpcClient>> clients;
    for (uint32_t i = 0; i < flows; i++)
    {
        Ptr<SluiceBulkSink> sink = CreateObject<SluiceBulkSink>();
        sink->SetAttribute("Port", UintegerValue(5001));
        sink->SetAttribute("Stream", UintegerValue(i));
        receivers.Get(i)->AddApplication(sink);
        sink->SetStartTime(Seconds(0));
        sinks.push_back(sink);

        Ptr<SluiceBulkSource> source = CreateObject<SluiceBulkSource>();
        source->SetAttribute("Remote", Ipv4AddressValue(receiverStacks[i]->GetAddress()));
        source->SetAttribute("Port", UintegerValue(5001));
        source->SetAttribute("Stream", UintegerValue(i));
        source->SetAttribute("Bytes", UintegerValue(bytes));
        senders.Get(i)->AddApplication(source);
        // Starts spread over the first 100 us, so the flows' SYNs do not collide exactly.
        source->SetStartTime(MicroSeconds(1 + jitter->GetValue(0, 100)));
        source->SetStopTime(stop);
        sources.push_back(source);

        if (i < rpc)
        {
            Ptr<SluiceRpcServer> server = CreateObject<SluiceRpcServer>();
            server->SetAttribute("Port", UintegerValue(7000));
            server->SetAttribute("Stream", UintegerValue(1000 + i));
            receivers.Get(i)->AddApplication(server);
            server->SetStartTime(Seconds(0));
            Ptr<SluiceRpcClient> client = CreateObject<SluiceRpcClient>();
            client->SetAttribute("Remote", Ipv4AddressValue(receiverStacks[i]->GetAddress()));
            client->SetAttribute("Port", UintegerValue(7000));
            client->SetAttribute("Stream", UintegerValue(1000 + i));
            senders.Get(i)->AddApplication(client);
            client->SetStartTime(MicroSeconds(1 + jitter->GetValue(0, 100)));
            client->SetStopTime(stop);
            clients.push_back(client);
        }
    }

    Simulator::Stop(stop);
    Simulator::Run();

    uint32_t completed = 0;
    uint32_t verified = 0;
    uint64_t delivered = 0;
    std::vector<double> fctMs;
    std::vector<double> gbps;
    Time spanStart = stop;
    Time spanEnd = Seconds(0);
    for (uint32_t i = 0; i < flows; i++)
    {
        Ptr<SluiceBulkSink> sink = sinks[i];
        Ptr<SluiceBulkSource> source = sources[i];
        bool complete = sink->IsComplete() && (bytes == 0 || sink->GetBytesReceived() == bytes);
        // Byte-exact: every byte matched the pattern, and a finished flow has them all.
        bool exact = sink->IsVerified() && (!sink->IsComplete() || bytes == 0 ||
                                             sink->GetBytesReceived() == bytes);
        Time end = complete ? sink->GetCompletionTime() : stop;
        double elapsed = (end - source->GetStartTime()).GetSeconds();
        double rate = elapsed > 0 ? sink->GetBytesReceived() * 8 / elapsed / 1e9 : 0;
        completed += complete;
        verified += exact;
        delivered += sink->GetBytesReceived();
        gbps.push_back(rate);
        spanStart = std::min(spanStart, source->GetStartTime());
        spanEnd = std::max(spanEnd, end);
        if (complete)
        {
            fctMs.push_back(elapsed * 1e3);
        }
        std::printf("flow %u %s -> %s: %llu bytes delivered, %s, %s",
                    i,
                    (std::ostringstream() << senderStacks[i]->GetAddress()).str().c_str(),
                    (std::ostringstream() << receiverStacks[i]->GetAddress()).str().c_str(),
                    static_cast<unsigned long long>(sink->GetBytesReceived()),
                    exact ? "verified" : "NOT verified",
                    complete ? "completed" : "not completed");
        if (complete)
        {
            std::printf(" in %.3f ms", elapsed * 1e3);
        }
        if (!sink->IsVerified())
        {
            std::printf(" (first wrong byte at offset %llu)",
                        static_cast<unsigned long long>(sink->GetFirstMismatch()));
        }
        if (source->GetError() != 0)
        {
            std::printf(" (source: %s)", sluice_strerror(source->GetError()));
        }
        std::printf(", %.3f Gbit/s\n", rate);
    }
    std::vector<double> rpcUs;
    bool rpcVerified = true;
    for (uint32_t i = 0; i < clients.size(); i++)
    {
        std::vector<double> mine;
        for (Time t : clients[i]->GetLatencies())
        {
            mine.push_back(t.GetSeconds() * 1e6);
        }
        rpcUs.insert(rpcUs.end(), mine.begin(), mine.end());
        rpcVerified = rpcVerified && clients[i]->IsVerified();
        std::string error;
        if (clients[i]->GetError() != 0)
        {
            error = std::string(" (") + sluice_strerror(clients[i]->GetError()) + ")";
        }
        std::printf("rpc %u: %zu requests, %s, p50 %.1f us, p99 %.1f us%s\n",
                    i,
                    mine.size(),
                    clients[i]->IsVerified() ? "verified" : "NOT verified",
                    Quantile(mine, 0.5),
                    Quantile(mine, 0.99),
                    error.c_str());
    }
    uint64_t rtos = 0;
    uint64_t retxBytes = 0;
    uint64_t txDropped = 0;
    for (auto& s : senderStacks)
    {
        sluice_counters c = s->GetCounters();
        rtos += c.timeouts;
        retxBytes += c.retransmitted_bytes;
        txDropped += s->GetTxDropped() + s->GetRxDropped();
    }
    for (auto& s : receiverStacks)
    {
        sluice_counters c = s->GetCounters();
        rtos += c.timeouts;
        retxBytes += c.retransmitted_bytes;
        txDropped += s->GetTxDropped() + s->GetRxDropped();
    }
    uint64_t drops = 0;
    uint64_t marks = 0;
    for (uint32_t i = 0; i < queues.GetN(); i++)
    {
        const QueueDisc::Stats& st = queues.Get(i)->GetStats();
        drops += st.nTotalDroppedPackets;
        marks += st.nTotalMarkedPackets;
    }
    // Aggregate goodput over the span from the first flow's start to the last byte.
    double aggregate = spanEnd > spanStart
                           ? static_cast<double>(delivered) * 8 / (spanEnd - spanStart).GetSeconds() / 1e9
                           : 0;
    std::printf("summary: %u flows, %u completed, %u verified, %llu bytes delivered, "
                "%.3f Gbit/s aggregate, Jain %.3f, fct p50 %.3f ms p99 %.3f ms, "
                "rpc %zu ops p50 %.1f us p99 %.1f us%s, %llu bottleneck drops, %llu ECN marks, "
                "%llu RTOs, %llu bytes retransmitted, %llu frames dropped at the hosts' devices (%s, %s, seed %u)\n",
                flows,
                completed,
                verified,
                static_cast<unsigned long long>(delivered),
                aggregate,
                Jain(gbps),
                Quantile(fctMs, 0.5),
                Quantile(fctMs, 0.99),
                rpcUs.size(),
                Quantile(rpcUs, 0.5),
                Quantile(rpcUs, 0.99),
                rpcVerified ? "" : " NOT verified",
                static_cast<unsigned long long>(drops),
                static_cast<unsigned long long>(marks),
                static_cast<unsigned long long>(rtos),
                static_cast<unsigned long long>(retxBytes),
                static_cast<unsigned long long>(txDropped),
                cc.c_str(),
                bandwidth.c_str(),
                seed);
    if (!csv.empty())
    {
        std::ofstream out(csv);
        out << "senders,policy,Gbit/s,Jain,fct p50 ms,fct p99 ms,rpc p50 us,rpc p99 us,rpc ops,"
               "tail drops,ECN marks,RTOs,retx MB,completed,verified\n";
        out << flows << "," << cc << "," << aggregate << "," << Jain(gbps) << ","
            << Quantile(fctMs, 0.5) << "," << Quantile(fctMs, 0.99) << ","
            << Quantile(rpcUs, 0.5) << "," << Quantile(rpcUs, 0.99) << "," << rpcUs.size() << ","
            << drops << "," << marks << "," << rtos << "," << retxBytes / 1e6 << "," << completed
            << "," << verified << "\n";
        if (!out)
        {
            std::cerr << "dumbbell: cannot write " << csv << std::endl;
            Simulator::Destroy();
            return 2;
        }
    }
    Simulator::Destroy();
    bool ok = verified == flows && (bytes == 0 || completed == flows) && rpcVerified;
    return ok ? 0 : 1;
}
