// SluiceStack: one Sluice sans-IO TCP core (crates/ffi, sluice.h) as a node's transport
// stack in ns-3, in place of ns-3's InternetStackHelper. See docs/ns3.md.
#ifndef SLUICE_NS3_SLUICE_STACK_H
#define SLUICE_NS3_SLUICE_STACK_H

#include "sluice.h"

#include "ns3/callback.h"
#include "ns3/event-id.h"
#include "ns3/ipv4-address.h"
#include "ns3/mac48-address.h"
#include "ns3/net-device.h"
#include "ns3/node.h"
#include "ns3/nstime.h"
#include "ns3/object.h"
#include "ns3/packet.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ns3
{

/// Bytes of the known pattern applications send and verify: offset `offset` of stream
/// `stream`. 251 is prime, so a chunk shifted by a buffer or segment size reads wrong.
inline uint8_t
SluicePatternByte(uint32_t stream, uint64_t offset)
{
    return static_cast<uint8_t>((offset % 251) ^ (offset >> 16) ^ (stream * 29u));
}

/// One node's Sluice TCP core, driven in simulated time: frames from one NetDevice in,
/// frames out through NetDevice::Send, one Simulator event for the core's next deadline.
class SluiceStack : public Object
{
  public:
    /// A connection's readiness changed (`SLUICE_READY_*` bits).
    using ConnCallback = Callback<void, sluice_conn, uint32_t>;
    /// A listener has connections to accept.
    using AcceptCallback = Callback<void, sluice_listener>;

    /// The ns-3 type, with the attributes mapped onto sluice_config.
    static TypeId GetTypeId();
    SluiceStack();
    ~SluiceStack() override;

    /// Creates the core for `device` at `address` (the device's MAC, its MTU) and takes
    /// every frame the device receives. False, with the reason in `*error`, when the
    /// attributes make an invalid sluice_config.
    bool Install(Ptr<Node> node, Ptr<NetDevice> device, Ipv4Address address, std::string* error);
    /// Reaches `ip` at `mac` without ARP (needed on devices that cannot carry ARP, such as
    /// point-to-point, and for addresses behind a router: give the router's MAC).
    bool AddNeighbor(Ipv4Address ip, Mac48Address mac);

    /// Listens on `port`; `cb` runs when connections wait in the accept queue.
    int32_t Listen(uint16_t port, AcceptCallback cb, sluice_listener* listener);
    /// Stops listening (connections not yet accepted are reset).
    int32_t Unlisten(sluice_listener listener);
    /// Takes one connection from the accept queue; `cb` gets its readiness changes.
    int32_t Accept(sluice_listener listener, ConnCallback cb, sluice_conn* conn);
    /// Opens a connection to `ip:port`; `cb` gets its readiness changes.
    int32_t Connect(Ipv4Address ip, uint16_t port, ConnCallback cb, sluice_conn* conn);
    /// sluice_send: bytes taken, or a negative sluice_error.
    int64_t Send(sluice_conn conn, const uint8_t* data, size_t len);
    /// sluice_recv: bytes read, 0 at end of stream, or a negative sluice_error.
    int64_t Recv(sluice_conn conn, uint8_t* buf, size_t len);
    /// Half-closes the sending side (FIN after queued data).
    int32_t Shutdown(sluice_conn conn);
    /// Closes and releases the handle; the core finishes the teardown.
    int32_t Close(sluice_conn conn);
    /// A snapshot of one connection.
    int32_t GetConnInfo(sluice_conn conn, sluice_conn_info* info);

    /// The core's main counters (zeros before Install).
    sluice_counters GetCounters();
    /// Frames the core emitted that the device refused or cannot carry.
    uint64_t GetTxDropped() const;
    /// Frames from the device dropped before the core (addresses that are not MACs).
    uint64_t GetRxDropped() const;
    /// The address given to Install.
    Ipv4Address GetAddress() const;

  protected:
    void DoDispose() override;

  private:
    /// Device receive path (Node protocol handler, promiscuous): rebuilds the Ethernet
    /// header the device stripped and hands the frame to the core.
    void Receive(Ptr<NetDevice> device,
                 Ptr<const Packet> packet,
                 uint16_t protocol,
                 const Address& from,
                 const Address& to,
                 NetDevice::PacketType type);
    /// After any input: frames out, events to applications, then the timer rearmed.
    void Drive();
    /// Sends one Ethernet frame from the core through the device.
    void Transmit(const uint8_t* frame, size_t len);
    /// Keeps one Simulator event at the core's deadline.
    void ArmTimer();
    /// The core's deadline is due.
    void Timeout();
    /// Simulator::Now in nanoseconds.
    static uint64_t NowNs();

    sluice_stack* m_stack{nullptr};
    Ptr<NetDevice> m_device;
    Ipv4Address m_address;
    std::vector<uint8_t> m_frame;
    std::vector<uint8_t> m_rxFrame;
    EventId m_timer;
    uint64_t m_deadline{UINT64_MAX};
    bool m_driving{false};
    bool m_again{false};
    uint64_t m_txDropped{0};
    uint64_t m_rxDropped{0};
    std::map<sluice_conn, ConnCallback> m_conns;
    std::map<sluice_listener, AcceptCallback> m_listeners;

    // Attributes (sluice_config fields).
    std::string m_congestionControl;
    std::string m_recovery;
    bool m_sack;
    bool m_ecn;
    bool m_timestamps;
    bool m_nagle;
    bool m_rackTlp;
    bool m_verifyChecksums;
    uint32_t m_oooIntervals;
    uint32_t m_sackScoreboard;
    uint32_t m_maxConnections;
    uint32_t m_neighborCache;
    uint64_t m_rxBuffer;
    uint64_t m_txBuffer;
    uint32_t m_delayedAckSegments;
    Time m_rtoMin;
    uint64_t m_seed;
};

} // namespace ns3

#endif // SLUICE_NS3_SLUICE_STACK_H
