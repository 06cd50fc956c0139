// Closed-loop RPC over a SluiceStack: one request outstanding at a time per client.
#ifndef SLUICE_NS3_SLUICE_RPC_H
#define SLUICE_NS3_SLUICE_RPC_H

#include "sluice-stack.h"

#include "ns3/application.h"
#include "ns3/ipv4-address.h"
#include "ns3/nstime.h"

#include <cstdint>
#include <map>
#include <vector>

namespace ns3
{

/// Answers every `RequestBytes` bytes read on a connection with `ResponseBytes` bytes of
/// the pattern of stream `Stream`.
class SluiceRpcServer : public Application
{
  public:
    /// The ns-3 type and its attributes.
    static TypeId GetTypeId();
    SluiceRpcServer();

    /// Responses queued in full.
    uint64_t GetResponses() const;

  private:
    /// One connection's progress through its current request and response.
    struct Exchange
    {
        uint64_t requestRead{0};
        uint64_t responseLeft{0};
    };

    void StartApplication() override;
    void StopApplication() override;
    void Acceptable(sluice_listener listener);
    void Ready(sluice_conn conn, uint32_t readiness);
    /// Writes what the send buffer takes of the current response; false when blocked.
    bool Respond(sluice_conn conn, Exchange& ex);

    Ptr<SluiceStack> m_stack;
    uint16_t m_port{0};
    uint32_t m_streamId{0};
    uint32_t m_requestBytes{0};
    uint32_t m_responseBytes{0};
    sluice_listener m_listener{0};
    uint64_t m_responses{0};
    std::map<sluice_conn, Exchange> m_exchanges;
    std::vector<uint8_t> m_buf;
};

/// Sends a request of `RequestBytes`, waits for the whole `ResponseBytes` response
/// (checked against the pattern), records the latency, and sends the next.
class SluiceRpcClient : public Application
{
  public:
    /// The ns-3 type and its attributes.
    static TypeId GetTypeId();
    SluiceRpcClient();

    /// Latency of every completed request.
    const std::vector<Time>& GetLatencies() const;
    /// False once a response byte differed from the pattern.
    bool IsVerified() const;
    /// The last error the stack returned (0: none).
    int64_t GetError() const;

  private:
    void StartApplication() override;
    void StopApplication() override;
    void Ready(sluice_conn conn, uint32_t readiness);
    /// Starts the next request.
    void Issue();
    /// Writes what the send buffer takes of the request.
    void SendRequest();

    Ptr<SluiceStack> m_stack;
    Ipv4Address m_remote;
    uint16_t m_port{0};
    uint32_t m_streamId{0};
    uint32_t m_requestBytes{0};
    uint32_t m_responseBytes{0};
    uint64_t m_maxRequests{0};
    sluice_conn m_conn{0};
    bool m_open{false};
    bool m_connected{false};
    uint64_t m_requestLeft{0};
    uint64_t m_responseRead{0};
    Time m_issued;
    bool m_verified{true};
    int64_t m_error{0};
    std::vector<Time> m_latencies;
    std::vector<uint8_t> m_buf;
};

} // namespace ns3

#endif // SLUICE_NS3_SLUICE_RPC_H
