// Bulk source and sink over a SluiceStack.
#include "sluice-bulk.h"

#include "ns3/log.h"
#include "ns3/simulator.h"
#include "ns3/uinteger.h"

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("SluiceBulk");
NS_OBJECT_ENSURE_REGISTERED(SluiceBulkSource);
NS_OBJECT_ENSURE_REGISTERED(SluiceBulkSink);

namespace
{
constexpr size_t kChunk = 64 * 1024;
} // namespace

TypeId
SluiceBulkSource::GetTypeId()
{
    static TypeId tid = TypeId("ns3::SluiceBulkSource")
                            .SetParent<SluiceConnectingApp>()
                            .SetGroupName("Sluice")
                            .AddConstructor<SluiceBulkSource>()
                            .AddAttribute("Remote",
                                          "The sink's address",
                                          Ipv4AddressValue(),
                                          MakeIpv4AddressAccessor(&SluiceBulkSource::m_remote),
                                          MakeIpv4AddressChecker())
                            .AddAttribute("Port",
                                          "The sink's port",
                                          UintegerValue(5001),
                                          MakeUintegerAccessor(&SluiceBulkSource::m_port),
                                          MakeUintegerChecker<uint16_t>(1))
                            .AddAttribute("Stream",
                                          "Which pattern to send (the sink checks the same)",
                                          UintegerValue(0),
                                          MakeUintegerAccessor(&SluiceBulkSource::m_streamId),
                                          MakeUintegerChecker<uint32_t>())
                            .AddAttribute("Bytes",
                                          "Bytes to send, then close (0: until stopped)",
                                          UintegerValue(1000000),
                                          MakeUintegerAccessor(&SluiceBulkSource::m_bytes),
                                          MakeUintegerChecker<uint64_t>());
    return tid;
}

SluiceBulkSource::SluiceBulkSource() = default;

uint64_t
SluiceBulkSource::GetBytesSent() const
{
    return m_sent;
}

void
SluiceBulkSource::Connected()
{
    Fill();
}

void
SluiceBulkSource::OnReady(uint32_t readiness)
{
    if (readiness & SLUICE_READY_WRITABLE)
    {
        Fill();
    }
}

void
SluiceBulkSource::Fill()
{
    if (!m_open)
    {
        return;
    }
    m_chunk.resize(kChunk);
    uint64_t left = m_bytes == 0 ? UINT64_MAX - m_sent : m_bytes - m_sent;
    int64_t error = 0;
    m_sent += SluiceSendPattern(*m_stack, m_conn, m_streamId, m_sent, left, m_chunk, &error);
    if (error != 0)
    {
        m_error = error;
        return;
    }
    if (m_bytes != 0 && m_sent == m_bytes)
    {
        // The FIN follows the queued data; the core finishes the teardown.
        CloseConnection();
    }
}

TypeId
SluiceBulkSink::GetTypeId()
{
    static TypeId tid = TypeId("ns3::SluiceBulkSink")
                            .SetParent<SluiceListeningApp>()
                            .SetGroupName("Sluice")
                            .AddConstructor<SluiceBulkSink>()
                            .AddAttribute("Port",
                                          "The port to listen on",
                                          UintegerValue(5001),
                                          MakeUintegerAccessor(&SluiceBulkSink::m_port),
                                          MakeUintegerChecker<uint16_t>(1))
                            .AddAttribute("Stream",
                                          "Which pattern to expect",
                                          UintegerValue(0),
                                          MakeUintegerAccessor(&SluiceBulkSink::m_streamId),
                                          MakeUintegerChecker<uint32_t>());
    return tid;
}

SluiceBulkSink::SluiceBulkSink() = default;

uint64_t
SluiceBulkSink::GetBytesReceived() const
{
    return m_received;
}

bool
SluiceBulkSink::IsVerified() const
{
    return m_mismatch == UINT64_MAX;
}

uint64_t
SluiceBulkSink::GetFirstMismatch() const
{
    return m_mismatch;
}

bool
SluiceBulkSink::IsComplete() const
{
    return m_complete;
}

Time
SluiceBulkSink::GetCompletionTime() const
{
    return m_completed;
}

void
SluiceBulkSink::Accepted(sluice_conn conn)
{
    // Data may have arrived before the accept: read it now, not at the next event.
    OnReady(conn, SLUICE_READY_READABLE);
}

void
SluiceBulkSink::OnReady(sluice_conn conn, uint32_t readiness)
{
    if (!(readiness & (SLUICE_READY_READABLE | SLUICE_READY_ERROR)))
    {
        return;
    }
    m_buf.resize(kChunk);
    for (;;)
    {
        int64_t n = m_stack->Recv(conn, m_buf.data(), m_buf.size());
        if (n > 0)
        {
            size_t bad = SluiceFirstMismatch(m_buf.data(), n, m_streamId, m_received);
            if (bad < static_cast<size_t>(n) && m_mismatch == UINT64_MAX)
            {
                m_mismatch = m_received + bad;
            }
            m_received += static_cast<uint64_t>(n);
            continue;
        }
        if (n == 0)
        {
            m_complete = true;
            m_completed = Simulator::Now();
            m_stack->Close(conn);
        }
        else if (n != SLUICE_ERROR_WOULD_BLOCK)
        {
            NS_LOG_WARN("bulk sink: recv: " << sluice_strerror(n));
            m_stack->Close(conn);
        }
        return;
    }
}

} // namespace ns3
