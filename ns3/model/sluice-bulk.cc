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
                            .SetParent<Application>()
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

Time
SluiceBulkSource::GetStartTime() const
{
    return m_started;
}

int64_t
SluiceBulkSource::GetError() const
{
    return m_error;
}

void
SluiceBulkSource::StartApplication()
{
    m_stack = GetNode()->GetObject<SluiceStack>();
    NS_ABORT_MSG_IF(!m_stack, "SluiceBulkSource needs a SluiceStack on its node");
    m_started = Simulator::Now();
    int32_t rc = m_stack->Connect(m_remote,
                                  m_port,
                                  MakeCallback(&SluiceBulkSource::Ready, this),
                                  &m_conn);
    if (rc != SLUICE_ERROR_OK)
    {
        m_error = rc;
        return;
    }
    m_open = true;
}

void
SluiceBulkSource::StopApplication()
{
    if (m_open)
    {
        m_open = false;
        m_stack->Close(m_conn);
    }
}

void
SluiceBulkSource::Ready(sluice_conn /* conn */, uint32_t readiness)
{
    if (readiness & SLUICE_READY_ERROR)
    {
        sluice_conn_info info;
        m_error = SLUICE_ERROR_NOT_CONNECTED;
        if (m_stack->GetConnInfo(m_conn, &info) == SLUICE_ERROR_OK && info.error != 0)
        {
            m_error = info.error;
        }
        m_open = false;
        m_stack->Close(m_conn);
        return;
    }
    if (readiness & (SLUICE_READY_CONNECTED | SLUICE_READY_WRITABLE))
    {
        Fill();
    }
}

void
SluiceBulkSource::Fill()
{
    while (m_open && (m_bytes == 0 || m_sent < m_bytes))
    {
        size_t want = kChunk;
        if (m_bytes != 0 && m_bytes - m_sent < want)
        {
            want = static_cast<size_t>(m_bytes - m_sent);
        }
        m_chunk.resize(want);
        for (size_t i = 0; i < want; i++)
        {
            m_chunk[i] = SluicePatternByte(m_streamId, m_sent + i);
        }
        int64_t n = m_stack->Send(m_conn, m_chunk.data(), want);
        if (n == SLUICE_ERROR_WOULD_BLOCK)
        {
            return; // SLUICE_READY_WRITABLE follows
        }
        if (n < 0)
        {
            m_error = n;
            return;
        }
        m_sent += static_cast<uint64_t>(n);
    }
    if (m_open && m_bytes != 0 && m_sent == m_bytes)
    {
        // The FIN follows the queued data; the core finishes the teardown.
        m_open = false;
        m_stack->Close(m_conn);
    }
}

TypeId
SluiceBulkSink::GetTypeId()
{
    static TypeId tid = TypeId("ns3::SluiceBulkSink")
                            .SetParent<Application>()
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
SluiceBulkSink::StartApplication()
{
    m_stack = GetNode()->GetObject<SluiceStack>();
    NS_ABORT_MSG_IF(!m_stack, "SluiceBulkSink needs a SluiceStack on its node");
    m_buf.resize(kChunk);
    int32_t rc = m_stack->Listen(m_port, MakeCallback(&SluiceBulkSink::Acceptable, this), &m_listener);
    NS_ABORT_MSG_IF(rc != SLUICE_ERROR_OK, "SluiceBulkSink: listen: " << sluice_strerror(rc));
}

void
SluiceBulkSink::StopApplication()
{
}

void
SluiceBulkSink::Acceptable(sluice_listener listener)
{
    sluice_conn conn;
    while (m_stack->Accept(listener, MakeCallback(&SluiceBulkSink::Ready, this), &conn) ==
           SLUICE_ERROR_OK)
    {
        // Data may have arrived before the accept: read it now, not at the next event.
        Ready(conn, SLUICE_READY_READABLE);
    }
}

void
SluiceBulkSink::Ready(sluice_conn conn, uint32_t readiness)
{
    if (!(readiness & (SLUICE_READY_READABLE | SLUICE_READY_ERROR)))
    {
        return;
    }
    for (;;)
    {
        int64_t n = m_stack->Recv(conn, m_buf.data(), m_buf.size());
        if (n > 0)
        {
            for (int64_t i = 0; i < n; i++)
            {
                if (m_buf[i] != SluicePatternByte(m_streamId, m_received + i) &&
                    m_mismatch == UINT64_MAX)
                {
                    m_mismatch = m_received + static_cast<uint64_t>(i);
                }
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
