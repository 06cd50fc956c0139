// SluiceStack: the driving loop of docs/ffi.md on ns-3's clock and devices.
#include "sluice-stack.h"

#include "ns3/boolean.h"
#include "ns3/log.h"
#include "ns3/simulator.h"
#include "ns3/string.h"
#include "ns3/uinteger.h"

#include <algorithm>
#include <cstring>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("SluiceStack");
NS_OBJECT_ENSURE_REGISTERED(SluiceStack);

namespace
{

constexpr size_t kEthernetHeader = 14;
constexpr uint16_t kEtherTypeIpv4 = 0x0800;

/// The core's defaults, so the attributes' defaults are the core's own.
sluice_config
Defaults()
{
    sluice_config c;
    sluice_config_default(&c);
    return c;
}

} // namespace

TypeId
SluiceStack::GetTypeId()
{
    static const sluice_config d = Defaults();
    static TypeId tid =
        TypeId("ns3::SluiceStack")
            .SetParent<Object>()
            .SetGroupName("Sluice")
            .AddConstructor<SluiceStack>()
            .AddAttribute("CongestionControl",
                          "Congestion control of new connections (dctcp, timely, newreno, cubic, bbr)",
                          StringValue("dctcp"),
                          MakeStringAccessor(&SluiceStack::m_congestionControl),
                          MakeStringChecker())
            .AddAttribute("Recovery",
                          "Loss recovery: sack (RFC 6675) or gobackn",
                          StringValue("sack"),
                          MakeStringAccessor(&SluiceStack::m_recovery),
                          MakeStringChecker())
            .AddAttribute("Sack",
                          "Offer and accept SACK-permitted (RFC 2018)",
                          BooleanValue(d.sack != 0),
                          MakeBooleanAccessor(&SluiceStack::m_sack),
                          MakeBooleanChecker())
            .AddAttribute("Ecn",
                          "Negotiate ECN (RFC 3168) when the congestion control wants it",
                          BooleanValue(d.ecn != 0),
                          MakeBooleanAccessor(&SluiceStack::m_ecn),
                          MakeBooleanChecker())
            .AddAttribute("Timestamps",
                          "Offer and accept TCP timestamps (RFC 7323)",
                          BooleanValue(d.timestamps != 0),
                          MakeBooleanAccessor(&SluiceStack::m_timestamps),
                          MakeBooleanChecker())
            .AddAttribute("RackTlp",
                          "RACK-TLP loss detection (RFC 8985) beside DupThresh",
                          BooleanValue(d.rack_tlp != 0),
                          MakeBooleanAccessor(&SluiceStack::m_rackTlp),
                          MakeBooleanChecker())
            .AddAttribute("Nagle",
                          "Nagle's algorithm on new connections (false: TCP_NODELAY, as "
                          "ns-3's TcpSocket::TcpNoDelay default)",
                          BooleanValue(d.nagle != 0),
                          MakeBooleanAccessor(&SluiceStack::m_nagle),
                          MakeBooleanChecker())
            .AddAttribute("VerifyChecksums",
                          "Verify IPv4 and TCP checksums of received frames (ns-3 routers "
                          "need GlobalValue ChecksumEnabled=true to emit valid ones)",
                          BooleanValue(d.verify_checksums != 0),
                          MakeBooleanAccessor(&SluiceStack::m_verifyChecksums),
                          MakeBooleanChecker())
            .AddAttribute("OooIntervals",
                          "Out-of-order intervals tracked per connection (0..64)",
                          UintegerValue(d.ooo_intervals),
                          MakeUintegerAccessor(&SluiceStack::m_oooIntervals),
                          MakeUintegerChecker<uint32_t>(0, 64))
            .AddAttribute("SackScoreboard",
                          "SACKed ranges the sender tracks per connection (1..64)",
                          UintegerValue(d.sack_scoreboard),
                          MakeUintegerAccessor(&SluiceStack::m_sackScoreboard),
                          MakeUintegerChecker<uint32_t>(1, 64))
            .AddAttribute("MaxConnections",
                          "Slots in the connection table",
                          UintegerValue(d.max_connections),
                          MakeUintegerAccessor(&SluiceStack::m_maxConnections),
                          MakeUintegerChecker<uint32_t>(1, 16777216))
            .AddAttribute("NeighborCache",
                          "Neighbor (ARP) cache entries, static neighbors included",
                          UintegerValue(d.neighbor_cache),
                          MakeUintegerAccessor(&SluiceStack::m_neighborCache),
                          MakeUintegerChecker<uint32_t>(1, 1u << 20))
            .AddAttribute("RxBuffer",
                          "Receive buffer per connection, bytes (the most it grows to)",
                          UintegerValue(d.rx_buffer),
                          MakeUintegerAccessor(&SluiceStack::m_rxBuffer),
                          MakeUintegerChecker<uint64_t>())
            .AddAttribute("TxBuffer",
                          "Send buffer per connection, bytes (the most it grows to)",
                          UintegerValue(d.tx_buffer),
                          MakeUintegerAccessor(&SluiceStack::m_txBuffer),
                          MakeUintegerChecker<uint64_t>())
            .AddAttribute("DelayedAckSegments",
                          "Acknowledge every this many segments (0: every segment)",
                          UintegerValue(d.delayed_ack_segments),
                          MakeUintegerAccessor(&SluiceStack::m_delayedAckSegments),
                          MakeUintegerChecker<uint32_t>(0, 255))
            .AddAttribute("RtoMin",
                          "Lower bound on the retransmission timeout",
                          TimeValue(NanoSeconds(d.rto_min_ns)),
                          MakeTimeAccessor(&SluiceStack::m_rtoMin),
                          MakeTimeChecker())
            .AddAttribute("Seed",
                          "Seed of the core's randomness (ISNs, ports, timestamps)",
                          UintegerValue(d.seed),
                          MakeUintegerAccessor(&SluiceStack::m_seed),
                          MakeUintegerChecker<uint64_t>());
    return tid;
}

SluiceStack::SluiceStack() = default;

SluiceStack::~SluiceStack()
{
    sluice_stack_free(m_stack);
}

void
SluiceStack::DoDispose()
{
    m_timer.Cancel();
    m_conns.clear();
    m_listeners.clear();
    sluice_stack_free(m_stack);
    m_stack = nullptr;
    m_device = nullptr;
    Object::DoDispose();
}

uint64_t
SluiceStack::NowNs()
{
    return static_cast<uint64_t>(Simulator::Now().GetNanoSeconds());
}

bool
SluiceStack::Install(Ptr<Node> node, Ptr<NetDevice> device, Ipv4Address address, std::string* error)
{
    sluice_config c;
    sluice_config_default(&c);
    Mac48Address::ConvertFrom(device->GetAddress()).CopyTo(c.mac);
    c.mtu = static_cast<uint16_t>(std::min<uint32_t>(device->GetMtu(), 9216));
    c.ip = address.Get();
    c.seed = m_seed;
    int32_t rc = sluice_config_set_congestion_control(&c, m_congestionControl.c_str());
    if (rc != SLUICE_ERROR_OK)
    {
        *error = "unknown congestion control '" + m_congestionControl + "'";
        return false;
    }
    if (m_recovery == "sack")
    {
        c.recovery = SLUICE_RECOVERY_SACK;
    }
    else if (m_recovery == "gobackn" || m_recovery == "go-back-n")
    {
        c.recovery = SLUICE_RECOVERY_GO_BACK_N;
    }
    else
    {
        *error = "unknown recovery '" + m_recovery + "' (sack or gobackn)";
        return false;
    }
    c.sack = m_sack;
    c.ecn = m_ecn;
    c.timestamps = m_timestamps;
    c.nagle = m_nagle;
    c.rack_tlp = m_rackTlp;
    c.verify_checksums = m_verifyChecksums;
    c.ooo_intervals = m_oooIntervals;
    c.sack_scoreboard = m_sackScoreboard;
    c.max_connections = m_maxConnections;
    c.neighbor_cache = m_neighborCache;
    c.rx_buffer = m_rxBuffer;
    c.rx_buffer_initial = std::min(c.rx_buffer_initial, m_rxBuffer);
    c.rx_memory = std::max(c.rx_memory, m_rxBuffer);
    c.tx_buffer = m_txBuffer;
    c.tx_buffer_initial = std::min(c.tx_buffer_initial, m_txBuffer);
    c.tx_memory = std::max(c.tx_memory, m_txBuffer);
    c.delayed_ack_segments = static_cast<uint8_t>(m_delayedAckSegments);
    c.rto_min_ns = static_cast<uint64_t>(m_rtoMin.GetNanoSeconds());
    char reason[256];
    if (sluice_config_check(&c, reason, sizeof reason) != SLUICE_ERROR_OK)
    {
        *error = reason;
        return false;
    }
    sluice_stack* stack = nullptr;
    rc = sluice_stack_new(&c, &stack);
    if (rc != SLUICE_ERROR_OK)
    {
        *error = sluice_strerror(rc);
        return false;
    }
    sluice_stack_free(m_stack);
    m_stack = stack;
    m_device = device;
    m_address = address;
    m_frame.assign(static_cast<size_t>(sluice_stack_max_frame_len(m_stack)), 0);
    // Promiscuous, so the handler sees the frame's real destination (broadcast ARP
    // requests keep theirs); frames for other hosts are dropped in Receive.
    node->RegisterProtocolHandler(MakeCallback(&SluiceStack::Receive, this), 0, device, true);
    return true;
}

bool
SluiceStack::AddNeighbor(Ipv4Address ip, Mac48Address mac)
{
    uint8_t bytes[6];
    mac.CopyTo(bytes);
    return sluice_stack_add_neighbor(m_stack, ip.Get(), bytes) == SLUICE_ERROR_OK;
}

void
SluiceStack::Receive(Ptr<NetDevice> device,
                     Ptr<const Packet> packet,
                     uint16_t protocol,
                     const Address& from,
                     const Address& to,
                     NetDevice::PacketType type)
{
    if (m_stack == nullptr || type == NetDevice::PACKET_OTHERHOST)
    {
        return;
    }
    // Devices whose addresses are not MACs (no Ethernet header can be rebuilt) are not
    // supported: their frames are dropped and counted, not asserted on.
    if (!Mac48Address::IsMatchingType(from) || !Mac48Address::IsMatchingType(to))
    {
        m_rxDropped++;
        return;
    }
    // Devices hand up the payload without their link header (CSMA strips Ethernet,
    // point-to-point strips PPP); the core takes Ethernet frames, so rebuild one from what
    // the device says. Longer than the MTU would not fit the core's frame: dropped there.
    uint32_t size = packet->GetSize();
    std::vector<uint8_t>& f = m_rxFrame;
    f.resize(kEthernetHeader + size);
    Mac48Address::ConvertFrom(to).CopyTo(f.data());
    Mac48Address::ConvertFrom(from).CopyTo(f.data() + 6);
    f[12] = static_cast<uint8_t>(protocol >> 8);
    f[13] = static_cast<uint8_t>(protocol & 0xff);
    packet->CopyData(f.data() + kEthernetHeader, size);
    sluice_stack_handle_frame(m_stack, NowNs(), f.data(), f.size());
    Drive();
}

void
SluiceStack::Transmit(const uint8_t* frame, size_t len)
{
    if (len < kEthernetHeader)
    {
        m_txDropped++;
        return;
    }
    uint16_t etherType = static_cast<uint16_t>(frame[12] << 8 | frame[13]);
    // A device without ARP (point-to-point: PPP carries IPv4 only) cannot send the core's
    // ARP; its neighbors must be static (AddNeighbor).
    if (!m_device->NeedsArp() && etherType != kEtherTypeIpv4)
    {
        m_txDropped++;
        return;
    }
    Mac48Address dst;
    dst.CopyFrom(frame);
    Ptr<Packet> p = Create<Packet>(frame + kEthernetHeader, static_cast<uint32_t>(len - kEthernetHeader));
    if (!m_device->Send(p, dst, etherType))
    {
        m_txDropped++;
    }
}

void
SluiceStack::Drive()
{
    if (m_stack == nullptr)
    {
        return;
    }
    // Applications call back into the stack from their callbacks; those calls only ask
    // for another round, so the loop never recurses.
    if (m_driving)
    {
        m_again = true;
        return;
    }
    m_driving = true;
    do
    {
        m_again = false;
        uint64_t now = NowNs();
        int64_t n;
        while ((n = sluice_stack_poll_transmit(m_stack, now, m_frame.data(), m_frame.size())) > 0)
        {
            Transmit(m_frame.data(), static_cast<size_t>(n));
        }
        sluice_event ev;
        while (sluice_poll_event(m_stack, &ev) == 1)
        {
            m_again = true;
            if (ev.kind == SLUICE_EVENT_KIND_CONN)
            {
                auto it = m_conns.find(ev.conn);
                if (it != m_conns.end())
                {
                    // A copy: the callback may close the connection and erase its entry.
                    ConnCallback cb = it->second;
                    cb(ev.conn, ev.readiness);
                }
            }
            else if (ev.kind == SLUICE_EVENT_KIND_ACCEPTABLE)
            {
                auto it = m_listeners.find(ev.listener);
                if (it != m_listeners.end())
                {
                    AcceptCallback cb = it->second;
                    cb(ev.listener);
                }
            }
        }
    } while (m_again);
    m_driving = false;
    ArmTimer();
}

void
SluiceStack::ArmTimer()
{
    uint64_t deadline = UINT64_MAX;
    if (sluice_stack_poll_timeout(m_stack, &deadline) != 1)
    {
        m_timer.Cancel();
        m_deadline = UINT64_MAX;
        return;
    }
    if (m_timer.IsRunning() && deadline == m_deadline)
    {
        return;
    }
    m_timer.Cancel();
    m_deadline = deadline;
    uint64_t now = NowNs();
    Time delay = deadline > now ? NanoSeconds(static_cast<int64_t>(deadline - now)) : Time(0);
    m_timer = Simulator::Schedule(delay, &SluiceStack::Timeout, this);
}

void
SluiceStack::Timeout()
{
    m_deadline = UINT64_MAX;
    sluice_stack_handle_timeout(m_stack, NowNs());
    Drive();
}

int32_t
SluiceStack::Listen(uint16_t port, AcceptCallback cb, sluice_listener* listener)
{
    int32_t rc = sluice_listen(m_stack, port, 1024, listener);
    if (rc == SLUICE_ERROR_OK)
    {
        m_listeners[*listener] = cb;
    }
    Drive();
    return rc;
}

int32_t
SluiceStack::Unlisten(sluice_listener listener)
{
    m_listeners.erase(listener);
    int32_t rc = sluice_unlisten(m_stack, listener);
    Drive();
    return rc;
}

int32_t
SluiceStack::Accept(sluice_listener listener, ConnCallback cb, sluice_conn* conn)
{
    int32_t rc = sluice_accept(m_stack, listener, conn);
    if (rc == SLUICE_ERROR_OK)
    {
        m_conns[*conn] = cb;
    }
    Drive();
    return rc;
}

int32_t
SluiceStack::Connect(Ipv4Address ip, uint16_t port, ConnCallback cb, sluice_conn* conn)
{
    int32_t rc = sluice_connect(m_stack, NowNs(), ip.Get(), port, conn);
    if (rc == SLUICE_ERROR_OK)
    {
        m_conns[*conn] = cb;
    }
    Drive();
    return rc;
}

int64_t
SluiceStack::Send(sluice_conn conn, const uint8_t* data, size_t len)
{
    int64_t n = sluice_send(m_stack, conn, data, len);
    Drive();
    return n;
}

int64_t
SluiceStack::Recv(sluice_conn conn, uint8_t* buf, size_t len)
{
    int64_t n = sluice_recv(m_stack, conn, buf, len);
    // Reading opens the receive window: the window update goes out now.
    Drive();
    return n;
}

int32_t
SluiceStack::Shutdown(sluice_conn conn)
{
    int32_t rc = sluice_shutdown(m_stack, conn);
    Drive();
    return rc;
}

int32_t
SluiceStack::Close(sluice_conn conn)
{
    m_conns.erase(conn);
    int32_t rc = sluice_close(m_stack, conn);
    Drive();
    return rc;
}

int32_t
SluiceStack::GetConnInfo(sluice_conn conn, sluice_conn_info* info)
{
    return sluice_conn_get_info(m_stack, conn, info);
}

sluice_counters
SluiceStack::GetCounters()
{
    sluice_counters c;
    std::memset(&c, 0, sizeof c);
    if (m_stack != nullptr)
    {
        sluice_stack_counters(m_stack, &c);
    }
    return c;
}

uint64_t
SluiceStack::GetTxDropped() const
{
    return m_txDropped;
}

uint64_t
SluiceStack::GetRxDropped() const
{
    return m_rxDropped;
}

Ipv4Address
SluiceStack::GetAddress() const
{
    return m_address;
}

} // namespace ns3
