// Bulk transfer over a SluiceStack: a source writes a known pattern, a sink verifies it.
#ifndef SLUICE_NS3_SLUICE_BULK_H
#define SLUICE_NS3_SLUICE_BULK_H

#include "sluice-stack.h"

#include "ns3/application.h"
#include "ns3/ipv4-address.h"
#include "ns3/nstime.h"

#include <cstdint>
#include <vector>

namespace ns3
{

/// Connects to a sink and sends `Bytes` bytes of the pattern of stream `Stream`, then
/// closes (FIN after the data); with `Bytes` 0 it sends until the application stops.
class SluiceBulkSource : public Application
{
  public:
    /// The ns-3 type and its attributes.
    static TypeId GetTypeId();
    SluiceBulkSource();

    /// Bytes the connection took so far.
    uint64_t GetBytesSent() const;
    /// When the connection was opened.
    Time GetStartTime() const;
    /// The last error the stack returned (0: none).
    int64_t GetError() const;

  private:
    void StartApplication() override;
    void StopApplication() override;
    /// The connection's readiness changed.
    void Ready(sluice_conn conn, uint32_t readiness);
    /// Writes as much of the pattern as the send buffer takes.
    void Fill();

    Ptr<SluiceStack> m_stack;
    Ipv4Address m_remote;
    uint16_t m_port{0};
    uint32_t m_streamId{0};
    uint64_t m_bytes{0};
    uint64_t m_sent{0};
    sluice_conn m_conn{0};
    bool m_open{false};
    Time m_started;
    int64_t m_error{0};
    std::vector<uint8_t> m_chunk;
};

/// Listens on `Port`, reads every accepted connection to its end and compares each byte
/// with the pattern of stream `Stream`.
class SluiceBulkSink : public Application
{
  public:
    /// The ns-3 type and its attributes.
    static TypeId GetTypeId();
    SluiceBulkSink();

    /// Bytes received, over all connections.
    uint64_t GetBytesReceived() const;
    /// False once one byte differed from the pattern.
    bool IsVerified() const;
    /// Offset of the first byte that differed (UINT64_MAX: none).
    uint64_t GetFirstMismatch() const;
    /// True once a connection reached its end of stream.
    bool IsComplete() const;
    /// When the end of stream was read.
    Time GetCompletionTime() const;

  private:
    void StartApplication() override;
    void StopApplication() override;
    /// The listener has connections waiting.
    void Acceptable(sluice_listener listener);
    /// A connection's readiness changed: read everything there is.
    void Ready(sluice_conn conn, uint32_t readiness);

    Ptr<SluiceStack> m_stack;
    uint16_t m_port{0};
    uint32_t m_streamId{0};
    sluice_listener m_listener{0};
    uint64_t m_received{0};
    uint64_t m_mismatch{UINT64_MAX};
    bool m_complete{false};
    Time m_completed;
    std::vector<uint8_t> m_buf;
};

} // namespace ns3

#endif // SLUICE_NS3_SLUICE_BULK_H
