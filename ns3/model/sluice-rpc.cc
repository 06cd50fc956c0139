// Closed-loop RPC client and server over a SluiceStack.
#include "sluice-rpc.h"

#include "ns3/log.h"
#include "ns3/simulator.h"
#include "ns3/uinteger.h"

#include <algorithm>

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("SluiceRpc");
NS_OBJECT_ENSURE_REGISTERED(SluiceRpcServer);
NS_OBJECT_ENSURE_REGISTERED(SluiceRpcClient);

namespace
{
constexpr size_t kChunk = 16 * 1024;
} // namespace

TypeId
SluiceRpcServer::GetTypeId()
{
    static TypeId tid = TypeId("ns3::SluiceRpcServer")
                            .SetParent<SluiceListeningApp>()
                            .SetGroupName("Sluice")
                            .AddConstructor<SluiceRpcServer>()
                            .AddAttribute("Port",
                                          "The port to listen on",
                                          UintegerValue(7000),
                                          MakeUintegerAccessor(&SluiceRpcServer::m_port),
                                          MakeUintegerChecker<uint16_t>(1))
                            .AddAttribute("Stream",
                                          "Which pattern the responses carry",
                                          UintegerValue(0),
                                          MakeUintegerAccessor(&SluiceRpcServer::m_streamId),
                                          MakeUintegerChecker<uint32_t>())
                            .AddAttribute("RequestBytes",
                                          "Size of a request",
                                          UintegerValue(64),
                                          MakeUintegerAccessor(&SluiceRpcServer::m_requestBytes),
                                          MakeUintegerChecker<uint32_t>(1))
                            .AddAttribute("ResponseBytes",
                                          "Size of a response",
                                          UintegerValue(64),
                                          MakeUintegerAccessor(&SluiceRpcServer::m_responseBytes),
                                          MakeUintegerChecker<uint32_t>(1));
    return tid;
}

SluiceRpcServer::SluiceRpcServer() = default;

uint64_t
SluiceRpcServer::GetResponses() const
{
    return m_responses;
}

void
SluiceRpcServer::StopApplication()
{
    for (auto& [conn, ex] : m_exchanges)
    {
        m_stack->Close(conn);
    }
    m_exchanges.clear();
}

void
SluiceRpcServer::Accepted(sluice_conn conn)
{
    m_buf.resize(std::max<size_t>(kChunk, m_responseBytes));
    m_exchanges[conn] = Exchange{};
    OnReady(conn, SLUICE_READY_READABLE);
}

bool
SluiceRpcServer::Respond(sluice_conn conn, Exchange& ex)
{
    int64_t error = 0;
    uint64_t offset = m_responseBytes - ex.responseLeft;
    ex.responseLeft -=
        SluiceSendPattern(*m_stack, conn, m_streamId, offset, ex.responseLeft, m_buf, &error);
    if (ex.responseLeft > 0)
    {
        return false;
    }
    m_responses++;
    return true;
}

void
SluiceRpcServer::OnReady(sluice_conn conn, uint32_t readiness)
{
    auto it = m_exchanges.find(conn);
    if (it == m_exchanges.end())
    {
        return;
    }
    Exchange& ex = it->second;
    if ((readiness & SLUICE_READY_WRITABLE) && ex.responseLeft > 0 && !Respond(conn, ex))
    {
        return;
    }
    // Closed loop: the next request is read only once the response is queued.
    while (ex.responseLeft == 0)
    {
        size_t want = static_cast<size_t>(std::min<uint64_t>(m_requestBytes - ex.requestRead, m_buf.size()));
        int64_t n = m_stack->Recv(conn, m_buf.data(), want);
        if (n == SLUICE_ERROR_WOULD_BLOCK)
        {
            return;
        }
        if (n <= 0)
        {
            // End of stream or an error: the client is done with this connection.
            m_stack->Close(conn);
            m_exchanges.erase(it);
            return;
        }
        ex.requestRead += static_cast<uint64_t>(n);
        if (ex.requestRead == m_requestBytes)
        {
            ex.requestRead = 0;
            ex.responseLeft = m_responseBytes;
            if (!Respond(conn, ex))
            {
                return;
            }
        }
    }
}

TypeId
SluiceRpcClient::GetTypeId()
{
    static TypeId tid = TypeId("ns3::SluiceRpcClient")
                            .SetParent<SluiceConnectingApp>()
                            .SetGroupName("Sluice")
                            .AddConstructor<SluiceRpcClient>()
                            .AddAttribute("Remote",
                                          "The server's address",
                                          Ipv4AddressValue(),
                                          MakeIpv4AddressAccessor(&SluiceRpcClient::m_remote),
                                          MakeIpv4AddressChecker())
                            .AddAttribute("Port",
                                          "The server's port",
                                          UintegerValue(7000),
                                          MakeUintegerAccessor(&SluiceRpcClient::m_port),
                                          MakeUintegerChecker<uint16_t>(1))
                            .AddAttribute("Stream",
                                          "Which pattern the responses carry",
                                          UintegerValue(0),
                                          MakeUintegerAccessor(&SluiceRpcClient::m_streamId),
                                          MakeUintegerChecker<uint32_t>())
                            .AddAttribute("RequestBytes",
                                          "Size of a request",
                                          UintegerValue(64),
                                          MakeUintegerAccessor(&SluiceRpcClient::m_requestBytes),
                                          MakeUintegerChecker<uint32_t>(1))
                            .AddAttribute("ResponseBytes",
                                          "Size of a response",
                                          UintegerValue(64),
                                          MakeUintegerAccessor(&SluiceRpcClient::m_responseBytes),
                                          MakeUintegerChecker<uint32_t>(1))
                            .AddAttribute("MaxRequests",
                                          "Requests to make, then close (0: until stopped)",
                                          UintegerValue(0),
                                          MakeUintegerAccessor(&SluiceRpcClient::m_maxRequests),
                                          MakeUintegerChecker<uint64_t>());
    return tid;
}

SluiceRpcClient::SluiceRpcClient() = default;

const std::vector<Time>&
SluiceRpcClient::GetLatencies() const
{
    return m_latencies;
}

bool
SluiceRpcClient::IsVerified() const
{
    return m_verified;
}

void
SluiceRpcClient::Connected()
{
    m_buf.resize(std::max<size_t>(kChunk, m_requestBytes));
    Issue();
}

void
SluiceRpcClient::Issue()
{
    if (m_maxRequests != 0 && m_latencies.size() >= m_maxRequests)
    {
        CloseConnection();
        return;
    }
    m_issued = Simulator::Now();
    m_requestLeft = m_requestBytes;
    m_responseRead = 0;
    SendRequest();
}

void
SluiceRpcClient::SendRequest()
{
    if (!m_open)
    {
        return;
    }
    int64_t error = 0;
    uint64_t offset = m_requestBytes - m_requestLeft;
    m_requestLeft -=
        SluiceSendPattern(*m_stack, m_conn, m_streamId, offset, m_requestLeft, m_buf, &error);
    if (error != 0)
    {
        m_error = error;
    }
}

void
SluiceRpcClient::OnReady(uint32_t readiness)
{
    if (readiness & SLUICE_READY_WRITABLE)
    {
        SendRequest();
    }
    while (m_open && m_connected)
    {
        size_t want = static_cast<size_t>(std::min<uint64_t>(m_responseBytes - m_responseRead, m_buf.size()));
        int64_t n = m_stack->Recv(m_conn, m_buf.data(), want);
        if (n == SLUICE_ERROR_WOULD_BLOCK)
        {
            return;
        }
        if (n <= 0)
        {
            Fail(n == 0 ? int64_t{SLUICE_ERROR_CONN_RESET} : n);
            return;
        }
        if (SluiceFirstMismatch(m_buf.data(), n, m_streamId, m_responseRead) <
            static_cast<size_t>(n))
        {
            m_verified = false;
        }
        m_responseRead += static_cast<uint64_t>(n);
        if (m_responseRead == m_responseBytes)
        {
            m_latencies.push_back(Simulator::Now() - m_issued);
            Issue();
        }
    }
}

} // namespace ns3
