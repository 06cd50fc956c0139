// Bulk transfer over a SluiceStack: a source writes a known pattern, a sink verifies it.
#ifndef SLUICE_NS3_SLUICE_BULK_H
#define SLUICE_NS3_SLUICE_BULK_H

#include "sluice-app.h"

#include "ns3/nstime.h"

#include <cstdint>
#include <vector>

namespace ns3
{

/// Connects to a sink and sends `Bytes` bytes of the pattern of stream `Stream`, then
/// closes (FIN after the data); with `Bytes` 0 it sends until the application stops.
class SluiceBulkSource : public SluiceConnectingApp
{
  public:
    /// The ns-3 type and its attributes.
    static TypeId GetTypeId();
    SluiceBulkSource();

    /// Bytes the connection took so far.
    uint64_t GetBytesSent() const;

  private:
    void Connected() override;
    void OnReady(uint32_t readiness) override;
    /// Writes as much of the pattern as the send buffer takes.
    void Fill();

    uint64_t m_bytes{0};
    uint64_t m_sent{0};
    std::vector<uint8_t> m_chunk;
};

/// Listens on `Port`, reads every accepted connection to its end and compares each byte
/// with the pattern of stream `Stream`.
class SluiceBulkSink : public SluiceListeningApp
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
    void Accepted(sluice_conn conn) override;
    /// Reads everything there is.
    void OnReady(sluice_conn conn, uint32_t readiness) override;

    uint64_t m_received{0};
    uint64_t m_mismatch{UINT64_MAX};
    bool m_complete{false};
    Time m_completed;
    std::vector<uint8_t> m_buf;
};

} // namespace ns3

#endif // SLUICE_NS3_SLUICE_BULK_H
