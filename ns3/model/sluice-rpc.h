// Closed-loop RPC over a SluiceStack: one request outstanding at a time per client.
#ifndef SLUICE_NS3_SLUICE_RPC_H
#define SLUICE_NS3_SLUICE_RPC_H

#include "sluice-app.h"

#include "ns3/nstime.h"

#include <cstdint>
#include <map>
#include <vector>

namespace ns3
{

/// Answers every `RequestBytes` bytes read on a connection with `ResponseBytes` bytes of
/// the pattern of stream `Stream`.
class SluiceRpcServer : public SluiceListeningApp
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

    void StopApplication() override;
    void Accepted(sluice_conn conn) override;
    void OnReady(sluice_conn conn, uint32_t readiness) override;
    /// Writes what the send buffer takes of the current response; false when blocked.
    bool Respond(sluice_conn conn, Exchange& ex);

    uint32_t m_requestBytes{0};
    uint32_t m_responseBytes{0};
    uint64_t m_responses{0};
    std::map<sluice_conn, Exchange> m_exchanges;
    std::vector<uint8_t> m_buf;
};

/// Sends a request of `RequestBytes`, waits for the whole `ResponseBytes` response
/// (checked against the pattern), records the latency, and sends the next.
class SluiceRpcClient : public SluiceConnectingApp
{
  public:
    /// The ns-3 type and its attributes.
    static TypeId GetTypeId();
    SluiceRpcClient();

    /// Latency of every completed request.
    const std::vector<Time>& GetLatencies() const;
    /// False once a response byte differed from the pattern.
    bool IsVerified() const;

  private:
    void Connected() override;
    /// Sends the rest of the request, reads the response.
    void OnReady(uint32_t readiness) override;
    /// Starts the next request.
    void Issue();
    /// Writes what the send buffer takes of the request.
    void SendRequest();

    uint32_t m_requestBytes{0};
    uint32_t m_responseBytes{0};
    uint64_t m_maxRequests{0};
    uint64_t m_requestLeft{0};
    uint64_t m_responseRead{0};
    Time m_issued;
    bool m_verified{true};
    std::vector<Time> m_latencies;
    std::vector<uint8_t> m_buf;
};

} // namespace ns3

#endif // SLUICE_NS3_SLUICE_RPC_H
