// The connecting and listening sides the bulk and RPC applications share.
#include "sluice-app.h"

#include "ns3/simulator.h"

#include <algorithm>

namespace ns3
{

NS_OBJECT_ENSURE_REGISTERED(SluiceConnectingApp);
NS_OBJECT_ENSURE_REGISTERED(SluiceListeningApp);

TypeId
SluiceConnectingApp::GetTypeId()
{
    static TypeId tid =
        TypeId("ns3::SluiceConnectingApp").SetParent<Application>().SetGroupName("Sluice");
    return tid;
}

Time
SluiceConnectingApp::GetStartTime() const
{
    return m_started;
}

int64_t
SluiceConnectingApp::GetError() const
{
    return m_error;
}

void
SluiceConnectingApp::StartApplication()
{
    m_stack = GetNode()->GetObject<SluiceStack>();
    NS_ABORT_MSG_IF(!m_stack,
                    GetInstanceTypeId().GetName() << " needs a SluiceStack on its node");
    m_started = Simulator::Now();
    int32_t rc =
        m_stack->Connect(m_remote, m_port, MakeCallback(&SluiceConnectingApp::Ready, this), &m_conn);
    if (rc != SLUICE_ERROR_OK)
    {
        m_error = rc;
        return;
    }
    m_open = true;
}

void
SluiceConnectingApp::StopApplication()
{
    CloseConnection();
}

void
SluiceConnectingApp::Fail(int64_t error)
{
    m_error = error;
    CloseConnection();
}

void
SluiceConnectingApp::CloseConnection()
{
    if (m_open)
    {
        m_open = false;
        m_stack->Close(m_conn);
    }
}

void
SluiceConnectingApp::Ready(sluice_conn /* conn */, uint32_t readiness)
{
    if (!m_open)
    {
        return;
    }
    if (readiness & SLUICE_READY_ERROR)
    {
        sluice_conn_info info;
        int64_t error = SLUICE_ERROR_NOT_CONNECTED;
        if (m_stack->GetConnInfo(m_conn, &info) == SLUICE_ERROR_OK && info.error != 0)
        {
            error = info.error;
        }
        Fail(error);
        return;
    }
    if ((readiness & SLUICE_READY_CONNECTED) && !m_connected)
    {
        m_connected = true;
        Connected();
        return;
    }
    OnReady(readiness);
}

TypeId
SluiceListeningApp::GetTypeId()
{
    static TypeId tid =
        TypeId("ns3::SluiceListeningApp").SetParent<Application>().SetGroupName("Sluice");
    return tid;
}

void
SluiceListeningApp::StartApplication()
{
    m_stack = GetNode()->GetObject<SluiceStack>();
    NS_ABORT_MSG_IF(!m_stack,
                    GetInstanceTypeId().GetName() << " needs a SluiceStack on its node");
    int32_t rc =
        m_stack->Listen(m_port, MakeCallback(&SluiceListeningApp::Acceptable, this), &m_listener);
    NS_ABORT_MSG_IF(rc != SLUICE_ERROR_OK,
                    GetInstanceTypeId().GetName() << ": listen: " << sluice_strerror(rc));
}

void
SluiceListeningApp::Acceptable(sluice_listener listener)
{
    sluice_conn conn;
    while (m_stack->Accept(listener, MakeCallback(&SluiceListeningApp::Ready, this), &conn) ==
           SLUICE_ERROR_OK)
    {
        Accepted(conn);
    }
}

void
SluiceListeningApp::Ready(sluice_conn conn, uint32_t readiness)
{
    OnReady(conn, readiness);
}

uint64_t
SluiceSendPattern(SluiceStack& stack,
                  sluice_conn conn,
                  uint32_t stream,
                  uint64_t offset,
                  uint64_t len,
                  std::vector<uint8_t>& buf,
                  int64_t* error)
{
    *error = 0;
    uint64_t sent = 0;
    while (sent < len && !buf.empty())
    {
        size_t want = static_cast<size_t>(std::min<uint64_t>(len - sent, buf.size()));
        for (size_t i = 0; i < want; i++)
        {
            buf[i] = SluicePatternByte(stream, offset + sent + i);
        }
        int64_t n = stack.Send(conn, buf.data(), want);
        if (n == SLUICE_ERROR_WOULD_BLOCK || n == 0)
        {
            break; // SLUICE_READY_WRITABLE follows
        }
        if (n < 0)
        {
            *error = n;
            break;
        }
        sent += static_cast<uint64_t>(n);
    }
    return sent;
}

size_t
SluiceFirstMismatch(const uint8_t* buf, size_t n, uint32_t stream, uint64_t offset)
{
    for (size_t i = 0; i < n; i++)
    {
        if (buf[i] != SluicePatternByte(stream, offset + i))
        {
            return i;
        }
    }
    return n;
}

} // namespace ns3
